"""The per-layer comparison tool (bench/layer_compare.py): its one-conv ONNX model and
its bmlib one-conv build compute the same convolution (no timing here)."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from bmlib_relax.bench.harness import host_target, one_conv_model
from bmlib_relax.bench.layer_compare import _onnx_conv, interleaved
from bmlib_relax.recipe import recipe_tensor

pytest.importorskip("onnx", reason="the test extra installs onnx")


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                    reason="onnxruntime missing")
@pytest.mark.parametrize("spec", [
    {"data": [1, 16, 9, 9], "weight": [32, 16, 3, 3], "groups": 1, "strides": [2, 2],
     "padding": [1, 1, 1, 1]},
    {"data": [1, 16, 8, 8], "weight": [16, 1, 3, 3], "groups": 16, "strides": [1, 1],
     "padding": [1, 1, 1, 1]},
])
def test_one_conv_models_agree(spec):
    import tvm

    from bmlib_relax.bench.runtimes import make_runner

    weight = recipe_tensor("w", spec["weight"], "float32")
    x = recipe_tensor("x", spec["data"], "float32", role="input")
    ours = one_conv_model(spec, weight, host_target())(tvm.runtime.tensor(x)).numpy()
    theirs = make_runner("onnxruntime", _onnx_conv(spec, weight), ["x"], 1)(x)[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_interleaved_times_every_variant():
    calls = {"a": 0, "b": 0}

    def bump(key):
        calls[key] += 1

    times = interleaved({"a": lambda: bump("a"), "b": lambda: bump("b")}, rounds=2,
                        round_seconds=0.0)
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert calls["a"] >= 2 * 3 and calls["b"] >= 2 * 3  # warm-up + 3 per round at least


def test_interleaved_runs_each_variants_setup_before_its_rounds():
    """--scaling resizes TVM's pool in a setup step: it must run before the warm-up and
    before every round of its own variant, and never before another variant's calls."""
    log = []
    variants = {("x", n): (lambda n=n: log.append(("call", n))) for n in (1, 2)}
    setup = {key: (lambda n=key[1]: log.append(("setup", n))) for key in variants}
    interleaved(variants, rounds=3, round_seconds=0.0, setup=setup)
    current = None
    for kind, n in log:
        if kind == "setup":
            current = n
        else:
            assert n == current  # every call ran after its own variant's setup
    assert log.count(("setup", 1)) == 1 + 3 and log.count(("setup", 2)) == 1 + 3


def test_render_scaling_divides_n_by_1_thread():
    from bmlib_relax.bench.layer_compare import render_scaling

    rows = [("m", {("bmlib", 1): 8.0, ("bmlib", 2): 4.4, ("onnxruntime", 1): 7.0,
                   ("onnxruntime", 2): 3.5})]
    text = render_scaling(rows, 2)
    lines = text.splitlines()
    assert "2 thr ms" in lines[0] and "2/1 thr" in lines[0]
    bmlib = next(line for line in lines if " bmlib " in line).split()
    ort = next(line for line in lines if "onnxruntime" in line).split()
    assert bmlib[-3:] == ["8.00", "4.40", "0.55"] and ort[-3:] == ["7.00", "3.50", "0.50"]


def test_layer_compare_refuses_a_bad_target_before_building(capsys):
    from bmlib_relax.bench.layer_compare import main

    with pytest.raises(SystemExit) as info:
        main(["resnet18", "--target", "llvm -mcpu=no-such-cpu"])
    assert info.value.code == 2 and "--target" in capsys.readouterr().err
