"""Builds Relay-API op functions (``relay.nn.conv2d(...)``) from signature tables.

Each op is declared once as ``name: (signature, inputs)``: ``signature`` is
Relay v0.19's Python parameter list, verbatim (``"data, pad_width,
pad_value=0, pad_mode='constant'"``), and ``inputs`` names the parameters that
are tensor operands of the call, in the call's argument order; every other
parameter is an attribute.  An input name may carry a prefix: ``*`` for a list
of tensors that becomes one Tuple operand (``concatenate``'s ``data``; an
expression of tuple type is passed through as is), ``?`` for an optional
operand left out when ``None``.

The generated function has that exact ``inspect.Signature``, so legacy
scripts call it positionally or by keyword as with ``tvm.relay``.  It records
only the attributes the caller passed (plus those listed as ``always``: Python
defaults that differ from the C++ attribute default the printer and importer
assume).  A non-expression operand (``pad_value=0``) becomes a constant with
Relay's dtype rules; a constant given for an attribute (``newshape=const([2, 3])``)
becomes its value, as Relay's Python API did.

Relay's Python builders also rewrote some attributes before calling ``_make.*``
(``strides=2`` became ``(2, 2)``, ``padding=1`` went through ``get_pad_tuple2d`` to
``(1, 1, 1, 1)``, a reduction's ``axis=1`` became ``[1]``), and every reader of a call
(pattern ``has_attr``, check functions, the printer, the importer) saw only the rewritten
value.  A table entry states those rewrites as ``normalise``: attribute (or operand) name
-> :data:`Normaliser`, applied to each recorded value; the helpers below restate v0.19's.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np

from .. import ast

#: Every builder op defined through this module: Python path -> Relay op name.
REGISTERED: dict[str, str] = {}

#: Relay op name -> (signature, operand specs) of the first :func:`make_op` building it:
#: what :mod:`bmlib_relax.relay.op_schema` reads each op's attribute fields and arity from.
SIGNATURES: dict[str, tuple[inspect.Signature, tuple[str, ...]]] = {}

#: ``normaliser(value, arguments)``: the value Relay's Python builder passed on to
#: ``_make.*`` for one argument (``arguments``: every bound argument, for rewrites that
#: read another one, such as ``stft``'s ``hop_length = n_fft // 4``).
Normaliser = Callable[[Any, Mapping[str, Any]], Any]

#: Relay op name -> {argument: normaliser} of the first :func:`make_op` building it.
NORMALISERS: dict[str, dict[str, Normaliser]] = {}


class TupleWrapper:
    """A tuple-valued call, indexable like Relay's ``TupleWrapper``."""

    def __init__(self, tuple_value: ast.Expr, size: Optional[int]):
        self.tuple_value = tuple_value
        self.size = size

    def astuple(self) -> ast.Expr:
        return self.tuple_value

    def astext(self) -> str:
        return self.tuple_value.astext()

    def __getitem__(self, index: int) -> ast.TupleGetItem:
        if self.size is not None and not -self.size <= index < self.size:
            raise IndexError(f"tuple index {index} out of range for {self.size} fields")
        if index < 0 and self.size is not None:
            index += self.size
        return ast.TupleGetItem(self.tuple_value, index)

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError("the number of fields of this tuple is not known")
        return self.size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"TupleWrapper({self.tuple_value!r}, {self.size})"

    def astype(self, _dtype: str):
        raise TypeError("astype cannot be used on a TupleWrapper")


def as_expr(value: Any, what: str, dtype: Optional[str] = None) -> ast.Expr:
    """An Expr from an Expr, a TupleWrapper, a Python scalar or an array."""
    if isinstance(value, ast.Expr):
        return value
    if isinstance(value, TupleWrapper):
        return value.astuple()
    if isinstance(value, (bool, int, float, np.ndarray, np.generic, list, tuple)):
        from ..builder import const

        return const(value, dtype)
    raise TypeError(f"{what}: expected a Relay expression, got {type(value).__name__}")


def attr_value(value: Any) -> Any:
    """An attribute as the AST stores it (constants and numpy values as Python values)."""
    if isinstance(value, ast.Constant) and value.data is not None:
        value = value.data.tolist()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(attr_value(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if type(value).__name__ in ("IntImm", "FloatImm"):
        return value.value
    if type(value).__name__ == "StringImm":
        return value.value
    return value


def tuple_operand(value: Any, what: str) -> ast.Expr:
    """A list of tensors as one Tuple operand; an expression of tuple type passes as is."""
    if isinstance(value, TupleWrapper):
        return value.astuple()
    if isinstance(value, ast.Expr):
        return value
    return ast.Tuple(tuple(as_expr(v, what) for v in value))


def parse_signature(text: str) -> inspect.Signature:
    """``inspect.Signature`` of a Python parameter list written as text."""
    namespace: dict = {}
    exec(f"def _f({text}):\n    pass", {}, namespace)  # noqa: S102 - our own constant tables
    return inspect.signature(namespace["_f"])


# ----------------------------------------------------------------------- normalisers
def per_axis(ndim: int) -> Normaliser:
    """An int becomes ``ndim`` copies (v0.19's ``if isinstance(strides, int): strides =
    (strides, strides)`` in nn.py's conv / pool builders); anything else passes."""
    def normalise(value: Any, _arguments: Mapping[str, Any]) -> Any:
        return (value,) * ndim if isinstance(value, int) and not isinstance(value, bool) \
            else value
    return normalise


def pad_tuple(ndim: int) -> Normaliser:
    """``get_pad_tuple1d/2d/3d`` (v0.19 ``python/tvm/relay/op/nn/utils.py``): an int or
    ``ndim`` values pad both sides alike, ``2 * ndim`` values (before..., after...) pass,
    any other length or kind is refused with v0.19's ValueError."""
    def normalise(value: Any, _arguments: Mapping[str, Any]) -> tuple:
        if isinstance(value, (list, tuple)):
            if len(value) == 2 * ndim:
                return tuple(value)
            if len(value) != ndim:
                sizes = "1 or 2" if ndim == 1 else f"{ndim} or {2 * ndim}"
                raise ValueError(f"Size of padding can only be {sizes}")
            total = [v * 2 for v in value]
        elif isinstance(value, int) and not isinstance(value, bool):
            total = [value * 2] * ndim
        else:
            raise ValueError(f"Unknown padding option {value}")
        before = [(t + 1) // 2 for t in total]
        return tuple(before) + tuple(t - b for t, b in zip(total, before))
    return normalise


def int_as_list(value: Any, _arguments: Optional[Mapping[str, Any]] = None) -> Any:
    """An int becomes a one-element list: v0.19 reduce.py's ``axis = [axis] if
    isinstance(axis, int) else axis`` and transform.py's squeeze / reshape / broadcast_to."""
    return (value,) if isinstance(value, int) and not isinstance(value, bool) else value


def default_to(make_default: Callable[[Mapping[str, Any]], Any]) -> Normaliser:
    """``None`` becomes ``make_default(arguments)`` (v0.19's ``if roi is None: roi = ...``)."""
    def normalise(value: Any, arguments: Mapping[str, Any]) -> Any:
        return make_default(arguments) if value is None else value
    return normalise


def normalise_attrs(op_name: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` (e.g. a builder signature's defaults) as ``op_name``'s builder records them:
    its normalisers applied to the attributes present (``conv1d``'s default ``strides=1``
    is ``(1,)`` in a call, as in v0.19).  A rewrite that reads an argument ``attrs`` lacks
    (``stft``'s ``hop_length`` from ``n_fft``) leaves its value as it is."""
    out = dict(attrs)
    for key, normalise in NORMALISERS.get(op_name, {}).items():
        if key in out:
            try:
                out[key] = normalise(out[key], out)
            except KeyError:
                pass
    return out


def make_op(name: str, signature: str, inputs: str, doc: str = "",
            always: Iterable[str] = (), tuple_size: Any = 0,
            py_name: Optional[str] = None,
            normalise: Optional[Mapping[str, Normaliser]] = None) -> Callable[..., Any]:
    """A Relay-API function for op ``name`` (see module docstring).

    ``normalise``: argument name -> :data:`Normaliser`, the rewrites v0.19's Python
    builder made before ``_make.*``; an attribute's runs on every value recorded (given,
    or listed in ``always``: list there an attribute whose rewritten Python default
    differs from the C++ default, as ``conv2d``'s ``padding`` (0, 0) -> (0, 0, 0, 0)),
    an operand's on its value before it becomes an expression.

    ``tuple_size``: 0 for a tensor result, else the number of fields of the
    result tuple (the function returns a :class:`TupleWrapper`), or a callable
    computing it from the recorded attributes.
    """
    sig = parse_signature(signature)
    operand_specs = inputs.split()
    operand_names = {spec.lstrip("*?+") for spec in operand_specs}
    unknown = operand_names - set(sig.parameters)
    if unknown:
        raise ValueError(f"{name}: inputs {sorted(unknown)} are not parameters")
    attr_names = [p for p in sig.parameters if p not in operand_names]
    always = set(always)
    normalise = dict(normalise or {})
    unknown = set(normalise) - set(sig.parameters)
    if unknown:
        raise ValueError(f"{name}: normalised {sorted(unknown)} are not parameters")
    SIGNATURES.setdefault(name, (sig, tuple(operand_specs)))
    NORMALISERS.setdefault(name, normalise)

    def op_function(*args: Any, **kwargs: Any):
        bound = sig.bind(*args, **kwargs)
        given = dict(bound.arguments)
        bound.apply_defaults()
        recorded = [a for a in attr_names if a in given or a in always]
        values = dict(bound.arguments)
        values.update({a: attr_value(values[a]) for a in recorded})
        for key, rewrite in normalise.items():
            if key in operand_names or key in recorded:
                values[key] = rewrite(values[key], values)
        call_args = []
        for spec in operand_specs:
            key = spec.lstrip("*?+")
            value = values[key]
            if spec.startswith("?") and value is None:
                continue
            if spec.startswith("+"):  # a sparse matrix: its arrays are three operands
                fields = (value.data, value.indices, value.indptr) \
                    if hasattr(value, "indptr") else tuple(value)
                call_args.extend(as_expr(f, f"{name} {key}") for f in fields)
            elif spec.startswith("*"):
                call_args.append(tuple_operand(value, f"{name} {key}"))
            else:
                call_args.append(as_expr(value, f"{name} {key}"))
        attrs = {a: attr_value(values[a]) for a in recorded}
        call = ast.Call(ast.Op(name), tuple(call_args), ast.Attrs(attrs))
        size = tuple_size(attrs, call_args) if callable(tuple_size) else tuple_size
        return TupleWrapper(call, size) if size else call

    short = py_name or name.rsplit(".", 1)[-1]
    op_function.__name__ = short
    op_function.__qualname__ = short
    op_function.__signature__ = sig  # type: ignore[attr-defined]
    op_function.__doc__ = doc or f"Relay ``{name}``: builds a call node (no computation)."
    op_function.relay_op_name = name  # type: ignore[attr-defined]
    return op_function


def define_ops(namespace: dict, prefix: str, table: dict, **common: Any) -> list[str]:
    """Create every op of ``table`` in ``namespace``; returns the Python names.

    A table value is ``(signature, inputs)`` or ``(signature, inputs, options)``
    with ``options`` passed to :func:`make_op`.
    """
    names = []
    for short, entry in table.items():
        signature, inputs = entry[0], entry[1]
        options = dict(common, **(entry[2] if len(entry) > 2 else {}))
        op_name = options.pop("op_name", prefix + short)
        namespace[short] = make_op(op_name, signature, inputs, py_name=short, **options)
        register(prefix + short, op_name)
        names.append(short)
    return names


def register(path: str, op_name: str) -> None:
    """Record builder function ``relay.<path>`` (building Relay op ``op_name``)."""
    REGISTERED[path] = op_name


def registered(path: str, op_name: Optional[str] = None):
    """Decorator recording a hand-written builder function (see :func:`register`)."""
    def wrap(fn):
        register(path, op_name or path)
        return fn
    return wrap


# ----------------------------------------------------------------------- the dyn.* forms
def is_dynamic(value: Any) -> bool:
    """A builder argument Relay took as a run-time operand: an expression that is not
    a constant (Relay's Python API then built the ``dyn.*`` form of the op)."""
    return isinstance(value, ast.Expr) and not (isinstance(value, ast.Constant)
                                                and value.data is not None)


def dynamic_call(op: str, operands: tuple, attrs: dict) -> ast.Call:
    """``dyn.<op>(operands...)``, as Relay's builder made it for run-time shapes / sizes
    (the importer makes it the static op again when those operands are known then, as
    Relay's DynamicToStatic did: :mod:`bmlib_relax.importer.ops.dynamic`)."""
    return ast.Call(ast.Op(f"dyn.{op}"),
                    tuple(as_expr(v, f"dyn.{op} operand") for v in operands), ast.Attrs(attrs))


def dynamic_form(namespace: dict, name: str, operands: str, build_dynamic: Callable) -> None:
    """Replace the builder ``namespace[name]`` by one whose arguments named in
    ``operands`` (space-separated) make the ``dyn.*`` form when any of them is an
    expression (``build_dynamic(bound arguments with defaults)``), as Relay's builder did."""
    static = namespace[name]
    signature = inspect.signature(static)
    names = operands.split()

    def builder(*args: Any, **kwargs: Any):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if any(is_dynamic(bound.arguments.get(arg)) for arg in names):
            return build_dynamic(bound.arguments)
        return static(*args, **kwargs)

    namespace[name] = functools.update_wrapper(builder, static)  # Relay's signature
