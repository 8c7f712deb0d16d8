"""The benchmark's ONNX Runtime / OpenVINO references run the same network as bmlib.

The ONNX graph is emitted from the Relay program itself; these tests check that
it computes what the plain Relax build computes (no timing: speed lives in
scripts/).
"""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from bmlib_relax.bench.models import bert_layer_text, load_model
from bmlib_relax.bench.onnx_export import relay_to_onnx
from bmlib_relax.bench.runtimes import make_runner
from bmlib_relax.relay import parse

from conftest import DATA, cli, run_plain

import bmlib_relax

pytest.importorskip("onnx", reason="the test extra installs onnx")

RUNTIMES = [pytest.param("onnxruntime", marks=pytest.mark.skipif(
                importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime missing")),
            pytest.param("openvino", marks=pytest.mark.skipif(
                importlib.util.find_spec("openvino") is None,
                reason="openvino is in the bench extra only"))]


def _reference(model):
    return run_plain(bmlib_relax.import_relay(parse(model.text), model.params),
                     list(model.inputs.values()))


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", ["seed_reshape_conv2d_add_bn_relu", "transformer_block",
                                  "op_max_pool2d", "op_global_avg_pool2d"])
def test_onnx_reference_matches_the_plain_build(name, runtime):
    model = load_model(name, DATA, None)
    onnx_model = relay_to_onnx(parse(model.text), model.params, name)
    assert [i.name for i in onnx_model.graph.input] == list(model.inputs)
    runner = make_runner(runtime, onnx_model.SerializeToString(), list(model.inputs), 1)
    got = runner(*model.inputs.values())[0]
    want = _reference(model)
    want = want[0] if isinstance(want, list) else want
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


LET_FORM = """#[version = "0.0.5"]
def @main(%data: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  let %x1: Tensor[(1, 4, 8, 8), float32] = nn.conv2d(%data, %w, padding=[1, 1, 1, 1]);
  let %x2 = nn.dropout(%x1, rate=0.5f);
  let %x3 = %x2.0;
  let %x4 = sigmoid(%x3);
  multiply(%x3, %x4)
}
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_let_form_relay_file_is_a_model_its_onnx_reference_matches(tmp_path, runtime):
    """A Relay text file is a benchmark model by its path (the corpus's SqueezeNet and
    EfficientNet dumps: let-bound, with dropout), and its ONNX reference computes what
    the plain build does."""
    from bmlib_relax.bench.models import model_problem

    path = tmp_path / "let_form.relay"
    path.write_text(LET_FORM)
    assert model_problem(str(path), DATA, None) is None
    assert model_problem(str(tmp_path / "missing.relay"), DATA, None) is not None
    model = load_model(str(path), DATA, None)
    assert list(model.inputs) == ["data"] and list(model.params) == ["w"]
    onnx_model = relay_to_onnx(parse(model.text), model.params, "let_form")
    runner = make_runner(runtime, onnx_model.SerializeToString(), list(model.inputs), 1)
    np.testing.assert_allclose(runner(*model.inputs.values())[0], _reference(model),
                               rtol=1e-4, atol=1e-5)


def test_onnx_export_names_an_op_it_cannot_emit():
    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) { cumsum(%x) }'
    with pytest.raises(NotImplementedError, match="cumsum"):
        relay_to_onnx(parse(text), {})


def test_bert_layer_text_has_the_requested_shapes():
    main = parse(bert_layer_text(seq=8, hidden=32, heads=4, ffn=64))["main"]
    shapes = {v.name: tuple(v.type_annotation.shape) for v in main.params}
    assert shapes["x"] == (1, 8, 32) and shapes["f1_weight"] == (64, 32)


def test_bench_reports_reference_columns_and_thread_scaling(tmp_path):
    """One ``--scaling`` run: a fresh process per thread count, each with the reference
    columns, then the speed-up table; ``--json`` keeps every count's document."""
    out = tmp_path / "bench.json"
    # --corpus "": no ResNet-50 compile-time line in each process (test_bench_smoke has it)
    proc = cli("bench", "seed_reshape_conv2d_add_bn_relu", "--no-torch", "--seconds", "0.05",
               "--layers", "none", "--corpus", "", "--scaling", "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "=== 1 thread(s) ===" in proc.stdout and "thr ms" in proc.stdout
    assert "bmlib/best" in proc.stdout
    runs = json.loads(out.read_text())["scaling"]
    assert "1" in runs and all(doc["threads"] == int(count) for count, doc in runs.items())
    for doc in runs.values():
        (result,) = doc["results"]
        assert "onnxruntime" in result["timings"]
        assert result["max_abs_diff"]["onnxruntime_vs_plain"] < 1e-4


def test_bench_thread_counts_follow_the_cgroup_quota_as_the_model_does(monkeypatch):
    """``--scaling`` runs at 1 and at every CPU the process may use, counted as a compiled
    model counts them by default (affinity lowered to the cgroup quota), not the affinity
    alone: on a 2-CPU quota of a 64-CPU host, 64 threads would be a meaningless column."""
    from bmlib_relax.bench import harness

    seen = {}
    monkeypatch.setattr("bmlib_relax.threads.available_cpus", lambda: 3)
    monkeypatch.setattr(harness, "_scaling",
                        lambda argv, counts, json_path=None: seen.setdefault("counts", counts)
                        and 0)
    assert harness.main(["transformer_block", "--scaling"]) == 0
    assert seen["counts"] == [1, 3]


def test_onnx_reference_of_an_nhwc_graph_matches_the_plain_build():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "backend"))
    import test_layout  # the TF-style NHWC graph (pad, conv HWIO, BN scale, pools)

    onnx_model = relay_to_onnx(parse(test_layout.NHWC), test_layout.PARAMS, "nhwc")
    runner = make_runner("onnxruntime", onnx_model.SerializeToString(), ["x"], 1)
    want = run_plain(bmlib_relax.import_relay(parse(test_layout.NHWC), test_layout.PARAMS),
                     [test_layout.X])
    for got, ref in zip(runner(test_layout.X), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
