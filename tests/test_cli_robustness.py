"""The command line on awkward models and bad paths: exit 2 with a message, never a
traceback; nested outputs; ``--force`` and failed checks never lose someone's files;
SIGTERM cleans up like Ctrl-C."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import bmlib_relax
import bmlib_relax.convert as convert_module
from bmlib_relax.check import Difference
from bmlib_relax.cli import EXAMPLE_DIR, main
from bmlib_relax.runtime import named_outputs

from conftest import ROOT, cli

EXAMPLE = Path(EXAMPLE_DIR)
NESTED = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 4), float32]) '
          '{ %0 = nn.relu(%x); (%0, (%0, %x)) }\n')
FREE = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, 4), float32]) { nn.relu(%x) }\n'
TYPED = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 4), float32]) { nn.relu(%x) }\n')


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def nested(tmp_path_factory) -> Path:
    """A converted model whose output is ``(y, (y, x))``."""
    folder = tmp_path_factory.mktemp("nested")
    (folder / "nt.relay").write_text(NESTED)
    proc = cli("convert", folder / "nt.relay", "-o", folder / "out", "--check", "-q")
    assert proc.returncode == 0, proc.stderr
    return folder / "out"


@pytest.fixture(scope="module")
def free(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("free")
    (folder / "free.relay").write_text(FREE)
    proc = cli("convert", folder / "free.relay", "-o", folder / "out", "-q")
    assert proc.returncode == 0, proc.stderr
    return folder / "out"


# --------------------------------------------------------------------------- 1 nested outputs
def test_nested_tuple_outputs_are_flattened_in_the_report_and_check(nested):
    report = json.loads((nested / "report.json").read_text())
    assert [o["name"] for o in report["outputs"]] == ["out0", "out1.0", "out1.1"]
    assert [o["name"] for o in report["check"]["outputs"]] == ["out0", "out1.0", "out1.1"]
    assert report["check"]["ok"] is True
    assert report["signature"]["outputs"] == [  # the model's signature names them alike
        {"name": name, "shape": [2, 4], "dtype": "float32"}
        for name in ("out0", "out1.0", "out1.1")]


def test_run_lists_and_saves_nested_outputs(nested, tmp_path):
    proc = cli("run", nested / "model.so", "--fill-mode", "ones", "-o", tmp_path / "res.npz")
    assert proc.returncode == 0, proc.stderr
    assert [ln.split(":")[0] for ln in proc.stdout.splitlines()[:3]] == \
        ["out0", "out1.0", "out1.1"]
    with np.load(tmp_path / "res.npz") as npz:
        assert sorted(npz.files) == ["out0", "out1.0", "out1.1"]
        np.testing.assert_array_equal(npz["out1.1"], np.ones((2, 4), "float32"))


# --------------------------------------------------------------------------- 2 --force
def test_force_refuses_a_project_that_merely_has_a_model_json(tmp_path):
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "model.json").write_text("{}")
    (proj / "src" / "main.py").write_text("code")
    (tmp_path / "m.relay").write_text(TYPED)
    proc = cli("convert", tmp_path / "m.relay", "-o", proj, "--force", "-q")
    assert proc.returncode == 2, proc.stderr
    assert "does not hold a previous conversion" in proc.stderr.splitlines()[0]
    assert (proj / "src" / "main.py").read_text() == "code"


def test_force_refuses_a_conversion_holding_someone_s_folder(nested, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for item in nested.iterdir():
        (out / item.name).write_bytes(item.read_bytes())
    (out / "src").mkdir()
    (tmp_path / "m.relay").write_text(TYPED)
    proc = cli("convert", tmp_path / "m.relay", "-o", out, "--force", "-q")
    assert proc.returncode == 2 and "folder(s) a conversion never writes (src)" in proc.stderr
    assert (out / "src").is_dir()


# --------------------------------------------------------------------------- 3 failed check
def test_a_failed_check_keeps_the_previous_output(nested, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for item in nested.iterdir():
        (out / item.name).write_bytes(item.read_bytes())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (tmp_path / "m.relay").write_text(TYPED)
    monkeypatch.setattr(convert_module, "compare",
                        lambda got, *a: [Difference(name, 1.0, 1.0, False)
                                         for name, _ in named_outputs(got)])
    monkeypatch.setattr(convert_module, "first_divergence", lambda *a: None)
    status = main(["convert", str(tmp_path / "m.relay"), "-o", str(out), "--force", "--check",
                   "-q"])
    assert status == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    failed = tmp_path / "out.check-failed"
    assert json.loads((failed / "report.json").read_text())["check"]["ok"] is False
    assert f"{out} was left as it was" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# --------------------------------------------------------------------------- 4 SIGTERM
def test_sigterm_leaves_no_staging_folder(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "bmlib_relax", "convert",
                             str(EXAMPLE / "model.relay"), "--params",
                             str(EXAMPLE / "params.npz"), "--check", "-q", "-o", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.name.startswith(".out.tmp-") for p in tmp_path.iterdir()):
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.01)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.splitlines()[0].startswith("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_stale_staging_of_dead_runs_is_removed(tmp_path):
    dead = tmp_path / ".out.tmp-999999999-abc"  # above any pid_max: no such process
    alive = tmp_path / f".out.tmp-{os.getpid()}-abc"
    other = tmp_path / ".other.tmp-999999999-abc"
    for folder in (dead, alive, other):
        folder.mkdir()
    (tmp_path / "m.relay").write_text(TYPED)
    proc = cli("convert", tmp_path / "m.relay", "-o", tmp_path / "out", "-q")
    assert proc.returncode == 0, proc.stderr
    assert not dead.exists() and alive.is_dir() and other.is_dir()


# --------------------------------------------------------------------------- 5 --inputs files
def test_inputs_file_is_cast_to_the_declared_dtype(tmp_path):
    (tmp_path / "m.relay").write_text(TYPED)
    np.save(tmp_path / "x.npy", np.ones((2, 4), "float64"))
    proc = cli("convert", tmp_path / "m.relay", "--inputs", f"x={tmp_path / 'x.npy'}",
               "-o", tmp_path / "out", "--check", "-q")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "out" / "model.json").read_text())
    assert meta["inputs"] == [{"name": "x", "shape": [2, 4], "dtype": "float32"}]


def test_inputs_member_of_an_npz_file_as_run_reads_it(tmp_path):
    # name=file.npz: the member of that name (as `run --input` reads one), or the only one
    (tmp_path / "m.relay").write_text(TYPED)
    np.savez(tmp_path / "xs.npz", x=np.ones((2, 4), "float32"), other=np.zeros(3))
    proc = cli("convert", tmp_path / "m.relay", "--inputs", f"x={tmp_path / 'xs.npz'}",
               "-o", tmp_path / "out", "--check", "-q")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "out" / "model.json").read_text())
    assert meta["inputs"] == [{"name": "x", "shape": [2, 4], "dtype": "float32"}]
    proc = cli("convert", tmp_path / "m.relay", "--inputs", f"y={tmp_path / 'xs.npz'}",
               "-o", tmp_path / "out2", "-q")
    assert proc.returncode == 2 and "'y'" in proc.stderr and not (tmp_path / "out2").exists()


def test_inputs_file_that_a_cast_would_change_is_refused(tmp_path):
    (tmp_path / "m.relay").write_text(TYPED)
    np.save(tmp_path / "x.npy", np.full((2, 4), 1e300))
    proc = cli("convert", tmp_path / "m.relay", "--inputs", f"x={tmp_path / 'x.npy'}",
               "-o", tmp_path / "out", "-q")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --inputs x: the file holds float64 values")
    assert not (tmp_path / "out").exists()


def test_inputs_file_may_not_change_a_static_dim(tmp_path):
    (tmp_path / "m.relay").write_text(TYPED)
    np.save(tmp_path / "x.npy", np.ones((1, 4), "float32"))
    proc = cli("convert", tmp_path / "m.relay", "--inputs", f"x={tmp_path / 'x.npy'}",
               "-o", tmp_path / "out", "-q")
    assert proc.returncode == 2 and "dim 0 is 2, not 1" in proc.stderr


# --------------------------------------------------------------------------- 6 bad paths
@pytest.mark.parametrize("target", ["cuda", "c", "llvm -mtriple=aarch64-linux-gnu"])
def test_targets_this_machine_cannot_run_are_refused(tmp_path, target):
    (tmp_path / "m.relay").write_text(TYPED)
    proc = cli("convert", tmp_path / "m.relay", "-o", tmp_path / "out", "--target", target,
               "-q")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --target") and "not supported" in proc.stderr
    no_traceback(proc)


def test_bad_output_paths_are_exit_2(nested, tmp_path):
    so = nested / "model.so"
    cases = [
        ("run", so, "--fill-mode", "ones", "-o", tmp_path / "nodir" / "x.npz"),
        ("run", so, "--fill-mode", "ones", "-o", "/proc/x.npz"),
        ("verify", tmp_path / "nothing", "--json", tmp_path),
        ("bench", "--json", "/proc/x.json"),
    ]
    for args in cases:
        proc = cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        no_traceback(proc)


def test_dangling_symlink_output_is_refused(tmp_path):
    (tmp_path / "m.relay").write_text(TYPED)
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    proc = cli("convert", tmp_path / "m.relay", "-o", tmp_path / "link", "-q")
    assert proc.returncode == 2 and "dangling" in proc.stderr
    no_traceback(proc)


def test_patterns_file_that_is_not_utf8_is_exit_2(tmp_path):
    (tmp_path / "m.relay").write_text(TYPED)
    (tmp_path / "p.py").write_bytes(b"\xff\xfe table")
    proc = cli("convert", tmp_path / "m.relay", "--patterns", tmp_path / "p.py",
               "-o", tmp_path / "out", "-q")
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr
    no_traceback(proc)


def test_list_ops_into_a_closed_pipe_exits_quietly():
    read, write = os.pipe()
    os.close(read)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run([sys.executable, "-m", "bmlib_relax", "list-ops"], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 128 + signal.SIGPIPE and proc.stderr == ""


def test_run_refuses_a_string_member(nested, tmp_path):
    np.savez(tmp_path / "weird.npz", x=np.array(["a", "b"]))
    proc = cli("run", nested / "model.so", "-i", tmp_path / "weird.npz")
    assert proc.returncode == 2 and "member 'x' holds <U1 values" in proc.stderr


def test_run_on_an_empty_free_dim(free, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((0, 4), "float32"))
    proc = cli("run", free / "model.so", "--input", f"x={tmp_path / 'x.npy'}")
    assert proc.returncode == 0, proc.stderr
    assert "out0: shape (0, 4) dtype float32 (empty)" in proc.stdout


# --------------------------------------------------------------------------- 7, 8 run files
def test_run_output_name_and_message_agree(nested, tmp_path):
    proc = cli("run", nested / "model.so", "--fill-mode", "ones", "-o", tmp_path / "res.npy")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {tmp_path / 'res.npy.npz'}" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.npy.npz"]


def test_run_input_name_equals_npz_member(nested, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.full((2, 4), 2, "float32"), other=np.zeros(1))
    proc = cli("run", nested / "model.so", "--input", f"x={tmp_path / 'in.npz'}")
    assert proc.returncode == 0, proc.stderr
    assert "out0: shape (2, 4) dtype float32 min 2 max 2 sum 16" in proc.stdout


def test_run_npy_where_npz_is_expected(nested, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 4), "float32"))
    proc = cli("run", nested / "model.so", "-i", tmp_path / "x.npy")
    assert proc.returncode == 2
    assert "a single array (.npy), expected a .npz archive" in proc.stderr
    assert "TypeError" not in proc.stderr


def test_nested_outputs_load_in_process(nested):
    outputs = bmlib_relax.load(nested / "model.so")(np.ones((2, 4), "float32"))
    assert isinstance(outputs[1], tuple) and len(outputs[1]) == 2


def test_the_artifact_format_marker_is_one_value():
    # preflight keeps its own copy (it must not import TVM through runtime).
    from bmlib_relax import preflight, runtime

    assert preflight.ARTIFACT_FORMAT == runtime.ARTIFACT_FORMAT


@pytest.mark.parametrize("option, value", [("--rtol", "-1"), ("--atol", "nan"),
                                           ("--rtol", "inf"), ("--atol", "x")])
def test_a_tolerance_is_a_finite_number_not_below_zero(option, value, tmp_path):
    # A negative or NaN tolerance failed every check and blamed a partition for it.
    for command in (["convert", tmp_path / "m.relay", "-o", tmp_path / "out", "--check"],
                    ["verify", tmp_path]):
        proc = cli(*command, option, value)
        assert proc.returncode == 2 and option in proc.stderr, proc.stderr
        no_traceback(proc)
