"""Dominator patterns and the dataflow graph behind them (Relay's IndexedGraph)."""
from __future__ import annotations

from bmlib_relax import relay
from bmlib_relax.relay import ast
from bmlib_relax.relay.analysis import structural_equal
from bmlib_relax.relay.dataflow_pattern import (
    DominatorPattern, dominates, is_op, wildcard,
)
from bmlib_relax.relay.pattern_graph import expr_graph

K_ELEMWISE = 0


def conv_pattern():
    return is_op("nn.conv2d")(wildcard(), wildcard())


def elemwise():
    return wildcard().has_attr({"TOpPattern": K_ELEMWISE})(wildcard())


def diamond_pattern(path=None):
    return dominates(conv_pattern(), path or elemwise(), is_op("add")(wildcard(), wildcard()))


def classic(inp, weight):
    conv = relay.nn.conv2d(inp, weight)
    return relay.nn.relu(relay.nn.relu(conv)) + relay.nn.leaky_relu(conv, alpha=0)


def deeper(inp, weight):
    conv = relay.nn.conv2d(inp, weight)
    return relay.tanh(relay.nn.relu(relay.nn.relu(conv))) + relay.nn.leaky_relu(conv, alpha=0)


def single_branch(inp, weight):
    relu = relay.nn.relu(relay.nn.relu(relay.nn.conv2d(inp, weight)))
    return relu + relay.tanh(relu)


def nested(inp, weight):
    conv = relay.nn.conv2d(inp, weight)
    relu = relay.nn.relu(conv)
    return relay.tanh(relu + relu) + relay.nn.leaky_relu(conv, alpha=0)


def test_graph_dominators():
    x, w = relay.var("x"), relay.var("w")
    conv = relay.nn.conv2d(x, w)
    relu, tanh = relay.nn.relu(conv), relay.tanh(conv)
    out = relu + tanh
    graph = expr_graph(out)
    node = graph.node
    assert node(conv).dominator_parent is node(out)  # both paths meet at the add
    assert node(relu).dominator_parent is node(out)
    assert node(out).dominates(node(conv)) and not node(relu).dominates(node(conv))
    assert [n.ref for n in graph.nodes].index(conv) < [n.ref for n in graph.nodes].index(out)


def test_let_bound_value_flows_into_its_variable():
    x, v = relay.var("x"), relay.var("v")
    value = relay.nn.relu(x)
    body = relay.tanh(v)
    let = ast.Let(v, value, body)
    graph = expr_graph(let)
    assert graph.node(value) in graph.node(v).inputs
    assert graph.node(v) in graph.node(body).inputs


def test_diamonds_match():
    inp, weight = relay.var("input"), relay.var("weight")
    pattern = diamond_pattern()
    assert isinstance(pattern, DominatorPattern)
    for build in (classic, deeper, single_branch):
        assert pattern.match(build(inp, weight)), build.__name__
    fuzzy = diamond_pattern(elemwise() | is_op("add")(wildcard(), wildcard()))
    assert fuzzy.match(nested(inp, weight))
    # the method form: child.dominates(parent, path)
    child = is_op("add")(wildcard(), wildcard())
    assert child.dominates(conv_pattern(), elemwise()).match(classic(inp, weight))


def test_diamonds_that_do_not_match():
    pattern = diamond_pattern()
    conv1 = relay.nn.conv2d(relay.var("input1"), relay.var("weight1"))
    conv2 = relay.nn.conv2d(relay.var("input2"), relay.var("weight2"))
    assert not pattern.match(relay.nn.relu(conv1) + relay.nn.leaky_relu(conv2, alpha=0))
    inp, weight = relay.var("input"), relay.var("weight")
    conv = relay.nn.conv2d(inp, weight)
    relu = relay.nn.relu(conv)
    assert not pattern.match((relu + relu) + relay.nn.leaky_relu(conv, alpha=0))  # add is broadcast
    assert not pattern.match(relay.nn.relu(inp) + relay.nn.leaky_relu(conv, alpha=0))
    relu = relay.nn.relu(relay.nn.relu(inp))
    assert not pattern.match(relu + relay.tanh(relu))  # no convolution at all


def test_parent_matches_at_one_node_only():
    x, w = relay.var("x"), relay.var("w")
    pattern = dominates(conv_pattern(), is_op("nn.relu")(wildcard()),
                        is_op("add")(wildcard(), wildcard()))
    n6 = relay.nn.conv2d(x, w)
    n8 = relay.nn.conv2d(relay.tanh(n6), w)
    assert not pattern.match(relay.add(relay.nn.relu(n8), relay.nn.relu(n6)))
    assert not pattern.match(relay.add(n8, relay.nn.relu(n6)))


def test_typed_dominator():
    inp = relay.var("input", relay.TensorType((1, 3, 12, 12), "float32"))
    weight = relay.var("weight", relay.TensorType((3, 3, 3, 3), "float32"))
    out = classic(inp, weight)

    def typed(dtype, shape):
        return dominates(conv_pattern(), elemwise().has_dtype(dtype),
                         is_op("add")(wildcard(), wildcard()).has_shape(shape))

    assert typed("float32", [1, 3, 10, 10]).match(out)
    assert not typed("float32", [1, 1, 10, 10]).match(out)
    assert not typed("float16", [1, 3, 10, 10]).match(out)


def test_partition_dominator_chain():
    fuzzy = diamond_pattern(elemwise() | is_op("add")(wildcard(), wildcard()))
    inp, weight = relay.var("input"), relay.var("weight")
    builds = (classic, deeper, single_branch, nested)
    expr = inp
    for build in builds:
        expr = build(expr, weight)
    partitioned = fuzzy.partition(expr)

    labels = ("nn.conv2d_nn.relu_nn.relu_nn.leaky_relu_add_",
              "nn.conv2d_nn.relu_nn.relu_tanh_nn.leaky_relu_add_",
              "nn.conv2d_nn.relu_nn.relu_tanh_add_",
              "nn.conv2d_nn.relu_add_tanh_nn.leaky_relu_add_")
    reference = inp
    for build, label in zip(builds, labels):
        i, w = relay.var("input"), relay.var("weight")
        func = relay.Function([i, w], build(i, w), attrs={"PartitionedFromPattern": label})
        reference = ast.Call(func, [reference, weight])
    assert structural_equal(partitioned, reference)


def test_variable_and_constant_arguments_are_not_paths():
    # add(relu(relu(conv)), b): the bias variable need not come from the convolution
    inp, weight, b = relay.var("input"), relay.var("weight"), relay.var("b")
    conv = relay.nn.conv2d(inp, weight)
    pattern = dominates(conv_pattern(), elemwise(), is_op("add")(wildcard(), wildcard()))
    assert pattern.match(relay.nn.relu(conv) + b)
    assert pattern.match(relay.nn.relu(conv) + relay.const(1.0))
    assert not pattern.match(inp + b)  # only leaves: no path to any parent
