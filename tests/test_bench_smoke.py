"""The benchmark harness runs end to end (no timing is asserted: speed lives in scripts/)."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from conftest import cli


def test_bench_runs_and_reports_equivalent_builds(tmp_path):
    out = tmp_path / "bench.json"
    proc = cli("bench", "seed_reshape_conv2d_add_bn_relu", "--no-torch", "--no-runtimes",
               "--seconds", "0.05", "--layers", "none", "--threads", "1", "--json", out,
               "--conv-in-model", "seed_reshape_conv2d_add_bn_relu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seed_reshape_conv2d_add_bn_relu" in proc.stdout and "peak fp32" in proc.stdout
    # the conv as run in the model, and repeated in place
    assert "conv2d partitions as run in the model" in proc.stdout
    assert "repeated ms" in proc.stdout
    data = json.loads(out.read_text())
    (result,) = data["results"]
    assert set(result["timings"]) == {"bmlib", "plain"}
    assert result["flops"] == result["flops_offloaded"] > 0
    assert result["max_abs_diff"]["bmlib_vs_plain"] < 1e-4
    assert data["measured_peak_gflops"] > 0 and "GFLOP/s measured" in proc.stdout


def test_measured_peak_kernel_really_runs_fmas():
    # The measured peak is only meaningful if TVM turned the chains into vector FMAs.
    import tvm

    from bmlib_relax.backend.target import resolve_target, vector_lanes
    from bmlib_relax.bench.peak import FMA_CHAINS, _fma_kernel

    target = resolve_target(None)
    lib = tvm.tirx.build(tvm.IRModule({"fma_peak": _fma_kernel(1, vector_lanes(target))}),
                         target=target)
    asm = lib.inspect_source("asm")
    if vector_lanes(target) >= 8:
        assert len(re.findall(r"vfmadd\w*\s+[^\n]*%[yz]mm", asm)) >= FMA_CHAINS
    out = tvm.runtime.tensor(np.zeros((1, FMA_CHAINS, vector_lanes(target)), "float32"))
    lib["fma_peak"](out, 3)
    start = np.add.outer(np.arange(FMA_CHAINS), np.arange(vector_lanes(target))).astype("float32")
    expected = start
    for _ in range(3):
        expected = expected * np.float32(0.99999994) + np.float32(1e-7)
    np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-6)


@pytest.mark.parametrize("vendor,family,flags,lanes", [
    ("GenuineIntel", 6, "fma avx2 avx512f", 32),   # Xeon: two 512-bit FMA pipes
    ("AuthenticAMD", 25, "fma avx2 avx512f", 16),  # Zen 4: 512-bit FMAs on 256-bit pipes
    ("AuthenticAMD", 25, "fma avx2", 16),          # Zen 3
    ("AuthenticAMD", 26, "fma avx2 avx512f", 32),  # Zen 5: full-width pipes
    ("GenuineIntel", 6, "sse2", 8),
])
def test_nominal_peak_counts_the_fma_lanes_of_the_cpu(vendor, family, flags, lanes):
    from bmlib_relax.bench.peak import fma_lanes_per_cycle

    cpuinfo = (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
               f"flags\t\t: fpu {flags}\nprocessor\t: 1\nvendor_id\t: Other\n")
    assert fma_lanes_per_cycle(cpuinfo)[0] == lanes


def test_a_misspelt_model_is_a_usage_error_before_any_work(tmp_path):
    # It used to be a FileNotFoundError traceback after every model before it had run.
    proc = cli("bench", "seed_reshape_conv2d_add_bn_relu", "resnet-18", "--no-torch",
               "--no-runtimes", "--layers", "none", "--json", tmp_path / "b.json")
    assert proc.returncode == 2
    assert "unknown model 'resnet-18'" in proc.stderr and "resnet18" in proc.stderr
    assert "benchmarking" not in proc.stderr and not (tmp_path / "b.json").exists()
    assert "Traceback" not in proc.stderr


def test_model_problems_name_what_is_missing(tmp_path):
    from pathlib import Path

    from bmlib_relax.bench.models import golden_names, model_problem

    goldens = Path(__file__).parent / "data"
    assert "resnet18" in golden_names(goldens)
    assert model_problem("resnet18", goldens, None) is None
    assert model_problem("bert_layer", goldens, None) is None
    assert "--corpus" in model_problem("resnet50", goldens, None)
    assert model_problem("resnet50", goldens, tmp_path) is None
    assert "no golden cases in" in model_problem("mobilenet", tmp_path, None)
    for tool in ("bmlib_relax.bench.layer_compare", "bmlib_relax.bench.partition_profile"):
        import subprocess
        import sys

        proc = subprocess.run([sys.executable, "-m", tool, "nosuch", "--goldens", str(goldens)],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and "unknown model 'nosuch'" in proc.stderr, tool


def test_bench_builds_for_the_target_it_is_given(tmp_path):
    """``--target`` (tvmc's spelling): AVX2 code timed on whatever host runs it."""
    out = tmp_path / "bench.json"
    proc = cli("bench", "seed_reshape_conv2d_add_bn_relu", "--no-torch", "--no-runtimes",
               "--seconds", "0.05", "--layers", "none", "--threads", "1", "--json", out,
               "--target", "llvm -mcpu=znver3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'target {"kind": "llvm", "mcpu": "znver3"}' in proc.stdout
    data = json.loads(out.read_text())
    assert data["target"] == {"kind": "llvm", "mcpu": "znver3"}
    assert data["results"][0]["max_abs_diff"]["bmlib_vs_plain"] < 1e-4


@pytest.mark.parametrize("target", ["llvm -mcpu=no-such-cpu", "-mcpu=znver3"])
def test_bench_refuses_a_bad_target_before_benchmarking(target):
    proc = cli("bench", "seed_reshape_conv2d_add_bn_relu", "--no-torch", "--no-runtimes",
               "--layers", "none", "--target", target)
    assert proc.returncode == 2 and "--target" in proc.stderr, proc.stderr
    assert "benchmarking" not in proc.stderr


def test_reference_isa_caps_openvino_through_onednn(monkeypatch):
    from bmlib_relax.bench import harness

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(harness, "_scaling", lambda argv, counts, json_path=None:
                        monkeypatch.setitem(seen, "argv", argv) or 0)
    seen: dict = {}
    assert harness.main(["transformer_block", "--scaling", "--reference-isa", "avx2",
                         "--target", "llvm -mcpu=znver3"]) == 0
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    # each thread count's process gets the same target and cap
    assert "--reference-isa" in seen["argv"] and "llvm -mcpu=znver3" in seen["argv"]
