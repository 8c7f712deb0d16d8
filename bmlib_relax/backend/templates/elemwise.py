"""Element-wise templates: broadcasting binary arithmetic, unary math, activations, casts.

Every one takes symbolic dims (a free batch or sequence length): they are one TE
compute over the output shape, whatever its dims are (``symbolic_dims=True``).
"""
from __future__ import annotations

import math

from tvm import te, tirx, topi

from ._utils import elementwise_template, prim_value
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
    "relax.sigmoid": lambda x: sigmoid(x),
    "relax.tanh": lambda x: tanh(x),
    "relax.exp": topi.exp,
    "relax.log": topi.log,
    "relax.sqrt": topi.sqrt,
    "relax.rsqrt": topi.rsqrt,
    "relax.negative": topi.negative,
    "relax.abs": topi.abs,
    "relax.erf": lambda x: erf(x),
}


def erf(x):
    """``erf`` of a tensor: for float32 TVM's rational ``fast_erf`` (a few ulp from
    ``erff``, exact 1 beyond |x| = 4), which vectorizes; ``T.erf`` lowers to one scalar
    ``erff`` call per element (a GELU epilogue of a 128x768x3072 dense took as long
    as the dense)."""
    return topi.fast_erf(x) if str(x.dtype) == "float32" else topi.erf(x)


def sigmoid(x):
    """``1 / (1 + exp(-x))``: for float32 through TVM's polynomial ``fast_exp`` (relative
    error ~1e-6 where ``exp(-x)`` is large, 0 and 1 at the ends, NaN kept), which
    vectorizes.  ``T.sigmoid`` lowers to one scalar ``expf`` call per element: the
    swish epilogues of an EfficientNet took 4-5 ns per element, 2.7x the whole model's
    time in ONNX Runtime."""
    if str(x.dtype) != "float32":
        return topi.sigmoid(x)
    exp = topi.fast_exp(topi.negative(x))
    one = tirx.const(1.0, "float32")
    return te.compute(x.shape, lambda *i: one / (one + exp[i]), name="T_sigmoid")


def tanh(x):
    """``tanh``: for float32 TVM's rational ``fast_tanh`` (a few ulp, exact +-1 beyond
    |x| = 9), which vectorizes; ``T.tanh`` lowers to two scalar ``expf`` calls per
    element."""
    return topi.fast_tanh(x) if str(x.dtype) == "float32" else topi.tanh(x)




for _name, _fn in BINARY.items():
    register_template(_name, symbolic_dims=True)(elementwise_template(_fn))
for _name, _fn in UNARY.items():
    register_template(_name, symbolic_dims=True)(elementwise_template(_fn))


@register_template("relax.nn.leakyrelu", symbolic_dims=True)
def leakyrelu(call, inputs, ctx):
    return topi.nn.leaky_relu(inputs[0], float(call.attrs.alpha))


@register_template("relax.clip", symbolic_dims=True)
def clip(call, inputs, ctx):
    # min/max arrive as PrimValue operands, not attributes.
    return topi.clip(inputs[0], prim_value(call.args[1]), prim_value(call.args[2]))


@register_template("relax.nn.silu", symbolic_dims=True)
def silu(call, inputs, ctx):
    return topi.multiply(inputs[0], sigmoid(inputs[0]))


@register_template("relax.nn.gelu", symbolic_dims=True)
def gelu(call, inputs, ctx):
    x = inputs[0]
    scaled = te.compute(x.shape, lambda *i: x[i] * tirx.const(math.sqrt(0.5), x.dtype),
                        name="gelu_scaled")
    erf_x = erf(scaled)

    def compute(*idx):
        half = tirx.const(0.5, x.dtype)
        return x[idx] * half * (tirx.const(1.0, x.dtype) + erf_x[idx])

    return te.compute(x.shape, compute, name="gelu")


@register_template("relax.astype", symbolic_dims=True)
def astype(call, inputs, ctx):
    return topi.cast(inputs[0], str(call.attrs.dtype))


# Unary math beyond the activations: trigonometry and rounding.
MATH = {
    "relax.cos": topi.cos, "relax.sin": topi.sin, "relax.tan": topi.tan,
    # cosh/sinh through exp: LLVM has no vector intrinsic for them
    "relax.cosh": lambda x: _hyperbolic(x, 1.0), "relax.sinh": lambda x: _hyperbolic(x, -1.0),
    "relax.acos": topi.acos,
    "relax.asin": topi.asin, "relax.atan": topi.atan, "relax.acosh": topi.acosh,
    "relax.asinh": topi.asinh, "relax.atanh": topi.atanh, "relax.ceil": topi.ceil,
    "relax.floor": topi.floor, "relax.round": topi.round, "relax.trunc": topi.trunc,
    "relax.sign": topi.sign, "relax.square": lambda x: topi.multiply(x, x),
}
def _hyperbolic(x, sign: float):
    """(exp(x) + sign * exp(-x)) / 2: cosh for sign 1, sinh for sign -1."""
    def compute(*idx):
        v = x[idx]
        half = tirx.const(0.5, x.dtype)
        return half * (tirx.exp(v) + tirx.const(sign, x.dtype) * tirx.exp(-v))

    return te.compute(x.shape, compute, name="hyperbolic")


for _name, _fn in MATH.items():
    register_template(_name, symbolic_dims=True)(elementwise_template(_fn))


@register_template("relax.nn.prelu", symbolic_dims=True)
def prelu(call, inputs, ctx):
    return topi.nn.prelu(inputs[0], inputs[1], int(call.attrs.axis))
