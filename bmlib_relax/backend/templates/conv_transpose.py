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
and the row walks backwards, so the flip is in the index arithmetic, not a copy
(the loop runs ``j`` from the last tap down, so the input is read forwards).
A dilated kernel (or one whose size is not a multiple of the stride) is first
widened with zero taps to whole phases, inside the PrimFunc (a weight-sized copy).

Channels are blocked as in the direct convolution, inside a group: the data is
padded and packed to NCHW[ib]c (``TY - 1`` zero rows in front, since ``h`` may
be negative, and zero rows behind for the output padding), the weight is
``IOHW{ib}i{ob}o`` — ``[I/ib, O/groups/ob, KH, KW, ib, ob]``, packed at compile
time by :mod:`..rewrite` for constant weights — and the convolution writes
NCHW[ob]c, tiled like the direct convolution (``ob`` vectorized, a tile of
output columns unrolled, reduction outside, the unpack and epilogue per tile;
see :func:`_tile_transposed` for what runs in parallel).

``nn.conv1d_transpose`` runs through the same template as a 1-row image;
``nn.conv3d_transpose`` is the same gather with a depth axis (NCDHW[ob]c, its weight
packed inside the PrimFunc).
"""
from __future__ import annotations

import re
from typing import Optional

from tvm import te, tirx

from ..rewrite import conv2d_blocking
from ..schedule import divisor_at_most, inline_epilogue
from . import conv
from ._utils import attr_ints, out_dtype
from .registry import SCHEDULE_ATTR, register_schedule, register_template
from .tiles import SMALL_TILE_ACCUMULATORS, tile_pixels

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
    groups = int(attrs.groups)
    if blocking is not None and (int(data.shape[1]) // groups) % blocking[0]:
        # A block of input channels spanning two groups would feed the wrong outputs.
        raise ctx.error(f"conv2d_transpose: kernel layout {kernel_layout} blocks "
                        f"{blocking[0]} input channels, which does not divide the "
                        f"{int(data.shape[1]) // groups} of a group (groups={groups})")
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
    """The gather in 3-D: NCDHW data, IODHW weight (packed inside the PrimFunc)."""
    attrs = call.attrs
    data, weight = inputs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
            ("NCDHW", "IODHW", "NCDHW"):
        raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout} has no template")
    dtype = out_dtype(attrs, data.dtype)
    out_shape = [int(d) for d in call.ty.shape.values]
    channels, groups = int(data.shape[1]), int(attrs.groups)
    ib, ob = transpose_blocking(channels, out_shape[1], groups, ctx.lanes(dtype))
    kernel = pack_transpose_kernel(weight, ib, ob)
    begin = attr_ints(attrs.padding)[:3]
    out = gather_transposed(data, kernel, out_shape, attr_ints(attrs.strides), begin,
                            attr_ints(attrs.dilation), groups, dtype, ib, ob)
    return _unpack_nd(out, dtype)


def pack_transpose_kernel(weight: te.Tensor, ib: int, ob: int) -> te.Tensor:
    """I O *K → ``[I/ib, O/ob, *K, ib, ob]`` inside the PrimFunc (non-constant weights)."""
    i, o, *window = (int(d) for d in weight.shape)

    def pack(ic, oc, *rest):
        *taps, ii, oo = rest
        return weight[(ic * ib + ii, oc * ob + oo, *taps)]

    return te.compute((i // ib, o // ob, *window, ib, ob), pack, name="bmlib_kernel_pack")


def _phase_kernel(kernel: te.Tensor, strides, dilation) -> te.Tensor:
    """The blocked kernel with its taps dilated and padded with zero taps to whole
    stride phases (``ceil((d*(K-1)+1) / s) * s`` taps per axis); ``kernel`` itself
    when that changes nothing."""
    icb, ocb, *window, ib, ob = (int(d) for d in kernel.shape)
    extents = [-(-(d * (k - 1) + 1) // s) * s for k, s, d in zip(window, strides, dilation)]
    if extents == window and all(d == 1 for d in dilation):
        return kernel
    zero = tirx.const(0, kernel.dtype)

    def tap(ic, oc, *rest):
        *taps, ii, oo = rest
        real = tirx.all(*[t % d == 0 for t, d in zip(taps, dilation)],
                        *[t // d < k for t, d, k in zip(taps, dilation, window)])
        index = [tirx.min(t // d, k - 1) for t, d, k in zip(taps, dilation, window)]
        return tirx.if_then_else(real, kernel[(ic, oc, *index, ii, oo)], zero)

    return te.compute((icb, ocb, *extents, ib, ob), tap, name="bmlib_kernel_phases")


def transposed_conv2d(data, weight, blocking, out_shape, strides, padding, dilation,
                      groups: int, dtype: str, lanes: int) -> te.Tensor:
    """NCHW data, IOHW (or ``IOHW{ib}i{ob}o``, ``blocking``) weight → NCHW ``out_shape``."""
    channels = int(data.shape[1])
    if blocking is None:
        blocking = transpose_blocking(channels, out_shape[1], groups, lanes)
        weight = pack_transpose_kernel(weight, *blocking)
    ib, ob = blocking
    out = gather_transposed(data, weight, out_shape, strides, conv._padding4(padding)[:2],
                            dilation, groups, dtype, ib, ob)
    return conv._unpack(out, ob, dtype)


_TAP_AXES = ("jd", "jy", "jx")  # reduce axes over the taps of a stride phase
_PACK_RULES = {2: "bmlib.pack_nchwc", 3: "bmlib.pack_ncdhwc"}
_GATHER_RULES = {2: "bmlib.conv2d_transpose_nchwc", 3: "bmlib.conv3d_transpose_ncdhwc"}


def gather_transposed(data, kernel, out_shape, strides, begin, dilation, groups: int,
                      dtype: str, ib: int, ob: int) -> te.Tensor:
    """The gather: channel-blocked output ``[N, O/ob, *spatial, ob]``.

    ``kernel`` is ``[I/ib, O/groups/ob, *K, ib, ob]``, ``begin`` the leading padding
    of each spatial axis.  Row tiles only (no flat-pixel variant): with the output
    pixels flattened, ``(x + pad) // s`` on ``x = p % W`` is an index TVM 0.27
    mis-simplifies (see docs: it behaves like ``((p + pad) % W) // s``).
    """
    n, channels, *size = (int(d) for d in data.shape)
    _, out_channels, *out_size = out_shape
    rank = len(size)
    kernel = _phase_kernel(kernel, strides, dilation)
    taps = [int(k) // s for k, s in zip(kernel.shape[2:2 + rank], strides)]
    ic_per_group = channels // groups // ib
    oc_per_group = out_channels // groups // ob

    # Packed position r holds input position r - (taps - 1); zero outside the input.
    extents = [(o - 1 + b) // s + t for o, b, s, t in zip(out_size, begin, strides, taps)]
    zero = tirx.const(0, data.dtype)

    def pack(nn, cb, *rest):
        *pos, ci = rest
        src = [r - (t - 1) for r, t in zip(pos, taps)]
        inside = tirx.all(*[v >= 0 for v in src], *[v < e for v, e in zip(src, size)])
        index = [tirx.min(tirx.max(v, 0), e - 1) for v, e in zip(src, size)]
        return tirx.if_then_else(inside, data[(nn, cb * ib + ci, *index)], zero)

    packed = te.compute((n, channels // ib, *extents, ib), pack, name="bmlib_data_pack",
                        attrs={SCHEDULE_ATTR: _PACK_RULES[rank]})
    names = _TAP_AXES[-rank:]
    axes = conv._reduce_axes(ico=ic_per_group, **dict(zip(names, taps)), ici=ib)
    ico, ici = axes.get("ico", 0), axes.get("ici", 0)
    js = [axes.get(name, 0) for name in names]

    def gather(nn, oc, *rest):
        *pos, oo = rest
        in_block = oc // oc_per_group * ic_per_group + ico
        shifted = [p + b for p, b in zip(pos, begin)]
        # j walks the input forwards (row t // s - (taps - 1) + j, stored at t // s + j)
        # and the phase's taps backwards: a backward walk over the data ran 1.9x slower.
        source = [t // s + j for t, s, j in zip(shifted, strides, js)]
        tap_index = [t % s + (k - 1 - j) * s for t, s, j, k in zip(shifted, strides, js, taps)]
        value = packed[(nn, in_block, *source, ici)].astype(dtype)
        tap = kernel[(in_block, oc % oc_per_group, *tap_index, ici, oo)]
        return conv._sum(value * tap.astype(dtype), axes)

    return te.compute((n, out_channels // ob, *out_size, ob), gather,
                      name=_GATHER_RULES[rank].replace(".", "_"),
                      attrs={SCHEDULE_ATTR: _GATHER_RULES[rank]})


def _unpack_nd(out: te.Tensor, dtype: str) -> te.Tensor:
    n, blocks, *size, block = (int(d) for d in out.shape)

    def unpack(nn, c, *pos):
        return out[(nn, c // block, *pos, c % block)].astype(dtype)

    return te.compute((n, blocks * block, *size), unpack, name="bmlib_unpack")


# Below this many (batch x output-channel block) tiles, the first row loop runs in
# parallel instead.  Blocks are cheaper to share when there are enough of them
# (measured at 1 thread: parallel rows cost up to 1.7x on 4-block layers), rows keep
# a 1-block layer on every core.
MIN_PARALLEL_BLOCKS = 4


def _tile_transposed(sch, block, ctx) -> None:
    """``conv._tile_conv`` for the gathers, with the output rows kept loop variables.

    The unpack + epilogue (NCHW or NCDHW) is tiled (n, C/ob, [OD,] OH, OW/reg |
    reg, ob) and the gather computed per tile: reduction outside, ``reg`` columns
    unrolled x ``ob`` channels vectorized.  Unlike the direct convolution, the rows
    are not fused into the parallel loop: the gather divides ``row + pad`` by the
    stride, and on a fused loop that is ``(f % OH + pad) // s``, an index TVM 0.27
    mis-simplifies (wrong outputs with batch 2 or several channel blocks; see the
    docs).  The parallel loop is (batch x channel blocks), or the first row loop
    (outermost) when there are fewer than ``MIN_PARALLEL_BLOCKS``.
    """
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("transposed convolution without its unpack block")
    *_, ow_extent, ob_extent = (int(d) for d in sch.get(block).writes[0].source.shape)
    lanes = ctx.lanes(str(sch.get(block).writes[0].source.dtype))
    reg = divisor_at_most(ow_extent, tile_pixels(ob_extent, lanes,
                                                 budget=SMALL_TILE_ACCUMULATORS))
    n, c, *rows, w = sch.get_loops(epilogue)
    cb, ci = sch.split(c, [None, ob_extent])
    wo, wi = sch.split(w, [None, reg])
    blocks = int(sch.get(n).extent) * int(sch.get(cb).extent)
    if blocks >= MIN_PARALLEL_BLOCKS:
        sch.reorder(n, cb, *rows, wo, wi, ci)
        sch.parallel(sch.fuse(n, cb))
    else:
        sch.reorder(rows[0], n, cb, *rows[1:], wo, wi, ci)
        sch.parallel(rows[0])
    sch.compute_at(block, wo)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    inner = int(reg > 1) + int(ob_extent > 1) + \
        sum(int(iv.iter_type) != 0 for iv in sch.get(block).iter_vars)
    loops = sch.get_loops(block)
    conv._tile_under(sch, block, loops[len(loops) - inner:], reg, ob_extent)
    sch.unroll(wi)
    if ob_extent > 1:
        sch.vectorize(ci)


@register_schedule("bmlib.conv2d_transpose_nchwc", "bmlib.conv3d_transpose_ncdhwc")
def schedule_transposed(sch, block, ctx):
    _tile_transposed(sch, block, ctx)


@register_schedule("bmlib.pack_ncdhwc")
def schedule_pack_ncdhwc(sch, block, ctx):
    """Padding + packing in 3-D: parallel over (batch, channel block, depth, row)."""
    n, cb, d, y, x, c = sch.get_loops(block)
    sch.unroll(c)
    sch.parallel(sch.fuse(n, cb, d, y))
