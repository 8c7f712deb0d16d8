"""Element-wise Relay ops: broadcasting binary arithmetic and unary math."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter

# Relay op name -> Relax op; Relay and Relax share broadcasting semantics here.
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
}

UNARY_OPS = {
    "negative": relax.op.negative,
    "abs": relax.op.abs,
    "sqrt": relax.op.sqrt,
    "rsqrt": relax.op.rsqrt,
    "exp": relax.op.exp,
    "log": relax.op.log,
    "erf": relax.op.erf,
    "sigmoid": relax.op.sigmoid,
    "tanh": relax.op.tanh,
    "floor": relax.op.floor,
    "ceil": relax.op.ceil,
    "round": relax.op.round,
    "sign": relax.op.sign,
    "sin": relax.op.sin,
    "cos": relax.op.cos,
    "logical_not": relax.op.logical_not,
    "nn.relu": relax.op.nn.relu,
}


def _binary(relax_op):
    def convert(inputs, attrs, ctx):
        return relax_op(inputs[0], inputs[1])

    return convert


def _unary(relax_op):
    def convert(inputs, attrs, ctx):
        return relax_op(inputs[0])

    return convert


for _name, _op in BINARY_OPS.items():
    register_converter(_name)(_binary(_op))
for _name, _op in UNARY_OPS.items():
    register_converter(_name)(_unary(_op))
