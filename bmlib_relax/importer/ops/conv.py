"""Convolutions (``nn.conv1d/2d/3d``, their transposes, ``nn.contrib_conv2d_NCHWc``).

Relay and Relax share the attribute meaning (padding ordered as all "before"
values then all "after" values, layouts as strings), so each converter only
fills in Relay's C++ attribute defaults: a Relay printer omits attributes equal
to those defaults.
"""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import (
    check_nonempty_reduction, check_product_operands, check_sliding_window, expand_padding,
    out_dtype, repeat_to, shape_of,
)
from .layout import axis_names, layout_transform, spatial_extents

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
        check_product_operands(inputs[0], inputs[1], ctx)
        conv = _conv_attrs(attrs, ndim, data_layout, kernel_layout)
        _check_kernel_window(inputs[1], conv["kernel_layout"], ctx)
        _check_conv_window(inputs[0], inputs[1], conv, ctx)
        if ndim == 2:  # conv2d keeps its layouts: NHWC & co. have their own templates
            return relax_op(inputs[0], inputs[1], **conv)
        # conv1d/conv3d have templates (and TOPI lowerings) in NC[D]W / OI[D]W only:
        # other layouts Relay accepted (NDHWC/DHWIO, NWC/WIO) are re-laid out around it.
        src_out = conv["out_layout"] or conv["data_layout"]
        data = _to_layout(inputs[0], conv["data_layout"], data_layout, ctx)
        weight = _to_layout(inputs[1], conv["kernel_layout"], kernel_layout, ctx)
        conv.update(data_layout=data_layout, kernel_layout=kernel_layout, out_layout=None)
        weight = _depthwise_multiplier_weight(data, weight, conv, attrs, ctx)
        out = relax_op(data, weight, **conv)
        if src_out == data_layout:
            return out
        return layout_transform(ctx.emit(out), data_layout, src_out, ctx)

    return convert


def _check_conv_window(data, weight, conv: dict, ctx) -> None:
    """Strides, dilation, padding and the kernel's window against the input (a direct
    conv: the output extent of each spatial dim must be at least 1)."""
    check_sliding_window(spatial_extents(shape_of(data), conv["data_layout"]),
                         spatial_extents(shape_of(weight), conv["kernel_layout"]),
                         conv["strides"],
                         conv["padding"], conv["dilation"], ctx)


def _check_kernel_window(weight, kernel_layout: str, ctx) -> None:
    """The weight's input channels and window, the extents a conv sums over, are not 0."""
    dims = shape_of(weight)
    reduced = [d for axis, d in zip(axis_names(kernel_layout), dims) if axis[-1] not in "Oo"]
    check_nonempty_reduction(reduced, ctx, f"the kernel window (weight shape {tuple(dims)})")


def _to_layout(value, src: str, dst: str, ctx):
    out = layout_transform(value, src, dst, ctx)
    return out if out is value else ctx.emit(out)


def _depthwise_multiplier_weight(data, weight, conv: dict, attrs, ctx):
    """Relay's conv3d relation reads a weight ``(C, M, k...)`` with ``groups == C``
    (as many groups as input channels and weight rows) as a depthwise conv with
    channel multiplier ``M`` giving ``channels = C * M`` outputs: output channel
    ``c * M + m`` filters input channel ``c``, i.e. an ``(C * M, 1, k...)`` weight."""
    groups = conv["groups"]
    channels = attrs.get("channels")
    d_shape, w_shape = shape_of(data), shape_of(weight)
    if groups <= 1 or channels is None or len(w_shape) != 5:
        return weight
    if not (d_shape[1] == groups == w_shape[0] and w_shape[1] != 1
            and isinstance(channels, int) and channels == groups * w_shape[1]):
        return weight
    return ctx.emit(relax.op.reshape(weight, [channels, 1] + list(w_shape[2:])))


def _conv_transpose(relax_op, ndim: int, data_layout: str, kernel_layout: str):
    """Relay's transposed conv in any layout, on Relax's canonical one.

    TVM lowers Relax's transposed convs only in ``NC[D]HW``/``IO[D]HW`` with
    the output in the data layout; any other layout Relay accepted (``NHWC``
    with ``HWOI``, ``OIHW`` kernels) is re-laid out around a canonical call.
    Relay's type relation also allowed ``output_padding >= strides``, which
    Relax refuses: see :func:`_large_output_padding`.
    """
    def convert(inputs, attrs, ctx):
        check_product_operands(inputs[0], inputs[1], ctx)
        conv = _conv_attrs(attrs, ndim, data_layout, kernel_layout)
        _check_kernel_window(inputs[1], conv["kernel_layout"], ctx)
        # Relay's type relations read the first ``ndim`` values only (conv1d_transpose
        # built with output_padding=(0, 0), as TVM's own tests do, ran there).
        output_padding = repeat_to(attrs.get("output_padding", 0), ndim)[:ndim]
        src_data, src_kernel = conv["data_layout"], conv["kernel_layout"]
        src_out = conv["out_layout"] or src_data
        data = layout_transform(inputs[0], src_data, data_layout, ctx)
        weight = layout_transform(inputs[1], src_kernel, kernel_layout, ctx)
        if data is not inputs[0]:
            data = ctx.emit(data)
        if weight is not inputs[1]:
            weight = ctx.emit(weight)
        conv.update(data_layout=data_layout, kernel_layout=kernel_layout, out_layout=None)
        data, output_padding = _large_output_padding(data, conv, output_padding, ctx)
        out = relax_op(data, weight, output_padding=output_padding, **conv)
        if src_out == data_layout:
            return out
        return layout_transform(ctx.emit(out), data_layout, src_out, ctx)

    return convert


def _large_output_padding(data, conv: dict, output_padding: list, ctx):
    """Rewrite ``output_padding >= stride`` (on spatial dim i) exactly.

    Output row ``o`` is ``sum_i x[i] * w[o + pad_before - i * s]`` whatever the
    output size, so ``r = ceil(op / s)`` zero rows appended to the input grow
    the output by ``r * s`` rows of that same formula, and ``r * s - op`` more
    ``pad_after`` crops the surplus: the same values, with ``output_padding 0``.
    """
    strides, padding = conv["strides"], list(conv["padding"])
    ndim = len(strides)
    extra = [0] * ndim
    new_padding = list(output_padding)
    for i, (op, s) in enumerate(zip(output_padding, strides)):
        if op >= s:
            rows = -(-op // s)
            extra[i] = rows
            padding[ndim + i] += rows * s - op
            new_padding[i] = 0
    if not any(extra):
        return data, output_padding
    pad_width = [0, 0, 0, 0] + [v for r in extra for v in (0, r)]
    conv["padding"] = padding
    return ctx.emit(relax.op.nn.pad(data, pad_width)), new_padding


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
