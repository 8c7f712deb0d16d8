"""Folding computations on weights gives what TVM computes for the same op on an input.

v0.19's ``FoldConstant`` built and ran each op on its constants, so a model computed the
same whether a tensor was a bound weight or an input.  Each test compiles the model with
the tensor bound (folded with NumPy by ``backend/fold.py``, something offloaded) and
compares it with TVM's own build of the same model taking the tensor as an input
(``run_plain``) and with a NumPy expectation written from v0.19's definition of the op:

* float16 ops round their result to float16, op by op (``multiply(w, 3f16)`` of 1025 is
  3076, and a ``cast`` after it sees 3076);
* ``maximum``/``minimum`` are ``select(a > b, a, b)``/``select(a < b, a, b)``
  (v0.19's ``codegen_llvm.cc`` MaxNode/MinNode), ``clip`` is ``max(min(x, hi), lo)``
  (topi ``clip``) and ``sign`` two nested selects (topi ``sign``): a NaN weight gives
  the other operand, ``hi``, or 0, never NaN;
* integer ``divide`` is ``truncdiv`` (topi ``divide``), exact for every int64.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax.backend.fold import fold_constants
from bmlib_relax.errors import ConversionError, RunCheckError

from conftest import offloaded_partitions, run_plain

HEADER = '#[version = "0.0.5"]\n'


# Every model also returns ``relu(%y)``: bmlib offloads it whatever the dtype under test.
Y = np.linspace(-2, 2, 16, dtype="float32").reshape(1, 16)


def _text(inputs: str, ret: str, body: str) -> str:
    """``@main(%y, <inputs>)`` returning ``(relu(%y), <body's last expression>)``."""
    *steps, last = body.split("; ")
    steps = "; ".join(steps + [f"%out = {last}", "(nn.relu(%y), %out)"])
    return (f"{HEADER}def @main(%y: Tensor[(1, 16), float32], {inputs}) -> "
            f"(Tensor[(1, 16), float32], {ret}) {{\n  {steps}\n}}\n")


def _bound(text: str, params: dict, x: np.ndarray) -> np.ndarray:
    """The model with ``params`` bound as weights (folded), something offloaded."""
    model = bmlib_relax.compile(text, params)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    relu, out = model(y=Y, x=x)
    np.testing.assert_array_equal(relu, np.maximum(Y, 0))
    return out


def _as_inputs(text: str, params: dict, x: np.ndarray) -> np.ndarray:
    """TVM's own build of the same model with ``params`` passed as inputs (not folded)."""
    return run_plain(bmlib_relax.import_relay(text), [Y, x, *params.values()])[1]


def _folded_ops(text: str, params: dict) -> list[str]:
    """The Relax ops left in ``main`` after folding the model with ``params`` bound."""
    names = []
    relax.analysis.post_order_visit(
        fold_constants(bmlib_relax.import_relay(text, params))["main"],
        lambda e: names.append(e.op.name)
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return names


def _check(text: str, params: dict, x: np.ndarray, want: np.ndarray, folded_op: str):
    assert f"relax.{folded_op}" not in _folded_ops(text, params)  # the folder computed it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bound, as_inputs = _bound(text, params, x), _as_inputs(text, params, x)
    assert as_inputs.dtype == bound.dtype == want.dtype
    np.testing.assert_array_equal(as_inputs, want)  # the reference agrees with v0.19
    np.testing.assert_array_equal(bound, want)


# --------------------------------------------------------------------------- float16
@pytest.mark.parametrize("cast", ["float32", "int32"])
def test_float16_product_is_rounded_before_a_cast(cast):
    """``multiply(w, 3f16)`` is a float16 tensor: 1025 * 3 = 3075 rounds to 3076 (ties to
    even), 1027 * 3 = 3081 to 3080, and the cast after it converts those."""
    w = np.array([[1025, 1027, 1, 2, 2049, -1025, 0.1, 333.3]], "float16")
    text = _text(f"%x: Tensor[(1, 8), {cast}], %w: Tensor[(1, 8), float16]",
                 f"Tensor[(1, 8), {cast}]",
                 f'%0 = multiply(%w, 3f16); %1 = cast(%0, dtype="{cast}"); add(%x, %1)')
    product = np.array([[float(np.float16(float(v) * 3)) for v in w.ravel()]])
    assert product[0, 0] == 3076 and product[0, 1] == 3080
    _check(text, {"w": w}, np.zeros((1, 8), cast), product.astype(cast), "multiply")


def test_float16_chain_rounds_each_op():
    """``(w + 0.1) * 3 - w`` in float16: each op's result is a float16 value."""
    w = np.array([[1000, 1025.5, -3, 0.3333, 2047, 7.77, -500.25, 60]], "float16")
    text = _text("%x: Tensor[(1, 8), float32], %w: Tensor[(1, 8), float16]",
                 "Tensor[(1, 8), float32]",
                 "%0 = add(%w, 0.1f16); %1 = multiply(%0, 3f16); %2 = subtract(%1, %w); "
                 '%3 = cast(%2, dtype="float32"); add(%x, %3)')
    f16 = lambda v: float(np.float16(v))  # noqa: E731 - one rounding to float16
    want = [f16(f16(f16(float(v) + f16(0.1)) * 3) - float(v)) for v in w.ravel()]
    _check(text, {"w": w}, np.zeros((1, 8), "float32"), np.array([want], "float32"),
           "multiply")


SIMPLIFIED_BN_FP16 = _text(
    "%x: Tensor[(1, 4, 1, 2), float16], %var: Tensor[(4), float16], "
    "%mean: Tensor[(4), float16], %gamma: Tensor[(4), float16]",
    "Tensor[(1, 4, 1, 2), float16]",
    "%0 = add(%var, 1e-05f16); %1 = sqrt(%0); %2 = divide(1f16, %1); "
    "%3 = multiply(%2, %gamma); %4 = negative(%mean); %5 = multiply(%4, %3); "
    '%6 = cast(%3, dtype="float32"); %7 = cast(%5, dtype="float32"); '
    "%8 = expand_dims(%6, axis=1, num_newaxis=2); %9 = expand_dims(%7, axis=1, num_newaxis=2); "
    '%10 = cast(%x, dtype="float32"); %11 = multiply(%10, %8); %12 = add(%11, %9); '
    'cast(%12, dtype="float16")')


def test_simplify_inference_chain_folds_as_float16_ops():
    """The SimplifyInference form of a float16 batch_norm, its scale and shift cast to
    float32: v0.19 computed ``sqrt``, ``divide``, ``multiply`` in float16, each rounded
    (with a mean of 300 the shift is a float16 product, not the exact one)."""
    var = np.array([0.01, 0.04, 0.25, 1.0], "float16")
    mean = np.array([300, -300, 700, 2.5], "float16")
    gamma = np.array([1, 0.5, -2, 1], "float16")
    f16 = np.float16
    scale = [f16(f16(1) / f16(np.sqrt(np.float32(f16(v + f16(1e-5)))))) * g
             for v, g in zip(var, gamma)]
    shift = [f16(-m * s) for m, s in zip(mean, scale)]
    x = np.array([[[[300.25, 299.75]], [[-300.5, 1]], [[700, 701]], [[2.5, 0]]]], "float16")
    want = (x.astype("f4") * np.array(scale, "f4")[:, None, None] +
            np.array(shift, "f4")[:, None, None]).astype("float16")
    params = {"var": var, "mean": mean, "gamma": gamma}
    _check(SIMPLIFIED_BN_FP16, params, x, want, "sqrt")


# --------------------------------------------------------------------------- NaN
def _select_max(a: float, b: float) -> float:
    return a if a > b else b  # v0.19 codegen_llvm.cc: MaxNode -> select(a > b, a, b)


def _select_min(a: float, b: float) -> float:
    return a if a < b else b  # MinNode -> select(a < b, a, b)


def _sign(a: float) -> float:
    return -1.0 if a < 0 else 1.0 if a > 0 else 0.0  # topi sign: nested Select


# Relay call ({f}: the float literal suffix) -> its value for one weight entry
NAN_OPS = {
    "maximum(%w, 0{f})": lambda v: _select_max(v, 0.0),
    "maximum(-1{f}, %w)": lambda v: _select_max(-1.0, v),
    "minimum(%w, 1{f})": lambda v: _select_min(v, 1.0),
    "minimum(2{f}, %w)": lambda v: _select_min(2.0, v),
    "clip(%w, a_min=0f, a_max=6f)": lambda v: _select_max(_select_min(v, 6.0), 0.0),
    "sign(%w)": _sign,
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", list(NAN_OPS))
def test_nan_weights_through_selects(op, dtype):
    """A NaN weight (damaged, or a ``log`` of a negative folded before) gives what
    TVM's selects give on an input: NumPy's NaN-propagating maximum, clip and sign did
    not."""
    w = np.array([np.nan, -1, 2, np.nan, np.inf, -np.inf, 7, -0.5], dtype)
    call = op.format(f="f16" if dtype == "float16" else "f")
    text = _text(f"%x: Tensor[(8), {dtype}], %w: Tensor[(8), {dtype}]", f"Tensor[(8), {dtype}]",
                 f"%0 = {call}; add(%x, %0)")
    want = np.array([NAN_OPS[op](float(v)) for v in w], dtype)
    name = op.split("(")[0]
    _check(text, {"w": w}, np.zeros(8, dtype), want, name)


# --------------------------------------------------------------------------- integer divide
def _truncdiv(a: int, b: int) -> int:
    """C's integer division (v0.19 topi divide of integers: truncdiv), in Python ints."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_integer_divide_truncates_exactly(dtype):
    """Every quotient exact (int64 past 2**53 too), rounded toward zero."""
    info = np.iinfo(dtype)
    values = [info.max, info.min + 1, info.max - 2, 7, -7, 0, 5, -1, 1]
    if dtype == "int64":
        values += [2**53 + 1, -(2**53 + 1), 2**62 + 1, -(2**62 + 3)]
    divisors = [1, -1, 3, -3, 2, -7, 10, 1, 1] + [1, 3, -1, -5] * (dtype == "int64")
    w = np.array([v for v in values if info.min <= v <= info.max], dtype)
    d = np.array([b if info.min <= b else -b for b in divisors][:w.size], dtype)
    n = w.size
    text = _text(f"%x: Tensor[({n}), {dtype}], %w: Tensor[({n}), {dtype}], "
                 f"%d: Tensor[({n}), {dtype}]", f"Tensor[({n}), {dtype}]",
                 "%0 = divide(%w, %d); add(%x, %0)")
    want = np.array([_truncdiv(int(a), int(b)) for a, b in zip(w, d)], dtype)
    _check(text, {"w": w, "d": d}, np.zeros(n, dtype), want, "divide")


def test_int64_divide_by_literal_one_is_exact():
    """The probe's case: ``divide(%w, 1i64)`` kept 2**53 + 1."""
    w = np.array([2**53 + 1, -(2**53 + 1), 2**62 + 1, 7], "int64")
    text = _text("%x: Tensor[(4), int64], %w: Tensor[(4), int64]", "Tensor[(4), int64]",
                 "%0 = divide(%w, 1i64); add(%x, %0)")
    _check(text, {"w": w}, np.zeros(4, "int64"), w.copy(), "divide")


def test_weight_quotient_that_overflows_is_a_conversion_error():
    """The type's minimum divided by -1 has no quotient (x86's division traps); with the
    tensor as an input the model's run check refuses it, bound it cannot be folded into
    a value either: a ConversionError naming the divide."""
    w = np.array([np.iinfo("int64").min, 5, -6, 7], "int64")
    text = _text("%x: Tensor[(4), int64], %w: Tensor[(4), int64]", "Tensor[(4), int64]",
                 "%0 = divide(%w, -1i64); add(%x, %0)")
    with pytest.raises(RunCheckError, match="integer overflow"):
        bmlib_relax.compile(text)(y=Y, x=np.zeros(4, "int64"), w=w)
    with pytest.raises(ConversionError, match=r"divide: integer overflow: "
                                              r"-9223372036854775808 divided by -1"):
        bmlib_relax.compile(text, {"w": w})


def test_zero_divisor_made_of_weights_is_left_to_the_run_check():
    """A divisor computed from weights (not a constant at import) holding a 0: the
    divide stays unfolded and the model's run check refuses it, as with inputs."""
    w = np.array([7, -7, 3, 9], "int32")
    d = np.array([1, 3, 2, 0], "int32")
    text = _text("%x: Tensor[(4), int32], %w: Tensor[(4), int32], %d: Tensor[(4), int32]",
                 "Tensor[(4), int32]", "%0 = subtract(%d, 1); %1 = divide(%w, %0); add(%x, %1)")
    assert "relax.divide" in _folded_ops(text, {"w": w, "d": d})
    x = np.zeros(4, "int32")
    with pytest.raises(RunCheckError, match="division by zero"):
        bmlib_relax.compile(text, {"w": w, "d": d})(y=Y, x=x)
    with pytest.raises(RunCheckError, match="division by zero"):
        bmlib_relax.compile(text)(y=Y, x=x, w=w, d=d)


# --------------------------------------------------------------------------- half precision
def _unary_module(op, w: np.ndarray, as_input: bool):
    """``main`` computing ``op`` of ``w``, a constant or (``as_input``) a parameter."""
    param = relax.Var("w", relax.TensorType(w.shape, str(w.dtype)))
    bb = relax.BlockBuilder()
    with bb.function("main", [param] if as_input else []):
        with bb.dataflow():
            out = bb.emit_output(op(param if as_input else relax.const(w)))
        bb.emit_func_output(out)
    return bb.get()


HALF_OPS = {
    "rsqrt": lambda w: relax.op.rsqrt(relax.op.abs(w)),
    "sqrt": lambda w: relax.op.sqrt(relax.op.abs(w)),
    "exp": relax.op.exp,
    "log": lambda w: relax.op.log(relax.op.abs(w)),
    "reciprocal": lambda w: relax.op.divide(relax.const(1, str(w.ty.dtype)), w),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(HALF_OPS))
def test_half_precision_unary_ops_fold_to_what_tvm_computes(name, dtype):
    """Each value as TVM computes it on the CPU: float16 ``rsqrt`` rounds its square
    root to float16 before dividing (v0.19's topi ``1 / sqrt(x)``, each LLVM half op
    rounded); ``exp`` is float32's correctly rounded one, then rounded (NumPy's float32
    ``exp`` is an ulp off at times, and a tie then rounds the other way)."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal(2048) * rng.choice([1, 4, 300], 2048)).astype("float32")
    w[:6] = [6.84375, 5.5, 0.04132, 65504, 1e-3, -0.0]
    w = w.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        folded = fold_constants(_unary_module(HALF_OPS[name], w, as_input=False))
        assert not [e for e in folded["main"].body.blocks[0].bindings
                    if isinstance(e.value, relax.Call)]  # all folded
        got = run_plain(folded, [])
    want = run_plain(_unary_module(HALF_OPS[name], w, as_input=True), [w])
    np.testing.assert_array_equal(got.astype("float32"), want.astype("float32"))


# --------------------------------------------------------------------------- sum
@pytest.mark.parametrize("dtype, axis, keepdims", [
    ("float16", "[1]", True), ("float16", "[0, 1]", False), ("float32", "[1]", False),
    ("bfloat16", "[1]", True)])
def test_float_sum_of_weights_adds_in_order_in_its_dtype(dtype, axis, keepdims):
    """topi's ``sum`` loop (v0.19's FoldConstant ran it) adds one element at a time, each
    partial sum a ``dtype`` value: 4096 float16 ones sum to 2048 (2048 + 1 rounds back
    to 2048), not NumPy's pairwise 4096; bfloat16 ones to 256 (the partial sum is the
    result buffer, bfloat16)."""
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(11)
    w = np.concatenate([np.ones((2, 4096)), rng.uniform(0, 2, (2, 4096))]).astype(np_dtype)
    axes = [int(a) for a in axis.strip("[]").split(",")]
    rows = np.moveaxis(w, axes, list(range(-len(axes), 0))).reshape(
        [n for i, n in enumerate(w.shape) if i not in axes] + [-1])
    want = np.zeros(rows.shape[:-1], np_dtype)
    for k in range(rows.shape[-1]):  # one add at a time, rounded to the dtype
        want = (want.astype("float32") + rows[..., k].astype("float32")).astype(np_dtype)
    if keepdims:
        want = want.reshape([1 if i in axes else n for i, n in enumerate(w.shape)])
    if dtype == "float16" and axes == [1]:
        assert float(want.ravel()[0]) == 2048.0
    out_shape = tuple(want.shape)
    text = (f"{HEADER}def @main(%y: Tensor[(1, 16), float32], %x: Tensor[{out_shape}, {dtype}], "
            f"%w: Tensor[(4, 4096), {dtype}]) {{\n"
            f"  %0 = sum(%w, axis={axis}, keepdims={keepdims});\n"
            f"  (nn.relu(%y), add(%x, %0))\n}}\n")
    x = np.zeros(out_shape, np_dtype)
    assert "relax.sum" not in _folded_ops(text, {"w": w})
    np.testing.assert_array_equal(_bound(text, {"w": w}, x), want)
    np.testing.assert_array_equal(_as_inputs(text, {"w": w}, x), want)
