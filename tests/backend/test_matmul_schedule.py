"""The matmul schedule: packed B panels and whole-vector register tiles, checked
structurally (speed is measured only by scripts/bench.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.target import vector_lanes
from bmlib_relax.backend.templates.linalg import (MAX_ACCUMULATORS, WIDE_ACCUMULATORS,
                                                  matmul_tile)
from bmlib_relax.compiler import lower_and_verify

from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _dense_bias_relu(x, w, b):
    return R.nn.relu(R.add(R.matmul(x, R.permute_dims(w, [1, 0])), b))


def _lowered_script(mod) -> tuple[str, object]:
    partitioned = partition_for_bmlib(mod)
    (prim, _), = lower_and_verify(partitioned).values()
    return prim.script(), partitioned


@pytest.mark.parametrize("budget", [MAX_ACCUMULATORS, WIDE_ACCUMULATORS])
@pytest.mark.parametrize("rows, cols, lanes", [(128, 3072, 16), (128, 768, 8), (16, 64, 16),
                                               (7, 96, 8), (1, 1000, 16), (3, 40, 4),
                                               (1, 768, 16)])
def test_register_tile_fits_the_budget_and_divides_the_output(rows, cols, lanes, budget):
    rows_tile, cols_tile = matmul_tile(rows, cols, lanes, budget)
    assert rows % rows_tile == 0 and cols % cols_tile == 0
    if cols % lanes == 0:
        assert cols_tile % lanes == 0
        assert rows_tile * (cols_tile // lanes) <= budget  # accumulators fit the registers


def test_bert_shaped_tile_uses_24_accumulators_with_32_registers():
    assert matmul_tile(128, 768, 16, WIDE_ACCUMULATORS) == (8, 48)
    assert matmul_tile(128, 768, 16, MAX_ACCUMULATORS) == (4, 48)


def test_large_matmul_reads_b_through_a_packed_panel_with_whole_vectors():
    # N a multiple of 1024 bytes: without the panel, B's rows alias in the caches.
    # B is an input here; a constant weight is packed at compile time instead.
    mod, arrays = make_module(lambda x, w: R.nn.relu(R.matmul(x, w)), [(32, 256), (256, 1024)])
    script, partitioned = _lowered_script(mod)
    lanes = vector_lanes(None)
    panel = re.search(r"(\w+_global) = T\.sblock_alloc_buffer", script)
    assert panel, script
    # The panel is filled inside the parallel loop, then read by the matmul.
    parallel_at = script.index("T.parallel(")
    assert script.index(f'T.sblock("{panel.group(1)}")') > parallel_at
    assert f"{panel.group(1)}[v_k, v_i1]" in script
    widths = {int(w) for w in re.findall(r"T\.vectorized\((\d+)\)", script)}
    assert widths == {lanes}, widths  # 48-wide LLVM vectors were 10x slower
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)


def test_small_or_single_row_matmul_is_not_packed():
    mod, arrays = make_module(lambda x, w: R.nn.relu(R.matmul(x, w)), [(1, 512), (512, 1000)])
    script, partitioned = _lowered_script(mod)
    assert "_global = T.sblock_alloc_buffer" not in script  # no reuse: no copy
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)


def test_batch_matmul_with_packed_panels_matches_plain_build():
    def bmm(a, b):
        return R.matmul(a, R.permute_dims(b, [0, 2, 1]))

    mod, arrays = make_module(bmm, [(3, 64, 48), (3, 256, 48)])
    script, partitioned = _lowered_script(mod)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)


def test_outer_product_matmul_keeps_its_schedule():
    # K = 1 (a dense over one feature): no reduction loop, the rule still applies.
    import warnings

    mod, arrays = make_module(_dense_bias_relu, [(64, 1)], [(4, 1), (4,)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        script, partitioned = _lowered_script(mod)
    assert "T.parallel(" in script
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)
