"""Static or symbolic: the one test for a shape dim of a Relax/TIR type.

A static dim is an ``int`` or a ``tvm.tirx.IntImm``.  Everything else is symbolic: a
``tir.Var`` (a free batch), or an expression of such vars, e.g. the ``cast(H) * 2``
a dynamic-size ONNX ``Resize`` gives.  ``hasattr(d, "value")`` is *not* this test:
``tir.Cast`` (and ``tir.Let``, ``tir.Broadcast``...) have a ``value`` field too, so
``cast(H)`` passed for static and ``int(d.value)`` then failed with a raw
``TypeError`` (or, in printing code, showed the inner expression as the dim).

Relay's own dims (``bmlib_relax.relay.ast.Dim`` / ``Any``) are not TVM PrimExprs;
the Relay layer keeps its own tests for those.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import tvm


def static_dim(dim: Any) -> Optional[int]:
    """The value of a static dim (``int`` or ``IntImm``), None for a symbolic one."""
    if isinstance(dim, int):
        return int(dim)
    if isinstance(dim, tvm.tirx.IntImm):
        return int(dim.value)
    return None


def is_static_dim(dim: Any) -> bool:
    """``dim`` is an ``int`` or an ``IntImm`` (not a var or an expression of vars)."""
    return isinstance(dim, (int, tvm.tirx.IntImm))


def all_static(dims: Iterable[Any]) -> bool:
    """Every dim of ``dims`` is static."""
    return all(is_static_dim(d) for d in dims)


def static_dims(dims: Iterable[Any]) -> Optional[list[int]]:
    """``dims`` as ints when every one is static, else None."""
    values = [static_dim(d) for d in dims]
    return None if any(v is None for v in values) else values


def dim_or_text(dim: Any) -> Any:
    """A dim for messages and reports: its int when static, else its text."""
    value = static_dim(dim)
    return value if value is not None else dim_text(dim)


#: Infix TIR operators: (symbol, precedence).
_INFIX = {"Add": ("+", 1), "Sub": ("-", 1), "Mul": ("*", 2), "Div": ("/", 2),
          "FloorDiv": ("//", 2), "FloorMod": ("%", 2)}


def dim_text(dim: Any) -> str:
    """A symbolic dim as a reader writes it: ``int(h * 2.0)``, ``n // 2 + 1``.

    TVM's own text is TVMScript (``T.Cast("int64", T.floor(T.Cast("float32", h) *
    T.float32(2.0)))``): the casts and ``T.`` prefixes say nothing about the size.
    """
    text, _ = _dim_text(dim)
    return text


def _dim_text(expr: Any) -> tuple[str, int]:
    """``expr``'s text and its precedence (3: needs no parentheses)."""
    tirx = tvm.tirx
    kind = type(expr).__name__
    if isinstance(expr, int) or isinstance(expr, tvm.tirx.IntImm):
        return str(int(expr)), 3
    if isinstance(expr, tirx.FloatImm):
        return repr(float(expr.value)), 3
    if isinstance(expr, tirx.Var):
        return expr.name, 3
    if isinstance(expr, tirx.Cast):
        if "int" in str(expr.ty) and "float" in str(expr.value.ty):
            return f"int({_dim_text(expr.value)[0]})", 3  # truncates: say so
        return _dim_text(expr.value)
    if kind in _INFIX:
        symbol, level = _INFIX[kind]
        lhs, lhs_level = _dim_text(expr.a)
        rhs, rhs_level = _dim_text(expr.b)
        lhs = lhs if lhs_level >= level else f"({lhs})"
        rhs = rhs if rhs_level > level else f"({rhs})"
        return f"{lhs} {symbol} {rhs}", level
    if kind in ("Min", "Max"):
        return f"{kind.lower()}({_dim_text(expr.a)[0]}, {_dim_text(expr.b)[0]})", 3
    if kind == "Call" and isinstance(getattr(expr, "op", None), tvm.ir.Op):
        name = expr.op.name.rsplit(".", 1)[-1]
        return f"{name}({', '.join(_dim_text(a)[0] for a in expr.args)})", 3
    return str(expr), 3
