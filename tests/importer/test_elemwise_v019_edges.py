"""Element-wise edge values where the import strayed from TVM v0.19's Relay.

Each model is compiled twice: with the operand an input (computed at run time) and with
it bound as a weight (computed by the weight folder, ``backend/fold.py``, where it folds
the op); both must give v0.19's answer, written here in NumPy from v0.19's source:

* ``fast_exp`` of float32 is ``topi::fast_exp_float32`` (include/tvm/topi/elemwise.h):
  the input clamped to +-88.376 by selects, ``2^n * P(f)`` with ``2^n`` built from the
  exponent bits, then ``max(2^n * P(f), x)``: inf from x ~ 88.3763 on (``n`` = 128 makes
  the bits of inf), NaN for NaN (the last select keeps x), 0 below x ~ -87.68 (``n`` =
  -127 makes the bits of 0); of other dtypes plain ``exp``;
* ``fast_erf`` (float32 and float16) clamps with ``max(min(x, 4), -4)``
  (``fast_erf_float_expr``, src/tir/op/op.cc): NaN becomes 4, erf(NaN) is 1.0 (1.041 in
  float16, whose rounded rational function is no erf);
* ``round`` is ``llvm.round`` (C's ``round``): halves away from zero, -0.0 stays -0.0;
* a ``cast`` of float64 or integers to bfloat16 rounds through float32 (BF16
  legalization);
* refused, as v0.19's build (and its FoldConstant) refused them: ``clip`` of integers
  with an infinite or NaN bound (``make_const`` of the bound in the data's type: an
  IntImm out of range), ``sign`` of unsigned and bool tensors (``make_const(dtype, -1)``),
  bitwise ops and shifts of floats (``type_check_integer_args``), ``logical_and`` /
  ``logical_or`` / ``logical_not`` of other than bool (``type_check_boolean_args``).
"""
from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import ConversionError, relay
from bmlib_relax.backend.fold import fold_constants
from conftest import offloaded_partitions

HEADER = '#[version = "0.0.5"]\n'
# Every model also returns ``relu(%y)``: bmlib offloads it whatever the op under test.
Y = np.linspace(-2, 2, 16, dtype="float32").reshape(1, 16)


def _text(operand: str, ret: str, body: str) -> str:
    """``@main(%y, %w: <operand>)`` returning ``(relu(%y), <body>)``."""
    return (f"{HEADER}def @main(%y: Tensor[(1, 16), float32], %w: {operand}) -> "
            f"(Tensor[(1, 16), float32], {ret}) {{\n  (nn.relu(%y), {body})\n}}\n")


def _run(text: str, w: np.ndarray, bound: bool) -> np.ndarray:
    """The model with ``w`` as an input, or bound as a weight; something offloaded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NaN weights: SuspiciousWeightWarning
        model = bmlib_relax.compile(text, {"w": w} if bound else {})
        assert offloaded_partitions(model.relax_module), "nothing was offloaded"
        relu, out = model(y=Y) if bound else model(y=Y, w=w)
    np.testing.assert_array_equal(relu, np.maximum(Y, 0))
    return out


def _both(text: str, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(as an input, as a bound weight): the two must agree bit for bit."""
    as_input, as_weight = _run(text, w, bound=False), _run(text, w, bound=True)
    assert as_input.dtype == as_weight.dtype
    np.testing.assert_array_equal(as_weight, as_input)
    assert np.array_equal(np.signbit(as_weight), np.signbit(as_input))
    return as_input, as_weight


def _folded_ops(text: str, w: np.ndarray) -> list[str]:
    """The Relax ops left in ``main`` once ``w`` is bound and the weights are folded."""
    names = []
    relax.analysis.post_order_visit(
        fold_constants(bmlib_relax.import_relay(text, {"w": w}))["main"],
        lambda e: names.append(e.op.name)
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return names


def _refused(text: str, w: np.ndarray, match: str) -> None:
    """Refused at compile time, whether ``w`` is an input or a weight."""
    with pytest.raises(ConversionError, match=match):
        bmlib_relax.compile(text)
    with pytest.raises(ConversionError, match=match):
        bmlib_relax.compile(text, {"w": w})


# --------------------------------------------------------------------------- fast_exp
F32 = np.float32


def fast_exp_v019(x: np.ndarray) -> np.ndarray:
    """v0.19's ``topi::fast_exp_float32``, op by op in float32; ``min``/``max`` are
    selects (v0.19's codegen_llvm.cc MinNode/MaxNode)."""
    p = [F32(1.9875691500E-4), F32(1.3981999507E-3), F32(8.3334519073E-3),
         F32(4.1665795894E-2), F32(1.6666665459E-1), F32(5.0000001201E-1)]
    with np.errstate(all="ignore"):
        c = np.where(x < F32(88.3762626647950), x, F32(88.3762626647950))
        c = np.where(c > F32(-88.3762626647949), c, F32(-88.3762626647949))
        n = np.floor(c * F32(1.44269504088896341) + F32(0.5))
        f = c - n * F32(0.6931471805599453)
        y = p[0]
        for coefficient in p[1:]:
            y = y * f + coefficient
        y = y * f * f + f + F32(1)
        ef = ((n + F32(127)).astype(np.int32) << 23).view(np.float32)
        return np.where(ef * y > x, ef * y, x).astype(np.float32)


# The reference rounds every product; TVM's LLVM build (v0.19's as well:
# ``AllowFPOpFusion::Fast``) fuses multiply-adds where the CPU has FMA, and
# ``f = x - n * ln2`` then loses no bits of ``n * ln2`` (up to half an ulp of 88 in ``f``,
# ~4e-6 of the result).  The ends (inf, 0, NaN) do not depend on it.
FMA_RTOL = 5e-6
FAST_EXP_EDGES = [np.nan, np.inf, 100.0, 88.5, 88.3763, 88.37627, -np.inf, -100.0, -88.0,
                  -87.7, -87.5, 88.3762, 0.0, -0.0, 1.0, -1.0, 10.5, -10.5, 50.0, -60.0]


def test_fast_exp_float32_edges_are_v019s():
    """inf (not 2.4e38) from x ~ 88.3763 on, NaN for NaN (the clamp used to hide it),
    0 (not ~4e-39) below x ~ -87.68; the polynomial elsewhere."""
    w = np.array(FAST_EXP_EDGES, "float32")
    want = fast_exp_v019(w)
    assert np.isnan(want[0]) and np.all(want[1:6] == np.inf) and not np.any(want[6:10])
    assert np.isfinite(want[11]) and want[11] > 2e38  # 88.3762: n is 127 still
    got, _ = _both(_text("Tensor[(20), float32]", "Tensor[(20), float32]", "fast_exp(%w)"), w)
    special = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_allclose(got[~special], want[~special], rtol=FMA_RTOL, atol=0)


def test_fast_exp_float32_over_its_range_is_v019s_polynomial():
    w = np.linspace(-90, 90, 4001).astype("float32")
    want = fast_exp_v019(w)
    got, _ = _both(_text("Tensor[(4001), float32]", "Tensor[(4001), float32]",
                         "fast_exp(%w)"), w)
    special = ~np.isfinite(want) | (want < np.finfo(np.float32).tiny)
    np.testing.assert_array_equal(got[want == 0], 0)
    np.testing.assert_array_equal(got[np.isinf(want)], np.inf)
    np.testing.assert_allclose(got[~special], want[~special], rtol=FMA_RTOL, atol=0)


def test_fast_exp_float16_is_plain_exp():
    """v0.19's ``topi::fast_exp`` takes float32 only: float16 is ``exp`` (in float32 on
    the CPU, rounded to float16)."""
    w = np.array([np.nan, np.inf, -np.inf, 12.0, -20.0, 1.0, 0.5, 11.1], "float16")
    with np.errstate(over="ignore"):
        want = np.exp(w.astype(np.float64)).astype(np.float32).astype(np.float16)
    got, _ = _both(_text("Tensor[(8), float16]", "Tensor[(8), float16]", "fast_exp(%w)"), w)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- fast_erf
def fast_erf_v019(x: np.ndarray) -> np.ndarray:
    """v0.19's ``fast_erf_float_expr(x, bits)`` in x's dtype, op by op (LLVM rounds each
    float16 op): the clamp ``max(min(x, 4), -4)`` by selects (NaN -> 4), then
    ``x * P(x^2) / Q(x^2)``."""
    t = x.dtype.type
    numerator = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                 -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                 -1.60960333262415e-02]
    denominator = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                   -7.37332916720468e-03, -1.42647390514189e-02]
    c = np.where(x < t(4), x, t(4))
    c = np.where(c > t(-4), c, t(-4))
    c2 = c * c
    p, q = t(numerator[0]), t(denominator[0])
    for coefficient in numerator[1:]:
        p = c2 * p + t(coefficient)
    for coefficient in denominator[1:]:
        q = c2 * q + t(coefficient)
    return (c * p / q).astype(x.dtype)


ERF_EDGES = [np.nan, np.inf, -np.inf, 0.5, -0.0, 3.0, 5.0, -1.25, 2.0, 3.9]


def test_fast_erf_float32_of_nan_is_one_as_v019():
    """erf(NaN) was erf(4) = 1.0 (the clamp's selects), not NaN."""
    w = np.array(ERF_EDGES, "float32")
    want = fast_erf_v019(w)
    assert want[0] == pytest.approx(1.0, abs=1e-6)
    got, _ = _both(_text("Tensor[(10), float32]", "Tensor[(10), float32]", "fast_erf(%w)"), w)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)  # the rational function is erf
    assert got[0] == 1.0 and got[4] == 0.0 and np.signbit(got[4])


def test_fast_erf_float16_is_v019s_float16_function():
    """In float16 v0.19's rational function is no erf: 1.041 at 4 and beyond, and for
    NaN (the smallest coefficients round to 0 in float16)."""
    w = np.array(ERF_EDGES + list(np.linspace(-4.5, 4.5, 38)), "float16")
    want = fast_erf_v019(w)
    assert float(want[0]) == float(want[1]) == float(np.float16(1.041))
    got, _ = _both(_text("Tensor[(48), float16]", "Tensor[(48), float16]", "fast_erf(%w)"), w)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- round
def c_round(x: np.ndarray) -> np.ndarray:
    """C's ``round`` (``llvm.round``, v0.19's ``round``): halves away from zero, the sign
    of the input kept (-0.0 and -0.2 give -0.0)."""
    wide = x.astype(np.float64)
    return np.copysign(np.floor(np.abs(wide) + 0.5), wide).astype(x.dtype)


@pytest.mark.parametrize("dtype, one", [("float32", "1f"), ("float16", "1f16")])
def test_round_keeps_the_sign_of_zero(dtype, one):
    """``1 / round(-0.0)`` is -inf, as v0.19's (``trunc(x + sign(x) * h)`` gave +0.0)."""
    w = np.array([-0.0, 0.0, -0.2, 0.2, -0.5, 2.5, -2.5, np.nan], dtype)
    with np.errstate(divide="ignore"):
        want = (np.array(1, dtype) / c_round(w)).astype(dtype)
    assert want[0] == -np.inf and want[1] == np.inf
    text = _text(f"Tensor[(8), {dtype}]", f"Tensor[(8), {dtype}]",
                 f"divide({one}, round(%w))")
    assert "relax.trunc" not in _folded_ops(text, w)  # the folder computed it
    got, _ = _both(text, w)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- bfloat16 cast
@pytest.mark.parametrize("source", ["float64", "int32", "int64"])
def test_cast_to_bfloat16_of_a_weight_rounds_through_float32(source):
    """TVM legalizes a bfloat16 cast through float32 (as v0.19's BF16Legalize): two
    roundings, so 1 + 2^-8 + 2^-30 (float64) gives 1.0, 2^24 + 2^16 + 1 (int) 2^24;
    NumPy's direct rounding gave one bfloat16 ulp more."""
    if source == "float64":
        w = np.array([1 + 2**-8 + 2**-30, 3.0, -(1 + 2**-8 + 2**-40), 1e-3], source)
    else:
        w = np.array([2**24 + 2**16 + 1, 3, -(2**24 + 2**16 + 1), 1000], source)
    want = w.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert abs(want[0]) != abs(float(w[0].astype(ml_dtypes.bfloat16)))  # a double rounding
    text = _text(f"Tensor[(4), {source}]", "Tensor[(4), float32]",
                 'cast(cast(%w, dtype="bfloat16"), dtype="float32")')
    assert "relax.astype" not in _folded_ops(text, w)
    got, _ = _both(text, w)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- refused
def _clip_module(dtype: str, low: float, high: float) -> relay.IRModule:
    w = relay.var("w", shape=(2,), dtype=dtype)
    y = relay.var("y", shape=(1, 16))
    return relay.IRModule.from_expr(relay.Function(
        [y, w], relay.Tuple([relay.nn.relu(y), relay.clip(w, low, high)])))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "int8"])
@pytest.mark.parametrize("low, high, name", [(-math.inf, 3.0, "a_min=-inf"),
                                             (0.0, math.inf, "a_max=inf"),
                                             (math.nan, 3.0, "a_min=nan"),
                                             (0.0, math.nan, "a_max=nan")])
def test_clip_of_integers_with_a_non_finite_bound_is_refused(dtype, low, high, name):
    """A raw ``RuntimeError`` as an input, [0, 0] (inf cast to INT_MIN) as a weight."""
    w = np.array([-5, 5] if dtype.startswith("int") else [0, 5], dtype)
    match = rf"clip: {name} is not a value of the input's type {dtype}"
    with pytest.raises(ConversionError, match=match):
        bmlib_relax.compile(_clip_module(dtype, low, high))
    with pytest.raises(ConversionError, match=match):
        bmlib_relax.compile(_clip_module(dtype, low, high), {"w": w})


def test_clip_of_floats_with_an_infinite_bound_still_runs():
    w = np.array([-np.inf, -5, 5, np.inf], "float32")
    got, _ = _both(_text("Tensor[(4), float32]", "Tensor[(4), float32]",
                         "clip(%w, a_min=-inff, a_max=3f)"), w)
    np.testing.assert_array_equal(got, [-np.inf, -5, 3, 3])


@pytest.mark.parametrize("dtype", ["uint8", "uint32", "bool"])
def test_sign_of_unsigned_and_bool_tensors_is_refused(dtype):
    text = _text(f"Tensor[(2), {dtype}]", f"Tensor[(2), {dtype}]", "sign(%w)")
    _refused(text, np.array([0, 1], dtype), rf"sign: sign of {dtype} tensors")


@pytest.mark.parametrize("dtype", ["int8", "int32", "float32"])
def test_sign_of_signed_tensors_still_runs(dtype):
    w = np.array([-3, 0, 5, -1], dtype)
    got, _ = _both(_text(f"Tensor[(4), {dtype}]", f"Tensor[(4), {dtype}]", "sign(%w)"), w)
    np.testing.assert_array_equal(got, np.array([-1, 0, 1, -1], dtype))


INTEGER_OPS = ["bitwise_and(%w, %w)", "bitwise_or(%w, %w)", "bitwise_xor(%w, %w)",
               "left_shift(%w, %w)", "right_shift(%w, %w)", "bitwise_not(%w)",
               "logical_xor(%w, %w)"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("call", INTEGER_OPS)
def test_bitwise_ops_of_floats_are_refused(call, dtype):
    op = call.split("(")[0]
    text = _text(f"Tensor[(2), {dtype}]", f"Tensor[(2), {dtype}]", call)
    _refused(text, np.array([1, 2], dtype), rf"{op}: {op} of {dtype} tensors: Relay's {op} "
                                            r"takes integer or bool tensors only")


@pytest.mark.parametrize("dtype", ["int32", "float32", "uint8"])
@pytest.mark.parametrize("call", ["logical_and(%w, %w)", "logical_or(%w, %w)",
                                  "logical_not(%w)"])
def test_logical_ops_of_other_than_bool_are_refused(call, dtype):
    op = call.split("(")[0]
    text = _text(f"Tensor[(2), {dtype}]", f"Tensor[(2), {dtype}]", call)
    _refused(text, np.array([0, 2], dtype), rf"{op}: {op} of {dtype} tensors: Relay's {op} "
                                            r"takes bool tensors only")


def test_bitwise_ops_of_integers_and_bools_still_run():
    """``logical_xor`` of integers is their bitwise xor (v0.19's topi ``a ^ b``)."""
    a = np.array([0, 2, 7, -1], "int32")
    got, _ = _both(_text("Tensor[(4), int32]", "Tensor[(4), int32]",
                         "add(logical_xor(%w, 3), bitwise_and(%w, 6))"), a)
    np.testing.assert_array_equal(got, (a ^ 3) + (a & 6))
    b = np.array([True, False, True, False])
    got, _ = _both(_text("Tensor[(4), bool]", "Tensor[(4), bool]",
                         "bitwise_not(logical_and(%w, %w))"), b)
    np.testing.assert_array_equal(got, ~b)
