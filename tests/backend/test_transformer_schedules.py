"""The transformer-layer schedules (#15): compile-time packed dense panels, the GEMV
path, the GELU epilogue's vectorized erf, the per-row softmax / layer_norm with
vector row reductions.  Numerics against the plain TVM build or numpy, offload
asserted first, structure checked where it is what makes the path fast; never speed."""
from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.codegen import build_prim_funcs
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.backend.target import vector_bits, vector_lanes
from bmlib_relax.backend.templates.linalg import (KSPLIT_ENV, k_blocks, packed_panel_width,
                                                  ragged_columns)
from bmlib_relax.compiler import lower_and_verify

from conftest import host_ops_besides_views, offloaded_partitions
from helpers import innermost_fma_loops, make_module, run_offloaded, run_plain

R = relax.op
LANES = vector_lanes(None)


def _const(value: float):
    return relax.const(value, "float32")


def _dense_bias(x, w, b):
    return R.add(R.matmul(x, R.permute_dims(w, [1, 0])), b)


def _dense_bias_gelu(x, w, b):
    y = _dense_bias(x, w, b)
    return R.multiply(R.multiply(y, _const(0.5)),
                      R.add(_const(1.0), R.erf(R.multiply(y, _const(0.7071068)))))


def _lower(mod):
    """(partitioned module, {partition: scheduled PrimFunc}); no block left unscheduled."""
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        lowered = lower_and_verify(partitioned)
    return partitioned, {name: prim for name, (prim, _) in lowered.items()}


def _check(mod, arrays, partitioned, rtol=1e-5, atol=1e-5):
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=rtol, atol=atol)


def _param_shapes(prim) -> list[tuple]:
    """The static shapes of the PrimFunc's buffers (its parameters are buffers)."""
    return [tuple(int(d) for d in p.shape) for p in prim.params
            if all(isinstance(d, tvm.tirx.IntImm) for d in p.shape)]


# ----------------------------------------------------------------- dense: packed panels
@pytest.mark.parametrize("rows, k, n", [(16, 37, 4 * LANES), (9, 64, 6 * LANES),
                                        (24, 5, 3 * LANES)])
@pytest.mark.parametrize("epilogue", [_dense_bias, _dense_bias_gelu])
def test_dense_reads_weight_packed_at_compile_time(rows, k, n, epilogue):
    mod, arrays = make_module(epilogue, [(rows, k)], [(n, k), (n,)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    width = packed_panel_width(rows, n, LANES)
    assert (n // width, k, width) in _param_shapes(prim)  # [N / nr, K, nr] panels
    script = prim.script()
    assert "_global = T.sblock_alloc_buffer" not in script  # no panel copy at run time
    # one loop nest, parallel: the epilogue (bias; GELU's two branches joined) runs
    # per tile, not in a pass of its own
    top_loops = re.findall(r"^    for .*$", script, flags=re.M)
    assert len(top_loops) == 1 and "T.parallel(" in top_loops[0], top_loops
    _check(mod, arrays, partitioned)


@pytest.mark.parametrize("rows, k, n", [(8, 16, 37), (3, 37, 2 * LANES + 3),
                                        (10, 24, 7 * LANES + 1)])
@pytest.mark.parametrize("epilogue", [_dense_bias, _dense_bias_gelu])
def test_dense_with_columns_off_the_vector_runs_whole_vectors_and_is_correct(rows, k, n,
                                                                            epilogue):
    """A vocabulary-sized output (33278 words) is no multiple of the vector: the
    columns are padded to whole vectors (the FMAs run full-width, not on the largest
    divisor of the columns up to a vector), the padding dropped per tile."""
    mod, arrays = make_module(epilogue, [(rows, k)], [(n, k), (n,)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    assert all(len(shape) < 3 for shape in _param_shapes(prim))  # not packed
    assert ragged_columns(rows, n, LANES) % LANES == 0
    script = prim.script()
    update = script[script.index('T.sblock("bmlib_matmul_update")') - 400:
                    script.index('T.sblock("bmlib_matmul_update")')]
    assert f"T.vectorized({LANES})" in update, update
    _check(mod, arrays, partitioned)


def test_ragged_columns_pad_to_panels_of_three_vectors():
    assert ragged_columns(350, 33278, 16) == 33312  # 694 panels of 48
    assert ragged_columns(4, 37, 16) == 48  # 3 vectors: one panel, as they are
    assert ragged_columns(4, 4 * 16, 16) is None  # whole vectors already
    assert ragged_columns(1, 1000, 16) is None  # a GEMV: narrower vectors instead
    assert ragged_columns(None, 1000, 16) is None and ragged_columns(4, None, 16) is None


def test_packed_dense_keeps_symbolic_rows():
    x = relax.Var("x", relax.TensorType([tvm.tirx.Var("n", "int64"), 24], "float32"))
    rng = np.random.default_rng(15)
    w = relax.const((rng.standard_normal((3 * LANES, 24)) * 0.2).astype("float32"))
    b = relax.const(rng.standard_normal(3 * LANES).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(_dense_bias_gelu(x, w, b))
        bb.emit_func_output(out)
    mod = bb.get()
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    width = packed_panel_width(None, 3 * LANES, LANES)
    assert (3 * LANES // width, 24, width) in _param_shapes(prim)
    for rows in (1, 7, 20):
        data = [rng.standard_normal((rows, 24)).astype("float32")]
        _check(mod, data, partitioned)


@pytest.mark.skipif(vector_bits(None) < 512, reason="the host has no 512-bit vectors")
def test_packed_dense_runs_zmm_fma_with_24_accumulators():
    mod, _ = make_module(_dense_bias, [(64, 32)], [(6 * LANES, 32), (6 * LANES,)])
    _, prims = _lower(mod)
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    accumulators = set(re.findall(r"vfmadd231ps\s+[^\n]*%(zmm\d+)$", asm, flags=re.M))
    assert len(accumulators) >= 24, sorted(accumulators)  # 8 rows x 3 vectors


# ----------------------------------------------------------------- dense: next-panel prefetch


@pytest.mark.parametrize("shape, epilogue", [((16, 256), _dense_bias_gelu),
                                             ((2, 8, 96), _dense_bias)])
def test_packed_dense_prefetches_the_next_panel_outside_its_fma_loop(shape, epilogue):
    n = 4 * LANES
    mod, arrays = make_module(epilogue, [shape], [(n, shape[-1]), (n,)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    script = prim.script()
    prefetches = re.findall(r"T\.prefetch\(T\.address_of\((\w+)\[(.*)\]\), 0, 2, 1\)", script)
    assert prefetches, script
    width = packed_panel_width(None if len(shape) == 3 else shape[0], n, LANES)
    weight = [p for p in prim.params if tuple(int(d) for d in p.shape) ==
              (n // width, shape[-1], width)]
    assert weight and all(name.startswith(str(weight[0].name)) for name, _ in prefetches)
    # the next panel's index and the line are clamped into the weight
    assert all(index.count("T.min(") == 2 for _, index in prefetches), prefetches
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    assert re.search(r"^\s+prefetcht1\s", asm, flags=re.M)
    loops = innermost_fma_loops(asm)
    assert loops
    for body in loops:  # the accumulators stay in registers: no prefetch, call, spill
        assert "prefetch" not in body and "call" not in body, body
        assert not re.search(r"vmov\w*\s+%[xyz]mm\d+, [^%\n]*\(", body), body
    _check(mod, arrays, partitioned)


def test_prefetch_step_leaves_the_function_as_scheduled_when_flattening_fails(monkeypatch):
    from bmlib_relax.backend import prefetch

    def failing_passes():
        raise tvm.error.InternalError("Divide by zero")

    monkeypatch.setattr(prefetch, "prelower_passes", failing_passes)
    mod, arrays = make_module(_dense_bias, [(16, 64)], [(4 * LANES, 64), (4 * LANES,)])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with pytest.warns(UnscheduledBlockWarning, match="prefetches not inserted .*Divide by zero"):
        ((prim, _),) = lower_and_verify(partitioned).values()
    assert "T.prefetch" not in prim.script() and "T.sblock" in prim.script()
    with pytest.warns(UnscheduledBlockWarning, match="prefetches not inserted"):
        _check(mod, arrays, partitioned)


def test_prefetch_fallback_does_not_swallow_a_ctrl_c(monkeypatch):
    """A Ctrl-C during flattening comes back from TVM as an error; the fallback that
    runs the function without prefetches must stop instead (no warning, no build)."""
    from bmlib_relax import interrupts
    from bmlib_relax.backend import prefetch

    def interrupted(prim):
        interrupts.request()  # what the command line's SIGINT handler records
        raise RuntimeError("KeyboardInterrupt: raised in a callback")

    monkeypatch.setattr(prefetch, "flatten", interrupted)
    mod, _ = make_module(_dense_bias, [(16, 64)], [(4 * LANES, 64), (4 * LANES,)])
    partitioned = partition_for_bmlib(mod)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnscheduledBlockWarning)
            with pytest.raises(KeyboardInterrupt):
                lower_and_verify(partitioned)
    finally:
        interrupts.clear()


@pytest.mark.parametrize("rows, k", [(16, 5), (1, 256)])
def test_no_prefetch_for_a_short_reduction_or_a_gemv(rows, k):
    """Fewer than 8 k steps leave nothing to hide a prefetch behind; a GEMV has one row
    tile, no row-tile loop to spread the next panel over."""
    mod, arrays = make_module(_dense_bias, [(rows, k)], [(4 * LANES, k), (4 * LANES,)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    assert "T.prefetch" not in prim.script()
    _check(mod, arrays, partitioned)


@pytest.mark.parametrize("residual_first", [False, True])
def test_residual_add_is_the_dense_epilogue(residual_first):
    def layer(x, r, w, b):
        y = _dense_bias(x, w, b)
        return R.add(r, y) if residual_first else R.add(y, r)

    mod, arrays = make_module(layer, [(16, 24), (16, 3 * LANES)], [(3 * LANES, 24),
                                                                    (3 * LANES,)])
    partitioned, prims = _lower(mod)
    assert len(prims) == 1  # one partition: dense, bias and residual add
    script = next(iter(prims.values())).script()
    top_loops = re.findall(r"^    for .*$", script, flags=re.M)
    assert len(top_loops) == 1, top_loops
    _check(mod, arrays, partitioned)


def test_residual_of_another_shape_stays_out_of_the_dense():
    def layer(x, r, w, b):
        return R.add(_dense_bias(x, w, b), r)  # r broadcasts over the rows

    mod, arrays = make_module(layer, [(16, 24), (1, 2 * LANES)], [(2 * LANES, 24),
                                                                  (2 * LANES,)])
    partitioned, prims = _lower(mod)
    assert len(prims) == 2
    _check(mod, arrays, partitioned)


def test_scaled_attention_scores_are_one_partition():
    def scores(q, k):
        return R.nn.softmax(R.multiply(R.matmul(q, R.permute_dims(k, [0, 2, 1])),
                                       _const(0.125)))

    mod, arrays = make_module(scores, [(2, 16, 8), (2, 16, 8)])
    partitioned, prims = _lower(mod)
    assert any("matmul" in name and "multiply" in name for name in prims), list(prims)
    assert len(prims) == 2  # the scaled product, then softmax
    _check(mod, arrays, partitioned)


def test_attention_heads_are_read_through_their_views():
    """Q K^T and A V take the reshape / permute_dims that split the heads: Q and V are
    read in place (no copy block), K^T is copied per column panel inside the product."""
    seq, heads, dim = 16, 2, LANES

    def attention(q, k, v):
        def split(t):
            return R.permute_dims(R.reshape(t, (seq, heads, dim)), [1, 0, 2])

        scores = R.nn.softmax(R.multiply(
            R.matmul(split(q), R.permute_dims(split(k), [0, 2, 1])), _const(0.25)))
        v_t = R.permute_dims(split(v), [0, 2, 1])
        return R.matmul(scores, R.permute_dims(v_t, [0, 2, 1]))

    shape = (seq, heads * dim)
    mod, arrays = make_module(attention, [shape, shape, shape])
    partitioned, prims = _lower(mod)
    assert len(prims) == 3, list(prims)  # scaled scores, softmax, weighted values
    for name, prim in prims.items():
        if "matmul" not in name:
            continue
        script = prim.script()
        copies = re.findall(r'T\.sblock\("(T_\w+)"\)', script)
        if "multiply" in name:  # K^T: one copy, computed per panel inside the loop nest
            assert len(copies) == 2 and any("transpose" in c for c in copies), copies
            top_loops = re.findall(r"^    for .*$", script, flags=re.M)
            assert len(top_loops) == 1, top_loops
        else:  # V: read in place
            assert not copies, copies
    _check(mod, arrays, partitioned)


# ----------------------------------------------------------------- GEMV (one row)
@pytest.mark.parametrize("k, n", [(64, 1000), (33, 8 * LANES), (16, 3 * LANES)])
def test_one_row_dense_is_a_gemv_over_packed_panels(k, n):
    mod, arrays = make_module(_dense_bias, [(1, k)], [(n, k), (n,)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    width = packed_panel_width(1, n, LANES)
    assert width is not None and n % width == 0
    assert (n // width, k, width) in _param_shapes(prim)
    vector = math.gcd(width, LANES)
    widths = {int(w) for w in re.findall(r"T\.vectorized\((\d+)\)", prim.script())}
    assert vector in widths, widths  # 1000 columns: vectors of 8 lanes, not a 10-wide one
    _check(mod, arrays, partitioned)


def test_gemv_panels_divide_the_classifier_and_keep_whole_vectors():
    assert packed_panel_width(1, 1000, 16) == 40  # 25 panels of 5 x 8 lanes
    assert packed_panel_width(1, 768, 16) == 128  # 8 independent FMA chains
    assert packed_panel_width(1, 37, 16) is None  # no vector divides: left as it is
    assert packed_panel_width(4, 1000, 16) is None  # more rows: only whole vectors


# ----------------------------------------------------------------- erf / GELU
def test_erf_is_vectorized_and_accurate():
    grid = np.linspace(-6, 6, 4 * 1024 + 3 * LANES, dtype="float32").reshape(4, -1)
    mod, _ = make_module(lambda x: R.erf(x), [grid.shape])
    partitioned, prims = _lower(mod)
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    assert "erff" not in asm  # a scalar libm call per element before
    (got,), _ = run_offloaded(partitioned, [grid])
    want = np.vectorize(math.erf)(grid.astype("float64"))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def _sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize("op, reference, rtol", [
    (R.sigmoid, _sigmoid64, 2e-6),
    (R.nn.silu, lambda x: x * _sigmoid64(x), 2e-6),
    (R.tanh, np.tanh, 2e-6)], ids=["sigmoid", "silu", "tanh"])
def test_sigmoid_and_tanh_are_vectorized_and_accurate(op, reference, rtol):
    """No scalar ``expf`` per element (EfficientNet's swish epilogues were 2.7x the
    model's time in ONNX Runtime), relative error a few ulp over the whole range,
    and the ends and NaN as ``1 / (1 + exp(-x))`` and ``tanh`` give them."""
    grid = np.concatenate([np.linspace(-100, 100, 4 * 1024, dtype="float32"),
                           np.linspace(-1e-3, 1e-3, 2 * LANES, dtype="float32"),
                           np.array([-np.inf, np.inf, np.nan, 0.0, -0.0] * 2, "float32")])
    grid = grid[: grid.size - grid.size % 4].reshape(4, -1)
    mod, _ = make_module(lambda x: op(x), [grid.shape])
    partitioned, prims = _lower(mod)
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    assert "expf" not in asm and "tanhf" not in asm
    (got,), _ = run_offloaded(partitioned, [grid])
    with np.errstate(over="ignore", invalid="ignore"):
        want = reference(grid.astype("float64"))
    finite = np.isfinite(grid)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=1e-30)
    np.testing.assert_array_equal(got[~finite], want[~finite].astype("float32"))


def test_conv2d_swish_epilogue_is_vectorized():
    """The swish after a conv (EfficientNet) stays in the conv's register-tile epilogue,
    without an ``expf`` call."""
    mod, arrays = make_module(lambda x, w: (lambda c: R.multiply(c, R.sigmoid(c)))(
        R.nn.conv2d(x, w, padding=1)), [(1, 32, 14, 14)], [(64, 32, 3, 3)])
    partitioned, prims = _lower(mod)
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    assert "expf" not in asm
    _check(mod, arrays, partitioned, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- softmax
@pytest.mark.parametrize("shape", [(3, 5, 8 * LANES), (4, 37), (2, 3, 2 * LANES)])
def test_softmax_matches_numpy_on_rows_with_large_values(shape):
    rng = np.random.default_rng(15)
    x = (rng.standard_normal(shape) * 30 + 1e4).astype("float32")
    x[..., 1] = -3e4  # far below the row maximum: exp underflows to 0
    mod, _ = make_module(lambda v: R.nn.softmax(v), [shape])
    partitioned, prims = _lower(mod)
    (got,), _ = run_offloaded(partitioned, [x])
    x64 = x.astype("float64")
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("shape", [(3, 5, 8 * LANES), (4, 37), (2, 3, 2 * LANES)])
def test_log_softmax_matches_numpy_on_rows_with_large_values(shape):
    rng = np.random.default_rng(16)
    x = (rng.standard_normal(shape) * 30 + 1e4).astype("float32")
    x[..., 1] = -3e4  # exp underflows to 0, the log-probability stays finite
    mod, _ = make_module(lambda v: R.nn.log_softmax(v), [shape])
    partitioned, prims = _lower(mod)
    assert "expf" not in build_prim_funcs(prims, None).inspect_source("asm")
    (got,), _ = run_offloaded(partitioned, [x])
    x64 = x.astype("float64")
    shifted = x64 - x64.max(-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("length", [4 * LANES, 4 * LANES + 3])
def test_softmax_row_reductions_are_vector_accumulators(length):
    """Also for rows of whole vectors and a few more (a vocabulary): the whole vectors
    reduced in a vector accumulator, not the row in one scalar chain."""
    mod, _ = make_module(lambda v: R.nn.softmax(v), [(6, length)])
    _, prims = _lower(mod)
    script = next(iter(prims.values())).script()
    for name in ("bmlib_softmax_max_partial_update", "bmlib_softmax_sum_partial_update"):
        body = script[script.index(f'T.sblock("{name}")') - 200:script.index(f'T.sblock("{name}")')]
        assert f"T.vectorized({LANES})" in body, name
    assert "T.parallel(" in script


# ----------------------------------------------------------------- layer_norm
@pytest.mark.parametrize("shape", [(5, 6 * LANES), (2, 3, 37), (1, 4, 2 * LANES)])
def test_layer_norm_matches_numpy_far_from_zero(shape):
    rng = np.random.default_rng(15)
    # a large common offset with small spread: E[x^2] - E[x]^2 would cancel to noise
    x = (1e3 + rng.standard_normal(shape)).astype("float32")
    mod, _ = make_module(lambda v, g, b: R.nn.layer_norm(v, g, b, axes=[-1]), [shape],
                         [(shape[-1],), (shape[-1],)])
    partitioned, prims = _lower(mod)
    script = next(iter(prims.values())).script()
    assert "T.parallel(" in script
    (got,), _ = run_offloaded(partitioned, [x])
    want = run_plain(mod, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    g, b = (c.value.numpy() for c in _constants(mod))  # gamma, beta as built
    x64 = x.astype("float64")
    mean = x64.mean(-1, keepdims=True)
    ref = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=2e-3)


def _constants(mod) -> list:
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e) if isinstance(e, tvm.ir.expr.GenericConst)
        else None)
    return found


# ----------------------------------------------------------------- dense: K-blocking
def test_k_blocks_split_only_a_dense_whose_input_and_panel_outgrow_l2(monkeypatch):
    monkeypatch.delenv(KSPLIT_ENV, raising=False)
    assert k_blocks(128, 3072, 768, 16, 4) == 4  # BERT's FFN2: 4 blocks of 768
    assert k_blocks(128, 768, 3072, 16, 4) == 1  # FFN1, Q/K/V/O: one block
    assert k_blocks(128, 768, 768, 16, 4) == 1
    assert k_blocks(1, 3072, 768, 16, 4) == 1  # a GEMV
    assert k_blocks(128, 3000, 768, 16, 4) == 1  # no block of whole prefetch chunks
    assert k_blocks(None, 3072, 768, 16, 4) == 1  # symbolic rows (padded tiles)
    monkeypatch.setenv(KSPLIT_ENV, "0")
    assert k_blocks(128, 3072, 768, 16, 4) == 1
    monkeypatch.setenv(KSPLIT_ENV, "2048")
    assert k_blocks(128, 3072, 768, 16, 4) == 2


def test_k_blocked_dense_accumulates_in_registers_and_sums_blocks_with_its_epilogue(
        monkeypatch):
    monkeypatch.setenv(KSPLIT_ENV, "32")  # KiB: a small dense outgrows it
    rows, k, n = 16, 512, 4 * LANES
    blocks = k_blocks(rows, k, n, LANES, 4)
    assert blocks > 1

    def layer(x, r, w, b):
        return R.add(_dense_bias(x, w, b), r)

    mod, arrays = make_module(layer, [(rows, k), (rows, n)], [(n, k), (n,)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    width = packed_panel_width(rows, n, LANES)
    assert (n // width, k, width) in _param_shapes(prim)  # still read packed, in place
    script = prim.script()
    # the partial products: one parallel loop over (block, panel) pairs, block-major;
    # then one pass adding the blocks, the bias and the residual (parallel when it is
    # large enough: not at this size)
    top_loops = re.findall(r"^    for .*$", script, flags=re.M)
    assert len(top_loops) == 2, top_loops
    assert f"T.parallel({blocks * (n // width)})" in top_loops[0], top_loops
    # the tile accumulates in a tile buffer, written to the partial products once
    assert not re.search(r"bmlib_matmul_kblock\[[^\n]*\] = bmlib_matmul_kblock\[", script)
    final = script[script.index(top_loops[1]):]
    assert final.count("bmlib_matmul_kblock[") == blocks, final
    # the next (block, panel) pair's block is prefetched, its indices clamped
    prefetches = re.findall(r"T\.prefetch\(T\.address_of\((\w+)\[(.*)\]\), 0, 2, 1\)", script)
    assert prefetches and all(index.count("T.min(") == 3 for _, index in prefetches)
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    loops = innermost_fma_loops(asm)
    assert loops
    for body in loops:  # the tile accumulates in registers, not in the partial buffer
        assert "prefetch" not in body and "call" not in body, body
        assert not re.search(r"vmov\w*\s+%[xyz]mm\d+, [^%\n]*\(", body), body
    _check(mod, arrays, partitioned, rtol=1e-4, atol=1e-4)


def test_k_blocked_product_of_two_activations_matches_the_plain_build(monkeypatch):
    """No packed weight: B's panel block is copied per (block, panel) iteration."""
    monkeypatch.setenv(KSPLIT_ENV, "32")
    mod, arrays = make_module(lambda x, y: R.matmul(x, y), [(16, 512), (512, 4 * LANES)])
    partitioned, prims = _lower(mod)
    (prim,) = prims.values()
    assert "bmlib_matmul_kblock" in prim.script()
    _check(mod, arrays, partitioned, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- a whole encoder layer
def test_small_encoder_layer_is_offloaded_and_matches_the_plain_build():
    """The bench's bert_layer at a tiny size: every op offloaded, every block
    scheduled, numerics as the plain TVM build of the same import."""
    import bmlib_relax
    from bmlib_relax.bench.models import bert_layer_text
    from bmlib_relax.relay import parse

    seq, hidden, heads, ffn = 8, 2 * LANES, 2, 4 * LANES
    text = bert_layer_text(seq=seq, hidden=hidden, heads=heads, ffn=ffn)
    rng = np.random.default_rng(15)
    params = {}
    for p in parse(text)["main"].params[1:]:
        shape = [int(d) for d in p.type_annotation.shape]
        params[p.name_hint] = (rng.standard_normal(shape) * 0.2).astype("float32")
    x = rng.standard_normal((1, seq, hidden)).astype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        model = bmlib_relax.compile(text, params)
    assert offloaded_partitions(model.relax_module)
    assert host_ops_besides_views(model.report) == {}, model.report.ops_host
    assert model.report.ops_offloaded["relax.matmul"] == 8  # 6 dense + 2 batch_matmul
    imported = bmlib_relax.import_relay(parse(text), params)
    want = run_plain(imported, [x])[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-4)
