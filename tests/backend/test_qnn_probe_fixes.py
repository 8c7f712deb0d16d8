"""QNN findings of probe p21: free-batch int8 conv2d, per-channel dense zero points,
qnn.dense's uint16 data, and the NHWC conv2d + requantize chain.

Expected values come from an int64 NumPy model of Relay v0.19's canonicalization
(``tests/qnn_reference.py``, and :func:`_dense_v019` below, written from
``src/relay/qnn/op/dense.cc``): integer results must be equal, not close.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
import qnn_reference as ref
from bmlib_relax import ConversionError, relay
from bmlib_relax.relay import ast

from conftest import offloaded_partitions, run_plain

qnn = relay.qnn.op


def c(value, dtype=None):
    return relay.const(value, dtype)


def _composites(model) -> list[str]:
    return [name for p in model.report.to_dict()["partitions"] for name in p["composites"]]


def _main_calls(model) -> list[relax.Call]:
    calls = []
    relax.analysis.post_order_visit(
        model.relax_module["main"].body,
        lambda e: calls.append(e) if isinstance(e, relax.Call) and
        isinstance(e.op, tvm.ir.Op) else None)
    return calls


def _assert_exact(got, want, plain):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, plain)


# ----------------------------------------------------------------- 1. free-batch int8 conv2d
def _conv_module(batch, dtype, in_ch, out_ch, kernel, groups, x_zp, k_zp, requant,
                 layout="NCHW"):
    """``qnn.conv2d`` (+ ``qnn.requantize``) of an ``(batch, in_ch, 6, 7)`` input; ``batch``
    ``None`` is a free (``?``) batch."""
    n = batch if batch is not None else relay.Any()
    nchw = (n, in_ch, 6, 7)
    shape = nchw if layout == "NCHW" else (n, 6, 7, in_ch)
    w_shape = (out_ch, in_ch // groups, kernel, kernel)
    if layout == "NHWC":  # HWIO
        w_shape = (kernel, kernel, in_ch // groups, out_ch)
    x = relay.var("x", shape=shape, dtype=dtype)
    w = relay.var("w", shape=w_shape, dtype="int8")
    pad = kernel // 2
    out = qnn.conv2d(x, w, c(np.int32(x_zp)), c(np.asarray(k_zp, "int32")), c(np.float32(0.05)),
                     c(np.float32(0.02)), kernel_size=(kernel, kernel), channels=out_ch,
                     padding=(pad, pad), groups=groups, data_layout=layout,
                     kernel_layout="OIHW" if layout == "NCHW" else "HWIO")
    if requant:
        out = qnn.requantize(out, c(np.float32(0.001)), c(np.int32(0)), c(np.float32(0.07)),
                             c(np.int32(-2)), axis=layout.index("C"), rounding=requant,
                             out_dtype="int8")
    return ast.IRModule({"main": relay.Function([x, w], out)}), w_shape


def _conv_reference(x, w_oihw, x_zp, k_zp, kernel, groups, requant):
    pad = kernel // 2
    acc = ref.conv2d_nchw(x, w_oihw, x_zp, k_zp, (1, 1), (pad,) * 4, groups)
    if not requant:
        return acc
    return ref.requantize(acc, 0.001, 0, 0.07, -2, "int8", requant, axis=1)


FREE_BATCH_CASES = {
    # the probe's f1: input zero point as padding value plus the constant term
    "3x3_xzp_requant": ("int8", 4, 16, 3, 1, 3, 0, "UPWARD"),
    "1x1_no_zp_int32": ("int8", 4, 16, 1, 1, 0, 0, None),
    "depthwise_tonearest": ("int8", 8, 8, 3, 8, -5, 0, "TONEAREST"),
    "uint8_grouped": ("uint8", 8, 16, 3, 2, 128, 0, "UPWARD"),
    "vector_kernel_zp": ("int8", 4, 8, 3, 1, 3, [1, -2, 0, 4, 5, -6, 7, 0], "UPWARD"),
}


@pytest.mark.parametrize("case", sorted(FREE_BATCH_CASES))
def test_free_batch_int8_conv2d_builds_and_is_exact(case):
    """A free batch keeps the QNN composite away (its templates are static) — so the conv
    must also keep a weight layout TVM's own lowering reads (OIHW), not a packed one."""
    dtype, in_ch, out_ch, kernel, groups, x_zp, k_zp, requant = FREE_BATCH_CASES[case]
    module, w_shape = _conv_module(None, dtype, in_ch, out_ch, kernel, groups, x_zp, k_zp,
                                   requant)
    rng = np.random.default_rng(21)
    lo, hi = ref.QRANGE[dtype]
    w = rng.integers(-128, 128, size=w_shape).astype("int8")
    model = bmlib_relax.compile(module, {"w": w})
    for conv in (call for call in _main_calls(model) if call.op.name == "relax.nn.conv2d"):
        assert str(conv.attrs.kernel_layout) == "OIHW"
    for batch in (1, 3):
        x = rng.integers(lo, hi + 1, size=(batch, in_ch, 6, 7)).astype(dtype)
        got = model(x=x)
        want = _conv_reference(x, w, x_zp, k_zp, kernel, groups, requant)
        plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
        _assert_exact(got, want, plain)


def test_free_batch_nhwc_int8_conv2d_builds_and_is_exact():
    module, w_shape = _conv_module(None, "int8", 4, 16, 3, 1, 3, 0, "UPWARD", layout="NHWC")
    rng = np.random.default_rng(22)
    w = rng.integers(-128, 128, size=w_shape).astype("int8")
    model = bmlib_relax.compile(module, {"w": w})
    x = rng.integers(-128, 128, size=(2, 6, 7, 4)).astype("int8")
    want = _conv_reference(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), 3, 0, 3, 1,
                           "UPWARD").transpose(0, 2, 3, 1)
    plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
    _assert_exact(model(x=x), want, plain)


def test_static_batch_int8_conv2d_still_offloads_packed():
    """The contrast: the same conv with a static batch is one QNN composite."""
    module, w_shape = _conv_module(2, "int8", 4, 16, 3, 1, 3, 0, "UPWARD")
    rng = np.random.default_rng(23)
    w = rng.integers(-128, 128, size=w_shape).astype("int8")
    model = bmlib_relax.compile(module, {"w": w})
    assert offloaded_partitions(model.relax_module)
    assert _composites(model) == ["bmlib.qnn_conv2d_requantize"]
    x = rng.integers(-128, 128, size=(2, 4, 6, 7)).astype("int8")
    plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
    _assert_exact(model(x=x), _conv_reference(x, w, 3, 0, 3, 1, "UPWARD"), plain)


def test_free_batch_float_conv2d_still_offloads():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8, 6, 7), float32], %w: Tensor[(16, 8, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  nn.relu(%0)
}"""
    rng = np.random.default_rng(24)
    w = rng.uniform(-1, 1, size=(16, 8, 3, 3)).astype("float32")
    model = bmlib_relax.compile(text, {"w": w})
    assert offloaded_partitions(model.relax_module)
    assert "relax.nn.conv2d" not in model.report.to_dict()["ops_host"]
    for batch in (1, 3):
        x = rng.uniform(-1, 1, size=(batch, 8, 6, 7)).astype("float32")
        plain = run_plain(bmlib_relax.import_relay(bmlib_relax.relay.parse(text), {"w": w}),
                          [x])
        np.testing.assert_allclose(model(x=x), plain, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- 2. qnn.dense: per-channel kernel zp
def _dense_v019(x, w, x_zp, k_zp, out_dtype="int32"):
    """v0.19's QnnDenseCanonicalize (dense.cc): term1 - term2 + (term4 - term3), with
    term2 = kzp * sum(x) (a vector kzp broadcast over the units), term3 = xzp * sum(w),
    term4 = xzp * kzp * K; the int32 terms wrap like the int32 ops did."""
    xi, wi = x.astype(np.int64), w.astype(np.int64)
    kzp = np.asarray(k_zp, np.int64).reshape(1, -1) if np.ndim(k_zp) else np.int64(k_zp)
    term1 = xi @ wi.T
    term2 = kzp * xi.sum(axis=1, keepdims=True)
    term3 = int(x_zp) * wi.sum(axis=1)
    term4 = int(x_zp) * kzp * x.shape[1]
    out = term1 - term2 + (term4 - term3)
    if out_dtype == "int32":
        out = (out + 2**31) % 2**32 - 2**31
    return out.astype(out_dtype)


def _dense_model(build, x: np.ndarray, w: np.ndarray):
    xv = relay.var("x", shape=x.shape, dtype=str(x.dtype))
    wv = relay.var("w", shape=w.shape, dtype=str(w.dtype))
    module = ast.IRModule({"main": relay.Function([xv, wv], build(xv, wv))})
    return module, bmlib_relax.compile(module, {"w": w})


@pytest.mark.parametrize("x_dtype,x_zp,k_zp", [
    ("int8", 2, [1, -2, 3, 0]),        # the probe's f2
    ("int8", 0, [5, 5, -7, 1]),        # term2 only
    ("uint8", 255, [-128, 127, 0, 9]),  # zero points at the dtype limits
    ("int8", -3, [4]),                 # a 1-element vector: broadcast, as Relay's Multiply
])
def test_qnn_dense_per_channel_kernel_zero_point(x_dtype, x_zp, k_zp):
    rng = np.random.default_rng(31)
    lo, hi = ref.QRANGE[x_dtype]
    x = rng.integers(lo, hi + 1, size=(3, 6)).astype(x_dtype)
    w = rng.integers(-128, 128, size=(4, 6)).astype("int8")
    w_scale = np.float32([0.01, 0.02, 0.03, 0.04])

    def build(xv, wv):
        acc = qnn.dense(xv, wv, c(np.int32(x_zp)), c(np.asarray(k_zp, "int32")),
                        c(np.float32(0.05)), c(w_scale), units=4)
        # the requantize (a QNN composite) is what bmlib takes here
        return relay.Tuple([acc, qnn.requantize(acc, c(np.float32(0.05) * w_scale),
                                                c(np.int32(0)), c(np.float32(0.1)),
                                                c(np.int32(1)), axis=1, out_dtype="int8")])

    module, model = _dense_model(build, x, w)
    assert offloaded_partitions(model.relax_module)
    got = model(x=x)
    plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
    acc = _dense_v019(x, w, x_zp, k_zp)
    _assert_exact(got[0], acc, plain[0])
    want = ref.requantize(acc, np.float32(0.05) * w_scale, 0, 0.1, 1, "int8", axis=1)
    _assert_exact(got[1], want, plain[1])


def test_qnn_dense_kernel_zero_point_of_the_wrong_length_is_named():
    x = np.zeros((2, 6), "int8")
    w = np.zeros((4, 6), "int8")
    with pytest.raises(ConversionError, match="kernel_zero_point"):
        _dense_model(lambda xv, wv: qnn.dense(xv, wv, c(np.int32(1)), c(np.int32([1, 2, 3])),
                                              c(np.float32(0.1)), c(np.float32(0.1)),
                                              units=4), x, w)


@pytest.mark.parametrize("x_dtype,x_zp,k_zp", [
    ("uint16", 0, 0), ("uint16", 40000, -3), ("int16", -300, 0), ("uint16", 7, [1, 0, -1, 2])])
def test_qnn_dense_16_bit_data(x_dtype, x_zp, k_zp):
    """QnnDenseRel took int8/uint8/int16/uint16 data (with an int8/uint8 weight)."""
    rng = np.random.default_rng(32)
    lo, hi = ref.QRANGE[x_dtype]
    x = rng.integers(lo, hi + 1, size=(3, 5)).astype(x_dtype)
    w = rng.integers(-128, 128, size=(4, 5)).astype("int8")

    def build(xv, wv):
        acc = qnn.dense(xv, wv, c(np.int32(x_zp)), c(np.asarray(k_zp, "int32")),
                        c(np.float32(0.05)), c(np.float32(0.1)), units=4)
        return relay.Tuple([acc, relay.nn.relu(relay.cast(acc, "float32"))])

    module, model = _dense_model(build, x, w)
    assert offloaded_partitions(model.relax_module)
    got = model(x=x)
    plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
    _assert_exact(got[0], _dense_v019(x, w, x_zp, k_zp), plain[0])


@pytest.mark.parametrize("x_dtype,w_dtype,out_dtype,what", [
    ("int8", "int16", "int32", "weight dtype"),   # QnnDenseRel: weight int8/uint8 only
    ("int32", "int8", "int32", "data dtype"),
    ("int8", "int8", "int16", "out_dtype"),       # int32/int64 only
])
def test_qnn_dense_dtypes_v019_refused_are_named(x_dtype, w_dtype, out_dtype, what):
    x = np.zeros((2, 6), x_dtype)
    w = np.zeros((4, 6), w_dtype)
    with pytest.raises(ConversionError, match=what):
        _dense_model(lambda xv, wv: qnn.dense(xv, wv, c(np.int32(0)), c(np.int32(0)),
                                              c(np.float32(0.1)), c(np.float32(0.1)),
                                              units=4, out_dtype=out_dtype), x, w)


@pytest.mark.parametrize("x_zp,k_zp", [(1, 0), (0, 2), (0, [0, 0, 0, 0])])
def test_qnn_dense_int64_output_with_a_zero_point_is_named(x_zp, k_zp):
    """v0.19 subtracted the int32 zero-point terms from the int64 product: BroadcastRel's
    "data types int64 and int32 do not match"."""
    x = np.zeros((2, 6), "int8")
    w = np.zeros((4, 6), "int8")
    with pytest.raises(ConversionError, match="int64"):
        _dense_model(lambda xv, wv: qnn.dense(xv, wv, c(np.int32(x_zp)),
                                              c(np.asarray(k_zp, "int32")),
                                              c(np.float32(0.1)), c(np.float32(0.1)),
                                              units=4, out_dtype="int64"), x, w)


def test_qnn_batch_matmul_vector_zero_point_is_named():
    """QnnBatchMatmulRel: both zero points scalars (IsScalarType)."""
    x = np.zeros((1, 2, 6), "int8")
    y = np.zeros((1, 4, 6), "int8")
    with pytest.raises(ConversionError, match="y_zero_point must be a scalar"):
        _dense_model(lambda xv, yv: qnn.batch_matmul(xv, yv, c(np.int32(0)),
                                                     c(np.int32([1, 2, 3, 4])),
                                                     c(np.float32(0.1)), c(np.float32(0.1))),
                     x, y)


def test_qnn_dense_int64_output_with_zero_points_zero():
    x = np.array([[127, -128, 5]], "int8")
    w = np.array([[127, 127, -128], [1, 2, 3]], "int8")

    def build(xv, wv):
        acc = qnn.dense(xv, wv, c(np.int32(0)), c(np.int32(0)), c(np.float32(0.1)),
                        c(np.float32(0.1)), units=2, out_dtype="int64")
        return relay.Tuple([acc, relay.nn.relu(relay.cast(acc, "float32"))])

    module, model = _dense_model(build, x, w)
    assert offloaded_partitions(model.relax_module)
    plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
    _assert_exact(model(x=x)[0], _dense_v019(x, w, 0, 0, "int64"), plain[0])


# ------------------------------------------------- 3. NHWC conv2d + requantize in one composite
def _partition_ops(model, composite: str) -> list[str]:
    return [op for p in model.report.to_dict()["partitions"] if composite in p["composites"]
            for op in p["ops"]]


@pytest.mark.parametrize("rounding,per_channel,out_dtype,x_zp", [
    ("UPWARD", False, "int8", 3),      # the probe's f3
    ("TONEAREST", False, "int8", 0),   # where / greater_equal of the ties
    ("TONEAREST", True, "uint8", 100),  # per-channel multipliers along C (the last axis)
    ("UPWARD", True, "int8", -7),
])
def test_nhwc_qnn_conv2d_requantize_is_one_composite(rounding, per_channel, out_dtype, x_zp):
    rng = np.random.default_rng(41)
    x_dtype = "uint8" if out_dtype == "uint8" else "int8"
    lo, hi = ref.QRANGE[x_dtype]
    x = rng.integers(lo, hi + 1, size=(1, 5, 7, 8)).astype(x_dtype)
    w = rng.integers(-128, 128, size=(3, 3, 8, 16)).astype("int8")
    w_scale = (np.arange(1, 17, dtype="float32") * 0.002).astype("float32") if per_channel \
        else np.float32(0.02)
    acc_scale = (np.float32(0.05) * w_scale).astype("float32")
    # a scale well above 2**-31 with a left shift on some channels
    out_scale = np.float32(0.0007)
    xv = relay.var("x", shape=x.shape, dtype=x_dtype)
    wv = relay.var("w", shape=w.shape, dtype="int8")
    conv = qnn.conv2d(xv, wv, c(np.int32(x_zp)), c(np.int32(0)), c(np.float32(0.05)),
                      c(w_scale), kernel_size=(3, 3), channels=16, padding=(1, 1),
                      data_layout="NHWC", kernel_layout="HWIO")
    req = qnn.requantize(conv, c(acc_scale), c(np.int32(0)), c(out_scale), c(np.int32(-2 if
                         out_dtype == "int8" else 9)), axis=3, rounding=rounding,
                         out_dtype=out_dtype)
    module = ast.IRModule({"main": relay.Function([xv, wv], req)})
    model = bmlib_relax.compile(module, {"w": w})
    assert offloaded_partitions(model.relax_module)
    assert _composites(model) == ["bmlib.qnn_conv2d_requantize"]
    # only the transposes at the function's edges stay outside
    assert set(model.report.to_dict()["ops_host"]) <= {"relax.permute_dims"}
    ops = _partition_ops(model, "bmlib.qnn_conv2d_requantize")
    assert "relax.nn.conv2d" in ops and "relax.right_shift" in ops and "relax.clip" in ops
    got = model(x=x)
    acc = ref.conv2d_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), x_zp, 0, (1, 1),
                          (1, 1, 1, 1))
    want = ref.requantize(acc, acc_scale, 0, out_scale, -2 if out_dtype == "int8" else 9,
                          out_dtype, rounding, axis=1).transpose(0, 2, 3, 1)
    plain = run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])
    _assert_exact(got, want, plain)
