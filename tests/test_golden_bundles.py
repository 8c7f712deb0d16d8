"""Golden bundles: record on the old stack, verify on bmlib-relax (issue #16 part 1).

The recorder cannot run here (no Relay in TVM 0.27): it runs under
``tests/fake_old_tvm``, a numpy stand-in for the Relay-era APIs it calls, so its
logic and the bundle format are exercised end to end, and ``bmlib-relax verify``
then checks the bundle it wrote.
"""
from __future__ import annotations

import ast
import configparser
import hashlib
import json
import os
import py_compile
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

from bmlib_relax.recipe import recipe_from_manifest
from bmlib_relax.verify_bundle import (BUNDLE_FILES, bundle_from_golden, read_bundle,
                                       sha256_of, write_bundle)

from conftest import DATA, ROOT, Golden, cli

SCRIPT = ROOT / "scripts" / "record_relay_golden.py"
FAKE_TVM = Path(__file__).parent / "fake_old_tvm"
BUNDLED_GOLDENS = ("op_dense", "mlp")


# --------------------------------------------------------------------------- the recorder
def test_recorder_is_python37_and_compiles(tmp_path):
    source = SCRIPT.read_text()
    ast.parse(source, filename=str(SCRIPT), feature_version=(3, 7))
    py_compile.compile(str(SCRIPT), cfile=str(tmp_path / "rec.pyc"), doraise=True)
    tree = ast.parse(source)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                            if isinstance(node, ast.ImportFrom) and node.module}
    assert "bmlib_relax" not in imported
    # f-strings parse under feature_version=(3, 7) except their "=" specifier; none are used
    assert not any(isinstance(n, ast.JoinedStr) for n in ast.walk(tree))
    doc = ast.get_docstring(tree)
    for api in ("relay.build", "save_param_dict", "graph_executor", "astext(show_meta_data=True)"):
        assert api in doc


def record(tmp_path: Path, *args, golden: str = "mlp") -> tuple[subprocess.CompletedProcess, list]:
    """Run the recorder under the fake old TVM (and check it never imports bmlib_relax)."""
    manifest = json.loads((DATA / golden / "manifest.json").read_text())
    np.savez(tmp_path / "w.npz", **recipe_from_manifest(manifest["params"], "param"))
    calls = tmp_path / "calls.json"
    driver = textwrap.dedent(f"""
        import json, sys
        import record_relay_golden as recorder
        rc = recorder.main(sys.argv[1:])
        import tvm
        json.dump(tvm.CALLS, open({str(calls)!r}, "w"))
        sys.exit(99 if "bmlib_relax" in sys.modules else rc)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_TVM), str(SCRIPT.parent)])
    proc = subprocess.run([sys.executable, "-c", driver, str(DATA / golden / "model.relay"),
                           "--params", str(tmp_path / "w.npz"), *map(str, args)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc, json.loads(calls.read_text()) if calls.exists() else []


def test_record_then_verify_round_trip(tmp_path):
    (tmp_path / "byoc.py").write_text(
        "def partition_for_mine(mod, params):\n    mod.partitioned_by = 'mine'\n    return mod\n")
    proc, calls = record(tmp_path, "--seed", "7", "--opt-level", "2", "--target", "llvm",
                         "--byoc", "byoc.py:partition_for_mine", "--rtol", "1e-5",
                         "-o", tmp_path / "bundle")
    assert proc.returncode == 0, proc.stderr
    assert calls == [{"build": "llvm", "opt_level": 2, "byoc": "mine"}]
    bundle = tmp_path / "bundle"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["format"] == "bmlib-golden-bundle"
    assert manifest["recorded_with"]["tvm_version"] == "0.19.0-fake"
    assert (manifest["target"], manifest["opt_level"], manifest["seed"]) == ("llvm", 2, 7)
    assert manifest["byoc"] == "byoc.py:partition_for_mine"
    assert manifest["tolerance"] == {"rtol": 1e-5, "atol": 1e-4}
    assert manifest["inputs"] == [{"name": "data", "shape": [2, 1, 28, 28], "dtype": "float32"}]
    assert [p["name"] for p in manifest["params"]][:2] == ["fc1_weight", "fc1_bias"]
    assert manifest["outputs"] == [{"name": "out0", "shape": [2, 10], "dtype": "float32"}]
    assert manifest["files"] == {f: sha256_of(bundle / f) for f in BUNDLE_FILES}
    assert (bundle / "model.relay").read_text() == (DATA / "mlp" / "model.relay").read_text()
    # seeded inputs: numpy RandomState(seed) uniform in [-1, 1)
    data = np.load(bundle / "inputs.npz")["data"]
    np.testing.assert_array_equal(
        data, np.random.RandomState(7).uniform(-1, 1, (2, 1, 28, 28)).astype("float32"))

    verified = cli("verify", bundle)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # 4: the batch_flatten is a view on the host, not a partition copying it
    assert verified.stdout.startswith("PASS bundle: 4 bmlib partition(s)")
    assert "rtol 1e-05" in verified.stdout


def test_record_with_given_inputs_reproduces_relay(tmp_path):
    """With the golden's own inputs, the fake Relay build gives the real Relay outputs."""
    manifest = json.loads((DATA / "mlp" / "manifest.json").read_text())
    np.savez(tmp_path / "in.npz", **recipe_from_manifest(manifest["inputs"], "input"))
    proc, _ = record(tmp_path, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "b" / "outputs.npz")["out0"]
    want = np.load(DATA / "mlp" / "expected.npz")["out0"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_record_from_a_python_model_file(tmp_path):
    """MODEL.py defining ``mod`` and ``params`` (the weights then need no --params)."""
    manifest = json.loads((DATA / "op_dense" / "manifest.json").read_text())
    np.savez(tmp_path / "dense_w.npz", **recipe_from_manifest(manifest["params"], "param"))
    (tmp_path / "my_model.py").write_text(textwrap.dedent(f"""
        import numpy as np
        from tvm import relay
        mod = relay.fromtext(open({str(DATA / "op_dense" / "model.relay")!r}).read())
        params = dict(np.load({str(tmp_path / "dense_w.npz")!r}))
    """))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(FAKE_TVM)
    proc = subprocess.run([sys.executable, str(SCRIPT), "my_model.py", "--seed", "3",
                           "-o", "bundle"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("recorded bundle: 1 input(s), 1 output(s), TVM 0.19.0-fake")
    manifest = read_bundle(tmp_path / "bundle").manifest
    assert [p["name"] for p in manifest["params"]] == ["w0_weight"]
    verified = cli("verify", tmp_path / "bundle")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_golden_to_bundle_script(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "golden_to_bundle.py"),
                           str(DATA / "op_dense"), "-o", str(tmp_path)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bundle = read_bundle(tmp_path / "op_dense")
    np.testing.assert_array_equal(bundle.outputs()[0],
                                  np.load(DATA / "op_dense" / "expected.npz")["out0"])


def test_record_rejects_incomplete_inputs(tmp_path):
    np.savez(tmp_path / "in.npz", other=np.zeros(3, "float32"))
    proc, _ = record(tmp_path, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "b")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: input 'data' is not in ")
    assert not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- verify
@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> Path:
    """Two vendored goldens (tests/data layout) converted into bundles, and the seed graph
    with its weights as constants in the text's #[metadata] section (no params)."""
    root = tmp_path_factory.mktemp("bundles")
    for case in BUNDLED_GOLDENS:
        bundle_from_golden(DATA / case, root / case)
    seed = Golden(DATA / "seed_reshape_conv2d_add_bn_relu")
    write_bundle(root / "seed_bound", (seed.folder / "model_bound.relay").read_text(), {},
                 seed.inputs(), seed.expected(), **seed.tolerance)
    return root


def copy_bundle(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_vendored_goldens_verify(bundles):
    proc = cli("verify", bundles)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["PASS mlp", "PASS op_dense",
                                                      "PASS seed_bound"]
    assert read_bundle(bundles / "op_dense").manifest["outputs"][0]["shape"] == [4, 16]


def test_damaged_bundle_is_an_error_naming_the_file(bundles, tmp_path):
    bundle = copy_bundle(bundles / "op_dense", tmp_path / "op_dense")
    blob = bytearray((bundle / "inputs.npz").read_bytes())
    blob[-30] ^= 0xFF
    (bundle / "inputs.npz").write_bytes(bytes(blob))
    proc = cli("verify", bundle)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bundle / 'inputs.npz'}: damaged: SHA-256 ")


def test_missing_file_and_bad_manifest(bundles, tmp_path):
    bundle = copy_bundle(bundles / "op_dense", tmp_path / "a")
    (bundle / "model.params").unlink()
    proc = cli("verify", bundle)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bundle / 'model.params'}: missing from the bundle")
    bundle = copy_bundle(bundles / "op_dense", tmp_path / "b")
    (bundle / "manifest.json").write_text('{"format": "bmlib-golden-bundle",\n  "files": }')
    proc = cli("verify", bundle)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bundle / 'manifest.json'}:2:12: invalid JSON")


def tamper_outputs(bundle: Path, delta: float) -> None:
    """Change outputs.npz and re-sign it, as a wrong recording would be."""
    outputs = dict(np.load(bundle / "outputs.npz"))
    outputs["out0"] = outputs["out0"] + np.float32(delta)
    np.savez(bundle / "outputs.npz", **outputs)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["outputs.npz"] = hashlib.sha256(
        (bundle / "outputs.npz").read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_tampered_outputs_fail(bundles, tmp_path):
    bundle = copy_bundle(bundles / "op_dense", tmp_path / "op_dense")
    tamper_outputs(bundle, 0.25)
    proc = cli("verify", bundle, "--atol", "1e-3", "--json", tmp_path / "results.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (result,) = json.loads((tmp_path / "results.json").read_text())
    assert (result["name"], result["ok"], result["atol"]) == ("op_dense", False, 1e-3)
    assert result["partitions"] and result["first_divergence"] is None
    assert result["outputs"][0]["max_abs"] == pytest.approx(0.25, rel=1e-3)
    first, detail = proc.stderr.splitlines()[:2]
    assert first.startswith("FAIL op_dense: out0 differs from the Relay output (max abs 0.25")
    assert "beyond rtol 0.0001, atol 0.001" in first
    # bmlib and the plain Relax build agree: the report says where to look instead
    assert "no intermediate differs between the bmlib and the plain Relax build" in detail
    assert "the plain build differs from outputs.npz too (max abs 0.25)" in detail


# --------------------------------------------------------------------------- pytest plugin
def plugin_env(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with a dist-info whose entry_points.txt is pyproject's pytest11 table,
    so pytest loads the plugin the way an installed bmlib-relax registers it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    table = project["entry-points"]["pytest11"]
    site = tmp_path / "site"
    dist = site / "bmlib_relax_plugin_check-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bmlib-relax-plugin-check\n"
                                   "Version: 0.0\n")
    entry_points = configparser.ConfigParser()
    entry_points["pytest11"] = dict(table)
    with open(dist / "entry_points.txt", "w") as handle:
        entry_points.write(handle)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))


def run_pytest(tmp_path: Path, *args) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:randomly", *map(str, args)], cwd=work,
                          env=plugin_env(tmp_path), capture_output=True, text=True, timeout=300)


def test_pyproject_registers_the_plugin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"bmlib_relax": "bmlib_relax.pytest_plugin"}
    assert "pytest" not in project["dependencies"]


def test_pytest_plugin_runs_one_test_per_bundle(bundles, tmp_path):
    proc = run_pytest(tmp_path, "--bmlib-golden", bundles, "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "collected 3 items" in proc.stdout
    assert "mlp/manifest.json::mlp PASSED" in proc.stdout
    assert "op_dense/manifest.json::op_dense PASSED" in proc.stdout
    assert "3 passed" in proc.stdout


def test_pytest_plugin_names_the_first_diverging_intermediate(bundles, tmp_path):
    """A bmlib relu template that adds 0.5 makes mlp's first relu the first divergence."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "conftest.py").write_text(textwrap.dedent("""
        from tvm import te
        from bmlib_relax.backend.templates.registry import TEMPLATES

        TEMPLATES.names()  # load the built-in templates before overriding one

        @TEMPLATES.register("relax.nn.relu", override=True)
        def broken_relu(call, inputs, ctx):
            x = inputs[0]
            return te.compute(x.shape, lambda *i: te.max(x(*i), 0.0) + 0.5, name="relu")
    """))
    proc = run_pytest(tmp_path, "--bmlib-golden", bundles, "-k", "mlp")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout and "2 deselected" in proc.stdout
    failure = proc.stdout[proc.stdout.index("GoldenMismatch: FAIL mlp"):]
    assert "out0 differs from the Relay output" in failure
    assert "first diverging intermediate:" in failure
    line = next(x for x in failure.splitlines() if "first diverging intermediate" in x)
    assert "from bmlib partition" in line and "relu" in line, line


def test_pytest_plugin_unknown_folder_is_a_usage_error(tmp_path):
    proc = run_pytest(tmp_path, "--bmlib-golden", tmp_path / "nope")
    assert proc.returncode == 4
    assert f"--bmlib-golden: bundle folder not found: {tmp_path / 'nope'}" in proc.stderr


def test_pytest_plugin_is_inert_without_the_option(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = run_pytest(tmp_path, "--co", "-q", "-p", "no:hypothesispytest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 test collected" in proc.stdout
