"""Exit codes of the real CLI (subprocesses): 2 for bad input, first stderr line the cause.

Each case used to end with exit 3 and a traceback (or, for a pattern module calling
``sys.exit(0)``, with exit 0 and nothing written).  Exit 3 stays for genuine
internal errors.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bmlib_relax.cli import EXAMPLE_DIR

from conftest import ROOT, cli

EXAMPLE = Path(EXAMPLE_DIR)
MODEL, PARAMS = EXAMPLE / "model.relay", EXAMPLE / "params.npz"


def first_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    return lines[0] if lines else ""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Bad inputs of every kind, in one folder."""
    d = tmp_path_factory.mktemp("bad")
    (d / "folder").mkdir()
    (d / "latin1.relay").write_bytes(b'#[version = "0.0.5"]\ndef @main() { 0f }\n# caf\xe9\n')
    (d / "empty.relay").write_text("  \n")
    (d / "no_main.relay").write_text('#[version = "0.0.5"]\n'
                                     "def @helper(%x: Tensor[(1), float32]) { %x }\n")
    (d / "a_file").write_text("x")
    (d / "garbage.npy").write_bytes(b"\x93NUMPY garbage")
    np.save(d / "objects.npy", np.array([1, "x"], dtype=object), allow_pickle=True)
    (d / "not_a_pattern.py").write_text(
        "from tvm.relay.dataflow_pattern import is_op, wildcard\n"
        "def pattern_table():\n"
        "    return [('bmlib.relu', 'nn.relu(%x)')]\n")
    (d / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (d / "table_exits.py").write_text("import sys\ndef pattern_table():\n    sys.exit(0)\n")
    (d / "check_exits.py").write_text(
        (EXAMPLE / "bmlib_patterns.py").read_text().replace(
            "def _check_conv(call):", "def _check_conv(call):\n    import sys\n    sys.exit(0)"))
    (d / "not_an_artifact.so").write_text("just text")
    return d


CASES = {
    # name: (argv built from the files folder, expected start of the first stderr line)
    "model-is-a-directory": (lambda d: ["convert", d / "folder"],
                             "error: model file {d}/folder is a directory"),
    "params-is-a-directory": (lambda d: ["convert", MODEL, "--params", d / "folder"],
                              "error: params file {d}/folder is a directory"),
    "patterns-is-a-directory": (lambda d: ["convert", MODEL, "--patterns", d / "folder"],
                                "error: pattern table file {d}/folder is a directory"),
    "lowerings-is-a-directory": (lambda d: ["convert", MODEL, "--lowerings", d / "folder"],
                                 "error: lowerings module file {d}/folder is a directory"),
    "model-not-utf8": (lambda d: ["convert", d / "latin1.relay"],
                       "error: {d}/latin1.relay:3:6: not UTF-8 text (byte offset 45"),
    "model-empty": (lambda d: ["convert", d / "empty.relay"],
                    "error: {d}/empty.relay:1:1: the model file is empty"),
    "model-without-main": (lambda d: ["convert", d / "no_main.relay"],
                           "error: {d}/no_main.relay:1:1: no def @main in the module "
                           "(functions defined: @helper)"),
    "output-is-a-file": (lambda d: ["convert", MODEL, "--params", PARAMS, "-o", d / "a_file"],
                         "error: output {d}/a_file exists and is not a folder"),
    "output-cannot-be-created": (lambda d: ["convert", MODEL, "--params", PARAMS,
                                            "-o", d / "a_file" / "out"],
                                 "error: output folder {d}/a_file/out cannot be created"),
    "inputs-negative-dim": (lambda d: ["convert", MODEL, "--inputs", "data=1,-128,12,40"],
                            "error: bad --inputs spec 'data=1,-128,12,40': dimension -128"),
    "inputs-huge-dim": (lambda d: ["convert", MODEL, "--inputs", "data=1,128,99999999999,40"],
                        "error: bad --inputs spec 'data=1,128,99999999999,40': dimension"),
    "inputs-huge-total": (lambda d: ["convert", MODEL, "--inputs", "data=100000,128,1200,40"],
                          "error: bad --inputs spec 'data=100000,128,1200,40': "),
    "inputs-given-twice": (lambda d: ["convert", MODEL, "--inputs", "data=1,128,12,40",
                                      "data=1,128,12,41"],
                           "error: --inputs gives input 'data' twice"),
    "inputs-garbage-npy": (lambda d: ["convert", MODEL, "--inputs", f"data={d}/garbage.npy"],
                           "error: input 'data': {d}/garbage.npy is not a readable .npy"),
    "inputs-object-npy": (lambda d: ["convert", MODEL, "--inputs", f"data={d}/objects.npy"],
                          "error: input 'data': {d}/objects.npy is not a readable .npy"),
    "pattern-entry-not-a-pattern": (lambda d: ["convert", MODEL, "--patterns",
                                               d / "not_a_pattern.py"],
                                    "error: pattern 'bmlib.relu': str 'nn.relu(%x)' is not a "
                                    "pattern"),
    "pattern-module-sys-exit": (lambda d: ["convert", MODEL, "--patterns", d / "exits.py"],
                                "error: {d}/exits.py: pattern table called sys.exit(0)"),
    "pattern-table-sys-exit": (lambda d: ["convert", MODEL, "--patterns", d / "table_exits.py"],
                               "error: {d}/table_exits.py: pattern table called sys.exit(0)"),
    "check-function-sys-exit": (lambda d: ["convert", MODEL, "--params", PARAMS, "--patterns",
                                           d / "check_exits.py"],
                                "error: {d}/check_exits.py:10: check of pattern "
                                "'bmlib.reshape_conv2d_add_bn_relu' raised SystemExit: 0"),
    "lowerings-module-sys-exit": (lambda d: ["convert", MODEL, "--lowerings", d / "exits.py"],
                                  "error: {d}/exits.py: lowerings module called sys.exit(0)"),
    "run-not-an-artifact": (lambda d: ["run", d / "not_an_artifact.so"],
                            "error: {d}/not_an_artifact.so: not a bmlib-relax artifact"),
    "run-a-directory": (lambda d: ["run", d / "folder"],
                        "error: {d}/folder: is a directory"),
    "run-missing": (lambda d: ["run", d / "nothing.so"],
                    "error: artifact not found: {d}/nothing.so"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_the_cause_first(case, files, tmp_path):
    argv, expected = CASES[case]
    args = [str(a) for a in argv(files)]
    if args[0] == "convert" and "-o" not in args:
        args += ["-o", str(tmp_path / "out")]
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert first_line(proc).startswith(expected.format(d=files)), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_genuine_internal_error_exits_3_with_its_first_line(tmp_path):
    script = textwrap.dedent("""
        import sys
        import bmlib_relax.convert as convert

        def broken(*args, **kwargs):
            raise RuntimeError("injected internal failure\\n  detail line\\nlast line")

        convert.build_verified = broken
        from bmlib_relax.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script, "convert", str(MODEL), "--params",
                           str(PARAMS), "-o", str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert first_line(proc) == "internal error: RuntimeError: injected internal failure"
    assert not (tmp_path / "out").exists()
