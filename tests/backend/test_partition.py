"""Partitioning: host fallback, user composites with Relax and legacy checks, merged partitions."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm.relax.dpl import is_op as relax_is_op, wildcard as relax_wildcard

import bmlib_relax
from bmlib_relax import CodegenError, BmlibError, partition_for_bmlib
from bmlib_relax.backend.partition import check_partition_templates
from bmlib_relax.recipe import recipe_tensor
from bmlib_relax.relay.dataflow_pattern import is_op, is_tuple_get_item, wildcard

from conftest import offloaded_partitions, run_plain
from helpers import make_module, run_offloaded

R = relax.op

HOST_OPS_RELAY = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(4, 5), float32], %w: Tensor[(8, 5), float32]) {
  %0 = nn.dense(%x, %w, units=8);
  %1 = nn.relu(%0);
  %2 = argmax(%1, axis=[1]);
  %3 = take(%1, %2, axis=0);
  %4 = cumsum(%3, axis=1);
  nn.softmax(%4)
}
"""

# Two conv -> batch_norm -> relu chains; the second one is depthwise (groups=8).
CONV_CHAINS_RELAY = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w1: Tensor[(8, 8, 3, 3), float32],
          %w2: Tensor[(8, 1, 3, 3), float32], %g: Tensor[(8), float32], %b: Tensor[(8), float32],
          %m: Tensor[(8), float32], %v: Tensor[(8), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v);
  %2 = nn.relu(%1.0);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1, 1, 1], groups=8);
  %4 = nn.batch_norm(%3, %g, %b, %m, %v);
  nn.relu(%4.0)
}
"""
CONV_SHAPES = {"w1": (8, 8, 3, 3), "w2": (8, 1, 3, 3), "g": (8,), "b": (8,), "m": (8,),
               "v": (8,)}


def _params(shapes):
    params = {name: recipe_tensor(name, shape) for name, shape in shapes.items()}
    if "v" in params:  # a batch_norm variance: positive, as trained (the recipe knows
        params["v"] = abs(params["v"]) + 0.5  # variances by name: moving_var, _var)
    return params


def _reference(text, params, inputs):
    imported = bmlib_relax.import_relay(text, params)
    names = [p.name for p in imported["main"].params]
    return run_plain(imported, [inputs[n] for n in names])


def test_ops_without_template_stay_on_host():
    params = _params({"w": (8, 5)})
    model = bmlib_relax.compile(HOST_OPS_RELAY, params)
    report = model.report.to_dict()
    assert offloaded_partitions(model.relax_module) and model.report.num_offloaded > 0
    assert "relax.cumsum" in report["ops_host"]  # no template
    assert "relax.argmax" in report["ops_offloaded"]
    assert "relax.take" in report["ops_offloaded"]  # indices are int32: a selection op
    assert "relax.matmul" in report["ops_offloaded"]
    assert "relax.nn.softmax" in report["ops_offloaded"]
    x = recipe_tensor("x", (4, 5), role="input")
    np.testing.assert_allclose(model(x=x), _reference(HOST_OPS_RELAY, params, {"x": x}),
                               rtol=1e-5, atol=1e-5)


def _compile_conv_chains(patterns):
    params = _params(CONV_SHAPES)
    model = bmlib_relax.compile(CONV_CHAINS_RELAY, params, patterns=patterns)
    x = recipe_tensor("x", (1, 8, 6, 6), role="input")
    np.testing.assert_allclose(model(x=x), _reference(CONV_CHAINS_RELAY, params, {"x": x}),
                               rtol=1e-5, atol=1e-5)
    return model.report.to_dict()


def test_relax_check_rejects_grouped_conv():
    conv = relax_is_op("relax.nn.conv2d")(relax_wildcard(), relax_wildcard())

    def dense_conv_only(context):
        # The user's backend has no grouped kernel.
        return int(context.annotated_expr["conv"].attrs.groups) == 1

    report = _compile_conv_chains([("bmlib.my_conv", conv, {"conv": conv}, dense_conv_only)])
    assert [p["composites"] for p in report["partitions"]] == [["bmlib.my_conv"]]
    assert report["ops_host"]["relax.nn.conv2d"] == 1
    assert report["ops_offloaded"] == {"relax.nn.conv2d": 1}


def test_legacy_check_sees_relay_view():
    """A Relay-era check walks Relay names and attributes through the matched root."""
    pattern = is_op("nn.relu")(is_tuple_get_item(is_op("nn.batch_norm")(
        is_op("nn.conv2d")(wildcard(), wildcard()), wildcard(), wildcard(), wildcard(),
        wildcard()), 0))
    seen = []

    def check(call):
        seen.append((call.op.name, call.args[0].tuple_value.op.name,
                     call.args[0].tuple_value.args[0].attrs.kernel_size))
        return call.args[0].tuple_value.args[0].attrs.groups == 1

    report = _compile_conv_chains([("bmlib.conv_bn_relu", pattern, check)])
    assert ("nn.relu", "nn.batch_norm", (3, 3)) in seen and len(seen) == 2
    (part,) = report["partitions"]
    assert part["composites"] == ["bmlib.conv_bn_relu"]
    assert report["ops_host"] == {"relax.nn.conv2d": 1, "relax.nn.batch_norm": 1,
                                  "relax.nn.relu": 1}


def test_legacy_has_attr_direct_and_deferred():
    """``groups`` is a Relax attribute (DPL has_attr); ``channels`` only exists in Relay."""
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    for attrs, offloaded in (({"groups": 8}, 1), ({"groups": 3}, 0),
                             ({"channels": 8, "kernel_size": [3, 3]}, 2),
                             ({"channels": 4}, 0)):
        report = _compile_conv_chains([("bmlib.conv", conv.has_attr(attrs))])
        assert report["ops_offloaded"].get("relax.nn.conv2d", 0) == offloaded, attrs


MLP_RELAY = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %w: Tensor[(6, 12), float32], %b: Tensor[(6), float32],
          %k: Tensor[(2, 5, 4), float32]) {
  %0 = nn.batch_flatten(%x);
  %1 = nn.dense(%0, %w, units=6);
  %2 = nn.bias_add(%1, %b);
  %3 = nn.batch_matmul(%x, %k, transpose_b=True);
  %4 = transpose(%3, axes=[0, 2, 1]);
  (%2, %4)
}
"""


def test_legacy_patterns_match_import_forms():
    """nn.dense / nn.bias_add / nn.batch_matmul / transpose / batch_flatten in Relay terms."""
    views = {}

    def record(key):
        def check(call):
            views[key] = call
            return True

        return check

    patterns = [
        ("bmlib.flatten", is_op("nn.batch_flatten")(wildcard()), record("flatten")),
        ("bmlib.dense_bias", is_op("nn.bias_add")(is_op("nn.dense")(wildcard(), wildcard()),
                                                  wildcard()), record("dense")),
        ("bmlib.bmm_t", is_op("transpose")(is_op("nn.batch_matmul")(wildcard(), wildcard())),
         record("bmm")),
    ]
    params = _params({"w": (6, 12), "b": (6,), "k": (2, 5, 4)})
    model = bmlib_relax.compile(MLP_RELAY, params, patterns=patterns)
    assert model.report.to_dict()["ops_host"] == {}
    dense = views["dense"]
    assert (dense.op.name, dense.attrs.axis, dense.args[0].op.name) == ("nn.bias_add", 1,
                                                                        "nn.dense")
    assert dense.args[0].attrs.units == 6 and dense.args[1].checked_type.shape == (6,)
    assert views["flatten"].op.name == "nn.batch_flatten"
    bmm = views["bmm"]
    assert bmm.op.name == "transpose" and bmm.attrs.axes == (0, 2, 1)
    assert bmm.args[0].op.name == "nn.batch_matmul" and bmm.args[0].attrs.transpose_b is True
    x = recipe_tensor("x", (2, 3, 4), role="input")
    for got, want in zip(model(x=x), _reference(MLP_RELAY, params, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pattern_with_template_less_op_is_rejected_before_partitioning():
    pattern = relax_is_op("relax.cumsum")(relax_wildcard())
    with pytest.raises(CodegenError, match=r"'bmlib.cumsum' matches relax.cumsum, which has no"):
        partition_for_bmlib(tvm_module_with_cumsum(), patterns=[("bmlib.cumsum", pattern)])
    legacy = is_op("bitwise_not")(wildcard())
    with pytest.raises(CodegenError, match=r"relax.bitwise_not"):
        partition_for_bmlib(tvm_module_with_cumsum(), patterns=[("bmlib.bitwise_not", legacy)])


def test_composite_with_template_less_op_is_named():
    """Composites made outside the pattern check (e.g. by hand) are checked after fusion."""
    mod = tvm_module_with_cumsum()
    pattern = relax_is_op("relax.cumsum")(relax_wildcard())
    fused = relax.transform.FuseOpsByPattern([("bmlib.cumsum", pattern, {}, None)],
                                             bind_constants=False, annotate_codegen=True)(mod)
    with pytest.raises(CodegenError, match=r"composite 'bmlib.cumsum' contains relax.cumsum"):
        check_partition_templates(fused)


def test_relax_pattern_names_need_the_bmlib_prefix():
    with pytest.raises(BmlibError, match=r"'cutlass.relu'.*start with 'bmlib.'"):
        partition_for_bmlib(tvm_module_with_cumsum(),
                            patterns=[("cutlass.relu", relax_is_op("relax.nn.relu")(
                                relax_wildcard()))])


def test_legacy_table_of_another_backend_is_offloaded_under_its_names():
    # A Relay-era table written for cutlass/dnnl/tensorrt: its composites go to bmlib.
    mod = partition_for_bmlib(tvm_module_with_cumsum(),
                              patterns=[("cutlass.relu", is_op("nn.relu")(wildcard()))])
    assert offloaded_partitions(mod)
    composites = [str(f.attrs["Composite"]) for f in _inner_functions(mod)]
    assert composites == ["cutlass.relu"]


def _inner_functions(mod):
    found = []
    for func in mod.functions.values():
        relax.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(
            e, relax.Function) and e.attrs is not None and "Composite" in e.attrs else None)
    return found


def tvm_module_with_cumsum():
    mod, _ = make_module(lambda x: R.cumsum(R.nn.relu(x), axis=1), [(4, 5)])
    return mod


def test_merged_partition_with_tuple_output_and_shared_input():
    """Several composites in one partition: shared input, intermediates, two outputs."""

    def build(x, w):
        h = R.nn.relu(R.matmul(x, R.permute_dims(w, [1, 0])))
        parts = R.split(h, 2, axis=1)
        return relax.Tuple([R.nn.softmax(relax.TupleGetItem(parts, 0)),
                            R.add(relax.TupleGetItem(parts, 1), x)])

    mod, arrays = make_module(build, [(4, 8)], [(16, 8)])
    partitioned = partition_for_bmlib(mod, merge=True)
    (name,) = offloaded_partitions(partitioned)
    out, records = run_offloaded(partitioned, arrays)
    record = records[name]
    assert len(record.composites) >= 3
    assert record.num_args == record.num_params + 2
    for got, want in zip(out, run_plain(mod, arrays)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
