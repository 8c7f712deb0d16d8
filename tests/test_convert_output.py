"""``convert`` writes its output folder atomically and never over someone's files.

Everything is written into a temporary folder beside ``-o`` and renamed into place at
the end: a failed or interrupted run leaves nothing, or the previous complete output;
a non-empty ``-o`` is refused (exit 2, untouched) unless ``--force``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bmlib_relax
import bmlib_relax.convert as convert_module
from bmlib_relax import interrupts
from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.errors import ParamError

from conftest import ROOT, cli

EXAMPLE = Path(EXAMPLE_DIR)
CONVERT = ("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz", "-q")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Path:
    """A complete earlier conversion (the output a failed run must not damage)."""
    out = tmp_path_factory.mktemp("prev") / "out"
    proc = cli(*CONVERT, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


def copy_of(previous: Path, parent: Path) -> Path:
    out = parent / "out"
    out.mkdir()
    for name, data in snapshot(previous).items():
        (out / name).write_bytes(data)
    return out


def test_non_empty_output_is_refused_and_left_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("mine")
    proc = cli(*CONVERT, "-o", out)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (f"error: output folder {out} is not empty; use "
                                           "--force to replace its contents")
    assert snapshot(out) == {"report.json": b"mine"}


def test_force_replaces_the_whole_folder(previous, tmp_path):
    out = copy_of(previous, tmp_path)
    (out / "model.json").write_text("{}")
    (out / "stale_notes.txt").write_text("from an earlier run")
    proc = cli(*CONVERT, "--force", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == ["model.json", "model.so", "model_relax.py", "report.html",
                                       "report.json", "report.md", "weights.npz"]
    assert leftovers(tmp_path) == []
    bmlib_relax.load(out / "model.so")  # hash-verified


def test_force_refuses_a_folder_that_is_not_a_previous_conversion(tmp_path):
    out = tmp_path / "home"
    (out / "projects").mkdir(parents=True)
    (out / "notes.txt").write_text("precious")
    proc = cli(*CONVERT, "--force", "-o", out)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0].startswith(
        f"error: output folder {out} does not hold a previous conversion")
    assert (out / "notes.txt").read_text() == "precious" and (out / "projects").is_dir()


def test_force_refuses_the_working_directory(previous, tmp_path):
    out = copy_of(previous, tmp_path)
    proc = cli(*CONVERT, "--force", "-o", ".", cwd=out)
    assert proc.returncode == 2
    assert "contains the working directory" in proc.stderr.splitlines()[0]
    assert snapshot(out) == snapshot(previous)


def test_empty_existing_output_folder_is_used(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = cli(*CONVERT, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.so").is_file() and leftovers(tmp_path) == []


def test_missing_parent_folders_are_created(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    proc = cli(*CONVERT, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.json").is_file()


def _interrupt_during_conversion(out: Path, *extra) -> subprocess.CompletedProcess:
    """Start convert and send SIGINT once its temporary folder exists (mid-compile)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # The child gets SIGINT's default disposition, as a command started from a terminal
    # has: under a non-interactive shell's background job (a CI runner, `cmd &`) it is
    # inherited as ignored, Python then installs no KeyboardInterrupt handler, and the
    # conversion would run to completion whatever the test sends.
    proc = subprocess.Popen([sys.executable, "-m", "bmlib_relax", *map(str, CONVERT), "--check",
                             *extra, "-o", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.name.startswith(f".{out.name}.tmp-") for p in out.parent.iterdir()):
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.01)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    proc = _interrupt_during_conversion(out)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[0].startswith("interrupted")
    assert not out.exists() and leftovers(tmp_path) == []


def test_ctrl_c_with_force_leaves_the_previous_output(previous, tmp_path):
    out = copy_of(previous, tmp_path)
    proc = _interrupt_during_conversion(out, "--force")
    assert proc.returncode == 130, proc.stderr
    assert snapshot(out) == snapshot(previous)
    assert leftovers(tmp_path) == []


def _swallow_a_ctrl_c(monkeypatch):
    """The Ctrl-C handler ran (recorded), but its ``KeyboardInterrupt`` came out of a TVM
    callback as an error that a tolerant step caught: the work goes on."""
    real = convert_module.write_json

    def swallowed(*args, **kwargs):
        interrupts.request()
        return real(*args, **kwargs)

    monkeypatch.setattr(convert_module, "write_json", swallowed)


def test_a_swallowed_ctrl_c_still_publishes_nothing(previous, tmp_path, monkeypatch):
    out = copy_of(previous, tmp_path)
    _swallow_a_ctrl_c(monkeypatch)
    try:
        with pytest.raises(KeyboardInterrupt):
            convert_module.convert(EXAMPLE / "model.relay", out,
                                   params=EXAMPLE / "params.npz", force=True)
    finally:
        interrupts.clear()
    assert snapshot(out) == snapshot(previous)
    assert leftovers(tmp_path) == []


def test_publishing_refuses_after_a_ctrl_c(previous, tmp_path):
    out = copy_of(previous, tmp_path)
    staging = convert_module._Staging(str(out))
    (Path(staging.path) / "model.json").write_text("new")
    interrupts.request()
    try:
        with pytest.raises(KeyboardInterrupt):
            staging.publish(force=True)
    finally:
        interrupts.clear()
        staging.discard()
    assert snapshot(out) == snapshot(previous)
    assert leftovers(tmp_path) == []


def test_atomic_write_refuses_after_a_ctrl_c(tmp_path):
    from bmlib_relax.runtime import atomic_write

    target = tmp_path / "a.json"
    target.write_text("old")
    interrupts.request()
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write(str(target), lambda tmp: Path(tmp).write_text("new"))
    finally:
        interrupts.clear()
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_swallowed_ctrl_c_exits_130(tmp_path, monkeypatch):
    """In the command: no output folder, exit 130, and the recorded interrupt is forgotten
    once the command ends (a library caller's next conversion is not refused)."""
    from bmlib_relax.cli import EXIT_INTERRUPTED, main

    out = tmp_path / "out"
    _swallow_a_ctrl_c(monkeypatch)
    assert main([str(a) for a in CONVERT] + ["-o", str(out)]) == EXIT_INTERRUPTED
    assert not out.exists() and leftovers(tmp_path) == []
    assert not interrupts.requested()


def test_ctrl_c_after_publishing_says_the_output_is_complete(tmp_path, monkeypatch):
    """A Ctrl-C that lands after the output folder was renamed into place: exit 130,
    the output stays, and the message does not claim nothing was written."""
    from bmlib_relax import cli as cli_module

    out = tmp_path / "out"
    messages = []
    real_convert = convert_module.convert

    def then_interrupted(*args, **kwargs):
        result = real_convert(*args, **kwargs)
        messages.append(cli_module._interrupted_message(cli_module.build_parser().parse_args(
            [str(a) for a in CONVERT] + ["-o", str(out)])))
        interrupts.request()
        return result

    monkeypatch.setattr(convert_module, "convert", then_interrupted)
    assert cli_module.main([str(a) for a in CONVERT] + ["-o", str(out)]) == \
        cli_module.EXIT_INTERRUPTED
    assert (out / "model.so").is_file()
    assert messages == ["interrupted: after the output folder was written (it is complete)"]


def test_interrupt_while_writing_keeps_the_previous_output(previous, tmp_path, monkeypatch):
    out = copy_of(previous, tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert_module, "write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_module.convert(EXAMPLE / "model.relay", out, params=EXAMPLE / "params.npz",
                               force=True)
    assert snapshot(out) == snapshot(previous)
    assert leftovers(tmp_path) == []


def test_failed_conversion_removes_folders_it_created(tmp_path, monkeypatch):
    out = tmp_path / "new" / "out"

    def broken(*args, **kwargs):
        raise ParamError("injected failure")

    monkeypatch.setattr(convert_module, "write_json", broken)
    with pytest.raises(ParamError, match="injected"):
        convert_module.convert(EXAMPLE / "model.relay", out, params=EXAMPLE / "params.npz")
    assert list(tmp_path.iterdir()) == []


def test_output_that_is_a_file_is_refused_before_compiling(tmp_path, monkeypatch):
    target = tmp_path / "out"
    target.write_text("not a folder")
    monkeypatch.setattr(convert_module, "import_relay", None)  # would fail if reached
    with pytest.raises(ParamError, match="exists and is not a folder"):
        convert_module.convert(EXAMPLE / "model.relay", target, params=EXAMPLE / "params.npz")
    assert target.read_text() == "not a folder"
