"""Convolutions (``nn.conv1d/2d/3d``, their transposes, ``nn.contrib_conv2d_NCHWc``).

Relay and Relax share the attribute meaning (padding ordered as all "before"
values then all "after" values, layouts as strings), so each converter fills in
Relay's C++ attribute defaults (a Relay printer omits attributes equal to them),
re-lays out what TVM 0.27's lowering would read otherwise than Relay's relations
(layouts by axis name, ``out_layout``, the depthwise ``(C, M, k...)`` weight), and
refuses what those relations refused (``channels``/``kernel_size`` against the
weight, src/relay/op/nn/convolution.cc).
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
    """Relay's conv in any layout its relation accepted (``Conv1DRel``, ``Conv2DRel``,
    ``Conv3DRel`` map the data, kernel and output layouts by axis *name*).

    TVM 0.27's ``topi.nn.conv`` reads the spatial axes in storage order and the result
    in the data layout, and the conv1d/conv3d templates (and TOPI lowerings) are
    NC[D]W / OI[D]W only: every other layout is re-laid out around the call (see
    :func:`_lowered_layouts`), and an ``out_layout`` unlike the data's is a transform
    of the result (Relax's legalization refuses a conv with one).
    """
    def convert(inputs, attrs, ctx):
        check_product_operands(inputs[0], inputs[1], ctx)
        conv = _conv_attrs(attrs, ndim, data_layout, kernel_layout)
        _check_kernel_window(inputs[1], conv["kernel_layout"], ctx)
        _check_conv_window(inputs[0], inputs[1], conv, ctx)
        src_data, src_kernel = conv["data_layout"], conv["kernel_layout"]
        src_out = conv["out_layout"] or src_data
        data_l, kernel_l = _lowered_layouts(src_data, src_kernel, ndim, data_layout,
                                            kernel_layout)
        data = _to_layout(inputs[0], src_data, data_l, ctx)  # validates the layouts too
        weight = _to_layout(inputs[1], src_kernel, kernel_l, ctx)
        multiplier = check_conv_weight(inputs[0], inputs[1], src_data, src_kernel,
                                       conv["groups"], attrs, ndim, ctx)
        if multiplier:
            weight = _depthwise_multiplier_weight(weight, kernel_l, kernel_layout,
                                                  int(attrs["channels"]), ctx)
            kernel_l = kernel_layout
        conv.update(data_layout=data_l, kernel_layout=kernel_l, out_layout=None)
        out = relax_op(data, weight, **conv)
        if src_out == data_l:
            return out
        return layout_transform(ctx.emit(out), data_l, src_out, ctx)

    return convert


def _lowered_layouts(data: str, kernel: str, ndim: int, canonical_data: str,
                     canonical_kernel: str) -> tuple[str, str]:
    """The data and kernel layouts handed to Relax: conv2d keeps plain layouts whose
    spatial axes are stored H before W (``topi.nn.conv`` finds N, C, O and I by name
    but takes the other axes in storage order; NHWC & co. have their own templates
    via the backend's layout pass), a kernel among them only beside such data.  Every
    other layout (``NCWH``, ``OIWH``, blocked ones) and every conv1d/conv3d layout
    becomes NC[D]HW / OI[D]HW (the conv1d/conv3d templates' only ones)."""
    if ndim != 2 or not _spatial_in_order(data, canonical_data):
        return canonical_data, canonical_kernel
    return data, kernel if _spatial_in_order(kernel, canonical_kernel) else canonical_kernel


def _spatial_in_order(layout: str, canonical: str) -> bool:
    """``layout`` is a permutation of ``canonical``'s axes (no blocked ones) that keeps
    its spatial axes in ``canonical``'s order."""
    if sorted(layout) != sorted(canonical):
        return False
    spatial = [c for c in canonical if c not in "NCOI"]
    return [c for c in layout if c in spatial] == spatial


def _primal_dims(dims: list, layout: str, axes: str) -> list:
    """The full extents of primal ``axes`` (``"OIHW"``) of a shape in ``layout``, a
    blocked axis (``OIHW4i4o``) times its block, as Relay's ``BijectiveLayout``.
    ``layout`` has been validated (by :func:`layout_transform`)."""
    names = axis_names(layout)
    out = []
    for axis in axes:
        extent = dims[names.index(axis)]
        for name, dim in zip(names, dims):
            if name[:-1] and name[-1] == axis.lower():
                extent = extent * dim
        out.append(extent)
    return out


def _is_depthwise_multiplier(in_channels, w_oi: list, groups: int, attrs, ndim: int) -> bool:
    """Relay's ``is_depthwise`` (v0.19 ``Conv2DRel``/``Conv3DRel``): with ``channels``
    and ``kernel_size`` both given and ``groups`` equal to the input channels and to
    the weight's O extent, the weight is typed ``(C, channels / C, k...)``: a depthwise
    conv with channel multiplier ``M = channels / C`` (TFLite's ``HWOI (kh, kw, C, M)``
    weight).  ``M == 1`` is Relax's depthwise weight as it is; ``Conv1DRel`` has no
    such branch."""
    return ndim > 1 and attrs.get("channels") is not None and \
        attrs.get("kernel_size") is not None and groups > 1 and \
        isinstance(in_channels, int) and groups == in_channels == w_oi[0] and w_oi[1] != 1


def check_conv_weight(data, weight, data_layout: str, kernel_layout: str, groups: int,
                      attrs, ndim: int, ctx) -> bool:
    """v0.19's checks of ``channels``/``kernel_size`` against a conv's weight
    (:func:`_check_weight_attrs`), for ``nn.conv*`` and for ``qnn.conv2d`` (whose
    ``QnnConv2DRel`` ran ``Conv2DRel``); True for the depthwise-multiplier form."""
    canonical = "OI" + "DHW"[3 - ndim:]
    in_channels = _primal_dims(shape_of(data), data_layout, "C")[0]
    w_oi = _primal_dims(shape_of(weight), kernel_layout, canonical)
    multiplier = _is_depthwise_multiplier(in_channels, w_oi, groups, attrs, ndim)
    _check_weight_attrs(in_channels, w_oi, groups, attrs, ndim, multiplier, canonical, ctx)
    return multiplier


def _check_weight_attrs(in_channels, w_oi: list, groups: int, attrs, ndim: int,
                        depthwise: bool, canonical: str, ctx) -> None:
    """``channels`` and ``kernel_size`` against the weight (``w_oi``: its O, I and
    window extents), as v0.19's relations: with both, the weight is typed
    ``(channels, C / groups, *kernel_size)`` (depthwise: ``(C, channels / C, ...)``) and
    must be that; with one, ``kernel_size`` must be its window and ``channels`` its O
    extent ("does not match the number of channels", "shape of weight is inconsistent
    with kernel_size")."""
    channels, ksize = _weight_attrs(attrs, ndim)
    if channels is None or ksize is None:
        _check_one_weight_attr(channels, ksize, channels, w_oi, canonical, ctx)
        return
    if depthwise:
        if channels % in_channels:
            raise ctx.error(f"channels={channels} is not a multiple of the {in_channels} "
                            f"input channels of this depthwise conv (groups={groups}): "
                            "the channel multiplier must be whole")
        leading = [in_channels, channels // in_channels]
    else:
        leading = [channels, in_channels // groups if isinstance(in_channels, int)
                   else w_oi[1]]
    _check_typed_weight(channels, ksize, groups, leading + ksize, w_oi, canonical, ctx)


def _check_transpose_weight_attrs(in_channels, w_io: list, groups: int, attrs, ndim: int,
                                  canonical: str, ctx) -> None:
    """:func:`_check_weight_attrs` for a transposed conv (v0.19 ``Conv2DTransposeRel``
    & co.): with both attributes the weight (``w_io``: its I, O and window extents) is
    typed ``(C, channels / groups, *kernel_size)``; with ``channels`` alone,
    ``channels / groups`` must be its O extent ("inconsistent with out_channels")."""
    channels, ksize = _weight_attrs(attrs, ndim)
    if channels is None or ksize is None:
        _check_one_weight_attr(channels, ksize,
                               None if channels is None else channels // groups, w_io,
                               canonical, ctx)
        return
    first = in_channels if isinstance(in_channels, int) else w_io[0]
    _check_typed_weight(channels, ksize, groups, [first, channels // groups] + ksize, w_io,
                        canonical, ctx)


def _weight_attrs(attrs, ndim: int):
    """``(channels, kernel_size)`` as an int / ``ndim`` ints, None where not given."""
    channels, ksize = attrs.get("channels"), attrs.get("kernel_size")
    return (None if channels is None else int(channels),
            None if ksize is None else repeat_to(ksize, ndim))


def _differs(have: list, want: list) -> bool:
    """Two shapes differ (a symbolic extent on either side is not compared)."""
    return len(have) != len(want) or any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(have, want))


def _check_one_weight_attr(channels, ksize, second, dims: list, canonical: str,
                           ctx) -> None:
    """One of ``channels``/``kernel_size`` given: ``kernel_size`` must be the weight's
    window, and ``second`` (what ``channels`` makes the weight's O extent, dim 0 of a
    conv's OI[D]HW weight, dim 1 of a transpose's IO[D]HW one) its extent."""
    if ksize is not None and _differs(dims[2:], ksize):
        raise ctx.error(f"kernel_size={ksize} is inconsistent with the weight's window "
                        f"{list(dims[2:])} (its shape as {canonical}: {tuple(dims)})")
    axis = canonical.index("O")
    if channels is not None and _differs([dims[axis]], [second]):
        raise ctx.error(f"channels={channels} does not match the weight's {dims[axis]} "
                        f"output channels (its shape as {canonical}: {tuple(dims)})")


def _check_typed_weight(channels: int, ksize: list, groups: int, expected: list,
                        dims: list, canonical: str, ctx) -> None:
    """Both ``channels`` and ``kernel_size`` given: Relay typed the weight ``expected``
    (in ``canonical``), and a weight of another shape failed to unify with it."""
    if _differs(dims, expected):
        raise ctx.error(f"channels={channels} and kernel_size={ksize} (groups={groups}) "
                        f"type the weight as {tuple(expected)} in {canonical}, but its "
                        f"shape as {canonical} is {tuple(dims)}")


def _check_positive_steps(conv: dict, ctx) -> None:
    """Strides and dilations of a transposed conv are positive, as a conv's
    (:func:`check_sliding_window`): a 0 divides by zero in the lowering."""
    for name in ("strides", "dilation"):
        if any(v < 1 for v in conv[name]):
            raise ctx.error(f"{name}={list(conv[name])} must be positive")


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


def _depthwise_multiplier_weight(weight, layout: str, canonical: str, channels: int, ctx):
    """The ``(C, M, k...)`` weight of Relay's depthwise conv with channel multiplier
    ``M`` (see :func:`_is_depthwise_multiplier`) as Relax's ``(C * M, 1, k...)`` one
    in ``canonical`` (OI[D]HW): output channel ``c * M + m`` filters input channel
    ``c`` with ``weight[c, m]``, as v0.19's ``topi.nn.depthwise_conv2d_nchw``."""
    weight = _to_layout(weight, layout, canonical, ctx)
    return ctx.emit(relax.op.reshape(weight, [channels, 1] + list(shape_of(weight)[2:])))


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
        _check_positive_steps(conv, ctx)
        data = _to_layout(inputs[0], src_data, data_layout, ctx)  # validates the layouts
        weight = _to_layout(inputs[1], src_kernel, kernel_layout, ctx)
        _check_transpose_weight_attrs(_primal_dims(shape_of(inputs[0]), src_data, "C")[0],
                                      _primal_dims(shape_of(inputs[1]), src_kernel,
                                                   kernel_layout),
                                      conv["groups"], attrs, ndim, kernel_layout, ctx)
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
