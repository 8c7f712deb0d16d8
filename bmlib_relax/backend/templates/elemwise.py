"""Element-wise templates: broadcasting binary arithmetic and unary math."""
from __future__ import annotations

from tvm import topi

from .registry import register_template

BINARY = {
    "relax.add": topi.add,
    "relax.subtract": topi.subtract,
    "relax.multiply": topi.multiply,
    "relax.divide": topi.divide,
    "relax.maximum": topi.maximum,
    "relax.minimum": topi.minimum,
    "relax.power": topi.power,
}

UNARY = {
    "relax.nn.relu": topi.nn.relu,
    "relax.sigmoid": topi.sigmoid,
    "relax.tanh": topi.tanh,
    "relax.exp": topi.exp,
    "relax.sqrt": topi.sqrt,
    "relax.rsqrt": topi.rsqrt,
    "relax.negative": topi.negative,
    "relax.abs": topi.abs,
    "relax.erf": topi.erf,
}


def _binary(fn):
    def template(call, inputs, ctx):
        return fn(inputs[0], inputs[1])

    return template


def _unary(fn):
    def template(call, inputs, ctx):
        return fn(inputs[0])

    return template


for _name, _fn in BINARY.items():
    register_template(_name)(_binary(_fn))
for _name, _fn in UNARY.items():
    register_template(_name)(_unary(_fn))
