"""DFPattern edges where Relay v0.19 was strict: typed attribute comparison, partial and
dynamic shapes, op names Relay did not register, ops without a Relax form, and the
``TOpPattern`` values of v0.19's op registrations.

Expected values come from v0.19's sources (cited per case), not from this code.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.backend.legacy_patterns import PatternTranslationError
from bmlib_relax.backend.partition import resolve_patterns
from bmlib_relax.errors import BmlibError
from bmlib_relax.relay.dataflow_pattern import (
    has_shape, has_type, is_op, is_tuple_get_item, wildcard,
)

RNG = np.random.default_rng(11)
K_ELEMWISE, K_BROADCAST, K_INJECTIVE, K_COMM_REDUCE, K_OUT_EWISE, K_OPAQUE = 0, 1, 2, 3, 4, 8


def composites(model) -> list[str]:
    return sorted(c for p in model.report.to_dict()["partitions"] for c in p["composites"])


def relu_module(shape):
    x = relay.var("x", shape=shape)
    return relay.IRModule.from_expr(relay.Function([x], relay.nn.relu(x)))


def compile_checked(mod, params, entry, inputs, reference):
    """Compile with one pattern entry and compare with the numpy reference."""
    model = bmlib_relax.compile(mod, params, patterns=[entry])
    np.testing.assert_allclose(model(*inputs), reference(*inputs), rtol=1e-5, atol=1e-5)
    return model


def relu_ref(x):
    return np.maximum(x, 0)


# --------------------------------------------------------------------------- A/D: types, shapes
@pytest.mark.parametrize("dims", [(relay.Any(), 3), (7, relay.Any()), (relay.Any(),) * 3,
                                  (relay.Any(), 5), (2, relay.Any())])
def test_has_type_with_a_run_time_dim_never_matches_a_static_tensor(dims):
    # v0.19 TypePattern: StructuralEqual(type, checked_type); ? equals only ?.
    pattern = is_op("nn.relu")(wildcard()).has_type(relay.TensorType(dims, "float32"))
    x = RNG.standard_normal((2, 5)).astype("float32")
    model = compile_checked(relu_module((2, 5)), {}, ("bmlib.relu", pattern), [x], relu_ref)
    assert composites(model) == []
    assert not pattern.match(relay.nn.relu(relay.var("x", shape=(2, 5))))


def test_has_type_with_a_run_time_dim_matches_the_same_dynamic_tensor():
    mod = relu_module((relay.Any(), 3))
    x = RNG.standard_normal((4, 3)).astype("float32")
    same = is_op("nn.relu")(wildcard()).has_type(relay.TensorType((relay.Any(), 3), "float32"))
    assert composites(compile_checked(mod, {}, ("bmlib.relu", same), [x], relu_ref)) == \
        ["bmlib.relu"]
    for dims in [(4, 3), (relay.Any(), 4), (relay.Any(), 3, 1), (relay.Any(), relay.Any())]:
        other = is_op("nn.relu")(wildcard()).has_type(relay.TensorType(dims, "float32"))
        assert composites(compile_checked(mod, {}, ("bmlib.relu", other), [x], relu_ref)) == []
    wrong_dtype = is_op("nn.relu")(wildcard()).has_type(
        relay.TensorType((relay.Any(), 3), "float16"))
    assert composites(compile_checked(mod, {}, ("bmlib.relu", wrong_dtype), [x], relu_ref)) == []


def test_has_shape_with_run_time_dims_in_compile():
    # v0.19 ShapePattern held Array<PrimExpr> (Any and vars allowed), compared structurally.
    dynamic = relu_module((relay.Any(), 3))
    x = RNG.standard_normal((4, 3)).astype("float32")
    any3 = is_op("nn.relu")(wildcard()).has_shape([relay.Any(), 3])
    assert composites(compile_checked(dynamic, {}, ("bmlib.relu", any3), [x], relu_ref)) == \
        ["bmlib.relu"]
    any4 = is_op("nn.relu")(wildcard()).has_shape([relay.Any(), 4])
    assert composites(compile_checked(dynamic, {}, ("bmlib.relu", any4), [x], relu_ref)) == []
    static = relu_module((2, 3))
    x2 = RNG.standard_normal((2, 3)).astype("float32")
    assert composites(compile_checked(static, {}, ("bmlib.relu", any3), [x2], relu_ref)) == []


def test_has_shape_with_a_symbolic_dim_in_compile():
    n = te.var("n")
    mod = relu_module((n, 3))
    x = RNG.standard_normal((5, 3)).astype("float32")
    same = is_op("nn.relu")(wildcard()).has_shape([n, 3])
    assert composites(compile_checked(mod, {}, ("bmlib.relu", same), [x], relu_ref)) == \
        ["bmlib.relu"]
    other = is_op("nn.relu")(wildcard()).has_shape([te.var("m"), 3])
    assert composites(compile_checked(mod, {}, ("bmlib.relu", other), [x], relu_ref)) == []


def test_has_shape_any_on_the_relay_ast():
    pattern = has_shape([relay.Any(), 3])
    assert pattern.match(relay.var("x", shape=(relay.Any(), 3)))
    assert not pattern.match(relay.var("x", shape=(2, 3)))
    assert not has_type(relay.TensorType((relay.Any(), 3), "float32")).match(
        relay.var("x", shape=(2, 3)))


# --------------------------------------------------------------------------- B/C: attributes
CONV = is_op("nn.conv2d")(wildcard(), wildcard())


def conv_call():
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    return relay.nn.conv2d(x, w, kernel_size=(3, 3), strides=(1, 1))


@pytest.mark.parametrize("attrs, matches", [
    ({"groups": 1}, True), ({"groups": "1"}, False), ({"groups": 1.0}, False),
    ({"strides": [1, 1]}, True), ({"strides": [1.0, 1.0]}, False),
    ({"strides": ["1", "1"]}, False),
    ({"strides": 1}, False), ({"strides": [1, 1, 1]}, False),
    ({"data_layout": "NCHW"}, True), ({"data_layout": 0}, False),
])
def test_call_attributes_compare_by_the_attribute_type(attrs, matches):
    # v0.19 MatchRetValue: an int attribute equals only an int, a string only a string,
    # an array element-wise under the same rules.
    assert CONV.has_attr(attrs).match(conv_call()) is matches


def test_float_and_bool_attributes():
    x = relay.var("x", shape=(1, 3, 8, 8))
    softmax = is_op("nn.softmax")(wildcard())
    assert softmax.has_attr({"axis": 1}).match(relay.nn.softmax(x, axis=1))
    assert not softmax.has_attr({"axis": "1"}).match(relay.nn.softmax(x, axis=1))
    leaky = is_op("nn.leaky_relu")(wildcard())
    assert leaky.has_attr({"alpha": 0.1}).match(relay.nn.leaky_relu(x, alpha=0.1))
    # a float attribute equals a float exactly, and never an int or a string
    assert not leaky.has_attr({"alpha": 0.1 + 1e-9}).match(relay.nn.leaky_relu(x, alpha=0.1))
    assert not leaky.has_attr({"alpha": "0.1"}).match(relay.nn.leaky_relu(x, alpha=0.1))
    # LeakyReluAttrs.alpha is a double: alpha=0 was stored as 0.0, an int pattern misses it
    assert leaky.has_attr({"alpha": 0.0}).match(relay.nn.leaky_relu(x, alpha=0))
    assert not leaky.has_attr({"alpha": 0}).match(relay.nn.leaky_relu(x, alpha=0))
    # a bool field was read as an int (reflection's AttrGetter), so True and 1 both match
    total = is_op("sum")(wildcard())
    assert total.has_attr({"keepdims": True}).match(relay.sum(x, axis=1, keepdims=True))
    assert total.has_attr({"keepdims": 1}).match(relay.sum(x, axis=1, keepdims=True))
    assert not total.has_attr({"keepdims": "True"}).match(relay.sum(x, axis=1, keepdims=True))
    # a DataType attribute is compared with a string pattern
    cast = is_op("cast")(wildcard())
    assert cast.has_attr({"dtype": "float16"}).match(relay.cast(x, "float16"))
    assert not cast.has_attr({"dtype": "float32"}).match(relay.cast(x, "float16"))


def test_cast_dtype_attribute_matches_in_compile():
    x = relay.var("x", shape=(2, 3, 4))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.cast(x, "float16")))
    data = RNG.standard_normal((2, 3, 4)).astype("float32")
    entry = ("bmlib.cast", is_op("cast")(wildcard()).has_attr({"dtype": "float16"}))
    model = compile_checked(mod, {}, entry, [data], lambda v: v.astype("float16"))
    assert composites(model) == ["bmlib.cast"]
    other = ("bmlib.cast", is_op("cast")(wildcard()).has_attr({"dtype": "int32"}))
    model = compile_checked(mod, {}, other, [data], lambda v: v.astype("float16"))
    assert composites(model) == []


def conv_module():
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    body = relay.nn.conv2d(x, w, kernel_size=(3, 3), padding=(1, 1))
    return relay.IRModule.from_expr(relay.Function([x, w], body))


def conv_ref(x, w=None):
    w = CONV_W if w is None else w
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 8, 8), "float32")
    for i in range(8):
        for j in range(8):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", padded[:, :, i:i + 3, j:j + 3], w)
    return out


CONV_W = RNG.standard_normal((4, 3, 3, 3)).astype("float32")


@pytest.mark.parametrize("attrs, offloaded", [
    ({"groups": 1}, True), ({"groups": "1"}, False), ({"groups": 1.0}, False),
    ({"padding": [1, 1, 1, 1]}, True), ({"padding": ["1", "1", "1", "1"]}, False),
    ({"kernel_size": [3, 3]}, True), ({"kernel_size": [3.0, 3.0]}, False),
])
def test_typed_attributes_in_compile(attrs, offloaded):
    x = RNG.standard_normal((1, 3, 8, 8)).astype("float32")
    model = compile_checked(conv_module(), {"w": CONV_W},
                            ("bmlib.conv", CONV.has_attr(attrs)), [x], conv_ref)
    assert composites(model) == (["bmlib.conv"] if offloaded else [])


def test_float_attributes_in_compile_compare_exactly():
    x = relay.var("x", shape=(2, 8))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.clip(x, 0.0, 6.0)))
    data = (RNG.standard_normal((2, 8)) * 5).astype("float32")
    ref = lambda v: np.clip(v, 0.0, 6.0)  # noqa: E731
    clip = is_op("clip")(wildcard())
    exact = compile_checked(mod, {}, ("bmlib.clip", clip.has_attr({"a_max": 6.0})), [data], ref)
    assert composites(exact) == ["bmlib.clip"]
    for value in (6.0000001, 6, "6.0"):
        near = compile_checked(mod, {}, ("bmlib.clip", clip.has_attr({"a_max": value})),
                               [data], ref)
        assert composites(near) == []


# --------------------------------------------------------------------------- E: no Relax form
@pytest.mark.parametrize("op, arity", [
    ("nn.global_max_pool2d", 1), ("nn.upsampling", 1), ("copy", 1), ("nn.lrn", 1),
    ("fast_exp", 1), ("qnn.conv2d", 6),
])
def test_ops_without_a_relax_form(op, arity):
    pattern = is_op(op)(*[wildcard()] * arity)
    mod = relu_module((1, 4, 8, 8))
    with pytest.raises(PatternTranslationError) as info:
        bmlib_relax.compile(mod, {}, patterns=[("bmlib.p", pattern)])
    assert "bmlib.p" in str(info.value) and op in str(info.value)
    # a table written for another backend: the entry is left out, the rest goes on
    skipped: list = []
    relu = ("dnnl.relu", is_op("nn.relu")(wildcard()))
    resolved = resolve_patterns([("dnnl.p", pattern), relu], skipped)
    assert [name for name, _ in skipped] == ["dnnl.p"] and op in skipped[0][1]
    assert [entry[0] for entry in resolved] == ["dnnl.relu"]


# --------------------------------------------------------------------------- F: unknown op names
@pytest.mark.parametrize("name", ["nn.conv2D", "nn.Relu", "relu", "relax.nn.relu", ""])
def test_is_op_refuses_an_op_relay_did_not_register(name):
    # v0.19: is_op -> relay.op.get -> Op::Get: "Operator nn.conv2D is not registered".
    with pytest.raises(BmlibError, match="is not registered"):
        is_op(name)


@pytest.mark.parametrize("name", ["nn.conv2d", "nn.layer_norm", "qnn.conv2d", "vision.roi_align",
                                  "annotation.compiler_begin", "nn.adaptive_max_pool2d",
                                  "dyn.reshape", "nn.contrib_dense_pack"])
def test_is_op_accepts_relay_ops(name):
    assert is_op(name).expr.name == name


@pytest.mark.parametrize("name", ["nn.conv2D", "nn.Relu", "relax.nn.relu", ""])
def test_relay_op_get_refuses_an_op_relay_did_not_register(name):
    # v0.19's relay.op.get was Op::Get itself: a Call built on a misspelled op never ran.
    with pytest.raises(BmlibError, match=r"relay\.op\.get\(.*is not registered"):
        relay.op.get(name)
    assert relay.op.get("nn.conv2d").name == "nn.conv2d"


def test_unknown_op_in_a_table_entry():
    with pytest.raises(BmlibError, match="nn.conv2D"):
        is_op("nn.relu")(is_op("nn.conv2D")(wildcard(), wildcard()))


# --------------------------------------------------------------------------- G: TOpPattern
def _x():
    return relay.var("x", shape=(1, 3, 4, 4))


def _v3(name):
    return relay.var(name, shape=(3,))


TOPATTERN_CASES = [
    # (call, v0.19 TOpPattern, where v0.19 registered it)
    (lambda: relay.nn.softmax(_x()), K_OUT_EWISE),            # nn/nn.cc kOutEWiseFusable
    (lambda: relay.nn.log_softmax(_x()), K_OUT_EWISE),        # nn/nn.cc
    (lambda: relay.nn.batch_norm(_x(), *[_v3(n) for n in "gbmv"])[0].tuple_value,
     K_OUT_EWISE),                                            # nn/nn.cc
    (lambda: relay.expand_dims(_x(), 0), K_BROADCAST),        # tensor/transform.cc
    (lambda: relay.broadcast_to(_x(), (2, 3, 4, 4)), K_BROADCAST),
    (lambda: relay.tile(_x(), (1, 2, 1, 1)), K_BROADCAST),
    (lambda: relay.repeat(_x(), 2, 1), K_BROADCAST),
    (lambda: relay.cumsum(_x(), 1), K_OPAQUE),                # tensor/transform.cc kOpaque
    (lambda: relay.arange(relay.const(0.0), relay.const(4.0)), K_OPAQUE),
    (lambda: relay.zeros((2,), "float32"), K_ELEMWISE),       # op/_tensor.py ELEMWISE
    (lambda: relay.ones((2,), "float32"), K_ELEMWISE),
    (lambda: relay.full(relay.const(1.0), (2,)), K_ELEMWISE),  # tensor/transform.cc kElemWise
    (lambda: relay.nn.adaptive_max_pool2d(_x(), (1, 1)), K_OUT_EWISE),  # nn/pooling.cc
    (lambda: relay.nn.lrn(_x()), K_OPAQUE),                   # nn/nn.cc
    (lambda: relay.shape_of(_x()), K_OPAQUE),                 # tensor/unary.cc
    (lambda: relay.nn.relu(_x()), K_ELEMWISE),
    (lambda: relay.add(_x(), _x()), K_BROADCAST),
    (lambda: relay.sum(_x(), axis=1), K_COMM_REDUCE),
    (lambda: relay.nn.conv2d(_x(), relay.var("w", shape=(2, 3, 1, 1))), K_OUT_EWISE),
    (lambda: relay.reshape(_x(), (3, 16)), K_INJECTIVE),
    (lambda: relay.take(_x(), relay.const(np.array([0], "int32")), axis=1), K_INJECTIVE),
    (lambda: relay.nn.dropout(_x()).tuple_value, K_OPAQUE),
]


@pytest.mark.parametrize("make, kind", TOPATTERN_CASES)
def test_top_pattern_is_v019s(make, kind):
    call = make()
    matched = [k for k in (0, 1, 2, 3, 4, 7, 8)
               if is_op(call.op.name).has_attr({"TOpPattern": k})(None).match(call)]
    assert matched == [kind], call.op.name


def test_ops_v019_registered_no_top_pattern_for():
    # nn.cc registers no TOpPattern for layer_norm, instance_norm, group_norm, l2_normalize
    x = _x()
    for call in (relay.nn.layer_norm(x, _v3("g"), _v3("b"), axis=1),
                 relay.nn.instance_norm(x, _v3("g"), _v3("b")),
                 relay.nn.group_norm(x, _v3("g"), _v3("b"), num_groups=1),
                 relay.nn.l2_normalize(x, 1e-5)):
        assert not any(is_op(call.op.name).has_attr({"TOpPattern": k})(None).match(call)
                       for k in (0, 1, 2, 3, 4, 7, 8)), call.op.name


def test_top_pattern_through_a_wildcard_op():
    # the dominator example's filter: wildcard().has_attr({"TOpPattern": K_ELEMWISE})
    elemwise = wildcard().has_attr({"TOpPattern": K_ELEMWISE})(wildcard())
    x = _x()
    assert elemwise.match(relay.nn.relu(x))
    assert not elemwise.match(relay.nn.softmax(x)) and not elemwise.match(relay.cumsum(x, 1))
    broadcast = wildcard().has_attr({"TOpPattern": K_BROADCAST})(wildcard())
    assert broadcast.match(relay.expand_dims(x, 0))
    assert not is_tuple_get_item(wildcard()).match(x)


def test_broadcast_to_like_is_not_unified_as_a_binary_broadcast():
    # v0.19 marks broadcast_to_like kBroadcast, yet its operands do not broadcast against
    # each other: the importer keeps its own set of such ops (converter.py), so
    # broadcast_to_like(x: (1, 8), like: (?, 8)) broadcasts x's row to like's 5 (x's
    # static 1 is not a dim to unify with like's).
    from importer.helpers import check, relay_fn  # tests/ is on sys.path (conftest.py)

    text = relay_fn("%x: Tensor[(1, 8), float32], %y: Tensor[(?, 8), float32]",
                    "broadcast_to_like(%x, %y)")
    x = RNG.standard_normal((1, 8)).astype("float32")
    check(text, [x, np.zeros((5, 8), "float32")], np.broadcast_to(x, (5, 8)))


def test_an_unrecorded_default_reads_as_v019_recorded_it():
    # conv1d built without strides/padding: v0.19's builder stored strides=[1],
    # padding=[0, 0]; has_attr falls back to the same normalised defaults
    x = relay.var("x", shape=(1, 2, 8))
    w = relay.var("w", shape=(2, 2, 3))
    conv = relay.nn.conv1d(x, w)
    pattern = is_op("nn.conv1d")(wildcard(), wildcard())
    assert pattern.has_attr({"strides": [1]}).match(conv)
    assert pattern.has_attr({"padding": [0, 0]}).match(conv)
    assert not pattern.has_attr({"strides": 1}).match(conv)
