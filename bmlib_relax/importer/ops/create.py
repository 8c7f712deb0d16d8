"""Tensor creation: ``zeros``/``ones``/``full`` (and ``_like``), ``arange``."""
from __future__ import annotations

import numpy as np
from tvm import relax

from ..registry import register_converter
from ..run_checks import emit_element_count_check, emit_run_check
from ._utils import (dtype_of, fill_in_dtype, folded_value, ints, ndim_of, run_time_dims,
                     scalar_operand, shape_of)


@register_converter("zeros")
def _zeros(inputs, attrs, ctx):
    return relax.op.zeros(ints(attrs["shape"]), attrs.get("dtype") or "float32")


@register_converter("ones")
def _ones(inputs, attrs, ctx):
    return relax.op.ones(ints(attrs["shape"]), attrs.get("dtype") or "float32")


def run_time_zeros(inputs, attrs, ctx):
    """``dyn.zeros`` with a shape known only when the model runs (see :mod:`.dynamic`)."""
    dtype = attrs.get("dtype") or "float32"
    return relax.op.zeros(_run_time_shape(inputs[0], dtype, ctx), dtype)


def run_time_ones(inputs, attrs, ctx):
    """``dyn.ones`` with a shape known only when the model runs (see :mod:`.dynamic`)."""
    dtype = attrs.get("dtype") or "float32"
    return relax.op.ones(_run_time_shape(inputs[0], dtype, ctx), dtype)


def run_time_full(inputs, attrs, ctx):
    """``dyn.full`` with a shape known only when the model runs (see :mod:`.dynamic`)."""
    dtype = attrs.get("dtype") or dtype_of(inputs[0])
    return relax.op.full(_run_time_shape(inputs[1], dtype, ctx), inputs[0], dtype)


def _run_time_shape(shape: relax.Expr, dtype: str, ctx) -> relax.ShapeExpr:
    """The shape a 1-D integer tensor holds when the model runs (``dyn.zeros``' operand),
    as a shape of fresh symbolic dims, each checked not to be negative, and together
    to describe a tensor of ``dtype`` whose size TVM can count."""
    dims = shape_of(shape)
    if len(dims) != 1 or not isinstance(dims[0], int):
        raise ctx.error(f"the shape operand must be a 1-D tensor of known length, got "
                        f"shape {dims}")
    name = ctx.op_name.split(".")[-1]
    values = ctx.emit(relax.op.astype(shape, "int64"))
    emit_element_count_check(ctx, values, dtype)
    out = run_time_dims(values, [f"{name}_d{i}" for i in range(dims[0])], ctx)
    for i, dim in enumerate(out):
        emit_run_check(ctx.bb, dim >= 0, ctx.location, ctx.op_name,
                       f"dim {i} of the shape is {{}}", dim)
    return relax.ShapeExpr(out)


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
    return relax.op.full(ints(attrs["shape"]), _fill_value(inputs[0], dtype, ctx), dtype)


@register_converter("full_like")
def _full_like(inputs, attrs, ctx):
    return relax.op.full_like(inputs[0], _fill_value(inputs[1], dtype_of(inputs[0]), ctx))


def _fill_value(value: relax.Expr, dtype: str, ctx) -> relax.Expr:
    """A constant fill value cast to ``dtype`` at import, as v0.19 cast it
    (:func:`fill_in_dtype`); a run-time one is cast when the model runs."""
    folded = folded_value(value, ctx)
    if folded is None:
        return value
    return relax.const(fill_in_dtype(folded, dtype), dtype)


@register_converter("arange")
def _arange(inputs, attrs, ctx):
    # start/stop/step are operands in Relay; only constant ones give a static shape.
    dtype = attrs.get("dtype") or "float32"
    stop_value = folded_value(inputs[1], ctx)
    start, step = (scalar_operand(x, ctx, f"arange {name}")
                   for x, name in zip((inputs[0], inputs[2]), ("start", "step")))
    if stop_value is None or stop_value.size != 1:
        return _dynamic_arange(start, inputs[1], step, dtype, ctx)
    stop = stop_value.reshape(()).item()
    _check_static_arange(start, stop, step, ctx)
    return relax.op.arange(start, stop, step, dtype)


def _check_static_arange(start, stop, step, ctx) -> None:
    """v0.19's ArangeRel on constant operands: ``ceil((stop - start) / step)`` elements
    (in double), which must be more than 0 (``Invalid arange attributes``)."""
    if float(step) == 0:
        raise ctx.error(f"arange step is 0 (start {start}, stop {stop})")
    count = np.ceil((float(stop) - float(start)) / float(step))
    if not count > 0:
        raise ctx.error(f"arange({start}, {stop}, {step}) has no elements: Relay's ArangeRel "
                        "refused an empty or negative range")


def _dynamic_arange(start, stop, step, dtype: str, ctx):
    """Relay's arange with a run-time ``stop`` (a dynamic length): the element count
    ``ceil((stop - start) / step)`` becomes a shape dim at run time."""
    if ndim_of(stop) != 0:
        raise ctx.error("arange stop must be a scalar")
    if np.dtype(dtype_of(stop)).kind in "iu" and float(start).is_integer() and \
            float(step).is_integer():
        # v0.19's _arange_shape_func divided in int64: exact past 2^53, where float64 is not
        span = relax.op.subtract(relax.op.astype(stop, "int64"), relax.const(int(start), "int64"))
        count = relax.op.negative(relax.op.floor_divide(relax.op.negative(span),
                                                        relax.const(int(step), "int64")))
        count = relax.op.maximum(count, relax.const(0, "int64"))
    else:
        span = relax.op.subtract(relax.op.astype(stop, "float64"),
                                 relax.const(float(start), "float64"))
        count = relax.op.ceil(relax.op.divide(span, relax.const(float(step), "float64")))
        count = relax.op.astype(relax.op.maximum(count, relax.const(0.0, "float64")), "int64")
    count = ctx.emit(relax.op.reshape(count, [1]))
    length, = run_time_dims(count, ["arange_len"], ctx)
    ramp = ctx.emit(relax.op.arange(0, length, 1, "int64"))
    values = relax.op.add(relax.op.multiply(relax.op.astype(ramp, dtype),
                                            relax.const(step, dtype)),
                          relax.const(start, dtype))
    return values
