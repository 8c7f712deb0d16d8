"""Relay op-level-4 behaviour (reductions) as TVM v0.19's Relay had it: result types
(incl. symbolic dims) and values against numpy."""
import numpy as np
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.relay.testing import run_infer_type
from conftest import offloaded_partitions

RNG = np.random.default_rng(4)


def test_variance_and_std_over_symbolic_dims_type_check():
    d1, d2, d3 = te.var("d1"), te.var("d2"), te.var("d3")
    x = relay.var("x", relay.TensorType((d1, d2, d3), "float32"))
    for fn in (relay.variance, relay.std):
        assert run_infer_type(fn(x, 1, True)).checked_type == \
            relay.TensorType((d1, 1, d3), "float32")
        assert run_infer_type(fn(x, (0, 1), True, unbiased=True)).checked_type == \
            relay.TensorType((1, 1, d3), "float32")
        assert run_infer_type(fn(x)).checked_type == relay.TensorType((), "float32")


def test_unbiased_variance_with_a_symbolic_batch_runs():
    n = te.var("n")
    x = relay.var("x", shape=(n, 4))
    func = relay.Function([x], relay.Tuple([relay.nn.relu(x),
                                            relay.variance(x, axis=0, unbiased=True),
                                            relay.std(x, axis=(0, 1), keepdims=True)]))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module)
    data = RNG.uniform(size=(5, 4)).astype("float32")
    _, var, std = model(data)
    np.testing.assert_allclose(var, np.var(data, axis=0, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(std, np.std(data, keepdims=True), rtol=1e-5)


def test_arg_reductions_over_several_axes_type_check():
    x = relay.var("x", relay.TensorType((128, 24, 128), "float32"))
    for fn in (relay.argmax, relay.argmin):
        assert run_infer_type(fn(x, (0, 1), True)).checked_type == \
            relay.TensorType((1, 1, 128), "int32")
        assert run_infer_type(fn(x, (0, 2), False)).checked_type == \
            relay.TensorType((24,), "int32")
        assert run_infer_type(fn(x, (0, 2), False, select_last_index=True)).checked_type == \
            relay.TensorType((24,), "int32")
