"""Rebuilding Relay expression DAGs with some nodes replaced.

Nodes are frozen, so a pass that changes a node rebuilds every ancestor; the
walk is iterative (:func:`analysis.post_order_list`) because model dumps are far
deeper than Python's recursion limit.  ``rebuild`` reads each node's children
from its dataclass fields, so it needs no per-node-kind code.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

from ..errors import ParamError
from . import ast
from .analysis import post_order_list

_FIELD_CACHE: dict[type, list[str]] = {}


def _fields(node: object) -> list[str]:
    names = _FIELD_CACHE.get(type(node))
    if names is None:
        names = [f.name for f in dataclasses.fields(node) if f.name != "span"]
        _FIELD_CACHE[type(node)] = names
    return names


def rebuild(node: object, mapped: Callable[[object], object]) -> object:
    """A copy of ``node`` whose child expressions are replaced by ``mapped(child)``.

    Match clauses are rebuilt in place of the match (their right-hand sides are
    children too).  Returns ``node`` itself when nothing changed, preserving DAG
    sharing.
    """
    def new_value(value: object) -> object:
        if isinstance(value, ast.Clause):
            return rebuild(value, mapped)
        if isinstance(value, ast.Expr):
            return mapped(value)
        return value

    changes = {}
    for name in _fields(node):
        value = getattr(node, name)
        if isinstance(value, tuple):
            new = tuple(new_value(v) for v in value)
            if any(a is not b for a, b in zip(new, value)):
                changes[name] = new
        else:
            new = new_value(value)
            if new is not value:
                changes[name] = new
    return dataclasses.replace(node, **changes) if changes else node


def substitute(root: ast.Expr, mapping: Mapping[ast.Expr, ast.Expr],
               transform: Optional[Callable[..., Optional[ast.Expr]]] = None,
               with_original: bool = False) -> ast.Expr:
    """Replace nodes of ``root`` (by identity) and rebuild the parents that changed.

    ``transform``, if given, is called on each rebuilt node (``with_original``: the
    rebuilt node and the node it was rebuilt from) and may return a replacement (or
    ``None`` to keep it).
    """
    done: dict[int, object] = {id(k): v for k, v in mapping.items()}
    for node in post_order_list(root):
        if id(node) in done:
            continue
        new = rebuild(node, lambda c: done.get(id(c), c))
        if transform is not None:
            replaced = transform(new, node) if with_original else transform(new)
            if replaced is not None:
                new = replaced
        done[id(node)] = new
    return done.get(id(root), root)  # type: ignore[return-value]


def _pinned_shape(name: str, shape: Sequence[int], declared) -> tuple[int, ...]:
    """``shape`` for input ``name`` when it only fixes what the declaration left free:
    positive integers, the declared rank, every static declared dim unchanged.  A pin
    that changed a static dim built a different model than the one written."""
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ParamError(f"input {name!r}: shape {tuple(shape)!r} is not a list of integers",
                         name) from None
    if any(d < 0 for d in dims):
        raise ParamError(f"input {name!r}: shape {dims} has a negative dim", name)
    if not isinstance(declared, ast.TensorType):
        return dims
    old = tuple(declared.shape)
    if len(old) != len(dims):
        raise ParamError(f"input {name!r} is declared {_shape_text(old)} (rank {len(old)}); "
                         f"the shape {dims} given for it has rank {len(dims)}", name)
    for axis, (want, got) in enumerate(zip(old, dims)):
        if isinstance(want, int) and want != got:
            raise ParamError(f"input {name!r} is declared {_shape_text(old)}: dim {axis} is "
                             f"{want}, not {got} (only free dims can be pinned)", name)
    return dims


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) if isinstance(d, int) else "?" for d in shape) + ")"


def with_input_types(module: ast.IRModule,
                     types: Mapping[str, tuple[Sequence[int], Optional[str]]]) -> ast.IRModule:
    """``module`` whose ``@main`` inputs get the given static shapes (and dtypes).

    Pins dynamic (``?``) dims so the bmlib templates, which need static shapes,
    can take the model; a dtype of ``None`` keeps the annotated one.
    """
    if not types:
        return module
    main = module["main"]
    names = {v.name: v for v in main.params}
    for name in types:
        if name not in names:
            raise ParamError(f"{name!r} is not an input of @main "
                             f"(inputs: {', '.join(names)})", name)
    mapping: dict[ast.Expr, ast.Expr] = {}
    for var in main.params:
        if var.name not in types:
            continue
        shape, dtype = types[var.name]
        old = var.type_annotation
        dtype = dtype or (old.dtype if isinstance(old, ast.TensorType) else "float32")
        new_type = ast.TensorType(_pinned_shape(var.name, shape, old), dtype)
        mapping[var] = dataclasses.replace(var, type_annotation=new_type)
    body = substitute(main.body, mapping)
    new_main = dataclasses.replace(main, params=tuple(mapping.get(v, v) for v in main.params),
                                   body=body)
    return ast.IRModule({**module.functions, "main": new_main}, module.type_definitions,
                        module.metadata, module.source_name)
