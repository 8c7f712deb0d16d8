"""A broadcast element-wise op after a reshape that keeps its trailing dims runs before
it (backend/sink_reshape.py): PyTorch's sequence-linear ``reshape(dense(x)) + bias``
gets its bias into the dense's epilogue.  Results against the plain build."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.sink_reshape import keeps_trailing_dims, sink_reshapes

from conftest import offloaded_partitions
from helpers import composite_names, make_module, run_offloaded, run_plain

R = relax.op


def _ops(mod, name="main") -> list[str]:
    found = []
    relax.analysis.post_order_visit(
        mod[name], lambda e: found.append(e.op.name)
        if isinstance(e, relax.Call) and hasattr(e.op, "name") and
        str(e.op.name).startswith("relax.") else None)
    return found


def _check(mod, arrays):
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)
    return partitioned


def test_bias_after_the_reshape_back_joins_the_dense():
    """dense over (T*B, K), reshape to (T, B, N), add bias, reshape, log_softmax (the
    LSTM language model's decoder): the add is the dense's epilogue, no partition of
    its own."""
    def build(x, w, b):
        y = R.reshape(R.matmul(x, R.permute_dims(w, [1, 0])), (5, 4, 40))
        return R.nn.log_softmax(R.reshape(R.add(y, b), (20, 40)), axis=1)

    mod, arrays = make_module(build, [(20, 16)], [(40, 16), (40,)])
    partitioned = _check(mod, arrays)
    assert "bmlib.dense_bias" in composite_names(partitioned), composite_names(partitioned)
    assert "bmlib.add" not in composite_names(partitioned)


@pytest.mark.parametrize("side", [0, 1])
def test_reshaped_operand_on_either_side(side):
    """``c - reshape(x)`` stays ``c - x`` (operand order kept), as ``reshape(x) - c``."""
    def build(x, c):
        y = R.reshape(R.nn.relu(x), (3, 2, 8))
        return R.subtract(y, c) if side == 0 else R.subtract(c, y)

    mod, arrays = make_module(build, [(6, 8), (1, 8)])
    moved = sink_reshapes(mod)
    assert _ops(moved).index("relax.subtract") < _ops(moved).index("relax.reshape")
    _check(mod, arrays)


@pytest.mark.parametrize("shape, operand", [
    ((4, 6), (6,)),        # the reshape changes the last dim: 6 is not the input's 4
    ((2, 12), (2, 1)),     # the operand reaches a dim the reshape made
])
def test_reshape_that_changes_the_operand_dims_stays_first(shape, operand):
    def build(x, c):
        return R.add(R.reshape(R.nn.relu(x), shape), c)

    mod, arrays = make_module(build, [(6, 4), operand])
    moved = sink_reshapes(mod)
    assert _ops(moved).index("relax.reshape") < _ops(moved).index("relax.add")
    _check(mod, arrays)


def test_trailing_dims_rule():
    assert keeps_trailing_dims([350, 33278], [35, 10, 33278], 1)
    assert keeps_trailing_dims([6, 4], [2, 3, 4], 0)
    assert not keeps_trailing_dims([6, 4], [4, 6], 1)
    assert not keeps_trailing_dims([24], [2, 12], 2)
