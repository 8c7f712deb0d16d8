"""conv2d register tiles sized by the target's vector registers (issue #15).

With 32 vector registers (AVX-512) the NCHW[c] conv2d tile holds 14
accumulators (2 vectors x 7 output pixels, under 1 KiB so it stays a stack
slot) instead of the 8 that 16 AVX2 registers allow; depthwise keeps 8.
Checked on the scheduled TIR for an explicit AVX-512 and AVX2 target (no
build, no timing), and for correctness against the plain build on the host
when it has AVX-512.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.target import vector_bits, vector_registers
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
AVX2 = {"kind": "llvm", "mcpu": "haswell"}


@pytest.fixture(autouse=True)
def _direct_template(monkeypatch):
    """These are the direct template's tiles: no Winograd (test_conv_winograd.py has its own)."""
    monkeypatch.setenv("BMLIB_WINOGRAD", "0")


def _conv_bias_relu(strides=1, padding=1, groups=1):
    def build(x, w, b):
        out = R.nn.conv2d(x, w, strides=strides, padding=padding, groups=groups)
        return R.nn.relu(R.add(out, R.reshape(b, (int(w.ty.shape.values[0]), 1, 1))))

    return build


def _tile(prim, block: str) -> tuple[int, int]:
    """(unrolled pixels, vectorized channels) of ``block``'s register tile."""
    sch = s_tir.Schedule(prim.without_attr("global_symbol"))
    kinds = [(sch.get(loop).kind, int(sch.get(loop).extent))
             for loop in sch.get_loops(sch.get_sblock(block))]
    vector = [i for i, (kind, _) in enumerate(kinds) if kind == tvm.tirx.ForKind.VECTORIZED]
    assert vector, f"{block} has no vectorized loop"
    unrolled = kinds[vector[-1] - 1]
    assert unrolled[0] == tvm.tirx.ForKind.UNROLLED
    return unrolled[1], kinds[vector[-1]][1]


def _lowered(mod, target):
    partitioned = partition_for_bmlib(mod, target=target)
    assert offloaded_partitions(partitioned)
    (prim, _), = lower_and_verify(partitioned, target=target).values()
    return prim


def test_vector_registers_follow_the_target():
    assert vector_registers(AVX512) == 32
    assert vector_registers(AVX2) == 16


@pytest.mark.parametrize("target, tile", [
    (AVX512, (7, 32)),   # 2 zmm vectors of channels x 7 pixels: 14 accumulators
    (AVX2, (4, 16)),     # 2 ymm vectors x 4 pixels: 6 (12 accumulators) does not divide 28
])
def test_conv2d_tile_grows_with_the_register_file(target, tile):
    mod, _ = make_module(_conv_bias_relu(), [(1, 16, 28, 28)], [(32, 16, 3, 3), (32,)])
    prim = _lowered(mod, target)
    assert _tile(prim, "bmlib_conv2d_nchwc_update") == tile


@pytest.mark.parametrize("width, block, tile", [
    (24, "bmlib_conv2d_nchwc_update", (6, 16)),       # 2 ymm x 6 pixels along rows
    (28, "bmlib_conv2d_nchwc_update", (4, 16)),       # 6 does not divide 28, 4 does
    (14, "bmlib_conv2d_nchwc_flat_update", (6, 16)),  # neither: flat tiles of 6 pixels
])
def test_avx2_conv2d_tiles_hold_12_accumulators_unless_only_8_make_whole_rows(width, block,
                                                                            tile):
    mod, _ = make_module(_conv_bias_relu(), [(1, 16, width, width)], [(32, 16, 3, 3), (32,)])
    prim = _lowered(mod, AVX2)
    assert _tile(prim, block) == tile


def test_5x5_conv2d_on_avx512_takes_flat_tiles_of_7_pixels():
    # 25 pixels take no whole row tile of 7: one flat axis padded to 28.
    mod, _ = make_module(_conv_bias_relu(), [(1, 16, 5, 5)], [(32, 16, 3, 3), (32,)])
    prim = _lowered(mod, AVX512)
    assert "bmlib_conv2d_nchwc_flat" in prim.script()
    assert _tile(prim, "bmlib_conv2d_nchwc_flat_update") == (7, 32)


def test_depthwise_keeps_8_accumulators_on_avx512():
    mod, _ = make_module(_conv_bias_relu(groups=32), [(1, 32, 16, 16)], [(32, 1, 3, 3), (32,)])
    prim = _lowered(mod, AVX512)
    assert _tile(prim, "bmlib_depthwise_nchwc_update") == (8, 16)


@pytest.mark.skipif(vector_bits(None) < 512, reason="the host has no AVX-512")
@pytest.mark.parametrize("data, weight, strides", [
    ((1, 16, 28, 28), (32, 16, 3, 3), 1),   # row tiles of 7
    ((1, 16, 10, 10), (64, 16, 3, 3), 2),   # 5x5 output: flat tiles, padded 25 -> 28
    ((2, 8, 12, 12), (48, 8, 3, 3), 1),     # 48 channels: one-vector blocks, 14-pixel tiles
])
def test_wide_tiles_compute_what_the_plain_build_computes(data, weight, strides):
    mod, arrays = make_module(_conv_bias_relu(strides=strides), [data],
                              [weight, (weight[0],)])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)
