"""The Relay abstract syntax tree used by bmlib-relax.

Relay itself is gone from TVM >= 0.20, so this package keeps its own small AST
that mirrors Relay's node kinds closely enough for the parser, the printer, the
builder API and the importer to share one representation.

Design rules (they matter for 20k-line model dumps):

* Expression nodes compare and hash by *identity* (``eq=False``).  Relay text
  shares sub-expressions through graph bindings (``%3 = ...``), so the AST is a
  DAG; structural equality is a separate, iterative function
  (:func:`bmlib_relax.relay.analysis.structural_equal`), never ``__eq__``.
* Nodes are frozen: passes build new nodes instead of mutating old ones.
* Every node carries an optional :class:`Span` (excluded from comparisons) so
  errors found after parsing still point at ``file:line:column``.
* Call attributes are decoded once into a read-only mapping (:class:`Attrs`);
  lists in attribute values become tuples.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional, Union

import numpy as np


# --------------------------------------------------------------------------- spans
@dataclass(frozen=True)
class Span:
    """A source position: 1-based line and column in ``source``."""

    line: int
    column: int
    source: str = "<string>"

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}"


def _span() -> Any:
    return field(default=None, compare=False, repr=False, kw_only=True)


# --------------------------------------------------------------------------- attrs
def _freeze(value: Any) -> Any:
    """Lists (Relay attribute arrays) become tuples, recursively."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class Attrs(Mapping[str, Any]):
    """Read-only attribute mapping of a call or function (``key=value`` pairs).

    Values are Python scalars (int, float, bool, str, None), tuples (Relay lists,
    possibly nested) or :class:`MetaRef` for ``meta[...]`` attribute values.
    """

    __slots__ = ("_data", "_op")

    def __init__(self, data: Optional[Mapping[str, Any]] = None):
        self._data = MappingProxyType({k: _freeze(v) for k, v in (data or {}).items()})
        # The op these are the attributes of: ``attrs.name`` falls back to the op's
        # default, as Relay's attrs objects had every field; ``[]``/iteration see what was given.
        self._op: Optional[str] = None

    def for_op(self, op_name: str) -> "Attrs":
        """The same attributes, answering ``attrs.name`` with ``op_name``'s defaults."""
        out = type(self).__new__(type(self))  # a subclass (Relay accessors) stays itself
        out._data = self._data
        out._op = op_name
        return out

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        # Consistent with Mapping.__eq__: equal mappings have equal key sets.
        return hash(frozenset(self._data))

    def __repr__(self) -> str:
        return f"Attrs({dict(self._data)!r})"

    def __getattr__(self, key: str) -> Any:
        # Relay-style ``call.attrs.groups`` access.
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._data[key]
        except KeyError:
            if self._op is not None:
                from .pattern_op_attrs import op_attr_defaults

                defaults = op_attr_defaults(self._op)
                if key in defaults:
                    return defaults[key]
            raise AttributeError(f"call has no attribute {key!r}") from None


EMPTY_ATTRS = Attrs()


def _normalise(node: Any, *tuple_fields: str) -> None:
    """Accept builder-style lists and dicts (as ``tvm.relay`` did) on frozen nodes."""
    for name in tuple_fields:
        value = getattr(node, name)
        if not isinstance(value, tuple):
            object.__setattr__(node, name, tuple(value or ()))
    attrs = getattr(node, "attrs", None)
    if attrs is None or (isinstance(attrs, Mapping) and not isinstance(attrs, Attrs)):
        object.__setattr__(node, "attrs", Attrs(attrs or {}))


# --------------------------------------------------------------------------- types
class Type:
    """Base class of Relay types."""

    def __str__(self) -> str:
        """Relay's text of the type (``Tensor[(2, 3), float32]``), as ``str()`` of a Relay
        type gave (``repr()`` keeps the fields)."""
        from .printer import print_type  # the printer reads these classes

        try:
            return print_type(self)
        except RecursionError:  # a tuple type nested thousands deep
            return f"<{type(self).__name__} nested too deeply to print>"
        except TypeError:  # a type the text format has no form for
            return repr(self)


class Any:
    """Relay's ``relay.Any()``: a dimension unknown until run time (printed ``?``).

    Inside a :class:`TensorType` it is stored as ``None``; every ``Any`` equals
    every other, as in Relay's structural equality.
    """

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Any) or other is None

    def __hash__(self) -> int:
        return hash(None)

    def __repr__(self) -> str:
        return "?"


class Dim(int):
    """A static dim: an ``int`` that also answers ``.value``, as v0.19's ``IntImm`` dims
    did (``[d.value for d in ty.shape]`` is a common idiom of Relay scripts)."""

    __slots__ = ()

    @property
    def value(self) -> int:
        return int(self)


def _dim(value: Any) -> Any:
    """A shape dim as stored: a :class:`Dim` (an int), ``None`` (``?``), a name, or a
    symbolic TIR expression."""
    if value is None or isinstance(value, (Any, str)):
        return None if not isinstance(value, str) else value
    if isinstance(value, Dim):
        return value
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return Dim(int(value))
    if type(value).__name__ == "IntImm":
        return Dim(int(value.value))
    if type(value).__name__ == "Any":  # a foreign Any node
        return None
    return value  # symbolic: te.var("n"), n + 2, ...


def _dims_equal(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is y:
            continue
        if isinstance(x, (int, str)) or x is None or isinstance(y, (int, str)) or y is None:
            if isinstance(x, int) != isinstance(y, int) or \
                    isinstance(x, str) != isinstance(y, str) or x != y:
                return False
            continue
        from .symbolic import dims_equal  # symbolic TIR dims: proved equal, lazily

        if not dims_equal(x, y):
            return False
    return True


#: Relay's dtype spellings without a width (``"int"`` is ``int32``, as TVM's DataType read it).
_DTYPE_ALIASES = {"int": "int32", "uint": "uint32", "float": "float32"}


@dataclass(frozen=True, eq=False)
class TensorType(Type):
    """``Tensor[(d0, d1, ...), dtype]``; a dynamic ``?`` dim is ``None``.

    A scalar type such as ``float32`` is ``TensorType((), "float32")``.  A dim
    may also be symbolic (``te.var("n")``, ``n + 2``): two types are equal when
    their symbolic dims are provably equal, as Relay's structural equality.
    """

    shape: tuple[Union[int, str, None], ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(_dim(d) for d in self.shape))
        dtype = str(self.dtype)
        object.__setattr__(self, "dtype", _DTYPE_ALIASES.get(dtype, dtype))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorType):
            return NotImplemented
        return self.dtype == other.dtype and _dims_equal(self.shape, other.shape)

    def __hash__(self) -> int:
        return hash((self.dtype, len(self.shape),
                     tuple(d if isinstance(d, (int, str)) or d is None else "sym"
                           for d in self.shape)))

    @property
    def concrete_shape(self) -> tuple:
        """The shape as ints (Relay's ``TensorType.concrete_shape``)."""
        return tuple(int(d) for d in self.shape)


@dataclass(frozen=True)
class TupleType(Type):
    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True)
class TypeVar(Type):
    """A type parameter such as ``A`` in ``def @f[A](...)``."""

    name: str


@dataclass(frozen=True)
class TypeCall(Type):
    """An ADT type applied to arguments, e.g. ``List[A]`` (``args`` may be empty)."""

    name: str
    args: tuple[Type, ...] = ()


@dataclass(frozen=True)
class FuncType(Type):
    """``fn [T](A, B) -> R``."""

    params: tuple[Type, ...]
    ret: Optional[Type]
    type_params: tuple[TypeVar, ...] = ()

    def __post_init__(self) -> None:
        for name in ("params", "type_params"):
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, tuple(getattr(self, name) or ()))

    @property
    def arg_types(self) -> tuple[Type, ...]:
        return self.params

    @property
    def ret_type(self) -> Optional[Type]:
        return self.ret


@dataclass(frozen=True)
class IncompleteType(Type):
    """The ``_`` placeholder type."""


@dataclass(frozen=True)
class RefType(Type):
    value: Type


# --------------------------------------------------------------------------- expressions
class Expr:
    """Base class of Relay expressions (identity-compared, see module doc).

    Like Relay's expressions they support ``+ - * /`` and unary ``-`` (building
    ``add``/``subtract``/... calls) and carry ``checked_type`` once
    ``transform.InferType`` has run.
    """

    span: Optional[Span]

    @property
    def checked_type(self) -> "Type":
        """The type inferred by ``relay.transform.InferType`` (Relay's ``checked_type``)."""
        ty = self.__dict__.get("_checked_type")
        if ty is None:
            raise ValueError("the type of this expression has not been inferred: "
                             "run relay.transform.InferType() on its module first")
        return ty

    def _set_checked_type(self, ty: "Type") -> None:
        # Type inference annotates nodes in place, as Relay's checked_type_ did;
        # it is a cache, not part of the node's value (never compared).
        object.__setattr__(self, "_checked_type", ty)

    def _binary(self, op: str, other: Any, reverse: bool = False) -> "Call":
        from .op._make import as_expr

        other = as_expr(other, op)
        args = (other, self) if reverse else (self, other)
        return Call(Op(op), args)

    def __add__(self, other: Any) -> "Call":
        return self._binary("add", other)

    def __radd__(self, other: Any) -> "Call":
        return self._binary("add", other, reverse=True)

    def __sub__(self, other: Any) -> "Call":
        return self._binary("subtract", other)

    def __rsub__(self, other: Any) -> "Call":
        return self._binary("subtract", other, reverse=True)

    def __mul__(self, other: Any) -> "Call":
        return self._binary("multiply", other)

    def __rmul__(self, other: Any) -> "Call":
        return self._binary("multiply", other, reverse=True)

    def __truediv__(self, other: Any) -> "Call":
        return self._binary("divide", other)

    def __rtruediv__(self, other: Any) -> "Call":
        return self._binary("divide", other, reverse=True)

    def __neg__(self) -> "Call":
        return Call(Op("negative"), (self,))

    def __lt__(self, other: Any) -> "Call":
        return self._binary("less", other)

    def __gt__(self, other: Any) -> "Call":
        return self._binary("greater", other)

    def __ge__(self, other: Any) -> "Call":
        return self._binary("greater_equal", other)

    def __le__(self, other: Any) -> "Call":
        return self._binary("less_equal", other)

    def astype(self, dtype: str) -> "Call":
        """``cast(self, dtype)`` (Relay's ``Expr.astype``)."""
        return Call(Op("cast"), (self,), Attrs({"dtype": str(dtype)}))

    def __call__(self, *args: Any) -> "Call":
        """Call this expression (a function value) with ``args``, as Relay's ``f(x)``."""
        from .op._make import as_expr

        return Call(self, tuple(as_expr(a, "call argument") for a in args))

    def astext(self, show_meta_data: bool = True) -> str:
        from .printer import astext

        return astext(self, show_meta_data=show_meta_data)

    def __str__(self) -> str:
        """Relay text without the version line and metadata section, as ``str()`` /
        ``print()`` of a v0.19 expression gave (``PrettyPrint``); ``repr()`` keeps the
        fields."""
        text = self.astext(show_meta_data=False)
        return text.split("\n", 1)[1] if text.startswith("#[version") else text


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A local variable ``%name`` (function parameter or ``let`` binder).

    ``attrs`` holds parameter attributes such as ``{virtual_device=...}``.
    """

    name: str
    type_annotation: Optional[Type] = None
    attrs: Attrs = EMPTY_ATTRS
    span: Optional[Span] = _span()

    @property
    def name_hint(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class GlobalVar(Expr):
    """A reference to a module-level function ``@name``."""

    name: str
    span: Optional[Span] = _span()

    @property
    def name_hint(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Op(Expr):
    """A primitive operator referenced by name, e.g. ``nn.conv2d``."""

    name: str
    span: Optional[Span] = _span()

    def __str__(self) -> str:  # Relay printed an op as its name (legacy code compares it)
        return self.name


class ConstantData(np.ndarray):
    """A constant's array that also answers ``.numpy()``, as Relay's ``Constant.data``
    (a TVM NDArray) did: ``const.data.numpy().item()`` in legacy callbacks keeps working."""

    def numpy(self) -> np.ndarray:
        return np.asarray(self)

    def __repr__(self) -> str:
        return repr(np.asarray(self))


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A tensor constant.

    Literals (``1f``, ``2i64``, ``True``) carry a 0-d ``data`` array.  A
    ``meta[relay.Constant][N]`` reference carries ``meta_index=N`` and the array
    from the ``#[metadata]`` section when the text had one; otherwise ``data``
    is ``None`` and the importer reports the missing value.  ``type_annotation``
    holds the ``/* ty=... */`` type printed beside a meta constant, if any.
    """

    data: Optional[np.ndarray]
    meta_index: Optional[int] = None
    type_annotation: Optional[Type] = None
    span: Optional[Span] = _span()

    def __post_init__(self) -> None:
        if isinstance(self.data, np.ndarray) and not isinstance(self.data, ConstantData):
            object.__setattr__(self, "data", self.data.view(ConstantData))

    @property
    def dtype(self) -> Optional[str]:
        if self.data is not None:
            return str(self.data.dtype)
        if isinstance(self.type_annotation, TensorType):
            return self.type_annotation.dtype
        return None


@dataclass(frozen=True, eq=False)
class MetaRef(Expr):
    """Any other ``meta[kind][index]`` reference (attrs, VirtualDevice, SizeVar ...)."""

    kind: str
    index: int
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """``op(args..., key=value...)``; ``op`` is an :class:`Op`, a function
    expression, a :class:`GlobalVar`, a :class:`Var` or a :class:`Constructor`."""

    op: Expr
    args: tuple[Expr, ...]
    attrs: Attrs = EMPTY_ATTRS
    type_args: tuple[Type, ...] = ()
    span: Optional[Span] = _span()

    def __post_init__(self) -> None:
        _normalise(self, "args", "type_args")
        if isinstance(self.op, Op) and isinstance(self.attrs, Attrs) and self.attrs._op is None:
            object.__setattr__(self, "attrs", self.attrs.for_op(self.op.name))


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    """A tuple literal ``(a, b)``."""

    fields: tuple[Expr, ...]
    span: Optional[Span] = _span()

    def __post_init__(self) -> None:
        _normalise(self, "fields")

    def __getitem__(self, index: int) -> Expr:
        return self.fields[index]

    def __len__(self) -> int:
        return len(self.fields)

    def __bool__(self) -> bool:
        return True  # a node, even the empty tuple, is never falsy


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """``fn [T](%x: T, ...) -> R { body }`` (also the body of ``def @name``).

    ``attrs`` holds function attributes (``Primitive=1``, ``Composite="..."``,
    ``Compiler="..."``, ``global_symbol=...``).
    """

    params: tuple[Var, ...]
    body: Expr
    ret_type: Optional[Type] = None
    type_params: tuple[TypeVar, ...] = ()
    attrs: Attrs = EMPTY_ATTRS
    span: Optional[Span] = _span()

    def __post_init__(self) -> None:
        _normalise(self, "params", "type_params")

    def with_attr(self, key: str, value: Any = None) -> "Function":
        """A copy with attribute ``key`` set (Relay's ``Function.with_attr``)."""
        from dataclasses import replace

        attrs = dict(self.attrs)
        if isinstance(value, Constant) and value.data is not None and value.data.ndim == 0:
            value = value.data.item()
        attrs[key] = getattr(value, "value", value) if type(value).__name__ in (
            "IntImm", "FloatImm", "StringImm") else value
        return replace(self, attrs=Attrs(attrs))


@dataclass(frozen=True, eq=False)
class Let(Expr):
    """``let %var(: T)? = value; body``."""

    var: Var
    value: Expr
    body: Expr
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class If(Expr):
    cond: Expr
    true_branch: Expr
    false_branch: Expr
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class Constructor(Expr):
    """A reference to an ADT constructor such as ``Cons`` or ``Nil``."""

    name: str
    span: Optional[Span] = _span()


class Pattern:
    """Base class of ``match`` clause patterns."""


@dataclass(frozen=True, eq=False)
class PatternWildcard(Pattern):
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class PatternVar(Pattern):
    var: Var
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class PatternConstructor(Pattern):
    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class PatternTuple(Pattern):
    patterns: tuple[Pattern, ...]
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class Clause:
    lhs: Pattern
    rhs: Expr
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class Match(Expr):
    """``match (data) { clauses }``; ``complete=False`` for ``match?``."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class RefCreate(Expr):
    value: Expr
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class RefRead(Expr):
    ref: Expr
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class RefWrite(Expr):
    ref: Expr
    value: Expr
    span: Optional[Span] = _span()


# --------------------------------------------------------------------------- module
@dataclass(frozen=True, eq=False)
class ConstructorDef:
    """One constructor of an ADT declaration: ``Cons(A, List[A])``."""

    name: str
    inputs: tuple[Type, ...] = ()
    span: Optional[Span] = _span()


@dataclass(frozen=True, eq=False)
class TypeData:
    """``type Name[A, ...] { Ctor(...), ... }``."""

    name: str
    type_params: tuple[TypeVar, ...]
    constructors: tuple[ConstructorDef, ...]
    span: Optional[Span] = _span()


def _global_name(key: Any) -> str:
    """A module key as Relay scripts write it: ``"main"``, ``"@main"`` or a GlobalVar."""
    if isinstance(key, GlobalVar):
        return key.name
    if isinstance(key, str):
        return key[1:] if key.startswith("@") else key
    raise TypeError(f"a module's functions are named by str or GlobalVar, not "
                    f"{type(key).__name__}")


class IRModule:
    """A Relay module: global functions, ADT declarations and metadata.

    Mirrors ``tvm.IRModule`` as Relay users met it: ``mod["main"]``,
    ``mod.functions``, ``IRModule.from_expr(func)``, ``mod.astext()``.
    """

    def __init__(
        self,
        functions: Optional[Mapping[str, Function]] = None,
        type_definitions: Optional[Mapping[str, TypeData]] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        source_name: str = "<string>",
    ):
        # Keys as Relay scripts give them: "name", "@name" or a GlobalVar.
        self.functions: dict[str, Function] = {
            _global_name(k): f for k, f in (functions or {}).items()}
        self.type_definitions: dict[str, TypeData] = {
            getattr(k, "name_hint", getattr(k, "name", k)): t
            for k, t in (type_definitions or {}).items()}
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.source_name = source_name

    @classmethod
    def from_expr(cls, expr: Expr, functions: Optional[Mapping[Any, Function]] = None,
                  type_defs: Optional[Mapping[Any, TypeData]] = None) -> "IRModule":
        """Wrap ``expr`` as ``@main`` (a non-function becomes ``fn () { expr }``), beside
        ``functions`` (keyed by ``GlobalVar`` or name), as ``tvm.IRModule.from_expr``."""
        if not isinstance(expr, Function):
            from .analysis import free_vars  # local import: analysis imports ast

            expr = Function(tuple(free_vars(expr)), expr)
        return cls({**(functions or {}), "main": expr}, type_defs)

    def __getitem__(self, name: Union[str, "GlobalVar"]) -> Function:
        key = _global_name(name)
        try:
            return self.functions[key]
        except KeyError:
            raise KeyError(f"module has no global function @{key}") from None

    def __contains__(self, name: Union[str, "GlobalVar"]) -> bool:
        return _global_name(name) in self.functions

    def __setitem__(self, name: Union[str, "GlobalVar"], func: Function) -> None:
        self.functions[_global_name(name)] = func

    def get_global_var(self, name: str) -> "GlobalVar":
        """The ``GlobalVar`` of the function ``name`` (Relay's ``mod.get_global_var``)."""
        key = _global_name(name)
        if key not in self.functions:
            raise KeyError(f"module has no global function @{key}")
        return GlobalVar(key)

    def get_global_vars(self) -> list["GlobalVar"]:
        return [GlobalVar(name) for name in self.functions]

    def astext(self, show_meta_data: bool = True) -> str:
        from .printer import astext

        return astext(self, show_meta_data=show_meta_data)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        names = ", ".join("@" + n for n in self.functions)
        return f"<relay.IRModule {names}>"
