"""Reductions (``mean``, ``sum``, ``max``, ...) and arg-reductions.

Relay's ``ReduceAttrs``: ``axis=None`` reduces every axis, ``exclude=True``
reduces every axis *not* listed, ``keepdims=False``.  ``argmax``/``argmin``
return int32 in Relay (Relax returns int64), so the result is cast back.
"""
from __future__ import annotations

from typing import Optional

from tvm import relax

from ..registry import register_converter
from ._utils import (
    check_nonempty_average, check_reduced_axes_nonempty_at_run_time, dtype_of,
    empty_reduced_axis, ndim_of, normalize_axis, optional_ints, reduced_shape, shape_of,
)

REDUCE_OPS = {
    "mean": relax.op.mean,
    "sum": relax.op.sum,
    "max": relax.op.max,
    "min": relax.op.min,
    "prod": relax.op.prod,
}


def reduce_axes(data, attrs, ctx) -> Optional[list[int]]:
    """The axes Relay reduces over, honouring ``exclude`` (``None``: all axes)."""
    ndim = ndim_of(data)
    axes = optional_ints(attrs.get("axis"))
    if axes is not None:
        axes = sorted(normalize_axis(a, ndim, ctx) for a in axes)
    if attrs.get("exclude", False):
        axes = [i for i in range(ndim) if i not in (axes or [])]
    return axes


# The value of a reduction over no element, where it has one (Relay's, and numpy's).
_IDENTITY = {relax.op.sum: 0, relax.op.prod: 1}


def _empty_reduction(data, axes, keepdims: bool, identity: Optional[int], ctx,
                     dtype: Optional[str] = None, computed_when_empty: bool = False
                     ) -> Optional[relax.Expr]:
    """A reduction of ``data`` over ``axes`` that reads no element (an axis of static
    extent 0): ``identity`` everywhere, or an error naming the axis when the reduction
    has no identity (a maximum, an index of the maximum of nothing).  None otherwise.
    TVM's reduction loops run their initialisation inside the loop over the reduced
    axis, so a reduction over nothing returned the output buffer's old contents.

    An axis known only at run time gets a run check, unless ``computed_when_empty``:
    a sum or product, whose initialisation both builds hoist in front of a loop over
    a symbolic extent (``decompose_symbolic_reductions``), so an empty run gives its
    identity there as Relay did."""
    axis = empty_reduced_axis(data, axes)
    if axis is None:
        if not computed_when_empty:
            check_reduced_axes_nonempty_at_run_time(data, axes, ctx)
        return None
    if identity is None:
        raise ctx.error(f"reduces over axis {axis} of extent 0 (input shape "
                        f"{tuple(shape_of(data))}): {ctx.op_name} of no element has no value")
    dtype = dtype or dtype_of(data)
    return relax.op.full(reduced_shape(data, axes, keepdims), relax.const(identity, dtype),
                         dtype)


def _reduce(relax_op):
    def convert(inputs, attrs, ctx):
        data = inputs[0]
        axes = reduce_axes(data, attrs, ctx)
        keepdims = bool(attrs.get("keepdims", False))
        if relax_op is relax.op.mean:
            # over a run-time-empty axis: the sum 0 divided by the count 0, NaN (numpy's)
            check_nonempty_average(data, axes, ctx, at_run_time=False)
        else:
            empty = _empty_reduction(data, axes, keepdims, _IDENTITY.get(relax_op), ctx,
                                     computed_when_empty=relax_op in _IDENTITY)
            if empty is not None:
                return empty
        if relax_op is relax.op.mean and dtype_of(data) == "float16":
            # A float16 running sum stalls at 2048 + 0.5: average in float32, round back.
            mean = relax_op(relax.op.astype(data, "float32"), axes, keepdims=keepdims)
            return relax.op.astype(mean, "float16")
        return relax_op(data, axes, keepdims=keepdims)

    return convert


for _name, _op in REDUCE_OPS.items():
    register_converter(_name)(_reduce(_op))


def _arg_reduce(relax_op):
    """Relay's arg-reductions: several axes are reduced as one flattened axis (index into
    it), ``select_last_index`` takes the last extremum (argmax of the flipped axis)."""
    def convert(inputs, attrs, ctx):
        data = inputs[0]
        dims = shape_of(data)
        ndim = len(dims)
        axes = reduce_axes(data, attrs, ctx)
        axes = list(range(ndim)) if axes is None else axes
        _empty_reduction(data, axes, False, None, ctx)  # refused: no element to index
        kept = [i for i in range(ndim) if i not in axes]
        if len(axes) == 1:
            x, axis = data, axes[0]
        else:
            x = ctx.emit(relax.op.permute_dims(data, kept + axes)) \
                if kept + axes != list(range(ndim)) else data
            x = ctx.emit(relax.op.reshape(x, [dims[i] for i in kept] + [-1]))
            axis = len(kept)
        last = bool(attrs.get("select_last_index", False))
        if last:
            x = ctx.emit(relax.op.flip(x, axis=axis))
        result = relax_op(x, axis, keepdims=False)
        if last:
            count = 1
            for a in axes:
                count = count * dims[a]
            result = relax.op.subtract(relax.const(count - 1, "int64"), ctx.emit(result))
        result = relax.op.astype(ctx.emit(result), "int32")
        if attrs.get("keepdims", False):
            result = relax.op.expand_dims(ctx.emit(result), axes)
        return result

    return convert


register_converter("argmax")(_arg_reduce(relax.op.argmax))
register_converter("argmin")(_arg_reduce(relax.op.argmin))


def _logical_reduce(relax_op):
    """``all``/``any`` of a bool tensor: ``min``/``max`` over 0/1 values, then ``> 0``.

    Not a cast back to bool: over an axis empty in a run the min/max is its hoisted
    initial value (int8's 127 / -128), which ``> 0`` turns into all()'s True and any()'s
    False, Relay's answers, where a cast made any() of nothing True."""
    def convert(inputs, attrs, ctx):
        axes = reduce_axes(inputs[0], attrs, ctx)
        keepdims = bool(attrs.get("keepdims", False))
        # all() of nothing is True, any() of nothing False
        empty = _empty_reduction(inputs[0], axes, keepdims, int(relax_op is relax.op.min),
                                 ctx, "bool", computed_when_empty=True)
        if empty is not None:
            return empty
        data = relax.op.astype(inputs[0], "int8")
        result = ctx.emit(relax_op(data, axes, keepdims=keepdims))
        return relax.op.greater(result, relax.const(0, "int8"))

    return convert


register_converter("all")(_logical_reduce(relax.op.min))
register_converter("any")(_logical_reduce(relax.op.max))


@register_converter("variance")
def _variance(inputs, attrs, ctx):
    # Relay's variance takes the mean as an operand (keepdims=True shape):
    # sum((x - mean)^2) / (N - unbiased) over the reduced axes.
    data, mean = inputs
    axes = reduce_axes(data, attrs, ctx)
    dims = shape_of(data)
    reduced = range(len(dims)) if axes is None else axes
    count = 1
    for axis in reduced:
        count = count * dims[axis]
    unbiased = int(bool(attrs.get("unbiased", False)))
    check_nonempty_average(data, axes, ctx)
    if isinstance(count, int) and count - unbiased <= 0:
        raise ctx.error(f"an unbiased variance over {count} element: the count it divides "
                        "by (N - 1) is 0")
    keepdims = bool(attrs.get("keepdims", False))
    dtype = dtype_of(data)
    acc = "float32" if dtype == "float16" else dtype
    if dtype == "float16":  # a long float16 sum of squares overflows: accumulate in float32
        data, mean = relax.op.astype(data, "float32"), relax.op.astype(mean, "float32")
    diff = ctx.emit(relax.op.subtract(data, mean))
    total = relax.op.sum(relax.op.multiply(diff, diff), axes, keepdims=keepdims)
    if isinstance(count, int):
        divisor = relax.const(float(count - unbiased), acc)
    else:
        # Symbolic dims: the element count is itself a reduction (of ones) over the axes.
        divisor = ctx.emit(relax.op.sum(relax.op.ones_like(diff), axes, keepdims=keepdims))
        if unbiased:
            divisor = relax.op.subtract(divisor, relax.const(1.0, acc))
    result = relax.op.divide(ctx.emit(total), divisor)
    return relax.op.astype(ctx.emit(result), dtype) if dtype == "float16" else result
