"""The benchmark harness runs end to end (no timing is asserted: speed lives in scripts/)."""
from __future__ import annotations

import json

from conftest import cli


def test_bench_runs_and_reports_equivalent_builds(tmp_path):
    out = tmp_path / "bench.json"
    proc = cli("bench", "seed_reshape_conv2d_add_bn_relu", "--no-torch", "--seconds", "0.05",
               "--layers", "none", "--threads", "1", "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seed_reshape_conv2d_add_bn_relu" in proc.stdout and "peak fp32" in proc.stdout
    data = json.loads(out.read_text())
    (result,) = data["results"]
    assert set(result["timings"]) == {"bmlib", "plain"}
    assert result["flops"] == result["flops_offloaded"] > 0
    assert result["max_abs_diff"]["bmlib_vs_plain"] < 1e-4
