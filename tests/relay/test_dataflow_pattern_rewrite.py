"""rewrite() with DFPatternCallback: node maps, fixed point, rewrite_once, recursion."""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax import relay
from bmlib_relax.relay import ast
from bmlib_relax.relay.analysis import structural_equal
from bmlib_relax.relay.dataflow_pattern import (
    DFPatternCallback, FunctionPattern, dominates, is_constant, is_expr, is_op, rewrite,
    wildcard,
)
from bmlib_relax.relay.pattern_partition import PatternRewriteError


class AddToSubtract(DFPatternCallback):
    def __init__(self):
        super().__init__()
        self.pattern = is_op("add")(wildcard(), wildcard())

    def callback(self, pre, post, node_map):
        return post.args[0] - post.args[1]


def test_rewrite_add_to_subtract():
    x, y, w = relay.var("x"), relay.var("y"), relay.var("w")
    sub = is_op("subtract")(wildcard(), wildcard())
    assert sub.match(rewrite(AddToSubtract(), x + y))
    i, k = relay.var("input"), relay.var("weight")
    func = relay.Function([i, k], relay.nn.relu(relay.nn.conv2d(i, k)))
    out = AddToSubtract().rewrite(ast.Call(func, [x, w]) + y)
    assert sub.match(out) and out.args[0].op is func


def test_rewrite_inlines_a_composite_call():
    x, y, a, b = (relay.var(n) for n in "xyab")
    f = relay.Function([x, y], x + y, attrs={"Composite": "add"})

    class Inline(DFPatternCallback):
        def __init__(self):
            super().__init__()
            self.pattern = wildcard().has_attr({"Composite": "add"})(wildcard(), wildcard())

        def callback(self, pre, post, node_map):
            return post.args[0] + post.args[1]

    out = rewrite(Inline(), relay.abs(ast.Call(f, [a, b])))
    assert is_op("abs")(is_op("add")(wildcard(), wildcard())).match(out)


def test_identity_callback_keeps_the_graph():
    class Same(DFPatternCallback):
        def __init__(self):
            super().__init__()
            a, b = wildcard(), wildcard()
            n0 = is_op("add")(a, b)
            self.pattern = is_op("add")(n0, is_op("add")(n0, a))

        def callback(self, pre, post, node_map):
            return post

    x, y = relay.var("x"), relay.var("y")
    n0 = relay.add(x, relay.add(y, y))
    out = relay.add(relay.add(x, n0), n0)
    assert structural_equal(rewrite(Same(), out), out)


class FuseBatchnorm(DFPatternCallback):
    def __init__(self):
        super().__init__()
        self.x, self.var, self.mean, self.beta, self.gamma = (wildcard() for _ in range(5))
        self.eps = is_constant()
        self.pattern = (self.gamma * (self.x - self.mean) /
                        is_op("sqrt")(self.var + self.eps) + self.beta)

    def callback(self, pre, post, node_map):
        get = {name: node_map[getattr(self, name)][0]
               for name in ("x", "var", "mean", "beta", "gamma", "eps")}
        return relay.nn.batch_norm(get["x"], get["gamma"], get["beta"], get["mean"], get["var"],
                                   epsilon=get["eps"].data.item())[0]


def test_fuse_batchnorm_in_every_association():
    x, var, mean, beta, gamma = (relay.var(n) for n in ("x", "var", "mean", "beta", "gamma"))
    eps = relay.const(1e-5)
    expected = relay.nn.batch_norm(x, gamma, beta, mean, var, epsilon=1e-5)[0]
    for bn in (gamma * (x - mean) / relay.sqrt(var + eps) + beta,
               beta + gamma * (x - mean) / relay.sqrt(var + eps),
               gamma * ((x - mean) / relay.sqrt(var + eps)) + beta):
        assert structural_equal(rewrite(FuseBatchnorm(), bn), expected)
    fake = gamma * (x - mean) / relay.sqrt(var + eps) - beta
    assert rewrite(FuseBatchnorm(), fake) is fake
    # nested: both fuse; with the inner one broken only the outer fuses
    bn2 = gamma * ((gamma * (x - mean) / relay.sqrt(var + eps) + beta) - mean) / \
        relay.sqrt(var + eps) + beta
    assert structural_equal(rewrite(FuseBatchnorm(), bn2),
                            relay.nn.batch_norm(expected, gamma, beta, mean, var, epsilon=1e-5)[0])
    bn3 = gamma * (fake - mean) / relay.sqrt(var + eps) + beta
    assert structural_equal(rewrite(FuseBatchnorm(), bn3),
                            relay.nn.batch_norm(fake, gamma, beta, mean, var, epsilon=1e-5)[0])


def simplify(expr):
    zero = is_expr(relay.const(0)) | is_expr(relay.const(0.0))
    one = is_expr(relay.const(1)) | is_expr(relay.const(1.0))

    class Keep(DFPatternCallback):
        def __init__(self, keep, build):
            super().__init__()
            self.x = keep
            self.pattern = build(keep)

        def callback(self, pre, post, node_map):
            return node_map[self.x][0]

    return rewrite([Keep(wildcard(), lambda x: x + zero), Keep(wildcard(), lambda x: x - zero),
                    Keep(wildcard(), lambda x: x * one), Keep(wildcard(), lambda x: x / one),
                    Keep(zero, lambda z: z * wildcard()), Keep(zero, lambda z: z / wildcard())],
                   expr)


def test_algebraic_simplification_to_a_fixed_point():
    x, y = relay.var("x"), relay.var("y")
    one, zero, onef, zerof = relay.const(1), relay.const(0), relay.const(1.0), relay.const(0.0)
    for expr in (x + zero, zerof + x, x - zero, x * onef, one * x, x / one):
        assert simplify(expr) is x
    assert simplify(x * zero) is zero and simplify(zerof / x) is zerof
    assert simplify(x - one) is not x
    assert structural_equal(simplify((x + zero * y) / one + (y * one) - zero / x), x + y)


class DropLastConcatInput(DFPatternCallback):
    def __init__(self, once):
        super().__init__(rewrite_once=once)
        self.pattern = is_op("concatenate")(None)

    def callback(self, pre, post, node_map):
        fields = post.args[0].fields
        if len(fields) > 1:
            return relay.concatenate(ast.Tuple(fields[:-1]), axis=0)
        return fields[0]


class ReluAfterSoftmax(DFPatternCallback):
    def __init__(self, once):
        super().__init__(rewrite_once=once)
        self.pattern = is_op("nn.softmax")(None)

    def callback(self, pre, post, node_map):
        return relay.nn.relu(post)


def test_rewrite_once():
    x, y, z = relay.var("x"), relay.var("y"), relay.var("z")
    concat = relay.concatenate(ast.Tuple([x, y, z]), axis=0)
    assert rewrite(DropLastConcatInput(False), concat) is x
    assert structural_equal(rewrite(DropLastConcatInput(True), concat),
                            relay.concatenate(ast.Tuple([x, y]), axis=0))
    before = relay.nn.softmax(concat)
    assert structural_equal(
        rewrite([ReluAfterSoftmax(True), DropLastConcatInput(True)], before),
        relay.nn.relu(relay.nn.softmax(relay.concatenate(ast.Tuple([x, y]), axis=0))))
    assert structural_equal(
        rewrite([ReluAfterSoftmax(True), DropLastConcatInput(False)], before),
        relay.nn.relu(relay.nn.softmax(x)))


def test_rewrites_that_never_settle_stop_with_an_error():
    with pytest.raises(PatternRewriteError, match="100 rewrite passes"):
        rewrite(ReluAfterSoftmax(False), relay.nn.softmax(relay.var("x")))


def test_recursive_pattern_with_redirect():
    data = relay.var("data", relay.TensorType((2, 8), "float32"))
    feat = relay.nn.dense(data, relay.const(np.zeros((4, 8), "float32")))
    for _ in range(6):
        feat = relay.cast(feat, "float32")

    class Relu(DFPatternCallback):
        def __init__(self, pattern):
            super().__init__(rewrite_once=True)
            self.pattern = pattern

        def callback(self, pre, post, node_map):
            return relay.nn.relu(post)

    def chain(shape):
        dense = is_op("nn.dense")(wildcard(), wildcard())
        redirect = wildcard()
        return shape(redirect, dense)

    def arg_alt(redirect, dense):
        pattern = is_op("cast")(redirect)
        redirect.redirect_to(pattern | dense)
        return pattern

    def alt_left(redirect, dense):
        pattern = is_op("cast")(redirect | dense)
        redirect.redirect_to(pattern)
        return pattern

    def alt_right(redirect, dense):
        pattern = is_op("cast")(dense | redirect)
        redirect.redirect_to(pattern)
        return pattern

    for shape in (arg_alt, alt_left, alt_right):
        pattern = chain(shape)
        assert pattern.match(feat)
        assert not pattern.match(relay.cast(relay.nn.relu(data), "float32"))
        assert structural_equal(rewrite(Relu(pattern), feat), relay.nn.relu(feat))


def test_dominator_rewrite_and_function_with_any_body():
    class ConvOnly(DFPatternCallback):
        def __init__(self):
            super().__init__()
            self.inp, self.weight = wildcard(), wildcard()
            path = wildcard().has_attr({"TOpPattern": 0})(wildcard()) | \
                is_op("add")(wildcard(), wildcard())
            self.pattern = dominates(is_op("nn.conv2d")(self.inp, self.weight), path,
                                     is_op("add")(wildcard(), wildcard()))

        def callback(self, pre, post, node_map):
            return relay.nn.conv2d(node_map[self.inp][0], node_map[self.weight][0])

    inp, weight = relay.var("input"), relay.var("weight")
    conv = relay.nn.conv2d(inp, weight)
    diamond = relay.nn.relu(relay.nn.relu(conv)) + relay.nn.leaky_relu(conv, alpha=0)
    conv2 = relay.nn.conv2d(diamond, weight)
    relu = relay.nn.relu(conv2)
    out = relay.tanh(relu + relu) + relay.nn.leaky_relu(conv2, alpha=0)
    expected = relay.nn.conv2d(relay.nn.conv2d(inp, weight), weight)
    assert structural_equal(ConvOnly().rewrite(out), expected)

    x, w, b = relay.var("x"), relay.var("w"), relay.var("b")
    x1, w1 = relay.var("x1"), relay.var("w1")
    func = relay.Function([x1, w1], relay.nn.conv2d(x1, w1))

    class Replace(DFPatternCallback):
        def __init__(self):
            super().__init__()
            self.pattern = FunctionPattern([wildcard(), wildcard()], wildcard())(
                wildcard(), wildcard()) + wildcard()

        def callback(self, pre, post, node_map):
            return x + w

    assert structural_equal(rewrite(Replace(), ast.Call(func, [x, w]) + b + b), x + w + b)


def test_require_type_types_the_expression_first():
    seen = []

    class Typed(DFPatternCallback):
        def __init__(self):
            super().__init__(require_type=True)
            self.pattern = is_op("nn.relu")(wildcard())

        def callback(self, pre, post, node_map):
            seen.append(pre.checked_type)
            return post

    x = relay.var("x", shape=(2, 3))
    rewrite(Typed(), relay.nn.relu(x))
    assert seen == [relay.TensorType((2, 3), "float32")]


def test_callback_errors_are_reported():
    class NoPattern(DFPatternCallback):
        pass

    with pytest.raises(PatternRewriteError, match="pattern"):
        rewrite(NoPattern(), relay.var("x"))

    class ReturnsNothing(AddToSubtract):
        def callback(self, pre, post, node_map):
            return None

    with pytest.raises(PatternRewriteError, match="NoneType"):
        rewrite(ReturnsNothing(), relay.var("x") + relay.var("y"))
