"""Grouped ``conv2d`` (1 < groups, not depthwise: ResNeXt, ShuffleNet, RegNet):
the NCHW[ib]c / NCHW[ob]c direct convolution of :mod:`.conv`, one group at a time.

Channels are blocked *inside* a group: ``ib`` divides the input channels of a
group and ``ob`` its output channels (``conv2d_blocking`` of the per-group
counts, so ``ob`` is one or two vectors when a group is that wide).  An output
block then belongs to exactly one group, and its reduction runs over that
group's input-channel blocks only.  The weight ``(O, I/groups, KH, KW)`` is an
ordinary OIHW weight of ``I/groups`` input channels, so the compile-time packing
of :mod:`..rewrite` gives it the same ``OIHW{ib}i{ob}o`` layout as a dense
convolution (``[O/ob, I/groups/ib, KH, KW, ib, ob]``).  The schedule is the
dense convolution's register tiling (``ob`` vectorized, a tile of output
columns unrolled, rows in parallel, the epilogue per tile).

Depthwise convolutions (groups == channels) keep their own template in
:mod:`.conv`; a depthwise convolution with a channel multiplier still takes
topi's there.
"""
from __future__ import annotations

from tvm import te, tirx

from ..rewrite import conv2d_blocking
from ..schedule import divisor_at_most
from . import conv
from .registry import SCHEDULE_ATTR, register_schedule
from .tiles import SMALL_TILE_ACCUMULATORS, tile_pixels


def group_blocking(channels: int, out_channels: int, groups: int, lanes: int) -> tuple[int, int]:
    """``(ib, ob)`` of a grouped conv: the dense blocking of one group's channels."""
    return conv2d_blocking(channels // groups, out_channels // groups, lanes)


def group_conv2d(data: te.Tensor, weight: te.Tensor, blocking, strides, padding, dilation,
                 groups: int, dtype: str, ctx) -> te.Tensor:
    """NCHW data, OIHW or ``OIHW{ib}i{ob}o`` weight (``blocking``) → NCHW output."""
    channels = int(data.shape[1])
    lanes = ctx.lanes(dtype)
    if blocking is None:
        out_channels = int(weight.shape[0])
        blocking = group_blocking(channels, out_channels, groups, lanes)
        weight = conv.pack_kernel(weight, *blocking)
    ib, ob = blocking
    out_channels = int(weight.shape[0]) * ob
    if (out_channels // groups) % ob:
        # A block of output channels spanning two groups would read one group's inputs.
        raise ctx.error(f"grouped conv2d: kernel layout OIHW{ib}i{ob}o blocks {ob} output "
                        f"channels, which does not divide the {out_channels // groups} "
                        f"of a group (groups={groups})")
    return group_conv2d_nchwc(data, weight, strides, padding, dilation, groups, dtype, ib, ob,
                              lanes)


def group_conv2d_nchwc(data, kernel, strides, padding, dilation, groups, dtype, ib, ob, lanes):
    """``kernel`` is ``[O/ob, I/groups/ib, KH, KW, ib, ob]``; output block ``oc``
    belongs to group ``oc // (O/groups/ob)`` and reads that group's input blocks."""
    padding = conv._padding4(padding)
    n = data.shape[0]  # left symbolic if it is (a free batch): no int()
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    oc_blocks, ic_blocks = int(kernel.shape[0]), int(kernel.shape[1])
    blocks_per_group = oc_blocks // groups
    oh, ow = conv._out_size(data, (kh, kw), strides, padding, dilation)
    packed = conv._pad_pack(data, ib, padding, (oh, ow), (kh, kw), strides, dilation)
    axes = conv._reduce_axes(ico=ic_blocks, kh=kh, kw=kw, ici=ib)
    ico, ry, rx, ici = (axes.get(k, 0) for k in ("ico", "kh", "kw", "ici"))

    def window(nn, oc, y, x, oo):
        group_block = oc // blocks_per_group * ic_blocks + ico
        value = packed[nn, group_block, y * strides[0] + ry * dilation[0],
                       x * strides[1] + rx * dilation[1], ici].astype(dtype)
        return conv._sum(value * kernel[oc, ico, ry, rx, ici, oo].astype(dtype), axes)

    return blocked_output(window, (n, oc_blocks, oh, ow, ob), dtype, "bmlib_group_conv2d_nchwc",
                          "bmlib.group_conv2d_nchwc",
                          tile_pixels(ob, lanes, budget=SMALL_TILE_ACCUMULATORS))


def blocked_output(window, shape, dtype: str, name: str, rule: str, row_tile: int) -> te.Tensor:
    """The NCHW[ob]c output block computing ``window(n, oc, y, x, oo)``, tagged
    ``rule``, and its NCHW unpack.

    When no divisor of the output width fills half a register tile (7x7 maps, 14x14
    with 4-pixel tiles), the output pixels become one flat axis padded to whole tiles, tagged
    ``rule + "_flat"``: the layout of ``conv.conv2d_nchwc``'s flat convolution, so
    its schedule applies (the padding pixels recompute the last real one).
    ``row_tile=0`` keeps rows (the schedule then tiles by a divisor of the width).
    """
    n, oc_blocks, oh, ow, ob = shape
    if not row_tile or 2 * divisor_at_most(ow, row_tile) > row_tile:
        out = te.compute(conv.batched(n, oc_blocks, oh, ow, ob), window, name=name, attrs={SCHEDULE_ATTR: rule})
        return conv._unpack(out, ob, dtype)
    pixels = oh * ow
    padded = -(-pixels // row_tile) * row_tile

    def flat(nn, oc, p, oo):
        real = tirx.min(p, pixels - 1)
        return window(nn, oc, real // ow, real % ow, oo)

    out = te.compute(conv.batched(n, oc_blocks, padded, ob), flat, name=name + "_flat",
                     attrs={SCHEDULE_ATTR: rule + "_flat", "bmlib_tile_pixels": row_tile})
    return te.compute(conv.batched(n, oc_blocks * ob, oh, ow),
                      lambda nn, c, y, x: out[nn, c // ob, y * ow + x, c % ob].astype(dtype),
                      name="bmlib_unpack")


@register_schedule("bmlib.group_conv2d_nchwc")
def schedule_group_conv2d_nchwc(sch, block, ctx):
    """The dense NCHW[ob]c register tiling (see ``conv._tile_conv``)."""
    conv._tile_conv(sch, block, ctx)


@register_schedule("bmlib.group_conv2d_nchwc_flat")
def schedule_group_conv2d_nchwc_flat(sch, block, ctx):
    """The dense flat-pixel register tiling (see ``conv.schedule_conv2d_nchwc_flat``)."""
    conv.schedule_conv2d_nchwc_flat(sch, block, ctx)
