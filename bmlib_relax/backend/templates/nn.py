"""Neural-network templates: convolution and normalisation."""
from __future__ import annotations

from tvm import topi

from ._utils import attr_ints, out_dtype
from .registry import register_template


@register_template("relax.nn.conv2d")
def conv2d(call, inputs, ctx):
    attrs = call.attrs
    data, weight = inputs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout} has no template")
    dtype = out_dtype(attrs, data.dtype)
    groups = int(attrs.groups)
    strides, padding, dilation = (attr_ints(attrs.strides), attr_ints(attrs.padding),
                                  attr_ints(attrs.dilation))
    if groups == 1:
        return topi.nn.conv2d_nchw(data, weight, strides, padding, dilation, dtype)
    return topi.nn.group_conv2d_nchw(data, weight, strides, padding, dilation, groups, dtype)


@register_template("relax.nn.batch_norm")
def batch_norm(call, inputs, ctx):
    attrs = call.attrs
    if bool(attrs.training):
        raise ctx.error("training-mode batch_norm (batch statistics) has no template")
    data, gamma, beta, mean, var = inputs
    return topi.nn.batch_norm(data, gamma, beta, mean, var, axis=int(attrs.axis),
                              epsilon=float(attrs.epsilon), center=bool(attrs.center),
                              scale=bool(attrs.scale), training=False)
