"""Register tiles of the blocked conv templates, and the output-channel block they use.

A register tile of a blocked conv keeps ``vectors x pixels`` accumulators in vector
registers: ``vectors = ob / lanes`` per output-channel block, ``pixels`` output
pixels.  How many fit is the target's: 8 of 16 AVX2 registers, 14 of 32 AVX-512
ones.  The direct conv (:mod:`.conv`) and the Winograd GEMM (:mod:`.conv_winograd`)
size their tiles from here, and the weight packing (:mod:`..rewrite`) and the
Winograd transform block their output channels by :func:`output_block`.

A tile runs along output rows when its width divides the output width; otherwise
the conv template tiles the output pixels as one flat axis, padded to whole tiles.
On AVX2 (2 vectors x 4 pixels) that is every 7- and 14-wide layer.  A one-vector
block with a 7-pixel row tile there (so the row-tiled schedules apply) measured
3-5 % slower on whole models (ResNet-18/50, MobileNet, AVX2 code on a Zen 4 host,
2026-12-03): each input broadcast then feeds one FMA instead of two.
"""
from __future__ import annotations

# Vector accumulators of a register tile (output columns x vectors per channel
# block): 8 leaves room for operands in 16 AVX2 registers (14 spilled, measured).
ACCUMULATORS = 8
# With 32 registers (AVX-512): 14 (2 vectors x 7 pixels), 1.09-1.26x over 8 on
# ResNet-18's 3x3 convs.  14 zmm = 896 B stays under TVM's 1 KiB stack-alloca
# limit: a larger tile (28 measured 1.0-1.1x faster still) becomes a workspace
# allocation per tile (see docs/drafts/h-perf.md).
ACCUMULATORS_32_REGISTERS = 14


def accumulators(registers: int) -> int:
    """Accumulators of a register tile on a target with ``registers`` vector registers."""
    return ACCUMULATORS_32_REGISTERS if registers >= 32 else ACCUMULATORS


def tile_pixels(ob: int, lanes: int, registers: int = 16) -> int:
    """Output pixels of a register tile: the accumulators ``registers`` vector
    registers allow, over ``ob`` channels."""
    return max(1, accumulators(registers) // max(1, ob // lanes))


def output_block(out_channels: int, lanes: int) -> int:
    """Output channels per vectorized block: two vectors when they divide the
    channels (a tile then reuses each input broadcast twice), else the largest
    divisor of the channels up to one vector."""
    if out_channels % (2 * lanes) == 0:
        return 2 * lanes
    return max(d for d in range(1, min(out_channels, lanes) + 1) if out_channels % d == 0)
