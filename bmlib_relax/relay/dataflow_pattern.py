"""Relay's DFPattern language on bmlib-relax's Relay AST: build, match, partition, rewrite.

A Relay BYOC backend described its composites with
``tvm.relay.dataflow_pattern``: ``is_op("nn.relu")(wildcard())`` and friends.
The classes here record the same pattern trees with the same names, fields and
operator overloads, and behave as Relay's did:

* ``pattern.match(expr)`` (:mod:`.pattern_matcher`): commutative ``add``/``multiply``,
  the multiply/divide re-association, shared sub-patterns bound to one node,
  op attributes (``TOpPattern``), call and function attributes, inferred types,
  dominator patterns;
* ``pattern.partition(expr, attrs, check)`` and ``rewrite(callbacks, expr)``
  (:mod:`.pattern_partition`): functions tagged ``PartitionedFromPattern``, the
  overlap and escaping-intermediate rules, rewriting to a fixed point.

:mod:`bmlib_relax.backend.legacy_patterns` also translates these trees to Relax
DPL (``tvm.relax.dpl``), so after ``from bmlib_relax.relay.dataflow_pattern import *``
a legacy ``pattern_table()`` runs verbatim.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from . import ast
from .op.op import get  # also makes ``relay.op.op.get`` available, as in Relay
from .pattern_op_attrs import UnknownOpError  # noqa: F401 - raised by get(); importable here

__all__ = [
    "DFPattern", "WildcardPattern", "ExprPattern", "VarPattern", "ConstantPattern",
    "CallPattern", "FunctionPattern", "TuplePattern", "TupleGetItemPattern", "AltPattern",
    "AttrPattern", "TypePattern", "ShapePattern", "DataTypePattern", "DominatorPattern",
    "IfPattern", "LetPattern", "OpPattern", "DFPatternCallback",
    "wildcard", "is_op", "is_constant", "is_var", "is_expr", "is_tuple",
    "is_tuple_get_item", "is_if", "is_let", "has_attr", "has_type", "has_shape", "has_dtype",
    "dominates", "match", "partition", "rewrite",
]


class DFPattern:
    """Base of Relay dataflow patterns."""

    def __call__(self, *args: Any) -> "CallPattern":
        # ``p(None)`` matches a call with any arguments, as in Relay.
        if len(args) == 1 and args[0] is None:
            return CallPattern(self, None)
        return CallPattern(self, tuple(_as_pattern(a) for a in args))

    def __or__(self, other: Any) -> "AltPattern":
        return AltPattern(self, _as_pattern(other))

    # Pattern arithmetic builds the call patterns of Relay's Python operators.
    def __add__(self, other: Any) -> "CallPattern":
        return is_op("add")(self, other)

    def __sub__(self, other: Any) -> "CallPattern":
        return is_op("subtract")(self, other)

    def __mul__(self, other: Any) -> "CallPattern":
        return is_op("multiply")(self, other)

    def __truediv__(self, other: Any) -> "CallPattern":
        return is_op("divide")(self, other)

    def has_attr(self, attrs: Mapping[str, Any]) -> "AttrPattern":
        return AttrPattern(self, dict(attrs))

    def has_type(self, ttype: Any) -> "TypePattern":
        return TypePattern(self, ttype)

    def has_dtype(self, dtype: str) -> "DataTypePattern":
        return DataTypePattern(self, str(dtype))

    def has_shape(self, shape: Sequence[Any]) -> "ShapePattern":
        return ShapePattern(self, _shape_tuple(shape))

    def optional(self, option_constructor: Callable[["DFPattern"], "DFPattern"]) -> "AltPattern":
        """``p.optional(f)`` matches ``p`` alone or ``f(p)`` (Relay: ``p | f(p)``)."""
        return AltPattern(self, _as_pattern(option_constructor(self)))

    def dominates(self, parent: "DFPattern", path: Optional["DFPattern"] = None):
        return DominatorPattern(parent, path if path is not None else wildcard(), self)

    def match(self, expr: ast.Expr) -> bool:
        """Whether ``expr`` matches this pattern (Relay's ``DFPattern.match``)."""
        return match(self, expr)

    def partition(self, expr: ast.Expr, attrs: Optional[Mapping[str, Any]] = None,
                  check: Optional[Callable[[ast.Expr], bool]] = None) -> ast.Expr:
        """``expr`` with every match replaced by a call of a function of the match."""
        return partition(self, expr, attrs, check)

    # Relay patterns are compared and hashed by identity, like the Relay objects were.
    __hash__ = object.__hash__


def _as_pattern(value: Any) -> DFPattern:
    if isinstance(value, DFPattern):
        return value
    return ExprPattern(value)


def _shape_tuple(shape: Sequence[Any]) -> tuple:
    """A shape as given (ints stay ints; symbolic or TVM dims are kept as objects)."""
    out = []
    for dim in shape:
        if isinstance(dim, bool):
            out.append(int(dim))
        elif isinstance(dim, int) or type(dim).__module__ == "numpy":
            out.append(int(dim))
        else:
            out.append(dim)
    return tuple(out)


def _tuple_or_none(values: Optional[Sequence[Any]]) -> Optional[tuple]:
    return None if values is None else tuple(_as_pattern(v) for v in values)


@dataclass(eq=False)
class WildcardPattern(DFPattern):
    """Matches anything; ``redirect_to(p)`` makes it match what ``p`` matches
    (which allows recursive patterns such as a chain of casts)."""

    pattern: Optional[DFPattern] = field(default=None, repr=False)  # may form a cycle

    def redirect_to(self, pattern: DFPattern) -> None:
        self.pattern = pattern


@dataclass(eq=False)
class ExprPattern(DFPattern):
    """Matches an expression structurally equal to ``expr`` (free variables by identity)."""

    expr: Any


class OpPattern(ExprPattern):
    """``is_op(name)``: the :class:`ExprPattern` of Relay's op ``name``.

    As in v0.19 (``is_op`` called ``relay.op.get``, i.e. ``Op::Get``), a name that is
    not a Relay op is refused here (:class:`UnknownOpError`), not silently never matched."""

    def __init__(self, name: str):
        super().__init__(get(name, caller=f"is_op({name!r})"))
        self.name = name


@dataclass(eq=False)
class VarPattern(DFPattern):
    name_hint: str = ""

    @property
    def name(self) -> str:
        return self.name_hint


@dataclass(eq=False)
class ConstantPattern(DFPattern):
    pass


@dataclass(eq=False)
class CallPattern(DFPattern):
    """``op(args...)``; ``args=None`` matches any number of arguments."""

    op: DFPattern
    args: Optional[tuple[DFPattern, ...]]

    def __post_init__(self) -> None:
        self.op = _as_pattern(self.op)
        self.args = _tuple_or_none(self.args)


@dataclass(eq=False)
class FunctionPattern(DFPattern):
    """A function; ``params=None`` matches any parameter list."""

    params: Optional[tuple[DFPattern, ...]]
    body: DFPattern

    def __post_init__(self) -> None:
        self.params = _tuple_or_none(self.params)
        self.body = _as_pattern(self.body)


@dataclass(eq=False)
class IfPattern(DFPattern):
    cond: DFPattern
    true_branch: DFPattern
    false_branch: DFPattern


@dataclass(eq=False)
class LetPattern(DFPattern):
    var: DFPattern
    value: DFPattern
    body: DFPattern


@dataclass(eq=False)
class TuplePattern(DFPattern):
    """A tuple; ``fields=None`` matches a tuple of any size."""

    fields: Optional[tuple[DFPattern, ...]]

    def __post_init__(self) -> None:
        self.fields = _tuple_or_none(self.fields)

    def __getitem__(self, index: int) -> DFPattern:
        if self.fields is None or index >= len(self.fields):
            raise IndexError("TuplePattern index out of range")
        return self.fields[index]

    def __len__(self) -> int:
        return 0 if self.fields is None else len(self.fields)


@dataclass(eq=False)
class TupleGetItemPattern(DFPattern):
    """``tuple_value[index]``; ``index=None`` matches any index."""

    tuple_value: DFPattern
    index: Optional[int] = None

    def __post_init__(self) -> None:
        self.tuple_value = _as_pattern(self.tuple_value)
        if self.index is not None and self.index < 0:
            self.index = None  # Relay's -1 means "any index"

    @property
    def tuple(self) -> DFPattern:
        return self.tuple_value


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
    shape: tuple[Any, ...]


@dataclass(eq=False)
class DataTypePattern(DFPattern):
    pattern: DFPattern
    dtype: str


@dataclass(eq=False)
class DominatorPattern(DFPattern):
    """``child`` whose inputs all reach ``parent`` through nodes matching ``path``."""

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


def is_tuple(fields: Optional[Sequence[Any]]) -> TuplePattern:
    return TuplePattern(fields)


def is_tuple_get_item(tuple_value: DFPattern, index: Optional[int] = None) -> TupleGetItemPattern:
    return TupleGetItemPattern(tuple_value, index)


def is_if(cond: DFPattern, true_branch: DFPattern, false_branch: DFPattern) -> IfPattern:
    return IfPattern(_as_pattern(cond), _as_pattern(true_branch), _as_pattern(false_branch))


def is_let(var: DFPattern, value: DFPattern, body: DFPattern) -> LetPattern:
    return LetPattern(_as_pattern(var), _as_pattern(value), _as_pattern(body))


def has_attr(attrs: Mapping[str, Any], pattern: Optional[DFPattern] = None) -> AttrPattern:
    return (pattern if pattern is not None else wildcard()).has_attr(attrs)


def has_type(ttype: Any, pattern: Optional[DFPattern] = None) -> TypePattern:
    return TypePattern(pattern if pattern is not None else wildcard(), ttype)


def has_dtype(dtype: str, pattern: Optional[DFPattern] = None) -> DataTypePattern:
    return DataTypePattern(pattern if pattern is not None else wildcard(), str(dtype))


def has_shape(shape: Sequence[Any], pattern: Optional[DFPattern] = None) -> ShapePattern:
    return ShapePattern(pattern if pattern is not None else wildcard(), _shape_tuple(shape))


def dominates(parent: DFPattern, path: DFPattern, child: DFPattern) -> DominatorPattern:
    return DominatorPattern(parent, path, child)


# --------------------------------------------------------------------------- matching API
def match(pattern: DFPattern, expr: ast.Expr) -> bool:
    """Whether ``expr`` matches ``pattern`` (Relay's ``relay.dataflow_pattern.match``)."""
    from .pattern_matcher import match_pattern

    return match_pattern(pattern, expr)


def partition(pattern: DFPattern, expr: ast.Expr, attrs: Optional[Mapping[str, Any]] = None,
              check: Optional[Callable[[ast.Expr], bool]] = None) -> ast.Expr:
    """Replace each match of ``pattern`` in ``expr`` by a call of a function of the match.

    The function carries ``PartitionedFromPattern`` (the matched node kinds joined
    by ``_``) plus ``attrs``; its parameters are the matched inputs in pattern order.
    ``check(root)`` can veto a match.
    """
    from .pattern_partition import partition_pattern

    return partition_pattern(pattern, expr, attrs, check)


class DFPatternCallback:
    """A rewrite rule: set ``self.pattern`` and override ``callback(pre, post, node_map)``.

    ``node_map`` maps each sub-pattern to the (rewritten) expressions it matched.
    ``require_type`` runs type inference before matching; ``rewrite_once`` stops
    applying this callback after the first pass that changed the expression.
    """

    def __init__(self, require_type: bool = False, rewrite_once: bool = False):
        self.pattern: Optional[DFPattern] = None
        self.require_type = require_type
        self.rewrite_once = rewrite_once

    def rewrite(self, expr: ast.Expr) -> ast.Expr:
        return rewrite(self, expr)

    def callback(self, pre: ast.Expr, post: ast.Expr,
                 node_map: Mapping[DFPattern, list]) -> ast.Expr:
        raise NotImplementedError(f"{type(self).__name__} does not define callback()")


def rewrite(callbacks: Any, expr: ast.Expr, mod: Optional[ast.IRModule] = None) -> ast.Expr:
    """Apply the callbacks (one or a list) until the expression stops changing."""
    from .pattern_partition import rewrite_patterns

    if isinstance(callbacks, DFPatternCallback):
        callbacks = [callbacks]
    return rewrite_patterns(list(callbacks), expr, mod)
