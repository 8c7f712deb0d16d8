"""Printer producing Relay text in TVM's ``astext()`` format (``#[version = "0.0.5"]``).

The output is what :func:`bmlib_relax.relay.parser.parse` reads back into a
structurally equal module:

* every non-atomic shared or nested node is bound once to ``%N = ...;``, so
  DAG sharing survives the round trip and the text stays shallow;
* ``let`` chains are printed by a loop, and the bindings a node needs are
  emitted by an explicit-stack post-order walk, so 24k-deep programs never
  recurse in Python (only real syntactic nesting -- closures, ``if`` and
  ``match`` bodies -- does);
* scalar constants are typed literals (``1f``, ``2i64``, ``True``); all other
  constants are ``meta[relay.Constant][N]`` with a ``/* ty=... */`` comment and,
  when ``show_meta_data``, a ``#[metadata]`` section holding their values.
"""
from __future__ import annotations

import base64
import json
import math
import re
from typing import Any, Optional, Union

import numpy as np

from . import ast as A
from .analysis import free_vars_of_nodes, pattern_vars, post_order_list
from .metadata import encode_ndarray
from .parser import _parsing

__all__ = ["astext", "print_type", "print_attr_value"]

_INDENT = "  "
# ASCII only, as the tokenizer (v0.19's ``IsIdent``): Python's Unicode ``\w`` kept ``%xé``,
# a name the parser refuses.
_NAME_RE = re.compile(r"(?:\d+|[A-Za-z_]\w*(?:\.\w+)*)\Z", re.ASCII)
_GLOBAL_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\Z", re.ASCII)
_BAD_NAME_CHARS = re.compile(r"[^\w.]", re.ASCII)

#: dtype -> literal suffix of the scalars printed in place: v0.19's
#: ``IsSimpleScalarDtype`` (src/support/scalars.cc).
#: Its printer put a scalar of any other dtype (``int8``, ``uint8``, ...) in the
#: metadata section, and its parser reads no ``i8``/``u8`` literal back.
_LITERAL_SUFFIX = {
    "int32": "", "int64": "i64", "int16": "i16",
    "float32": "f", "float16": "f16", "float64": "f64",
}

_SUFFIX_BY_DTYPE = {np.dtype(k): v for k, v in _LITERAL_SUFFIX.items()}

_ATOMIC = (A.Var, A.GlobalVar, A.Op, A.Constructor, A.Constant, A.MetaRef)


# ---------------------------------------------------------------------- types / attrs
#: TVM 0.27's float8 names -> v0.19's (its DLDataType2String: ``e4m3_float`` + bits),
#: which v0.19's parser reads and this one reads too.
_V019_DTYPE_NAMES = {"float8_e4m3fn": "e4m3_float8", "float8_e5m2": "e5m2_float8"}


def relay_dtype_name(dtype: str) -> str:
    """``dtype`` as v0.19 printed it (``e4m3_float8`` for TVM 0.27's ``float8_e4m3fn``)."""
    return _V019_DTYPE_NAMES.get(dtype, dtype)


def print_type(ty: Optional[A.Type]) -> str:
    """Relay text of a type (``Tensor[(1, ?), float32]``, ``(A, B)``, ``List[A]``)."""
    if isinstance(ty, A.TensorType):
        if not ty.shape:
            return relay_dtype_name(ty.dtype)
        dims = ", ".join("?" if d is None else str(d) for d in ty.shape)
        return f"Tensor[({dims}), {relay_dtype_name(ty.dtype)}]"
    if isinstance(ty, A.TupleType):
        if len(ty.fields) == 1:
            return f"({print_type(ty.fields[0])},)"
        return "(" + ", ".join(print_type(f) for f in ty.fields) + ")"
    if isinstance(ty, A.TypeVar):
        return ty.name
    if isinstance(ty, A.TypeCall):
        if not ty.args:
            return ty.name
        return f"{ty.name}[" + ", ".join(print_type(a) for a in ty.args) + "]"
    if isinstance(ty, A.FuncType):
        tps = ""
        if ty.type_params:
            tps = "[" + ", ".join(tp.name for tp in ty.type_params) + "]"
        params = ", ".join(print_type(p) for p in ty.params)
        ret = f" -> {print_type(ty.ret)}" if ty.ret is not None else ""
        return f"fn {tps}({params}){ret}"
    if isinstance(ty, A.RefType):
        return f"Ref[{print_type(ty.value)}]"
    if isinstance(ty, A.IncompleteType) or ty is None:
        return "_"
    raise TypeError(f"cannot print type {ty!r}")


def _float_text(value: float, np_value: Any) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = str(np_value)  # numpy gives the shortest round-tripping repr per dtype
    if text.endswith(".0"):
        text = text[:-2]
    return text


def print_attr_value(value: Any) -> str:
    """Relay text of an attribute value (lists print as ``[...]``)."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return "True" if value else "False"
    if value is None:
        return "None"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "nanf64"
        if math.isinf(value):
            return "inff64" if value > 0 else "-inff64"
        return repr(value)
    if isinstance(value, str):
        return _quote(relay_dtype_name(value))  # cast(%x, dtype="e4m3_float8")
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(print_attr_value(v) for v in value) + "]"
    if isinstance(value, A.MetaRef):
        return f"meta[{value.kind}][{value.index}]"
    if isinstance(value, np.ndarray):
        return print_attr_value(value.tolist())
    return _quote(str(value))


def _quote(text: str) -> str:
    """A string literal the tokenizer accepts (no raw newlines; non-ASCII kept)."""
    return json.dumps(text, ensure_ascii=False)


def _type_comment(node: A.Expr) -> str:
    """`` /* ty=T */`` after an expression whose type was inferred (InferType), like Relay."""
    ty = node.__dict__.get("_checked_type") if hasattr(node, "__dict__") else None
    if ty is None or isinstance(node, (A.Function, A.Var, A.Constant)):
        return ""
    return f" /* ty={print_type(ty)} */"


def _attrs_text(attrs: A.Attrs) -> list[str]:
    return [f"{k}={print_attr_value(v)}" for k, v in attrs.items()]


# ---------------------------------------------------------------------- metadata
class _MetaTable:
    """Collects constants printed as ``meta[relay.Constant][N]``."""

    def __init__(self, reserved: set[int], other_counts: dict[str, int]):
        self.arrays: dict[int, np.ndarray] = {}
        self.index_of: dict[int, int] = {}
        self.reserved = reserved
        self.next_index = max(reserved) + 1 if reserved else 0
        self.other_counts = other_counts

    def index(self, const: A.Constant) -> int:
        if const.data is None:
            return const.meta_index if const.meta_index is not None else 0
        key = id(const)
        if key not in self.index_of:
            self.index_of[key] = self.next_index
            self.arrays[self.next_index] = const.data
            self.next_index += 1
        return self.index_of[key]

    def to_json(self) -> str:
        """TVM-style metadata JSON (root Map -> Array of relay.Constant nodes)."""
        nodes: list[dict[str, Any]] = [{"type_key": ""}, None, None]  # type: ignore[list-item]
        blobs: list[str] = []
        const_nodes: list[int] = []
        count = max(self.arrays) + 1 if self.arrays else 0
        for i in range(count):
            node: dict[str, Any] = {"type_key": "relay.Constant", "attrs": {}}
            if i in self.arrays:
                node["attrs"]["data"] = str(len(blobs))
                blobs.append(base64.b64encode(encode_ndarray(self.arrays[i])).decode("ascii"))
            const_nodes.append(len(nodes))
            nodes.append(node)
        keys, values = [], []
        if count:
            nodes[2] = {"type_key": "Array", "data": const_nodes}
            keys.append("relay.Constant")
            values.append(2)
        else:
            nodes[2] = {"type_key": "Array", "data": []}
        for kind, n in sorted(self.other_counts.items()):
            if kind == "relay.Constant":
                continue
            items = []
            for _ in range(n):
                items.append(len(nodes))
                nodes.append({"type_key": kind})
            keys.append(kind)
            values.append(len(nodes))
            nodes.append({"type_key": "Array", "data": items})
        nodes[1] = {"type_key": "Map", "keys": keys, "data": values}
        doc = {"root": 1, "nodes": nodes, "b64ndarrays": blobs,
               "attrs": {"tvm_version": "0.19.0"}}
        return json.dumps(doc, indent=2)


# ---------------------------------------------------------------------- names
class _Namer:
    """Unique, parseable names for the variables of one top-level definition."""

    def __init__(self, nodes: list[A.Expr]):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        for node in nodes:  # post-order of the definition: names in textual order
            if isinstance(node, A.Var):
                self.var_name(node)
            elif isinstance(node, A.Match):
                for clause in node.clauses:
                    for v in pattern_vars(clause.lhs):
                        self.var_name(v)
        self.counter = 0

    def var_name(self, var: A.Var) -> str:
        name = self.names.get(id(var))
        if name is not None:
            return name
        base = var.name if _NAME_RE.match(var.name) else \
            (_BAD_NAME_CHARS.sub("_", var.name).strip(".") or "v")
        if not _NAME_RE.match(base):
            base = "v_" + base
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self.names[id(var)] = name
        return name

    def fresh(self) -> str:
        while str(self.counter) in self.used:
            self.counter += 1
        name = str(self.counter)
        self.counter += 1
        return name


# ---------------------------------------------------------------------- expressions
class _ExprPrinter:
    """Prints the expressions of one top-level definition."""

    def __init__(self, namer: _Namer, meta: _MetaTable):
        self.namer = namer
        self.meta = meta
        self.memo: list[dict[int, str]] = []
        self.out: list[str] = []   # statements of the current block
        self.level = 0             # indentation of the current block

    # -- blocks
    def block(self, expr: A.Expr, level: int) -> list[str]:
        """Lines of a ``{ }`` body at indentation ``level`` (bindings + result)."""
        saved = (self.out, self.level)
        self.out, self.level = [], level
        self.memo.append({})
        pad = _INDENT * level
        while isinstance(expr, A.Let):
            self.ensure(expr.value)
            var = expr.var
            ty = f": {print_type(var.type_annotation)}" if var.type_annotation is not None else ""
            self.out.append(f"{pad}let %{self.namer.var_name(var)}{ty} = "
                            f"{self.inline(expr.value)};")
            expr = expr.body
        self.ensure(expr)
        self.out.append(pad + self.inline(expr) + _type_comment(expr))
        lines = self.out
        self.memo.pop()
        self.out, self.level = saved
        return lines

    def lookup(self, node: A.Expr) -> Optional[str]:
        key = id(node)
        for scope in reversed(self.memo):
            ref = scope.get(key)
            if ref is not None:
                return ref
        return None

    def ensure(self, root: A.Expr) -> None:
        """Bind every not-yet-printed non-atomic operand below ``root`` (post-order)."""
        stack: list[tuple[A.Expr, bool]] = [(c, False) for c in reversed(self.operands(root))]
        queued: set[int] = set()
        while stack:
            node, ready = stack.pop()
            if ready:
                if self.lookup(node) is None:
                    self.bind(node)
                continue
            if isinstance(node, _ATOMIC) or id(node) in queued or self.lookup(node) is not None:
                continue
            queued.add(id(node))
            stack.append((node, True))
            for child in reversed(self.operands(node)):
                if not isinstance(child, _ATOMIC) and self.lookup(child) is None:
                    stack.append((child, False))

    @staticmethod
    def operands(node: A.Expr) -> tuple[A.Expr, ...]:
        """Children printed as atoms inside ``node``'s own text (not nested blocks)."""
        if isinstance(node, A.Call):
            return (node.op,) + node.args
        if isinstance(node, A.Tuple):
            return node.fields
        if isinstance(node, A.TupleGetItem):
            return (node.tuple_value,)
        if isinstance(node, A.If):
            return (node.cond,)
        if isinstance(node, A.Match):
            return (node.data,)
        if isinstance(node, A.RefCreate):
            return (node.value,)
        if isinstance(node, A.RefRead):
            return (node.ref,)
        if isinstance(node, A.RefWrite):
            return (node.ref, node.value)
        return ()

    def bind(self, node: A.Expr) -> None:
        name = self.namer.fresh()
        self.out.append(f"{_INDENT * self.level}%{name} = {self.inline(node)}"
                        f"{_type_comment(node)};")
        self.memo[-1][id(node)] = f"%{name}"

    # -- atoms and node text
    def atom(self, node: A.Expr) -> str:
        if isinstance(node, A.Var):
            return "%" + self.namer.var_name(node)
        if isinstance(node, A.GlobalVar):
            return "@" + node.name
        if isinstance(node, (A.Op, A.Constructor)):
            return node.name
        if isinstance(node, A.Constant):
            return self.constant(node)
        if isinstance(node, A.MetaRef):
            return f"meta[{node.kind}][{node.index}]"
        ref = self.lookup(node)
        if ref is None:  # not reachable through ensure(): print in place
            self.ensure(node)
            self.bind(node)
            ref = self.lookup(node)
        return ref  # type: ignore[return-value]

    def constant(self, const: A.Constant) -> str:
        data = const.data
        if data is not None and data.ndim == 0:
            if data.dtype.kind == "b":
                return "True" if bool(data) else "False"
            suffix = _SUFFIX_BY_DTYPE.get(data.dtype)
            if suffix is not None:
                if data.dtype.kind == "f":
                    return _float_text(float(data), data[()]) + suffix
                return f"{int(data)}{suffix}"
        index = self.meta.index(const)
        ty = const.type_annotation
        if data is not None:
            ty = A.TensorType(tuple(int(d) for d in data.shape), str(data.dtype))
        comment = f" /* ty={print_type(ty)} */" if ty is not None else ""
        return f"meta[relay.Constant][{index}]{comment}"

    def inline(self, node: A.Expr) -> str:
        """Text of ``node`` itself; its operands must already be printable atoms."""
        if isinstance(node, _ATOMIC):
            return self.atom(node)
        if isinstance(node, A.Call):
            args = [self.atom(a) for a in node.args] + _attrs_text(node.attrs)
            return f"{self.atom(node.op)}({', '.join(args)})"
        if isinstance(node, A.Tuple):
            fields = [self.atom(f) for f in node.fields]
            if len(fields) == 1:
                return f"({fields[0]},)"
            return "(" + ", ".join(fields) + ")"
        if isinstance(node, A.TupleGetItem):
            base = self.atom(node.tuple_value)
            if not re.fullmatch(r"%\d+", base):
                name = base[1:] + f".{node.index}"
                if not base.startswith("%") or name in self.namer.used:
                    base = f"({base})"
            return f"{base}.{node.index}"
        if isinstance(node, A.Function):
            return self.function(node, "fn ", self.level)
        if isinstance(node, A.If):
            pad = _INDENT * self.level
            then = "\n".join(self.block(node.true_branch, self.level + 1))
            other = "\n".join(self.block(node.false_branch, self.level + 1))
            return (f"if ({self.atom(node.cond)}) {{\n{then}\n{pad}}} else {{\n"
                    f"{other}\n{pad}}}")
        if isinstance(node, A.Match):
            return self.match(node)
        if isinstance(node, A.Let):
            body = "\n".join(self.block(node, self.level + 1))
            return f"(\n{body}\n{_INDENT * self.level})"
        if isinstance(node, A.RefCreate):
            return f"ref({self.atom(node.value)})"
        if isinstance(node, A.RefRead):
            return f"ref_read({self.atom(node.ref)})"
        if isinstance(node, A.RefWrite):
            return f"ref_write({self.atom(node.ref)}, {self.atom(node.value)})"
        raise TypeError(f"cannot print {type(node).__name__}")

    def param(self, var: A.Var) -> str:
        text = "%" + self.namer.var_name(var)
        if var.attrs:
            text += " {" + ", ".join(_attrs_text(var.attrs)) + "}"
        if var.type_annotation is not None:
            text += ": " + print_type(var.type_annotation)
        return text

    def function(self, func: A.Function, head: str, level: int) -> str:
        """``fn [T](params, attrs) -> R {`` body ``}`` (``head`` is ``fn `` or ``def @f``)."""
        tps = ""
        if func.type_params:
            tps = "[" + ", ".join(tp.name for tp in func.type_params) + "]"
        params = [self.param(p) for p in func.params] + _attrs_text(func.attrs)
        ret_type = func.ret_type
        if ret_type is None and isinstance(func.__dict__.get("_checked_type"), A.FuncType):
            ret_type = func.__dict__["_checked_type"].ret  # after InferType, as Relay printed
        ret = f" -> {print_type(ret_type)}" if ret_type is not None else ""
        body = "\n".join(self.block(func.body, level + 1))
        return f"{head}{tps}({', '.join(params)}){ret} {{\n{body}\n{_INDENT * level}}}"

    def pattern(self, pat: A.Pattern) -> str:
        if isinstance(pat, A.PatternWildcard):
            return "_"
        if isinstance(pat, A.PatternVar):
            ty = pat.var.type_annotation
            name = "%" + self.namer.var_name(pat.var)
            return f"{name}: {print_type(ty)}" if ty is not None else name
        if isinstance(pat, A.PatternConstructor):
            if not pat.patterns:
                return pat.constructor.name
            return (f"{pat.constructor.name}("
                    + ", ".join(self.pattern(p) for p in pat.patterns) + ")")
        if isinstance(pat, A.PatternTuple):
            if len(pat.patterns) == 1:
                return f"({self.pattern(pat.patterns[0])},)"
            return "(" + ", ".join(self.pattern(p) for p in pat.patterns) + ")"
        raise TypeError(f"cannot print pattern {pat!r}")

    def match(self, node: A.Match) -> str:
        pad = _INDENT * self.level
        inner = _INDENT * (self.level + 1)
        lines = [f"match{'' if node.complete else '?'} ({self.atom(node.data)}) {{"]
        for clause in node.clauses:
            body = "\n".join(self.block(clause.rhs, self.level + 2))
            lines.append(f"{inner}{self.pattern(clause.lhs)} => {{\n{body}\n{inner}}},")
        lines.append(f"{pad}}}")
        return "\n".join(lines)


# ---------------------------------------------------------------------- module
def _type_def_text(td: A.TypeData) -> str:
    tps = "[" + ", ".join(tp.name for tp in td.type_params) + "]" if td.type_params else ""
    lines = [f"type {td.name}{tps} {{"]
    for ctor in td.constructors:
        inputs = ""
        if ctor.inputs:
            inputs = "(" + ", ".join(print_type(t) for t in ctor.inputs) + ")"
        lines.append(f"{_INDENT}{ctor.name}{inputs},")
    lines.append("}")
    return "\n".join(lines)


def _reserved_meta_indices(scans: list[list[A.Expr]]) -> set[int]:
    """Indices of unresolved meta constants: they keep their numbers, so constants
    with data are numbered after them."""
    out: set[int] = set()
    for nodes in scans:
        for node in nodes:
            if isinstance(node, A.Constant) and node.data is None and node.meta_index is not None:
                out.add(node.meta_index)
    return out


def astext(node: Union[A.IRModule, A.Expr], show_meta_data: bool = True) -> str:
    """Print a module or expression as Relay text that :func:`parse` reads back.

    With ``show_meta_data`` the values of non-scalar constants follow in a
    ``#[metadata]`` section; without it only the ``meta[relay.Constant][N]``
    references (with their ``/* ty=... */`` types) are printed.
    """
    # Closures/if/match nested up to the parser's MAX_NESTING recurse a few frames
    # per level; give them the same headroom the parser has.
    with _parsing():
        return _astext(node, show_meta_data)


def _astext(node: Union[A.IRModule, A.Expr], show_meta_data: bool) -> str:
    if isinstance(node, A.IRModule):
        roots: list[A.Expr] = list(node.functions.values())
        counts = dict(node.metadata.get("counts", {})) if node.metadata else {}
    else:
        roots = [node]
        counts = {}
    scans = [post_order_list(root) for root in roots]
    meta = _MetaTable(_reserved_meta_indices(scans), counts)
    parts = ['#[version = "0.0.5"]']
    if isinstance(node, A.IRModule):
        for td in node.type_definitions.values():
            parts.append(_type_def_text(td))
        for (name, func), nodes in zip(node.functions.items(), scans):
            printer = _ExprPrinter(_Namer(nodes), meta)
            if not _GLOBAL_RE.match(name):
                name = _BAD_NAME_CHARS.sub("_", name)
            parts.append(printer.function(func, f"def @{name}", 0))
    else:
        printer = _ExprPrinter(_Namer(scans[0]), meta)
        decls = [f"free_var {printer.param(var)};" for var in free_vars_of_nodes(scans[0])]
        parts.append("\n".join(decls + printer.block(node, 0)))
    text = "\n".join(parts) + "\n"
    if show_meta_data and (meta.arrays or any(k != "relay.Constant" for k in counts)):
        text += "\n#[metadata]\n" + meta.to_json() + "\n"
    return text
