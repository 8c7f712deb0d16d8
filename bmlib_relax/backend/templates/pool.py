"""Pooling templates: max / avg windows and adaptive (global) average.

All three take a symbolic batch (the pattern check keeps the channel and
spatial dims static): TOPI's computes carry the free extent through.
"""
from __future__ import annotations

from tvm import topi

from ._utils import attr_ints
from .pool_max import max_pool2d_fast_path
from .registry import register_template


def _pool2d(pool_type: str):
    def template(call, inputs, ctx):
        attrs = call.attrs
        if pool_type == "max":
            fast = max_pool2d_fast_path(
                inputs[0], attr_ints(attrs.pool_size), attr_ints(attrs.strides),
                attr_ints(attrs.dilation), attr_ints(attrs.padding), bool(attrs.ceil_mode),
                str(attrs.layout))
            if fast is not None:
                return fast
        return topi.nn.pool2d(inputs[0], attr_ints(attrs.pool_size), attr_ints(attrs.strides),
                              attr_ints(attrs.dilation), attr_ints(attrs.padding), pool_type,
                              bool(attrs.ceil_mode), str(attrs.layout),
                              bool(attrs.count_include_pad))

    return template


register_template("relax.nn.max_pool2d", symbolic_dims="batch")(_pool2d("max"))
register_template("relax.nn.avg_pool2d", symbolic_dims="batch")(_pool2d("avg"))


@register_template("relax.nn.adaptive_avg_pool2d", symbolic_dims="batch")
def adaptive_avg_pool2d(call, inputs, ctx):
    data = inputs[0]
    layout = str(call.attrs.layout)
    size = call.attrs.output_size
    if size is None:  # output_size=None keeps the spatial size
        size = [data.shape[layout.index("H")], data.shape[layout.index("W")]]
    return topi.nn.adaptive_pool(data, attr_ints(size), "avg", layout)
