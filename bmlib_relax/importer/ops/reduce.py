"""Reductions (``mean``, ``sum``, ``max``, ...) and arg-reductions.

Relay's ``ReduceAttrs``: ``axis=None`` reduces every axis, ``exclude=True``
reduces every axis *not* listed, ``keepdims=False``.  ``argmax``/``argmin``
return int32 in Relay (Relax returns int64), so the result is cast back.
"""
from __future__ import annotations

from typing import Optional

from tvm import relax

from ..registry import register_converter
from ._utils import ndim_of, normalize_axis, optional_ints

REDUCE_OPS = {
    "mean": relax.op.mean,
    "sum": relax.op.sum,
    "max": relax.op.max,
    "min": relax.op.min,
    "prod": relax.op.prod,
}
# Relay's variance/std take the mean as an operand (Relax recomputes it): not mapped.


def reduce_axes(data, attrs, ctx) -> Optional[list[int]]:
    """The axes Relay reduces over, honouring ``exclude`` (``None``: all axes)."""
    ndim = ndim_of(data)
    axes = optional_ints(attrs.get("axis"))
    if axes is not None:
        axes = sorted(normalize_axis(a, ndim, ctx) for a in axes)
    if attrs.get("exclude", False):
        axes = [i for i in range(ndim) if i not in (axes or [])]
    return axes


def _reduce(relax_op):
    def convert(inputs, attrs, ctx):
        return relax_op(inputs[0], reduce_axes(inputs[0], attrs, ctx),
                        keepdims=bool(attrs.get("keepdims", False)))

    return convert


for _name, _op in REDUCE_OPS.items():
    register_converter(_name)(_reduce(_op))


def _arg_reduce(relax_op):
    def convert(inputs, attrs, ctx):
        if attrs.get("select_last_index", False):
            raise ctx.unsupported_attr("select_last_index", attrs["select_last_index"])
        axes = reduce_axes(inputs[0], attrs, ctx)
        if axes is not None and len(axes) != 1:
            raise ctx.unsupported_attr("axis", attrs.get("axis"))
        result = relax_op(inputs[0], None if axes is None else axes[0],
                          keepdims=bool(attrs.get("keepdims", False)))
        return relax.op.astype(result, "int32")

    return convert


register_converter("argmax")(_arg_reduce(relax.op.argmax))
register_converter("argmin")(_arg_reduce(relax.op.argmin))
