"""A weight missing from the params must not silently become a model input.

When the caller declares the inputs, every other unbound parameter of ``@main`` is a
missing weight (one ``ParamError`` listing them all, exit 2); when nothing is
declared, the unbound parameters are the inputs and are named in the report, on
stderr, and by the check when it fills them with generated values.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.errors import ParamError
from bmlib_relax.relay import load_params

from conftest import cli, offloaded_partitions

EXAMPLE = Path(EXAMPLE_DIR)
TEXT = (EXAMPLE / "model.relay").read_text()


@pytest.fixture(scope="module")
def partial_params(tmp_path_factory) -> Path:
    """The example's weights without gamma and beta."""
    params = load_params(EXAMPLE / "params.npz")
    del params["gamma"], params["beta"]
    path = tmp_path_factory.mktemp("params") / "partial.npz"
    np.savez(path, **params)
    return path


def test_compile_with_declared_inputs_lists_every_missing_weight(partial_params):
    with pytest.raises(ParamError) as info:
        bmlib_relax.compile(TEXT, str(partial_params), inputs=["data"])
    message = str(info.value)
    assert "gamma, beta" in message and "declared inputs: data" in message


def test_input_shapes_keys_declare_the_inputs(partial_params):
    with pytest.raises(ParamError, match="missing weights.*gamma, beta"):
        bmlib_relax.compile(TEXT, str(partial_params), input_shapes={"data": (1, 128, 12, 40)})


def test_declared_input_that_is_not_a_parameter_is_refused():
    with pytest.raises(ParamError, match="'image' are not parameters of @main"):
        bmlib_relax.compile(TEXT, str(EXAMPLE / "params.npz"), inputs=["image"])


def test_declared_input_given_as_weight_is_refused():
    with pytest.raises(ParamError, match="'gamma' are also given as weights"):
        bmlib_relax.compile(TEXT, str(EXAMPLE / "params.npz"), inputs=["data", "gamma"])


def test_undeclared_unbound_parameters_are_the_inputs_in_the_report(partial_params):
    model = bmlib_relax.compile(TEXT, str(partial_params))
    assert offloaded_partitions(model.relax_module)
    inputs = model.report.to_dict()["inputs"]
    assert inputs == [{"name": "data", "shape": [1, 128, 12, 40], "dtype": "float32"},
                      {"name": "gamma", "shape": [128], "dtype": "float32"},
                      {"name": "beta", "shape": [128], "dtype": "float32"}]


def test_full_params_with_declared_inputs_compile():
    model = bmlib_relax.compile(TEXT, str(EXAMPLE / "params.npz"), inputs=["data"])
    assert [i["name"] for i in model.report.to_dict()["inputs"]] == ["data"]


def test_convert_with_declared_inputs_and_missing_weights_exits_2(partial_params, tmp_path):
    out = tmp_path / "out"
    proc = cli("convert", EXAMPLE / "model.relay", "--params", partial_params,
               "--inputs", "data=1,128,12,40:float32", "-o", out)
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    assert first.startswith("error: 2 parameter(s) of @main are neither declared inputs nor "
                            "given weights"), first
    assert "gamma, beta" in first
    assert not out.exists()


def test_convert_names_undeclared_inputs_and_the_generated_check_values(partial_params,
                                                                       tmp_path):
    out = tmp_path / "out"
    proc = cli("convert", EXAMPLE / "model.relay", "--params", partial_params, "--check",
               "-q", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "the model's 3 input(s) are its parameters without a weight" in proc.stderr
    for name in ("data", "gamma", "beta"):
        assert f"  {name}: " in proc.stderr
    assert "generated inputs (recipe v1): data, gamma, beta" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert [i["name"] for i in report["inputs"]] == ["data", "gamma", "beta"]
    assert report["declared_inputs"] is None
    assert report["generated_inputs"] == ["data", "gamma", "beta"]
    assert report["check"]["generated_inputs"] == ["data", "gamma", "beta"]
    assert "`gamma`" in (out / "report.md").read_text()


def test_nan_from_generated_inputs_passes_the_check_with_a_warning_naming_them(tmp_path):
    """sqrt of generated values in [-1, 1]: NaN in both builds is equal, but the NaN is
    reported, next to the generated inputs that cause it."""
    model = tmp_path / "sqrt.relay"
    model.write_text('#[version = "0.0.5"]\n'
                     "def @main(%x: Tensor[(1, 64), float32]) {\n  sqrt(%x)\n}\n")
    out = tmp_path / "out"
    proc = cli("convert", model, "--check", "-q", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "check passed" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["partitions"], "nothing was offloaded"
    (warning,) = [w for w in report["warnings"] if "NaN" in w]
    assert warning.startswith("output out0: ") and "generated, not supplied: x" in warning
    assert f"warning: {warning}" in proc.stderr
    assert report["check"]["outputs"][0]["nan_mismatches"] == 0
    assert report["outputs"][0]["sum"] is None
    assert "NaN" not in (out / "report.json").read_text().replace(warning, "")  # strict JSON


PINNED = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8, 8, 3), float32], %w: Tensor[(3, 3, 3, 5), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=5, kernel_size=[3, 3],
            data_layout="NHWC", kernel_layout="HWIO")
}
"""


@pytest.mark.parametrize("shape, problem", [
    ((2, 9, 8, 3), r"declared \(\?, 8, 8, 3\): dim 1 is 8, not 9"),  # built another model
    ((2, 8, 8), r"rank 4.*has rank 3"),
    ((-1, 8, 8, 3), "negative dim"),
])
def test_input_shapes_only_pin_free_dims(shape, problem):
    weight = {"w": np.ones((3, 3, 3, 5), "float32")}
    with pytest.raises(ParamError, match=problem):
        bmlib_relax.compile(PINNED, weight, input_shapes={"x": shape})
    model = bmlib_relax.compile(PINNED, weight, input_shapes={"x": (2, 8, 8, 3)})
    assert model.input_specs[0]["shape"] == [2, 8, 8, 3]
