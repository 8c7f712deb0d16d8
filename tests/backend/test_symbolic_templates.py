"""Templates on symbolic extents: one build per program, offloaded, equal to numpy at
several values of the free dim; schedules keep their parallel / vector structure;
convert refuses a dynamic input it could not run before building anything."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.backend.partition import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.compiler import lower_and_verify
from bmlib_relax.importer import as_relay_module, import_relay

from bmlib_relax.backend.patterns import HOST_VIEWS_SWITCH

from conftest import offloaded_partitions


@pytest.fixture(autouse=True)
def _views_offloaded(monkeypatch):
    """The reshape templates are under test here: standalone views offloaded too
    (by default they stay on the host, where they copy nothing)."""
    monkeypatch.setenv(HOST_VIEWS_SWITCH, "0")


def _compile(body: str, params: str, weights=None):
    text = f'#[version = "0.0.5"]\ndef @main({params}) {{\n{body}\n}}\n'
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        model = bmlib_relax.compile(text, weights or {})
    assert offloaded_partitions(model.relax_module)
    assert sum(model.report.ops_host.values()) == 0, model.report.ops_host
    return model


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


CASES = {
    # name: (params, body, numpy reference of the inputs)
    "elementwise_broadcast": (
        "%x: Tensor[(?, 16), float32], %y: Tensor[(16), float32]",
        "%0 = add(%x, %y); %1 = sigmoid(%0); %2 = multiply(%1, %x); clip(%2, a_min=-1f, a_max=1f)",
        lambda x, y: np.clip(x * (1 / (1 + np.exp(-(x + y)))), -1, 1)),
    "activations_and_casts": (
        "%x: Tensor[(?, 4, 3), float32], %a: Tensor[(4), float32]",
        "%0 = nn.prelu(%x, %a, axis=1); %1 = nn.leaky_relu(%0, alpha=0.1f); "
        "%2 = cast(%1, dtype=\"float16\"); %3 = cast(%2, dtype=\"float32\"); "
        "%4 = abs(%3); %5 = add(%4, 1f); %6 = log(%5); power(%6, 2f)",
        lambda x, a: np.log(np.abs(_leaky(_leaky(x, a[None, :, None]), 0.1).astype(
            "float16").astype("float32")) + 1) ** 2),
    "reductions": (
        "%x: Tensor[(?, 3, 8), float32]",
        "%0 = mean(%x, axis=[0, 2], keepdims=True); %1 = sum(%x, axis=[1]); "
        "%2 = max(%x, axis=[0]); (%0, %1, %2)",
        lambda x: (x.mean((0, 2), keepdims=True), x.sum(1), x.max(0))),
    "softmax_over_the_free_axis": (
        "%x: Tensor[(4, ?), float32]",
        "%0 = nn.softmax(%x, axis=-1); nn.log_softmax(%0, axis=0)",
        lambda x: _log_softmax(_softmax(x, -1), 0)),
    "reshape_zero_and_minus_one": (
        "%x: Tensor[(?, 4, 6), float32]",
        "%0 = reshape(%x, newshape=[0, -1]); %1 = transpose(%0, axes=[1, 0]); "
        "%2 = expand_dims(%1, axis=0); %3 = squeeze(%2, axis=[0]); "
        "%4 = reshape(%3, newshape=[6, 4, -1]); concatenate((%4, %4), axis=1)",
        lambda x: np.concatenate([x.reshape(len(x), -1).T.reshape(6, 4, -1)] * 2, axis=1)),
    "reshape_likes": (
        "%x: Tensor[(?, 4, 6), float32]",
        "%1 = transpose(%x, axes=[2, 0, 1]); "
        "%2 = expand_dims(%1, axis=0); %3 = squeeze(%2, axis=[0]); "
        "concatenate((%3, %3), axis=1)",
        lambda x: np.concatenate([x.transpose(2, 0, 1)] * 2, axis=1)),
    "slices_and_splits": (
        "%x: Tensor[(?, 8), float32]",
        "%0 = strided_slice(%x, begin=[1, 2], end=[100, 8], strides=[2, 2]); "
        "%1 = strided_slice(%x, begin=[-2], end=[1000], strides=[1], axes=[0]); "
        "%2 = strided_slice(%x, begin=[4, 1], end=[0, 5], strides=[-1, 1]); "
        "%3 = split(%x, indices_or_sections=[1], axis=0); "
        "%4 = split(%x, indices_or_sections=2, axis=1); (%0, %1, %2, %3.0, %3.1, %4.1)",
        lambda x: (x[1:100:2, 2:8:2], x[-2:], x[4:0:-1, 1:5], x[:1], x[1:], x[:, 4:])),
    # One bound from the start, the other from the end: empty at some run-time lengths
    # (1 and 3 below), where TVM's own sizing of the slice goes negative.
    "slices_empty_at_some_lengths": (
        "%x: Tensor[(?, 8), float32]",
        "%0 = strided_slice(%x, begin=[1], end=[-1], strides=[1], axes=[0]); "
        "%1 = strided_slice(%x, begin=[3, 0], end=[-2, 8], strides=[2, 3]); "
        "%2 = strided_slice(%x, begin=[-1], end=[1], strides=[-1], axes=[0]); "
        "%3 = strided_slice(%x, begin=[-2, 7], end=[2, 0], strides=[-2, -3]); "
        "%4 = strided_slice(%x, begin=[3], end=[1], strides=[1], axes=[0]); "
        "(%0, %1, %2, %3, %4)",
        lambda x: (x[1:-1], x[3:-2:2, 0:8:3], x[-1:1:-1], x[-2:2:-2, 7:0:-3], x[3:1])),
    # Reshapes over symbolic dims go group by group (see templates.tensor._reshape_groups).
    "reshapes_by_groups": (
        "%x: Tensor[(?, 6, 4, 2), float32], %y: Tensor[(?, ?), float32]",
        "%0 = reshape(%x, newshape=[-1, 4, 2]); %1 = reshape(%x, newshape=[0, 3, 2, 8]); "
        "%2 = reshape(%x, newshape=[0, -1]); %3 = reshape(%y, newshape=[1, -1, 1]); "
        "%4 = reshape(%y, newshape=[0, 1, -1]); (%0, %1, %2, %3, %4)",
        lambda x, y: (x.reshape(-1, 4, 2), x.reshape(len(x), 3, 2, 8), x.reshape(len(x), -1),
                      y.reshape(1, -1, 1), y.reshape(len(y), 1, -1))),
    "batch_matmul_free_batch_and_length": (
        "%a: Tensor[(n, s, 16), float32], %b: Tensor[(n, 24, 16), float32]",
        "nn.batch_matmul(%a, %b, transpose_b=True)",
        lambda a, b: a @ b.transpose(0, 2, 1)),
}


def _leaky(x, slope):
    return np.where(x > 0, x, x * slope)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _log_softmax(x, axis):
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def _inputs(model, free: int, seed: int):
    """Random inputs; the k-th distinct symbolic dim (by name) is ``free + k``."""
    sizes: dict = {}
    arrays = []
    for i, spec in enumerate(model.input_specs):
        shape = [d if isinstance(d, int) else sizes.setdefault(d, free + len(sizes))
                 for d in spec["shape"]]
        arrays.append(_rand(*shape, seed=seed + i))
    return arrays


@pytest.mark.parametrize("case", sorted(CASES))
def test_template_on_symbolic_extents_matches_numpy(case):
    params, body, reference = CASES[case]
    model = _compile(body, params)
    for free in (1, 3, 20):
        arrays = _inputs(model, free, seed=free)
        got = model(*arrays)
        want = reference(*arrays)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _matmul_prim(params: str, body: str, weights: dict):
    text = f'#[version = "0.0.5"]\ndef @main({params}) {{\n{body}\n}}\n'
    imported = import_relay(as_relay_module(text), weights, flatten_tuple_inputs=True)
    lowered = lower_and_verify(partition_for_bmlib(imported))
    (prim, record), = [v for k, v in lowered.items() if "matmul" in k]
    return prim, record


@pytest.mark.parametrize("kind", ["dense_symbolic_rows", "scores_symbolic_columns"])
def test_symbolic_extents_keep_the_register_tiled_matmul_schedule(kind):
    if kind == "dense_symbolic_rows":
        prim, record = _matmul_prim(
            "%x: Tensor[(?, 32), float32], %w: Tensor[(64, 32), float32], "
            "%b: Tensor[(64), float32]",
            "%0 = nn.dense(%x, %w, units=64); %1 = nn.bias_add(%0, %b, axis=-1); nn.relu(%1)",
            {"w": _rand(64, 32), "b": _rand(64)})
    else:
        prim, record = _matmul_prim("%h: Tensor[(?, 32), float32]",
                                    "nn.dense(%h, %h, units=None)", {})
    script = prim.script()
    assert not record.unscheduled
    # the symbolic extents were padded to whole tiles: static unrolled rows and vector
    # columns, no guard inside the tile, every TIR vector of static length
    assert "T.parallel" in script and "T.unroll" in script and "T.vectorized" in script
    update = script.split('T.sblock("bmlib_matmul_update")', 1)[1].split("T.sblock(", 1)[0]
    assert "T.where" not in update  # only the copy out of the padded tile is guarded
    for extent in re.findall(r"T\.vectorized\(([^)]*)\)", script):
        assert re.fullmatch(r"(T\.int64\()?\d+\)?", extent), extent


def test_softmax_runs_row_parallel_in_one_pass_per_row():
    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, ?), float32]) {\n  nn.softmax(%x)\n}\n'
    imported = import_relay(as_relay_module(text), {}, flatten_tuple_inputs=True)
    ((prim, record),) = lower_and_verify(partition_for_bmlib(imported)).values()
    script = prim.script()
    assert not record.unscheduled
    # one parallel loop over the rows holds the max, exp, sum and normalisation
    assert script.count("T.parallel") == 1 and "T.exp(" not in script
    body = script.split("T.parallel", 1)[1]
    # (a reduction over the free row length has its init hoisted: "<name>_init/_update")
    for block in ("bmlib_softmax_max", "T_fast_exp", "bmlib_softmax_sum", "bmlib_softmax"):
        assert f'T.sblock("{block}' in body
    model = bmlib_relax.compile(text)
    for rows, cols in ((1, 1), (3, 300), (33, 17)):
        x = _rand(rows, cols, seed=cols) * 10
        np.testing.assert_allclose(model(x), _softmax(x, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("body", ["nn.layer_norm(%x, %g, %g, axis=-1)",
                                  "%0 = add(%x, %g); nn.relu(%0)"])
def test_row_wise_blocks_over_a_free_dim_run_in_parallel(body):
    # work per row is small (64 elements), but a free dim is taken to be large: the
    # rows are a parallel loop, the static row is vectorized
    text = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, 64), float32], '
            f'%g: Tensor[(64), float32]) {{\n  {body}\n}}\n')
    imported = import_relay(as_relay_module(text), {"g": _rand(64)}, flatten_tuple_inputs=True)
    ((prim, record),) = lower_and_verify(partition_for_bmlib(imported)).values()
    script = prim.script()
    assert not record.unscheduled
    assert re.search(r"T\.parallel\([^)]*d0", script), script
    assert "T.vectorized" in script


def test_reshape_over_symbolic_dims_divides_only_inside_its_groups():
    # (n, 6, h, w) -> (n*6, h, w) merges two dims: the source index is (i // 6, i % 6),
    # no division by a symbolic product (topi's flat index divided by n*6*h*w products,
    # which TVM's simplifier took 94 s over for a layout_transform of a 5-d `?` input).
    import tvm
    from tvm import te

    from bmlib_relax.backend.templates.tensor import _grouped_reshape, _reshape_groups

    n, h, w = (tvm.tirx.Var(name, "int64") for name in "nhw")
    six = tvm.tirx.const(6, "int64")
    assert _reshape_groups([n, six, h, w], [n * 6, h, w]) == [(0, 2, 0, 1), (2, 3, 1, 2),
                                                                 (3, 4, 2, 3)]
    assert _reshape_groups([n, h], [h, n]) == [(0, 2, 0, 2)]  # one group: not separable
    one = tvm.tirx.const(1, "int64")
    assert _reshape_groups([n, h], [one, n * h, one]) == [(0, 2, 0, 3)]
    data = te.placeholder([n, six, h, w], "float32", name="data")
    out = _grouped_reshape(data, [n * 6, h, w], _reshape_groups([n, six, h, w], [n * 6, h, w]))
    index = list(out.op.body[0].args[1:])  # the source index: (i // 6, i % 6, j, k)
    assert [type(e).__name__ for e in index[:2]] == ["FloorDiv", "FloorMod"]
    assert all(isinstance(e.b, tvm.tirx.IntImm) and int(e.b) == 6 for e in index[:2])
    assert not any(isinstance(e, (tvm.tirx.FloorDiv, tvm.tirx.FloorMod)) for e in index[2:])
