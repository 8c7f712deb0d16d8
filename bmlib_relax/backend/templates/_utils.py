"""Helpers shared by templates."""
from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm.sym.analyzer import Analyzer

from ...dims import static_dim  # noqa: F401  (re-exported to the templates)


def attr_ints(value: Any) -> list[int]:
    return [int(v) for v in value]


def dims(shape: Sequence[Any]) -> list[Any]:
    """A shape as templates use it: static dims as ints, symbolic ones (a free batch or
    sequence length, ``tir.Var`` or an expression of them) kept as PrimExprs."""
    return [d if static_dim(d) is None else static_dim(d) for d in shape]


def same_dim(a: Any, b: Any) -> bool:
    """Two dims are provably equal: equal ints, or the same symbolic expression."""
    sa, sb = static_dim(a), static_dim(b)
    if sa is not None or sb is not None:
        return sa == sb
    if a.same_as(b):
        return True
    a, b = (d if str(d.ty) == "int64" else d.astype("int64") for d in (a, b))
    return bool(Analyzer().can_prove_equal(a, b))


def same_shape(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


def result_shape(call) -> list[Any]:
    """The shape of a call's result from its Relax type (symbolic dims kept)."""
    return dims(call.ty.shape.values)


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
