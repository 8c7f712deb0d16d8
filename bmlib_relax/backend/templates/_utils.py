"""Helpers shared by templates."""
from __future__ import annotations

from typing import Any

import tvm


def attr_ints(value: Any) -> list[int]:
    return [int(v) for v in value]


def shape_values(expr) -> list[int]:
    """Static values of a Relax ``ShapeExpr`` argument."""
    return [int(v) for v in expr.values]


def prim_value(expr) -> Any:
    """The Python value of a Relax ``PrimValue`` argument."""
    value = expr.value
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    if isinstance(value, tvm.tirx.FloatImm):
        return float(value.value)
    return value


def out_dtype(attrs, default: str) -> str:
    """An op's ``out_dtype`` attribute, or ``default`` when it is unset."""
    value = getattr(attrs, "out_dtype", None)
    text = "" if value is None else str(value)
    return default if text in ("", "void", "None") else text


def elementwise_template(fn) -> Any:
    """The template of an op that is one TOPI call on its tensor operands in order
    (``topi.add(a, b)``, ``topi.erf(x)``, ``topi.less(a, b)`` ...)."""
    def template(call, inputs, ctx):
        return fn(*inputs)

    return template
