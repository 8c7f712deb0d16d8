"""``relay.loops.while_loop``: Relay's loop construct, built as Relay v0.19 built it.

The loop is a let-bound recursive function over fresh copies of the loop variables:
``let %while_loop = fn (vars) { if (cond(vars)) { %while_loop(body(vars)) } else {
(vars) } }; %while_loop``.  As in Relay, the function has no return type annotation (the
importer reads it off the ``else`` branch: the tuple of the loop variables), and a loop
value that is not a variable gives its copy an incomplete type (typed by the call).
"""
from __future__ import annotations

from typing import Callable, Sequence

from . import ast
from .builder import var


def while_loop(cond: Callable[..., ast.Expr], loop_vars: Sequence[ast.Expr],
               loop_bodies: Callable[..., Sequence[ast.Expr]]) -> ast.Expr:
    """The loop as a function value: call it with the initial values of ``loop_vars``;
    it returns the tuple of their final values."""
    loop = ast.Var("while_loop")
    fresh = []
    for i, loop_var in enumerate(loop_vars):
        is_var = isinstance(loop_var, ast.Var)
        name = loop_var.name if is_var else f"arg{i}"
        annotation = loop_var.type_annotation if is_var else None
        fresh.append(var(name, type_annotation=annotation if annotation is not None
                         else ast.IncompleteType()))
    body = ast.If(cond(*fresh), loop(*loop_bodies(*fresh)), ast.Tuple(tuple(fresh)))
    return ast.Let(loop, ast.Function(tuple(fresh), body), loop)
