"""Templates for the integer ops of imported QNN arithmetic (issue #18).

The importer writes Relay's QNN canonicalization as plain Relax ops; the ones
the float templates do not cover are the fixed-point requantize steps
(``left_shift``/``right_shift`` in int64, ``where(x >= 0, ...)`` for
``TONEAREST``) and quantize's ``round``.  Each is TOPI's own
element-wise compute, so the integer semantics are TVM's (arithmetic right
shift, round half to even), the same as the plain build's.
"""
from __future__ import annotations

from tvm import topi

from .registry import register_template

_ELEMENTWISE = {
    "relax.left_shift": topi.left_shift,
    "relax.right_shift": topi.right_shift,
    "relax.greater_equal": topi.greater_equal,
}
_UNARY = {"relax.round": topi.round}


def _binary(fn):
    def template(call, inputs, ctx):
        return fn(inputs[0], inputs[1])

    return template


def _unary(fn):
    def template(call, inputs, ctx):
        return fn(inputs[0])

    return template


for _name, _fn in _ELEMENTWISE.items():
    register_template(_name)(_binary(_fn))
for _name, _fn in _UNARY.items():
    register_template(_name)(_unary(_fn))


@register_template("relax.where")
def where(call, inputs, ctx):
    return topi.where(inputs[0], inputs[1], inputs[2])
