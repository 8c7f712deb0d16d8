"""Progress lines appear on a terminal only."""
from __future__ import annotations

import io
import os
import subprocess
import sys

from bmlib_relax.progress import Progress

from conftest import ROOT


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_steps(progress: Progress) -> None:
    with progress.step("parse model.relay"):
        pass
    with progress.step("codegen"):
        progress.item(1, 2, "fused_a")
        progress.item(2, 2, "fused_b")


def test_progress_on_a_terminal():
    stream = FakeTTY()
    run_steps(Progress(stream=stream))
    text = stream.getvalue()
    assert text.startswith("parse model.relay ... done (")
    assert "[1/2] fused_a" in text and "[2/2] fused_b" in text


def test_quiet_when_not_a_terminal_or_asked():
    stream = io.StringIO()
    run_steps(Progress(stream=stream))
    assert stream.getvalue() == ""
    tty = FakeTTY()
    run_steps(Progress(enabled=False, stream=tty))
    assert tty.getvalue() == ""


def test_convert_script_is_the_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "convert_relay_pipeline.py"),
                           str(tmp_path / "missing.relay"), "-o", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == f"error: model file not found: {tmp_path / 'missing.relay'}"
