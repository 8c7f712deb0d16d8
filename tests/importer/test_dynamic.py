"""Relay's ``dyn.*`` ops: the static op when the shape operands are known at import
(v0.19's DynamicToStatic, which ``relay.build`` ran after binding the weights)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, relay
from bmlib_relax.importer.ops.dynamic import STATIC_FORMS

from conftest import offloaded_partitions

from .helpers import check, import_text, ops_in, rand, relay_fn

X = rand(2, 6)


def _weights(**arrays):
    return {k: np.asarray(v) for k, v in arrays.items()}


# (params of @main besides %x: Tensor[(2, 6)], body, bound weights, numpy expectation)
CASES = {
    "dyn.reshape": ("%s: Tensor[(3), int64]", "dyn.reshape(%x, %s)",
                    _weights(s=np.array([0, 3, -1])), X.reshape(2, 3, 2)),
    "dyn.broadcast_to": ("%s: Tensor[(3), int32]", "dyn.broadcast_to(%x, %s, shape=None)",
                         _weights(s=np.array([4, 2, 6], "int32")),
                         np.broadcast_to(X, (4, 2, 6))),
    "dyn.tile": ("%r: Tensor[(3), int64]", "dyn.tile(%x, %r, reps=None)",
                 _weights(r=np.array([2, 1, 3])), np.tile(X, (2, 1, 3))),
    "dyn.strided_slice": (
        "%b: Tensor[(2), int64], %e: Tensor[(2), int64], %s: Tensor[(2), int64]",
        "dyn.strided_slice(%x, %b, %e, %s, begin=None, end=None, strides=None, axes=None)",
        _weights(b=np.array([1, 5]), e=np.array([2, 0]), s=np.array([1, -2])), X[1:2, 5:0:-2]),
    "dyn.expand_dims": ("%a: int64", "dyn.expand_dims(%x, %a, num_newaxis=2)",
                        _weights(a=np.array(-1)), X.reshape(2, 6, 1, 1)),
    "dyn.nn.pad": ("%w: Tensor[(2, 2), int64]", "dyn.nn.pad(%x, %w, 7f)",
                   _weights(w=np.array([[1, 0], [0, 2]])),
                   np.pad(X, [(1, 0), (0, 2)], constant_values=7)),
    "dyn.topk": ("%k: Tensor[(1), int32]",
                 'dyn.topk(%x, %k, axis=1, ret_type="values", is_ascend=True)',
                 _weights(k=np.array([2], "int32")), np.sort(X, axis=1)[:, :2]),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_dyn_op_with_bound_operands_is_the_static_op(op):
    params, body, weights, want = CASES[op]
    text = relay_fn(f"%x: Tensor[(2, 6), float32], {params}", body)
    mod = import_text(text, weights)
    static = STATIC_FORMS[op].static_op
    # the import's result has the static shape (no shape computed on the host)
    assert [int(d) for d in mod["main"].body.ty.shape] == list(want.shape)
    assert "relax.tensor_to_shape" not in ops_in(mod), static
    check(text, [X], want, params=weights)


def test_operands_computed_from_static_shapes_fold_too():
    # shape_of a static tensor is a constant at import, as FoldConstant made it for
    # DynamicToStatic: the broadcast, and the add after it, go to bmlib
    text = relay_fn("%x: Tensor[(2, 6), float32], %y: Tensor[(3, 2, 6), float32]",
                    "%0 = shape_of(%y);\n  %1 = dyn.broadcast_to(%x, %0, shape=None);\n"
                    "  %2 = add(%1, %y);\n  nn.relu(%2)")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)
    y = rand(3, 2, 6, seed=1)
    np.testing.assert_allclose(model(x=X, y=y), np.maximum(X + y, 0), rtol=1e-6)


def test_one_hot_depth_and_sparse_to_dense_shape_from_weights():
    indices = np.array([0, 2, 1], "int32")
    text = relay_fn("%i: Tensor[(3), int32], %d: int32",
                    'dyn.one_hot(%i, 1f, 0f, %d, depth=1, axis=-1, dtype="float32")')
    check(text, [indices], np.eye(4, dtype="float32")[indices],
          params=_weights(d=np.array(4, "int32")))
    text = relay_fn("%i: Tensor[(2, 2), int64], %v: Tensor[(2), float32], %s: Tensor[(2), int64]",
                    "dyn.sparse_to_dense(%i, %v, 0f, %s, output_shape=None)")
    want = np.zeros((3, 4), "float32")
    want[0, 1], want[2, 3] = 5, 6
    check(text, [np.array([[0, 1], [2, 3]]), np.array([5, 6], "float32")], want,
          params=_weights(s=np.array([3, 4])))


def test_upsampling_and_resize_scales_from_weights():
    x = rand(1, 1, 2, 3)
    text = relay_fn("%x: Tensor[(1, 1, 2, 3), float32], %h: float32, %w: float32",
                    "dyn.nn.upsampling(%x, %h, %w)")
    check(text, [x], x.repeat(2, axis=2).repeat(3, axis=3),
          params=_weights(h=np.array(2, "float32"), w=np.array(3, "float32")))
    text = relay_fn("%x: Tensor[(1, 1, 2, 3), float32], %s: Tensor[(2), int64], "
                    "%r: Tensor[(4), float32]",
                    'dyn.image.resize2d(%x, %s, %r, method="nearest_neighbor", '
                    'coordinate_transformation_mode="asymmetric", rounding_method="floor")')
    check(text, [x], x.repeat(2, axis=2).repeat(2, axis=3),
          params=_weights(s=np.array([4, 6]), r=np.zeros(4, "float32")))


def test_an_operand_known_only_at_run_time_is_refused_by_name():
    text = relay_fn("%x: Tensor[(2, 6), float32], %r: Tensor[(2), int64]",
                    "dyn.tile(%x, %r, reps=None)")
    with pytest.raises(ConversionError, match=r"snippet.relay:\d+:\d+: dyn.tile: its reps "
                                              r"operand is known only when the model runs"):
        import_text(text)


@pytest.mark.parametrize("body, weight, problem", [
    ("dyn.tile(%x, %w, reps=None)", np.ones((2, 1), "int64"),
     r"the reps operand must be a 1-D tensor, got shape \(2, 1\)"),
    ("dyn.tile(%x, %w, reps=None)", np.ones(2, "float32"),
     r"the reps operand holds float32 values, not integers"),
    ("dyn.topk(%x, %w)", np.array([1, 2], "int64"),
     r"the k operand must hold one value, got shape \(2,\)"),
    ("dyn.nn.pad(%x, %w, 0f)", np.zeros(4, "int64"),
     r"the pad_width operand must be a 2-D tensor"),
])
def test_a_bound_operand_of_the_wrong_form_is_refused(body, weight, problem):
    ty = f"Tensor[{weight.shape}, {weight.dtype}]".replace(",)", ")")
    text = relay_fn(f"%x: Tensor[(2, 6), float32], %w: {ty}", body)
    with pytest.raises(ConversionError, match=problem):
        import_text(text, {"w": weight})


def test_the_static_op_checks_still_apply():
    # broadcast_to a shape the input does not broadcast to: the static op's own error
    text = relay_fn("%x: Tensor[(2, 6), float32], %s: Tensor[(2), int64]",
                    "dyn.broadcast_to(%x, %s, shape=None)")
    with pytest.raises(bmlib_relax.BmlibError, match=r"dyn.broadcast_to"):
        import_text(text, {"s": np.array([3, 6])})


def test_the_builder_dyn_op_runs_static_once_its_weight_is_bound():
    x = relay.var("x", shape=(2, 6), dtype="float32")
    reps = relay.var("reps", shape=(2,), dtype="int64")
    call = relay.tile(x, reps)
    assert call.op.name == "dyn.tile"  # as Relay's builder made it
    func = relay.Function([x, reps], relay.nn.relu(call))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func), {"reps": np.array([1, 2])})
    assert offloaded_partitions(model.relax_module)
    np.testing.assert_allclose(model(x=X), np.maximum(np.tile(X, (1, 2)), 0), rtol=1e-6)


@pytest.mark.parametrize("build, weight, want", [
    (lambda x, w: relay.squeeze(relay.reshape(x, (2, 1, 6)), w), np.array([1]),
     X.reshape(2, 6)),
    (lambda x, w: relay.expand_dims(x, w), np.array(0), X.reshape(1, 2, 6)),
    (lambda x, w: relay.nn.pad(x, w, 1.5), np.array([[0, 1], [2, 0]]),
     np.pad(X, [(0, 1), (2, 0)], constant_values=1.5)),
    (lambda x, w: relay.nn.upsampling(relay.reshape(x, (1, 1, 2, 6)), w, 2),
     np.array(3.0), X.reshape(1, 1, 2, 6).repeat(3, axis=2).repeat(2, axis=3)),
    (lambda x, w: relay.image.resize2d(relay.reshape(x, (1, 1, 2, 6)), w,
                                       method="nearest_neighbor",
                                       coordinate_transformation_mode="asymmetric"),
     np.array([4, 12]), X.reshape(1, 1, 2, 6).repeat(2, axis=2).repeat(2, axis=3)),
    (lambda x, w: relay.sparse_to_dense(relay.const(np.array([1, 0])), w,
                                        relay.const(np.array([4.0, 5.0], "float32"))),
     np.array([3]), np.array([5.0, 4.0, 0.0], "float32")),
])
def test_every_builder_dyn_form_converts_with_its_weight_bound(build, weight, want):
    x = relay.var("x", shape=(2, 6), dtype="float32")
    w = relay.var("w", shape=weight.shape, dtype=str(weight.dtype))
    call = build(x, w)
    dyn_calls = [e.op.name for e in _calls(call) if e.op.name.startswith("dyn.")]
    assert len(dyn_calls) == 1 and dyn_calls[0] in STATIC_FORMS  # made as Relay's builder did
    out = bmlib_relax.compile(relay.IRModule.from_expr(relay.Function([x, w], call)),
                              {"w": weight})(x=X)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def _calls(expr):
    """The op calls in ``expr``, outermost first."""
    if isinstance(expr, relay.ast.Call) and isinstance(expr.op, relay.ast.Op):
        yield expr
        for arg in expr.args:
            yield from _calls(arg)
