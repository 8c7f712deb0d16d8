"""The walking skeleton: the seed Relay graph end to end through every layer."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import import_relay
from bmlib_relax.examples import seed
from bmlib_relax.relay import load_params, parse

from conftest import DATA, Golden, offloaded_partitions, run_plain

SEED_OPS = ["relax.reshape", "relax.nn.conv2d", "relax.add", "relax.nn.batch_norm",
            "relax.nn.relu"]
VARIANTS = {"wildcards": seed.pattern_all_wildcards, "constants": seed.pattern_constant_weights}


@pytest.fixture(scope="module")
def seed_module():
    return parse(seed.SEED_RELAY)


@pytest.fixture(scope="module")
def plain_output(seed_module):
    imported = import_relay(seed_module, seed.seed_params())
    return run_plain(imported, [seed.seed_input()])


def test_seed_text_parses_with_and_without_header(seed_module):
    body_only = seed.SEED_RELAY.split("\n", 1)[1]
    for text in (seed.SEED_RELAY, body_only):
        func = parse(text)["main"]
        assert [p.name for p in func.params] == ["data1", "data", "weight", "gamma", "beta",
                                                 "moving_mean", "moving_var"]
        assert func.body.op.name == "nn.relu"


def test_import_emits_high_level_relax_ops(seed_module):
    mod = import_relay(seed_module, seed.seed_params())
    script = mod["main"].script()
    for op in ("R.reshape", "R.nn.conv2d", "R.add", "R.nn.batch_norm", "R.nn.relu"):
        assert op in script
    assert "training=False" in script
    assert [p.name for p in mod["main"].params] == ["data"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_legacy_pattern_variant_offloads_whole_graph(variant, seed_module, plain_output):
    model = bmlib_relax.compile(seed_module, seed.seed_params(),
                                patterns=[(seed.COMPOSITE_NAME, VARIANTS[variant]())])
    assert len(offloaded_partitions(model.relax_module)) == 1
    report = model.report.to_dict()
    (part,) = report["partitions"]
    assert part["composites"] == [seed.COMPOSITE_NAME]
    assert part["ops"] == SEED_OPS
    assert report["ops_host"] == {}
    # The arity that broke Relay: 7 partition parameters + 1 output = 8 PrimFunc arguments.
    assert part["num_params"] == 7 and part["num_args"] == 8

    data = seed.seed_input()
    out = model(data)
    np.testing.assert_allclose(out, plain_output, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, seed.numpy_reference(data, seed.seed_params()),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model(data=data), out)


def test_both_variants_give_identical_results(seed_module):
    outs = [bmlib_relax.compile(seed_module, seed.seed_params(),
                                patterns=[(seed.COMPOSITE_NAME, make())])(seed.seed_input())
            for make in VARIANTS.values()]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_builtin_table_offloads_the_seed(seed_module):
    """With the weights bound, the built-in table first folds ``reshape(data1)`` into a
    constant; the rest is one conv2d + bias + batch_norm + relu composite."""
    model = bmlib_relax.compile(seed_module, seed.seed_params())
    report = model.report.to_dict()
    (part,) = report["partitions"]
    assert part["composites"] == ["bmlib.conv2d_bias_bn_relu"]
    assert part["ops"] == ["relax.nn.conv2d", "relax.add", "relax.nn.batch_norm", "relax.nn.relu"]
    assert report["ops_host"] == {}
    data = seed.seed_input()
    np.testing.assert_allclose(model(data), seed.numpy_reference(data, seed.seed_params()),
                               rtol=1e-5, atol=1e-5)
    assert "bmlib.conv2d_bias_bn_relu" in str(model.report)


def test_builtin_table_takes_the_seed_composite_when_weights_are_inputs(seed_module):
    model = bmlib_relax.compile(seed_module)
    (part,) = model.report.to_dict()["partitions"]
    assert part["composites"] == ["bmlib.reshape_conv2d_add_bn_relu"]
    assert part["ops"] == SEED_OPS


def test_seed_golden_from_relay_build():
    """A real TVM Relay build's output for the seed graph, from recipe weights and from model.params."""
    golden = Golden(DATA / "seed_reshape_conv2d_add_bn_relu")
    (expected,) = golden.expected()
    file_params = load_params(golden.folder / "model.params")
    recipe_params = golden.params()
    assert sorted(file_params) == sorted(recipe_params)
    for name in recipe_params:
        np.testing.assert_array_equal(file_params[name], recipe_params[name])
    model = bmlib_relax.compile(golden.text, file_params)
    assert offloaded_partitions(model.relax_module)
    np.testing.assert_allclose(model(**golden.inputs()), expected, **golden.tolerance)


def test_text_with_weights_as_inputs_compiles_when_params_missing(seed_module):
    """Unbound weights stay inputs; the partition then takes them as call arguments."""
    model = bmlib_relax.compile(seed_module)
    assert model.input_names == ["data1", "data", "weight", "gamma", "beta", "moving_mean",
                                 "moving_var"]
    params = seed.seed_params()
    out = model(data=seed.seed_input(), **params)
    np.testing.assert_allclose(out, seed.numpy_reference(seed.seed_input(), params),
                               rtol=1e-5, atol=1e-5)
    assert model.report.to_dict()["partitions"][0]["num_args"] == 8


def test_input_shapes_pin_dynamic_dims_so_bmlib_can_take_them():
    """A dynamic batch (``?``) builds as is; ``input_shapes`` pins it (one static build)."""
    dynamic = seed.SEED_RELAY.replace("%data: Tensor[(1, 128, 12, 40), float32]",
                                      "%data: Tensor[(?, 128, 12, 40), float32]")
    params = seed.seed_params()
    unpinned = bmlib_relax.compile(dynamic, params)  # ops with symbolic-dim templates offload
    np.testing.assert_allclose(unpinned(seed.seed_input()),
                               seed.numpy_reference(seed.seed_input(), params),
                               rtol=1e-5, atol=1e-5)
    model = bmlib_relax.compile(dynamic, params, input_shapes={"data": (1, 128, 12, 40)})
    assert len(model.report.to_dict()["partitions"]) == 1
    data = seed.seed_input()
    np.testing.assert_allclose(model(data), seed.numpy_reference(data, params),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(bmlib_relax.ParamError, match="'image' is not an input of @main"):
        bmlib_relax.compile(dynamic, params, input_shapes={"image": (1, 3)})
