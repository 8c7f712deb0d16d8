"""Partitions with symbolic shapes: the PrimFunc binds its symbolic dims from its
parameters, outputs may have symbolic (and compound) shapes, the signature check
compares symbolic dims structurally, and a dim no parameter determines is refused."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax, te, tirx
from tvm.script import relax as R

from bmlib_relax.backend.codegen import lower_partition
from bmlib_relax.backend.partition import partition_for_bmlib
from bmlib_relax.backend.verify import check_prim_signature, verify_partition_arity
from bmlib_relax.compiler import build_offloaded, lower_and_verify
from bmlib_relax.errors import SignatureMismatchError, UnboundShapeVarError
from bmlib_relax.report import build_report

from conftest import offloaded_partitions
from helpers import run


def _module(params, build):
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


def _vars(*names):
    return [tirx.Var(name, "int64") for name in names]


def test_partition_with_symbolic_and_compound_output_shapes_runs_at_every_length():
    n, = _vars("n")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))

    def build(bb, x):
        joined = bb.emit(R.concat([x, x], axis=0))  # (n * 2, 8): a compound output dim
        return relax.Tuple([joined, bb.emit(R.nn.relu(x))])

    partitioned = partition_for_bmlib(_module([x], build))
    assert offloaded_partitions(partitioned)
    lowered = lower_and_verify(partitioned)
    for name, (prim, record) in lowered.items():
        func = partitioned[name]
        # the arity rule holds: parameters + outputs, all of them buffers with symbolic dims
        assert record.num_args == len(func.params) + record.num_outputs == len(prim.params)
        assert any(not isinstance(d, tirx.IntImm) for p in prim.params for d in p.ty.shape)
    executable, records = build_offloaded(partitioned)
    verify_partition_arity(partitioned, records)
    for length in (1, 3, 17):
        data = np.random.default_rng(length).standard_normal((length, 8)).astype("float32")
        joined, relu = run(executable, [data])
        np.testing.assert_array_equal(joined, np.concatenate([data, data]))
        np.testing.assert_array_equal(relu, np.maximum(data, 0))


def test_two_symbolic_dims_are_never_confused():
    n, m = _vars("n", "m")
    x = relax.Var("x", relax.TensorType([n, 16], "float32"))
    y = relax.Var("y", relax.TensorType([m, 16], "float32"))
    partitioned = partition_for_bmlib(_module(
        [x, y], lambda bb, x, y: R.nn.relu(R.matmul(x, R.permute_dims(y, [1, 0])))))
    assert offloaded_partitions(partitioned)
    executable, _ = build_offloaded(partitioned)
    rng = np.random.default_rng(0)
    for rows, cols in ((3, 5), (5, 3), (1, 19), (19, 1)):
        a = rng.standard_normal((rows, 16)).astype("float32")
        b = rng.standard_normal((cols, 16)).astype("float32")
        (got,) = run(executable, [a, b])
        assert got.shape == (rows, cols)
        np.testing.assert_allclose(got, np.maximum(a @ b.T, 0), rtol=1e-5, atol=1e-5)


def _nm_function(out_dims):
    """A partition-like function (x: (n, 4), y: (m, 4)) -> out_dims."""
    n, m = _vars("n", "m")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    y = relax.Var("y", relax.TensorType([m, 4], "float32"))
    func = relax.Function([x, y], relax.SeqExpr([], x),
                          relax.TensorType(out_dims(n, m), "float32"))
    return func, n, m


def _prim(shapes):
    tensors = [te.placeholder(s, "float32", name=f"t{i}") for i, s in enumerate(shapes)]
    return te.create_prim_func(tensors)


def test_signature_check_compares_symbolic_dims_structurally():
    func, n, m = _nm_function(lambda n, m: [m, n])
    # the PrimFunc's own vars, both named "n": names prove nothing, the mapping does
    p, q = tirx.Var("n", "int64"), tirx.Var("n", "int64")
    check_prim_signature(func, _prim([(p, 4), (q, 4), (q, p)]), "ok")
    with pytest.raises(SignatureMismatchError, match="output 0"):
        check_prim_signature(func, _prim([(p, 4), (q, 4), (p, q)]), "swapped")
    with pytest.raises(SignatureMismatchError, match="parameter y"):
        check_prim_signature(func, _prim([(p, 4), (p, 4), (p, p)]), "one var for two dims")
    with pytest.raises(SignatureMismatchError, match="output 0"):
        check_prim_signature(func, _prim([(p, 4), (q, 4), (q, 7)]), "static for symbolic")


def test_signature_check_proves_compound_dims_equal():
    func, n, m = _nm_function(lambda n, m: [n * 2 + m, 4])
    p, q = _vars("a", "b")
    check_prim_signature(func, _prim([(p, 4), (q, 4), (q + p + p, 4)]), "ok")
    with pytest.raises(SignatureMismatchError, match="output 0"):
        check_prim_signature(func, _prim([(p, 4), (q, 4), (p * 2 + p, 4)]), "wrong")


def test_an_output_only_symbolic_dim_is_refused_before_lowering():
    func, n, m = _nm_function(lambda n, m: [tirx.Var("k", "int64"), 4])
    with pytest.raises(UnboundShapeVarError, match=r"output 0 .*symbolic dim k"):
        lower_partition(func, "fused_output_only")


def test_a_dim_known_only_inside_an_expression_is_refused():
    n, = _vars("n")
    x = relax.Var("x", relax.TensorType([n * 2, 4], "float32"))
    func = relax.Function([x], relax.SeqExpr([], x), relax.TensorType([n * 2, 4], "float32"))
    with pytest.raises(UnboundShapeVarError, match=r"parameter x .*symbolic dim n"):
        lower_partition(func, "fused_compound_param")


def test_ops_whose_dims_their_operands_cannot_bind_stay_on_the_host():
    n, m = _vars("n", "m")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    y = relax.Var("y", relax.TensorType([m], "float32"))

    def build(bb, x, y):
        joined = bb.emit(R.concat([x, x], axis=0))          # bmlib: (n * 2, 8) from x
        relu = bb.emit(R.nn.relu(joined))                   # host: n only inside n * 2
        moved = bb.emit(R.reshape(x, R.shape([m, 8])))      # host: m is not a dim of x
        return relax.Tuple([relu, moved])

    partitioned = partition_for_bmlib(_module([x, y], build))
    assert offloaded_partitions(partitioned)
    executable, records = build_offloaded(partitioned)
    report = build_report(partitioned, records)
    assert dict(report.ops_offloaded) == {"relax.concat": 1}
    assert dict(report.ops_host) == {"relax.nn.relu": 1, "relax.reshape": 1}
    data = np.arange(24, dtype="float32").reshape(3, 8) - 10
    relu, moved = run(executable, [data, np.zeros(3, "float32")])
    np.testing.assert_array_equal(relu, np.maximum(np.concatenate([data, data]), 0))
    np.testing.assert_array_equal(moved, data)


@pytest.mark.parametrize("merge", [False, True])
def test_a_symbolic_reshape_target_goes_into_the_partition(merge):
    # reshape(x, [0, -1]) -> R.reshape(x, R.shape([n, 24])): FuseOpsByPattern lifts that
    # shape into a Shape parameter; it is put back, so the PrimFunc takes buffers only.
    n, = _vars("n")
    x = relax.Var("x", relax.TensorType([n, 4, 6], "float32"))
    partitioned = partition_for_bmlib(_module(
        [x], lambda bb, x: R.nn.relu(bb.emit(R.reshape(x, R.shape([n, 24]))))), merge=merge)
    names = offloaded_partitions(partitioned)
    assert names
    for name in names:
        assert all(isinstance(p.ty, relax.TensorType) for p in partitioned[name].params)
    executable, records = build_offloaded(partitioned)
    verify_partition_arity(partitioned, records)
    # merged: reshape and relu, both bmlib; unmerged the reshape alone is a host view
    assert sum(len(r.ops) for r in records.values()) == (2 if merge else 1)
    for length in (1, 4):
        data = np.random.default_rng(length).standard_normal((length, 4, 6)).astype("float32")
        (got,) = run(executable, [data])
        np.testing.assert_array_equal(got, np.maximum(data.reshape(length, 24), 0))


def test_signature_check_knows_symbolic_dims_are_sizes():
    # Relax writes a clamped slice length as min(n, 3) - min(n, 1); TE simplifies with
    # n >= 0 in mind. Equal for every size n, so the check must accept it.
    n, m = _vars("n", "m")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    zero = tirx.const(0, "int64")
    func = relax.Function([x], relax.SeqExpr([], x),
                          relax.TensorType([tirx.max(n - tirx.min(zero, n), zero), 4], "float32"))
    p, = _vars("p")
    check_prim_signature(func, _prim([(p, 4), (p, 4)]), "sizes")
    with pytest.raises(SignatureMismatchError):
        check_prim_signature(func, _prim([(p, 4), (p - 1, 4)]), "off by one")
