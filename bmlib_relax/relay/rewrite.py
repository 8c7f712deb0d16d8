"""Iterative rebuilding of Relay expression DAGs.

Model dumps are DAGs tens of thousands of nodes deep (A-normal-form ``let``
chains, long graph-binding sequences), so every pass over them walks with an
explicit stack.  ``children``/``rebuild`` describe each node kind once, from the
dataclass fields, so passes never enumerate node types themselves.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Mapping, Optional

from . import ast

_Node = object  # an Expr or a Clause


def _expr_fields(node: _Node) -> list[str]:
    cache = _FIELD_CACHE.get(type(node))
    if cache is None:
        cache = [f.name for f in dataclasses.fields(node) if f.name not in ("span",)]
        _FIELD_CACHE[type(node)] = cache
    return cache


_FIELD_CACHE: dict[type, list[str]] = {}


def _is_child(value: object) -> bool:
    return isinstance(value, (ast.Expr, ast.Clause))


def children(node: _Node) -> Iterator[_Node]:
    """The direct sub-expressions of ``node`` (and clauses of a ``match``)."""
    if not dataclasses.is_dataclass(node):
        return
    for name in _expr_fields(node):
        value = getattr(node, name)
        if _is_child(value):
            yield value
        elif isinstance(value, tuple):
            for item in value:
                if _is_child(item):
                    yield item


def rebuild(node: _Node, mapped: Callable[[_Node], _Node]) -> _Node:
    """A copy of ``node`` whose children are replaced by ``mapped(child)``.

    Returns ``node`` itself when no child changed, preserving DAG sharing.
    """
    changes = {}
    for name in _expr_fields(node):
        value = getattr(node, name)
        if _is_child(value):
            new = mapped(value)
            if new is not value:
                changes[name] = new
        elif isinstance(value, tuple) and any(_is_child(v) for v in value):
            new_tuple = tuple(mapped(v) if _is_child(v) else v for v in value)
            if any(a is not b for a, b in zip(new_tuple, value)):
                changes[name] = new_tuple
    if not changes:
        return node
    return dataclasses.replace(node, **changes)


def post_order_nodes(root: _Node) -> list[_Node]:
    """Every distinct node reachable from ``root``, children before parents."""
    order: list[_Node] = []
    seen: set[int] = set()
    stack: list[tuple[_Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(list(children(node))):
            if id(child) not in seen:
                stack.append((child, False))
    return order


def substitute(root: ast.Expr, mapping: Mapping[ast.Expr, ast.Expr],
               transform: Optional[Callable[[_Node], Optional[_Node]]] = None) -> ast.Expr:
    """Replace nodes of ``root`` (by identity) and rebuild the parents that changed.

    ``transform``, if given, is called on each rebuilt node and may return a
    replacement (or ``None`` to keep it).
    """
    done: dict[int, _Node] = {id(k): v for k, v in mapping.items()}
    for node in post_order_nodes(root):
        if id(node) in done:
            continue
        new = rebuild(node, lambda c: done.get(id(c), c))
        if transform is not None:
            replaced = transform(new)
            if replaced is not None:
                new = replaced
        done[id(node)] = new
    return done.get(id(root), root)
