"""DFPattern.match on the Relay AST: node kinds, commutativity, shared sub-patterns.

Relay v0.19's matcher is the oracle: each case states what Relay answered.
"""
from __future__ import annotations

import pytest

from bmlib_relax import relay
from bmlib_relax.relay import ast
from bmlib_relax.relay.dataflow_pattern import (
    AltPattern, CallPattern, ConstantPattern, ExprPattern, FunctionPattern, IfPattern,
    LetPattern, TuplePattern, VarPattern, WildcardPattern, is_constant,
    is_expr, is_if, is_let, is_op, is_tuple, is_tuple_get_item, is_var, match, wildcard,
)
from bmlib_relax.relay.pattern_matcher import PatternMatchError


def names(*vs):
    return [relay.var(v) for v in vs]


def test_pattern_nodes_keep_relay_fields():
    wc1, wc2 = wildcard(), wildcard()
    call = is_op("add")(wc1, wc2)
    assert isinstance(call, CallPattern) and call.args == (wc1, wc2)
    assert isinstance(is_op("add"), ExprPattern) and is_op("add").name == "add"
    func = FunctionPattern([wc1, wc2], call)
    assert func.params == (wc1, wc2) and func.body is call
    tgi = is_tuple_get_item(is_tuple([wc1, wc2]), 1)
    assert isinstance(tgi.tuple, TuplePattern) and tgi.tuple is tgi.tuple_value and tgi.index == 1
    assert is_tuple_get_item(wc1).index is None
    assert is_var("x").name == "x" and isinstance(is_var(), VarPattern)
    assert isinstance(is_constant(), ConstantPattern) and isinstance(wildcard(), WildcardPattern)
    assert isinstance(is_op("add") | is_op("subtract"), AltPattern)
    cond = is_op("less")(is_var("x"), is_var("y"))
    assert isinstance(is_if(cond, wc1, wc2), IfPattern) and is_if(cond, wc1, wc2).cond is cond
    let = is_let(is_var("v"), cond, wc1)
    assert isinstance(let, LetPattern) and let.value is cond
    # pattern arithmetic builds Relay's operator calls
    for pat, op in ((wc1 + wc2, "add"), (wc1 - wc2, "subtract"), (wc1 * wc2, "multiply"),
                    (wc1 / wc2, "divide")):
        assert isinstance(pat, CallPattern) and pat.op.name == op and pat.args == (wc1, wc2)
    assert wildcard()(None).args is None


def test_ops_and_alternatives():
    assert is_op("add").match(relay.op.get("add"))
    assert not is_op("add").match(relay.op.get("subtract"))
    either = is_op("add") | is_op("subtract")
    assert either.match(relay.op.get("subtract")) and not either.match(relay.op.get("multiply"))


def test_add_and_multiply_match_commuted_but_subtract_does_not():
    x, y = names("x", "y")
    for op, commutes in (("add", True), ("multiply", True), ("subtract", False), ("divide", False)):
        pattern = is_op(op)(is_var("x"), is_var("y"))
        assert pattern.match(ast.Call(ast.Op(op), (x, y)))
        assert pattern.match(ast.Call(ast.Op(op), (y, x))) is commutes


def test_calls_with_any_arguments_and_wrong_ops():
    x, y = names("x", "y")
    assert wildcard()(None).match(relay.nn.relu(x))
    assert wildcard()(None).match(relay.add(x, y))
    assert not is_op("add")(wildcard(), wildcard()).match(x - y)
    assert not is_op("add")(wildcard()).match(x + y)  # arity
    assert not is_op("add")(wildcard(), wildcard()).match(x)


def test_functions():
    x, y = names("x", "y")
    wc1, wc2 = wildcard(), wildcard()
    pattern = FunctionPattern([wc1, wc2], wc1 + wc2)
    assert pattern.match(relay.Function([x, y], x + y))
    assert not pattern.match(relay.Function([x, y], x - y))
    assert not pattern.match(relay.Function([x], x + x))  # wc2 must be the second parameter
    anything = FunctionPattern(None, wildcard())
    assert anything.match(relay.Function([x], x)) and anything.match(relay.Function([x, y], x + y))


def test_if_and_let():
    px, py = is_var("x"), is_var("y")
    pattern = is_if(is_op("less")(px, py), px, py)
    x, y = names("x", "y")
    assert pattern.match(ast.If(relay.less(x, y), x, y))
    assert not pattern.match(ast.If(relay.greater(x, y), x, y))
    assert not pattern.match(ast.If(relay.less(x, y), y, x))  # px is bound to x

    let_var = is_var("let")
    pattern = is_let(let_var, is_op("less")(is_var("x"), is_var("y")), let_var)
    lv = relay.var("let")
    assert pattern.match(ast.Let(lv, relay.less(x, y), lv))
    assert not pattern.match(ast.Let(lv, relay.greater(x, y), lv))
    assert not pattern.match(ast.Let(lv, relay.less(x, y), lv * x))


def test_let_bound_values_are_not_looked_through():
    # Relay matches the Let node itself: a call pattern does not see the bound value.
    x, y, z = names("x", "y", "z")
    pattern = is_op("add")(wildcard(), wildcard())
    assert not pattern.match(ast.Let(z, x + y, z))
    assert not pattern.match(z)


def test_optional():
    x, w, b = names("x", "w", "b")
    pattern = is_op("nn.relu")(is_op("nn.conv2d")(wildcard(), wildcard()).optional(
        lambda p: is_op("nn.bias_add")(p, wildcard())))
    assert pattern.match(relay.nn.relu(relay.nn.conv2d(x, w)))
    assert pattern.match(relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w), b)))
    assert not pattern.match(relay.tanh(relay.nn.conv2d(x, w)))
    assert not pattern.match(relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w), b)))
    assert not pattern.match(relay.nn.relu(relay.nn.conv2d(x, w) + w))

    chain = is_op("nn.conv2d")(wildcard(), wildcard()).optional(is_op("nn.relu")).optional(
        is_op("tanh"))
    conv = relay.nn.conv2d(x, w)
    for expr in (conv, relay.nn.relu(conv), relay.tanh(conv), relay.tanh(relay.nn.relu(conv))):
        assert chain.match(expr)
    assert not chain.match(relay.nn.relu(relay.tanh(conv)))


def test_constants_and_expressions():
    x, w, b = names("x", "w", "b")
    pattern = is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), is_constant()), wildcard())
    assert not pattern.match(relay.nn.bias_add(relay.nn.conv2d(x, w), b))
    assert pattern.match(relay.nn.bias_add(relay.nn.conv2d(x, relay.const([[1.0]])), b))
    # is_expr compares structurally; constants by value and dtype, free variables by identity
    assert is_expr(relay.const(0)).match(relay.const(0))
    assert not is_expr(relay.const(0)).match(relay.const(0.0))
    assert is_expr(x).match(x) and not is_expr(x).match(relay.var("x"))
    assert is_expr(x + w).match(x + w) and not is_expr(x + w).match(w + x)


def test_tuples_and_items():
    x, y = names("x", "y")
    add = relay.op.get("add")
    fields = is_tuple((is_var("x"), wildcard(), is_op("add")))
    assert fields.match(ast.Tuple((x, y, add)))
    assert not is_tuple((is_var("x"), wildcard(), is_op("add"), wildcard())).match(
        ast.Tuple((x, y, add)))
    tup = ast.Tuple((x, y, add))
    assert is_tuple_get_item(fields, 1).match(ast.TupleGetItem(tup, 1))
    assert not is_tuple_get_item(fields, 1).match(ast.TupleGetItem(tup, 2))
    assert all(is_tuple_get_item(fields).match(ast.TupleGetItem(tup, i)) for i in range(3))
    concat = is_op("concatenate")(is_tuple(None))
    for n in (1, 2, 3):
        assert concat.match(relay.concatenate(ast.Tuple((x, y, x)[:n]), axis=0))


def test_shared_sub_pattern_binds_one_node():
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    diamond = is_op("add")(is_op("nn.relu")(conv), is_op("nn.leaky_relu")(conv))
    inp, weight = names("input", "weight")
    c = relay.nn.conv2d(inp, weight)
    relu, leaky = relay.nn.relu(c), relay.nn.leaky_relu(c, alpha=0)
    assert diamond.match(relu + leaky)
    assert not diamond.match(relu) and not diamond.match(leaky)
    other = relay.nn.leaky_relu(relay.nn.conv2d(*names("input2", "weight2")), alpha=0)
    assert not diamond.match(relu + other)  # two different convolutions: a fake diamond
    # one is_op pattern object used twice still matches two calls of that op
    add = is_op("add")
    x, y, z = names("x", "y", "z")
    assert add(add(wildcard(), wildcard()), wildcard()).match((x + y) + z)


def test_reassociated_multiply_divide():
    a, b, c = wildcard(), wildcard(), wildcard()
    x, y, z = names("x", "y", "z")
    assert ((a * b) / c).match(x * (y / z))
    assert (a * (b / c)).match((x * y) / z)
    assert not ((a * b) / c).match(x * (y - z))


def test_match_rejects_non_patterns():
    with pytest.raises(PatternMatchError):
        match("add", relay.var("x"))


def test_non_expressions_are_refused_with_our_error():
    from bmlib_relax.errors import BmlibError

    wrapper = relay.nn.batch_norm(*(relay.var(n) for n in "abcde"))
    for call in (lambda: is_op("add").match(wrapper), lambda: is_op("add").partition(3)):
        with pytest.raises(BmlibError, match="expected a Relay expression"):
            call()
