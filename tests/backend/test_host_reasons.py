"""The report says why each op stayed on the host (text, JSON, markdown)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax.backend.host_reasons import (DTYPE, DYNAMIC, NO_TEMPLATE, REJECTED,
                                              TOO_LARGE, UNMATCHED, VIEW, host_reason)
from bmlib_relax.backend.partition import resolve_patterns
from bmlib_relax.relay.dataflow_pattern import is_op, wildcard

R = relax.op


def _reasons(model) -> dict:
    return {(h["op"], h["reason"]): h for h in model.report.to_dict()["host_ops"]}


def test_integer_ops_are_reported_as_dtype_not_as_unmatched():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), int32], %y: Tensor[(2, 8), float32]) {
  (add(%x, %x), nn.relu(%y))
}"""
    model = bmlib_relax.compile(text)
    reasons = _reasons(model)
    assert ("relax.add", DTYPE) in reasons
    assert "int32" in reasons[("relax.add", DTYPE)]["detail"]
    assert "dtype int32" in str(model.report)
    assert model.report.to_dict()["ops_offloaded"]  # the float relu still went to bmlib


def test_ops_without_template_and_unmatched_ops_are_told_apart():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32], %i: Tensor[(4, 6), int32]) {
  (bitwise_not(%i), nn.relu(%x))
}"""
    relu_only = [("bmlib.sigmoid_only", is_op("sigmoid")(wildcard()))]
    model = bmlib_relax.compile(text, patterns=relu_only)
    reasons = _reasons(model)
    assert reasons[("relax.bitwise_not", NO_TEMPLATE)]["count"] == 1
    assert reasons[("relax.nn.relu", UNMATCHED)]["count"] == 1


def test_a_pattern_whose_check_refuses_is_named():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32]) { nn.relu(%x) }"""
    table = [("bmlib.picky_relu", is_op("nn.relu")(wildcard()), lambda call: False)]
    model = bmlib_relax.compile(text, patterns=table)
    (reason,) = model.report.to_dict()["host_ops"]
    assert reason["reason"] == REJECTED and "bmlib.picky_relu" in reason["detail"]


def test_dynamic_shapes_are_a_reason_of_their_own():
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        call = bb.emit(R.flip(x, axis=1))  # an op whose template takes static shapes only
        bb.emit_func_output(call)
    func = bb.get()["main"]
    (binding,) = func.body.blocks[0].bindings
    reason = host_reason(binding.value, resolve_patterns(None), {})
    assert reason.reason == DYNAMIC and "n" in reason.detail


def test_markdown_report_lists_host_reasons(tmp_path):
    from bmlib_relax.convert import convert

    model = tmp_path / "m.relay"
    model.write_text("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), int32]) { add(%x, %x) }""")
    convert(str(model), str(tmp_path / "out"), quiet=True) if "quiet" in \
        convert.__code__.co_varnames else convert(str(model), str(tmp_path / "out"))
    text = (tmp_path / "out" / "report.md").read_text()
    assert "why it stayed on the host" in text and "int32" in text


def test_a_float_matmul_refused_is_not_said_to_match_a_quantized_composite():
    """Two different ``?`` reduction dims: no template takes the matmul (right), and the
    reason names the float pattern it was refused by, not ``bmlib.qnn_*`` (whose
    patterns fit any matmul's shape; their checks take integer tensors only)."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, ?), float32], %y: Tensor[(?, 8), float32]) {
  nn.matmul(%x, %y)
}"""
    model = bmlib_relax.compile(text)
    (reason,) = [h for h in model.report.to_dict()["host_ops"] if h["op"] == "relax.matmul"]
    assert reason["reason"] == REJECTED
    assert "qnn" not in reason["detail"] and "bmlib." in reason["detail"]


def test_a_tensor_past_int32_indexing_stays_on_the_host_with_its_reason():
    # 2**31 elements (each dim fits int32): the templates' int32 indices would wrap; a
    # tensor one row shorter is still offloaded. Only compiled, never run (8 GiB).
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(ROWS, 32768), float32]) { nn.relu(%x) }"""
    big = bmlib_relax.compile(text.replace("ROWS", "65536"), num_threads=1)
    (reason,) = big.report.to_dict()["host_ops"]
    assert reason["reason"] == TOO_LARGE and "2147483648 elements" in reason["detail"]
    fits = bmlib_relax.compile(text.replace("ROWS", "65535"), num_threads=1)
    assert not fits.report.to_dict()["host_ops"] and fits.report.to_dict()["ops_offloaded"]


def test_a_conv_past_int32_indexing_keeps_a_layout_the_host_can_build():
    """A conv whose output has 2**31 elements or more stays on the host; its weight is
    neither packed for a template nor blocked (TVM's lowering knows only OIHW/NCHW: it
    stopped with "CodeGenVM cannot emit this Relax operator").  Only compiled (the
    output would take 80 GiB)."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(64, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 33554432]);
  %1 = nn.relu(%0);
  sum(%1)
}"""
    weights = {"w": np.ones((64, 3, 3, 3), "float32")}
    model = bmlib_relax.compile(text, weights, num_threads=1)
    reasons = {h["op"]: h for h in model.report.to_dict()["host_ops"]}
    assert reasons["relax.nn.conv2d"]["reason"] == TOO_LARGE
    convs = []
    relax.analysis.post_order_visit(model.relax_module["main"], lambda e: convs.append(e) if (
        isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d") else None)
    (conv,) = convs
    assert (str(conv.attrs.kernel_layout), str(conv.attrs.data_layout)) == ("OIHW", "NCHW")


def _relax_with_empty(op_of_x, shape):
    """``main(x: shape, r: (4,)) -> (op_of_x(x), relu(r))`` as a Relax module."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    r = relax.Var("r", relax.TensorType((4,), "float32"))
    with bb.function("main", [x, r]):
        with bb.dataflow():
            out = bb.emit_output(relax.Tuple([bb.emit(op_of_x(x)), bb.emit(R.nn.relu(r))]))
        bb.emit_func_output(out)
    return bb.get()


WEIGHT = relax.const(np.ones((4, 3, 3, 3), "float32"))


@pytest.mark.parametrize("op_of_x, shape", [
    (lambda x: R.nn.softmax(x), (4, 0)),
    (lambda x: R.nn.log_softmax(x), (0, 5)),
    (lambda x: R.nn.conv2d(x, WEIGHT, padding=1), (0, 3, 8, 8)),
    (lambda x: R.nn.max_pool2d(x, pool_size=2), (2, 0, 6, 6)),
])
def test_a_relax_op_without_elements_stays_on_the_host_and_runs(op_of_x, shape):
    # a template's loop of extent 0 stopped TVM's build ("Failed to vectorize loop with
    # extent 0"); a conv whose weight was packed for bmlib and then left on the host
    # could not be lowered ("CodeGenVM cannot emit")
    model = bmlib_relax.compile(_relax_with_empty(op_of_x, shape))
    assert model.report.ops_offloaded == {"relax.nn.relu": 1}
    assert not model.report.ops_host  # computing nothing is no host op either
    empty, relu = model(np.zeros(shape, "float32"), np.array([-1, 0, 1, 2], "float32"))
    assert empty.size == 0
    np.testing.assert_array_equal(relu, [0, 0, 1, 2])


@pytest.mark.parametrize("merge", [False, True])
def test_standalone_views_stay_on_the_host_unless_merged(merge):
    """A reshape, squeeze or expand_dims that no larger composite takes in would be a
    partition copying the whole tensor; unmerged it is a view on the host instead."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = nn.relu(%x);
  %1 = reshape(%0, newshape=[6, 4]);
  %2 = expand_dims(sigmoid(%1), axis=0);
  %3 = squeeze(%2, axis=[0]);
  tanh(%3)
}"""
    model = bmlib_relax.compile(text, merge=merge)
    assert model.report.ops_offloaded.get("relax.nn.relu") == 1
    views = {"relax.reshape", "relax.expand_dims", "relax.squeeze"}
    if merge:
        assert not model.report.ops_host
    else:
        assert set(model.report.ops_host) == views
        assert {op for op, reason in _reasons(model)} == views
        assert {reason for op, reason in _reasons(model)} == {VIEW}
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")
    want = np.tanh(1 / (1 + np.exp(-np.maximum(x, 0).reshape(6, 4))))
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)


def test_topi_computes_the_importer_called_are_host_ops_named_by_their_relay_op():
    """``image.dilation2d`` / ``fast_exp`` become a ``call_tir`` of a TOPI compute: the
    report counted neither (a model of them said "0 on host")."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(3, 2, 2), float32]) {
  %0 = nn.relu(%x);
  %1 = image.dilation2d(%0, %w);
  fast_exp(%1)
}"""
    model = bmlib_relax.compile(text, {"w": np.ones((3, 2, 2), "float32")})
    assert model.report.ops_offloaded == {"relax.nn.relu": 1}
    assert model.report.ops_host == {"image.dilation2d": 1, "fast_exp": 1}
    reasons = _reasons(model)
    assert ("image.dilation2d", NO_TEMPLATE) in reasons and ("fast_exp", NO_TEMPLATE) in reasons
    assert "ops on host: fast_exp x1, image.dilation2d x1" in str(model.report)


def test_the_reasons_count_the_host_ops_the_report_counts():
    """A run check (``assert_op``, from the reshape's ``-1`` over a ``?`` row count) and
    an empty result (made ``zeros`` of its shape) are no ops of the model: the op
    counts skipped them, but the reasons listed them as ops without a bmlib template
    ("relax.assert_op: no bmlib template for this op")."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 6), float32]) {
  %0 = reshape(%x, newshape=[-1, 4]);
  (cumsum(%0, axis=1), strided_slice(%x, begin=[0, 0], end=[0, 6]), nn.relu(%x))
}"""
    model = bmlib_relax.compile(text)
    report = model.report
    assert report.to_dict()["ops_offloaded"]  # the relu
    per_op: dict = {}
    for reason, count in report.host_reasons.items():
        per_op[reason.op] = per_op.get(reason.op, 0) + count
    assert per_op == dict(report.ops_host) == {"relax.reshape": 1, "relax.cumsum": 1}
    assert {("relax.cumsum", NO_TEMPLATE), ("relax.reshape", VIEW)} == set(_reasons(model))
    x = np.arange(12, dtype="float32").reshape(2, 6)
    cumsum, empty, relu = model(x)
    np.testing.assert_array_equal(cumsum, np.cumsum(x.reshape(-1, 4), axis=1))
    assert empty.shape == (0, 6)
    np.testing.assert_array_equal(relu, x)
