"""Relay op level 1 behaviour (TVM v0.19's ``test_op_level1.py`` area), own tests.

Oracles are numpy; each compile asserts that bmlib offloaded something.
"""
import numpy as np
import pytest
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import ParamError
from conftest import offloaded_partitions


def _compile(params, out):
    model = bmlib_relax.compile(relay.IRModule.from_expr(relay.Function(params, out)))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model


@pytest.fixture(scope="module")
def add_f32():
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(2, 3))
    return _compile([x, y], relay.nn.relu(x + y))


def test_exact_casts_of_inputs_run_as_relay_executors_copied(add_f32):
    """Relay's executors copied float16 data into a float32 input; values are kept."""
    a = np.array([[1.5, -2, 3], [4, 5, -6]], "float16")
    b = np.arange(6, dtype="int32").reshape(2, 3)  # int -> float, exact
    np.testing.assert_array_equal(add_f32(a, b), np.maximum(a.astype("float32") + b, 0))


def test_lossy_or_cross_kind_inputs_stay_errors():
    x = relay.var("x", shape=(3,), dtype="int8")
    model = _compile([x], relay.nn.relu(relay.cast(x, "float32")))
    np.testing.assert_array_equal(model(np.array([1, -2, 3], "int64")), [1, 0, 3])
    np.testing.assert_array_equal(model(np.array([2.0, -1.0, 0.0])), [2, 0, 0])  # exact
    with pytest.raises(ParamError, match="dtype int8"):
        model(np.array([1, 300, 3], "int64"))  # would wrap
    with pytest.raises(ParamError, match="dtype int8"):
        model(np.array([1.5, 2, 3], "float32"))  # float -> int truncates
    np.testing.assert_array_equal(model(np.array([1, 127, 0], "uint8")), [1, 127, 0])
    with pytest.raises(ParamError, match="dtype int8"):
        model(np.array([1, 255, 3], "uint8"))  # the same bits read -1
    u = relay.var("u", shape=(2,), dtype="uint32")
    unsigned = _compile([u], relay.nn.relu(relay.cast(u, "float32")))
    with pytest.raises(ParamError, match="dtype uint32"):
        unsigned(np.array([1, -1], "int32"))  # the same bits read 4294967295
    y = relay.var("y", shape=(2,), dtype="float16")
    half = _compile([y], relay.nn.relu(relay.cast(y, "float32")))
    with pytest.raises(ParamError, match="dtype float16"):
        half(np.array([1, 70000], "int64"))  # beyond float16: inf


def test_bitserial_dense_type_keeps_symbolic_dims():
    m, k = te.var("m"), te.var("k")
    x = relay.var("x", relay.TensorType((m, k), "int16"))
    w = relay.var("w", relay.TensorType((k, 32), "int16"))
    ty = relay.testing.run_infer_type(relay.nn.bitserial_dense(x, w, units=32)).checked_type
    assert ty == relay.TensorType((m, 32), "int16")
    y = relay.nn.bitserial_dense(x, w, units=8, out_dtype="int32")
    assert relay.testing.run_infer_type(y).checked_type == relay.TensorType((m, 8), "int32")
