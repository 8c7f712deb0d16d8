"""The TIR template registry: one TE compute (plus schedule hints) per Relax op.

A template has the uniform signature ``(call, inputs, ctx) -> te.Tensor | tuple``:
``call`` is the Relax call being lowered (its ``attrs`` and non-tensor
arguments such as a target shape), ``inputs`` holds, position by position, a
``te.Tensor`` for each tensor argument, a tuple of them for a tuple argument,
and the Relax expression itself for anything else (``ShapeExpr``,
``PrimValue``).  ``ctx`` is the :class:`~bmlib_relax.backend.codegen.LowerContext`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

Template = Callable[..., Any]

_TEMPLATES: dict[str, Template] = {}


def register_template(*op_names: str) -> Callable[[Template], Template]:
    """Register ``fn`` as the TIR template of each Relax op (``relax.nn.conv2d`` ...)."""

    def decorator(fn: Template) -> Template:
        for name in op_names:
            if name in _TEMPLATES:
                raise ValueError(f"Relax op {name!r} already has a bmlib template")
            _TEMPLATES[name] = fn
        return fn

    return decorator


def get_template(op_name: str) -> Template | None:
    _ensure_loaded()
    return _TEMPLATES.get(op_name)


def template_ops() -> Sequence[str]:
    """Sorted names of every Relax op bmlib can lower."""
    _ensure_loaded()
    return sorted(_TEMPLATES)


def _ensure_loaded() -> None:
    from . import conv, elemwise, linalg, norm, pool, reduce, tensor  # noqa: F401  (each registers)
