"""scripts/bench_conv_variants.py runs end to end (no timing is asserted)."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def test_bench_conv_variants_reports_each_layer():
    layers = ["resnext_g32_128c_28", "audio_t1d_k8_s4", "effnet_classifier_1x1"]
    args = [arg for layer in layers for arg in ("--only", layer)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_conv_variants.py"), *args,
         "--repeats", "1", "--seconds", "0.01", "--threads", "1"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split("|")[1].strip(): line.split("|")
            for line in proc.stdout.splitlines() if line.startswith("| ")}
    for layer in layers:
        cells = [cell.strip() for cell in rows[layer]]
        assert float(cells[4]) > 0 and float(cells[6]) > 0  # bmlib ms, plain ms
        assert cells[8] == ""  # no unscheduled block
