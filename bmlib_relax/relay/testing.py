"""``relay.testing``: the helpers Relay's own tests imported (``run_infer_type``, ``run_opt_pass``)."""
from __future__ import annotations

from typing import Callable, Union

from . import ast, transform


def run_opt_pass(expr: ast.Expr, opt_pass: Union[Callable, list]) -> ast.Expr:
    """Run ``opt_pass`` on ``expr`` wrapped as ``@main``; return the function, or its body
    when ``expr`` was not a function (as Relay's helper did)."""
    passes = opt_pass if isinstance(opt_pass, list) else [opt_pass]
    mod = ast.IRModule.from_expr(expr)
    mod = transform.Sequential(passes)(mod)
    entry = mod["main"]
    return entry if isinstance(expr, ast.Function) else entry.body


def run_infer_type(expr: ast.Expr) -> ast.Expr:
    """``expr`` with every node's ``checked_type`` inferred."""
    return run_opt_pass(expr, transform.InferType())


__all__ = ["run_infer_type", "run_opt_pass"]
