"""Element-wise Relay ops: broadcasting binary arithmetic, unary math, clip, cast, where."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import check_integer_divisor, dtype_of, known_dtype

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
    "negative": relax.op.negative,
    "abs": relax.op.abs,
    "sqrt": relax.op.sqrt,
    "rsqrt": relax.op.rsqrt,
    "exp": relax.op.exp,
    "log": relax.op.log,
    "sigmoid": relax.op.sigmoid,
    "tanh": relax.op.tanh,
    "floor": relax.op.floor,
    "ceil": relax.op.ceil,
    "round": relax.op.round,
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
    # FastMath rewrites: the same functions with cheaper approximations in Relay.
    "fast_exp": relax.op.exp,
    "fast_tanh": relax.op.tanh,
}


# Their integer forms divide by the second operand (see check_integer_divisor).
DIVIDING_OPS = {"divide", "floor_divide", "floor_mod"}


def _binary(relax_op, name: str):
    def convert(inputs, attrs, ctx):
        lhs, rhs = (known_dtype(x) for x in inputs)
        if lhs != rhs and lhs is not None and rhs is not None:
            # Relay's BroadcastRel / BroadcastCompRel (Relax would promote or pick one)
            raise ctx.error(f"data types {lhs} and {rhs} do not match")
        if name in DIVIDING_OPS:
            check_integer_divisor(inputs[1], ctx, inputs[0])
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


@register_converter("clip")
def _clip(inputs, attrs, ctx):
    return relax.op.clip(inputs[0], float(attrs["a_min"]), float(attrs["a_max"]))  # required


@register_converter("cast")
def _cast(inputs, attrs, ctx):
    return relax.op.astype(inputs[0], attrs["dtype"])  # required


@register_converter("cast_like")
def _cast_like(inputs, attrs, ctx):
    return relax.op.astype(inputs[0], dtype_of(inputs[1]))


@register_converter("where")
def _where(inputs, attrs, ctx):
    return relax.op.where(inputs[0], inputs[1], inputs[2])


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
