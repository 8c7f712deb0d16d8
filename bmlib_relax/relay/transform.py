"""``relay.transform``: the passes legacy scripts call on a module.

``InferType`` fills every expression's ``checked_type`` (Relax's inference per
call, see :mod:`.type_infer`).
"""
from __future__ import annotations

from typing import Any, Callable

from . import ast


class InferType:
    """Annotate every expression of each function with its type (see :mod:`.type_infer`)."""

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        from .type_infer import infer_module

        return infer_module(mod)


class Sequential:
    """``relay.transform.Sequential([...])`` of the passes above."""

    def __init__(self, passes: list[Callable[[ast.IRModule], ast.IRModule]]):
        self.passes = list(passes)

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        for p in self.passes:
            mod = p(mod)
        return mod
