"""#14's must-show: an attention-style Relay program with a free sequence length is
built once, fully offloaded, and matches numpy at every length; pinned builds agree;
the report gives FLOPs per the symbolic dim and evaluates them for concrete inputs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.backend.schedule import UnscheduledBlockWarning

from conftest import offloaded_partitions

ATTENTION = """
#[version = "0.0.5"]
def @main(%x: Tensor[(?, 64), float32], %w: Tensor[(64, 64), float32],
          %b: Tensor[(64), float32], %gamma: Tensor[(64), float32],
          %beta: Tensor[(64), float32]) {
  %0 = nn.dense(%x, %w, units=64);
  %1 = nn.bias_add(%0, %b, axis=-1);
  %2 = nn.relu(%1);
  %3 = nn.layer_norm(%2, %gamma, %beta, axis=-1, epsilon=1e-05f);
  %4 = nn.dense(%3, %3, units=None);
  %5 = nn.softmax(%4, axis=-1);
  %6 = transpose(%3, axes=[1, 0]);
  nn.dense(%5, %6, units=None)
}
"""
LENGTHS = (1, 5, 17, 64, 300)


def _params():
    rng = np.random.default_rng(14)
    return {"w": (rng.standard_normal((64, 64)) * 0.1).astype("float32"),
            "b": rng.standard_normal(64).astype("float32"),
            "gamma": rng.standard_normal(64).astype("float32"),
            "beta": rng.standard_normal(64).astype("float32")}


def _numpy_attention(x, p):
    h = np.maximum(x @ p["w"].T + p["b"], 0)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    h = h * p["gamma"] + p["beta"]
    scores = h @ h.T
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ h


def _input(length):
    return np.random.default_rng(length).standard_normal((length, 64)).astype("float32")


@pytest.fixture(scope="module")
def unpinned():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)  # every block scheduled
        return bmlib_relax.compile(ATTENTION, _params())


def test_attention_is_fully_offloaded(unpinned):
    report = unpinned.report
    assert offloaded_partitions(unpinned.relax_module)
    assert sum(report.ops_host.values()) == 0, report.ops_host
    assert report.ops_offloaded["relax.matmul"] == 3
    for op in ("relax.nn.softmax", "relax.nn.layer_norm", "relax.nn.relu", "relax.add"):
        assert report.ops_offloaded[op] == 1
    assert not any(p.unscheduled for p in report.partitions)
    assert unpinned.input_specs[0]["shape"][1] == 64
    assert isinstance(unpinned.input_specs[0]["shape"][0], str)  # still symbolic


@pytest.mark.parametrize("length", LENGTHS)
def test_one_build_matches_numpy_at_every_sequence_length(unpinned, length):
    x = _input(length)
    got = unpinned(x)
    assert got.shape == (length, 64)
    np.testing.assert_allclose(got, _numpy_attention(x, _params()), rtol=1e-4, atol=1e-4)


def test_pinned_and_unpinned_builds_agree(unpinned):
    for length in (5, 17):
        pinned = bmlib_relax.compile(ATTENTION, _params(), input_shapes={"x": (length, 64)})
        assert sum(pinned.report.ops_host.values()) == 0
        x = _input(length)
        np.testing.assert_allclose(unpinned(x), pinned(x), rtol=1e-5, atol=1e-5)
        # the report's formula at this length is the pinned build's count
        assert unpinned.flops(x)["total"] == pinned.report.flops_total
        assert unpinned.flops(x)["offloaded"] == pinned.report.flops_offloaded


def test_report_gives_flops_per_the_symbolic_dim(unpinned):
    report = unpinned.report
    (dim,) = report.symbolic_dims
    # dense+bias+relu 2*64*64+64+64, layer_norm 5*64 per row; two score-sized matmuls
    # 2*64 and softmax 5 per (row, column)
    per_row, per_pair = 2 * 64 * 64 + 64 + 64 + 5 * 64, 2 * (2 * 64) + 5
    for length in LENGTHS:
        want = per_row * length + per_pair * length * length
        assert report.flops_for({dim: length}) == {"total": want, "offloaded": want,
                                                   "host": 0}
        assert unpinned.flops(_input(length))["total"] == want
    data = report.to_dict()
    assert data["flops_symbolic"]["dims"] == [dim]
    assert dim in data["flops_symbolic"]["total"]
    assert data["flops_total"] == per_row + per_pair  # the ints: every symbolic dim 1
    assert all("flops_expr" in p for p in data["partitions"] if p["flops"])
    assert f"symbolic dims {dim}" in str(report)
    with pytest.raises(bmlib_relax.ParamError, match=dim):
        report.flops_for({})


def test_merged_partition_takes_the_symbolic_dim_too():
    # MergeCompositeFunctions gives every composite symbolic vars of its own: the
    # codegen maps them onto the merged partition's, so the PrimFunc binds one d0.
    merged = bmlib_relax.compile(ATTENTION, _params(), merge=True)
    assert len(merged.report.partitions) == 1 and sum(merged.report.ops_host.values()) == 0
    for length in (1, 17):
        x = _input(length)
        np.testing.assert_allclose(merged(x), _numpy_attention(x, _params()),
                                   rtol=1e-4, atol=1e-4)


def test_exported_library_reports_the_flops_of_a_run(unpinned, tmp_path):
    from conftest import cli

    path = tmp_path / "attention.so"
    unpinned.export_library(str(path))
    loaded = bmlib_relax.load(str(path))
    x = _input(17)
    np.testing.assert_array_equal(loaded(x), unpinned(x))
    want = unpinned.flops(x)
    assert loaded.flops(x) == {"total": want["total"], "offloaded": want["offloaded"],
                               "dims": {unpinned.report.symbolic_dims[0]: 17}}
    np.save(tmp_path / "x.npy", x)
    proc = cli("run", path, "--input", f"x={tmp_path / 'x.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert f"FLOPs: {want['total']:,} ({want['offloaded']:,} on bmlib) for " \
           f"{unpinned.report.symbolic_dims[0]}=17" in proc.stdout


def test_convert_without_pinning_records_the_flop_formulas(tmp_path):
    import json
    from pathlib import Path

    import jsonschema

    from bmlib_relax.convert import REPORT_SCHEMA_PATH, convert

    model = tmp_path / "attention.txt"
    model.write_text(ATTENTION)
    params = tmp_path / "attention.npz"
    np.savez(params, **_params())
    result = convert(str(model), str(tmp_path / "out"), params=str(params))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    jsonschema.validate(report, json.loads(Path(REPORT_SCHEMA_PATH).read_text()))
    assert report["ops_host"] == {} and report["partitions"]
    (dim,) = report["flops_symbolic"]["dims"]
    run = report["flops_run"]  # the run on the generated check inputs
    assert run["total"] == result.model.report.flops_for(run["dims"])["total"] > 0
    assert set(run["dims"]) == {dim}
