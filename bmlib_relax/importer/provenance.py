"""Provenance from import: every Relax call knows the Relay call it came from.

Legacy code — a pattern table's check function, a ``_LOWER_MAP`` lowering, a
``partition_for_<x>`` helper — was written against Relay calls: ``call.op.name
== "nn.bias_add"``, ``call.attrs.axis``, ``call.args[1]`` being a
``relay.Constant``, ``arg.checked_type.shape``.  After import those facts are
gone from the Relax program (``nn.bias_add`` is an ``add``, weights are Relax
constants, defaults are baked into Relax attributes).  So they are kept where
they are born: while importing, the importer builds for each Relay node the
*Relay view* of it — the same node kind, with

* attributes under their Relay names, Relay's defaults filled in for the ones
  the text omitted (``data_layout="NCHW"``), ``#[metadata]`` values resolved;
* arguments in Relay's order, each itself a Relay view (so a check can walk
  ``call.args[0].args[0]`` through the whole graph);
* parameters bound to weights shown as ``relay.Constant`` (as after Relay's
  ``bind_params_by_name``);
* ``checked_type`` (shape, dtype) and ``type_args`` filled in, as after
  ``InferType``.

Every Relax call the importer emits for a Relay call carries a
:class:`tvm.ir.Span` whose source name is a key into this table: the call
that computes the Relay call's result is its *root* (``relay#T:K``), any helper
calls it needed (``permute_dims`` of a dense weight, ``reshape`` of a bias) are
*parts* (``relay#T:K~``).  Spans survive ``FuseOpsByPattern`` and
``MergeCompositeFunctions``, so the codegen finds the same Relay call inside a
composite that the pattern check saw in ``main``.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import tvm

from ..relay import ast

_SOURCE_PREFIX = "relay#"
_PART_SUFFIX = "~"
#: Imports kept alive for callers that hold only the imported module (``import_relay``
#: then ``partition_for_bmlib``).  A table holds the Relay views of a whole model, its
#: weights included: ``compile`` keeps its own table with the model it returns instead.
_KEEP_RECENT = 4


# --------------------------------------------------------------------------- ops
class RelayOp(ast.Op):
    """A Relay op as legacy code sees it: one instance per name (``call.op ==
    relay.op.get("nn.conv2d")`` holds), ``str(op)`` is the name, and
    ``get_attr`` reads attributes registered with ``tvm.ir.register_op_attr``."""

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: Any) -> bool:
        # Relay ops are singletons: any node naming the same op is this op.
        return isinstance(other, ast.Op) and other.name == self.name

    __hash__ = ast.Op.__hash__

    def get_attr(self, attr_name: str) -> Any:
        return OP_ATTRS.get((self.name, attr_name))

    def has_attr(self, attr_name: str) -> bool:
        return (self.name, attr_name) in OP_ATTRS

    @staticmethod
    def get(op_name: str) -> "RelayOp":
        return op_ref(op_name)


class _AnyOpMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, ast.Op)


class OpClass(metaclass=_AnyOpMeta):
    """``tvm.ir.Op`` for legacy code: ``isinstance(call.op, Op)`` holds for every Relay op
    node (parsed or built), ``Op.get(name)`` is the interned :class:`RelayOp`."""

    get = staticmethod(lambda op_name: op_ref(op_name))


_OPS: dict[str, RelayOp] = {}
_OPS_LOCK = threading.Lock()

#: (op name, attribute name) -> value (``target.dnnl`` -> a support predicate, ...).
OP_ATTRS: dict[tuple[str, str], Any] = {}


def op_ref(name: str) -> RelayOp:
    """The interned :class:`RelayOp` of ``name``."""
    with _OPS_LOCK:
        op = _OPS.get(name)
        if op is None:
            op = _OPS[name] = RelayOp(name)
        return op


def register_op_attr(op_name: str, attr_key: str, value: Any = None, level: int = 10):
    """``tvm.ir.register_op_attr``: set an op attribute (usable as a decorator)."""

    def register(v: Any) -> Any:
        OP_ATTRS[(str(op_name), str(attr_key))] = v
        return v

    return register(value) if value is not None else register


# --------------------------------------------------------------------------- attrs
class RelayCallAttrs(ast.Attrs):
    """Relay call attributes, Relay's defaults included, with the accessors of
    Relay's attrs objects (``attrs.get_int_tuple("padding")``)."""

    __slots__ = ()

    def get_int_tuple(self, key: str) -> tuple:
        value = self[key]
        return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)

    def get_int(self, key: str) -> int:
        return int(self[key])

    def get_str(self, key: str) -> str:
        return str(self[key])


def relay_attr_defaults(op_name: str) -> dict[str, Any]:
    """Relay's default attribute values of ``op_name`` (from the builder's signatures,
    with the text format's defaults where those differ)."""
    from ..relay.pattern_op_attrs import op_attr_defaults

    return op_attr_defaults(op_name)


# --------------------------------------------------------------------------- table
@dataclass(frozen=True)
class Origin:
    """Where a Relax call came from: the Relay view and whether it is the root."""

    relay: ast.Expr
    root: bool


class ProvenanceTable:
    """The Relay views of one import, addressed by the spans of the Relax calls."""

    _ids = itertools.count(1)

    def __init__(self):
        self.id = next(self._ids)
        self.views: list[ast.Expr] = []

    def add(self, view: ast.Expr) -> int:
        self.views.append(view)
        return len(self.views) - 1

    def span(self, key: int, root: bool, where: Optional[ast.Span] = None) -> tvm.ir.Span:
        name = f"{_SOURCE_PREFIX}{self.id}:{key}" + ("" if root else _PART_SUFFIX)
        line, column = (where.line, where.column) if where is not None else (0, 0)
        return tvm.ir.Span(tvm.ir.SourceName(name), line, line, column, column)


# Every live table by id, weakly: a table lives while its owner (a compiled model, or
# the few most recent imports below) does, and its weights are freed with it.  It used
# to be a strong cache of the last 64 imports, which kept up to 64 models' weights.
_TABLES: "weakref.WeakValueDictionary[int, ProvenanceTable]" = weakref.WeakValueDictionary()
_RECENT: "deque[ProvenanceTable]" = deque(maxlen=_KEEP_RECENT)
_TABLES_LOCK = threading.Lock()
_COLLECTING: "contextvars.ContextVar[Optional[list[ProvenanceTable]]]" = \
    contextvars.ContextVar("bmlib_provenance_collecting", default=None)


def new_table() -> ProvenanceTable:
    table = ProvenanceTable()
    with _TABLES_LOCK:
        _TABLES[table.id] = table
        _RECENT.append(table)
    collected = _COLLECTING.get()
    if collected is not None:
        collected.append(table)
    return table


@contextlib.contextmanager
def tables_created() -> Iterator[list[ProvenanceTable]]:
    """The tables the imports inside the block create: whoever keeps the list keeps
    their provenance (``compile`` gives it to the model it returns)."""
    collected: list[ProvenanceTable] = []
    token = _COLLECTING.set(collected)
    try:
        yield collected
    finally:
        _COLLECTING.reset(token)


def origin_of(expr: Any) -> Optional[Origin]:
    """The Relay call a Relax call was imported from (``None`` if it has no provenance)."""
    span = getattr(expr, "span", None)
    if span is None:
        return None
    try:
        name = str(span.source_name.name)
    except AttributeError:
        return None
    if not name.startswith(_SOURCE_PREFIX):
        return None
    root = not name.endswith(_PART_SUFFIX)
    try:
        table_id, key = name[len(_SOURCE_PREFIX):].rstrip(_PART_SUFFIX).split(":")
        table = _TABLES.get(int(table_id))
        view = table.views[int(key)] if table is not None else None
    except (ValueError, IndexError):
        return None
    return Origin(view, root) if view is not None else None


def relay_place(expr: Any, root_only: bool = False) -> Optional[str]:
    """``file:line:column`` of the Relay call a Relax call was imported from (a part of
    that call's lowering too, unless ``root_only``); ``None`` without provenance."""
    origin = origin_of(expr)
    if origin is None or (root_only and not origin.root):
        return None
    span = getattr(origin.relay, "span", None)
    return str(span) if span is not None else None


def relay_call_of(expr: Any) -> Optional[ast.Expr]:
    """The Relay view whose *root* Relax call is ``expr`` (``None`` otherwise)."""
    origin = origin_of(expr)
    return origin.relay if origin is not None and origin.root else None


# --------------------------------------------------------------------------- building
def relay_type_of(value: Any) -> Optional[ast.Type]:
    ty = getattr(value, "ty", None)
    if ty is None:
        return None
    return _relay_type(ty)


def _relay_type(ty: Any) -> ast.Type:
    """The Relay type of a Relax type (symbolic dims become ``?``)."""
    import tvm
    from tvm import relax

    if isinstance(ty, relax.TupleType):
        return ast.TupleType(tuple(_relay_type(f) for f in ty.fields))
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        # Only IntImm dims are static (a Cast of a symbolic dim has a .value too).
        dims = tuple(int(d.value) if isinstance(d, tvm.tirx.IntImm) else None
                     for d in shape.values) \
            if shape is not None and hasattr(shape, "values") else ()
        return ast.TensorType(dims, str(ty.dtype))
    return ast.IncompleteType()


def _typed(node: ast.Expr, value: Any) -> ast.Expr:
    ty = relay_type_of(value)
    if ty is not None:
        node._set_checked_type(ty)
    return node


class ViewBuilder:
    """Builds the Relay views of one import (see the module docstring).

    ``view_of(relax_value)`` is the view of the Relay node that produced it;
    the importer calls :meth:`record` once per converted node.
    """

    def __init__(self, table: ProvenanceTable):
        self.table = table
        self._by_value: dict[Any, ast.Expr] = {}

    def view_of(self, value: Any, fallback: ast.Expr) -> ast.Expr:
        try:
            return self._by_value.get(value, fallback)
        except TypeError:  # unhashable (closures): no view
            return fallback

    def _remember(self, value: Any, view: ast.Expr) -> None:
        try:
            self._by_value.setdefault(value, view)
        except TypeError:
            pass

    def bound_param(self, var: ast.Var, value: Any, array: Any) -> None:
        """A parameter bound to a weight: a ``relay.Constant`` for legacy code."""
        self._remember(value, _typed(ast.Constant(array, span=var.span), value))

    def leaf(self, node: ast.Expr, value: Any) -> None:
        self._remember(value, _typed(node, value))

    def call(self, node: ast.Call, attrs: ast.Attrs, arg_values: list,
             operands: tuple) -> ast.Call:
        """The view of an op call whose (Relay-order) ``operands`` produced ``arg_values``."""
        name = node.op.name  # type: ignore[attr-defined]
        args = tuple(self.view_of(v, a) for v, a in zip(arg_values, operands))
        full = dict(relay_attr_defaults(name))
        full.update(attrs)
        if name in _CONV_OPS and len(args) > 1:
            _fill_conv_sizes(full, args[1])
        type_args = tuple(a.__dict__.get("_checked_type") for a in args)
        return ast.Call(op_ref(name), args, RelayCallAttrs(full),
                        type_args if all(t is not None for t in type_args) else (),
                        span=node.span)

    def finish_call(self, view: ast.Call, value: Any) -> None:
        """``view`` computed ``value``: record its type and make it the value's view."""
        self._remember(value, _typed(view, value))

    def tuple(self, node: ast.Tuple, values: list, value: Any) -> None:
        fields = tuple(self.view_of(v, f) for v, f in zip(values, node.fields))
        self._remember(value, _typed(ast.Tuple(fields, span=node.span), value))

    def tuple_get_item(self, node: ast.TupleGetItem, tuple_value: Any, value: Any) -> None:
        inner = self.view_of(tuple_value, node.tuple_value)
        self._remember(value, _typed(ast.TupleGetItem(inner, node.index, span=node.span), value))


_CONV_OPS = {"nn.conv1d", "nn.conv2d", "nn.conv3d"}


def _fill_conv_sizes(attrs: dict, weight: ast.Expr) -> None:
    """``channels``/``kernel_size`` from the weight's type where the text omitted them
    (frontends always printed them; hand-written Relay often did not)."""
    ty = weight.__dict__.get("_checked_type")
    layout = str(attrs.get("kernel_layout") or "")
    if not isinstance(ty, ast.TensorType) or len(layout) != len(ty.shape):
        return
    if attrs.get("kernel_size") is None:
        attrs["kernel_size"] = tuple(ty.shape[i] for i, c in enumerate(layout) if c in "DHW")
    if attrs.get("channels") is None and "O" in layout:
        attrs["channels"] = ty.shape[layout.index("O")]


def same_origin(new: Any, old: Any) -> Any:
    """``new`` (a call a backend rewrite made in place of the call ``old``: a conv with
    its weight packed, on blocked data) with ``old``'s span, so that it still knows the
    Relay call it computes (a report, an error, a legacy check finds it)."""
    from tvm import relax

    span = getattr(old, "span", None)
    if span is None or not isinstance(new, relax.Call) or not isinstance(new.op, tvm.ir.Op):
        return new
    return relax.Call(new.op, list(new.args), new.attrs,
                      list(new.ty_args) if new.ty_args else None, span)


def with_spans(expr: Any, root: tvm.ir.Span, part: tvm.ir.Span,
               emit: Optional[Callable[[Any], Any]] = None) -> Any:
    """``expr`` with ``root`` on its outermost call and ``part`` on nested calls.

    With ``emit``, nested calls are emitted first (each with ``part``): Relax's
    normaliser would otherwise bind them itself and rebuild the outer call
    without its span.
    """
    from tvm import relax

    # A subexpression a converter uses twice (QNN's rounding reads the product it
    # rounds) is rebuilt and emitted once: sharing is part of the program.
    memo: dict = {}

    def rebuild(e: Any, span: tvm.ir.Span, nested: bool) -> Any:
        key = (e, nested)
        if isinstance(e, relax.Expr) and key in memo:
            return memo[key]
        out = _rebuild(e, span, nested)
        if isinstance(e, relax.Expr):
            memo[key] = out
        return out

    def _rebuild(e: Any, span: tvm.ir.Span, nested: bool) -> Any:
        if isinstance(e, relax.Tuple):
            # Fields are not emitted here: a field nobody projects must stay dead code.
            fields = [rebuild(f, part, False) for f in e.fields]
            if all(a.same_as(b) for a, b in zip(fields, e.fields)):
                return e
            return relax.Tuple(fields, e.span)
        if not isinstance(e, relax.Call) or not isinstance(e.op, tvm.ir.Op):
            return e
        args = [rebuild(a, part, True) for a in e.args]
        call = relax.Call(e.op, args, e.attrs, list(e.ty_args) if e.ty_args else None, span)
        return emit(call) if nested and emit is not None else call

    return rebuild(expr, root, False)


