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
    return value if value is not None else str(dim)
