"""The TIR template registry: one TE compute (plus schedule hints) per Relax op.

A template has the uniform signature ``(call, inputs, ctx) -> te.Tensor | tuple``:
``call`` is the Relax call being lowered (its ``attrs`` and non-tensor
arguments such as a target shape), ``inputs`` holds, position by position, a
``te.Tensor`` for each tensor argument, a tuple of them for a tuple argument,
and the Relax expression itself for anything else (``ShapeExpr``,
``PrimValue``).  ``ctx`` is the :class:`~bmlib_relax.backend.codegen.LowerContext`.

A template may tag the TE computes it creates with a schedule rule,
``te.compute(..., attrs={SCHEDULE_ATTR: "conv2d_nchwc"})``, and register the
rule next to the compute with ``@register_schedule("conv2d_nchwc")``.  The
tag survives ``te.create_prim_func`` as a block annotation; after the whole
partition is one PrimFunc, the lowerer applies the rule of every tagged block
(and a generic rule to untagged ones, see :mod:`bmlib_relax.backend.schedule`).
A rule has the signature ``(sch, block, ctx) -> None`` with ``sch`` a
``tvm.s_tir.Schedule`` and ``ctx`` a
:class:`~bmlib_relax.backend.schedule.ScheduleContext`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ...registry import Registry

Template = Callable[..., Any]
ScheduleRule = Callable[..., None]

SCHEDULE_ATTR = "bmlib_schedule"  # block annotation naming the block's schedule rule


def _load_families() -> None:
    from . import (  # noqa: F401  (each registers)
        conv, elemwise, image, linalg, norm, pool, qnn, reduce, select, tensor)


TEMPLATES: Registry[Template] = Registry("bmlib template for Relax op", _load_families)
SCHEDULES: Registry[ScheduleRule] = Registry("schedule rule", _load_families)


# Ops whose template takes symbolic extents (``tir.Var`` dims from the Relax struct info).
_SYMBOLIC_DIMS: set[str] = set()
# Of those, the ops whose template takes a symbolic first dim (the batch) only.
_SYMBOLIC_BATCH_ONLY: set[str] = set()


def register_template(*op_names: str, symbolic_dims: bool | str = False
                      ) -> Callable[[Template], Template]:
    """Register ``fn`` as the TIR template of each Relax op (``relax.nn.conv2d`` ...).

    ``symbolic_dims=True`` declares that the template (and the schedule rules of
    the blocks it tags) accept tensors whose shapes hold symbolic dims, e.g. a
    free batch ``n``; the pattern checks offload such calls only then.
    ``symbolic_dims="batch"``: only the first dim of each tensor may be symbolic
    (convolutions and pools: channels and spatial dims size their blocking and tiles).
    """
    if symbolic_dims not in (False, True, "batch"):
        raise ValueError(f"symbolic_dims={symbolic_dims!r}: expected a bool or 'batch'")
    if symbolic_dims:
        _SYMBOLIC_DIMS.update(op_names)
    if symbolic_dims == "batch":
        _SYMBOLIC_BATCH_ONLY.update(op_names)
    return TEMPLATES.register(*op_names)


def supports_symbolic_dims(op_name: str) -> bool:
    """Whether the template of ``op_name`` takes symbolic dims (see register_template)."""
    TEMPLATES.get(op_name)  # loads the families, which fill _SYMBOLIC_DIMS
    return op_name in _SYMBOLIC_DIMS


def symbolic_batch_only(op_name: str) -> bool:
    """Whether the template of ``op_name`` takes a symbolic batch (first dim) only."""
    TEMPLATES.get(op_name)
    return op_name in _SYMBOLIC_BATCH_ONLY


def register_schedule(*rule_names: str) -> Callable[[ScheduleRule], ScheduleRule]:
    """Register ``fn`` as the schedule rule of blocks tagged ``SCHEDULE_ATTR=name``."""
    return SCHEDULES.register(*rule_names)


def get_schedule_rule(rule_name: str) -> ScheduleRule | None:
    return SCHEDULES.get(rule_name)


def get_template(op_name: str) -> Template | None:
    return TEMPLATES.get(op_name)


def template_ops() -> Sequence[str]:
    """Sorted names of every Relax op bmlib can lower."""
    return TEMPLATES.names()
