"""``relay.ScopeBuilder`` and ``relay.ExprMutator`` as v0.19 scripts used them."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.relay.analysis import post_order
from bmlib_relax.relay.scope_builder import ScopeBuilderError

from conftest import offloaded_partitions


def test_lets_and_branches_build_the_expression_they_describe():
    cond = relay.var("cond", shape=(), dtype="bool")
    x = relay.var("x", shape=(2,))
    y = relay.var("y", shape=(2,))
    sb = relay.ScopeBuilder()
    tripled = sb.let("t0", relay.multiply(x, relay.const(3.0)))
    with sb.if_scope(cond):
        bumped = sb.let(("t1", relay.TensorType((2,), "float32")),
                        relay.nn.relu(relay.add(tripled, relay.const(1.0))))
        sb.ret(bumped)
    with sb.else_scope():
        sb.ret(y)
    expr = sb.get()
    assert isinstance(expr, relay.Let) and expr.var is tripled
    assert isinstance(expr.body, relay.If)
    inner = expr.body.true_branch
    assert isinstance(inner, relay.Let) and inner.var.type_annotation == \
        relay.TensorType((2,), "float32") and inner.body is bumped
    assert expr.body.false_branch is y

    model = bmlib_relax.compile(relay.Function([cond, x, y], expr))
    assert offloaded_partitions(model.relax_module)
    xv = np.array([-1.0, 2.0], "float32")
    yv = np.array([5.0, 6.0], "float32")
    np.testing.assert_array_equal(model(np.array(True), xv, yv), np.maximum(xv * 3 + 1, 0))
    np.testing.assert_array_equal(model(np.array(False), xv, yv), yv)


def test_type_of_binds_an_expression_to_unify():
    x = relay.var("x", shape=(2,))
    sb = relay.ScopeBuilder()
    assert sb.type_of(x) == x.type_annotation
    incomplete = sb.type_of(relay.add(x, x))
    assert isinstance(incomplete, relay.IncompleteType)
    sb.ret(x)
    let = sb.get()
    assert let.var.name_hint == "unify" and let.var.type_annotation is incomplete


def test_misuse_is_named():
    sb = relay.ScopeBuilder()
    with pytest.raises(ScopeBuilderError, match="ret is not called"):
        sb.get()
    sb.ret(relay.const(1.0))
    with pytest.raises(ScopeBuilderError, match="already set"):
        sb.ret(relay.const(2.0))

    sb = relay.ScopeBuilder()
    with pytest.raises(ScopeBuilderError, match="else scope must follow an if scope"):
        with sb.else_scope():
            pass
    with sb.if_scope(relay.const(True)):
        sb.ret(relay.const(1.0))
    with pytest.raises(ScopeBuilderError, match="without its else"):
        sb.get()

    sb = relay.ScopeBuilder()
    with pytest.raises(ScopeBuilderError, match="ret is not called"):
        with sb.if_scope(relay.const(True)):
            pass


def test_expr_mutator_is_served_under_relay():
    x = relay.var("x", shape=(3,))
    func = relay.Function([x], relay.nn.relu(relay.add(x, relay.const(1.0))))

    class AddToSubtract(relay.ExprMutator):
        def visit_call(self, call):
            new = super().visit_call(call)
            if getattr(new.op, "name", None) == "add":
                return relay.subtract(*new.args)
            return new

    rewritten = AddToSubtract().visit(func)
    assert rewritten.body.args[0].op.name == "subtract"
    assert relay.ExprMutator().visit(func) is func  # unchanged graph, same objects
    model = bmlib_relax.compile(rewritten)
    np.testing.assert_array_equal(model(np.array([0.5, 1.0, 3.0], "float32")), [0, 0, 2])


def test_one_functor_reused_over_freshly_built_expressions():
    """v0.19 memoised by the node, which the memo keeps alive; keyed by ``id()`` alone, a
    freed expression's result came back for a new one built at the same address."""
    x = relay.var("x", shape=(3,))

    class DoubleConstants(relay.ExprMutator):
        def visit_constant(self, const):
            return relay.const(np.asarray(const.data) * 2)

    mutator = DoubleConstants()
    for step in range(12):
        doubled = mutator.visit(relay.add(x, relay.const(float(step))))
        assert float(np.asarray(doubled.args[1].data)) == 2.0 * step
        del doubled

    class CountCalls(relay.ExprVisitor):
        calls = 0

        def visit_call(self, call):
            self.calls += 1
            super().visit_call(call)

    counter = CountCalls()
    for step in range(12):
        counter.visit(relay.nn.relu(relay.add(x, relay.const(float(step)))))
    assert counter.calls == 24


def test_relay_transform_serves_the_rewrites_a_ported_script_runs():
    """``relay.transform.SimplifyInference()`` / ``CanonicalizeOps()`` before ``relay.build``
    (v0.19 scripts ran them by hand); an unknown pass is an AttributeError listing the
    available ones."""
    x = relay.var("x", shape=(1, 3, 2, 2))
    weights = [relay.var(n, shape=(3,)) for n in ("g", "b", "m", "v")]
    y = relay.nn.bias_add(relay.nn.batch_norm(x, *weights)[0], weights[1])
    mod = relay.transform.InferType()(relay.IRModule.from_expr(relay.Function([x, *weights], y)))
    mod = relay.transform.CanonicalizeOps()(relay.transform.SimplifyInference()(mod))
    ops = {getattr(n.op, "name", None) for n in post_order(mod["main"])
           if isinstance(n, relay.Call)}
    assert "nn.batch_norm" not in ops and "nn.bias_add" not in ops
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 3, 2, 2)).astype("float32")
    g, b, m = (rng.standard_normal(3).astype("float32") for _ in range(3))
    v = rng.uniform(0.5, 2, 3).astype("float32")
    expected = (xv - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5) * g[:, None, None] \
        + 2 * b[:, None, None]
    np.testing.assert_allclose(bmlib_relax.compile(mod)(xv, g, b, m, v), expected, rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(AttributeError, match="ToMixedPrecision is not available.*"
                                             "SimplifyInference"):
        relay.transform.ToMixedPrecision
