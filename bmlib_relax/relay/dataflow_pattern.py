"""Relay's DFPattern API, so legacy pattern tables run unchanged.

A Relay BYOC backend described its composites with
``tvm.relay.dataflow_pattern``: ``is_op("nn.relu")(wildcard())`` and friends.
These classes record the same pattern trees with the same names and operator
overloads; :mod:`bmlib_relax.backend.legacy_patterns` translates them to Relax
DPL (``tvm.relax.dpl``).  After ``from bmlib_relax.relay.dataflow_pattern import *``
a legacy ``pattern_table()`` runs verbatim.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

__all__ = [
    "DFPattern", "WildcardPattern", "ExprPattern", "VarPattern", "ConstantPattern",
    "CallPattern", "FunctionPattern", "TuplePattern", "TupleGetItemPattern", "AltPattern",
    "AttrPattern", "TypePattern", "ShapePattern", "DataTypePattern", "DominatorPattern",
    "wildcard", "is_op", "is_constant", "is_var", "is_expr", "is_tuple",
    "is_tuple_get_item", "has_attr", "has_type", "has_shape", "has_dtype", "dominates",
]


class DFPattern:
    """Base of legacy Relay dataflow patterns (records structure only)."""

    def __call__(self, *args: "DFPattern") -> "CallPattern":
        return CallPattern(self, tuple(_as_pattern(a) for a in args))

    def __or__(self, other: "DFPattern") -> "AltPattern":
        return AltPattern(self, _as_pattern(other))

    def has_attr(self, attrs: dict[str, Any]) -> "AttrPattern":
        return AttrPattern(self, dict(attrs))

    def has_type(self, ttype: Any) -> "TypePattern":
        return TypePattern(self, ttype)

    def has_dtype(self, dtype: str) -> "DataTypePattern":
        return DataTypePattern(self, str(dtype))

    def has_shape(self, shape: Sequence[int]) -> "ShapePattern":
        return ShapePattern(self, tuple(int(s) for s in shape))

    def optional(self, option_constructor) -> "AltPattern":
        """``p.optional(f)`` matches ``f(p)`` or ``p`` alone, like Relay."""
        return AltPattern(option_constructor(self), self)

    def dominates(self, parent: "DFPattern", path: Optional["DFPattern"] = None):
        return DominatorPattern(parent, path or wildcard(), self)

    # ``a * b`` is ``is_op("multiply")(a, b)``, as in Relay (dnnl's qnn patterns use it).
    def __add__(self, other): return is_op("add")(self, other)  # noqa: E704
    def __sub__(self, other): return is_op("subtract")(self, other)  # noqa: E704
    def __mul__(self, other): return is_op("multiply")(self, other)  # noqa: E704
    def __truediv__(self, other): return is_op("divide")(self, other)  # noqa: E704

    # Relay patterns are compared by identity, like the Relay objects were.
    __hash__ = object.__hash__


def _as_pattern(value: Any) -> DFPattern:
    if isinstance(value, DFPattern):
        return value
    return ExprPattern(value)


@dataclass(eq=False)
class WildcardPattern(DFPattern):
    pass


@dataclass(eq=False)
class ExprPattern(DFPattern):
    expr: Any


@dataclass(eq=False)
class VarPattern(DFPattern):
    name_hint: str = ""


@dataclass(eq=False)
class ConstantPattern(DFPattern):
    pass


@dataclass(eq=False)
class OpPattern(DFPattern):
    """``is_op(name)``; calling it makes a :class:`CallPattern`."""

    name: str


@dataclass(eq=False)
class CallPattern(DFPattern):
    op: DFPattern
    args: Optional[tuple[DFPattern, ...]]


@dataclass(eq=False)
class FunctionPattern(DFPattern):
    params: Optional[tuple[DFPattern, ...]]
    body: DFPattern


@dataclass(eq=False)
class TuplePattern(DFPattern):
    fields: Optional[tuple[DFPattern, ...]]


@dataclass(eq=False)
class TupleGetItemPattern(DFPattern):
    tuple_value: DFPattern
    index: Optional[int] = None


@dataclass(eq=False)
class AltPattern(DFPattern):
    left: DFPattern
    right: DFPattern


@dataclass(eq=False)
class AttrPattern(DFPattern):
    pattern: DFPattern
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class TypePattern(DFPattern):
    pattern: DFPattern
    type: Any


@dataclass(eq=False)
class ShapePattern(DFPattern):
    pattern: DFPattern
    shape: tuple[int, ...]


@dataclass(eq=False)
class DataTypePattern(DFPattern):
    pattern: DFPattern
    dtype: str


@dataclass(eq=False)
class DominatorPattern(DFPattern):
    parent: DFPattern
    path: DFPattern
    child: DFPattern


def wildcard() -> WildcardPattern:
    return WildcardPattern()


def is_op(op_name: str) -> OpPattern:
    return OpPattern(str(op_name))


def is_constant() -> ConstantPattern:
    return ConstantPattern()


def is_var(name: str = "") -> VarPattern:
    return VarPattern(name)


def is_expr(expr: Any) -> ExprPattern:
    return ExprPattern(expr)


def is_tuple(fields: Optional[Sequence[DFPattern]]) -> TuplePattern:
    return TuplePattern(None if fields is None else tuple(_as_pattern(f) for f in fields))


def is_tuple_get_item(tuple_value: DFPattern, index: Optional[int] = None) -> TupleGetItemPattern:
    return TupleGetItemPattern(_as_pattern(tuple_value), index)


def has_attr(attrs: dict[str, Any], pattern: Optional[DFPattern] = None) -> AttrPattern:
    return AttrPattern(pattern or wildcard(), dict(attrs))


def has_type(ttype: Any, pattern: Optional[DFPattern] = None) -> TypePattern:
    return TypePattern(pattern or wildcard(), ttype)


def has_dtype(dtype: str, pattern: Optional[DFPattern] = None) -> DataTypePattern:
    return DataTypePattern(pattern or wildcard(), str(dtype))


def has_shape(shape: Sequence[int], pattern: Optional[DFPattern] = None) -> ShapePattern:
    return ShapePattern(pattern or wildcard(), tuple(int(s) for s in shape))


def dominates(parent: DFPattern, path: DFPattern, child: DFPattern) -> DominatorPattern:
    return DominatorPattern(parent, path, child)
