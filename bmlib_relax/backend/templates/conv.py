"""Convolution templates (NCHW data; OIHW weights, IOHW for the transpose)."""
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
    if groups == int(data.shape[1]) and int(weight.shape[1]) == 1:
        # Depthwise: OIHW weight (C*M, 1, KH, KW) is the depthwise template's (C, M, KH, KW).
        channels, multiplier = int(data.shape[1]), int(weight.shape[0]) // groups
        kernel = topi.reshape(weight, [channels, multiplier] + [int(d) for d in weight.shape[2:]])
        return topi.nn.depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, dtype)
    return topi.nn.group_conv2d_nchw(data, weight, strides, padding, dilation, groups, dtype)


@register_template("relax.nn.conv2d_transpose")
def conv2d_transpose(call, inputs, ctx):
    attrs = call.attrs
    data, weight = inputs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "IOHW":
        raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout} has no template")
    if any(d != 1 for d in attr_ints(attrs.dilation)):
        raise ctx.error("dilated conv2d_transpose has no template")
    return topi.nn.group_conv2d_transpose_nchw(
        data, weight, attr_ints(attrs.strides), attr_ints(attrs.padding),
        out_dtype(attrs, data.dtype), attr_ints(attrs.output_padding), int(attrs.groups))
