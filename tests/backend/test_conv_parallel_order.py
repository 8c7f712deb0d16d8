"""Which loop a blocked conv parallelizes first (templates/conv.py: _rows_outer): output
rows outside the output-channel blocks when the weights are light (every thread then
reads only its rows of the input), the channel blocks outside when they are heavy (rows
outside would stream the weights once per row); ``$BMLIB_CONV_ROWS_OUTER=0`` keeps the
blocks outside.  A conv with the blocks outside prefetches the next block's weights.
Structure only, with numerics against the plain build."""
from __future__ import annotations

import importlib

import pytest
from tvm import relax, tirx

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.codegen import build_prim_funcs
from bmlib_relax.compiler import lower_and_verify

from helpers import (assert_prefetches_next_unit, assert_spread_over_reduction,
                     check_offloaded_run, index_value, innermost_fma_loops, make_module,
                     prefetch_calls, update_realizes)

conv_templates = importlib.import_module("bmlib_relax.backend.templates.conv")
R = relax.op
PAIR_INPUT = (1, 8, 8, 112)


def _pair(x, w1, w2):
    """Two 3x3 stride-2 convs (no Winograd, no K-blocking at these sizes): the second
    reads the first's blocked output.  Fed an 8x112 input (outputs 4x56, 2x28): widths
    that are whole register tiles on AVX2 (4 pixels) and AVX-512 (7), so the row-tiled
    schedule is the one under test on either machine."""
    a = R.nn.relu(R.nn.conv2d(x, w1, strides=2, padding=1))
    return R.nn.relu(R.nn.conv2d(a, w2, strides=2, padding=1))


def _second_iteration(partitioned) -> dict[int, tuple[int, int]]:
    """{input channels: (output-channel block, output row)} of every conv's second
    parallel iteration (the other loops at 0)."""
    found = {}
    for prim, _ in lower_and_verify(partitioned).values():
        for loops, realize in update_realizes(prim.body, "bmlib_conv2d_nchwc"):
            parallel = [l for l in loops if int(l.kind) == int(tirx.ForKind.PARALLEL)]
            assert len(parallel) == 1
            env = {l.loop_var: int(l.loop_var.same_as(parallel[0].loop_var)) for l in loops}
            n, oc_block, row = (index_value(v, env) for v in realize.iter_values[:3])
            (kernel,) = [r.source for r in realize.block.reads if len(r.source.shape) == 6]
            found[int(kernel.shape[1]) * int(kernel.shape[4])] = (oc_block, row)
    return found


@pytest.mark.parametrize("channels, rows_outer", [(64, True), (512, False)])
def test_light_weights_parallelize_rows_first(channels, rows_outer, monkeypatch):
    """The second conv (4x56 -> 2x28) with 64 channels has 144 KiB of weights: rows
    outside (parallel iteration 1 is block 1 of row 0); with 512, 9 MiB: blocks
    outside (iteration 1 is row 1 of block 0)."""
    monkeypatch.delenv(conv_templates.ROWS_OUTER_ENV, raising=False)
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, "0")
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")  # keeps the functions unflattened
    mod, arrays = make_module(_pair, [PAIR_INPUT], [(channels, 8, 3, 3),
                                                        (channels, channels, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    # the 8->C conv (at most 144 KiB of weights) always has its rows outside
    assert _second_iteration(partitioned) == {8: (1, 0),
                                              channels: (1, 0) if rows_outer else (0, 1)}
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.ROWS_OUTER_ENV, "0")
    assert _second_iteration(partitioned) == {8: (0, 1), channels: (0, 1)}


def test_heavy_conv_prefetches_the_next_output_blocks_weights(monkeypatch):
    """Blocks outside (160->160 3x3: 900 KiB of weights): while the rows of output block
    ``cb`` are computed, the prefetch loops fetch every cache line of block ``cb + 1``'s
    weights (the last block fetches itself, clamped), and nothing outside the weight;
    a few lines before each reduction step of a tile, never in the innermost FMA loop."""
    monkeypatch.delenv(conv_templates.ROWS_OUTER_ENV, raising=False)
    monkeypatch.delenv(conv_templates.PREFETCH_ENV, raising=False)
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, "0")
    mod, arrays = make_module(_pair, [PAIR_INPUT], [(160, 8, 3, 3), (160, 160, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    prims = [prim for prim, _ in lower_and_verify(partitioned).values()
             if "T.prefetch" in prim.script()]
    (prim,) = prims  # the 8->160 conv is light: rows outside, no prefetch
    (kernel,) = [p for p in prim.params if len(p.shape) == 6]
    oc_blocks = int(kernel.shape[0])
    per_block = 1
    for d in kernel.shape[1:]:
        per_block *= int(d)
    total = oc_blocks * per_block
    (path, call), = list(prefetch_calls(prim.body))
    outer = path[0]
    assert int(outer.kind) == int(tirx.ForKind.PARALLEL)
    rows = int(outer.extent) // oc_blocks
    assert_prefetches_next_unit(path, call, total, per_block, rows)
    assert_spread_over_reduction(path)
    loops = innermost_fma_loops(build_prim_funcs({"heavy": prim}, None).inspect_source("asm"))
    assert loops and not any("prefetch" in body for body in loops)
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")
    assert not any("T.prefetch" in p.script() for p, _ in lower_and_verify(partitioned).values())
