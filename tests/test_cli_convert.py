"""``bmlib-relax convert`` / ``run`` / ``demo`` end to end, in subprocesses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.convert import REPORT_SCHEMA_PATH
from bmlib_relax.recipe import recipe_tensor

from conftest import DATA, ROOT, Golden, cli

EXAMPLE = Path(EXAMPLE_DIR)


def validate_report(path: Path) -> dict:
    report = json.loads(path.read_text())
    schema = json.loads(Path(REPORT_SCHEMA_PATH).read_text())
    jsonschema.validate(report, schema)
    return report


def run_in_fresh_process(artifact: Path, inputs: dict[str, np.ndarray], tmp: Path) -> list:
    """Load the .so with bmlib_relax.load in a new interpreter; return its outputs."""
    paths = {}
    for name, value in inputs.items():
        paths[name] = tmp / f"in_{name}.npy"
        np.save(paths[name], value)
    script = textwrap.dedent(f"""
        import sys, numpy as np, bmlib_relax
        model = bmlib_relax.load({str(artifact)!r})
        feed = {{k: np.load(v) for k, v in {{{", ".join(f"{k!r}: {str(v)!r}" for k, v in paths.items())}}}.items()}}
        out = model(**feed)
        out = out if isinstance(out, tuple) else (out,)
        np.savez({str(tmp / "fresh_out.npz")!r}, *out)
        assert "bmlib_relax.importer" not in sys.modules, "load() must not need the importer"
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp / "fresh_out.npz") as npz:
        return [npz[f"arr_{i}"] for i in range(len(npz.files))]


@pytest.fixture(scope="module")
def example_conversion(tmp_path_factory):
    out = tmp_path_factory.mktemp("example")
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "--patterns", EXAMPLE / "bmlib_patterns.py", "--check", "-o", out)
    return proc, out


def test_example_converts_and_checks(example_conversion):
    proc, out = example_conversion
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "check passed" in proc.stdout
    for name in ("model_relax.py", "weights.npz", "model.so", "model.json", "report.md",
                 "report.json"):
        assert (out / name).is_file(), name
    report = validate_report(out / "report.json")
    (part,) = report["partitions"]
    assert part["composites"] == ["bmlib.reshape_conv2d_add_bn_relu"]
    assert (part["num_params"], part["num_args"]) == (7, 8)
    assert report["ops_host"] == {}
    assert report["check"]["ok"] and report["check"]["first_divergence"] is None
    assert "PASS" in (out / "report.md").read_text()


def test_artifact_loads_in_fresh_process_and_reproduces_report(example_conversion, tmp_path):
    _, out = example_conversion
    report = json.loads((out / "report.json").read_text())
    feed = {i["name"]: recipe_tensor(i["name"], i["shape"], i["dtype"], "input")
            for i in report["inputs"]}
    (result,) = run_in_fresh_process(out / "model.so", feed, tmp_path)
    assert list(result.shape) == report["outputs"][0]["shape"]
    assert float(result.astype(np.float64).sum()) == pytest.approx(report["outputs"][0]["sum"],
                                                                   rel=1e-6)


def test_tvmscript_reparses_and_runs(example_conversion):
    import tvm
    from tvm import relax

    _, out = example_conversion
    mod = tvm.script.from_source((out / "model_relax.py").read_text())
    weights = {k: tvm.runtime.tensor(v) for k, v in np.load(out / "weights.npz").items()}
    bound = relax.transform.BindParams("main", weights)(mod)
    assert [p.name for p in bound["main"].params] == ["data"]
    assert any("Codegen" in (f.attrs or {}) for f in bound.functions.values()
               if isinstance(f, relax.Function))


def test_run_command(example_conversion, tmp_path):
    _, out = example_conversion
    data = recipe_tensor("data", (1, 128, 12, 40), "float32", "input")
    np.save(tmp_path / "data.npy", data)
    proc = cli("run", out / "model.so", "--input", f"data={tmp_path / 'data.npy'}",
               "--output", tmp_path / "y.npz")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert f"sum {report['outputs'][0]['sum']:.6g}" in proc.stdout
    assert (tmp_path / "y.npz").is_file()


@pytest.mark.parametrize("case", ["op_conv2d_bias_relu", "mlp"])
def test_golden_models_convert(case, tmp_path):
    golden = Golden(DATA / case)
    np.savez(tmp_path / "params.npz", **golden.params())
    inputs = []
    for name, value in golden.inputs().items():
        np.save(tmp_path / f"{name}.npy", value)
        inputs.append(f"{name}={tmp_path / f'{name}.npy'}")
    out = tmp_path / "out"
    proc = cli("convert", DATA / case / "model.relay", "--params", tmp_path / "params.npz",
               "--inputs", *inputs, "--check", "--quiet", "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = validate_report(out / "report.json")
    assert report["partitions"], "nothing was offloaded"
    outputs = run_in_fresh_process(out / "model.so", golden.inputs(), tmp_path)
    for got, want in zip(outputs, golden.expected()):
        np.testing.assert_allclose(got, want, **golden.tolerance)


# --------------------------------------------------------------------------- bad input
def first_line(proc) -> str:
    return proc.stderr.strip().splitlines()[0]


def test_missing_model_file(tmp_path):
    proc = cli("convert", tmp_path / "nope.relay", "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert first_line(proc) == f"error: model file not found: {tmp_path / 'nope.relay'}"


def test_bad_inputs_spec(tmp_path):
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "--inputs", "data=1,a,3:float32", "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert first_line(proc).startswith("error: bad --inputs spec 'data=1,a,3:float32'")


def test_pattern_module_that_raises(tmp_path):
    table = tmp_path / "broken_table.py"
    table.write_text("from tvm.relay.dataflow_pattern import is_op\n"
                     "def pattern_table():\n"
                     "    raise RuntimeError('table is broken')\n")
    proc = cli("convert", EXAMPLE / "model.relay", "--patterns", table, "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert first_line(proc) == (f"error: {table}:3: pattern_table() raised RuntimeError: "
                                "table is broken")


def test_unsupported_op_model(tmp_path):
    model = tmp_path / "model.relay"
    model.write_text('#[version = "0.0.5"]\n'
                     "def @main(%x: Tensor[(1, 4), float32]) {\n"
                     "  nn.frobnicate(%x)\n"
                     "}\n")
    proc = cli("convert", model, "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert first_line(proc) == "error: 1 unsupported Relay op(s): nn.frobnicate"
    assert f"{model}:3:3: nn.frobnicate" in proc.stderr


def test_malformed_text_points_at_location(tmp_path):
    model = tmp_path / "model.relay"
    model.write_text(EXAMPLE.joinpath("model.relay").read_text().replace("%1 = nn.conv2d(",
                                                                         "%1 = nn.conv2d(("))
    proc = cli("convert", model, "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert first_line(proc).startswith(f"error: {model}:4:")


def test_demo_command():
    proc = cli("demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("check passed") == 2
    assert "OK: both variants" in proc.stdout
