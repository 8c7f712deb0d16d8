"""The CLI speaks tvmc (issue #16 part 2): --version, run -i/-o/--fill-mode/--print-time,
--input-shapes, target strings, -v/--progress/-q, list-ops --json, report versions."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tvm

from bmlib_relax.backend.target import parse_target_string, resolve_target
from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.cli_tvmc import parse_input_shapes
from bmlib_relax.errors import ParamError, TargetError
from bmlib_relax.recipe import recipe_tensor

from conftest import cli
from test_cli_convert import validate_report

EXAMPLE = Path(EXAMPLE_DIR)
SHAPE = (1, 128, 12, 40)
HOST_CPU = str(tvm.target.codegen.llvm_get_system_cpu())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """convert with tvmc habits: --inputs x.npz *before* the model, a target string, -v."""
    tmp = tmp_path_factory.mktemp("tvmc")
    np.savez(tmp / "inputs.npz", data=recipe_tensor("data", SHAPE, "float32", "input"))
    proc = cli("-v", "convert", "--inputs", tmp / "inputs.npz", EXAMPLE / "model.relay",
               "--params", EXAMPLE / "params.npz", "--target", f"llvm -mcpu={HOST_CPU}",
               "-o", tmp / "out")
    return proc, tmp


def test_version():
    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    from bmlib_relax import __version__

    assert proc.stdout.splitlines() == [
        f"bmlib-relax {__version__}", f"apache-tvm {tvm.__version__}",
        f"LLVM {tvm.target.codegen.llvm_version_major()}"]


def test_convert_npz_inputs_before_model_and_target_string(converted):
    proc, tmp = converted
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = validate_report(tmp / "out" / "report.json")
    assert json.loads(report["target"])["mcpu"] == HOST_CPU
    assert report["versions"] == {"bmlib_relax": "0.1.0", "apache_tvm": tvm.__version__,
                                  "llvm": str(tvm.target.codegen.llvm_version_major())}
    assert report["signature"] == {
        "inputs": [{"name": "data", "shape": list(SHAPE), "dtype": "float32"}],
        "outputs": [{"name": "out0", "shape": list(SHAPE), "dtype": "float32"}]}
    markdown = (tmp / "out" / "report.md").read_text()
    assert "apache_tvm" in markdown and "- outputs: `out0` (1, 128, 12, 40) float32" in markdown
    # -v logs through `logging`; stderr is a pipe, so no progress lines without --progress
    assert "INFO bmlib_relax: target: " in proc.stderr
    assert "INFO bmlib_relax.progress: codegen" in proc.stderr
    assert "codegen ..." not in proc.stderr


def test_input_shapes_tvmc_syntax_and_forced_progress(tmp_path):
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "--input-shapes", "data:[1,128,12,40]", "--progress", "-o", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "parse model.relay ... done" in proc.stderr and "build ... done" in proc.stderr
    assert "INFO" not in proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["inputs"][0]["shape"] == list(SHAPE)


def test_input_shapes_must_agree_with_inputs(tmp_path):
    np.save(tmp_path / "data.npy", np.zeros(SHAPE, "float32"))
    proc = cli("convert", EXAMPLE / "model.relay", "--inputs", f"data={tmp_path / 'data.npy'}",
               "--input-shapes", "data:[1,128,12,41]", "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: input 'data': --input-shapes says [1, 128, 12, 41], "
                                  "--inputs gives [1, 128, 12, 40]")


def test_input_shapes_parser():
    assert parse_input_shapes("data:[1,3,224,224] input:0:[1, 8]  s:[]") == [
        ("data", (1, 3, 224, 224)), ("input:0", (1, 8)), ("s", ())]
    with pytest.raises(ParamError, match="at character 13: expected name:"):
        parse_input_shapes("data:[1,3]  x=[1]")
    with pytest.raises(ParamError, match="'x' has non-integer dims"):
        parse_input_shapes("x:[1,a]")


def test_target_strings_translate():
    assert parse_target_string("llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma -num-cores=4 "
                               "-fast-math") == {
        "kind": "llvm", "mcpu": "skylake-avx512", "mattr": ["+avx2", "+fma"], "num-cores": 4,
        "fast-math": True}
    target = resolve_target("llvm -mcpu=skylake-avx512 -mattr=+avx2")
    assert str(target.attrs["mcpu"]) == "skylake-avx512"
    assert [str(a) for a in target.attrs["mattr"]] == ["+avx2"]
    assert str(resolve_target("llvm -mcpu=native").attrs["mcpu"]) == HOST_CPU
    assert str(resolve_target('{"kind": "llvm", "mcpu": "znver3"}').attrs["mcpu"]) == "znver3"
    with pytest.raises(TargetError, match="LLVM does not know the CPU 'bogus'"):
        resolve_target("llvm -mcpu=bogus")


@pytest.mark.parametrize("target, message", [
    ("llvm -foo=bar -mcpu=znver3", "error: target 'llvm -foo=bar -mcpu=znver3' is not accepted "
                                   "by TVM 0.27: Unknown config option 'foo'.; write --target "
                                   "'{\"kind\": \"llvm\", \"mcpu\": \"znver3\"}'"),
    ("cuda2 -arch=sm_80", "error: unknown target kind 'cuda2' in 'cuda2 -arch=sm_80'"),
])
def test_bad_targets_exit_2_with_the_spelling(target, message, tmp_path):
    proc = cli("convert", EXAMPLE / "model.relay", "--target", target, "-o", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0].startswith(message), proc.stderr


def test_quiet_silences_tvm_cpp_log_lines(tmp_path):
    """A pattern table whose import makes TVM's C++ side log a line to fd 2."""
    noisy = tmp_path / "noisy_patterns.py"
    noisy.write_text("import tvm.target.codegen\n"
                     "tvm.target.codegen.target_has_features(\n"
                     "    'avx', tvm.target.Target({'kind': 'llvm', 'mcpu': 'bogus'}))\n"
                     + (EXAMPLE / "bmlib_patterns_wildcard.py").read_text())
    args = ["convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
            "--patterns", noisy]
    loud = cli(*args, "-o", tmp_path / "a")
    assert loud.returncode == 0, loud.stderr
    assert "llvm_instance.cc" in loud.stderr and "-mcpu=bogus" in loud.stderr
    quiet = cli(*args, "-q", "-o", tmp_path / "b")
    assert quiet.returncode == 0, quiet.stderr
    # Only the note naming the undeclared inputs stays (a missing weight is never silent).
    assert quiet.stderr.splitlines()[0].startswith("note: no --inputs given"), quiet.stderr
    assert "llvm_instance.cc" not in quiet.stderr and "codegen ..." not in quiet.stderr
    assert "1 bmlib partition(s)" in quiet.stdout
    ci = cli(*args, "-q", "--progress", "-o", tmp_path / "c")  # progress kept, noise dropped
    assert ci.returncode == 0, ci.stderr
    assert "codegen ..." in ci.stderr and "llvm_instance.cc" not in ci.stderr


def test_run_tvmc_flags(converted):
    _, tmp = converted
    model = tmp / "out" / "model.so"
    proc = cli("run", model, "-i", tmp / "inputs.npz", "-o", tmp / "outputs.npz",
               "--print-time", "--repeat", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines.index("Execution time summary:")
    assert lines[header + 1].split() == ["mean", "(ms)", "median", "(ms)", "max", "(ms)", "min",
                                         "(ms)", "std", "(ms)"]
    assert all(float(x) >= 0 for x in lines[header + 2].split())
    out = np.load(tmp / "outputs.npz")["out0"]
    assert out.shape == SHAPE
    # the old spelling, with an .npz, gives the same
    again = cli("run", model, "--input", tmp / "inputs.npz", "--output", tmp / "again.npz")
    assert again.returncode == 0, again.stderr
    np.testing.assert_array_equal(np.load(tmp / "again.npz")["out0"], out)


def test_run_fill_mode(converted):
    _, tmp = converted
    proc = cli("run", tmp / "out" / "model.so", "--fill-mode", "zeros",
               "-o", tmp / "zeros.npz")
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp / "zeros.npz")["out0"]
    # conv(0) + bias -> batch_norm -> relu: the same value at every pixel of a channel
    assert np.all(out == out[:, :, :1, :1])
    proc = cli("run", tmp / "out" / "model.so", "--fill-mode", "random")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"out0: shape {SHAPE}")


def test_list_ops_json():
    proc = cli("list-ops", "--json")
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)
    rows = {r["relay"]: r["relax"] for r in table["relay_ops"]}
    from bmlib_relax.importer import supported_ops

    assert sorted(rows) == list(supported_ops())
    # nn.conv2d is relax.nn.conv2d (plus the layout transposes some Relay layouts need,
    # and the zero padding of a channel count a blocked out_layout does not divide).
    assert rows["nn.conv2d"][0] == {"op": "relax.nn.conv2d", "bmlib_template": True}
    assert {r["op"] for r in rows["nn.conv2d"]} <= {"relax.nn.conv2d", "relax.permute_dims",
                                                    "relax.reshape", "relax.nn.pad"}
    assert all(r["bmlib_template"] for r in rows["nn.conv2d"])
    assert {"op": "relax.matmul", "bmlib_template": True} in rows["nn.dense"]
    assert {"op": "relax.nn.adaptive_avg_pool1d", "bmlib_template": False} in \
        rows["nn.adaptive_avg_pool1d"]
    assert rows["copy"] == []
    assert "relax.nn.conv2d" in table["bmlib_templates"]
    text = cli("list-ops")
    assert any(line.split()[:2] == ["nn.conv2d", "relax.nn.conv2d"]
               for line in text.stdout.splitlines())
