"""Matching a Relay DFPattern against the Relay AST, with Relay's semantics.

The rules follow Relay v0.19's ``DFPatternMatcher``:

* a sub-pattern that matched once is bound to that node: using it again (two
  paths of a diamond, ``x`` twice) only matches the *same* node;
* ``add``/``multiply`` call patterns also match with their arguments swapped,
  and ``(a * b) / c`` matches ``a * (b / c)`` (and the reverse), as Relay's
  batch-norm rewrites relied on;
* ``has_attr`` reads op attributes on an op (``TOpPattern``), call attributes
  (with the op's defaults) on a call and function attributes on a function;
* ``has_type``/``has_dtype``/``has_shape`` read the inferred type (the whole
  expression is type-checked once, on first need);
* a dominator pattern matches ``child`` whose every input reaches ``parent``
  through nodes matching ``path``, with ``parent`` dominated by ``child``.

A let-bound variable is a variable: patterns are not matched through it (Relay
did the same); the dataflow graph still links the value to its uses.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import numpy as np

from ..errors import BmlibError
from . import ast as A
from . import dataflow_pattern as P
from .analysis import structural_equal
from .pattern_graph import IndexedGraph, expr_graph
from .pattern_op_attrs import MISSING, op_attr, op_attr_defaults

_COMMUTATIVE = ("add", "multiply")
_RECURSION_LIMIT = 8000


class PatternMatchError(BmlibError, ValueError):
    """A pattern cannot be evaluated on this expression (names the reason)."""


def same_node(a: Any, b: Any) -> bool:
    """Relay's ``same_as``: identity, except that ops are one object per name in Relay."""
    return a is b or (isinstance(a, A.Op) and isinstance(b, A.Op) and a.name == b.name)


def _op_name(p: Any) -> Optional[str]:
    """The op name of ``is_op(name)`` (or of ``is_expr(op)``), else None."""
    if isinstance(p, P.ExprPattern) and isinstance(p.expr, A.Op):
        return p.expr.name
    return None


def _call_op_is(p: P.CallPattern, name: str) -> bool:
    return _op_name(p.op) == name


def _expr_is_call_of(e: Any, name: str) -> bool:
    return isinstance(e, A.Call) and isinstance(e.op, A.Op) and e.op.name == name


# --------------------------------------------------------------------------- attributes
def _plain(value: Any) -> Any:
    """TVM scalars/strings/arrays (e.g. from a DictAttrs) as Python values."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, np.dtype):
        return str(value)
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "value") and not isinstance(value, A.Expr):
        return _plain(value.value)
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item() if getattr(value, "ndim", 0) == 0 else tuple(value.tolist())
    try:  # TVM Array and other sequences
        return tuple(_plain(v) for v in value)
    except TypeError:
        return value


# What v0.19's ``MatchRetValue`` told apart by the attribute's type code: an integer
# (``kDLInt``; a bool field is read as an int64 by reflection's ``AttrGetter``), a
# float (``kDLFloat``) and a string (``kTVMStr``, a ``String``, a ``DataType``).
_INT, _FLOAT, _STR = "int", "float", "str"


def _value_kind(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return _STR
    if isinstance(value, (bool, int)):
        return _INT
    if isinstance(value, float):
        return _FLOAT
    return None


def attr_kind(op_name: Optional[str], key: str) -> Optional[str]:
    """The declared kind of ``op_name``'s attribute ``key`` (its C++ field type, from
    :mod:`.op_schema`): ``leaky_relu(x, alpha=0)`` stored a double 0.0, which only a
    float pattern matched.  None where the schema does not say."""
    if op_name is None:
        return None
    from . import op_schema as S

    schema = S.op_schema(op_name)
    field_kind = schema.fields.get(key) if schema is not None else None
    if field_kind in (S.BOOL, S.INT, S.INTS):
        return _INT
    if field_kind in (S.FLOAT, S.FLOATS):
        return _FLOAT
    if field_kind is S.STR:
        return _STR
    return None


def attr_value_equal(expected: Any, actual: Any, kind: Optional[str] = None) -> bool:
    """Relay v0.19's ``MatchRetValue``: a pattern value equals an attribute of the same
    kind only (an int attribute only an int, a float one only a float, exactly; a string
    or dtype one only a string), arrays element-wise under the same rule.  ``kind`` is
    the attribute's declared kind (:func:`attr_kind`), which decides for a number the
    builder stored as given (``alpha=0`` of a double field)."""
    if isinstance(expected, A.Expr) or isinstance(actual, A.Expr):
        return isinstance(expected, A.Expr) and isinstance(actual, A.Expr) and \
            structural_equal(expected, actual, map_free_vars=False)
    if isinstance(expected, A.Type) or isinstance(actual, A.Type):
        return expected == actual
    exp, act = _plain(expected), _plain(actual)
    if exp is None or act is None:
        return exp is None and act is None
    if isinstance(exp, tuple) or isinstance(act, tuple):
        return isinstance(exp, tuple) and isinstance(act, tuple) and len(exp) == len(act) and \
            all(attr_value_equal(x, y, kind) for x, y in zip(exp, act))
    exp_kind, act_kind = _value_kind(exp), _value_kind(act)
    if kind in (_INT, _FLOAT) and act_kind in (_INT, _FLOAT):
        act_kind = kind
    if exp_kind is None or act_kind is None:
        return exp_kind is None and act_kind is None and bool(exp == act)
    if exp_kind != act_kind:
        return False
    if act_kind == _FLOAT:
        return float(exp) == float(act)
    return exp == act


def _attr_lookup(call: A.Call) -> tuple[Callable[[str], bool], Callable[[str], Any]]:
    """(has, get) over a call's attributes, Relay style: an op call's attrs have every
    field of the op (the defaults fill what the call did not give)."""
    attrs = call.attrs
    if attrs is None:
        return (lambda k: False), (lambda k: None)
    if isinstance(attrs, A.Attrs):
        defaults = op_attr_defaults(call.op.name) if isinstance(call.op, A.Op) else {}

        def has(key: str) -> bool:
            return key in attrs or key in defaults

        def get(key: str) -> Any:
            return attrs[key] if key in attrs else defaults[key]
        return has, get
    keys = set(attrs.keys()) if hasattr(attrs, "keys") else set()
    return (lambda k: k in keys), (lambda k: attrs[k])


# --------------------------------------------------------------------------- matcher
class DFPatternMatcher:
    """Matches patterns against sub-expressions of one root expression.

    ``memo`` maps each sub-pattern to the nodes it matched in the last
    :meth:`match` (Relay's node map); the graph of the root (for dominator
    patterns) and its types are computed on first need.
    """

    def __init__(self, root: A.Expr, graph: Optional[IndexedGraph] = None):
        self.root = root
        self._graph = graph
        self.memo: dict[P.DFPattern, list] = {}
        self.matched: list[P.DFPattern] = []
        self.memoize = True
        self._types_inferred = False

    @property
    def graph(self) -> IndexedGraph:
        if self._graph is None:
            self._graph = expr_graph(self.root)
        return self._graph

    def match(self, pattern: P.DFPattern, expr: A.Expr) -> bool:
        self.memo = {}
        self.matched = []
        self.memoize = True
        limit = sys.getrecursionlimit()
        # Matching recurses along the pattern, and along the expression for dominator paths
        # and redirect_to chains: allow model-sized chains, then fail with our own error.
        sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
        try:
            return self.visit(pattern, expr)
        except RecursionError:
            raise PatternMatchError(
                f"pattern matching recursed deeper than {_RECURSION_LIMIT} levels (a dominator "
                "path or redirect_to chain this long is not supported)") from None
        finally:
            sys.setrecursionlimit(limit)

    def clear_from(self, watermark: int) -> None:
        for p in self.matched[watermark:]:
            self.memo.pop(p, None)
        del self.matched[watermark:]

    def visit(self, p: P.DFPattern, e: Any) -> bool:
        if self.memoize and p in self.memo:
            return same_node(e, self.memo[p][0])
        watermark = len(self.matched)
        handler = _HANDLERS.get(type(p))
        if handler is None:
            handler = next((h for cls, h in _HANDLERS.items() if isinstance(p, cls)), None)
            if handler is None:
                raise PatternMatchError(f"not a dataflow pattern: {type(p).__name__}")
        out = handler(self, p, e)
        if out:
            self.memo.setdefault(p, []).append(e)
            self.matched.append(p)
        else:
            self.clear_from(watermark)
        return out

    # -- node kinds
    def _wildcard(self, p: P.WildcardPattern, e: Any) -> bool:
        return True if p.pattern is None else self.visit(p.pattern, e)

    def _expr(self, p: P.ExprPattern, e: Any) -> bool:
        target = p.expr
        if isinstance(target, A.Op):
            return isinstance(e, A.Op) and e.name == target.name
        if not isinstance(target, A.Expr) or not isinstance(e, A.Expr):
            return target is e
        return structural_equal(target, e, map_free_vars=False)

    def _var(self, p: P.VarPattern, e: Any) -> bool:
        return isinstance(e, A.Var) and (not p.name_hint or p.name_hint == e.name)

    def _constant(self, p: P.ConstantPattern, e: Any) -> bool:
        return isinstance(e, A.Constant)

    def _alt(self, p: P.AltPattern, e: Any) -> bool:
        return self.visit(p.left, e) or self.visit(p.right, e)

    def _match_args(self, patterns: Optional[tuple], args: tuple) -> bool:
        watermark = len(self.matched)
        ok = True
        if patterns is not None:
            if len(patterns) != len(args):
                ok = False
            else:
                for sub, arg in zip(patterns, args):
                    if not self.visit(sub, arg):
                        ok = False
                        break
        if not ok:
            self.clear_from(watermark)
        return ok

    def _call(self, p: P.CallPattern, e: Any) -> bool:
        if not isinstance(e, A.Call):
            return False
        watermark = len(self.matched)
        if self.visit(p.op, e.op):
            if self._match_args(p.args, e.args):
                return True
            if _op_name(p.op) in _COMMUTATIVE and p.args is not None:
                return self._match_args(tuple(reversed(p.args)), e.args)
            return False
        self.clear_from(watermark)
        return self._reassociated(p, e, watermark)

    def _reassociated(self, p: P.CallPattern, e: A.Call, watermark: int) -> bool:
        """``(a * b) / c`` against ``a * (b / c)`` and the reverse (Relay does both)."""
        args = p.args
        if args is None or len(args) != 2:
            return False
        if _call_op_is(p, "divide"):
            inner = args[0]
            if isinstance(inner, P.CallPattern) and _call_op_is(inner, "multiply") and \
                    inner.args is not None and len(inner.args) == 2 and \
                    _expr_is_call_of(e, "multiply") and len(e.args) == 2 and \
                    any(_expr_is_call_of(a, "divide") for a in e.args):
                for i in range(2):
                    div = P.CallPattern(p.op, (inner.args[i], args[1]))
                    mul = P.CallPattern(inner.op, (inner.args[1 - i], div))
                    if self.visit(mul, e):
                        return True
                    self.clear_from(watermark)
                return False
        if _call_op_is(p, "multiply"):
            for i in range(2):
                inner = args[i]
                if isinstance(inner, P.CallPattern) and _call_op_is(inner, "divide") and \
                        inner.args is not None and len(inner.args) == 2 and \
                        _expr_is_call_of(e, "divide") and len(e.args) == 2 and \
                        (_expr_is_call_of(e.args[0], "multiply") or
                         _expr_is_call_of(e.args[1], "multiply")):
                    mul = P.CallPattern(p.op, (inner.args[0], args[1 - i]))
                    div = P.CallPattern(inner.op, (mul, inner.args[1]))
                    return self.visit(div, e)
        return False

    def _function(self, p: P.FunctionPattern, e: Any) -> bool:
        if not isinstance(e, A.Function):
            return False
        if p.params is not None:
            if len(p.params) != len(e.params):
                return False
            for sub, param in zip(p.params, e.params):
                if not self.visit(sub, param):
                    return False
        return self.visit(p.body, e.body)

    def _tuple(self, p: P.TuplePattern, e: Any) -> bool:
        if not isinstance(e, A.Tuple):
            return False
        if p.fields is None:
            return True
        if len(p.fields) != len(e.fields):
            return False
        return all(self.visit(sub, f) for sub, f in zip(p.fields, e.fields))

    def _tuple_get_item(self, p: P.TupleGetItemPattern, e: Any) -> bool:
        return isinstance(e, A.TupleGetItem) and (p.index is None or p.index == e.index) and \
            self.visit(p.tuple_value, e.tuple_value)

    def _if(self, p: P.IfPattern, e: Any) -> bool:
        return isinstance(e, A.If) and self.visit(p.cond, e.cond) and \
            self.visit(p.true_branch, e.true_branch) and self.visit(p.false_branch, e.false_branch)

    def _let(self, p: P.LetPattern, e: Any) -> bool:
        return isinstance(e, A.Let) and self.visit(p.var, e.var) and \
            self.visit(p.value, e.value) and self.visit(p.body, e.body)

    def _attr(self, p: P.AttrPattern, e: Any) -> bool:
        if not self.visit(p.pattern, e):
            return False
        attrs = p.attrs
        if isinstance(e, A.Op):
            for key, expected in attrs.items():
                actual = op_attr(e.name, key)
                if actual is MISSING or not attr_value_equal(expected, actual):
                    return False
            return True
        if isinstance(e, A.Call):
            has, get = _attr_lookup(e)
            op = e.op.name if isinstance(e.op, A.Op) else None
            return all(has(k) and attr_value_equal(v, get(k), attr_kind(op, k))
                       for k, v in attrs.items())
        if isinstance(e, A.Function):
            fattrs = e.attrs
            return all(k in fattrs and attr_value_equal(v, fattrs[k]) for k, v in attrs.items())
        return False

    # -- types
    def type_of(self, e: Any) -> Optional[A.Type]:
        """The inferred type of ``e`` (type inference runs once over the root)."""
        if isinstance(e, A.Constant) and e.data is not None:
            return A.TensorType(tuple(e.data.shape), str(e.data.dtype))
        if isinstance(e, A.Var) and e.type_annotation is not None:
            return e.type_annotation
        ty = e.__dict__.get("_checked_type") if isinstance(e, A.Expr) else None
        if ty is not None:
            return ty
        if not self._types_inferred:
            self._types_inferred = True
            try:
                _infer_types(self.root)
            except Exception:  # noqa: BLE001 - another part of the root does not type-check;
                pass           # ``e`` alone is tried below and reports its own error
            ty = e.__dict__.get("_checked_type")
            if ty is not None:
                return ty
        if not isinstance(e, A.Expr):
            return None
        _infer_types(e)
        return e.__dict__.get("_checked_type")

    def _type(self, p: P.TypePattern, e: Any) -> bool:
        return self.type_of(e) == p.type and self.visit(p.pattern, e)

    def _shape(self, p: P.ShapePattern, e: Any) -> bool:
        ty = self.type_of(e)
        if not isinstance(ty, A.TensorType) or len(ty.shape) != len(p.shape):
            return False
        if not all(_dim(a) == _dim(b) for a, b in zip(p.shape, ty.shape)):
            return False
        return self.visit(p.pattern, e)

    def _dtype(self, p: P.DataTypePattern, e: Any) -> bool:
        ty = self.type_of(e)
        return isinstance(ty, A.TensorType) and str(ty.dtype) == str(p.dtype) and \
            self.visit(p.pattern, e)

    # -- dominators
    def _dominator(self, p: P.DominatorPattern, e: Any) -> bool:
        if self.visit(p.child, e):
            matches_path = self._matches_path(p, e)
            self.memoize = True
            if matches_path:
                return self._dominates_parent(p, e)
        return False

    def _matches_path(self, p: P.DominatorPattern, e: Any) -> bool:
        """Every input of ``e`` is the parent, or matches the path and recursively so.

        A call's callee and its variable/constant arguments are not dataflow from the
        parent and are skipped (Relay v0.19); a node with nothing else does not match.
        """
        node = self.graph.get(e)
        if node is None:
            return False
        counted = 0
        is_call = isinstance(e, A.Call)
        for inp in node.inputs:
            if is_call and (inp.ref is e.op or isinstance(inp.ref, (A.Var, A.Constant))):
                continue
            counted += 1
            self.memoize = True
            if not self.visit(p.parent, inp.ref):
                self.memoize = False
                if not self.visit(p.path, inp.ref) or not self._matches_path(p, inp.ref):
                    return False
        return counted > 0

    def _dominates_parent(self, p: P.DominatorPattern, e: Any) -> bool:
        """The parent is somewhere below ``e`` in the dominator tree."""
        node = self.graph.get(e)
        if node is None:
            return False
        stack = [node]
        seen: set[int] = set()
        while stack:
            current = stack.pop()
            for child in current.dominator_children:
                if id(child) in seen:
                    continue
                if self.visit(p.parent, child.ref):
                    return True
                stack.append(child)
                seen.add(id(child))
        return False


def _dim(d: Any) -> Any:
    if d is None or isinstance(d, (int, str)):
        return d
    if hasattr(d, "value"):
        return int(d.value)
    if hasattr(d, "name"):
        return str(d.name)
    if hasattr(d, "name_hint"):
        return str(d.name_hint)
    return d


def _infer_types(expr: A.Expr) -> None:
    """Type-check ``expr`` in place (Relay's matcher ran InferType on the expression)."""
    from .transform import InferType

    try:
        InferType()(A.IRModule.from_expr(expr))
    except BmlibError:
        raise
    except Exception as exc:  # TVM's own errors from the Relax import behind InferType
        raise PatternMatchError(f"has_type/has_dtype/has_shape: type inference failed on "
                                f"{type(expr).__name__}: {exc}") from exc


_HANDLERS: dict[type, Callable[[DFPatternMatcher, Any, Any], bool]] = {
    P.WildcardPattern: DFPatternMatcher._wildcard,
    P.ExprPattern: DFPatternMatcher._expr,
    P.OpPattern: DFPatternMatcher._expr,
    P.VarPattern: DFPatternMatcher._var,
    P.ConstantPattern: DFPatternMatcher._constant,
    P.AltPattern: DFPatternMatcher._alt,
    P.CallPattern: DFPatternMatcher._call,
    P.FunctionPattern: DFPatternMatcher._function,
    P.TuplePattern: DFPatternMatcher._tuple,
    P.TupleGetItemPattern: DFPatternMatcher._tuple_get_item,
    P.IfPattern: DFPatternMatcher._if,
    P.LetPattern: DFPatternMatcher._let,
    P.AttrPattern: DFPatternMatcher._attr,
    P.TypePattern: DFPatternMatcher._type,
    P.ShapePattern: DFPatternMatcher._shape,
    P.DataTypePattern: DFPatternMatcher._dtype,
    P.DominatorPattern: DFPatternMatcher._dominator,
}


def match_pattern(pattern: P.DFPattern, expr: A.Expr) -> bool:
    """Whether ``expr`` matches ``pattern`` (see the module docstring for the rules)."""
    if not isinstance(pattern, P.DFPattern):
        raise PatternMatchError(f"match: expected a DFPattern, got {type(pattern).__name__}")
    if not isinstance(expr, A.Expr):
        raise PatternMatchError(f"match: expected a Relay expression, got {type(expr).__name__}")
    return DFPatternMatcher(expr).match(pattern, expr)
