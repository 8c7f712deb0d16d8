"""DFPattern.partition: functions tagged PartitionedFromPattern, inputs, overlap rules."""
from __future__ import annotations

import warnings

import numpy as np

from bmlib_relax import relay
from bmlib_relax.relay import ast
from bmlib_relax.relay.analysis import structural_equal
from bmlib_relax.relay.dataflow_pattern import (
    FunctionPattern, TupleGetItemPattern, is_constant, is_expr, is_op, is_tuple, is_var,
    partition, wildcard,
)

FROM = "PartitionedFromPattern"


def fn(params, body, **attrs):
    return relay.Function(params, body, attrs=attrs)


def call(func, *args):
    return ast.Call(func, list(args))


def conv_bias_relu(x, w, b):
    return relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w), b))


def cbr_pattern(weight=None):
    return is_op("nn.relu")(is_op("nn.bias_add")(
        is_op("nn.conv2d")(wildcard(), weight if weight is not None else wildcard()), wildcard()))


def test_partition_twice_with_attrs():
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    bias = is_op("nn.bias_add")(conv, wildcard())
    relu = is_op("nn.relu")(bias)
    x, w, b, w2, b2 = (relay.var(n) for n in ("input", "weight", "bias", "weight", "bias"))
    graph = relay.nn.bias_add(relay.nn.conv2d(conv_bias_relu(x, w, b), w2), b2)
    for pattern, label in ((relu, "conv_bias_relu"), (bias, "conv_bias")):
        graph = pattern.partition(graph, {"Composite": label})

    p = [relay.var(n) for n in ("i", "w", "b", "i", "w", "b")]
    f0 = fn(p[:3], conv_bias_relu(*p[:3]), Composite="conv_bias_relu",
            PartitionedFromPattern="nn.conv2d_nn.bias_add_nn.relu_")
    f1 = fn(p[3:], relay.nn.bias_add(relay.nn.conv2d(p[3], p[4]), p[5]), Composite="conv_bias",
            PartitionedFromPattern="nn.conv2d_nn.bias_add_")
    assert structural_equal(graph, call(f1, call(f0, x, w, b), w2, b2))
    assert graph.op.params[0].name == "FunctionVar_0_0"


def get_bn(x, var, mean, beta, gamma, eps):
    return gamma * (x - mean) / relay.sqrt(var + eps) + beta


def bn_pattern():
    x, var, mean, beta, gamma = (wildcard() for _ in range(5))
    return gamma * (x - mean) / is_op("sqrt")(var + is_constant()) + beta


def test_batchnorm_parameters_in_pattern_order_and_constant_embedded():
    x, var, mean, beta, gamma = (relay.var(n) for n in ("x", "var", "mean", "beta", "gamma"))
    eps = relay.const(1e-5)
    p = [relay.var(n) for n in ("gamma", "x", "mean", "var", "beta")]
    f = fn(p, get_bn(p[1], p[3], p[2], p[4], p[0], eps),
           PartitionedFromPattern="subtract_multiply_add_sqrt_divide_add_")
    assert structural_equal(bn_pattern().partition(get_bn(x, var, mean, beta, gamma, eps)),
                            call(f, gamma, x, mean, var, beta))
    # nested: the inner match becomes an input of the outer one (two separate functions)
    inner = get_bn(x, var, mean, beta, gamma, eps)
    outer = get_bn(inner, var, mean, beta, gamma, eps)
    q = [relay.var(n) for n in ("gamma", "x", "mean", "var", "beta")]
    f2 = fn(q, get_bn(q[1], q[3], q[2], q[4], q[0], eps),
            PartitionedFromPattern="subtract_multiply_add_sqrt_divide_add_")
    assert structural_equal(bn_pattern().partition(outer),
                            call(f2, gamma, call(f, gamma, x, mean, var, beta), mean, var, beta))


def test_overlapping_and_escaping_matches_are_left_alone():
    x, var, mean, beta, gamma = (relay.var(n) for n in ("x", "var", "mean", "beta", "gamma"))
    bn = relay.nn.batch_norm(x, gamma, beta, mean, var, epsilon=1e-5)
    add = bn[0] + bn[0]
    item = TupleGetItemPattern(is_op("nn.batch_norm")(*(wildcard() for _ in range(5))), 0)
    assert item.partition(add) is add

    conv = relay.nn.conv2d(relay.var("input"), relay.var("weight"))
    out = relay.nn.relu(conv) + conv  # the conv escapes the relu(conv) match
    assert is_op("nn.relu")(is_op("nn.conv2d")(wildcard(), wildcard())).partition(out) is out


def test_fuzzy_tuple_inputs():
    x, y = relay.var("x"), relay.var("y")
    pattern = is_op("concatenate")(is_tuple(None))

    def concat(*args):
        return relay.concatenate(ast.Tuple(args), axis=0)

    for args in ((x,), (x, y), (x, y, x + y)):
        params = [relay.var(f"p{i}") for i in range(len(args))]
        expected = call(fn(params, concat(*params), PartitionedFromPattern="Tuple_concatenate_"),
                        *args)
        assert structural_equal(pattern.partition(concat(*args)), expected)


def test_function_patterns():
    x, y, z, b = (relay.var(n) for n in ("x", "y", "z", "b"))
    pattern = FunctionPattern(None, wildcard() + wildcard())(None) + wildcard()
    for params, body, label in (
            ([relay.var("xp")], lambda v: v[0] + v[0], "add_FunctionCall_add_"),
            ([relay.var("xp"), relay.var("yp")], lambda v: v[0] + v[1], "add_FunctionCall_add_"),
            ([relay.var(n) for n in ("xp", "yp", "zp")], lambda v: v[0] + v[1] + v[2],
             "add_add_FunctionCall_add_")):
        inner = relay.Function(params, body(params))
        args = [x, y, z][:len(params)]
        new = [relay.var(str(i)) for i in range(len(params) + 1)]
        expected = call(fn(new, ast.Call(inner, new[:-1]) + new[-1], PartitionedFromPattern=label),
                        *args, b)
        assert structural_equal(pattern.partition(call(inner, *args) + b), expected)

    # a function pattern with a fixed body inside a larger pattern
    x1, w1 = relay.var("x1"), relay.var("w1")
    wx, ww = wildcard(), wildcard()
    conv_fn = FunctionPattern([wx, ww], is_op("nn.conv2d")(wx, ww))
    func = relay.Function([x1, w1], relay.nn.conv2d(x1, w1))
    expr = call(func, x, y) + b + b
    p = [relay.var(n) for n in ("x2", "w2", "b2")]
    outer = fn(p, call(func, p[0], p[1]) + p[2],
               PartitionedFromPattern="nn.conv2d_FunctionCall_add_")
    assert structural_equal((conv_fn(wildcard(), wildcard()) + wildcard()).partition(expr),
                            call(outer, x, y, b) + b)
    # a bare function pattern is not partitioned (Relay warns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert conv_fn.partition(func) is func
    assert caught


def test_alternative_function_patterns():
    x, y, b = relay.var("x"), relay.var("y"), relay.var("b")
    wx, ww = wildcard(), wildcard()
    sigmoid_fn = FunctionPattern([wx, ww], is_op("sigmoid")(is_op("nn.conv2d")(wx, ww)))
    relu_fn = FunctionPattern([wx, ww], is_op("nn.relu")(is_op("nn.conv2d")(wx, ww)))
    pattern = sigmoid_fn(wildcard(), wildcard()) | relu_fn(wildcard(), wildcard())
    x1, w1 = relay.var("x1"), relay.var("w1")
    func = relay.Function([x1, w1], relay.nn.relu(relay.nn.conv2d(x1, w1)))
    x2, w2 = relay.var("x2"), relay.var("w2")
    outer = fn([x2, w2], call(func, x2, w2),
               PartitionedFromPattern="nn.conv2d_nn.relu_FunctionCall_")
    assert structural_equal(pattern.partition(call(func, x, y) + b), call(outer, x, y) + b)


def test_check_function_vetoes():
    pattern = is_op("nn.relu")(is_op("nn.conv2d")(is_var("input"), wildcard()))

    def check(pre):
        return pre.args[0].attrs.data_layout == "NCHW"

    x, w = relay.var("input"), relay.var("weight")
    relu = relay.nn.relu(relay.nn.conv2d(x, w))
    xf, wf = relay.var("input"), relay.var("weight")
    func = fn([xf, wf], relay.nn.relu(relay.nn.conv2d(xf, wf)),
              PartitionedFromPattern="nn.conv2d_nn.relu_")
    assert structural_equal(pattern.partition(relu, check=check), call(func, x, w))
    nhwc = relay.nn.relu(relay.nn.conv2d(x, w, data_layout="NHWC"))
    assert pattern.partition(nhwc, check=check) is nhwc


def test_check_sees_inferred_types():
    pattern = is_op("nn.relu")(is_op("nn.conv2d")(wildcard(), wildcard()))

    def check(pre):
        return int(pre.args[0].checked_type.shape[0]) == 1

    for batch, partitioned in ((1, True), (2, False)):
        x = relay.var("input", shape=(batch, 2, 5, 5))
        w = relay.var("weight", shape=(2, 2, 3, 3))
        relu = relay.nn.relu(relay.nn.conv2d(x, w))
        relay.transform.InferType()(relay.IRModule.from_expr(relu))
        out = pattern.partition(relu, check=check)
        assert (out is not relu) is partitioned
        if partitioned:
            assert out.op.attrs[FROM] == "nn.conv2d_nn.relu_"


def test_optional_partitions_the_longest_match():
    x, w, b = relay.var("x"), relay.var("w"), relay.var("b")
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    pattern1 = is_op("nn.relu")(conv.optional(lambda p: is_op("nn.bias_add")(p, wildcard())))
    bias = is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard())
    pattern2 = bias.optional(lambda p: is_op("nn.relu")(p))
    relu = conv_bias_relu(x, w, b)
    p = [relay.var(n) for n in ("x", "w", "b")]
    func = fn(p, conv_bias_relu(*p), PartitionedFromPattern="nn.conv2d_nn.bias_add_nn.relu_")
    for pattern in (pattern1, pattern2):
        assert pattern.match(relu)
        assert structural_equal(partition(pattern, relu), call(func, x, w, b))


def test_constants_embedded_or_lifted():
    x, w, b = relay.var("x"), relay.var("w"), relay.var("b")
    wc = relay.const(np.ones((1, 1, 1, 1), "float32"))
    relu, reluc = conv_bias_relu(x, w, b), conv_bias_relu(x, wc, b)
    label = "nn.conv2d_nn.bias_add_nn.relu_"
    p = [relay.var(n) for n in ("x", "w", "b")]
    lifted = fn(p, conv_bias_relu(*p), PartitionedFromPattern=label)
    q = [relay.var(n) for n in ("x", "b")]
    embedded = fn(q, conv_bias_relu(q[0], wc, q[1]), PartitionedFromPattern=label)

    assert structural_equal(cbr_pattern().partition(relu), call(lifted, x, w, b))
    assert structural_equal(cbr_pattern().partition(reluc), call(lifted, x, wc, b))
    assert structural_equal(cbr_pattern(is_var()).partition(relu), call(lifted, x, w, b))
    assert cbr_pattern(is_var()).partition(reluc) is reluc
    assert cbr_pattern(is_constant()).partition(relu) is relu
    assert structural_equal(cbr_pattern(is_constant()).partition(reluc), call(embedded, x, b))
    assert structural_equal(cbr_pattern(is_expr(wc)).partition(reluc), call(embedded, x, b))
    for alt in (is_var() | is_constant(), is_constant() | is_var()):
        assert structural_equal(cbr_pattern(alt).partition(relu), call(lifted, x, w, b))
        assert structural_equal(cbr_pattern(alt).partition(reluc), call(embedded, x, b))


def test_shared_input_is_one_parameter():
    pattern = is_op("add")(is_op("multiply")(wildcard(), wildcard()),
                           is_op("add")(wildcard(), wildcard()))
    i, w, left, right = (relay.var(n) for n in ("input", "weight", "left", "right"))
    conv = relay.nn.conv2d(i, w)
    expr = relay.add(relay.multiply(left, conv), relay.add(conv, right))
    lf, mf, rf = relay.var("leftf"), relay.var("midf"), relay.var("rightf")
    f = fn([lf, mf, rf], (lf * mf) + (mf + rf), PartitionedFromPattern="multiply_add_add_")
    assert structural_equal(pattern.partition(expr), call(f, left, conv, right))


MATCHED_OUTSIDE = """\
#[version = "0.0.5"]
def @main(%data: Tensor[(1, 2, 4, 4), float32], %weight: Tensor[(2, 2, 3, 3), float32],
          %bias: Tensor[(1, 2, 2, 2), float32]) {
  %0 = nn.conv2d(%data, %weight);
  %1 = add(%0, %bias);
  %2 = sigmoid(%1);
  multiply(%1, %2)
}
"""

MATCHED_OUTSIDE_PARTITIONED = """\
#[version = "0.0.5"]
def @main(%data: Tensor[(1, 2, 4, 4), float32], %weight: Tensor[(2, 2, 3, 3), float32],
          %bias: Tensor[(1, 2, 2, 2), float32]) {
  %0 = nn.conv2d(%data, %weight);
  %1 = add(%0, %bias);
  %2 = sigmoid(%1);
  %3 = fn (%a, %b, %c, %d, PartitionedFromPattern="nn.conv2d_add_multiply_") {
    %4 = nn.conv2d(%a, %b);
    %5 = add(%4, %c);
    multiply(%5, %d)
  };
  %3(%data, %weight, %bias, %2)
}
"""


def test_intermediate_used_only_under_the_root_is_duplicated():
    # The add also feeds the sigmoid, but the multiply (the root) dominates the sigmoid,
    # so Relay partitions and keeps a copy of the add outside for the sigmoid.
    mod = relay.parse(MATCHED_OUTSIDE)
    pattern = is_op("multiply")(
        is_op("add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard()), wildcard())
    actual = relay.IRModule.from_expr(pattern.partition(mod["main"]))
    assert structural_equal(actual, relay.parse(MATCHED_OUTSIDE_PARTITIONED))


def test_partitioned_module_type_checks():
    # The partitioned function's parameters carry no types (as in Relay): type inference
    # takes them from the call's arguments, as Relay's InferType did.
    mod = relay.parse(MATCHED_OUTSIDE)
    pattern = is_op("multiply")(
        is_op("add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard()), wildcard())
    actual = relay.IRModule.from_expr(pattern.partition(mod["main"]))
    relay.transform.InferType()(actual)
    assert actual["main"].body.checked_type == relay.TensorType((1, 2, 2, 2), "float32")


def test_typed_partition_equals_the_untyped_expectation():
    # InferType records type_args on op calls; a parsed (untyped) expectation has none.
    # Relay's parser type-checked, so the two compared equal there: they do here too.
    mod = relay.parse(MATCHED_OUTSIDE)
    pattern = is_op("multiply")(
        is_op("add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard()), wildcard())
    actual = relay.transform.InferType()(relay.IRModule.from_expr(pattern.partition(mod["main"])))
    assert structural_equal(actual, relay.parse(MATCHED_OUTSIDE_PARTITIONED))


def test_already_partitioned_functions_are_skipped():
    x, w = relay.var("x"), relay.var("w")
    pattern = is_op("nn.relu")(wildcard())
    once = pattern.partition(relay.nn.relu(relay.nn.relu(x) + w))
    assert once.op.attrs[FROM] == "nn.relu_"
    twice = pattern.partition(once)
    assert structural_equal(twice, once)  # the relu inside the function is not re-partitioned
