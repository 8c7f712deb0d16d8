"""Convolutions (``nn.conv1d/2d/3d``, their transposes, ``nn.contrib_conv2d_NCHWc``).

Relay and Relax share the attribute meaning (padding ordered as all "before"
values then all "after" values, layouts as strings), so each converter only
fills in Relay's C++ attribute defaults: a Relay printer omits attributes equal
to those defaults.
"""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import expand_padding, out_dtype, repeat_to
from .layout import layout_transform

# Relay op -> (Relax op, spatial dims, default data layout, default kernel layout)
_CONV_OPS = {
    "nn.conv1d": (relax.op.nn.conv1d, 1, "NCW", "OIW"),
    "nn.conv2d": (relax.op.nn.conv2d, 2, "NCHW", "OIHW"),
    "nn.conv3d": (relax.op.nn.conv3d, 3, "NCDHW", "OIDHW"),
}

_CONV_TRANSPOSE_OPS = {
    "nn.conv1d_transpose": (relax.op.nn.conv1d_transpose, 1, "NCW", "IOW"),
    "nn.conv2d_transpose": (relax.op.nn.conv2d_transpose, 2, "NCHW", "IOHW"),
    "nn.conv3d_transpose": (relax.op.nn.conv3d_transpose, 3, "NCDHW", "IODHW"),
}


def _conv_attrs(attrs, ndim: int, data_layout: str, kernel_layout: str) -> dict:
    return dict(
        strides=repeat_to(attrs.get("strides", 1), ndim),
        padding=expand_padding(attrs.get("padding", 0), ndim),
        dilation=repeat_to(attrs.get("dilation", 1), ndim),
        groups=int(attrs.get("groups", 1)),
        data_layout=attrs.get("data_layout") or data_layout,
        kernel_layout=attrs.get("kernel_layout") or kernel_layout,
        out_layout=attrs.get("out_layout") or None,
        out_dtype=out_dtype(attrs),
    )


def _conv(relax_op, ndim: int, data_layout: str, kernel_layout: str):
    def convert(inputs, attrs, ctx):
        return relax_op(inputs[0], inputs[1],
                        **_conv_attrs(attrs, ndim, data_layout, kernel_layout))

    return convert


def _conv_transpose(relax_op, ndim: int, data_layout: str, kernel_layout: str):
    def convert(inputs, attrs, ctx):
        return relax_op(inputs[0], inputs[1],
                        output_padding=repeat_to(attrs.get("output_padding", 0), ndim),
                        **_conv_attrs(attrs, ndim, data_layout, kernel_layout))

    return convert


for _name, (_op, _ndim, _data, _kernel) in _CONV_OPS.items():
    register_converter(_name)(_conv(_op, _ndim, _data, _kernel))
for _name, (_op, _ndim, _data, _kernel) in _CONV_TRANSPOSE_OPS.items():
    register_converter(_name)(_conv_transpose(_op, _ndim, _data, _kernel))


@register_converter("nn.contrib_conv2d_NCHWc")
def _conv2d_nchwc(inputs, attrs, ctx):
    # AlterOpLayout's blocked conv (data NCHW{c}c, kernel OIHW{i}i{o}o): unblock
    # both operands, convolve in NCHW/OIHW, and block the result again.
    data_layout = attrs["data_layout"]  # required
    kernel_layout = attrs["kernel_layout"]  # required
    out_layout = attrs.get("out_layout") or data_layout
    data = ctx.emit(layout_transform(inputs[0], data_layout, "NCHW", ctx))
    weight = ctx.emit(layout_transform(inputs[1], kernel_layout, "OIHW", ctx))
    conv = ctx.emit(relax.op.nn.conv2d(data, weight, **_conv_attrs(attrs, 2, "NCHW", "OIHW") | {
        "data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": None}))
    return layout_transform(conv, "NCHW", out_layout, ctx)
