"""Relay op level 3 behaviour (TVM v0.19's ``test_op_level3.py`` area), own tests.

Oracles: numpy; each compile asserts bmlib offloaded something.
"""
import numpy as np
import pytest
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from conftest import offloaded_partitions

RNG = np.random.default_rng(3)


def _run(params, outs, values):
    """Compile ``fn(params) -> (relu(params[0]), *outs)``, assert offload, run."""
    func = relay.Function(params, relay.Tuple([relay.nn.relu(params[0])] + list(outs)))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    results = model(*values)
    np.testing.assert_allclose(results[0], np.maximum(values[0], 0), rtol=1e-6)
    return results[1:]


def test_transpose_prints_axes_none_and_reverses():
    n, t = te.var("n"), te.var("t")
    x = relay.var("x", relay.TensorType((n, t, 100), "float32"))
    y = relay.transpose(x)
    assert "transpose(%x, axes=None)" in y.astext()
    assert relay.testing.run_infer_type(y).checked_type == \
        relay.TensorType((100, t, n), "float32")
    x2 = relay.var("x2", shape=(2, 3, 4))
    x2_np = RNG.uniform(-1, 1, (2, 3, 4)).astype("float32")
    (out,) = _run([x2], [relay.transpose(x2)], [x2_np])
    np.testing.assert_array_equal(out, x2_np.transpose())
