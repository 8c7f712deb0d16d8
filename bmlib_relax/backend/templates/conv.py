"""Convolution templates (NCHW data; OIHW or blocked OIHW{ib}i{ob}o weights,
IOHW for the transpose).

``conv2d`` (groups=1) and depthwise ``conv2d`` compute in a channel-blocked
layout: the data is padded and packed NCHW → NCHW[ib]c inside the PrimFunc,
the convolution produces NCHW[ob]c with the ``ob`` channels of a block as
the vectorized innermost axis, and an unpack block returns NCHW.  The schedule
rules below tile that: ``ob`` vectorized, a register tile over output width
(or over a flat, padded pixel axis when rows take no whole tile), the
reduction (input-channel blocks, kernel window, input channels of a block)
outside the tile, the output rows in parallel, and the unpack plus the
element-wise epilogue (bias, batch_norm scale/shift, activation) computed per
register tile.  A 1x1 ``conv2d`` whose output pixels are whole vectors skips
the blocked layout and runs as a GEMM on NCHW (:func:`conv2d_1x1_gemm`).
Weights usually arrive packed by :mod:`..rewrite`; a plain OIHW weight (not a
constant) is packed inside the PrimFunc, or read as it is by the 1x1 GEMM.

With the blocked layout (:mod:`..blocked_layout`) a conv reads ``NCHW{ib}c`` data
as it is (padded first when the conv pads; a depthwise conv tests the padding
inline) and returns ``NCHW{ob}c``: no pack, no unpack, and 1x1 convs too run
the blocked kernel.  The epilogue is then 5-D and tiled the same way.  Two blocked-path
variants: a conv whose weights per output-channel block overflow L1 is K-blocked
(:func:`k_blocking`: chunks of input channels outside the pixel tiles, so each chunk's
weights serve a group of output rows from L1), and a strided 1x1 gathers the pixels it
samples into a contiguous buffer first (:func:`_subsample_blocked`).

``conv2d`` takes a symbolic batch (``symbolic_dims="batch"``): the blocks run over
``(n, ...)`` with ``n`` a ``tir.Var`` (see :func:`batched`), the batch joins the
fused parallel loop, and the tiles, the vectorized axes and the packed weights
stay static (channels and spatial dims must be static).
"""
from __future__ import annotations

import os
import re
from typing import NamedTuple

import tvm
from tvm import te, tirx, topi

from .. import prefetch
from ..patterns import FUSED_POINTWISE_MAX_WEIGHT_BYTES, blocked_kernel_layout
from ..rewrite import conv2d_blocking, depthwise_blocking
from ..schedule import divisor_at_most, inline_epilogue, is_scheduled, same_shape
from ...switches import switched_on
from ..target import vector_registers
from ._utils import attr_ints, out_dtype
from .registry import SCHEDULE_ATTR, register_schedule, register_template
from .tiles import SMALL_TILE_ACCUMULATORS, pixel_tile, tile_pixels

# The 1x1 GEMM tile: output channels (one broadcast weight each, unrolled) x
# vectors of consecutive output pixels; 12 accumulators, measured best of 8-12.
GEMM_ROWS, GEMM_VECTORS = 6, 2
_BLOCKED_NCHW = re.compile(r"NCHW(\d+)c")
# Input-channel (K) blocking of weight-heavy blocked convs (see k_chunks): a conv
# whose weights per output-channel block exceed KBLOCK_MIN_WEIGHT_BYTES (they
# no longer stay in the 48 KiB L1 across the pixel tiles) runs its reduction in
# chunks of at most KBLOCK_CHUNK_BYTES of weights, each reused by every pixel
# tile of a group of at most KBLOCK_GROUP_BYTES of output.
# ``$BMLIB_CONV_KBLOCK=0`` switches it off (A/B timing).
KBLOCK_ENV = "BMLIB_CONV_KBLOCK"
KBLOCK_MIN_WEIGHT_BYTES = 48 * 1024
# 8 KiB chunks and 32 KiB groups measured 3 % faster in the model than 16/16 KiB
# (MobileNet 7.59 -> 7.35 ms, ResNet-50 50.6 -> 48.9 ms, 1 thread, with the prefetch).
KBLOCK_CHUNK_BYTES = 8 * 1024
KBLOCK_GROUP_BYTES = 32 * 1024
# A strided 1x1 conv on NCHW{b}c data whose output-channel blocks run outside its
# rows gathers the pixels it reads first (_subsample_blocked, _gathers_strided_pixels);
# ``$BMLIB_CONV_STRIDED_GATHER=0`` switches that off.
STRIDED_GATHER_ENV = "BMLIB_CONV_STRIDED_GATHER"
KROW_ENV = "BMLIB_CONV_KROW"
# A conv whose weights are at most this size parallelizes over output rows first
# (_rows_outer): an eighth of the smallest L2 this project targets (2 MB, AVX-512 Xeons),
# the bound under which weights may be re-read per row, as for the fused depthwise +
# 1x1 partitions (the same number, from the pattern table).
# ``$BMLIB_CONV_ROWS_OUTER=0`` keeps the channel blocks outside (A/B timing).
ROWS_OUTER_MAX_WEIGHT_BYTES = FUSED_POINTWISE_MAX_WEIGHT_BYTES
ROWS_OUTER_ENV = "BMLIB_CONV_ROWS_OUTER"
# A K-blocked conv re-reads its weights once per row group, not per row: weights up to
# this size run row groups outside (schedule_conv2d_kchunk).  Between the two measured
# sides: ResNet-50's 3x3 stride-2 128->128 (576 KiB) 755 -> 691 µs in the model at 2
# threads with row groups outside, its 1x1 1024->256 (1 MiB) 290 -> 325 µs.
KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES = 768 * 1024
# A K-blocked conv prefetches its next chunk of weights (_next_chunk_prefetch);
# ``$BMLIB_CONV_PREFETCH=0`` switches that off.
PREFETCH_ENV = "BMLIB_CONV_PREFETCH"


@register_template("relax.nn.conv2d", symbolic_dims="batch")
def conv2d(call, inputs, ctx):
    from .conv_winograd import dispatch  # builds on this module, so imported here
    if (winograd := dispatch(call, inputs, ctx)) is not None:  # 3x3 stride-1 fp32
        return winograd
    attrs = call.attrs
    data, weight = inputs
    kernel_layout = str(attrs.kernel_layout)
    blocking = blocked_kernel_layout(kernel_layout)
    data_block = activation_block(str(attrs.data_layout))
    out_block = activation_block(str(attrs.out_layout))
    if data_block is False or out_block is False or \
            (blocking is None and kernel_layout != "OIHW"):
        raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout}/{attrs.out_layout} "
                        "has no template")
    if data_block or out_block:
        return _blocked_conv2d(call, data, weight, blocking, data_block, out_block, ctx)
    dtype = out_dtype(attrs, data.dtype)
    groups = int(attrs.groups)
    strides, padding, dilation = (attr_ints(attrs.strides), attr_ints(attrs.padding),
                                  attr_ints(attrs.dilation))
    channels = int(data.shape[1])
    out_channels = int(call.ty.shape.values[1])
    lanes = ctx.lanes(dtype)
    if groups == 1:
        out_pixels = int(call.ty.shape.values[2]) * int(call.ty.shape.values[3])
        if tuple(int(d) for d in weight.shape[2:4]) == (1, 1) and not any(padding) and \
                out_pixels % (GEMM_VECTORS * lanes) == 0:
            return conv2d_1x1_gemm(data, weight, blocking, strides, dtype, lanes)
        if blocking is None:
            blocking = conv2d_blocking(channels, out_channels, lanes)
            weight = pack_kernel(weight, *blocking)
        return conv2d_nchwc(data, weight, strides, padding, dilation, dtype, *blocking,
                            row_tile=pixel_tile(blocking[1], lanes, vector_registers(ctx.target),
                                                int(call.ty.shape.values[3]),
                                                int(call.ty.shape.values[2])))
    if groups == channels == out_channels and (blocking is not None or int(weight.shape[1]) == 1):
        if blocking is None:
            blocking = (1, depthwise_blocking(channels, lanes))
            weight = pack_kernel(weight, *blocking)
        return depthwise_nchwc(data, weight, strides, padding, dilation, dtype, blocking[1])
    if blocking is None and groups == channels and int(weight.shape[1]) == 1:
        # Depthwise with a multiplier: OIHW (C*M, 1, KH, KW) is topi's (C, M, KH, KW).
        multiplier = int(weight.shape[0]) // groups
        kernel = topi.reshape(weight, [channels, multiplier] + [int(d) for d in weight.shape[2:]])
        return topi.nn.depthwise_conv2d_nchw(data, kernel, strides, padding, dilation, dtype)
    from .conv_grouped import group_conv2d  # builds on this module, so imported here
    return group_conv2d(data, weight, blocking, strides, padding, dilation, groups, dtype, ctx)


def activation_block(layout: str):
    """The channel block of an ``NCHW{b}c`` activation layout; None for NCHW; False for
    any other layout."""
    if layout == "NCHW":
        return None
    match = _BLOCKED_NCHW.fullmatch(layout)
    return int(match.group(1)) if match else False


def _blocked_conv2d(call, data, weight, blocking, data_block, out_block, ctx):
    """conv2d with NCHW{ib}c and/or NCHW{ob}c activations (see ..blocked_layout): the
    blocked compute of :func:`conv2d_nchwc` / :func:`depthwise_nchwc`, reading the
    blocked input as it is (a pad stage when the conv pads) and returning its blocked
    result (no unpack)."""
    attrs = call.attrs
    dtype = out_dtype(attrs, data.dtype)
    groups = int(attrs.groups)
    strides, padding, dilation = (attr_ints(attrs.strides), attr_ints(attrs.padding),
                                  attr_ints(attrs.dilation))
    channels = int(data.shape[1]) * (data_block or 1)
    out_channels = int(call.ty.shape.values[1]) * (out_block or 1)
    if blocking is None or out_block is None:
        raise ctx.error("a blocked conv2d needs an OIHW{ib}i{ob}o kernel and an NCHW{ob}c "
                        "output")
    ib, ob = blocking
    if ob != out_block:
        raise ctx.error(f"kernel blocks {ob} output channels, the output layout {out_block}")
    lanes = ctx.lanes(dtype)
    if groups == 1:
        if data_block is not None and ib != data_block:
            raise ctx.error(f"kernel blocks {ib} input channels, the data layout {data_block}")
        row_tile = pixel_tile(ob, lanes, vector_registers(ctx.target),
                              int(call.ty.shape.values[3]), int(call.ty.shape.values[2]))
        return conv2d_nchwc(data, weight, strides, padding, dilation, dtype, ib, ob,
                            row_tile=row_tile, blocked=(data_block is not None, True),
                            k_blocking=k_blocking(weight, dtype, row_tile, call))
    if groups == channels == out_channels and ib == 1 and \
            (data_block is None or data_block == ob):
        return depthwise_nchwc(data, weight, strides, padding, dilation, dtype, ob,
                               blocked=(data_block is not None, True))
    raise ctx.error(f"grouped conv2d (groups={groups}) on blocked layouts has no template")


def _kblock_settings() -> tuple[int, int, int] | None:
    """(min weight bytes, chunk bytes, group bytes), or None when ``$BMLIB_CONV_KBLOCK``
    is ``0``/``off``; ``$BMLIB_CONV_KBLOCK=min,chunk,group`` (KiB) overrides the
    thresholds for measurements."""
    if not switched_on(KBLOCK_ENV):
        return None
    parts = os.environ.get(KBLOCK_ENV, "").split(",")
    if len(parts) == 3 and all(p.strip().isdigit() for p in parts):
        return tuple(int(p) * 1024 for p in parts)
    return KBLOCK_MIN_WEIGHT_BYTES, KBLOCK_CHUNK_BYTES, KBLOCK_GROUP_BYTES


class KBlocking(NamedTuple):
    """How :func:`_k_blocked_conv` splits a reduction: ``chunk`` input-channel blocks
    per chunk (or, ``by_kernel_row``, one kernel row of one block per chunk) and
    ``rows`` output rows per group."""
    chunk: int
    rows: int
    by_kernel_row: bool = False


def k_blocking(kernel, dtype: str, row_tile: int, call) -> KBlocking | None:
    """How to K-block a weight-heavy blocked conv (:class:`KBlocking`), or None to keep
    the plain row-tiled schedule.

    The plain schedule runs the whole reduction inside each register tile (one
    output row of ``row_tile`` pixels): each output-channel block's weights
    stream through L1 once per row tile.  When they exceed L1
    (``KBLOCK_MIN_WEIGHT_BYTES``: a 1024->1024 1x1 has 128 KiB per block of 32
    output channels) they come from L2 every time, and 7x7/14x14 layers ran at
    ~50-67 % of the FMA peak.  K-blocking splits the reduction into chunks whose
    weights fit L1 (``KBLOCK_CHUNK_BYTES``) and runs every row tile of a group of
    output rows (``KBLOCK_GROUP_BYTES`` of accumulated output, kept in L1) per
    chunk.  When one input-channel block's weights alone pass the chunk size (a 3x3
    kernel over 32 channels: 36 KiB per output block), a chunk is one kernel row of
    one block (12 KiB).  Only row-tiled convs (output width a multiple of the tile).
    """
    settings = _kblock_settings()
    if settings is None:
        return None
    min_weight, chunk_bytes, group_bytes = settings
    oh, ow = (int(d) for d in call.ty.shape.values[2:4])
    if not row_tile or ow % row_tile:
        return None
    _, ico, kh, kw, ib, ob = (int(d) for d in kernel.shape)
    itemsize = max(1, tvm.DataType(dtype).bits // 8)
    per_ic_block = ib * kh * kw * ob * itemsize
    if ico < 2 or ico * per_ic_block <= min_weight:
        return None
    chunk = max(d for d in range(1, ico + 1) if ico % d == 0 and
                (d == 1 or d * per_ic_block <= chunk_bytes))
    if chunk == ico:
        return None
    by_kernel_row = per_ic_block > chunk_bytes and kh > 1 and _kernel_row_chunks_enabled()
    row_bytes = ow * ob * 4  # the accumulated output is float32-sized at most
    rows = max(d for d in range(1, oh + 1) if oh % d == 0 and
               (d == 1 or d * row_bytes <= group_bytes))
    return KBlocking(chunk, rows, by_kernel_row)


def _kernel_row_chunks_enabled() -> bool:
    """``$BMLIB_CONV_KROW`` (``0``/``off`` disable): chunks of one kernel row, for A/B."""
    return switched_on(KROW_ENV)


def _direct_conv(data_layout: str, kernel_layout: str):
    """conv1d/conv3d as TOPI's generic ``nn.conv`` computes them (generic schedules)."""
    def template(call, inputs, ctx):
        attrs = call.attrs
        data, weight = inputs
        if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
                (data_layout, kernel_layout, data_layout):
            raise ctx.error(f"layout {attrs.data_layout}/{attrs.kernel_layout} has no template")
        return topi.nn.conv(data, weight, attr_ints(attrs.strides), attr_ints(attrs.padding),
                            attr_ints(attrs.dilation), int(attrs.groups), data_layout,
                            kernel_layout, out_dtype(attrs, data.dtype))

    return template


register_template("relax.nn.conv1d")(_direct_conv("NCW", "OIW"))
register_template("relax.nn.conv3d")(_direct_conv("NCDHW", "OIDHW"))


def batched(n, *dims: int) -> tuple:
    """The shape ``(n, *dims)`` of a compute over a batch ``n`` that may be symbolic.

    A symbolic batch is an ``int64`` variable (Relax shapes are ``int64``); the
    static dims then take its dtype too, so every spatial loop of the block is
    ``int64`` and fusing the batch with them (the parallel axis) makes no casts,
    which would leave the block bindings non-affine (no ``compute_at`` or
    ``vectorize`` then).
    """
    if isinstance(n, int) or isinstance(n, tirx.IntImm):
        return (n, *dims)
    return (n, *(tirx.IntImm(str(n.ty), int(d)) for d in dims))


def pack_kernel(weight: te.Tensor, ib: int, ob: int) -> te.Tensor:
    """OIHW → [O/ob, I/ib, KH, KW, ib, ob] inside the PrimFunc (non-constant weights)."""
    o, i, kh, kw = (int(d) for d in weight.shape)
    return te.compute((o // ob, i // ib, kh, kw, ib, ob),
                      lambda oc, ic, y, x, ii, oo: weight[oc * ob + oo, ic * ib + ii, y, x],
                      name="bmlib_kernel_pack")


def _pad_pack(data: te.Tensor, block: int, padding, out_size, kernel, strides, dilation,
              subsample=(1, 1)):
    """Pad NCHW data and pack it to NCHW[block]c in one block (keeping every
    ``subsample``-th row/column only, for strided 1x1 convolutions)."""
    n = data.shape[0]  # the batch may be symbolic
    c, h, w = (int(d) for d in data.shape[1:])
    top, left = padding[0], padding[1]
    if tuple(subsample) != (1, 1):
        ph, pw = out_size
    else:
        # Only the rows/columns the windows reach (padding may be asymmetric).
        ph = (out_size[0] - 1) * strides[0] + (kernel[0] - 1) * dilation[0] + 1
        pw = (out_size[1] - 1) * strides[1] + (kernel[1] - 1) * dilation[1] + 1
    zero = tirx.const(0, data.dtype)
    sy, sx = subsample

    def compute(nn, cb, y, x, ci):
        yy, xx = y * sy - top, x * sx - left
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w)
        return tirx.if_then_else(inside, data[nn, cb * block + ci, yy, xx], zero)

    return te.compute(batched(n, c // block, ph, pw, block), compute, name="bmlib_data_pack",
                      attrs={SCHEDULE_ATTR: "bmlib.pack_nchwc"})


def _pad_blocked(data: te.Tensor, padding, out_size, kernel, strides, dilation,
                 inline: bool = False):
    """NCHW{b}c data as the conv reads it: as it is when the conv does not pad, else
    padded into the ``(n, C/b, ph, pw, b)`` buffer :func:`_pad_pack` would make, or
    (``inline``) read through that padding test by the conv itself."""
    if not any(padding):
        return data
    n = data.shape[0]
    cb, h, w, block = (int(d) for d in data.shape[1:])
    top, left = padding[0], padding[1]
    ph = (out_size[0] - 1) * strides[0] + (kernel[0] - 1) * dilation[0] + 1
    pw = (out_size[1] - 1) * strides[1] + (kernel[1] - 1) * dilation[1] + 1
    zero = tirx.const(0, data.dtype)

    def compute(nn, c, y, x, ci):
        yy, xx = y - top, x - left
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w)
        return tirx.if_then_else(inside, data[nn, c, yy, xx, ci], zero)

    return te.compute(batched(n, cb, ph, pw, block), compute, name="bmlib_data_pad",
                      attrs={SCHEDULE_ATTR: "bmlib.pad_nchwc_inline" if inline
                             else "bmlib.pad_nchwc"})


def _conv_input(data, block, padding, out_size, kernel, strides, dilation, in_blocked,
                gather=False):
    """The packed (or, blocked already, padded) input of a blocked conv, and the strides
    it is read with.  ``gather``: a strided 1x1 on blocked data reads a gathered copy
    of the pixels it samples (:func:`_gathers_strided_pixels`)."""
    if in_blocked:
        if tuple(kernel) == (1, 1) and list(strides) != [1, 1] and not any(padding) and \
                gather:
            return _subsample_blocked(data, out_size, strides), [1, 1]
        return _pad_blocked(data, padding, out_size, kernel, strides, dilation), strides
    if tuple(kernel) == (1, 1) and list(strides) != [1, 1]:
        # A strided 1x1 reads every stride-th pixel only: pack just those.
        return _pad_pack(data, block, padding, out_size, (1, 1), strides, dilation,
                         subsample=strides), [1, 1]
    return _pad_pack(data, block, padding, out_size, kernel, strides, dilation), strides


def _gathers_strided_pixels(data, kernel, strides, light_weight_bytes: int) -> bool:
    """Whether a strided 1x1 conv on NCHW{ib}c ``data`` gathers the pixels it samples
    first (:func:`_subsample_blocked`): when its output-channel blocks run outside its
    rows (weights heavier than ``light_weight_bytes``, the bound its schedule applies:
    see :func:`_rows_outer`).

    Blocks outside, every block re-reads the sampled pixels, and reads them from a
    contiguous copy faster than at a stride: ResNet-50's 56x56 256->512 shortcut 1.26
    -> 1.01 ms at 1 thread, ResNet-18's 14x14 256->512 one 103 -> 96 µs in the model.
    Rows outside, each row's input is read once for all blocks, and the gather is a
    pass and a parallel region more for nothing (ResNet-18's 28x28 and 14x14 shortcuts
    at 2 threads: 48 -> 30 µs repeated in place).  ``$BMLIB_CONV_STRIDED_GATHER=0``
    never gathers (A/B timing)."""
    if not (switched_on(STRIDED_GATHER_ENV) and len(data.shape) == 5 and
            len(strides) == 2 and all(isinstance(d, tirx.IntImm) for d in kernel.shape)):
        return False
    return not (switched_on(ROWS_OUTER_ENV) and _light_weights(kernel, light_weight_bytes))


def _subsample_blocked(data: te.Tensor, out_size, strides) -> te.Tensor:
    """The pixels a strided 1x1 conv reads from NCHW{b}c data, gathered into a
    contiguous ``(n, C/b, OH, OW, b)`` buffer (one vectorized pass, scheduled as a
    padding pass): the conv's row tiles then read consecutive pixels instead of
    every stride-th one."""
    n = data.shape[0]
    cb, block = int(data.shape[1]), int(data.shape[4])
    sy, sx = strides
    return te.compute(batched(n, cb, out_size[0], out_size[1], block),
                      lambda nn, c, y, x, ci: data[nn, c, y * sy, x * sx, ci],
                      name="bmlib_data_subsample", attrs={SCHEDULE_ATTR: "bmlib.pad_nchwc"})


def _blocked_out(conv: te.Tensor, dtype: str) -> te.Tensor:
    """The NCHW[ob]c result as it is, through an element-wise stage: the schedule
    computes the conv per register tile of this (epilogue) block."""
    return te.compute(conv.shape, lambda *i: conv(*i).astype(dtype), name="bmlib_blocked_out")


def _out_size(data, kernel, strides, padding, dilation):
    h, w = int(data.shape[2]), int(data.shape[3])
    oh = (h + padding[0] + padding[2] - (kernel[0] - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - (kernel[1] - 1) * dilation[1] - 1) // strides[1] + 1
    return oh, ow


def _padding4(padding):
    if len(padding) == 2:
        return [padding[0], padding[1], padding[0], padding[1]]
    return padding


def _unpack(conv: te.Tensor, block: int, dtype: str) -> te.Tensor:
    n = conv.shape[0]
    cb, oh, ow = (int(d) for d in conv.shape[1:4])
    return te.compute(batched(n, cb * block, oh, ow),
                      lambda nn, c, y, x: conv[nn, c // block, y, x, c % block].astype(dtype),
                      name="bmlib_unpack")


def _reduce_axes(**extents):
    """Reduce axes by name, in the given order, leaving out those of extent 1
    (the schedule finds the loops of the others by position)."""
    return {name: te.reduce_axis((0, ext), name=name) for name, ext in extents.items()
            if ext > 1}


def _sum(value, axes):
    return te.sum(value, axis=list(axes.values())) if axes else value


def conv2d_nchwc(data, kernel, strides, padding, dilation, dtype, ib, ob, row_tile=0,
                 blocked=(False, False), k_blocking=None):
    """NCHW data, [O/ob, I/ib, KH, KW, ib, ob] kernel → NCHW output via NCHW[ob]c.

    When the output width is a multiple of ``row_tile`` (or that is 0), the
    convolution is NCHW[ob]c and register tiles run along output rows.  Otherwise
    (7x7 and 14x14 outputs on AVX2, say) the output pixels are one flat axis, padded
    to whole tiles: ``[N, O/ob, ceil(OH*OW / tile) * tile, ob]``.  The padding pixels
    recompute the last real one (so every read stays in bounds) and are dropped by
    the unpack; a tile of two vectors beats one vector x 7 columns (:mod:`.tiles`).
    ``blocked`` (input, output): the data is NCHW{ib}c already / the result is
    returned as NCHW{ob}c (:mod:`..blocked_layout`).
    """
    padding = _padding4(padding)
    n = data.shape[0]
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    oc_blocks = int(kernel.shape[0])
    oh, ow = _out_size(data, (kh, kw), strides, padding, dilation)
    k_blocked = k_blocking is not None and blocked[1] and row_tile and ow % row_tile == 0
    gather = _gathers_strided_pixels(data, kernel, strides, KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES
                                     if k_blocked else ROWS_OUTER_MAX_WEIGHT_BYTES)
    packed, strides = _conv_input(data, ib, padding, (oh, ow), (kh, kw), strides, dilation,
                                  blocked[0], gather=gather)
    # Separate reduce axes for input-channel blocks and the channels inside a block
    # (not ic // ib, ic % ib): the schedule orders them independently.
    axes = _reduce_axes(ico=int(kernel.shape[1]), kh=kh, kw=kw, ici=ib)
    ico, ry, rx, ici = (axes.get(k, 0) for k in ("ico", "kh", "kw", "ici"))

    def window(nn, oc, y, x, oo):
        value = packed[nn, ico, y * strides[0] + ry * dilation[0],
                       x * strides[1] + rx * dilation[1], ici].astype(dtype)
        return _sum(value * kernel[oc, ico, ry, rx, ici, oo].astype(dtype), axes)

    if k_blocked:
        return _k_blocked_conv(packed, kernel, strides, dilation, dtype, (oh, ow),
                               k_blocking, row_tile)
    if not row_tile or ow % row_tile == 0:
        conv = te.compute(batched(n, oc_blocks, oh, ow, ob), window, name="bmlib_conv2d_nchwc",
                          attrs={SCHEDULE_ATTR: "bmlib.conv2d_nchwc"})
        return _blocked_out(conv, dtype) if blocked[1] else _unpack(conv, ob, dtype)
    pixels = oh * ow
    padded = -(-pixels // row_tile) * row_tile

    def flat(nn, oc, p, oo):
        real = tirx.min(p, pixels - 1)
        return window(nn, oc, real // ow, real % ow, oo)

    conv = te.compute(batched(n, oc_blocks, padded, ob), flat, name="bmlib_conv2d_nchwc_flat",
                      attrs={SCHEDULE_ATTR: "bmlib.conv2d_nchwc_flat",
                             "bmlib_tile_pixels": row_tile})
    if blocked[1]:
        return te.compute(batched(n, oc_blocks, oh, ow, ob),
                          lambda nn, c, y, x, oo: conv[nn, c, y * ow + x, oo].astype(dtype),
                          name="bmlib_unflatten")
    return te.compute(batched(n, oc_blocks * ob, oh, ow),
                      lambda nn, c, y, x: conv[nn, c // ob, y * ow + x, c % ob].astype(dtype),
                      name="bmlib_unpack")


def _k_blocked_conv(packed, kernel, strides, dilation, dtype, out_size, k_blocking, row_tile):
    """The blocked conv as partial sums over chunks of input-channel blocks
    (:func:`k_blocking`), then their sum: ``bmlib_conv2d_kchunk[n, oc, chunk, y, x, oo]``
    is one chunk's reduction (the register tile), ``bmlib_conv2d_ksum`` adds the
    chunks up (the output group held in L1), and its NCHW{ob}c epilogue follows.
    The schedule (:func:`schedule_conv2d_kchunk`) puts the chunk loop outside the
    pixel tiles, so the chunk's weights are read from L1 by every tile."""
    n = packed.shape[0]
    oh, ow = out_size
    oc_blocks, ico, kh, kw, ib, ob = (int(d) for d in kernel.shape)
    chunk, rows, by_kernel_row = k_blocking
    if by_kernel_row:  # chunk ko: kernel row ko % KH of input-channel block ko // KH
        chunks = ico * kh
        axes = _reduce_axes(kw=kw, ici=ib)
        rx, ici = (axes.get(k, 0) for k in ("kw", "ici"))

        def position(ko):
            return ko // kh, ko % kh
    else:
        chunks = ico // chunk
        axes = _reduce_axes(ici_o=chunk, kh=kh, kw=kw, ici=ib)
        ki, ry_axis, rx, ici = (axes.get(k, 0) for k in ("ici_o", "kh", "kw", "ici"))

        def position(ko):
            return ko * chunk + ki, ry_axis

    def partial(nn, oc, ko, y, x, oo):
        ic, ry = position(ko)
        value = packed[nn, ic, y * strides[0] + ry * dilation[0],
                       x * strides[1] + rx * dilation[1], ici].astype(dtype)
        return _sum(value * kernel[oc, ic, ry, rx, ici, oo].astype(dtype), axes)

    partials = te.compute(batched(n, oc_blocks, chunks, oh, ow, ob), partial,
                          name="bmlib_conv2d_kchunk",
                          attrs={SCHEDULE_ATTR: "bmlib.conv2d_kchunk",
                                 "bmlib_tile_pixels": row_tile, "bmlib_group_rows": rows})
    rko = te.reduce_axis((0, chunks), name="rko")
    total = te.compute(batched(n, oc_blocks, oh, ow, ob),
                       lambda nn, oc, y, x, oo: te.sum(partials[nn, oc, rko, y, x, oo], axis=rko),
                       name="bmlib_conv2d_ksum")
    return _blocked_out(total, dtype)


def conv2d_1x1_gemm(data, kernel, blocking, strides, dtype, lanes):
    """A 1x1 convolution as the GEMM it is, straight on NCHW: out[o, p] = sum_i W[o, i] x[i, p].

    NCHW keeps each channel's pixels contiguous, so a tile of ``GEMM_ROWS`` output
    channels x ``GEMM_VECTORS`` vectors of pixels is loaded as vectors and
    multiplied by broadcast weights: no packing or unpacking pass, and the
    output is stored as whole vectors.  Needs the output pixels (H*W) to be whole
    vectors; a strided 1x1 first copies out the pixels it samples.  The channel
    axis is padded to whole tiles (the padding recomputes the last channel and is
    dropped).  ``kernel`` is OIHW, or blocked ``OIHW{ib}i{ob}o`` (``blocking``).
    """
    n = data.shape[0]
    channels, h, w = (int(d) for d in data.shape[1:])
    if list(strides) != [1, 1]:
        sy, sx = strides
        h, w = (h - 1) // sy + 1, (w - 1) // sx + 1
        source = data
        data = te.compute(batched(n, channels, h, w),
                          lambda nn, c, y, x: source[nn, c, y * sy, x * sx],
                          name="bmlib_subsample")
    if blocking is None:
        out_channels = int(kernel.shape[0])

        def weight_at(o, i):
            return kernel[o, i, 0, 0]
    else:
        ib, ob = blocking
        out_channels = int(kernel.shape[0]) * ob

        def weight_at(o, i):
            return kernel[o // ob, i // ib, 0, 0, i % ib, o % ob]

    padded = -(-out_channels // GEMM_ROWS) * GEMM_ROWS
    rc = te.reduce_axis((0, channels), name="rc")

    def gemm(nn, o, p):
        real = tirx.min(o, out_channels - 1)
        return te.sum(data[nn, rc, p // w, p % w].astype(dtype) *
                      weight_at(real, rc).astype(dtype), axis=rc)

    conv = te.compute(batched(n, padded, h * w), gemm, name="bmlib_conv2d_1x1_gemm",
                      attrs={SCHEDULE_ATTR: "bmlib.conv2d_1x1_gemm",
                             "bmlib_tile": [GEMM_ROWS, GEMM_VECTORS * lanes]})
    return te.compute(batched(n, out_channels, h, w), lambda nn, o, y, x: conv[nn, o, y * w + x],
                      name="bmlib_unflatten")


def depthwise_nchwc(data, kernel, strides, padding, dilation, dtype, cb, blocked=(False, False)):
    """Depthwise (multiplier 1): kernel [C/cb, 1, KH, KW, 1, cb]; ``blocked`` as in
    :func:`conv2d_nchwc` (a blocked input has blocks of ``cb`` channels)."""
    padding = _padding4(padding)
    n = data.shape[0]
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    blocks = int(kernel.shape[0])
    oh, ow = _out_size(data, (kh, kw), strides, padding, dilation)
    if blocked[0]:
        # The padding test inline: a depthwise tap is one vector load, and a separate
        # padding pass cost more than the conv (MobileNet's stride-2 layers: 2.5x).
        packed = _pad_blocked(data, padding, (oh, ow), (kh, kw), strides, dilation,
                              inline=True)
    else:
        packed = _pad_pack(data, cb, padding, (oh, ow), (kh, kw), strides, dilation)
    axes = _reduce_axes(kh=kh, kw=kw)
    ry, rx = (axes.get(k, 0) for k in ("kh", "kw"))

    def compute(nn, c, y, x, cc):
        value = packed[nn, c, y * strides[0] + ry * dilation[0],
                       x * strides[1] + rx * dilation[1], cc].astype(dtype)
        return _sum(value * kernel[c, 0, ry, rx, 0, cc].astype(dtype), axes)

    conv = te.compute(batched(n, blocks, oh, ow, cb), compute, name="bmlib_depthwise_nchwc",
                      attrs={SCHEDULE_ATTR: "bmlib.depthwise_nchwc"})
    return _blocked_out(conv, dtype) if blocked[1] else _unpack(conv, cb, dtype)


# --------------------------------------------------------------------------- schedules
@register_schedule("bmlib.pack_nchwc")
def schedule_pack(sch, block, ctx):
    """Padding + packing: parallel over (batch, channel block, row)."""
    n, cb, y, x, c = sch.get_loops(block)
    sch.unroll(c)
    sch.parallel(sch.fuse(n, cb, y))


@register_schedule("bmlib.pad_nchwc")
def schedule_pad_nchwc(sch, block, ctx):
    """Padding blocked data: parallel over (batch, channel block, row), the channels of
    a block (contiguous in input and output) vectorized."""
    n, cb, y, x, c = sch.get_loops(block)
    sch.vectorize(c)
    sch.parallel(sch.fuse(n, cb, y))


@register_schedule("bmlib.pad_nchwc_inline")
def schedule_pad_nchwc_inline(sch, block, ctx):
    """Padding read by a depthwise conv: inlined (a test per tap, no pass of its own)."""
    sch.compute_inline(block)


def _tile_under(sch, block, loops, unrolled: int, vectorized: int) -> list:
    """Finish a register tile computed at a loop: ``loops`` are the block's loops
    below that point, the tile's (an unrolled then a vectorized one, each only
    when longer than 1: compute_at makes no unit loop) then the reduction's (in
    the template's order; templates make no unit reduce axis).  The reduction
    moves outside the tile, the tile is unrolled x vectorized, and the init is
    split off.  The tile keeps the "global" scope on purpose: see the note on
    register tiles in ..schedule.  Returns the reduction loops, outermost first (a
    weight prefetch goes at one: :func:`_prefetch_loop`).
    """
    kinds = [kind for kind, ext in (("unroll", unrolled), ("vector", vectorized)) if ext > 1]
    tile, reduce = loops[:len(kinds)], loops[len(kinds):]
    sch.reorder(*reduce, *tile)
    for kind, loop in zip(kinds, tile):
        (sch.unroll if kind == "unroll" else sch.vectorize)(loop)
    if reduce:
        sch.decompose_reduction(block, reduce[0])
    return reduce


def _flat_epilogue(sch, block):
    """The NCHW epilogue of ``block`` re-indexed (n, c, h*W + w), and its loops."""
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("conv2d without its epilogue")
    shape = sch.get(epilogue).writes[0].source.shape
    width = int(shape[3])
    if len(shape) == 5:  # NCHW{ob}c (see ..blocked_layout)
        sch.transform_block_layout(epilogue, lambda n, c, h, w, o: (n, c, h * width + w, o))
    else:
        sch.transform_block_layout(epilogue, lambda n, c, h, w: (n, c, h * width + w))
    return epilogue, sch.get_loops(epilogue)


def _tile_conv(sch, block, ctx, rows_outer=False, budget=None):
    """Shared tiling of the NCHW[ob]c conv blocks.

    The unpack and the element-wise epilogue after it become one NCHW block,
    tiled (n, C/ob, OH, OW/reg | ob, reg) with the first three loops fused and
    parallel (``rows_outer``: (n, OH, C/ob), see :func:`_rows_outer`).  The
    convolution is computed at the ``OW/reg`` loop of that block
    into a register-sized accumulator tile: reduction loops (input-channel
    blocks, kernel window, input channels of a block) outside, then the
    ``reg`` output columns (unrolled) and the ``ob`` channels (vectorized).
    """
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("conv2d without its unpack block")
    oh_extent, ow_extent, ob_extent = (int(d) for d in
                                       sch.get(block).writes[0].source.shape[2:])
    lanes = ctx.lanes(str(sch.get(block).writes[0].source.dtype))
    reg = divisor_at_most(ow_extent, tile_pixels(ob_extent, lanes, vector_registers(ctx.target),
                                                 budget))
    loops = sch.get_loops(epilogue)
    if len(loops) == 5:  # an NCHW{ob}c epilogue (see ..blocked_layout)
        n, cb, h, w, ci = loops
    else:
        n, c, h, w = loops
        cb, ci = sch.split(c, [None, ob_extent])
    wo, wi = sch.split(w, [None, reg])
    if rows_outer:
        sch.reorder(n, h, cb, wo, wi, ci)
        sch.parallel(sch.fuse(n, h, cb))
    else:
        sch.reorder(n, cb, h, wo, wi, ci)
        sch.parallel(sch.fuse(n, cb, h))
    ctx.done.add(str(sch.get(epilogue).name_hint))
    reductions = _register_tile(sch, block, wo, wi, ci, reg, ob_extent)
    if not rows_outer and len(loops) == 5:
        _mark_block_prefetch(sch, block, wo, reductions, oh_extent, ow_extent // reg)


def _register_tile(sch, block, wo, wi, ci, reg: int, ob_extent: int):
    """Compute the conv ``block`` at its epilogue's column-tile loop ``wo`` as a
    register tile (``reg`` columns ``wi`` x ``ob_extent`` channels ``ci``): the
    reduction loops (input-channel blocks, kernel window, input channels of a block)
    outside, the columns unrolled, the channels vectorized.  Returns the reduction
    loops, outermost first."""
    sch.compute_at(block, wo)
    inner = int(reg > 1) + int(ob_extent > 1) + \
        sum(int(iv.iter_type) != 0 for iv in sch.get(block).iter_vars)
    loops = sch.get_loops(block)
    reductions = _tile_under(sch, block, loops[len(loops) - inner:], reg, ob_extent)
    # The epilogue reads a tile column (ob channels) as one vector from the
    # accumulators and stores it to ob NCHW rows.
    sch.unroll(wi)
    if ob_extent > 1:
        sch.vectorize(ci)
    return reductions


def _rows_outer(sch, block, max_weight_bytes=None) -> bool:
    """Whether a conv's parallel loop runs over output rows outside the output-channel
    blocks: when all its weights fit ``max_weight_bytes`` (``ROWS_OUTER_MAX_WEIGHT_BYTES``
    unless given: the K-blocked schedule's row groups have a bound of their own).

    With the channel blocks outside, every thread reads the whole input (each block
    of output channels reads every input row), and the early layers of a model are
    all activations (MobileNet's 112x112 and 56x56 1x1 convs: 1.6-3.2 MB of input
    and output, 8-64 KiB of weights) that no core's L2 keeps.  Rows outside, all
    channel blocks of a row reuse its input from L1/L2, each thread reads only its
    rows, and the weights are re-read per row from L2 (MobileNet at 2 threads:
    those convs 0.60-0.67x -> 0.48-0.55x of their 1-thread time, the model
    4.30 -> 4.12 ms).  Heavier weights keep the blocks outside: rows outside would
    stream them once per row.  The K-blocked schedule asks the same of its row groups."""
    if not switched_on(ROWS_OUTER_ENV):
        return False
    kernel = _kernel_buffer(sch, block)
    return kernel is not None and _light_weights(kernel, max_weight_bytes)


def _light_weights(kernel, max_weight_bytes=None) -> bool:
    """A static 6-D kernel of at most ``max_weight_bytes`` (``ROWS_OUTER_MAX_WEIGHT_BYTES``):
    light enough to be re-read from L2 for every output row."""
    oc_blocks, per_block = _weights_per_block(kernel)
    itemsize = tvm.DataType(str(kernel.dtype)).bits // 8
    limit = ROWS_OUTER_MAX_WEIGHT_BYTES if max_weight_bytes is None else max_weight_bytes
    return oc_blocks * per_block * itemsize <= limit


@register_schedule("bmlib.conv2d_nchwc")
def schedule_conv2d_nchwc(sch, block, ctx):
    _tile_conv(sch, block, ctx, rows_outer=_rows_outer(sch, block))


@register_schedule("bmlib.conv2d_nchwc_flat")
def schedule_conv2d_nchwc_flat(sch, block, ctx):
    """The flat-pixel conv: like :func:`_tile_conv`, with tiles of ``tile`` pixels
    of the flattened output instead of columns of a row.

    The NCHW epilogue is re-indexed (n, c, h*W + w) so its pixel loop matches the
    conv's; its last tile is predicated (pixels past H*W), the conv's is not (its
    buffer is padded to whole tiles).
    """
    tile = int(sch.get(block).annotations["bmlib_tile_pixels"])
    ob_extent = int(sch.get(block).writes[0].source.shape[3])
    epilogue, loops = _flat_epilogue(sch, block)
    if len(loops) == 4:  # an NCHW{ob}c epilogue
        n, cb, p, ci = loops
    else:
        n, c, p = loops
        cb, ci = sch.split(c, [None, ob_extent])
    po, pi = sch.split(p, [None, tile])
    sch.reorder(n, cb, po, pi, ci)
    outer = sch.fuse(n, cb, po)
    sch.parallel(outer)
    sch.compute_at(block, outer)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    # compute_at makes no unit loop: a 1-pixel output (a classifier's 1x1 conv on a
    # 1x1 map) needs one pixel of the tile, so its pixel loop is absent.
    loops = sch.get_loops(block)[1:]
    spatial = len(loops) - sum(int(iv.iter_type) != 0 for iv in sch.get(block).iter_vars)
    has_pixels = spatial > int(ob_extent > 1)
    _tile_under(sch, block, loops, tile if has_pixels else 1, ob_extent)
    sch.unroll(pi)
    if ob_extent > 1:
        sch.vectorize(ci)


@register_schedule("bmlib.conv2d_kchunk")
def schedule_conv2d_kchunk(sch, block, ctx):
    """K-blocked conv (:func:`_k_blocked_conv`): the NCHW{ob}c epilogue tiled
    (n, C/ob, OH/rows) parallel (light weights: (n, OH/rows, C/ob)) | rows, OW, ob
    (vectorized); the chunk sum computed at its parallel loop as (chunks | rows,
    OW/tile | tile, ob), initialised to zero first; each chunk's register tile
    (``tile`` columns x ``ob`` channels) computed at the sum's column-tile loop, its
    reduction (the chunk's input-channel blocks, kernel window, channels of a block)
    outside the tile.

    Output-channel blocks are the outer parallel axis, so threads split the
    weights rather than share them -- unless the weights are light (:func:`_rows_outer`,
    at most ``KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES``: re-read once per row group, not per
    row): then the row groups are, and each thread reads only its rows of the input,
    once for all output blocks, instead of all of the input once per block (ResNet-50's
    28x28 512->128 1x1, 256 KiB of weights: 0.35 -> 0.30 ms at 2 threads, level at 1;
    ResNet-18's 3x3 stride-2 64->128, 288 KiB: 364 -> 322 µs at 2 threads, within 3 %
    at 1).  Their weights stay in L2 after a thread's first row group: no chunk prefetch."""
    tile = int(sch.get(block).annotations["bmlib_tile_pixels"])
    rows = int(sch.get(block).annotations["bmlib_group_rows"])
    total = sch.get_consumers(block)[0]
    epilogue = inline_epilogue(sch, total)
    if epilogue is None:
        raise ValueError("conv2d without its epilogue")
    chunks, oh_extent, ow_extent, ob_extent = (int(d) for d in
                                               sch.get(block).writes[0].source.shape[2:])
    n, cb, h, w, ci = sch.get_loops(epilogue)
    ho, hi = sch.split(h, [None, rows])
    rows_outer = _rows_outer(sch, block, KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES)
    if rows_outer:
        sch.reorder(n, ho, cb, hi, w, ci)
        outer = sch.fuse(n, ho, cb)
    else:
        outer = sch.fuse(n, cb, ho)
    sch.parallel(outer)
    sch.compute_at(total, outer)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    ctx.done.add(str(sch.get(total).name_hint))
    if ob_extent > 1:
        sch.vectorize(ci)
    # The sum's loops under the parallel one: (rows), columns, (ob), chunks (no unit loops).
    loops = sch.get_loops(total)[1:]
    names = [name for name, ext in (("rows", rows), ("w", ow_extent), ("ob", ob_extent),
                                    ("ko", chunks)) if ext > 1]
    by_name = dict(zip(names, loops))
    if "w" not in by_name or "ko" not in by_name:
        raise ValueError("k-blocked conv without column or chunk loops")
    wo, wi = sch.split(by_name["w"], [None, tile])
    order = [by_name["ko"]] + ([by_name["rows"]] if "rows" in by_name else []) + [wo, wi] + \
        ([by_name["ob"]] if "ob" in by_name else [])
    sch.reorder(*order)
    sch.compute_at(block, wo)
    # Vectorize before decompose_reduction: the update block alone (its chunk loop
    # outside) is no "local reduction block" for the vectorize check.
    if ob_extent > 1:
        sch.vectorize(by_name["ob"])
    if tile > 1:
        sch.unroll(wi)
    init = sch.decompose_reduction(total, by_name["ko"])
    if ob_extent > 1:
        sch.vectorize(sch.get_loops(init)[-1])
    inner = int(tile > 1) + int(ob_extent > 1) + \
        sum(int(iv.iter_type) != 0 for iv in sch.get(block).iter_vars)
    loops = sch.get_loops(block)
    reductions = _tile_under(sch, block, loops[len(loops) - inner:], tile, ob_extent)
    if not rows_outer:  # light weights stay in L2 after a thread's first row group
        _mark_chunk_prefetch(sch, block, wo, reductions, by_name, rows, ow_extent // tile)


def _mark_chunk_prefetch(sch, block, tile_loop, reductions, loops: dict, rows: int,
                         tiles_per_row: int):
    """Mark a K-blocked conv for :func:`_next_chunk_prefetch`: the chunk loop, the row
    loop of the group (when there is one), the column-tile loop the chunk's register
    tile is computed at, and the loop the prefetches go at (:func:`_prefetch_loop`)."""
    kernel = _prefetched_kernel(sch, block)
    if kernel is None:
        return
    oc_blocks, per_block = _weights_per_block(kernel)
    chunks = int(sch.get(loops["ko"]).extent)
    out_rows = int(sch.get(block).writes[0].source.shape[3]) \
        if len(sch.get(block).writes[0].source.shape) == 6 else None
    if out_rows is None or per_block % chunks:
        return
    sch.annotate(loops["ko"], prefetch.ROLE_ATTR, "conv_chunk")
    if "rows" in loops:
        sch.annotate(loops["rows"], prefetch.ROLE_ATTR, "conv_rows")
    # Chunks are consecutive stretches of an output block's weights (input-channel
    # blocks, or kernel rows of one block): chunk ko of block cb starts at element
    # (cb * chunks + ko) * per_chunk.
    site = _prefetch_loop(sch, tile_loop, reductions)
    prefetch.mark(sch, site, "conv_chunk", str(kernel.name), oc_blocks, out_rows // rows,
                  chunks, per_block // chunks, rows, tiles_per_row)


def _mark_block_prefetch(sch, block, tile_loop, reductions, out_rows: int,
                         tiles_per_row: int):
    """Mark a blocked conv whose parallel loop runs over (batch, output block, row) for
    :func:`_next_block_prefetch`, when its weights are heavy enough to come from memory
    (more than ``ROWS_OUTER_MAX_WEIGHT_BYTES``: lighter ones run rows outside): at the
    loop :func:`_prefetch_loop` picks under its column-tile loop ``tile_loop``."""
    kernel = _prefetched_kernel(sch, block)
    if kernel is None:
        return
    oc_blocks, per_block = _weights_per_block(kernel)
    if oc_blocks < 2 or _light_weights(kernel):
        return
    site = _prefetch_loop(sch, tile_loop, reductions)
    prefetch.mark(sch, site, "conv_block", str(kernel.name), oc_blocks, out_rows, per_block,
                  tiles_per_row)


def _prefetched_kernel(sch, block, rank: int = 6):
    """The kernel buffer of a conv block to prefetch from, None when prefetching is
    switched off (``$BMLIB_CONV_PREFETCH``) or the kernel is not a static one of
    ``rank`` dims (6: the blocked direct kernel; 5: Winograd's ``U``)."""
    return _kernel_buffer(sch, block, rank) if switched_on(PREFETCH_ENV) else None


def _weights_per_block(kernel) -> tuple[int, int]:
    """(output-channel blocks, elements per block) of a static 6-D blocked kernel."""
    per_block = 1
    for d in kernel.shape[1:]:
        per_block *= int(d)
    return int(kernel.shape[0]), per_block


def _kernel_buffer(sch, block, rank: int = 6):
    """The ``rank``-D kernel a conv block reads (static shape), or None."""
    written = sch.get(block).writes[0].source
    kernels = [r.source for r in sch.get(block).reads
               if not r.source.same_as(written) and len(r.source.shape) == rank and
               all(isinstance(d, tirx.IntImm) for d in r.source.shape)]
    return kernels[0] if len(kernels) == 1 else None


TILE_ROLE = "conv_tile"


def _prefetch_loop(sch, tile_loop, reductions: list):
    """The loop a register tile's weight prefetch goes at: the tile's outermost
    reduction loop when another reduction loop is inside it, else the column-tile loop
    ``tile_loop`` itself (inside the innermost FMA loop a prefetch stops LLVM from
    keeping the accumulators in registers).  ``tile_loop`` is annotated ``TILE_ROLE``
    for :func:`_spread_step`."""
    sch.annotate(tile_loop, prefetch.ROLE_ATTR, TILE_ROLE)
    return reductions[0] if len(reductions) > 1 else tile_loop


def _spread_step(site: prefetch.PrefetchSite, row, tiles_per_row: int):
    """(this step's index among a row's steps, steps per row) for a prefetch at the
    loop :func:`_prefetch_loop` marked: a step is one iteration of a tile's outermost
    reduction loop in one of the row's ``tiles_per_row`` column tiles (the loop
    annotated ``TILE_ROLE``; absent when its extent is 1), or one column tile when
    the tile loop itself is marked.  None without the tile loop it needs.

    The next unit's lines are spread over these steps, a few before each, rather than
    all at the start of each tile: a burst of 70 prefetches at once fills the core's
    line-fill buffers and (likely) holds up the FMAs behind it until memory answers.
    ResNet-18's 14x14 -> 7x7 256->512 shortcut (one 7-pixel tile per row, 74 lines
    each) ran at 110 µs in the model with the burst, 85 µs spread over its 8
    input-channel blocks."""
    if str(site.loop.annotations.get(prefetch.ROLE_ATTR, "")) == TILE_ROLE:
        return row * tiles_per_row + site.loop.loop_var, tiles_per_row
    tile = site.role(TILE_ROLE)
    if tile is None and tiles_per_row > 1:
        return None
    steps = int(site.loop.extent)
    column = tile.loop_var if tile is not None else 0
    return (row * tiles_per_row + column) * steps + site.loop.loop_var, tiles_per_row * steps


@prefetch.register_prefetch("conv_block")
def _next_block_prefetch(site: prefetch.PrefetchSite):
    """While a blocked conv computes the rows of output block ``cb`` (every register
    tile reads the block's weights, L1-sized, from L1), fetch block ``cb + 1``'s
    weights into L2, spread over the block's tiles (rows x column tiles) and their
    reduction steps (:func:`_spread_step`).  The
    parallel loop is (batch, block, row) fused.  ResNet-50's 14x14 256->1024 1x1 (1 MB
    of weights, from memory on every run) ran at ~64 % of the FMA peak in the model."""
    name = str(site.mark[0])
    oc_blocks, out_rows, per_block, tiles_per_row = (int(v) for v in site.mark[1:])
    weight = site.buffers.get(name)
    outer = site.parallel
    if weight is None or outer is None:
        return None
    row = tirx.floormod(outer.loop_var, out_rows)
    step = _spread_step(site, row, tiles_per_row)
    if step is None:
        return None
    lines = -(-per_block // prefetch.elements_per_line(weight))
    block = tirx.floormod(tirx.floordiv(outer.loop_var, out_rows), oc_blocks)
    index, per_row = step
    return prefetch.spread_prefetch(weight, (block + 1) * per_block, lines,
                                    out_rows * per_row, index, limit=oc_blocks * per_block)


@prefetch.register_prefetch("conv_chunk")
def _next_chunk_prefetch(site: prefetch.PrefetchSite):
    """While a K-blocked conv computes chunk ``ko`` of output-channel block ``cb``
    (every register tile of its row group reads the chunk's weights from L1), fetch the
    chunk after it into L2: chunk ``ko + 1``, or the first chunk of block ``cb + 1``
    after the last (the weight is [O/ob, I/ib, KH, KW, ib, ob], so that is the next
    stretch of memory either way).  The chunk's cache lines are spread over its
    register tiles (row-group rows x column tiles) and their reduction steps, a few
    before each (:func:`_spread_step`); every address
    is clamped into the weight.

    The weights of a late-stage conv come from memory on every run (ResNet-18 streams
    46 MB), and the hardware prefetcher, which restarts at every chunk, hid little of
    it: ResNet-18's 7x7 3x3 convs ran at ~45 % of the FMA peak in the model."""
    name = str(site.mark[0])
    oc_blocks, row_groups, chunks, per_chunk, rows, tiles_per_row = \
        (int(v) for v in site.mark[1:])
    weight = site.buffers.get(name)
    outer, chunk_loop = site.parallel, site.role("conv_chunk")
    row_loop = site.role("conv_rows")
    if weight is None or outer is None or chunk_loop is None or \
            (rows > 1 and row_loop is None):
        return None
    step = _spread_step(site, row_loop.loop_var if rows > 1 else 0, tiles_per_row)
    if step is None:
        return None
    lines = -(-per_chunk // prefetch.elements_per_line(weight))
    block = tirx.floormod(tirx.floordiv(outer.loop_var, row_groups), oc_blocks)
    index, per_row = step
    return prefetch.spread_prefetch(weight, (block * chunks + chunk_loop.loop_var + 1) * per_chunk,
                                    lines, rows * per_row, index,
                                    limit=oc_blocks * chunks * per_chunk)


@register_schedule("bmlib.conv2d_1x1_gemm")
def schedule_conv2d_1x1_gemm(sch, block, ctx):
    """(batch, pixel tiles) parallel | channel tiles | reduction | channels
    (unrolled) x pixels (vectorized), with the NCHW epilogue per tile.

    Pixel tiles outermost: a tile's input column (every channel, a few vectors
    of pixels) stays in L1 while all the weights stream past it.
    """
    rows, cols = (int(v) for v in sch.get(block).annotations["bmlib_tile"])
    epilogue, (n, o, p) = _flat_epilogue(sch, block)
    oo, oi = sch.split(o, [None, rows])
    po, pi = sch.split(p, [None, cols])
    sch.reorder(n, po, oo, oi, pi)
    sch.parallel(sch.fuse(n, po))
    sch.compute_at(block, oo)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    _tile_under(sch, block, sch.get_loops(block)[2:], rows, cols)
    if rows > 1:
        sch.unroll(oi)
    sch.vectorize(pi)


# See tiles.SMALL_TILE_ACCUMULATORS.
DEPTHWISE_ACCUMULATORS = SMALL_TILE_ACCUMULATORS


@register_schedule("bmlib.depthwise_nchwc")
def schedule_depthwise_nchwc(sch, block, ctx):
    pointwise = _fused_pointwise(sch, block)
    if pointwise is None:
        _tile_conv(sch, block, ctx, budget=DEPTHWISE_ACCUMULATORS)
    else:
        _schedule_depthwise_pointwise(sch, block, pointwise, ctx)


def _fused_pointwise(sch, depthwise):
    """The light blocked 1x1 conv that reads this depthwise conv (through its
    element-wise epilogue) in the same partition (``bmlib.depthwise_pointwise*``),
    or None."""
    shape = sch.get(depthwise).writes[0].source.shape
    current = depthwise
    while True:  # the same-shape element-wise chain inline_epilogue folds, then the 1x1
        consumers = sch.get_consumers(current)
        if len(consumers) != 1 or is_scheduled(sch, consumers[0]):
            return None
        current = consumers[0]
        rule = sch.get(current).annotations.get(SCHEDULE_ATTR)
        if rule is not None:
            break
        written = sch.get(current).writes
        if any(int(iv.iter_type) != 0 for iv in sch.get(current).iter_vars) or \
                len(written) != 1 or not same_shape(written[0].source.shape, shape):
            return None
    if str(rule) != "bmlib.conv2d_nchwc" or len(sch.get(current).writes[0].source.shape) != 5:
        return None
    kernel = _kernel_buffer(sch, current)
    if kernel is None or [int(d) for d in kernel.shape[2:4]] != [1, 1] or \
            not _light_weights(kernel):
        return None
    return current


def _schedule_depthwise_pointwise(sch, depthwise, pointwise, ctx):
    """A depthwise conv and the 1x1 conv after it, one output row at a time.

    The 1x1 conv is tiled as :func:`_tile_conv` does with rows outside, but only the
    rows are parallel; under each row, before the 1x1's channel blocks, the
    depthwise conv's epilogue (its output after bias and activation) is computed for
    that row and every channel, in register tiles of its own.  The 1x1 conv then
    reads it from L1: the depthwise output, MobileNet's largest activations, is
    never written to memory and read back."""
    dw_epilogue = inline_epilogue(sch, depthwise)
    pw_epilogue = inline_epilogue(sch, pointwise)
    if dw_epilogue is None or pw_epilogue is None:
        raise ValueError("depthwise + 1x1 conv without their epilogues")
    lanes = ctx.lanes(str(sch.get(pointwise).writes[0].source.dtype))
    ow, ob = (int(d) for d in sch.get(pointwise).writes[0].source.shape[3:])
    reg = divisor_at_most(ow, tile_pixels(ob, lanes, vector_registers(ctx.target)))
    n, cb, h, w, ci = sch.get_loops(pw_epilogue)
    wo, wi = sch.split(w, [None, reg])
    sch.reorder(n, h, cb, wo, wi, ci)
    row = sch.fuse(n, h)
    sch.parallel(row)
    _register_tile(sch, pointwise, wo, wi, ci, reg, ob)
    sch.compute_at(dw_epilogue, row)
    dw_ow, dw_ob = (int(d) for d in sch.get(depthwise).writes[0].source.shape[3:])
    loops = sch.get_loops(dw_epilogue)[1:]  # under the row: (channel blocks,) columns, lanes
    if len(loops) not in (2, 3) or dw_ow == 1 or dw_ob == 1:
        raise ValueError(f"unexpected depthwise epilogue loops under the row: {len(loops)}")
    dw_cols, dw_ci = loops[-2], loops[-1]
    dw_reg = divisor_at_most(dw_ow, tile_pixels(dw_ob, lanes, budget=DEPTHWISE_ACCUMULATORS))
    dw_wo, dw_wi = sch.split(dw_cols, [None, dw_reg])
    _register_tile(sch, depthwise, dw_wo, dw_wi, dw_ci, dw_reg, dw_ob)
    ctx.done.update(str(sch.get(b).name_hint) for b in (dw_epilogue, pw_epilogue, pointwise))
