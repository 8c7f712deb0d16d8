"""DFPattern attribute and type constraints: op attrs, call attrs with defaults,
function attrs, has_type / has_dtype / has_shape on inferred types."""
from __future__ import annotations

import pytest

from bmlib_relax import relay
from bmlib_relax.relay import ast
from bmlib_relax.relay.dataflow_pattern import (
    AttrPattern, DataTypePattern, ShapePattern, TypePattern, has_attr, has_dtype, has_shape,
    has_type, is_op, wildcard,
)

K_ELEMWISE, K_BROADCAST = 0, 1


def test_constraint_nodes_keep_relay_fields():
    ttype = relay.TensorType((10, 10), "float32")
    assert isinstance(has_type(ttype), TypePattern) and has_type(ttype).type == ttype
    assert isinstance(has_dtype("float16"), DataTypePattern)
    assert has_dtype("float16").dtype == "float16"
    assert isinstance(has_shape([10, 10]), ShapePattern) and has_shape([10, 10]).shape == (10, 10)
    op = is_op("add").has_attr({"TOpPattern": K_ELEMWISE})
    assert isinstance(op, AttrPattern) and op.attrs["TOpPattern"] == K_ELEMWISE


def test_op_attributes():
    x, y = relay.var("x"), relay.var("y")
    assert is_op("add").has_attr({"TOpPattern": K_BROADCAST})(wildcard(), wildcard()).match(x + y)
    dense = is_op("nn.dense").has_attr({"TOpPattern": K_ELEMWISE})(wildcard(), wildcard())
    assert not dense.match(relay.nn.dense(x, y))
    elemwise = wildcard().has_attr({"TOpPattern": K_ELEMWISE})(wildcard())
    assert elemwise.match(relay.nn.relu(x)) and elemwise.match(relay.tanh(x))
    assert not elemwise.match(relay.nn.softmax(x))
    assert not is_op("add").has_attr({"NoSuchOpAttr": 1})(wildcard(), wildcard()).match(x + y)


def test_call_attributes_fall_back_to_relay_defaults():
    x, y = relay.var("x"), relay.var("y")
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    assert conv.has_attr({"data_layout": "NCHW"}).match(relay.nn.conv2d(x, y))
    assert not conv.has_attr({"data_layout": "NHWC"}).match(relay.nn.conv2d(x, y))
    assert not conv.has_attr({"RandomAttr": "NCHW"}).match(relay.nn.conv2d(x, y))
    assert conv.has_attr({"kernel_size": [3, 3]}).match(relay.nn.conv2d(x, y, kernel_size=[3, 3]))
    assert not conv.has_attr({"kernel_size": [3, 3]}).match(
        relay.nn.conv2d(x, y, kernel_size=[2, 1]))
    assert is_op("cast")(wildcard()).has_attr({"dtype": "float32"}).match(relay.cast(x, "float32"))
    # The defaults also answer Relay-style attribute reads in check functions.
    call = relay.nn.conv2d(x, y)
    assert call.attrs.data_layout == "NCHW" and "data_layout" not in call.attrs
    with pytest.raises(AttributeError):
        call.attrs.no_such_attr


def test_attributes_of_non_op_calls_and_functions():
    a, b = relay.var("a"), relay.var("b")
    has_call_attr = wildcard()(wildcard()).has_attr({"call_attr": "attr"})
    assert has_call_attr.match(ast.Call(a, [b], attrs={"call_attr": "attr"}))
    assert not has_call_attr.match(ast.Call(a, [b]))
    assert not has_call_attr.match(ast.Call(a, [b], attrs={"wrong": "attr"}))
    assert not has_call_attr.match(ast.Call(a, [b], attrs={"call_attr": "wrong"}))
    anything = wildcard()(wildcard()).has_attr({})
    assert anything.match(ast.Call(a, [b])) and anything.match(ast.Call(a, [b], attrs={"k": 1}))

    composite = has_attr({"Composite": "add"})
    x, y = relay.var("x"), relay.var("y")
    assert composite.match(relay.Function([x, y], x + y, attrs={"Composite": "add"}))
    assert not composite.match(relay.Function([x, y], x + y, attrs={"RandomTest": "add"}))
    assert not composite.match(relay.Function([x, y], x + y, attrs={"Composite": "conv_bias"}))
    assert not composite.match(x)


def test_types_of_variables():
    f32 = relay.var("x", shape=(10, 10), dtype="float32")
    i32 = relay.var("x", shape=(10, 10), dtype="int32")
    ttype = relay.TensorType((10, 10), "float32")
    assert has_type(ttype).match(f32) and not has_type(ttype).match(i32)
    assert has_dtype("float32").match(f32) and not has_dtype("float32").match(i32)
    assert has_shape((10, 10)).match(f32) and not has_shape((10, 5)).match(f32)


def test_types_of_calls_are_inferred():
    x = relay.var("x", shape=(1, 3, 12, 12))
    w = relay.var("w", shape=(4, 3, 3, 3))
    conv = relay.nn.conv2d(x, w)
    out = relay.nn.relu(conv)
    assert is_op("nn.relu")(wildcard()).has_shape([1, 4, 10, 10]).match(out)
    assert not is_op("nn.relu")(wildcard()).has_shape([1, 3, 10, 10]).match(out)
    pattern = is_op("nn.relu")(has_type(relay.TensorType((1, 4, 10, 10), "float32")))
    assert pattern.match(out)
    assert not is_op("nn.relu")(has_dtype("float16")).match(out)
    assert conv.checked_type == relay.TensorType((1, 4, 10, 10), "float32")


def test_untyped_input_reports_the_variable():
    from bmlib_relax.errors import BmlibError

    y = relay.var("y")
    with pytest.raises(BmlibError, match="y"):
        has_dtype("float32").match(y + y)


def test_shapes_compare_structurally_with_tvm_dims():
    from tvm.script import tirx as T

    from bmlib_relax.relay.analysis import structural_equal

    shape = [T.int32(10), T.int32(10)]
    pattern = has_shape(shape)
    assert structural_equal(pattern.shape, shape) and structural_equal(pattern.shape, [10, 10])
    assert not structural_equal(pattern.shape, [10, 5])
    assert pattern.match(relay.var("x", shape=(10, 10)))


def test_parsed_calls_use_text_format_defaults():
    # The Python API's leaky_relu alpha (0.01) is recorded by the builder; a parsed call
    # without alpha has the text format's (C++) default 0.25, as in Relay.
    mod = relay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) '
                      '{ nn.leaky_relu(%x) }')
    parsed = mod["main"].body
    leaky = is_op("nn.leaky_relu")(wildcard())
    assert leaky.has_attr({"alpha": 0.25}).match(parsed)
    assert leaky.has_attr({"alpha": 0.01}).match(relay.nn.leaky_relu(relay.var("x")))
    assert not leaky.has_attr({"alpha": 0.01}).match(parsed)
