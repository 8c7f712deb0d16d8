"""``relay.testing`` workloads (``resnet``/``mobilenet``/``mlp.get_workload``,
``create_workload``, ``init``) as tutorials and benchmark scripts called them.

Structure is checked against the networks' definitions (conv counts, depthwise groups,
parameter names the initializers dispatch on); numbers against TVM's plain Relax build of
the same module (TVM's own legalization, not the bmlib templates) with batch-norm
statistics randomized so that a mishandled scale or shift shows.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.compiler import compile_plain
from bmlib_relax.relay.analysis import post_order
from bmlib_relax.relay.testing import init

from conftest import offloaded_partitions


def calls_of(mod, op_name: str) -> list:
    return [node for node in post_order(mod["main"])
            if isinstance(node, relay.Call) and getattr(node.op, "name", None) == op_name]


def randomized(params: dict, seed: int = 0) -> dict:
    """Xavier leaves gamma 1, beta/mean 0, var 1: give them values that matter."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in params.items():
        array = value.numpy()
        if name.endswith(("gamma", "moving_var")):
            array = rng.uniform(0.5, 1.5, array.shape)
        elif name.endswith(("beta", "moving_mean", "bias")):
            array = rng.uniform(-0.2, 0.2, array.shape)
        out[name] = array.astype(value.dtype)
    return out


def check_against_plain_build(mod, params, scale: float = 1.0):
    weights = randomized(params)
    model = bmlib_relax.compile(mod, weights)
    assert offloaded_partitions(model.relax_module)
    shape = [int(d) for d in mod["main"].params[0].checked_type.shape]
    x = (np.random.default_rng(1).standard_normal(shape) * scale).astype("float32")
    vm = relax.VirtualMachine(compile_plain(bmlib_relax.import_relay(mod, weights)),
                              tvm.cpu())
    expected = vm["main"](tvm.runtime.tensor(x)).numpy()
    got = model(data=x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert np.ptp(got) > 1e-3  # the input reached the output (softmax not saturated flat)


def test_mlp_workload():
    mod, params = relay.testing.mlp.get_workload(batch_size=2, num_classes=10,
                                                 image_shape=(1, 8, 8))
    assert sorted(params) == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight",
                              "fc3_bias", "fc3_weight"]
    assert [tuple(params[f"fc{i}_weight"].shape) for i in (1, 2, 3)] == \
        [(128, 64), (64, 128), (10, 64)]
    check_against_plain_build(mod, params, scale=3.0)


# Numbers are checked once per block kind and layout family (suite time: NHWC is
# checked on MobileNet); the other cases check structure only.
@pytest.mark.parametrize("num_layers, convs, image_shape, layout, numeric", [
    (18, 1 + 2 * 8 + 4, (32, 32, 3), "NHWC", False),  # basic units; a projection per stage
    (50, 1 + 3 * 16 + 4, (3, 32, 32), "NCHW", False),  # bottlenecks
    (20, 1 + 2 * 9 + 3, (3, 16, 16), "NCHW", True),  # CIFAR form: 3 stages of 3 units
])
def test_resnet_workload(num_layers, convs, image_shape, layout, numeric):
    mod, params = relay.testing.resnet.get_workload(
        num_layers=num_layers, num_classes=10, image_shape=image_shape, layout=layout)
    conv_calls = calls_of(mod, "nn.conv2d")
    assert len(conv_calls) == convs
    assert {c.attrs.data_layout for c in conv_calls} == {layout}
    norms = calls_of(mod, "nn.batch_norm")
    assert len(norms) == sum(name.endswith("_moving_var") for name in params)
    assert norms[0].args[0] is mod["main"].params[0] and not norms[0].attrs.scale  # bn_data
    if numeric:
        check_against_plain_build(mod, params)


@pytest.mark.parametrize("layout, image_shape, numeric", [("NCHW", (3, 32, 32), False),
                                                          ("NHWC", (32, 32, 3), True)])
def test_mobilenet_workload(layout, image_shape, numeric):
    mod, params = relay.testing.mobilenet.get_workload(num_classes=10,
                                                       image_shape=image_shape, layout=layout)
    conv_calls = calls_of(mod, "nn.conv2d")
    depthwise = [c for c in conv_calls if int(c.attrs.groups) > 1]
    assert (len(conv_calls), len(depthwise)) == (27, 13)
    for call in depthwise:
        name = call.args[1].name_hint
        assert "depthwise" in name
        channels = int(call.attrs.groups)
        expected = (channels, 1, 3, 3) if layout == "NCHW" else (3, 3, channels, 1)
        assert tuple(params[name].shape) == expected
    if numeric:
        check_against_plain_build(mod, params)


def test_create_workload_initializers():
    data = relay.var("data", shape=(1, 4))
    w = relay.var("dense_weight", shape=(8, 4))
    depthwise = relay.var("x_depthwise_weight", shape=(16, 1, 3, 3))
    gamma = relay.var("bn_gamma", shape=(8,))
    net = relay.Function([data, w, depthwise, gamma],
                         relay.Tuple([relay.multiply(relay.nn.dense(data, w), gamma),
                                      depthwise]))
    mod, params = relay.testing.create_workload(net, seed=3)
    assert set(params) == {"dense_weight", "x_depthwise_weight", "bn_gamma"}
    np.testing.assert_array_equal(params["bn_gamma"].numpy(), np.ones(8))
    dense = params["dense_weight"].numpy()
    assert np.abs(dense).max() <= np.sqrt(3 / 6.0) and dense.std() > 0  # avg fan (4+8)/2
    assert np.abs(params["x_depthwise_weight"].numpy()).max() <= np.sqrt(3 / 9.0)  # window
    again = relay.testing.create_workload(net, seed=3)[1]
    np.testing.assert_array_equal(again["dense_weight"].numpy(), dense)
    constant = relay.testing.create_workload(net, initializer=init.Constant())[1]
    np.testing.assert_allclose(constant["dense_weight"].numpy(), np.full((8, 4), 1 / 32))
    scale = relay.var("scale", shape=(1, 4))
    with pytest.raises(ValueError, match="no initialization rule for parameter 'scale'"):
        relay.testing.create_workload(relay.Function([data, scale], relay.add(data, scale)))


def test_unknown_depths_and_layouts_are_refused():
    with pytest.raises(ValueError, match="num_layers 19"):
        relay.testing.resnet.get_workload(num_layers=19)
    with pytest.raises(ValueError, match="CIFAR-style network of 21"):
        relay.testing.resnet.get_workload(num_layers=21, image_shape=(3, 28, 28))
    with pytest.raises(ValueError, match="layout 'NCHW4c'"):
        relay.testing.mobilenet.get_workload(layout="NCHW4c")


@pytest.mark.parametrize("num_layers, batch_norm", [(11, True), (19, False)])
def test_vgg_workload_structure(num_layers, batch_norm):
    mod, params = relay.testing.vgg.get_workload(1, num_classes=10, image_shape=(3, 32, 32),
                                                 num_layers=num_layers, batch_norm=batch_norm)
    convs = calls_of(mod, "nn.conv2d")
    depths = {11: (1, 1, 2, 2, 2), 19: (2, 2, 4, 4, 4)}[num_layers]
    assert len(convs) == sum(depths) and len(calls_of(mod, "nn.max_pool2d")) == 5
    widths = [int(params[c.args[1].name_hint].shape[0]) for c in convs]
    assert widths == [w for d, w in zip(depths, (64, 128, 256, 512, 512)) for _ in range(d)]
    assert len(calls_of(mod, "nn.batch_norm")) == (len(convs) if batch_norm else 0)
    assert [tuple(params[f"fc{i}_weight"].shape) for i in (6, 7, 8)] == \
        [(4096, 512), (4096, 4096), (10, 4096)]  # 32x32 pooled five times: 512 x 1 x 1


def test_squeezenet_workload():
    for version, stem in (("1.0", (96, 3, 7, 7)), ("1.1", (64, 3, 3, 3))):
        mod, params = relay.testing.squeezenet.get_workload(
            num_classes=10, version=version, image_shape=(3, 64, 64))
        assert len(calls_of(mod, "nn.conv2d")) == 1 + 8 * 3 + 1
        assert len(calls_of(mod, "concatenate")) == 8
        assert tuple(params["conv1_weight"].shape) == stem
        assert tuple(params["fire8_right_conv_weight"].shape) == (256, 64, 3, 3)
    check_against_plain_build(mod, params)  # 1.1


def test_what_is_not_ported_says_what_is_and_rand_gives_a_tensor():
    for name in ("inception_v3", "densenet"):
        with pytest.raises(AttributeError, match=rf"relay.testing.{name} is not available.*"
                                                 r"resnet, mobilenet, mlp, vgg, squeezenet"):
            getattr(relay.testing, name)
    assert not hasattr(relay.testing, "no_such_thing")
    sample = relay.testing.rand("float32", 2, 3)
    assert isinstance(sample, tvm.runtime.Tensor) and sample.shape == (2, 3)
    assert 0 <= sample.numpy().min() and sample.numpy().max() < 1
