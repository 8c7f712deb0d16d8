"""Register tiles of the blocked conv templates, and the output-channel block they use.

A register tile of a blocked conv keeps ``vectors x pixels`` accumulators in vector
registers: ``vectors = ob / lanes`` per output-channel block, ``pixels`` output
pixels.  How many fit is the target's: 12 of 16 AVX2 registers, 14 of 32 AVX-512
ones.  The direct conv (:mod:`.conv`) and the Winograd GEMM (:mod:`.conv_winograd`)
size their tiles from here, and the weight packing (:mod:`..rewrite`) and the
Winograd transform block their output channels by :func:`output_block`.

A tile runs along output rows when its width divides the output width
(:func:`pixel_tile`); otherwise the conv template tiles the output pixels as one
flat axis, padded to whole tiles.  A one-vector block with a 7-pixel row tile for
AVX2's 7- and 14-wide layers measured 3-5 % slower on whole models than the
flat tiling (then of 2 x 4 pixels): each input broadcast feeds one FMA instead of
two.
"""
from __future__ import annotations

from typing import Optional

from ..schedule import divisor_at_most

# Vector accumulators of a register tile (output pixels x vectors per channel
# block) with 16 registers (AVX2): 12 (2 vectors x 6 pixels) leaves one register
# for the input broadcast and two for weights; 14 and 16 spill (1.4-2.2x slower).
# Against the former 8 (AVX2 code on a Zen 4 host, interleaved in one process,
# 2026-12-03), as :func:`pixel_tile` uses them: ResNet-50 0.87-0.88x the time at 1
# and 2 threads, ResNet-18 0.82-0.85x, MobileNet 1.0-1.06x at 1 thread and 0.93x
# at 2 (12 flat everywhere: 0.83, 0.83-0.86, 0.90-0.98; 10: like 12).
ACCUMULATORS = 12
# With 32 registers (AVX-512): 14 (2 vectors x 7 pixels), 1.09-1.26x over 8 on
# ResNet-18's 3x3 convs.  14 zmm = 896 B stays under TVM's 1 KiB stack-alloca
# limit: a larger tile (28 measured 1.0-1.1x faster still) becomes a workspace
# allocation per tile (see docs/drafts/h-perf.md).
ACCUMULATORS_32_REGISTERS = 14
# The shortest flat tile on 16 registers (2 vectors x 5 pixels): per FLOP as fast as
# 12 measured flat everywhere, and it pads fewer pixels where 6 leaves a ragged last
# tile: a 7x7 output is 50 pixels in 5-pixel tiles, 54 in 6-pixel ones.  AVX2 code
# on a Zen 4 host, interleaved in one process (2026-12-04), 5 against 6 on the 7x7
# stages: ResNet-18 0.97-0.98x the time at 1 thread, 0.99x at 2; ResNet-50 0.99x and
# 0.98x; MobileNet 0.99x.
FLAT_MIN_ACCUMULATORS = 10
# The depthwise conv, whatever the registers: a 9-tap reduction per tile gains
# nothing from a longer tile (AVX-512: 14 was 1.0-1.3x slower at 28, measured).
# Grouped and transposed convs keep it too (not re-measured).
SMALL_TILE_ACCUMULATORS = 8


def accumulators(registers: int) -> int:
    """Accumulators of a register tile on a target with ``registers`` vector registers."""
    return ACCUMULATORS_32_REGISTERS if registers >= 32 else ACCUMULATORS


def tile_pixels(ob: int, lanes: int, registers: int = 16, budget: Optional[int] = None) -> int:
    """Output pixels of a register tile: the accumulators ``registers`` vector
    registers allow (or ``budget`` of them), over ``ob`` channels."""
    return max(1, (budget or accumulators(registers)) // max(1, ob // lanes))


def pixel_tile(ob: int, lanes: int, registers: int, out_width: int,
               out_height: Optional[int] = None) -> int:
    """Pixels of the register tile of a conv whose output is ``out_width`` wide (and
    ``out_height`` high).

    The full tile when it divides the width (the conv runs row-tiled), else the full
    tile over flat pixels -- except on 16 registers, where the 8-accumulator tile
    (2 vectors x 4 pixels) runs row-tiled where it divides: ResNet's and MobileNet's
    112 ... 28-wide outputs, which 6 does not divide.  Against 6-pixel flat tiles
    there (AVX2 code on Zen 4, 2026-12-03): ResNet-50 1.04x the time at 1 thread but
    0.97x at 2, ResNet-18 0.98x and 0.95x, MobileNet 1.04-1.08x and 1.03x; and the
    row-tiled schedules (K-blocking, rows outside, the fused depthwise + 1x1) apply.
    Flat on 16 registers, the tile of at least ``FLAT_MIN_ACCUMULATORS`` that pads the
    ``out_width x out_height`` pixels least (the longer on a tie).
    """
    full = tile_pixels(ob, lanes, registers)
    if out_width % full == 0 or registers >= 32:
        return full
    narrow = tile_pixels(ob, lanes, budget=SMALL_TILE_ACCUMULATORS)
    if out_width % narrow == 0:
        return narrow
    if out_height is None:
        return full
    pixels = out_width * out_height
    shortest = tile_pixels(ob, lanes, budget=FLAT_MIN_ACCUMULATORS)
    return min(range(full, shortest - 1, -1), key=lambda t: -(-pixels // t) * t)


def output_block(out_channels: int, lanes: int) -> int:
    """Output channels per vectorized block: two vectors when they divide the
    channels (a tile then reuses each input broadcast twice), else the largest
    divisor of the channels up to one vector."""
    if out_channels % (2 * lanes) == 0:
        return 2 * lanes
    return divisor_at_most(out_channels, lanes)
