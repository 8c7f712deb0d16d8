"""Host reductions over a run-time-sized axis start from their identity (host_tir.py).

TVM initialises a reduction inside its loop, so a dense or conv whose reduction
length is 0 in a run returned the previous run's values, on the host and in the
plain reference build.  Each test runs a non-empty input first, so stale values would
show."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, topi

import bmlib_relax
from bmlib_relax.compiler import compile_plain
from bmlib_relax.backend.schedule import decompose_symbolic_reductions
from bmlib_relax.relay import parse

HEADER = '#[version = "0.0.5"]\n'
DENSE = HEADER + """def @main(%x: Tensor[(4, ?), float32], %w: Tensor[(3, ?), float32]) {
  nn.relu(nn.dense(%x, %w))
}
"""
CONV = HEADER + """def @main(%x: Tensor[(1, ?, 6, 6), float32], %w: Tensor[(4, ?, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
}
"""


def _inputs(shapes, k: int, seed: int):
    rng = np.random.default_rng(seed)
    return [rng.random([k if d is None else d for d in s], dtype="float32") + 0.5
            for s in shapes]


def _runs(run, shapes):
    """run(k=5), then run(k=0): the second must be all zeros."""
    full = run(_inputs(shapes, 5, 0))
    assert np.all(full > 0)
    empty = run(_inputs(shapes, 0, 1))
    assert empty.shape == full.shape
    np.testing.assert_array_equal(empty, np.zeros_like(full))


def _check(text, shapes):
    model = bmlib_relax.compile(text)
    assert model.report.ops_offloaded  # the relu (and friends) on bmlib
    _runs(lambda arrays: np.asarray(model(*arrays)), shapes)
    vm = relax.VirtualMachine(compile_plain(bmlib_relax.import_relay(parse(text), {})),
                              tvm.cpu())
    _runs(lambda arrays: vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy(), shapes)


def test_dense_with_run_time_k_of_zero_is_zero():
    _check(DENSE, [(4, None), (3, None)])


def test_conv2d_with_run_time_input_channels_of_zero_is_zero():
    _check(CONV, [(1, None, 6, 6), (4, None, 3, 3)])


def _prim(shape):
    x = te.placeholder(shape, "float32", name="x")
    return te.create_prim_func([x, topi.sum(x, axis=1)]).with_attr("global_symbol", "f")


def test_only_symbolic_reductions_are_decomposed():
    static = _prim((4, 5))
    assert decompose_symbolic_reductions(static).same_as(static)
    symbolic = decompose_symbolic_reductions(_prim((4, tvm.tirx.Var("n", "int64"))))
    script = symbolic.script()
    assert "_init" in script and "T.init()" not in script
