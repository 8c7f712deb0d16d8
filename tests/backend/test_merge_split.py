"""``merge=True`` splits a merged partition of more than
``MAX_COMPOSITES_PER_PARTITION`` composite calls into consecutive partitions.

A merged partition is one PrimFunc; scheduling it and LLVM's code generation grew
faster than linearly with it (160 dense+relu layers: 12 s in LLVM alone; an unrolled
35-step LSTM did not build in 11 minutes).  The chunks hand each other the values
later chunks (or the result) read.  Each case checks the offload, the composites per
partition and the result against NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.backend import merge
from bmlib_relax.backend.merge import split_oversized_partitions
from bmlib_relax.importer import import_relay
from bmlib_relax.backend.partition import partition_for_bmlib


def _dense_relu(h, index, params, rng):
    w = relay.var(f"w{index}", shape=(16, 16))
    params[f"w{index}"] = (rng.standard_normal((16, 16)) * 0.35).astype("float32")
    return relay.nn.relu(relay.nn.dense(h, w))


def _np_dense_relu(h, w):
    return np.maximum(h @ w.T, 0)


def _chain(n, rng):
    params: dict = {}
    x = relay.var("x", shape=(1, 16))
    h = x
    for i in range(n):
        h = _dense_relu(h, i, params, rng)
    return relay.IRModule.from_expr(relay.Function(relay.analysis.free_vars(h), h)), \
        params


def _chain_reference(x: np.ndarray, params: dict, n: int) -> np.ndarray:
    for i in range(n):
        x = _np_dense_relu(x, params[f"w{i}"])
    return x


def _composite_counts(model) -> list[int]:
    return [len(p["composites"]) for p in model.report.to_dict()["partitions"]]


@pytest.mark.parametrize("limit, expected", [(2, [2, 2, 2, 1]), (3, [3, 3, 1]), (7, [7])])
def test_long_merged_chain_is_split_into_partitions_of_at_most_the_limit(
        monkeypatch, limit, expected):
    monkeypatch.setattr(merge, "MAX_COMPOSITES_PER_PARTITION", limit)
    rng = np.random.default_rng(0)
    mod, params = _chain(7, rng)
    model = bmlib_relax.compile(mod, params, merge=True)
    assert _composite_counts(model) == expected
    x = rng.standard_normal((1, 16)).astype("float32")
    np.testing.assert_allclose(model(x=x), _chain_reference(x, params, 7), rtol=1e-5,
                               atol=1e-5)


def test_values_read_across_chunks_and_tuple_results_pass_between_partitions(monkeypatch):
    # a is read by the add two layers on and is itself an output; b is an output of the
    # first chunk only: the first chunk returns both, the result is a tuple.
    monkeypatch.setattr(merge, "MAX_COMPOSITES_PER_PARTITION", 2)
    rng = np.random.default_rng(1)
    params: dict = {}
    x = relay.var("x", shape=(1, 16))
    a = _dense_relu(x, 0, params, rng)
    b = _dense_relu(a, 1, params, rng)
    c = _dense_relu(b, 2, params, rng)
    e = _dense_relu(relay.add(c, a), 3, params, rng)
    func = relay.Function([x] + [v for v in relay.analysis.free_vars(e) if v.name_hint != "x"],
                          relay.Tuple([e, a, b]))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func), params, merge=True)
    counts = _composite_counts(model)
    assert len(counts) >= 2 and max(counts) <= 2 and sum(counts) == 5, counts
    xv = rng.standard_normal((1, 16)).astype("float32")
    av = _np_dense_relu(xv, params["w0"])
    bv = _np_dense_relu(av, params["w1"])
    cv = _np_dense_relu(bv, params["w2"])
    ev = _np_dense_relu(cv + av, params["w3"])
    got = model(x=xv)
    for out, want in zip(got, (ev, av, bv)):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_split_keeps_every_composite_and_names_the_chunks(monkeypatch):
    rng = np.random.default_rng(2)
    mod, params = _chain(5, rng)
    partitioned = partition_for_bmlib(import_relay(mod, params), merge=True)
    (whole,) = [gv.name_hint for gv, f in partitioned.functions.items()
                if f.attrs is not None and "Codegen" in f.attrs]
    split = split_oversized_partitions(partitioned, limit=2)
    parts = {gv.name_hint: f for gv, f in split.functions.items()
             if f.attrs is not None and "Codegen" in f.attrs}
    # TVM names a merged partition by all its ops; the chunks keep a readable prefix.
    assert sorted(parts) == [f"{whole[:96].rstrip('_')}_part{i}" for i in range(3)]
    for name, func in parts.items():
        assert str(func.attrs["global_symbol"]) == name
    calls = {name: sum(1 for b in f.body.blocks for binding in b.bindings
                       if not hasattr(binding.value, "params")
                       and "Call" in type(binding.value).__name__)
             for name, f in parts.items()}
    assert sorted(calls.values()) == [1, 2, 2]
    # At or under the limit, nothing changes.
    assert split_oversized_partitions(partitioned, limit=5).same_as(partitioned)


def test_default_limit_splits_a_long_chain():
    rng = np.random.default_rng(3)
    n = merge.MAX_COMPOSITES_PER_PARTITION + 3
    mod, params = _chain(n, rng)
    model = bmlib_relax.compile(mod, params, merge=True)
    assert _composite_counts(model) == [merge.MAX_COMPOSITES_PER_PARTITION, 3]
    x = rng.standard_normal((1, 16)).astype("float32")
    np.testing.assert_allclose(model(x=x), _chain_reference(x, params, n), rtol=1e-4,
                               atol=1e-5)


def test_projections_of_a_split_stay_with_it_when_later_chunks_read_them(monkeypatch):
    # The 017 LSTM's shape: one split, then a layer per piece spread over many chunks.
    # Chunks pass tensors only, so each projection is computed where the split is.
    monkeypatch.setattr(merge, "MAX_COMPOSITES_PER_PARTITION", 2)
    rng = np.random.default_rng(4)
    params: dict = {}
    x = relay.var("x", shape=(4, 16))
    pieces = relay.split(relay.nn.relu(x), 4, axis=0)
    outs = [_dense_relu(pieces[i], i, params, rng) for i in range(4)]
    body = relay.add(relay.add(outs[0], outs[1]), relay.add(outs[2], outs[3]))
    func = relay.Function(relay.analysis.free_vars(body), body)
    model = bmlib_relax.compile(relay.IRModule.from_expr(func), params, merge=True)
    counts = _composite_counts(model)
    assert len(counts) >= 3 and max(counts) <= 2, counts
    xv = rng.standard_normal((4, 16)).astype("float32")
    r = np.maximum(xv, 0)
    want = sum(_np_dense_relu(r[i:i + 1], params[f"w{i}"]) for i in range(4))
    np.testing.assert_allclose(model(x=xv), want, rtol=1e-5, atol=1e-5)
