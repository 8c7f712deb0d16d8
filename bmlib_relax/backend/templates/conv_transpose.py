"""Transposed convolutions as gathers: no scatter, no zero-stuffed input.

Relay's ``nn.conv2d_transpose`` (NCHW data, IOHW weight ``[I, O/groups, KH, KW]``)
computes ``out[n, o, y, x] = sum x[n, i, h, w] * W[i, o, ky, kx]`` over the
input pixels and taps with ``h*s + ky*d - pad_top == y`` (likewise along x),
``i`` running over the group of ``o``.  TVM's legalization (and topi) inserts
``s - 1`` zeros between input pixels and runs a stride-1 convolution with the
flipped kernel: ``s*s`` times the work, most of it multiplying zeros.

Here each output pixel gathers only the taps that reach it.  With
``t = y + pad_top``, the taps are ``ky = t % s + j*s`` and the input row
``h = t // s - j`` for ``j = 0, 1, ...``: the phase ``t % s`` picks a sub-kernel
and the row walks backwards, so the flip is in the index arithmetic, not a copy.
A dilated kernel (or one whose size is not a multiple of the stride) is first
widened with zero taps to whole phases, inside the PrimFunc (a weight-sized copy).

Channels are blocked as in the direct convolution, inside a group: the data is
padded and packed to NCHW[ib]c (``TY - 1`` zero rows in front, since ``h`` may
be negative, and zero rows behind for the output padding), the weight is
``IOHW{ib}i{ob}o`` — ``[I/ib, O/groups/ob, KH, KW, ib, ob]``, packed at compile
time by :mod:`..rewrite` for constant weights — and the convolution writes
NCHW[ob]c, tiled by the direct convolution's schedule (``ob`` vectorized, a
tile of output columns unrolled, reduction outside, rows in parallel, the
unpack and epilogue per tile).

``nn.conv1d_transpose`` runs through the same template as a 1-row image;
``nn.conv3d_transpose`` keeps topi's computation (generic schedules).
"""
from __future__ import annotations

import re
from typing import Optional

from tvm import te, tirx, topi

from ..rewrite import conv2d_blocking
from . import conv
from ._utils import attr_ints, out_dtype
from .conv_grouped import blocked_output
from .registry import SCHEDULE_ATTR, register_schedule, register_template

_BLOCKED_IOHW = re.compile(r"IOHW(\d+)i(\d+)o")


def blocked_transpose_layout(layout: str) -> Optional[tuple[int, int]]:
    """``(ib, ob)`` of an ``IOHW{ib}i{ob}o`` kernel layout, None for plain IOHW."""
    match = _BLOCKED_IOHW.fullmatch(layout)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def transpose_blocking(channels: int, out_channels: int, groups: int,
                       lanes: int) -> tuple[int, int]:
    """``(ib, ob)`` of a transposed conv: the dense blocking of one group's channels."""
    return conv2d_blocking(channels // groups, out_channels // groups, lanes)


@register_template("relax.nn.conv2d_transpose")
def conv2d_transpose(call, inputs, ctx):
    attrs = call.attrs
    data, weight = inputs
    kernel_layout = str(attrs.kernel_layout)
    blocking = blocked_transpose_layout(kernel_layout)
    if (str(attrs.data_layout), str(attrs.out_layout)) != ("NCHW", "NCHW") or \
            (blocking is None and kernel_layout != "IOHW"):
        raise ctx.error(f"layout {attrs.data_layout}/{kernel_layout} has no template")
    dtype = out_dtype(attrs, data.dtype)
    out_shape = [int(d) for d in call.ty.shape.values]
    return transposed_conv2d(data, weight, blocking, out_shape, attr_ints(attrs.strides),
                             attr_ints(attrs.padding), attr_ints(attrs.dilation),
                             int(attrs.groups), dtype, ctx.lanes(dtype))


@register_template("relax.nn.conv1d_transpose")
def conv1d_transpose(call, inputs, ctx):
    """The 2-D template on a 1-row image: NCW → NC1W, IOW → IO1W, and back."""
    attrs = call.attrs
    data, weight = inputs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
            ("NCW", "IOW", "NCW"):
        raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout} has no template")
    dtype = out_dtype(attrs, data.dtype)
    n, c, w = (int(d) for d in data.shape)
    image = te.compute((n, c, 1, w), lambda nn, cc, _, x: data[nn, cc, x], name="bmlib_as_image")
    kernel = te.compute((int(weight.shape[0]), int(weight.shape[1]), 1, int(weight.shape[2])),
                        lambda i, o, _, x: weight[i, o, x], name="bmlib_kernel_as_image")
    out_n, out_c, out_w = (int(d) for d in call.ty.shape.values)
    pad = attr_ints(attrs.padding)
    left, right = pad[0], pad[-1]
    out = transposed_conv2d(image, kernel, None, [out_n, out_c, 1, out_w],
                            [1, *attr_ints(attrs.strides)], [0, left, 0, right],
                            [1, *attr_ints(attrs.dilation)], int(attrs.groups), dtype,
                            ctx.lanes(dtype))
    return te.compute((out_n, out_c, out_w), lambda nn, cc, x: out[nn, cc, 0, x],
                      name="bmlib_from_image")


@register_template("relax.nn.conv3d_transpose")
def conv3d_transpose(call, inputs, ctx):
    """As TVM's legalization computes it (a dilation is a kernel dilated with zeros)."""
    attrs = call.attrs
    data, weight = inputs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
            ("NCDHW", "IODHW", "NCDHW"):
        raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout} has no template")
    dilation = attr_ints(attrs.dilation)
    if any(d != 1 for d in dilation):
        weight = topi.nn.dilate(weight, [1, 1, *dilation], name="kernel_dilate")
    return topi.nn.group_conv3d_transpose_ncdhw(
        data, weight, attr_ints(attrs.strides), attr_ints(attrs.padding), str(call.ty.dtype),
        attr_ints(attrs.output_padding), int(attrs.groups))


def pack_transpose_kernel(weight: te.Tensor, ib: int, ob: int) -> te.Tensor:
    """IOHW → ``[I/ib, O/ob, KH, KW, ib, ob]`` inside the PrimFunc (non-constant weights)."""
    i, o, kh, kw = (int(d) for d in weight.shape)
    return te.compute((i // ib, o // ob, kh, kw, ib, ob),
                      lambda ic, oc, y, x, ii, oo: weight[ic * ib + ii, oc * ob + oo, y, x],
                      name="bmlib_kernel_pack")


def _phase_kernel(kernel: te.Tensor, strides, dilation) -> te.Tensor:
    """The blocked kernel with its taps dilated and padded with zero taps to whole
    stride phases (``ceil((d*(K-1)+1) / s) * s`` taps per axis); ``kernel`` itself
    when that changes nothing."""
    icb, ocb, kh, kw, ib, ob = (int(d) for d in kernel.shape)
    extents = [-(-(d * (k - 1) + 1) // s) * s for k, s, d in
               zip((kh, kw), strides, dilation)]
    if extents == [kh, kw] and list(dilation) == [1, 1]:
        return kernel
    dy, dx = dilation
    zero = tirx.const(0, kernel.dtype)

    def tap(ic, oc, y, x, ii, oo):
        real = tirx.all(y % dy == 0, y // dy < kh, x % dx == 0, x // dx < kw)
        return tirx.if_then_else(real, kernel[ic, oc, tirx.min(y // dy, kh - 1),
                                              tirx.min(x // dx, kw - 1), ii, oo], zero)

    return te.compute((icb, ocb, *extents, ib, ob), tap, name="bmlib_kernel_phases")


def transposed_conv2d(data, weight, blocking, out_shape, strides, padding, dilation,
                      groups: int, dtype: str, lanes: int) -> te.Tensor:
    """NCHW data, IOHW (or ``IOHW{ib}i{ob}o``, ``blocking``) weight → NCHW ``out_shape``."""
    n, channels, h, w = (int(d) for d in data.shape)
    _, out_channels, oh, ow = out_shape
    if blocking is None:
        blocking = transpose_blocking(channels, out_channels, groups, lanes)
        weight = pack_transpose_kernel(weight, *blocking)
    ib, ob = blocking
    top, left = conv._padding4(padding)[:2]
    sy, sx = strides
    kernel = _phase_kernel(weight, strides, dilation)
    taps_y, taps_x = int(kernel.shape[2]) // sy, int(kernel.shape[3]) // sx
    ic_per_group = channels // groups // ib
    oc_per_group = out_channels // groups // ob

    # Packed rows r hold input row r - (taps_y - 1); zero outside the input.
    rows = (oh - 1 + top) // sy + taps_y
    cols = (ow - 1 + left) // sx + taps_x
    zero = tirx.const(0, data.dtype)

    def pack(nn, cb, r, c, ci):
        y, x = r - (taps_y - 1), c - (taps_x - 1)
        inside = tirx.all(y >= 0, y < h, x >= 0, x < w)
        return tirx.if_then_else(inside, data[nn, cb * ib + ci, tirx.min(tirx.max(y, 0), h - 1),
                                              tirx.min(tirx.max(x, 0), w - 1)], zero)

    packed = te.compute((n, channels // ib, rows, cols, ib), pack, name="bmlib_data_pack",
                        attrs={SCHEDULE_ATTR: "bmlib.pack_nchwc"})
    axes = conv._reduce_axes(ico=ic_per_group, jy=taps_y, jx=taps_x, ici=ib)
    ico, jy, jx, ici = (axes.get(k, 0) for k in ("ico", "jy", "jx", "ici"))

    def gather(nn, oc, y, x, oo):
        in_block = oc // oc_per_group * ic_per_group + ico
        ty, tx = y + top, x + left
        value = packed[nn, in_block, ty // sy - jy + (taps_y - 1),
                       tx // sx - jx + (taps_x - 1), ici].astype(dtype)
        tap = kernel[in_block, oc % oc_per_group, ty % sy + jy * sy, tx % sx + jx * sx, ici, oo]
        return conv._sum(value * tap.astype(dtype), axes)

    # Row tiles only, no flat-pixel variant: with the output pixels flattened (phase
    # arithmetic on div/mod of the flat index) the built code gave wrong pixels on
    # 10x10 stride-2 outputs, even unscheduled; cause not pinned down.  Output widths
    # of transposed convolutions are mostly even, so row tiles fit them anyway.
    return blocked_output(gather, (n, out_channels // ob, oh, ow, ob), dtype,
                          "bmlib_conv2d_transpose_nchwc", "bmlib.conv2d_transpose_nchwc",
                          row_tile=0)


@register_schedule("bmlib.conv2d_transpose_nchwc")
def schedule_conv2d_transpose_nchwc(sch, block, ctx):
    """The direct convolution's NCHW[ob]c register tiling (see ``conv._tile_conv``)."""
    conv._tile_conv(sch, block, ctx)
