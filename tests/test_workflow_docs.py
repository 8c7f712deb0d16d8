"""The documented workflow commands run as written (issue #16 "Must show").

Reads the ``console`` blocks of the README's "Record on the old stack" and "The
command line, tvmc style" sections and runs each ``$ `` line in a folder holding ``model.relay`` and ``model.params`` (the mlp
golden): the recorder under ``tests/fake_old_tvm``, ``bmlib-relax`` through its
entry point, ``pytest`` with the plugin registered from pyproject's ``pytest11``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import tvm

from bmlib_relax.recipe import recipe_from_manifest

from conftest import DATA, ROOT, cli
from test_golden_bundles import FAKE_TVM, SCRIPT, plugin_env

README_SECTION = "Record on the old stack"


def documented_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    text = readme[readme.index(f"## {README_SECTION}"):]
    blocks = re.findall(r"```console\n(.*?)```", text, re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def test_documented_commands_run(tmp_path):
    commands = documented_commands()
    assert any(c.startswith("python record_relay_golden.py") for c in commands)
    assert any(c.startswith("bmlib-relax verify") for c in commands)
    manifest = json.loads((DATA / "mlp" / "manifest.json").read_text())
    (tmp_path / "model.relay").write_text((DATA / "mlp" / "model.relay").read_text())
    weights = recipe_from_manifest(manifest["params"], "param")
    (tmp_path / "model.params").write_bytes(bytes(tvm.runtime.save_param_dict(
        {k: tvm.runtime.tensor(v) for k, v in weights.items()})))
    old_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    old_env["PYTHONPATH"] = str(FAKE_TVM)
    pytest_env = dict(plugin_env(tmp_path / "plugin"), PYTEST_ADDOPTS="-p no:cacheprovider")
    for command in commands:
        argv = shlex.split(command)
        if argv[:2] == ["python", "record_relay_golden.py"]:
            proc = subprocess.run([sys.executable, str(SCRIPT), *argv[2:]], cwd=tmp_path,
                                  env=old_env, capture_output=True, text=True, timeout=120)
        elif argv[0] == "bmlib-relax":
            proc = cli(*argv[1:], cwd=tmp_path)
        elif argv[0] == "pytest":
            proc = subprocess.run([sys.executable, "-m", "pytest", *argv[1:]], cwd=tmp_path,
                                  env=pytest_env, capture_output=True, text=True, timeout=300)
        else:
            raise AssertionError(f"documented command the test does not know: {command}")
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
        if argv[:2] == ["bmlib-relax", "verify"]:
            # 4: the batch_flatten is a view on the host, not a partition copying it
            assert proc.stdout.startswith("PASS mlp: 4 bmlib partition(s)")
        if argv[0] == "pytest":
            assert "1 passed" in proc.stdout
    assert (tmp_path / "out" / "report.html").is_file()
    assert np.load(tmp_path / "outputs.npz")["out0"].shape == (2, 10)
