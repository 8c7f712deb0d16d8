"""Which Relax op(s) each Relay op becomes, and which of those bmlib lowers.

Read from the converters themselves, not from a hand-kept list: the Relax op
functions a converter calls (``relax.op.nn.conv2d(...)`` in its source, or a
``relax.op`` function captured in its closure, as the table-driven families
do), following the importer's own helpers it calls.  A Relay op with no Relax op
is rewritten away (``copy``, ``stop_gradient``, ...).  ``bmlib-relax list-ops``
prints the table.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from functools import lru_cache
from typing import Any, Callable

_MAX_DEPTH = 3  # helpers of helpers of a converter


@lru_cache(maxsize=1)
def _relax_functions() -> dict[int, str]:
    """``id(relax.op function) -> op name`` for every function in ``tvm.relax.op``."""
    import tvm
    from tvm import relax

    names: dict[int, str] = {}
    seen: set[int] = set()

    def walk(module: types.ModuleType, prefix: str) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        for attr in dir(module):
            value = getattr(module, attr, None)
            if isinstance(value, types.ModuleType) and value.__name__.startswith(
                    "tvm.relax.op.") and not attr.startswith("_"):
                walk(value, f"{prefix}{attr}.")
            elif callable(value) and not attr.startswith("_"):
                op_name = f"relax.{prefix}{attr}"
                try:
                    tvm.ir.Op.get(op_name)
                except Exception:  # noqa: BLE001 - not a registered op
                    continue
                names.setdefault(id(value), op_name)

    walk(relax.op, "")
    return names


def _attribute_chain(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def relax_ops_of(fn: Callable, depth: int = 0, seen: set | None = None) -> set[str]:
    """Relax op names ``fn`` emits (closure, source, and the importer helpers it calls)."""
    seen = set() if seen is None else seen
    if id(fn) in seen or depth > _MAX_DEPTH:
        return set()
    seen.add(id(fn))
    known = _relax_functions()
    found: set[str] = set()
    code_fn = getattr(fn, "__wrapped__", fn)
    for cell in getattr(code_fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        found |= _from_value(value, known, depth, seen)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code_fn)))
    except (OSError, TypeError, SyntaxError):
        return found
    scope = dict(getattr(code_fn, "__globals__", {}))
    free = _closure_values(code_fn)
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and isinstance(scope.get(node.value.id), dict):
            # a table of ops indexed by a closure value: _POOLS[ndim](...)
            table = scope[node.value.id]
            key = free.get(node.slice.id, _UNKNOWN) if isinstance(node.slice, ast.Name) \
                else getattr(node.slice, "value", _UNKNOWN)
            values = [table[key]] if key in table else list(table.values())
            for value in values:
                found |= _from_value(value, known, depth, seen)
            continue
        if isinstance(node, ast.Attribute):
            chain = _attribute_chain(node)
            if chain[:2] == ["relax", "op"] and len(chain) > 2:
                name = "relax." + ".".join(chain[2:])
                if name in known.values():
                    found.add(name)
        elif isinstance(node, ast.Name) and node.id in scope \
                and not isinstance(scope[node.id], dict):
            found |= _from_value(scope[node.id], known, depth, seen)
    return found


_UNKNOWN = object()


def _closure_values(fn: Callable) -> dict[str, Any]:
    values = {}
    for name, cell in zip(fn.__code__.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:
            continue
    return values


def _from_value(value: Any, known: dict[int, str], depth: int, seen: set) -> set[str]:
    if id(value) in known:
        return {known[id(value)]}
    if isinstance(value, types.FunctionType) and \
            value.__module__.startswith("bmlib_relax.importer"):
        return relax_ops_of(value, depth + 1, seen)
    return set()


def op_table() -> dict[str, Any]:
    """``{"relay_ops": [{"relay", "relax": [{"op", "bmlib_template"}]}], "bmlib_templates"}``."""
    from .backend.templates import template_ops
    from .importer.registry import CONVERTERS

    templates = set(template_ops())
    rows = []
    for relay_op in CONVERTERS.names():
        relax_ops = sorted(relax_ops_of(CONVERTERS.get(relay_op)))
        rows.append({"relay": relay_op,
                     "relax": [{"op": o, "bmlib_template": o in templates} for o in relax_ops]})
    return {"relay_ops": rows, "bmlib_templates": sorted(templates)}
