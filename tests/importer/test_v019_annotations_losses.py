"""Annotation ops, losses and ``fixed_point_multiply_per_axis`` as TVM v0.19's Relay ran them.

Expectations are derived from v0.19's source, not from the importer:

* ``annotation.stop_fusion``, ``checkpoint``, ``cast_hint``, ``compiler_begin`` and
  ``compiler_end`` (src/relay/op/annotation/annotation.cc): ``IdentityRel`` and an
  ``FTVMCompute`` of ``topi::identity`` (checkpoint: one per tuple field), so a build
  returned the operand unchanged.  ``debug`` (src/relay/op/debug.cc) called a Python
  callback from the interpreter only; ``LowerTensorExpr`` did not lower it for a build.
* ``nn.nll_loss``: ``topi::nll_loss`` (include/tvm/topi/nn.h): ``T = -p[n, t, ...] *
  w[t]``, 0 where ``t == ignore_index``; "mean" is ``sum(T) / sum(W)`` with ``W = w[t]``
  (0 where ignored); "sum" ``sum(T)``; "none" ``T``.  NLLLossRel: predictions one rank
  above targets, 1-D weights of the class count, same floating dtype, int targets.
* ``nn.cross_entropy`` / ``_with_logits`` (python/tvm/relay/op/nn/_nn.py):
  ``-sum(log(x) * y) / N`` and ``-sum(x * y) / N``, ``N = x.shape[0]``; CrossEntropyRel:
  2-D operands of equal shape.
* ``fixed_point_multiply_per_axis`` (topi.fixed_point_multiply_per_axis, the legalization
  of ``tir.q_multiply_shift_per_axis`` in src/target/intrin_rule.cc): in int64, ``x <<
  lshift`` only when ``is_lshift_required``, times the multiplier, plus ``1 << (rshift +
  30)``, arithmetic shift right by ``rshift + 31``, cast to int32; the parameters are
  indexed by the data's indices at ``axes``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError, import_relay, relay
from bmlib_relax.relay import parse
from conftest import offloaded_partitions

from .helpers import check, conv_ref, import_text, rand, relay_fn, run_relay

RNG = np.random.default_rng(1907)


# ======================================================================== annotations
IDENTITY_CALLS = [
    "annotation.stop_fusion(%x)",
    "annotation.checkpoint(%x)",
    "annotation.cast_hint(%x, dtype=\"int8\")",
    "annotation.compiler_begin(%x, compiler=\"dnnl\")",
    "annotation.compiler_end(%x, compiler=\"dnnl\")",
]


@pytest.mark.parametrize("call", IDENTITY_CALLS)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_annotations_return_their_operand(call, dtype):
    x = (rand(2, 3, 4) * 100).astype(dtype)
    out = run_relay(relay_fn(f"%x: Tensor[(2, 3, 4), {dtype}]", call), x)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, x)


def test_checkpoint_of_a_tuple_returns_each_field():
    """v0.19's checkpoint compute maps ``topi::identity`` over every (tuple) input."""
    a, b = rand(2, 3), rand(4, seed=1)
    out = run_relay(relay_fn("%a: Tensor[(2, 3), float32], %b: Tensor[(4), float32]",
                             "%0 = annotation.checkpoint((%a, %b)); add(%0.0, 1f)"), a, b)
    np.testing.assert_array_equal(out, a + 1)


def _metadata(kind: str, fields: dict) -> str:
    """A #[metadata] section holding one ``relay.attrs.*`` node (as v0.19's SaveJSON)."""
    nodes = [{"type_key": ""},
             {"type_key": "Map", "keys": [kind], "data": [2]},
             {"type_key": "Array", "data": [3]},
             {"type_key": kind, "attrs": fields}]
    return "#[metadata]\n" + json.dumps({"root": 1, "nodes": nodes, "b64ndarrays": [],
                                         "attrs": {"tvm_version": "0.19.0"}}) + "\n"


@pytest.mark.parametrize("op, kind, fields", [
    ("annotation.cast_hint", "relay.attrs.CastHintAttrs", {"dtype": "int8"}),
    ("annotation.compiler_begin", "relay.attrs.CompilerAttrs", {"compiler": "dnnl"}),
    ("annotation.compiler_end", "relay.attrs.CompilerAttrs", {"compiler": "dnnl"}),
])
def test_annotation_attributes_from_the_metadata_section(op, kind, fields):
    """v0.19 printed these ops' attributes as ``meta[relay.attrs.*][0]`` (the op declares
    no attrs type, so PrintCallAttrs falls back to the metadata)."""
    x = rand(2, 5)
    text = relay_fn("%x: Tensor[(2, 5), float32]", f"{op}(%x, meta[{kind}][0])")
    out = run_relay(text + _metadata(kind, fields), x)
    np.testing.assert_array_equal(out, x)


CONV_STOP_RELU = ("%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(8, 4, 3, 3), float32]",
                  "%0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=8, "
                  "kernel_size=[3, 3]); %1 = {annotation}; nn.relu(%1)")


@pytest.mark.parametrize("annotation", [
    "annotation.stop_fusion(%0)",
    "annotation.checkpoint(%0)",
    "annotation.cast_hint(%0, dtype=\"int8\")",
    "annotation.compiler_end(annotation.compiler_begin(%0, compiler=\"bmlib\"), "
    "compiler=\"bmlib\")",
])
def test_ops_around_an_annotation_are_offloaded(annotation):
    """conv2d -> annotation -> relu: v0.19's stop_fusion kept the relu out of the conv's
    fused kernel; here the annotation is the identity and bmlib computes both ops."""
    params, body = CONV_STOP_RELU
    x, w = rand(1, 4, 8, 8), rand(8, 4, 3, 3, seed=3)
    model = bmlib_relax.compile(parse(relay_fn(params, body.format(annotation=annotation)),
                                      "annotated.relay"), {"w": w})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    report = model.report.to_dict()
    assert report["flops_offloaded"] == report["flops_total"] > 0, report["host_ops"]
    assert {"relax.nn.conv2d", "relax.nn.relu"} <= set(report["ops_offloaded"]), report
    assert not report["ops_host"], report["ops_host"]
    want = np.maximum(conv_ref(x, w, (1, 1), (1, 1), (1, 1), (1, 1)), 0)
    np.testing.assert_allclose(model(x=x), want, rtol=1e-5, atol=1e-5)


def test_vta_style_stop_fusion_between_int8_layers():
    """The VTA-quantized MobileNetV2 dump's pattern: requantize to int8, ``stop_fusion``,
    cast back up (annotation.stop_fusion between integer layers)."""
    params = "%x: Tensor[(1, 4, 3, 3), int32]"
    body = ("%0 = add(%x, 64); %1 = right_shift(%0, 7); %2 = clip(%1, a_min=-127f, "
            "a_max=127f); %3 = cast(%2, dtype=\"int8\"); %4 = annotation.stop_fusion(%3); "
            "cast(%4, dtype=\"int32\")")
    x = RNG.integers(-40000, 40000, size=(1, 4, 3, 3), dtype="int32")
    want = np.clip((x + 64) >> 7, -127, 127).astype("int8").astype("int32")
    check(relay_fn(params, body), [x], want, rtol=0, atol=0)


def test_debug_is_refused_with_the_reason():
    with pytest.raises(ConversionError, match=r"debug.*interpreter"):
        import_text(relay_fn("%x: Tensor[(2, 3), float32]", "debug(%x)"))


@pytest.mark.parametrize("op", ["annotation.stop_fusion", "annotation.cast_hint",
                                "annotation.compiler_begin", "annotation.compiler_end"])
def test_single_tensor_annotations_refuse_a_tuple(op):
    """Their v0.19 computes return ``identity(inputs[0])`` only: a tuple lost fields."""
    with pytest.raises(ConversionError, match=r"tuple"):
        import_text(relay_fn("%a: Tensor[(2, 3), float32]", f"{op}((%a, %a))"))


def test_checkpoint_of_nested_tuples_is_refused():
    with pytest.raises(ConversionError, match=r"tuple holding tuples"):
        import_text(relay_fn("%a: Tensor[(2, 3), float32]",
                             "annotation.checkpoint(((%a, %a), %a))"))


@pytest.mark.parametrize("call, pattern", [
    ("annotation.cast_hint(%x, dtype=\"int33x\")", r"dtype"),
    ("annotation.cast_hint(%x, dtyp=\"int8\")", r"dtyp"),
    ("annotation.compiler_begin(%x, compiler=3)", r"compiler"),
    ("annotation.checkpoint(%x, foo=1)", r"foo"),
])
def test_annotation_attribute_errors_are_named(call, pattern):
    with pytest.raises(ConversionError, match=pattern):
        import_text(relay_fn("%x: Tensor[(2, 3), float32]", call))


# ============================================================================= losses
def nll_loss_ref(pred, targets, weights, reduction, ignore_index):
    """topi::nll_loss, elementwise over the targets' indices (float64 accumulation)."""
    t_out = np.zeros(targets.shape, dtype=np.float64)
    w_out = np.zeros(targets.shape, dtype=np.float64)
    for idx in np.ndindex(*targets.shape):
        c = int(targets[idx])
        if c == ignore_index:
            continue
        p = pred[(idx[0], c) + idx[1:]]
        t_out[idx] = -float(p) * float(weights[c])
        w_out[idx] = float(weights[c])
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(t_out.sum() / w_out.sum(), dtype=pred.dtype)
    if reduction == "sum":
        return np.asarray(t_out.sum(), dtype=pred.dtype)
    return t_out.astype(pred.dtype)


def _nll_text(pred_shape, target_shape, classes, reduction, ignore_index,
              dtype="float32", target_dtype="int32"):
    def ty(shape, dt):
        return f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), {dt}]"
    params = (f"%p: {ty(pred_shape, dtype)}, %t: {ty(target_shape, target_dtype)}, "
              f"%w: {ty((classes,), dtype)}")
    return relay_fn(params, f"nn.nll_loss(%p, %t, %w, reduction=\"{reduction}\", "
                            f"ignore_index={ignore_index})")


def _targets(shape, classes, ignore_index, dtype="int32", seed=0):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, classes, size=shape)
    mask = rng.random(shape) < 0.3
    t[mask] = ignore_index
    return t.astype(dtype)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("pred_shape, ignore_index", [
    ((6, 5), -100),
    ((6, 5), 2),            # an ignored class inside [0, C)
    ((2, 4, 3, 5), -1),     # (N, C, d1, d2): one loss per position
])
def test_nll_loss_matches_topi(reduction, pred_shape, ignore_index):
    classes = pred_shape[1]
    target_shape = (pred_shape[0],) + pred_shape[2:]
    pred = rand(*pred_shape, seed=5)
    weights = rand(classes, seed=6, low=0.1, high=2.0)
    targets = _targets(target_shape, classes, ignore_index)
    text = _nll_text(pred_shape, target_shape, classes, reduction, ignore_index)
    want = nll_loss_ref(pred, targets, weights, reduction, ignore_index)
    check(text, [pred, targets, weights], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target_dtype", ["int8", "int64"])
def test_nll_loss_ignore_index_compares_in_the_wide_type(target_dtype):
    """``c != ignore_index`` compares an int8 target with an int32 constant: widened, so
    ignore_index=300 never matches an int8 target (and -1 matches -1)."""
    pred, weights = rand(4, 3, seed=8), rand(3, seed=9, low=0.5, high=1.5)
    for ignore in (300, -1):
        targets = np.array([0, 2, -1, 1], target_dtype) if ignore == -1 else \
            np.array([0, 2, 1, 1], target_dtype)
        text = _nll_text((4, 3), (4,), 3, "mean", ignore, target_dtype=target_dtype)
        check(text, [pred, targets, weights],
              nll_loss_ref(pred, targets, weights, "mean", ignore), rtol=1e-5, atol=1e-6)


def test_nll_loss_mean_of_only_ignored_targets_is_nan():
    """sum(T) / sum(W) with every target ignored: 0 / 0."""
    pred, weights = rand(3, 4), rand(4, seed=2)
    targets = np.full((3,), -100, "int32")
    out = run_relay(_nll_text((3, 4), (3,), 4, "mean", -100), pred, targets, weights)
    assert np.isnan(out)


def test_nll_loss_float64():
    pred, weights = rand(5, 3, dtype="float64"), rand(3, dtype="float64", seed=4)
    targets = _targets((5,), 3, -100, seed=3)
    text = _nll_text((5, 3), (5,), 3, "sum", -100, dtype="float64")
    check(text, [pred, targets, weights], nll_loss_ref(pred, targets, weights, "sum", -100),
          rtol=1e-12, atol=1e-12)


def test_nll_loss_targets_shorter_than_the_predictions():
    """NLLLossRel compared ranks only; topi computed over the targets' shape, reading the
    predictions' first rows and positions."""
    pred, weights = rand(5, 3, 4, seed=21), rand(3, seed=22, low=0.5, high=1.5)
    targets = _targets((2, 3), 3, -100, seed=23)
    text = relay_fn("%p: Tensor[(5, 3, 4), float32], %t: Tensor[(2, 3), int32], "
                    "%w: Tensor[(3,), float32]", "nn.nll_loss(%p, %t, %w, reduction=\"none\")")
    check(text, [pred, targets, weights], nll_loss_ref(pred, targets, weights, "none", -100))


def test_nll_loss_dims_known_at_run_time():
    pred, weights = rand(6, 4, seed=24), rand(4, seed=25, low=0.5, high=1.5)
    targets = _targets((6,), 4, -100, seed=26)
    text = relay_fn("%p: Tensor[(?, ?), float32], %t: Tensor[(?,), int32], "
                    "%w: Tensor[(?,), float32]", "nn.nll_loss(%p, %t, %w)")
    check(text, [pred, targets, weights], nll_loss_ref(pred, targets, weights, "mean", -100))
    model = bmlib_relax.compile(parse(text, "nll.relay"))
    with pytest.raises(RunCheckError, match=r"nn.nll_loss"):  # 3 weights for 4 classes
        model(p=pred, t=targets, w=weights[:3])
    with pytest.raises(RunCheckError, match=r"nn.nll_loss.*targets"):  # 7 targets, 6 rows
        model(p=pred, t=np.zeros(7, "int32"), w=weights)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_without_elements(reduction):
    """No target: "sum" is 0, "mean" 0 / 0 (NaN), "none" an empty tensor."""
    pred, weights = rand(0, 3), rand(3, seed=1)
    targets = np.zeros((0,), "int32")
    out = run_relay(_nll_text((0, 3), (0,), 3, reduction, -100), pred, targets, weights)
    if reduction == "none":
        assert out.shape == (0,)
    elif reduction == "sum":
        assert out == 0
    else:
        assert np.isnan(out)


def test_nll_loss_target_out_of_range_is_refused_when_the_model_runs():
    """topi read ``predictions(n, c)`` and ``weights(c)`` unchecked: outside the tensors."""
    pred, weights = rand(3, 4), rand(4, seed=2)
    text = _nll_text((3, 4), (3,), 4, "sum", -100)
    model = bmlib_relax.compile(parse(text, "nll.relay"))
    with pytest.raises(RunCheckError, match=r"nn.nll_loss.*targets"):
        model(p=pred, t=np.array([0, 4, 1], "int32"), w=weights)
    with pytest.raises(RunCheckError, match=r"nn.nll_loss.*targets"):
        model(p=pred, t=np.array([0, -3, 1], "int32"), w=weights)


@pytest.mark.parametrize("params, call, pattern", [
    ("%p: Tensor[(4,), float32], %t: Tensor[(), int32], %w: Tensor[(4,), float32]",
     "nn.nll_loss(%p, %t, %w)", r"predictions"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(2, 1), int32], %w: Tensor[(4,), float32]",
     "nn.nll_loss(%p, %t, %w)", r"one dimension larger"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(2,), int32], %w: Tensor[(3,), float32]",
     "nn.nll_loss(%p, %t, %w)", r"number of classes"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(2,), int32], %w: Tensor[(4, 1), float32]",
     "nn.nll_loss(%p, %t, %w)", r"weights"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(2,), int32], %w: Tensor[(4,), float16]",
     "nn.nll_loss(%p, %t, %w)", r"same floating"),
    ("%p: Tensor[(2, 4), int32], %t: Tensor[(2,), int32], %w: Tensor[(4,), int32]",
     "nn.nll_loss(%p, %t, %w)", r"same floating"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(2,), uint8], %w: Tensor[(4,), float32]",
     "nn.nll_loss(%p, %t, %w)", r"int type"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(2,), int32], %w: Tensor[(4,), float32]",
     "nn.nll_loss(%p, %t, %w, reduction=\"avg\")", r"reduction"),
    ("%p: Tensor[(2, 4), float32], %t: Tensor[(3,), int32], %w: Tensor[(4,), float32]",
     "nn.nll_loss(%p, %t, %w)", r"targets"),
])
def test_nll_loss_refusals(params, call, pattern):
    with pytest.raises(ConversionError, match=pattern):
        import_text(relay_fn(params, call))


def test_nll_loss_constant_target_out_of_range_is_refused_at_import():
    p, w = relay.var("p", shape=(2, 4)), relay.var("w", shape=(4,))
    t = relay.const(np.array([1, 7], "int32"))
    mod = relay.IRModule.from_expr(relay.Function([p, w], relay.nn.nll_loss(p, t, w)))
    with pytest.raises(ConversionError, match=r"targets.*7"):
        import_relay(mod)


def cross_entropy_ref(x, y, logits):
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    total = (x64 * y64).sum() if logits else (np.log(x64) * y64).sum()
    return np.asarray(-total / x.shape[0], dtype=x.dtype)


@pytest.mark.parametrize("logits", [False, True])
@pytest.mark.parametrize("y_dtype", ["float32", "int32"])
def test_cross_entropy_matches_relay(logits, y_dtype):
    x = rand(4, 6, seed=11, low=0.05, high=1.0)
    y = rand(4, 6, seed=12, low=0.0, high=1.0) if y_dtype == "float32" else \
        RNG.integers(0, 2, size=(4, 6)).astype("int32")
    op = "nn.cross_entropy_with_logits" if logits else "nn.cross_entropy"
    text = relay_fn(f"%x: Tensor[(4, 6), float32], %y: Tensor[(4, 6), {y_dtype}]",
                    f"{op}(%x, %y)")
    out = check(text, [x, y], cross_entropy_ref(x, y, logits), rtol=1e-5, atol=1e-6)
    assert out.shape == () and out.dtype == np.float32


def test_cross_entropy_batch_dim_known_at_run_time():
    x = rand(3, 5, seed=13, low=0.1, high=1.0)
    y = rand(3, 5, seed=14, low=0.0, high=1.0)
    text = relay_fn("%x: Tensor[(?, 5), float32], %y: Tensor[(?, 5), float32]",
                    "nn.cross_entropy(%x, %y)")
    check(text, [x, y], cross_entropy_ref(x, y, False), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["nn.cross_entropy", "nn.cross_entropy_with_logits"])
@pytest.mark.parametrize("params, pattern", [
    ("%x: Tensor[(4,), float32], %y: Tensor[(4,), float32]", r"2-d|2-D"),
    ("%x: Tensor[(4, 6), float32], %y: Tensor[(4, 5), float32]", r"shape"),
    ("%x: Tensor[(4, 6), float16], %y: Tensor[(4, 6), float32]", r"dtype"),
])
def test_cross_entropy_refusals(op, params, pattern):
    with pytest.raises(ConversionError, match=pattern):
        import_text(relay_fn(params, f"{op}(%x, %y)"))


# ===================================================== fixed_point_multiply_per_axis
def fpm_per_axis_ref(x, m, lshift, rshift, lshift_required, axes):
    """QMultiplyShift in int64, the parameters indexed by x's indices at ``axes``."""
    axes = [a % x.ndim for a in axes]
    out = np.empty(x.shape, dtype=np.int32)
    for idx in np.ndindex(*x.shape):
        p = tuple(idx[a] for a in axes)
        v = np.int64(x[idx])
        if lshift_required:
            v = np.int64(v << np.int64(lshift[p]))
        v = np.int64(v * np.int64(m[p]))
        total = np.int64(rshift[p]) + 31
        v = np.int64(v + (np.int64(1) << (total - 1)))
        v = np.int64(v >> total)
        out[idx] = np.int64(v).astype(np.int32)
    return out


def _fpm_text(x_shape, p_shape, lreq, rreq, axes):
    def ty(shape):
        return f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), int32]"
    params = f"%x: {ty(x_shape)}, %m: {ty(p_shape)}, %l: {ty(p_shape)}, %r: {ty(p_shape)}"
    return relay_fn(params, f"fixed_point_multiply_per_axis(%x, %m, %l, %r, "
                            f"is_lshift_required={lreq}, is_rshift_required={rreq}, "
                            f"axes={list(axes)})")


def _fpm_params(shape, seed):
    rng = np.random.default_rng(seed)
    m = rng.integers(1 << 30, (1 << 31) - 1, size=shape).astype("int32")
    lshift = rng.integers(0, 4, size=shape).astype("int32")
    rshift = rng.integers(0, 9, size=shape).astype("int32")
    return m, lshift, rshift


@pytest.mark.parametrize("x_shape, axes, lreq", [
    ((2, 4, 3, 3), [1], True),     # per output channel of NCHW
    ((2, 4, 3, 3), [-3], False),   # a negative axis; left shifts ignored
    ((2, 3, 5), [2, 0], True),     # several axes, out of order
    ((3, 4), [], True),            # 0-d parameters: one multiplier for all
])
def test_fixed_point_multiply_per_axis_matches_q_multiply_shift(x_shape, axes, lreq):
    p_shape = tuple(x_shape[a] for a in axes)
    x = RNG.integers(-(1 << 20), 1 << 20, size=x_shape).astype("int32")
    m, lshift, rshift = _fpm_params(p_shape, seed=len(axes))
    if not lreq:
        lshift[...] = 3  # present but not applied
    want = fpm_per_axis_ref(x, m, lshift, rshift, lreq, axes)
    check(_fpm_text(x_shape, p_shape, lreq, True, axes), [x, m, lshift, rshift], want,
          rtol=0, atol=0)


def test_fixed_point_multiply_per_axis_rounds_half_up_and_wraps():
    """``+ 1 << (total - 1)`` then an arithmetic shift: halves go toward +inf
    (-2.5 -> -2), and the int64 -> int32 cast keeps the low bits."""
    x = np.array([[5, -5, 3, -3, (1 << 31) - 1]], "int32")
    m = np.array([1 << 30], "int32")          # 0.5
    l = np.array([2], "int32")
    r = np.array([0], "int32")
    want = fpm_per_axis_ref(x, m, l, r, True, [0])
    assert list(want[0, :4]) == [10, -10, 6, -6]  # (x << 2) * 0.5
    check(_fpm_text((1, 5), (1,), True, True, [0]), [x, m, l, r], want, rtol=0, atol=0)
    r2 = np.array([2], "int32")
    want = fpm_per_axis_ref(x, m, np.zeros(1, "int32"), r2, False, [0])
    assert list(want[0, :4]) == [1, -1, 0, 0]    # 0.625 -> 1, -0.625 -> -1, +-0.375 -> 0
    check(_fpm_text((1, 5), (1,), False, True, [0]), [x, m, l, r2], want, rtol=0, atol=0)


def test_fixed_point_multiply_per_axis_longer_parameters_and_run_time_dims():
    """Parameters longer than the data's axis are read in part (topi indexed them by the
    data's index); a run-time-sized data axis is checked against them when it runs."""
    x = RNG.integers(-1000, 1000, size=(3, 4)).astype("int32")
    m, lshift, rshift = _fpm_params((6,), seed=31)
    want = fpm_per_axis_ref(x, m[:4], lshift[:4], rshift[:4], True, [1])
    check(_fpm_text((3, 4), (6,), True, True, [1]), [x, m, lshift, rshift], want,
          rtol=0, atol=0)
    text = relay_fn("%x: Tensor[(3, ?), int32], %m: Tensor[(6,), int32], "
                    "%l: Tensor[(6,), int32], %r: Tensor[(6,), int32]",
                    "fixed_point_multiply_per_axis(%x, %m, %l, %r, is_lshift_required=True, "
                    "is_rshift_required=True, axes=[1])")
    check(text, [x, m, lshift, rshift], want, rtol=0, atol=0)
    model = bmlib_relax.compile(parse(text, "fpm.relay"))
    with pytest.raises(RunCheckError, match=r"fp_multiplier has 6 entries"):
        model(x=np.zeros((3, 7), "int32"), m=m, l=lshift, r=rshift)


def test_fixed_point_multiply_per_axis_shifts_without_an_int64_form_are_refused():
    """Shifts past 63 bits (or negative) were poison in v0.19's LLVM code: no value."""
    x = np.ones((2, 4), "int32")
    m, lshift, rshift = _fpm_params((4,), seed=32)
    model = bmlib_relax.compile(parse(_fpm_text((2, 4), (4,), True, True, [1]), "fpm.relay"))
    with pytest.raises(RunCheckError, match=r"right_shift must lie in \[-30, 32\]"):
        model(x=x, m=m, l=lshift, r=np.full(4, 40, "int32"))
    with pytest.raises(RunCheckError, match=r"left_shift must lie in \[0, 63\]"):
        model(x=x, m=m, l=np.full(4, -1, "int32"), r=rshift)
    bound = {"m": m, "l": lshift, "r": np.array([0, 64, 0, 0], "int32")}  # weights
    with pytest.raises(ConversionError, match=r"right_shift: 64 at index 1"):
        import_text(_fpm_text((2, 4), (4,), True, True, [1]), bound)


@pytest.mark.parametrize("x_dtype, p_dtype, p_shape, axes, pattern", [
    ("int8", "int32", (4,), [1], r"int32"),
    ("int32", "int64", (4,), [1], r"int32"),
    ("int32", "int32", (4, 1), [1], r"axes"),
    ("int32", "int32", (3,), [1], r"entries"),
    ("int32", "int32", (4, 4), [1, 1], r"repeat"),
    ("int32", "int32", (4,), [2], r"axis"),
])
def test_fixed_point_multiply_per_axis_refusals(x_dtype, p_dtype, p_shape, axes, pattern):
    ps = ", ".join(map(str, p_shape)) + ("," if len(p_shape) == 1 else "")
    params = (f"%x: Tensor[(2, 4), {x_dtype}], %m: Tensor[({ps}), {p_dtype}], "
              f"%l: Tensor[({ps}), int32], %r: Tensor[({ps}), int32]")
    call = (f"fixed_point_multiply_per_axis(%x, %m, %l, %r, is_lshift_required=True, "
            f"is_rshift_required=True, axes={axes})")
    with pytest.raises(ConversionError, match=pattern):
        import_text(relay_fn(params, call))
