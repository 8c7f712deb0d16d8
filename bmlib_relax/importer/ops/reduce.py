"""Reductions (``mean``, ``sum``, ``max``, ...) and arg-reductions.

Relay's ``ReduceAttrs``: ``axis=None`` reduces every axis, ``exclude=True``
reduces every axis *not* listed, ``keepdims=False``.  ``argmax``/``argmin``
return int32 in Relay (Relax returns int64), so the result is cast back.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import tvm
from tvm import relax

from ..registry import register_converter
from ..run_checks import emit_run_check
from ._utils import (
    check_nonempty_average, check_quotient_fits, check_reduced_axes_nonempty_at_run_time,
    dtype_of, empty_reduced_axis, is_integer_dtype, ndim_of, normalize_axis, optional_ints,
    reduced_shape, shape_of,
)

REDUCE_OPS = {
    "mean": relax.op.mean,
    "sum": relax.op.sum,
    "max": relax.op.max,
    "min": relax.op.min,
    "prod": relax.op.prod,
}


def reduce_axes(data, attrs, ctx) -> Optional[list[int]]:
    """The axes Relay reduces over, honouring ``exclude`` (``None``: all axes).

    Where v0.19's type relation and kernel disagreed, the model is refused by name:
    an explicit ``axis=[]`` was typed as a reduction over every axis (GetReduceAxes)
    and computed as one over none (topi's GetRealAxis); an axis listed twice wrote
    past the result's shape without ``keepdims`` (ReduceShapeImpl) and counted twice in
    a mean's divisor.  With ``keepdims`` a repeated axis is reduced once, as v0.19 did.
    """
    ndim = ndim_of(data)
    axes = optional_ints(attrs.get("axis"))
    exclude = bool(attrs.get("exclude", False))
    if axes is not None:
        if not axes and not exclude:
            raise ctx.error("axis=[]: v0.19 typed a reduction over an empty axis list as "
                            "one over every axis but computed one over none; write "
                            "axis=None (every axis) or leave the op out (none)")
        axes = sorted(normalize_axis(a, ndim, ctx) for a in axes)
        repeated = sorted({a for a in axes if axes.count(a) > 1})
        if repeated:
            if not attrs.get("keepdims", False) or ctx.op_name in _COUNTING_OPS:
                raise ctx.error(f"axis {repeated[0]} is listed twice in axis="
                                f"{list(optional_ints(attrs.get('axis')))}: v0.19 "
                                "reduced it once but shaped (or counted) it twice")
            axes = sorted(set(axes))
    if exclude:
        axes = [i for i in range(ndim) if i not in (axes or [])]
    return axes


#: Reductions whose result depends on the element count (or index layout) of the axes.
_COUNTING_OPS = ("mean", "variance", "argmax", "argmin")


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
        if relax_op is relax.op.mean and dtype_of(data) == "bool":
            raise ctx.error("mean of a bool tensor: v0.19 divided by the element count "
                            "made a bool constant, which it refused for a count of 2 or "
                            "more (and TVM 0.27 computes it in int64)")
        if relax_op is relax.op.mean and is_integer_dtype(dtype_of(data)):
            return _integer_mean(data, axes, keepdims, ctx)
        if relax_op is relax.op.mean and dtype_of(data) == "float16":
            # A float16 running sum stalls at 2048 + 0.5: average in float32, round back.
            mean = relax_op(relax.op.astype(data, "float32"), axes, keepdims=keepdims)
            return relax.op.astype(mean, "float16")
        if relax_op in (relax.op.max, relax.op.min) and dtype_of(data) == "bool":
            # Relay's bool was uint1 (its reduction starts from 0 / 1); TVM 0.27 has no
            # min/max value for bool: reduce the 0/1 values as uint8
            extreme = relax_op(relax.op.astype(data, "uint8"), axes, keepdims=keepdims)
            return relax.op.astype(ctx.emit(extreme), "bool")
        return relax_op(data, axes, keepdims=keepdims)

    return convert


for _name, _op in REDUCE_OPS.items():
    register_converter(_name)(_reduce(_op))


def _element_count(data: relax.Expr, axes: Optional[list[int]]) -> Any:
    """The number of elements a reduction over ``axes`` (None: every axis) reads per
    result: an int, or an int64 TIR expression where a reduced dim is symbolic."""
    dims = shape_of(data)
    count: Any = 1
    for axis in range(len(dims)) if axes is None else axes:
        count = count * dims[axis]
    return count


def _integer_mean(data: relax.Expr, axes: Optional[list[int]], keepdims: bool, ctx
                  ) -> relax.Expr:
    """Relay's ``mean`` of an integer tensor, as v0.19's MeanCompute
    (src/relay/op/tensor/reduce.cc): ``topi::divide(sum, cast(dtype, count))``, the sum
    in the input dtype (wrapping) divided by the element count cast to that dtype, a
    division that truncates toward zero; the result keeps the input dtype (MeanRel).
    TVM 0.27's legalized ``relax.op.mean`` divides by an int64 count and writes int64,
    whatever its type says."""
    dtype = dtype_of(data)
    total = ctx.emit(relax.op.sum(data, axes, keepdims=keepdims))
    count = _element_count(data, axes)
    if isinstance(count, int):
        return relax.op.divide(total, _static_count(count, dtype, ctx))
    return relax.op.divide(total, _run_time_count(count, total, dtype, ctx))


def _static_count(count: int, dtype: str, ctx) -> relax.Expr:
    """The constant ``cast(dtype, count)`` of v0.19's MeanCompute.  Its cast of a
    constant made an ``IntImm`` of the dtype, which refuses a value outside the dtype's
    range (src/ir/expr.cc): Relay's build stopped there, and so does the import."""
    info = np.iinfo(dtype)
    if count > info.max:
        raise ctx.error(f"averages over {count} elements of {dtype}: Relay's mean divides "
                        f"the {dtype} sum by the element count cast to {dtype} (v0.19 "
                        f"MeanCompute), and {count} exceeds {dtype}'s maximum {info.max} "
                        "(Relay's build refused the constant)")
    return relax.const(count, dtype)


def _run_time_count(count: Any, total: relax.Expr, dtype: str, ctx) -> relax.Expr:
    """The run-time ``cast(dtype, count)`` of v0.19's MeanCompute: a TIR cast, which
    wraps a count past the dtype's range as it did there.  The runs whose integer
    division stopped Relay's process with SIGFPE are refused (``RunCheckError``): a
    count that is 0 in the dtype, and a signed count of -1 dividing the dtype's
    lowest value."""
    bits = tvm.DataType(dtype).bits
    if bits < 64:
        wrapped = tvm.tirx.floormod(count, tvm.tirx.const(1 << bits, "int64"))
        emit_run_check(ctx.bb, tvm.tirx.NE(wrapped, tvm.tirx.const(0, "int64")),
                       ctx.location, ctx.op_name,
                       f"averages over {{}} elements in this run: Relay's mean divides by "
                       f"the element count cast to {dtype} (v0.19 MeanCompute), here 0 (the "
                       "integer division would stop the process with SIGFPE)", count)
    counted = ctx.emit(relax.op.shape_to_tensor(relax.ShapeExpr([count])))
    divisor = ctx.emit(relax.op.reshape(relax.op.astype(counted, dtype), []))
    if dtype.startswith("int"):  # the count cast to the dtype may be -1
        check_quotient_fits(total, divisor, ctx)
    return divisor


def _arg_reduce(relax_op):
    """Relay's arg-reductions: several axes are reduced as one flattened axis (index into
    it, row-major as v0.19's CommReduceIdx ravels it).  Without ``select_last_index``
    TVM 0.27's argmax/argmin run v0.19's reducer (MakeArgmaxReducer) unchanged; with it
    see :func:`_last_arg_extremum`."""
    def convert(inputs, attrs, ctx):
        data = inputs[0]
        dims = shape_of(data)
        ndim = len(dims)
        axes = reduce_axes(data, attrs, ctx)
        axes = list(range(ndim)) if axes is None else axes
        if not axes:
            raise ctx.error(f"reduces no axis (input shape {tuple(dims)}"
                            f"{', every axis excluded' if ndim else ''}): v0.19 could not "
                            "type an index over no axis")
        _empty_reduction(data, axes, False, None, ctx)  # refused: no element to index
        kept = [i for i in range(ndim) if i not in axes]
        if len(axes) == 1:
            x, axis = data, axes[0]
        else:
            x = ctx.emit(relax.op.permute_dims(data, kept + axes)) \
                if kept + axes != list(range(ndim)) else data
            x = ctx.emit(relax.op.reshape(x, [dims[i] for i in kept] + [-1]))
            axis = len(kept)
        if attrs.get("select_last_index", False):
            result = _last_arg_extremum(x, axis, relax_op is relax.op.argmax, ctx)
        elif dtype_of(x) == "bool":
            result = _first_arg_extremum_of_bool(x, axis, relax_op is relax.op.argmax, ctx)
        else:
            result = relax_op(x, axis, keepdims=False)
        result = relax.op.astype(ctx.emit(result), "int32")
        if attrs.get("keepdims", False):
            result = relax.op.expand_dims(ctx.emit(result), axes)
        return result

    return convert


def _first_arg_extremum_of_bool(x: relax.Expr, axis: int, is_max: bool, ctx) -> relax.Expr:
    """Relay's argmax (``is_max``) or argmin of a bool ``x`` without
    ``select_last_index``.  v0.19's reducer starts a bool from (-1, 0) (argmin: 1),
    ``min_value`` of an unsigned type, and keeps its state while ``acc >= x``: a row of
    False gives -1 (argmin: a row of True).  TVM 0.27 has no ``min_value`` of bool
    ("Cannot decide min_value"); uint8 starts from the same 0, and an argmin of ``x``
    is the argmax of ``not x`` (``acc <= x`` from 1 is ``1 - acc >= 1 - x`` from 0)."""
    if not is_max:
        x = ctx.emit(relax.op.logical_not(x))
    return relax.op.argmax(ctx.emit(relax.op.astype(x, "uint8")), axis, keepdims=False)


def _last_arg_extremum(x: relax.Expr, axis: int, is_max: bool, ctx) -> relax.Expr:
    """Relay's argmax (``is_max``) or argmin of ``x`` along ``axis`` with
    ``select_last_index``, as int64.

    v0.19's reducer (include/tvm/topi/reduction.h MakeArgmaxReducer) runs in index
    order from (-1, min_value(dtype)) and keeps its state only while ``acc > x_k``
    (argmin: ``<``), else takes (k, x_k).  An integer is never below min_value: the
    result is the last index of the maximum.  Floats: :func:`_last_float_arg_extremum`.
    Flipping the axis for TVM 0.27's argmax (which keeps a tie's first index) gave N
    for a row of min_value, and other answers with NaNs."""
    if dtype_of(x) == "bool":  # 0 and 1, as uint1 was in v0.19
        x = ctx.emit(relax.op.astype(x, "int8"))
    positions = _positions(x, axis, ctx)
    if dtype_of(x).startswith(("float", "bfloat")):
        return _last_float_arg_extremum(x, axis, positions, is_max, ctx)
    extreme = ctx.emit((relax.op.max if is_max else relax.op.min)(x, axis, keepdims=True))
    return _last_position(relax.op.equal(x, extreme), positions, axis)


def _positions(x: relax.Expr, axis: int, ctx) -> relax.Expr:
    """0, 1, ... along ``axis`` of ``x`` (int64), shaped to broadcast against ``x``."""
    ramp = relax.op.arange(0, shape_of(x)[axis], 1, "int64")
    trailing = list(range(1, ndim_of(x) - axis))
    return ctx.emit(relax.op.expand_dims(ramp, trailing) if trailing else ramp)


def _last_position(mask: relax.Expr, positions: relax.Expr, axis: int,
                   keepdims: bool = False) -> relax.Expr:
    """The last position along ``axis`` where ``mask`` holds, -1 where it holds nowhere."""
    return relax.op.max(relax.op.where(mask, positions, relax.const(-1, "int64")), axis,
                        keepdims=keepdims)


def _last_float_arg_extremum(x: relax.Expr, axis: int, positions: relax.Expr, is_max: bool,
                             ctx) -> relax.Expr:
    """:func:`_last_arg_extremum` of a float ``x`` (argmax; argmin mirrors it).

    A NaN compares false, so the reducer takes it, and then the value after it: past the
    last NaN the result is the last index of the maximum, whatever it is (-inf too).
    With no NaN it is the last index of the maximum unless every value is below
    min_value, the lowest *finite* float (a row of -inf: the start's -1 stays).  A NaN
    last, or followed only by -inf, leaves the last index."""
    dtype = dtype_of(x)
    last_nan = ctx.emit(_last_position(relax.op.isnan(x), positions, axis, keepdims=True))
    # the values past the last NaN; the others (beyond every value) are never the answer
    key = ctx.emit(relax.op.where(relax.op.greater(positions, last_nan), x,
                                  relax.const(-np.inf if is_max else np.inf, dtype)))
    start = _reducer_start(dtype, is_max)
    extreme = relax.op.maximum(relax.op.max(key, axis, keepdims=True), start) if is_max \
        else relax.op.minimum(relax.op.min(key, axis, keepdims=True), start)
    found = ctx.emit(_last_position(relax.op.equal(key, ctx.emit(extreme)), positions, axis))
    # not found: no value past the last NaN reaches min_value (the last index is the
    # answer), or there is no NaN and no value reaches it (-1)
    n = shape_of(x)[axis]
    last = relax.const(n - 1, "int64") if isinstance(n, int) \
        else ctx.emit(relax.op.max(positions))
    zero = relax.const(0, "int64")
    any_nan = relax.op.greater_equal(ctx.emit(relax.op.squeeze(last_nan, [axis])), zero)
    fallback = ctx.emit(relax.op.where(any_nan, last, relax.const(-1, "int64")))
    return relax.op.where(relax.op.greater_equal(found, zero), found, fallback)


def _reducer_start(dtype: str, is_max: bool) -> relax.Expr:
    """The value v0.19's argmax (argmin) reducer starts from: ``tvm::min_value(dtype)``
    (``max_value``), the lowest (highest) finite value of a float dtype."""
    value = tvm.tirx.min_value(dtype) if is_max else tvm.tirx.max_value(dtype)
    return relax.const(float(value.value), dtype)


register_converter("argmax")(_arg_reduce(relax.op.argmax))
register_converter("argmin")(_arg_reduce(relax.op.argmin))


def _logical_reduce(relax_op):
    """``all``/``any`` of a bool tensor: ``min``/``max`` over 0/1 values, then ``> 0``.

    Not a cast back to bool: over an axis empty in a run the min/max is its hoisted
    initial value (int8's 127 / -128), which ``> 0`` turns into all()'s True and any()'s
    False, Relay's answers, where a cast made any() of nothing True."""
    def convert(inputs, attrs, ctx):
        if dtype_of(inputs[0]) != "bool":
            raise ctx.error(f"{ctx.op_name} of a {dtype_of(inputs[0])} tensor: v0.19's "
                            "all/any took bool only (its logical reduction refused other "
                            "types)")
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
    if not reduced:
        raise ctx.error(f"reduces no axis (input shape {tuple(dims)}): v0.19's variance "
                        "needed at least one")
    if dtype_of(data) == "bool":
        raise ctx.error("variance of a bool tensor: v0.19 could not make its element "
                        "count a bool constant")
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
    diff = ctx.emit(relax.op.subtract(data, mean))
    square = relax.op.multiply(diff, diff)
    if dtype == "float16":
        # v0.19's VarianceCompute: the difference and its square in float16 (each rounded,
        # a square past 65504 is inf), summed in float32 (a float16 sum stalls at 2048)
        square = relax.op.astype(ctx.emit(square), "float32")
    total = relax.op.sum(square, axes, keepdims=keepdims)
    if isinstance(count, int):
        divisor = relax.const(float(count - unbiased), acc)
    else:
        # Symbolic dims: the element count is itself a reduction (of ones) over the axes.
        divisor = ctx.emit(relax.op.sum(relax.op.ones_like(diff, acc), axes,
                                        keepdims=keepdims))
        if unbiased:
            divisor = relax.op.subtract(divisor, relax.const(1.0, acc))
    result = relax.op.divide(ctx.emit(total), divisor)
    return relax.op.astype(ctx.emit(result), dtype) if dtype == "float16" else result
