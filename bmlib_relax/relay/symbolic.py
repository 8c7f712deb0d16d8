"""Symbolic shape dims (``te.var("n")``, ``n + 2``) in Relay types.

Relay let a tensor dim be any integer TIR expression.  bmlib-relax stores such
a dim as the TVM expression the user gave and needs three things from it:

* equality the way Relay's structural equality saw it (``t + t`` equals the
  ``t * 2`` that Relax's inference produces): :func:`dims_equal`, proved with
  TVM's arithmetic analyzer;
* an int64 twin for Relax, whose shapes only take int64 (``te.var`` makes
  int32 vars): :class:`DimMap.to_relax`;
* the way back, so an inferred type names the user's own vars:
  :class:`DimMap.from_relax`.

TVM is imported lazily: the parser and printer never need it.
"""
from __future__ import annotations

from typing import Any, Optional


def _is_prim(value: Any) -> bool:
    return hasattr(value, "ty") and not isinstance(value, (int, str)) and value is not None


def _dtype(expr: Any) -> str:
    return str(expr.ty)


def dims_equal(a: Any, b: Any) -> bool:
    """Whether two symbolic dims are provably equal (Relay's structural equality, modulo
    simplification)."""
    import tvm

    if not (_is_prim(a) and _is_prim(b)):
        return False
    if a.same_as(b):
        return True
    if _dtype(a) != _dtype(b):
        mapping = DimMap()
        a, b = mapping.to_relax(a), mapping.to_relax(b)
    try:
        return bool(tvm.sym.Analyzer().can_prove_equal(a, b))
    except Exception:  # noqa: BLE001 - incomparable expressions are simply unequal
        return False


_BINARY = ("Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Mod", "Min", "Max")


class DimMap:
    """Translates symbolic dims between the user's vars and Relax's int64 vars (both ways).

    One map per type-inference run: the same user var always maps to the same
    int64 var, so Relax sees ``n`` in two inputs as one dim.
    """

    def __init__(self) -> None:
        self._to_relax: dict = {}
        self._from_relax: dict = {}

    def fresh(self, name: str = "any") -> Any:
        """A new int64 dim var for a ``?`` dim; it maps back to ``None``."""
        import tvm

        var = tvm.tirx.Var(name, "int64")
        self._from_relax[var] = None
        return var

    def to_relax(self, dim: Any) -> Any:
        return self._translate(dim, "int64", self._to_relax, self._from_relax)

    def from_relax(self, dim: Any) -> Any:
        """A Relax dim as a Relay dim: int, ``None`` for a fresh ``?`` var, else the user's expr."""
        import tvm

        if isinstance(dim, tvm.tirx.IntImm) or type(dim).__name__ == "IntImm":
            return int(dim.value)
        if type(dim).__name__ == "Var" and dim in self._from_relax:
            return self._from_relax[dim]
        if type(dim).__name__ == "Cast" and type(dim.value).__name__ in ("Var", "SizeVar") \
                and dim.value not in self._from_relax:
            return dim.value  # a user's int32 var taken from an attribute (resize's size)
        if any(v is None for v in self._from_relax.values()) and self._mentions_any(dim):
            return None
        back = self._translate_back(dim)
        return back if back is not None else dim

    def _mentions_any(self, dim: Any) -> bool:
        import tvm

        try:
            free = tvm.tirx.analysis.undefined_vars(dim)
        except Exception:  # noqa: BLE001 - not a TIR expression: mentions nothing
            return False
        return any(v in self._from_relax and self._from_relax[v] is None for v in free)

    def _translate_back(self, dim: Any) -> Optional[Any]:
        """Rebuild ``dim`` over the user's vars (their dtype); ``None`` if not possible."""
        # (a dim written as a name, "n", stays a name: not rebuilt into expressions)
        reverse = {k: v for k, v in self._from_relax.items() if _is_prim(v)}
        dtypes = {_dtype(v) for v in reverse.values()}
        if len(dtypes) != 1:
            return None
        target = dtypes.pop()
        try:
            return self._translate(dim, target, reverse, None)
        except Exception:  # noqa: BLE001
            return None

    @staticmethod
    def _translate(dim: Any, dtype: str, table: dict, reverse: Optional[dict]) -> Any:
        import tvm
        from tvm.ir.prim import expr as E

        def walk(node: Any) -> Any:
            if isinstance(node, int):
                return tvm.tirx.IntImm(dtype, node)
            name = type(node).__name__
            if name == "IntImm":
                return tvm.tirx.IntImm(dtype, int(node.value))
            if name in ("Var", "SizeVar"):
                got = table.get(node)
                if got is None:
                    if reverse is None:
                        raise KeyError(node)
                    got = node if _dtype(node) == dtype else tvm.tirx.Var(node.name, dtype)
                    table[node] = got
                    reverse[got] = node
                return got
            if name in _BINARY:
                return getattr(E, name)(walk(node.a), walk(node.b))
            if name == "Cast":
                return walk(node.value)
            raise TypeError(f"symbolic dim {node} ({name}) is not supported")

        return walk(dim)
