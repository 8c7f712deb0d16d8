"""Builds Relay-API op functions (``relay.nn.conv2d(...)``) from signature tables.

Each op is declared once as ``name: (inputs, attributes)``: the tensor inputs
in Relay's positional order (a ``*`` prefix marks a list input that becomes a
Tuple, e.g. ``concatenate``'s ``*data``), then the attributes with Relay's
Python defaults.  The generated function has a real ``inspect.Signature``, so
legacy scripts call it positionally or by keyword exactly as with
``tvm.relay``, and records only the attributes the caller passed (the printer
and the importer supply Relay's defaults).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .. import ast

_MISSING = inspect.Parameter.empty


class Always:
    """A Python-API default that differs from the text format's (C++) default.

    The printer and the importer assume the C++ default for an attribute that is
    absent, so an op built with such a default must record it explicitly
    (``nn.batch_matmul``'s ``transpose_b=True``, ``nn.leaky_relu``'s ``alpha=0.01``).
    """

    def __init__(self, value: Any):
        self.value = value

# Ops whose result is a tuple in Relay: the Python API returns a TupleWrapper.
TUPLE_RESULTS = {"nn.batch_norm": 3, "split": None, "nn.dropout": 2}


class TupleWrapper:
    """A tuple-valued call, indexable like Relay's ``TupleWrapper``."""

    def __init__(self, tuple_value: ast.Expr, size: Optional[int]):
        self.tuple_value = tuple_value
        self.size = size

    def astuple(self) -> ast.Expr:
        return self.tuple_value

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


def as_expr(value: Any, what: str) -> ast.Expr:
    """An Expr from an Expr, a TupleWrapper, a Python scalar or an array."""
    if isinstance(value, ast.Expr):
        return value
    if isinstance(value, TupleWrapper):
        return value.astuple()
    if isinstance(value, (bool, int, float, np.ndarray, np.generic, list)):
        from ..builder import const

        return const(value)
    raise TypeError(f"{what}: expected a Relay expression, got {type(value).__name__}")


def _attr_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_attr_value(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, ast.Constant) and value.data is not None and value.data.ndim == 0:
        return value.data.item()
    return value


def make_op(name: str, inputs: Sequence[str], attrs: Sequence[tuple[str, Any]],
            doc: str = "") -> Callable[..., Any]:
    """A Relay-API function for op ``name`` (see module docstring)."""
    params = []
    for inp in inputs:
        params.append(inspect.Parameter(inp.lstrip("*?"), inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if inp.startswith("?") else _MISSING))
    always = {attr: d.value for attr, d in attrs if isinstance(d, Always)}
    for attr, default in attrs:
        params.append(inspect.Parameter(attr, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=always.get(attr, default)))
    signature = inspect.Signature(params)
    tuple_size = TUPLE_RESULTS.get(name, 0)

    def op_function(*args: Any, **kwargs: Any):
        bound = signature.bind(*args, **kwargs)
        values = bound.arguments
        call_args = []
        for inp in inputs:
            key = inp.lstrip("*?")
            value = values.get(key)
            if inp.startswith("?") and value is None:
                continue
            if inp.startswith("*"):
                fields = value.fields if isinstance(value, ast.Tuple) else \
                    tuple(as_expr(v, f"{name} {key}") for v in value)
                call_args.append(ast.Tuple(tuple(fields)))
            else:
                call_args.append(as_expr(value, f"{name} {key}"))
        given = {a: _attr_value(values[a] if a in values else always[a])
                 for a, _ in attrs if a in values or a in always}
        call = ast.Call(ast.Op(name), tuple(call_args), ast.Attrs(given))
        if tuple_size != 0:
            size = tuple_size
            if name == "split":
                sections = given.get("indices_or_sections")
                size = sections if isinstance(sections, int) else len(sections) + 1
            return TupleWrapper(call, size)
        return call

    op_function.__name__ = name.rsplit(".", 1)[-1]
    op_function.__qualname__ = op_function.__name__
    op_function.__signature__ = signature  # type: ignore[attr-defined]
    op_function.__doc__ = doc or f"Relay ``{name}``: builds a call node (no computation)."
    return op_function


def define_ops(namespace: dict, prefix: str, table: dict) -> list[str]:
    """Create every op of ``table`` in ``namespace``; returns the Python names."""
    names = []
    for short, (inputs, attrs) in table.items():
        namespace[short] = make_op(prefix + short, inputs.split(), attrs)
        names.append(short)
    return names
