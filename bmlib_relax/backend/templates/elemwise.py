"""Element-wise templates: broadcasting binary arithmetic, unary math, activations, casts."""
from __future__ import annotations

import math

from tvm import te, tirx, topi

from ._utils import prim_value
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
    "relax.log": topi.log,
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


@register_template("relax.nn.leakyrelu")
def leakyrelu(call, inputs, ctx):
    return topi.nn.leaky_relu(inputs[0], float(call.attrs.alpha))


@register_template("relax.clip")
def clip(call, inputs, ctx):
    # min/max arrive as PrimValue operands, not attributes.
    return topi.clip(inputs[0], prim_value(call.args[1]), prim_value(call.args[2]))


@register_template("relax.nn.silu")
def silu(call, inputs, ctx):
    return topi.multiply(inputs[0], topi.sigmoid(inputs[0]))


@register_template("relax.nn.gelu")
def gelu(call, inputs, ctx):
    x = inputs[0]

    def compute(*idx):
        v = x[idx]
        half = tirx.const(0.5, x.dtype)
        return v * half * (tirx.const(1.0, x.dtype) + tirx.erf(v * tirx.const(math.sqrt(0.5),
                                                                              x.dtype)))

    return te.compute(x.shape, compute, name="gelu")


@register_template("relax.astype")
def astype(call, inputs, ctx):
    return topi.cast(inputs[0], str(call.attrs.dtype))
