"""The per-call profiler (bench/partition_profile.py): the calls it times in the model and
the same calls repeated in place line up, and the conv table shows both (no timing is
asserted: speed lives in scripts/)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import bmlib_relax
from bmlib_relax.bench.partition_profile import (conv_efficiency, profile_calls,
                                                 render_conv_efficiency, repeated_calls)
from bmlib_relax.recipe import recipe_tensor


@pytest.fixture(scope="module")
def two_conv_model():
    """conv -> relu -> conv -> relu, weights bound: two bmlib conv partitions."""
    import tvm

    x = relax.Var("x", relax.TensorType((1, 16, 14, 14), "float32"))
    w1 = relax.const(recipe_tensor("w1", (32, 16, 3, 3), "float32"))
    w2 = relax.const(recipe_tensor("w2", (32, 32, 1, 1), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w1, padding=1)))
            out = bb.emit_output(relax.op.nn.relu(relax.op.nn.conv2d(a, w2)))
        bb.emit_func_output(out)
    model = bmlib_relax.compile(bb.get(), num_threads=1)
    inputs = [tvm.runtime.tensor(recipe_tensor("x", (1, 16, 14, 14), "float32",
                                               role="input"))]
    return model, inputs


def test_repeated_calls_line_up_with_the_profiled_ones(two_conv_model):
    model, inputs = two_conv_model
    expected = np.asarray(model(*[t.numpy() for t in inputs]))
    _, calls = profile_calls(model, inputs, runs=2)
    repeated = repeated_calls(model, inputs, runs=2)
    partitions = [c for c in calls if c[0].endswith("_bmlib")]
    assert len(repeated) == len(partitions) >= 2
    assert [(name, shape) for name, _, shape in repeated] == \
        [(name, shape) for name, _, shape in partitions]
    assert all(ms > 0 for _, ms, _ in repeated)
    # repeating the calls in place leaves the model's results as they were
    np.testing.assert_array_equal(expected, np.asarray(model(*[t.numpy() for t in inputs])))


def test_conv_table_shows_the_repeated_time_beside_the_model_time(two_conv_model):
    model, inputs = two_conv_model
    _, calls = profile_calls(model, inputs, runs=2)
    repeated = repeated_calls(model, inputs, runs=2)
    rows = conv_efficiency(model.report, calls, repeated)
    assert len(rows) == 2 and all(r["repeated_ms"] > 0 and r["flops"] > 0 for r in rows)
    table = render_conv_efficiency(rows, peak=100.0)
    assert "repeated ms" in table
    layers = [line for line in table.splitlines() if line.lstrip().startswith("[")]
    assert layers and all(line.count("%") == 2 for line in layers)  # in model, repeated
    assert "repeated ms" not in render_conv_efficiency(conv_efficiency(model.report, calls),
                                                       peak=100.0)
    with pytest.raises(ValueError, match="do not match"):
        conv_efficiency(model.report, calls, repeated[:1])


def test_conv_table_names_each_call_under_70_percent():
    """A layer's row averages its calls; the calls under 70 % of the peak are listed one
    by one after the total (a cold first call of three hides in a 71 % mean)."""
    rows = [{"partition": f"fused_conv{i}_bmlib", "output": [1, 2, 7, 7, 32], "ms": ms,
             "flops": 10**6, "gflops": 10**6 / (ms * 1e-3) / 1e9, "repeated_ms": 0.01}
            for i, ms in enumerate((0.02, 0.011, 0.011))]  # 50, 91, 91 GFLOP/s
    table = render_conv_efficiency(rows, peak=100.0).splitlines()
    layer = [line for line in table if line.lstrip().startswith("[")]
    assert len(layer) == 1 and "71.4%" in layer[0]  # 3 MFLOP in 0.042 ms
    assert "1 of 3 calls below 70%" in table[-2]
    assert table[-1].split() == ["conv", "call", "1:", "fused_conv0_bmlib", "->", "[1,", "2,",
                                 "7,", "7,", "32]", "0.020", "ms,", "50.0%", "(repeated",
                                 "0.010", "ms,", "100.0%)"]
