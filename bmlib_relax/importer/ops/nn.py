"""Neural-network Relay ops (``nn.*``) with Relay's attribute defaults."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import expand_padding, ints


def _pair(value, n: int) -> list[int]:
    vals = ints(value)
    return vals * n if len(vals) == 1 else vals


@register_converter("nn.conv2d")
def _conv2d(inputs, attrs, ctx):
    data, weight = inputs
    padding = expand_padding(attrs.get("padding", (0, 0)), 2)
    # Relax orders 4-value padding as (top, left, bottom, right), like Relay.
    return relax.op.nn.conv2d(
        data, weight,
        strides=_pair(attrs.get("strides", (1, 1)), 2),
        padding=padding,
        dilation=_pair(attrs.get("dilation", (1, 1)), 2),
        groups=int(attrs.get("groups", 1)),
        data_layout=attrs.get("data_layout", "NCHW"),
        kernel_layout=attrs.get("kernel_layout", "OIHW"),
        out_layout=attrs.get("out_layout") or None,
        out_dtype=attrs.get("out_dtype") or None,
    )


@register_converter("nn.batch_norm")
def _batch_norm(inputs, attrs, ctx):
    # Relay's nn.batch_norm is inference-only: moving statistics, never batch ones.
    data, gamma, beta, mean, var = inputs
    return relax.op.nn.batch_norm(
        data, gamma, beta, mean, var,
        axis=int(attrs.get("axis", 1)),
        epsilon=float(attrs.get("epsilon", 1e-5)),
        center=bool(attrs.get("center", True)),
        scale=bool(attrs.get("scale", True)),
        training=False,
    )
