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
    """``erf`` of a tensor: for float32 the rational approximation TVM's ``fast_erf``
    uses (a few ulp from ``erff``, exact +-1 beyond |x| = 4), which vectorizes;
    ``T.erf`` lowers to one scalar ``erff`` call per element (a GELU epilogue of a
    128x768x3072 dense took as long as the dense).

    Written here rather than called because ``fast_erf`` clamps with min/max, which
    turn a NaN into the bound (erf(NaN) was 1).  The clamp here is a select, which a
    NaN falls through, and it is one block reading ``x`` once per element: a second
    block checking for NaN would give ``x`` two consumers and end a matmul's epilogue
    chain (``inline_epilogue``) before the GELU."""
    if str(x.dtype) != "float32":
        return topi.erf(x)

    def compute(*idx):
        v = x[idx]
        four = tirx.const(4.0, "float32")
        c = tirx.Select(v > four, four, tirx.Select(v < -four, -four, v))
        return c * _poly(c * c, _ERF_NUMERATOR) / _poly(c * c, _ERF_DENOMINATOR)

    return te.compute(x.shape, compute, name="T_fast_erf", tag="elemwise")


# erf(c) ~= c * P(c^2) / Q(c^2) on [-4, 4], highest power first: the float32
# rational approximation of Eigen's and TVM's fast_erf.
_ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                  -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                  -1.60960333262415e-02)
_ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                    -7.37332916720468e-03, -1.42647390514189e-02)


def _poly(v, coefficients):
    """Horner's rule over ``coefficients`` (highest power first) at ``v``."""
    acc = tirx.const(coefficients[0], "float32")
    for c in coefficients[1:]:
        acc = acc * v + tirx.const(c, "float32")
    return acc


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
    """cosh (sign 1) or sinh (sign -1) through ``exp``: LLVM has no vector intrinsic
    for them.

    ``(exp(x) +- exp(-x)) / 2`` overflows where the result does not (``exp(89)`` is
    inf, ``cosh(89)`` is 2.2e38) and, for sinh, cancels to a few percent of error
    near 0.  So ``e^|x| / 2`` is formed as ``(exp(|x|/2) / 2) * exp(|x|/2)`` (finite
    wherever the result is), the small term is ``1/4`` over it, and sinh of
    |x| < 0.5 is its Taylor series to x^7 (relative error < 1e-8)."""
    def compute(*idx):
        v = x[idx]
        dt = x.dtype
        magnitude = tirx.Select(v < tirx.const(0, dt), -v, v)
        root = tirx.exp(magnitude * tirx.const(0.5, dt))
        big = root * tirx.const(0.5, dt) * root
        small = tirx.const(0.25, dt) / big
        if sign > 0:
            return big + small
        v2 = v * v
        series = v + v * v2 * (tirx.const(1 / 6, dt) + v2 * (
            tirx.const(1 / 120, dt) + v2 * tirx.const(1 / 5040, dt)))
        signed = tirx.Select(v < tirx.const(0, dt), small - big, big - small)
        return tirx.Select(magnitude < tirx.const(0.5, dt), series, signed)

    return te.compute(x.shape, compute, name="hyperbolic")


for _name, _fn in MATH.items():
    register_template(_name, symbolic_dims=True)(elementwise_template(_fn))


@register_template("relax.nn.prelu", symbolic_dims=True)
def prelu(call, inputs, ctx):
    return topi.nn.prelu(inputs[0], inputs[1], int(call.attrs.axis))
