"""Legacy code sees the Relay calls it was written against (provenance from import)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax, topi

import bmlib_relax
from bmlib_relax.importer import RelayImporter
from bmlib_relax.importer.provenance import origin_of
from bmlib_relax.legacy.lowerings import register_legacy_lowering, unregister_legacy_lowering
from bmlib_relax.relay import ast, parse
from bmlib_relax.relay.dataflow_pattern import is_constant, is_op, wildcard

from conftest import offloaded_partitions

# conv2d with stride 2 and an explicit channel bias_add: on Relax the bias_add is an `add`
# of a reshaped vector, the conv attributes are Relax's.
MODEL = """
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %b: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b, axis=1);
  nn.relu(%1)
}
"""
NAME = "bmlib.conv2d_bias_add_relu"


def params():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
            "b": rng.standard_normal(4).astype("float32")}


def pattern():
    return is_op("nn.relu")(is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), is_constant()),
                                                  is_constant()))


def numpy_reference(x, w, b):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 4, 4), "float32")
    for i in range(4):
        for j in range(4):
            patch = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            out[0, :, i, j] = np.tensordot(w, patch[0], axes=([1, 2, 3], [0, 1, 2]))
    return np.maximum(out + b[None, :, None, None], 0)


def test_every_relax_call_knows_its_relay_call():
    mod = RelayImporter(parse(MODEL), params()).run()
    roots = {}
    for binding in mod["main"].body.blocks[0].bindings:
        origin = origin_of(binding.value)
        if origin is not None and origin.root:
            roots[binding.value.op.name] = origin.relay
    assert roots["relax.add"].op.name == "nn.bias_add"
    bias_add = roots["relax.add"]
    assert bias_add.attrs.axis == 1
    conv, bias = bias_add.args  # Relay's order, Relay's nodes
    assert conv.op.name == "nn.conv2d" and conv.attrs.strides == (2, 2)
    assert conv.attrs.data_layout == "NCHW" and conv.attrs.groups == 1  # Relay defaults
    assert conv.attrs.get_int_tuple("padding") == (1, 1, 1, 1)
    assert isinstance(bias, ast.Constant) and bias.data.shape == (4,)  # bound weight
    assert conv.checked_type.shape == (1, 4, 4, 4) and conv.checked_type.dtype == "float32"
    assert isinstance(conv.args[1], ast.Constant)
    assert conv.args[0].checked_type.shape == (1, 3, 8, 8)


@pytest.fixture
def lowering():
    yield lambda fn: register_legacy_lowering(NAME, fn, override=True)
    unregister_legacy_lowering(NAME)


def test_lower_map_lowering_gets_the_relay_call_and_its_attrs(lowering):
    """A Relay-era _LOWER_MAP lowering that asserts Relay op names and reads Relay
    attributes (bias_add.axis, conv2d.strides/padding) of the composite it gets."""
    seen = []

    def lower(call, inputs):
        assert call.op.name == "nn.relu"
        bias_add = call.args[0]
        assert bias_add.op.name == "nn.bias_add", bias_add.op.name
        conv = bias_add.args[0]
        assert conv.op.name == "nn.conv2d"
        seen.append((bias_add.attrs.axis, conv.attrs.strides, conv.attrs.padding,
                     conv.attrs.kernel_layout))
        data, weight, bias = inputs
        out = topi.nn.conv2d_nchw(data, weight, conv.attrs.strides, conv.attrs.padding,
                                  conv.attrs.dilation, out_dtype="float32")
        shape = [1] * len(out.shape)
        shape[bias_add.attrs.axis] = int(bias.shape[0])
        return topi.nn.relu(topi.add(out, topi.reshape(bias, shape)))

    lowering(lower)
    model = bmlib_relax.compile(MODEL, params(), patterns=[(NAME, pattern())])
    assert seen == [(1, (2, 2), (1, 1, 1, 1), "OIHW")]
    assert offloaded_partitions(model.relax_module)
    assert [p["composites"] for p in model.report.to_dict()["partitions"]] == [[NAME]]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    np.testing.assert_allclose(model(x=x), numpy_reference(x, **params()), rtol=1e-4, atol=1e-4)


def test_check_function_receives_the_relay_call():
    seen = []

    def check(call):
        bias_add = call.args[0]
        seen.append((call.op.name, bias_add.op.name, bias_add.attrs.axis,
                     type(bias_add.args[1]).__name__, bias_add.checked_type.shape,
                     [a.checked_type.dtype for a in bias_add.args[0].args]))
        return True

    model = bmlib_relax.compile(MODEL, params(), patterns=[(NAME, pattern(), check)])
    assert seen == [("nn.relu", "nn.bias_add", 1, "Constant", (1, 4, 4, 4),
                     ["float32", "float32"])]
    assert offloaded_partitions(model.relax_module)


def test_add_pattern_does_not_match_an_imported_bias_add():
    # Relay's is_op("add") never matched nn.bias_add, although both import as relax.add.
    add_only = [("bmlib.add", is_op("add")(wildcard(), wildcard()))]
    model = bmlib_relax.compile(MODEL, params(), patterns=add_only)
    assert not offloaded_partitions(model.relax_module)
    bias = [("bmlib.bias_add", is_op("nn.bias_add")(wildcard(), wildcard()))]
    model = bmlib_relax.compile(MODEL, params(), patterns=bias)
    assert offloaded_partitions(model.relax_module)
    assert [p["composites"] for p in model.report.to_dict()["partitions"]] == \
        [["bmlib.bias_add"]]


def test_a_check_that_raises_names_the_pattern_the_call_and_the_line():
    # dnnl.py's add_checker does dict(attrs)["channels"] on whatever args[0] is: on a call
    # without that attribute Relay's MergeComposite raised too.  Here it is a BmlibError
    # naming the pattern, the Relay call (with its source position) and the check's line.
    from bmlib_relax.backend.legacy_patterns import PatternCheckError

    def check(call):
        return dict(call.attrs)["channels"] > 1

    with pytest.raises(PatternCheckError, match=r"test_provenance.py:\d+: check of pattern "
                                                r"'dnnl.relu' raised KeyError: 'channels' "
                                                r"\(on nn.relu at <string>:\d+:\d+\)"):
        bmlib_relax.compile(MODEL, params(), patterns=[("dnnl.relu", pattern_relu(), check)])


def pattern_relu():
    return is_op("nn.relu")(wildcard())


def test_alternative_is_chosen_by_relay_op_names():
    # (bias_add | add)(conv, const) on a Relay `add` of a (4, 1, 1) constant: both branches
    # import as relax.add(conv, const), DPL would commit to the bias_add branch and the op
    # names would then reject the match; Relay took the `add` branch.  So must we.
    text = MODEL.replace("nn.bias_add(%0, %b, axis=1)", "add(%0, %c)").replace(
        "%b: Tensor[(4), float32]", "%c: Tensor[(4, 1, 1), float32]")
    weights = {"w": params()["w"], "c": params()["b"].reshape(4, 1, 1)}
    conv = is_op("nn.conv2d")(wildcard(), is_constant())
    pattern = (is_op("nn.bias_add") | is_op("add"))(conv, is_constant())
    model = bmlib_relax.compile(text, weights, patterns=[("cutlass.conv2d_bias", pattern)])
    assert offloaded_partitions(model.relax_module)
    assert model.report.to_dict()["ops_offloaded"] == {"relax.nn.conv2d": 1, "relax.add": 1}


def test_a_models_relay_views_live_with_it_and_are_freed_after():
    """The Relay views of an import hold the model's weights: a compiled model keeps its
    own, later imports push it out of the few kept for import_relay callers, and
    dropping the model frees them (a cache of the last 64 imports used to keep them)."""
    import gc
    import weakref

    from bmlib_relax.importer import provenance

    model = bmlib_relax.compile(parse(MODEL), params())
    (table,) = model.provenance_tables
    table_ref = weakref.ref(table)
    del table
    for _ in range(provenance._KEEP_RECENT + 1):  # push it out of the recent imports
        bmlib_relax.import_relay(parse(MODEL), params())
    gc.collect()
    calls = []
    for func in model.relax_module.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func, lambda e: calls.append(e) if isinstance(e, relax.Call) else None)
    assert any(origin_of(c) is not None for c in calls)  # still addressable
    del model, calls
    gc.collect()
    assert table_ref() is None


@pytest.mark.parametrize("blocked", [True, False])
def test_a_conv_the_backend_rewrites_keeps_its_relay_call(blocked):
    """The built-in table's rewrites (weight packing; activations on blocked NCHW{b}c)
    build a new conv call: it still knows the Relay conv it computes (a report or an
    error names that call's line)."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 8, 8), float32], %w1: Tensor[(32, 16, 3, 3), float32],
          %w2: Tensor[(32, 32, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, strides=[2, 2], padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  nn.conv2d(%1, %w2)
}"""
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((32, 16, 3, 3)).astype("float32"),
               "w2": rng.standard_normal((32, 32, 1, 1)).astype("float32")}
    model = bmlib_relax.compile(parse(text), weights, blocked_layout=blocked, num_threads=1)
    convs = []
    for func in model.relax_module.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: convs.append(e) if isinstance(
                e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d" else None)
    assert {str(c.attrs.kernel_layout) for c in convs} != {"OIHW"}  # rewritten: packed
    lines = sorted({str(origin_of(c).relay.span) for c in convs if origin_of(c) is not None})
    assert lines == ["<string>:4:8", "<string>:6:3"]
