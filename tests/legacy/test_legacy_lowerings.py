"""Relay-era ``_LOWER_MAP`` TE lowerings run unchanged, bound to the real arguments."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tvm import topi

import bmlib_relax
from bmlib_relax import CodegenError
from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.examples import seed
from bmlib_relax.legacy import load_legacy_module, load_pattern_table
from bmlib_relax.legacy.lowerings import register_legacy_lowering, unregister_legacy_lowering

from conftest import cli

NAME = seed.COMPOSITE_NAME
EXAMPLE = Path(EXAMPLE_DIR)


@pytest.fixture
def lowering():
    """Register a lowering for the seed composite for one test, then remove it."""
    def install(fn):
        register_legacy_lowering(NAME, fn, override=True)
        return fn

    yield install
    unregister_legacy_lowering(NAME)


def legacy_example_lowering():
    return load_legacy_module(f"{EXAMPLE_DIR}/bmlib_lowerings.py")._LOWER_MAP[NAME]


@pytest.mark.parametrize("table", ["bmlib_patterns_wildcard.py", "bmlib_patterns.py"])
def test_example_lowering_is_used_and_correct(table, lowering):
    calls = []
    original = legacy_example_lowering()

    def counted(call, inputs):
        calls.append((call.op.name, [tuple(int(d) for d in t.shape) for t in inputs]))
        return original(call, inputs)

    lowering(counted)
    model = bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params(),
                                patterns=load_pattern_table(f"{EXAMPLE_DIR}/{table}"))
    # The root call is the Relay nn.relu; the 7 inputs are the composite's parameters,
    # in order, each bound to a real argument of the partition.
    assert calls == [("nn.relu", [(128,), (1, 128, 12, 40), (128, 128, 1, 1), (128,), (128,),
                                  (128,), (128,)])]
    (part,) = model.report.to_dict()["partitions"]
    assert (part["num_params"], part["num_args"]) == (7, 8)
    data = seed.seed_input()
    np.testing.assert_allclose(model(data), seed.numpy_reference(data, seed.seed_params()),
                               rtol=1e-5, atol=1e-5)


def test_lowering_with_wrong_output_shape_is_named(lowering):
    lowering(lambda call, inputs: topi.nn.relu(inputs[0]))
    with pytest.raises(CodegenError) as info:
        bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params(),
                            patterns=[(NAME, seed.pattern_all_wildcards())])
    assert f"legacy lowering of {NAME}: returned a tensor of shape [128]" in str(info.value)


def test_lowering_that_raises_is_named(lowering):
    def broken(call, inputs):
        raise KeyError("no such attribute")

    lowering(broken)
    with pytest.raises(CodegenError, match=f"legacy lowering of {NAME}: KeyError"):
        bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params(),
                            patterns=[(NAME, seed.pattern_all_wildcards())])


def test_cli_check_fails_on_a_wrong_lowering_and_names_the_partition(tmp_path):
    wrong = tmp_path / "wrong_lowerings.py"
    wrong.write_text(
        "from tvm import topi\n"
        "def _lower(call, inputs):\n"
        "    data1, data, weight = inputs[:3]\n"
        "    out = topi.nn.conv2d_nchw(data, weight, 1, 0, 1)\n"
        "    return topi.nn.relu(out)  # forgets the bias and batch_norm\n"
        f"_LOWER_MAP = {{{NAME!r}: _lower}}\n")
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "--patterns", EXAMPLE / "bmlib_patterns_wildcard.py", "--lowerings", wrong,
               "--check", "-o", tmp_path / "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("check failed: bmlib output differs from the plain Relax build")
    assert "first diverging intermediate" in lines[1] and "bmlib partition fused_relax" in lines[1]


def test_cli_with_legacy_lowerings_passes(tmp_path):
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "--patterns", EXAMPLE / "bmlib_patterns_wildcard.py",
               "--lowerings", EXAMPLE / "bmlib_lowerings.py", "--check", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(7 params -> 8 PrimFunc args)" in proc.stdout
