"""QNN ops: builder signatures, text round trip, and bit-exact integer arithmetic.

Each op is built with ``relay.qnn.op.*``, printed and parsed back, imported and
run on the plain Relax build, and compared with ``tests/qnn_reference.py`` (a
NumPy model of Relay v0.19's canonicalization written for the tests): integer
results must be equal, not close.  Inputs are chosen to hit rounding ties in
both modes, zero points at the dtype limits, per-channel axes and saturation.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import qnn_reference as ref
from bmlib_relax import ConversionError, UnsupportedOpError, import_relay, relay
from bmlib_relax.relay import ast, parse
from bmlib_relax.importer.ops.qnn import fixed_point_multiplier_shift

from conftest import run_plain

qnn = relay.qnn.op


def _run(outputs, inputs: dict):
    """Build ``fn(inputs) -> outputs``, round-trip it through text, import and run it."""
    params = [relay.var(name, shape=value.shape, dtype=str(value.dtype))
              for name, value in inputs.items()]
    by_name = {p.name: p for p in params}
    body = outputs(**by_name)
    if isinstance(body, (list, tuple)):
        body = relay.Tuple(list(body))
    module = ast.IRModule({"main": relay.Function(params, body)})
    text = module.astext()
    reparsed = parse(text, "qnn_test.relay")
    assert reparsed.astext() == text  # the printed form reads back unchanged
    mod = import_relay(reparsed)
    names = [p.name for p in mod["main"].params]
    out = run_plain(mod, [inputs[n] for n in names])
    return out if isinstance(out, list) else [out]


def _equal(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


def c(value, dtype=None):
    return relay.const(value, dtype)


# ----------------------------------------------------------------------------- builders
def test_builder_signatures_follow_relay():
    assert list(inspect.signature(qnn.conv2d).parameters)[:8] == [
        "data", "kernel", "input_zero_point", "kernel_zero_point", "input_scale",
        "kernel_scale", "kernel_size", "channels"]
    sig = inspect.signature(qnn.requantize)
    assert [(n, p.default) for n, p in sig.parameters.items()][5:] == [
        ("axis", -1), ("rounding", "None"), ("compute_dtype", "None"), ("out_dtype", "int8")]
    assert inspect.signature(qnn.dense).parameters["units"].default is inspect.Parameter.empty
    assert inspect.signature(qnn.quantize).parameters["out_dtype"].default == "int8"
    assert list(inspect.signature(qnn.leaky_relu).parameters)[:2] == ["x", "alpha"]
    for name in ("add", "subtract", "mul", "concatenate", "batch_matmul", "dequantize",
                 "conv2d_transpose", "avg_pool2d", "sigmoid", "tanh", "hardswish",
                 "simulated_quantize", "simulated_dequantize"):
        assert callable(getattr(qnn, name))
    x = relay.var("x", shape=(1, 4), dtype="int8")
    call = qnn.requantize(x, c(0.5), c(0), c(0.25), c(1))
    # Python defaults that differ from the C++ attribute defaults are recorded.
    assert call.attrs["out_dtype"] == "int8" and "rounding" not in call.attrs
    conv = qnn.conv2d(relay.var("d", shape=(1, 1, 3, 3), dtype="int8"),
                      relay.var("w", shape=(1, 1, 1, 1), dtype="int8"), c(0), c(0), c(1.0),
                      c(1.0), kernel_size=(1, 1), channels=1, padding=(1, 2))
    assert conv.attrs["padding"] == (1, 2, 1, 2) and conv.attrs["out_dtype"] == "int32"


def test_infer_type_gives_qnn_output_types():
    x = relay.var("x", shape=(2, 3, 5, 5), dtype="int8")
    w = relay.var("w", shape=(4, 3, 3, 3), dtype="int8")
    conv = qnn.conv2d(x, w, c(1), c(0), c(0.5), c(0.25), kernel_size=(3, 3), channels=4)
    req = qnn.requantize(conv, c(0.125), c(0), c(0.5), c(3), out_dtype="uint8")
    mod = relay.transform.InferType()(ast.IRModule({"main": relay.Function([x, w], req)}))
    assert conv.checked_type == ast.TensorType((2, 4, 3, 3), "int32")
    assert mod["main"].body.checked_type == ast.TensorType((2, 4, 3, 3), "uint8")


# ----------------------------------------------------------------------------- requantize
def test_fixed_point_multiplier_matches_relay_derivation():
    assert fixed_point_multiplier_shift(0.0) == (0, 0)
    assert fixed_point_multiplier_shift(0.5) == (1 << 30, 0)
    assert fixed_point_multiplier_shift(1.5) == (3 << 29, 1)
    # A significand that rounds up to 2^31 renormalizes (exponent + 1).
    assert fixed_point_multiplier_shift(1 - 2.0 ** -40) == (1 << 30, 1)
    for m in (0.00312, 0.03, 1 / 3, 7.77, 1e-6):
        assert fixed_point_multiplier_shift(m) == ref.multiplier_shift(m)


# Ties: x * 1.5, x * 0.5 (power of two: TIR's shortcut), x * 0.25 hit k + 0.5 exactly.
_TIE_SCALES = [(3.0, 2.0), (1.0, 2.0), (1.0, 4.0), (0.001, 0.002), (0.0123, 0.001)]


@pytest.mark.parametrize("rounding", ["UPWARD", "TONEAREST"])
def test_requantize_per_tensor_ties_limits_and_saturation(rounding):
    x = np.concatenate([np.arange(-41, 42), [2**31 - 1, -2**31 + 1, 1000, -1000]]).astype(
        "int32").reshape(1, -1)
    cases = [(s_in, s_out, zp_in, zp_out, dtype)
             for (s_in, s_out) in _TIE_SCALES
             for zp_in, zp_out, dtype in ((0, 0, "int8"), (5, -128, "int8"), (-3, 127, "int8"),
                                          (0, 255, "uint8"), (7, 0, "uint8"), (0, 11, "int32"))]
    cases = [cs for cs in cases if not (cs[4] == "int32" and abs(cs[0] / cs[1]) > 1)]

    def build(x):
        return [qnn.requantize(x, c(s_in), c(zi), c(s_out), c(zo), rounding=rounding,
                               compute_dtype="int64", out_dtype=dt)
                for s_in, s_out, zi, zo, dt in cases]

    outs = _run(build, {"x": x})
    for got, (s_in, s_out, zi, zo, dt) in zip(outs, cases):
        _equal(got, ref.requantize(x, s_in, zi, s_out, zo, dt, rounding))
    # The tie cases really were ties that the two modes round differently.
    up = ref.requantize(np.array([-3, 3]), 1.0, 0, 2.0, 0, "int8", "UPWARD")
    near = ref.requantize(np.array([-3, 3]), 1.0, 0, 2.0, 0, "int8", "TONEAREST")
    assert up.tolist() == [-1, 2] and near.tolist() == [-2, 2]


def test_requantize_equal_scales_skip_the_multiply_and_default_is_upward():
    x = np.arange(-300, 300, 7, dtype="int32").reshape(2, -1)
    outs = _run(lambda x: [qnn.requantize(x, c(0.5), c(3), c(0.5), c(-2)),
                           qnn.requantize(x, c(1.0), c(0), c(2.0), c(0))], {"x": x})
    _equal(outs[0], np.clip(x - 3 - 2, -128, 127).astype("int8"))
    _equal(outs[1], ref.requantize(x, 1.0, 0, 2.0, 0, "int8", "UPWARD"))


@pytest.mark.parametrize("rounding", ["UPWARD", "TONEAREST"])
@pytest.mark.parametrize("axis", [1, -1])
def test_requantize_per_channel_axis(rounding, axis):
    rng = np.random.default_rng(3)
    x = rng.integers(-300, 300, size=(2, 4, 5)).astype("int32")
    n = x.shape[axis]
    # Multipliers 0.5, 1.5, 0.02, 0.25, 3 (exact in binary but 0.02): ties of both signs.
    scales = np.array([0.125, 0.375, 0.005, 0.0625, 0.75][:n], "float32")
    zps = np.array([0, -7, 3, 0, 1][:n], "int32")
    out = _run(lambda x: qnn.requantize(x, c(scales), c(zps), c(0.25), c(-5), axis=axis,
                                        rounding=rounding, out_dtype="int8"), {"x": x})[0]
    _equal(out, ref.requantize(x, scales, zps, 0.25, -5, "int8", rounding, axis=axis))


def test_requantize_float_compute_dtype_rounds_like_relay():
    x = np.arange(-9, 10, dtype="int32").reshape(1, -1)
    outs = _run(lambda x: [qnn.requantize(x, c(1.0), c(0), c(2.0), c(0), rounding=r,
                                          compute_dtype="float32") for r in
                           ("UPWARD", "TONEAREST")], {"x": x})
    half = x / 2.0
    _equal(outs[0], np.floor(half + 0.5).astype("int8"))
    _equal(outs[1], (np.sign(half) * np.floor(np.abs(half) + 0.5)).astype("int8"))


# ----------------------------------------------------------------------------- (de)quantize
def test_quantize_dequantize_per_tensor_and_per_channel():
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, size=(2, 3, 4)).astype("float32")
    x[0, 0, :3] = [0.25, -0.25, 0.75]  # ties of round(x / 0.5): half to even
    ch_scale, ch_zp = np.array([0.5, 0.02, 0.1], "float32"), np.array([0, 100, -128], "int32")

    def build(x):
        q8 = qnn.quantize(x, c(0.5), c(-1), out_dtype="int8")
        qc = qnn.quantize(x, c(ch_scale), c(ch_zp), axis=1, out_dtype="int8")
        qu = qnn.quantize(x, c(0.01), c(255), out_dtype="uint8")  # saturates at 0 / 255
        return [q8, qc, qu, qnn.dequantize(q8, c(0.5), c(-1)),
                qnn.dequantize(qc, c(ch_scale), c(ch_zp), axis=1)]

    q8, qc, qu, d8, dc = _run(build, {"x": x})
    _equal(q8, ref.quantize(x, 0.5, -1, "int8"))
    _equal(qc, ref.quantize(x, ch_scale, ch_zp, "int8", axis=1))
    _equal(qu, ref.quantize(x, 0.01, 255, "uint8"))
    assert qu.min() >= 0 and (qu == 255).any()
    np.testing.assert_array_equal(d8, ref.dequantize(q8, 0.5, -1))
    np.testing.assert_array_equal(dc, ref.dequantize(qc, ch_scale, ch_zp, axis=1))


# ----------------------------------------------------------------------------- conv / dense
@pytest.mark.parametrize("dtype,x_zp,w_zp,groups,strides", [
    ("int8", 0, 0, 1, (1, 1)),
    ("int8", -128, 0, 1, (2, 2)),       # zero point at the limit becomes the padding value
    ("uint8", 255, 0, 4, (1, 1)),       # depthwise
    ("int8", 3, -2, 1, (1, 1)),         # kernel zero point: both operands shifted
    ("uint8", 17, 0, 2, (1, 2)),        # grouped
])
def test_qnn_conv2d_int32_accumulator(dtype, x_zp, w_zp, groups, strides):
    rng = np.random.default_rng(7)
    lo, hi = ref.QRANGE[dtype]
    x = rng.integers(lo, hi + 1, size=(1, 4, 6, 5)).astype(dtype)
    w = rng.integers(-128, 128, size=(4, 4 // groups, 3, 3)).astype("int8")
    out = _run(lambda x, w: qnn.conv2d(x, w, c(x_zp), c(w_zp), c(0.1), c(0.2),
                                       kernel_size=(3, 3), channels=4, strides=strides,
                                       padding=(1, 1), groups=groups), {"x": x, "w": w})[0]
    _equal(out, ref.conv2d_nchw(x, w, x_zp, w_zp, strides, (1, 1, 1, 1), groups))


def test_qnn_dense_and_batch_matmul():
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, size=(3, 16)).astype("int8")
    w = rng.integers(-128, 128, size=(5, 16)).astype("int8")
    a = rng.integers(0, 256, size=(2, 3, 8)).astype("uint8")
    b = rng.integers(0, 256, size=(2, 4, 8)).astype("uint8")
    outs = _run(lambda x, w, a, b: [
        qnn.dense(x, w, c(-128), c(0), c(0.1), c(0.1), units=5),
        qnn.dense(x, w, c(4), c(-3), c(0.1), c(0.1), units=5),
        qnn.batch_matmul(a, b, c(128), c(0), c(0.1), c(0.1)),
        qnn.batch_matmul(a, b, c(3), c(255), c(0.1), c(0.1))],
        {"x": x, "w": w, "a": a, "b": b})
    _equal(outs[0], ref.dense(x, w, -128, 0))
    _equal(outs[1], ref.dense(x, w, 4, -3))
    want = [np.stack([ref.dense(a[i], b[i], zx, zy) for i in range(2)])
            for zx, zy in ((128, 0), (3, 255))]
    _equal(outs[2], want[0])
    _equal(outs[3], want[1])


# ----------------------------------------------------------------------------- element-wise
def test_qnn_add_subtract_mul_concatenate():
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, size=(2, 3, 4)).astype("int8")
    b = rng.integers(-128, 128, size=(2, 3, 4)).astype("int8")
    u = rng.integers(0, 256, size=(2, 3, 4)).astype("uint8")

    def q(*args):
        return [c(v) for v in args]

    def build(a, b, u):
        return [
            qnn.add(a, b, *q(0.01, 2, 0.02, -128, 0.025, 127)),
            qnn.subtract(a, b, *q(0.01, 2, 0.02, -128, 0.025, 127)),
            qnn.add(a, a, *q(0.025, 127, 0.025, 127, 0.025, 127)),    # equal: plain upcast
            qnn.mul(a, b, *q(0.01, 2, 0.02, -128, 0.0005, 0)),
            qnn.mul(u, u, *q(0.5, 255, 0.5, 0, 2.0, 0)),               # uint8 saturation
            qnn.concatenate([a, b], [c(0.01), c(0.025)], [c(2), c(127)], c(0.025), c(127),
                            axis=2),
        ]

    add, sub, same, mul, umul, cat = _run(build, {"a": a, "b": b, "u": u})
    _equal(add, ref.add(a, b, 0.01, 2, 0.02, -128, 0.025, 127))
    _equal(sub, ref.add(a, b, 0.01, 2, 0.02, -128, 0.025, 127, subtract=True))
    _equal(same, ref.add(a, a, 0.025, 127, 0.025, 127, 0.025, 127))
    _equal(mul, ref.mul(a, b, 0.01, 2, 0.02, -128, 0.0005, 0))
    _equal(umul, ref.mul(u, u, 0.5, 255, 0.5, 0, 2.0, 0))
    assert (umul == 0).any() or (umul == 255).any()
    _equal(cat, ref.concatenate([a, b], [0.01, 0.025], [2, 127], 0.025, 127, axis=2))


# ----------------------------------------------------------------------------- errors
def test_non_constant_scale_is_named():
    text = ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(2), int32], %s: float32) {\n'
            '  qnn.requantize(%x, %s, 0, 0.5f, 0, out_dtype="int8")\n}\n')
    with pytest.raises(ConversionError, match="qnn.requantize.*input_scale must be a constant"):
        import_relay(parse(text, "bad.relay"))


# ----------------------------------------------------------------------------- other ops
def _lut_reference(x, fn, s, zp, os_, ozp):
    dtype = str(x.dtype)
    with np.errstate(all="ignore"):
        real = fn(ref.dequantize(x, s, zp))
    return ref.quantize(np.asarray(real, "float32"), os_, ozp, dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qnn_unary_ops_are_relay_lookup_tables(dtype):
    lo, hi = ref.QRANGE[dtype]
    x = np.arange(lo, hi + 1).astype(dtype).reshape(2, -1)  # every input value
    zp = 0 if dtype == "int8" else 128
    funcs = {"sigmoid": lambda a: 1 / (1 + np.exp(-a)), "tanh": np.tanh, "abs": np.abs,
             "hardswish": lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0}
    out_zp = {"sigmoid": lo, "tanh": zp, "abs": lo, "hardswish": zp}
    outs = _run(lambda x: [getattr(qnn, name)(x, c(0.05), c(zp), c(1 / 128), c(out_zp[name]))
                           for name in funcs], {"x": x})
    for got, (name, fn) in zip(outs, funcs.items()):
        _equal(got, _lut_reference(x, fn, 0.05, zp, 1 / 128, out_zp[name]))


def test_qnn_leaky_relu_avg_pool_and_conv2d_transpose():
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, size=(1, 3, 5, 5)).astype("int8")
    w = rng.integers(-128, 128, size=(3, 2, 3, 3)).astype("int8")  # IOHW
    outs = _run(lambda x, w: [
        qnn.leaky_relu(x, 0.1, c(0.05), c(-3), c(0.04), c(5)),
        qnn.avg_pool2d(x, c(0.05), c(-3), c(0.03), c(2), pool_size=(2, 2), strides=(1, 1),
                       padding=(0, 0), dilation=(1, 1), layout="NCHW"),
        qnn.conv2d_transpose(x, w, c(3), c(-1), c(0.1), c(0.1), strides=(2, 2), padding=(1, 1),
                             output_padding=(1, 1), channels=2, kernel_size=(3, 3))],
        {"x": x, "w": w})
    # leaky_relu: Relay's QnnLeakyReluCanonicalize.
    x32 = x.astype(np.int64)
    requantized = ref.requantize(x32, 0.05, -3, 0.04, 5, "int32").astype(np.int64)
    product = ref.fixed_point_multiply(requantized, 0.1, "UPWARD")
    scaled_zp = ref.fixed_point_multiply(np.array(5), 0.9, "UPWARD")
    leaky = np.where(x32 < -3, product + scaled_zp, requantized)
    _equal(outs[0], np.clip(leaky, -128, 127).astype("int8"))
    # avg_pool2d: requantize to int32 at the output scale, average with topi's
    # integer division (C semantics: toward zero), clip and cast.
    q = ref.requantize(x32, 0.05, -3, 0.03, 2, "int32").astype(np.int64)
    sums = q[:, :, :-1, :-1] + q[:, :, 1:, :-1] + q[:, :, :-1, 1:] + q[:, :, 1:, 1:]
    _equal(outs[1], np.clip(np.fix(sums / 4), -128, 127).astype("int8"))
    # conv2d_transpose: Relay legalized it to nn.conv2d_transpose of shifted operands.
    xs, ws = x32 - 3, w.astype(np.int64) + 1
    full = np.zeros((1, 2, 2 * 4 + 3 + 1, 2 * 4 + 3 + 1), np.int64)
    for i in range(3):
        for y in range(5):
            for z in range(5):
                full[0, :, 2 * y:2 * y + 3, 2 * z:2 * z + 3] += xs[0, i, y, z] * ws[i]
    _equal(outs[2], full[:, :, 1:1 + 10, 1:1 + 10].astype("int32"))


def test_simulated_quantize_dequantize_per_channel():
    rng = np.random.default_rng(13)
    x = rng.uniform(-4, 4, size=(2, 3, 4)).astype("float32")
    scales, zps = np.array([0.1, 0.02, 0.5], "float32"), np.array([3, 0, -128], "int32")
    outs = _run(lambda x: [qnn.simulated_quantize(x, c(scales), c(zps), axis=1),
                           qnn.simulated_dequantize(x, c(scales), c(zps), axis=1,
                                                    in_dtype="uint8"),
                           qnn.simulated_quantize(x, c(0.1), c(0), out_dtype="disable")],
                {"x": x})
    s, z = scales.reshape(1, 3, 1), zps.reshape(1, 3, 1).astype("float32")
    np.testing.assert_array_equal(outs[0], np.clip(ref.round_half_away(x / s) + z, -128, 127))
    np.testing.assert_array_equal(outs[1], (x - z) * s)
    np.testing.assert_array_equal(outs[2], x)


def test_unconverted_qnn_op_is_named():
    x = relay.var("x", shape=(2, 4), dtype="int8")
    body = qnn.softmax(x, c(0.1), c(0), c(1 / 256), c(-128))
    with pytest.raises(UnsupportedOpError, match="qnn.softmax"):
        import_relay(ast.IRModule({"main": relay.Function([x], body)}))


@pytest.mark.parametrize("call, message", [
    ('qnn.quantize(%x, 0f, 0, out_dtype="int8")', "qnn.quantize.*output_scale must not be 0"),
    ('qnn.quantize(%x, inff, 0, out_dtype="int8")', "output_scale must be finite, got inf"),
    ('qnn.dequantize(qnn.quantize(%x, 0.5f, 0, out_dtype="int8"), nanf, 0, out_dtype="float32")',
     "qnn.dequantize.*input_scale must be finite, got nan"),
])
def test_unusable_scales_are_named(call, message):
    # a 0 or non-finite scale quantizes every value to one clipped integer (or casts a
    # NaN): refused where it is written, not compiled into a plausible-looking result
    text = ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(2, 3), float32]) {\n'
            f'  {call}\n}}\n')
    with pytest.raises(ConversionError, match=message) as info:
        import_relay(parse(text, "scales.relay"))
    assert "scales.relay:3:" in str(info.value)


def test_a_requantize_multiplier_past_the_fixed_point_range_is_named():
    # 1e30 / 0.1: the shift would pass the int64 the product is computed in
    text = ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(2, 3), int8]) {\n'
            '  qnn.requantize(%x, 1e30f, 3, 0.1f, -2, out_dtype="int8")\n}\n')
    with pytest.raises(ConversionError, match=r"qnn.requantize: input_scale / output_scale = "
                                              r"1e\+31 is out of the fixed-point range"):
        import_relay(parse(text, "mult.relay"))


def test_qnn_avg_pool2d_keeps_v019s_ceil_mode_windows():
    # Relay canonicalized qnn.avg_pool2d to nn.avg_pool2d of int32 operands, whose v0.19
    # ceil_mode kept the last window starting in the padding: 4x4 here, not TVM 0.27's 3x3
    import bmlib_relax

    x = (np.arange(25) - 12).astype("int8").reshape(1, 1, 5, 5)
    text = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 1, 5, 5), int8]) {\n'
            "  qnn.avg_pool2d(%x, 0.5f, 0, 0.5f, 0, pool_size=[2, 2], strides=[2, 2], "
            'padding=[1, 1, 1, 1], ceil_mode=True, count_include_pad=False, layout="NCHW")\n}\n')
    want = np.zeros((4, 4), np.int64)
    for i in range(4):
        for j in range(4):
            rows = [r for r in (2 * i - 1, 2 * i) if 0 <= r < 5]
            cols = [c for c in (2 * j - 1, 2 * j) if 0 <= c < 5]
            if rows and cols:
                total = int(x[0, 0][np.ix_(rows, cols)].astype(np.int64).sum())
                want[i, j] = int(total / (len(rows) * len(cols)))  # toward zero
    out = bmlib_relax.compile(text)(x=x)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out[0, 0], want)


def test_requantize_by_a_multiplier_below_the_fixed_point_range_is_zero():
    # in / out scale below ~2**-33 needs a right shift past 63 bits (v0.19: undefined); the
    # product of an int32 and it rounds to 0: per channel it gave saturated garbage, per
    # tensor a bare "Python int too large to convert to C long"
    x = np.array([[0, 1], [-1, 2 ** 20], [-2 ** 20, 2 ** 30], [-2 ** 30, 6]], "int32")
    per_channel, per_tensor = _run(lambda x: [
        qnn.requantize(x, c([1e-12, 0.5]), c(0), c(1.0), c(3), axis=-1, out_dtype="int32"),
        qnn.requantize(x, c(1e-10), c(0), c(1.0), c(3), out_dtype="int32")], {"x": x})
    _equal(per_channel[:, 0], np.full(4, 3, "int32"))
    _equal(per_channel[:, 1], ref.requantize(x[:, 1], 0.5, 0, 1.0, 3, "int32"))
    _equal(per_tensor, np.full((4, 2), 3, "int32"))


@pytest.mark.parametrize("op", ["sqrt", "rsqrt", "log"])
def test_lookup_table_entries_of_nan_saturate_as_relay(op):
    # v0.19 quantized the table with qnn.quantize, whose clip (max(min(q, hi), lo), an LLVM
    # select) took a NaN to hi: sqrt/rsqrt/log of a negative input is 127, not 0
    x = np.array([-4, -1, 0, 1, 4], "int8")
    out, = _run(lambda x: getattr(qnn, op)(x, c(0.5), c(0), c(0.1), c(0)), {"x": x})
    real = x.astype(np.float64) * 0.5
    with np.errstate(all="ignore"):
        value = {"sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "log": np.log}[op](real)
    want = np.where(np.isnan(value), 127,
                    np.clip(ref.round_half_away(value / 0.1), -128, 127)).astype("int8")
    _equal(out, want)


def test_the_dtypes_v019s_type_relations_took():
    # QuantizeRel's uint16 output, DequantizeRel's uint16 input, RequantizeRel's int64
    # input (cast to int32 first by its lowering)
    x = np.array([-1.0, 0.26, 300.0, 70000.0], "float32")
    q = np.array([0, 1, 600, 65535], "uint16")
    wide = np.array([-5, 7, 1 << 20, -(1 << 20)], "int64")
    quantized, dequantized, requantized = _run(lambda x, q, wide: [
        qnn.quantize(x, c(0.5), c(3), out_dtype="uint16"),
        qnn.dequantize(q, c(0.5), c(3)),
        qnn.requantize(wide, c(0.5), c(0), c(1.0), c(2), out_dtype="int32")],
        {"x": x, "q": q, "wide": wide})
    _equal(quantized, ref.quantize(x, 0.5, 3, "uint16"))
    _equal(dequantized, ((q.astype(np.int32) - 3) * np.float32(0.5)).astype("float32"))
    _equal(requantized, ref.requantize(wide.astype(np.int32), 0.5, 0, 1.0, 2, "int32"))


_QNN_CONV_NHWC = '''#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 4, 3), int8], %w: Tensor[(1, 1, 3, 2), int8]) {
  qnn.conv2d(%x, %w, 0, 0, 1f, 1f, padding=[0, 0, 0, 0], channels=CH, kernel_size=[1, 1],
             data_layout="NHWC", kernel_layout="HWIO", OUTout_dtype="int32")
}'''


def test_qnn_conv2d_result_is_in_its_out_layout():
    # v0.19's QnnConv2DRel ran Conv2DRel: out_layout="NCHW" on NHWC data types the
    # result (1, 2, 4, 4); the layout was ignored (an NHWC result, silently)
    text = _QNN_CONV_NHWC.replace("CH", "2").replace("OUT", 'out_layout="NCHW", ')
    rng = np.random.default_rng(3)
    x = rng.integers(-5, 5, (1, 4, 4, 3)).astype("int8")
    w = rng.integers(-5, 5, (1, 1, 3, 2)).astype("int8")
    nhwc = np.einsum("nhwc,co->nhwo", x.astype("int32"), w[0, 0].astype("int32"))
    out = run_plain(import_relay(parse(text, "q.relay")), [x, w])
    np.testing.assert_array_equal(out, nhwc.transpose(0, 3, 1, 2))


def test_qnn_conv2d_channels_contradicting_the_weight_is_refused():
    text = _QNN_CONV_NHWC.replace("CH", "5").replace("OUT", "")
    with pytest.raises(ConversionError, match=r"qnn.conv2d: channels=5 and kernel_size=\[1, 1\]"
                                              r" .* type the weight as \(5, 3, 1, 1\)"):
        import_relay(parse(text, "q.relay"))


def test_qnn_conv2d_transpose_takes_nn_conv2d_transposes_layouts_and_checks():
    # Relay legalized it to nn.conv2d_transpose of the shifted operands: its out_layout
    # (ignored before: an NCHW result) and its weight checks apply
    rng = np.random.default_rng(13)
    x = rng.integers(-128, 128, size=(1, 3, 5, 5)).astype("int8")
    w = rng.integers(-128, 128, size=(3, 2, 3, 3)).astype("int8")  # IOHW

    def build(**extra):
        return lambda x, w: qnn.conv2d_transpose(
            x, w, c(3), c(-1), c(0.1), c(0.1), strides=(2, 2), padding=(1, 1),
            kernel_size=(3, 3), **extra)

    nchw, = _run(build(channels=2), {"x": x, "w": w})
    nhwc, = _run(build(channels=2, out_layout="NHWC"), {"x": x, "w": w})
    _equal(nhwc, nchw.transpose(0, 2, 3, 1))
    with pytest.raises(ConversionError, match=r"qnn.conv2d_transpose: channels=5"):
        _run(build(channels=5), {"x": x, "w": w})


@pytest.mark.parametrize("dtype, out_dtype, problem", [
    ("int16", "int32", r"the x dtype"), ("int8", "int64", r"out_dtype"),
])
def test_qnn_batch_matmul_takes_what_its_relation_took(dtype, out_dtype, problem):
    # QnnBatchMatmulRel: int8/uint8 operands, an int32 result (int16 ran before)
    x = relay.var("x", shape=(1, 2, 4), dtype=dtype)
    y = relay.var("y", shape=(1, 3, 4), dtype=dtype)
    call = qnn.batch_matmul(x, y, c(0), c(0), c(1.0), c(1.0), out_dtype=out_dtype)
    with pytest.raises(ConversionError, match=problem):
        import_relay(ast.IRModule({"main": relay.Function([x, y], call)}))
