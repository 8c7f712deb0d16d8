"""Symbolic dims never make a silent wrong answer: a matmul whose reduction dims are
not provably equal stays on the host, and inputs that disagree on a shared symbolic
dim are a ParamError naming both, not a VM check failure."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.backend.host_reasons import REJECTED

from conftest import offloaded_partitions


def test_matmul_with_an_unrelated_symbolic_reduction_dim_stays_on_the_host():
    # Relax types dense(x: (?, ?), w: (64, 64)) without relating x's k to 64: a template
    # looping over k would read past w for k > 64.
    text = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(?, ?), float32], '
            '%w: Tensor[(64, 64), float32]) {\n  nn.dense(%x, %w, units=64)\n}\n')
    model = bmlib_relax.compile(text, {"w": np.eye(64, dtype="float32")})
    assert not offloaded_partitions(model.relax_module)
    (reason,) = model.report.to_dict()["host_ops"]
    assert reason["op"] == "relax.matmul" and reason["reason"] == REJECTED
    x = np.arange(5 * 64, dtype="float32").reshape(5, 64)
    np.testing.assert_array_equal(model(x), x)


def test_matmul_whose_reduction_dims_are_the_same_symbolic_dim_is_offloaded():
    text = ('#[version = "0.0.5"]\ndef @main(%a: Tensor[(m, k), float32], '
            '%b: Tensor[(n, k), float32]) {\n  nn.dense(%a, %b, units=None)\n}\n')
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)
    assert sum(model.report.ops_host.values()) == 0
    rng = np.random.default_rng(0)
    for m, k, n in ((1, 1, 1), (3, 7, 5), (17, 33, 65)):
        a = rng.standard_normal((m, k)).astype("float32")
        b = rng.standard_normal((n, k)).astype("float32")
        np.testing.assert_allclose(model(a, b), a @ b.T, rtol=1e-5, atol=1e-5)


def test_inputs_disagreeing_on_a_shared_symbolic_dim_are_a_param_error():
    text = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(n, 8), float32], '
            '%y: Tensor[(n, 8), float32]) {\n  add(%x, %y)\n}\n')
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)
    ones = np.ones((3, 8), "float32")
    np.testing.assert_array_equal(model(ones, ones), 2 * ones)
    with pytest.raises(bmlib_relax.ParamError,
                       match=r"input 'y': dim 0 is the symbolic dim n, which is 4 here but 3 "
                             r"in input 'x'"):
        model(ones, np.ones((4, 8), "float32"))


@pytest.mark.parametrize("builder", ["text", "relay.Any"])
def test_independent_dynamic_dims_of_two_inputs_stay_independent(builder):
    """Each ``?`` is a dim of its own (Relay's Any): two inputs' ``?`` dims are distinct
    vars with distinct names, so neither the VM nor the shared-dim check ties them."""
    from bmlib_relax import relay

    if builder == "text":
        mod = ('#[version = "0.0.5"]\ndef @main(%a: Tensor[(?, 3), float32], '
               '%b: Tensor[(?, 3), float32]) {\n  add(sum(%a, axis=[0]), sum(%b, axis=[0]))\n}\n')
    else:
        a, b = (relay.var(n, shape=(relay.Any(), 3)) for n in "ab")
        mod = relay.IRModule.from_expr(relay.Function(
            [a, b], relay.add(relay.sum(a, axis=0), relay.sum(b, axis=0))))
    model = bmlib_relax.compile(mod)
    names = [spec["shape"][0] for spec in model.report.inputs]
    assert len(set(names)) == 2, names
    np.testing.assert_array_equal(model(np.ones((2, 3), "float32"), np.ones((5, 3), "float32")),
                                  np.full(3, 7, "float32"))


def test_flop_formulas_from_metadata_are_evaluated_not_executed():
    from bmlib_relax.flops import evaluate_flops_text

    assert evaluate_flops_text("n * (2 + m) - n // 2", {"n": 4, "m": 3}) == 18
    for text in ('__import__("os").getcwd()', "n ** 2", "n.real", "[n]", "n if n else 1"):
        with pytest.raises(ValueError, match="not a FLOP formula"):
            evaluate_flops_text(text, {"n": 4})
    with pytest.raises(KeyError, match="m"):
        evaluate_flops_text("n * m", {"n": 4})


def test_a_conv_whose_batch_is_an_expression_of_a_run_time_dim_builds_on_the_host():
    """A flat run-time input reshaped to NCHW: the conv's batch is ``n // 72``, which no
    partition can bind, so it stays on the host -- but its weight had been packed for a
    template (``OIHW2i4o``), which TVM's host lowering cannot build (a raw
    InternalError, "CodeGenVM cannot emit this Relax operator")."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(?), float32], %w: Tensor[(4, 2, 3, 3), float32]) {
  %0 = reshape(%x, newshape=[-1, 2, 6, 6]);
  (nn.conv2d(%0, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]), nn.relu(%x))
}"""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 2, 3, 3)).astype("float32")
    model = bmlib_relax.compile(text, {"w": w})
    assert offloaded_partitions(model.relax_module)  # the relu
    torch = pytest.importorskip("torch")
    for batch in (1, 3):
        x = rng.standard_normal(batch * 72).astype("float32")
        conv, relu = model(x)
        want = torch.nn.functional.conv2d(torch.from_numpy(x.reshape(batch, 2, 6, 6)),
                                          torch.from_numpy(w), padding=1).numpy()
        np.testing.assert_allclose(conv, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(relu, np.maximum(x, 0))
