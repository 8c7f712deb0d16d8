"""Element-wise Relay ops: broadcasting binary arithmetic, unary math, clip, cast, where."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from tvm import relax, topi

from ..registry import register_converter
from ._utils import (
    below_half, check_integer_divisor, const_value, dtype_of, is_integer_dtype, known_dtype,
)

# Relay op name -> Relax op; Relay and Relax share numpy broadcasting semantics here.
BINARY_OPS = {
    "add": relax.op.add,
    "subtract": relax.op.subtract,
    "multiply": relax.op.multiply,
    "divide": relax.op.divide,
    "power": relax.op.power,
    "maximum": relax.op.maximum,
    "minimum": relax.op.minimum,
    "floor_divide": relax.op.floor_divide,
    "floor_mod": relax.op.floor_mod,
    "equal": relax.op.equal,
    "not_equal": relax.op.not_equal,
    "less": relax.op.less,
    "less_equal": relax.op.less_equal,
    "greater": relax.op.greater,
    "greater_equal": relax.op.greater_equal,
    "logical_and": relax.op.logical_and,
    "logical_or": relax.op.logical_or,
    "logical_xor": relax.op.logical_xor,
    "bitwise_and": relax.op.bitwise_and,
    "bitwise_or": relax.op.bitwise_or,
    "bitwise_xor": relax.op.bitwise_xor,
    "left_shift": relax.op.left_shift,
    "right_shift": relax.op.right_shift,
}

UNARY_OPS = {
    "abs": relax.op.abs,
    "sqrt": relax.op.sqrt,
    "rsqrt": relax.op.rsqrt,
    "exp": relax.op.exp,
    "log": relax.op.log,
    "sigmoid": relax.op.sigmoid,
    "tanh": relax.op.tanh,
    "floor": relax.op.floor,
    "ceil": relax.op.ceil,
    "trunc": relax.op.trunc,
    "sign": relax.op.sign,
    "sin": relax.op.sin,
    "cos": relax.op.cos,
    "tan": relax.op.tan,
    "sinh": relax.op.sinh,
    "cosh": relax.op.cosh,
    "asin": relax.op.asin,
    "acos": relax.op.acos,
    "atan": relax.op.atan,
    "asinh": relax.op.asinh,
    "acosh": relax.op.acosh,
    "atanh": relax.op.atanh,
    "isnan": relax.op.isnan,
    "isinf": relax.op.isinf,
    "isfinite": relax.op.isfinite,
    "logical_not": relax.op.logical_not,
    "bitwise_not": relax.op.bitwise_not,
    # FastMath rewrite: the same function with a cheaper approximation in Relay.
    "fast_tanh": relax.op.tanh,
}


COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
# Their integer forms divide by the second operand (see check_integer_divisor).
DIVIDING_OPS = {"divide", "floor_divide", "floor_mod"}


# Relay ops whose TIR operator v0.19 type-checked when Relay built them (and its
# FoldConstant did): src/tir/op/op.cc type_check_integer_args (``&``, ``|``, ``^``,
# ``<<``, ``>>``, ``~``; topi's logical_xor is ``a ^ b``) takes int and uint types, bool
# among them (Relay's bool was uint1); type_check_boolean_args (``&&``, ``||``, ``!``)
# takes bool only.  TVM 0.27 fails the same way, deep in the build with no op named.
INTEGER_OPERAND_OPS = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                       "left_shift", "right_shift", "logical_xor"}
BOOL_OPERAND_OPS = {"logical_and", "logical_or", "logical_not"}


def _check_operand_dtype(name: str, dtype: Optional[str], ctx) -> None:
    """Refuse an operand type v0.19 could not build ``name`` for: floats for the bitwise
    ops (above), other than bool for the logical ones, and unsigned or bool types for
    ``sign``, whose topi compute makes ``-1`` of the input's type (elemwise.h ``sign``:
    ``make_const(x->dtype, -1)``, which v0.19 refused for uint types, bool among them)."""
    if dtype is None:
        return
    if name in INTEGER_OPERAND_OPS and not dtype.startswith(("int", "uint", "bool")):
        raise ctx.error(f"{name} of {dtype} tensors: Relay's {name} takes integer or bool "
                        "tensors only")
    if name in BOOL_OPERAND_OPS and dtype != "bool":
        raise ctx.error(f"{name} of {dtype} tensors: Relay's {name} takes bool tensors only")
    if name == "sign" and dtype.startswith(("uint", "bool")):
        raise ctx.error(f"sign of {dtype} tensors: Relay's sign makes a -1 of the input's "
                        "type, which it cannot hold")


def _binary(relax_op, name: str):
    def convert(inputs, attrs, ctx):
        lhs, rhs = (known_dtype(x) for x in inputs)
        if lhs != rhs and lhs is not None and rhs is not None:
            # Relay's BroadcastRel / BroadcastCompRel (Relax would promote or pick one)
            raise ctx.error(f"data types {lhs} and {rhs} do not match")
        _check_operand_dtype(name, lhs or rhs, ctx)
        if name == "power" and lhs is not None and not lhs.startswith(("float", "bfloat")):
            # v0.19's tir pow: "power only applies to float" when Relay built it
            raise ctx.error(f"power of {lhs} tensors: Relay's power takes floats only")
        if name in DIVIDING_OPS:
            check_integer_divisor(inputs[1], ctx, inputs[0])
        if name == "subtract" and lhs is not None and lhs.startswith("uint"):
            zero = const_value(inputs[0])
            if zero is not None and not zero.any():
                # TVM 0.27's simplifier takes 0 - x of an unsigned type for 0 (see
                # _negative); adding the zeros back keeps their broadcast shape
                negated = _unsigned_negative(inputs[1])
                return negated if zero.ndim == 0 else relax.op.add(negated, inputs[0])
        if name in COMPARISONS and lhs == "bool":
            # Relay's bool was uint1, compared as an unsigned integer; TVM 0.27's LLVM
            # codegen compares bools as floats (and fails), so compare them as uint8
            return relax_op(*(relax.op.astype(x, "uint8") for x in inputs))
        return relax_op(inputs[0], inputs[1])

    return convert


def _unary(relax_op, name: str):
    def convert(inputs, attrs, ctx):
        _check_operand_dtype(name, known_dtype(inputs[0]), ctx)
        return relax_op(inputs[0])

    return convert


for _name, _op in BINARY_OPS.items():
    register_converter(_name)(_binary(_op, _name))
for _name, _op in UNARY_OPS.items():
    register_converter(_name)(_unary(_op, _name))


@register_converter("negative")
def _negative(inputs, attrs, ctx):
    """``-x``; of an unsigned integer ``0 - x`` wrapping around, as v0.19's ``neg``
    computed it.  Written ``~x + 1``: TVM 0.27's negation of an unsigned type needs a -1
    it cannot make, and its simplifier takes ``0 - x`` of a uint32 for 0 (it bounds
    unsigned values below by 0, so the difference must be 0)."""
    data = inputs[0]
    if dtype_of(data).startswith("uint"):
        return _unsigned_negative(data)
    return relax.op.negative(data)


def _unsigned_negative(data: relax.Expr) -> relax.Expr:
    return relax.op.add(relax.op.bitwise_not(data), relax.const(1, dtype_of(data)))


@register_converter("round")
def _round(inputs, attrs, ctx):
    """Relay's ``round``: v0.19's ``llvm.round`` (C's ``round``), halves away from zero
    and the sign of a zero kept (``1 / round(-0.0)`` is -inf).

    ``trunc(x - sign(-x) * h)``, ``h`` the float below 0.5: for x != 0 it is
    ``round_half_away``'s ``trunc(x + sign(x) * h)`` (exact for every value of the
    dtype), and a zero minus ``+0.0`` keeps its sign, where ``-0.0 + sign(-0.0) * h``
    is ``-0.0 + 0.0``, +0.0.  Integers are returned as they are."""
    x = ctx.emit(inputs[0])
    dtype = dtype_of(x)
    if not dtype.startswith(("float", "bfloat")):
        return x
    half = relax.const(below_half(dtype), dtype)
    offset = relax.op.multiply(relax.op.sign(relax.op.negative(x)), half)
    return relax.op.trunc(relax.op.subtract(x, offset))


@register_converter("fast_exp")
def _fast_exp(inputs, attrs, ctx):
    """Relay's FastMath ``exp``: for float32 v0.19's ``topi::fast_exp_float32``
    (include/tvm/topi/elemwise.h), plain ``exp`` for other dtypes (as v0.19's
    ``topi::fast_exp``).

    Its polynomial is not ``exp`` at the ends: the input is clamped to +-88.376, the
    power of two is built from exponent bits (``n`` = 128 at the upper clamp makes inf,
    ``n`` = -127 below x ~ -87.68 makes 0) and the result is ``max(2^n * P, x)``, so it
    is inf from x ~ 88.3763 on, 0 below -87.68, and NaN for NaN (the last select keeps
    x).  TVM 0.27's ``topi.fast_exp`` is the same TE (unchanged but for its types), so
    it is called (``call_te``), built as v0.19 built it (LLVM may fuse its multiply-adds):
    it runs on the host, and of a weight it is computed by that same function, not
    restated with NumPy by the weight folder."""
    data = inputs[0]
    if known_dtype(data) == "float32":
        return ctx.bb.call_te(topi.fast_exp, data, primfunc_name_hint="fast_exp")
    return relax.op.exp(data)


@register_converter("clip")
def _clip(inputs, attrs, ctx):
    low, high = float(attrs["a_min"]), float(attrs["a_max"])  # required
    dtype = known_dtype(inputs[0])
    if dtype is not None and is_integer_dtype(dtype):
        # v0.19's topi clip casts the bounds to the data's type; one the type cannot hold
        # was refused when Relay built it (TVM 0.27 fails the same way, with no op named)
        info = np.iinfo(dtype)
        for name, bound in (("a_min", low), ("a_max", high)):
            if not math.isfinite(bound):
                # v0.19's make_const of inf / NaN in an integer type: IntImm of the
                # int64 conversion, out of every narrower type's range (int64 took
                # INT64_MIN, the C++ conversion being undefined): refused here for all
                raise ctx.error(f"{name}={bound:g} is not a value of the input's type "
                                f"{dtype}: an integer clip takes finite bounds")
            if not info.min <= math.trunc(bound) <= info.max:
                raise ctx.error(f"{name}={bound:g} does not fit the input's type {dtype} "
                                f"([{info.min}, {info.max}])")
    largest = _FLOAT_MAX.get(dtype)
    for name, bound in (("a_min", low), ("a_max", high)):
        # v0.19's FloatImm refused a finite literal beyond the float type's range (inf and
        # NaN pass); TVM 0.27 fails the same way in codegen, naming no op.
        if largest is not None and math.isfinite(bound) and abs(bound) > largest:
            raise ctx.error(f"{name}={bound:g} is beyond the largest {dtype} ({largest:g}): "
                            "v0.19 could not make it a constant of the input's type")
    return relax.op.clip(inputs[0], low, high)


#: The largest finite value of each float type whose constants v0.19 range-checked.
_FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float32": float(np.finfo(np.float32).max)}


def _astype(data: relax.Expr, dtype: str) -> relax.Expr:
    """``data`` cast to ``dtype`` as v0.19's LLVM codegen cast: a float to ``bool`` was
    the ordered ``x != 0`` (``CreateFCmpONE``), so NaN is False; TVM 0.27 emits the
    unordered compare (NaN is True), while its ``not_equal`` is still the ordered one."""
    source = known_dtype(data)
    if str(dtype) == "bool" and source is not None and source.startswith(("float", "bfloat")):
        return relax.op.not_equal(data, relax.const(0, source))
    return relax.op.astype(data, dtype)


@register_converter("cast")
def _cast(inputs, attrs, ctx):
    return _astype(inputs[0], attrs["dtype"])  # required


@register_converter("cast_like")
def _cast_like(inputs, attrs, ctx):
    return _astype(inputs[0], dtype_of(inputs[1]))


@register_converter("where")
def _where(inputs, attrs, ctx):
    condition = inputs[0]
    dtype = known_dtype(condition)
    if dtype is not None and dtype != "bool":
        # Relay's WhereRel took a condition of any dtype and topi's where tests ``c != 0``;
        # Relax's where takes bool only
        condition = relax.op.not_equal(condition, relax.const(0, dtype))
    return relax.op.where(condition, inputs[1], inputs[2])


@register_converter("copy", "stop_gradient")
def _identity(inputs, attrs, ctx):
    # A value copy (or a gradient barrier) is the value itself in a pure dataflow graph.
    return inputs[0]


@register_converter("fast_erf")
def _fast_erf(inputs, attrs, ctx):
    """Relay's FastMath ``erf``: v0.19's ``fast_erf_float_expr`` (src/tir/op/op.cc) for
    float32 and float16, a rational function after a clamp ``max(min(x, 4), -4)``,
    selects a NaN does not pass: erf(NaN) was erf(4).

    float32: ``erf`` of that clamp (``clip``: topi's selects, the weight folder's too),
    1.0 for NaN; the rational function is erf within 2e-6 (bmlib's erf template is that
    function).  float16: the function computed in float16, each op rounded, is no erf
    (its smallest coefficients are 0 in float16; 1.041 at 4, and for NaN), so TVM
    0.27's ``topi.fast_erf``, the same TE, is called (``call_te``, on the host)."""
    data = inputs[0]
    dtype = known_dtype(data)
    if dtype == "float16":
        return ctx.bb.call_te(topi.fast_erf, data, primfunc_name_hint="fast_erf")
    if dtype == "float32":
        data = ctx.emit(relax.op.clip(data, -4.0, 4.0))
    return _erf([data], attrs, ctx)


@register_converter("erf")
def _erf(inputs, attrs, ctx):
    # LLVM has no half-precision erf: a float16 erf is computed in float32 (as Relay's
    # fp16 erf was accurate to float16) and rounded back.
    data = inputs[0]
    if dtype_of(data) == "float16":
        return relax.op.astype(relax.op.erf(relax.op.astype(data, "float32")), "float16")
    return relax.op.erf(data)
