"""Element-wise Relay ops: broadcasting binary arithmetic, unary math, clip, cast, where."""
from __future__ import annotations

import math

import numpy as np
from tvm import relax

from ..registry import register_converter
from ._utils import (
    check_integer_divisor, const_value, dtype_of, known_dtype, round_half_away,
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


def _binary(relax_op, name: str):
    def convert(inputs, attrs, ctx):
        lhs, rhs = (known_dtype(x) for x in inputs)
        if lhs != rhs and lhs is not None and rhs is not None:
            # Relay's BroadcastRel / BroadcastCompRel (Relax would promote or pick one)
            raise ctx.error(f"data types {lhs} and {rhs} do not match")
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


def _unary(relax_op):
    def convert(inputs, attrs, ctx):
        return relax_op(inputs[0])

    return convert


for _name, _op in BINARY_OPS.items():
    register_converter(_name)(_binary(_op, _name))
for _name, _op in UNARY_OPS.items():
    register_converter(_name)(_unary(_op))


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
    return round_half_away(inputs[0], ctx)


# v0.19's topi fast_exp_float32 clamps its input to these bounds first, so a large input
# gives ~2.4e38 (not inf) and a very negative one ~1e-38-scale values (not 0).
_FAST_EXP_BOUNDS = (-88.3762626647949, 88.3762626647950)


@register_converter("fast_exp")
def _fast_exp(inputs, attrs, ctx):
    """Relay's FastMath ``exp``: exact ``exp`` of the clamped input for float32 (the
    polynomial approximation differs from it by a few ulps), plain ``exp`` otherwise."""
    data = inputs[0]
    if dtype_of(data) == "float32":
        data = relax.op.clip(data, *_FAST_EXP_BOUNDS)
    return relax.op.exp(data)


@register_converter("clip")
def _clip(inputs, attrs, ctx):
    low, high = float(attrs["a_min"]), float(attrs["a_max"])  # required
    dtype = known_dtype(inputs[0])
    if dtype is not None and dtype.startswith(("int", "uint")):
        # v0.19's topi clip casts the bounds to the data's type; one the type cannot hold
        # was refused when Relay built it (TVM 0.27 fails the same way, with no op named)
        info = np.iinfo(dtype)
        for name, bound in (("a_min", low), ("a_max", high)):
            if math.isfinite(bound) and not info.min <= math.trunc(bound) <= info.max:
                raise ctx.error(f"{name}={bound:g} does not fit the input's type {dtype} "
                                f"([{info.min}, {info.max}])")
    return relax.op.clip(inputs[0], low, high)


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


@register_converter("erf", "fast_erf")
def _erf(inputs, attrs, ctx):
    # LLVM has no half-precision erf: a float16 erf is computed in float32 (as Relay's
    # fp16 erf was accurate to float16) and rounded back.
    data = inputs[0]
    if dtype_of(data) == "float16":
        return relax.op.astype(relax.op.erf(relax.op.astype(data, "float32")), "float16")
    return relax.op.erf(data)
