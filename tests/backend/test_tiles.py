"""Register tiles of the blocked convs on 16 vector registers (AVX2): where no tile
divides the output width, the pixels are tiled flat, and the tile of 5 or 6 pixels
that pads them least is taken (``templates/tiles.pixel_tile``): a 7x7 output is 50
pixels in 5-pixel tiles, 54 in 6-pixel ones."""
from __future__ import annotations

import re

import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.target import resolve_target, vector_lanes
from bmlib_relax.backend.templates.tiles import pixel_tile
from bmlib_relax.compiler import lower_and_verify

from helpers import check_offloaded_run, make_module

AVX2 = {"kind": "llvm", "mcpu": "znver3"}
R = relax.op


@pytest.mark.parametrize("width, height, pixels", [
    (7, 7, 5),      # 50 of 5-pixel tiles, 54 of 6
    (14, 14, 6),    # 198 either way: the longer tile
    (13, 13, 5),    # 170 against 174
    (28, 28, 4),    # row-tiled: the 8-accumulator tile divides the width
    (12, 3, 6),     # row-tiled: the full tile divides it
    (10, 10, 5),    # the 5-pixel tile divides the width: row-tiled too
])
def test_flat_tiles_on_16_registers_pad_the_fewest_pixels(width, height, pixels):
    assert pixel_tile(16, 8, 16, width, height) == pixels
    assert pixel_tile(32, 16, 32, width, height) == 7  # 32 registers: 14 accumulators


def test_a_7x7_conv_built_for_avx2_runs_its_5_pixel_tiles():
    """The 1x1 conv (the 3x3 before it, stride 1, goes to Winograd)."""
    if vector_lanes(resolve_target(None)) < 8:
        pytest.skip("the host cannot run AVX2 code")
    mod, arrays = make_module(
        lambda x, w1, w2: R.nn.relu(R.nn.conv2d(R.nn.relu(R.nn.conv2d(x, w1, padding=1)), w2)),
        [(1, 8, 7, 7)], [(32, 8, 3, 3), (48, 32, 1, 1)])
    partitioned = partition_for_bmlib(mod, target=AVX2)
    tiles = [int(t) for prim, _ in lower_and_verify(partitioned, target=AVX2).values()
             for t in re.findall(r'"bmlib_tile_pixels": (\d+)', prim.script())]
    assert tiles and set(tiles) == {5}
    check_offloaded_run(mod, partitioned, arrays)
