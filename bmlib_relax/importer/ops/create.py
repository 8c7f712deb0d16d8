"""Tensor creation: ``zeros``/``ones``/``full`` (and ``_like``), ``arange``."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import dtype_of, ints, scalar_operand


@register_converter("zeros")
def _zeros(inputs, attrs, ctx):
    return relax.op.zeros(ints(attrs["shape"]), attrs.get("dtype") or "float32")


@register_converter("ones")
def _ones(inputs, attrs, ctx):
    return relax.op.ones(ints(attrs["shape"]), attrs.get("dtype") or "float32")


@register_converter("zeros_like")
def _zeros_like(inputs, attrs, ctx):
    return relax.op.zeros_like(inputs[0])


@register_converter("ones_like")
def _ones_like(inputs, attrs, ctx):
    return relax.op.ones_like(inputs[0])


@register_converter("full")
def _full(inputs, attrs, ctx):
    # Relay passes the fill value as an operand (a scalar tensor).
    dtype = attrs.get("dtype") or dtype_of(inputs[0])
    return relax.op.full(ints(attrs["shape"]), inputs[0], dtype)


@register_converter("full_like")
def _full_like(inputs, attrs, ctx):
    return relax.op.full_like(inputs[0], inputs[1])


@register_converter("arange")
def _arange(inputs, attrs, ctx):
    # start/stop/step are operands in Relay; only constant ones give a static shape.
    dtype = attrs.get("dtype") or "float32"
    start, stop, step = (scalar_operand(x, ctx, f"arange {name}")
                         for x, name in zip(inputs, ("start", "stop", "step")))
    return relax.op.arange(start, stop, step, dtype)
