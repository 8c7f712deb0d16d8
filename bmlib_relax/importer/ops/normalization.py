"""Normalization ops: batch (inference), layer, group and instance norm.

float32 keeps Relax's norm ops (bmlib's templates).  Any other float dtype is imported
as v0.19's ``relay.build`` ran it: its ``SimplifyInference`` pass
(src/relay/transforms/simplify_inference.cc, ``*ToInferUnpack``) rewrote these ops into
ordinary Relay ops in the tensor's dtype, each rounded to it (``mean``/``variance``
summing float16 in float32, src/relay/op/tensor/reduce.cc), and ``FoldConstant`` folded
the parameter-only part op by op.  TVM 0.27's norm ops compute float16 in float32 and
round once (up to 0.35 off on data far from 0), and refuse bfloat16 and float64.
"""
from __future__ import annotations

import warnings

import numpy as np
from tvm import relax

from ...constants import tensor_constant
from ...errors import SuspiciousWeightWarning
from ..registry import register_converter
from ._utils import (
    check_nonempty_average, const_value, dtype_of, ndim_of, normalize_axis, shape_of,
)


def _norm_flags(attrs) -> dict:
    return dict(epsilon=float(attrs.get("epsilon", 1e-5)),
                center=bool(attrs.get("center", True)),
                scale=bool(attrs.get("scale", True)))


def _affine_terms(gamma, beta, attrs) -> tuple:
    """``(gamma, beta, flags)`` with ``scale=False`` / ``center=False`` written into the
    operands (ones / zeros), as v0.19's SimplifyInference dropped the multiply / add.
    TVM 0.27's layer/group/instance-norm legalization (and bmlib's templates) ignore
    both flags and always computed ``norm * gamma + beta``."""
    flags = _norm_flags(attrs)
    if not flags["scale"]:
        gamma = _filled_like(gamma, 1)
    if not flags["center"]:
        beta = _filled_like(beta, 0)
    return gamma, beta, {**flags, "center": True, "scale": True}


def _filled_like(operand, value: int) -> relax.Expr:
    """A constant of ``operand``'s static shape and dtype filled with ``value``."""
    dims = shape_of(operand)
    if all(isinstance(d, int) for d in dims):
        return relax.const(np.full(dims, value, dtype_of(operand)))
    return relax.op.full_like(operand, relax.const(value, dtype_of(operand)))


def _warn_invalid_variance(var, epsilon: float, ctx) -> None:
    """A :class:`~bmlib_relax.errors.SuspiciousWeightWarning` when a constant
    ``moving_var`` has entries below ``-epsilon`` or not finite: those channels are NaN."""
    values = const_value(var)
    if values is None or values.size == 0 or not np.issubdtype(values.dtype, np.floating):
        return
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values.astype("float64") + epsilon < 0)
    if not bad.any():
        return
    arg = ctx.call.args[4] if len(ctx.call.args) > 4 else None
    name = getattr(arg, "name_hint", None)
    where = f"{ctx.location}: " if ctx.location else ""
    warnings.warn(SuspiciousWeightWarning(
        f"{where}nn.batch_norm: moving_var{f' {name!r}' if name else ''} has "
        f"{int(bad.sum())} of {values.size} entries below -epsilon ({epsilon:g}) or not "
        f"finite (first at index {int(np.flatnonzero(bad.ravel())[0])}): those channels' "
        "results are NaN (a relu or clip after makes them a plausible 0 or 6); damaged "
        "weights, or a parameter bound to the wrong input?", name, ctx.location),
        stacklevel=2)


# ----------------------------------------------------------------------------- v0.19's form
def _decomposed(data) -> bool:
    """Whether ``data``'s norm is imported in v0.19's SimplifyInference form: every float
    dtype but float32 (whose Relax ops and bmlib templates compute as v0.19's did)."""
    dtype = dtype_of(data)
    return dtype != "float32" and dtype.startswith(("float", "bfloat"))


def _scalar(value: float, dtype: str) -> relax.Expr:
    """v0.19's ``MakeConstantScalar(dtype, static_cast<float>(value))``: the attribute
    rounded to float32 first (a float64 epsilon of 1e-5 is float32's 1e-5)."""
    return tensor_constant(np.array(np.float32(value)).astype(dtype))


# v0.19's MeanCompute/VarianceCompute recast float16 to float32 to sum; TVM's bfloat16
# legalization (BF16ComputeLegalize) summed bfloat16 in a float32 accumulator too.
_SUMMED_IN = {"float16": "float32", "bfloat16": "float32"}


def _cast(expr: relax.Expr, dtype: str, ctx) -> relax.Expr:
    return expr if dtype_of(expr) == dtype else ctx.emit(relax.op.astype(expr, dtype))


def _mean(data, axes: list[int], ctx) -> relax.Expr:
    """Relay's ``mean(data, axes, keepdims=True)`` as v0.19's MeanCompute: ``sum / count``
    (float16 summed in float32), rounded to the dtype."""
    dtype = dtype_of(data)
    total = relax.op.mean(_cast(data, _SUMMED_IN.get(dtype, dtype), ctx), axes, keepdims=True)
    return _cast(ctx.emit(total), dtype, ctx)


def _variance(data, mean, axes: list[int], ctx) -> relax.Expr:
    """Relay's ``variance(data, mean, axes, keepdims=True)`` as v0.19's VarianceCompute:
    ``sum((data - mean)^2) / count``.  float16 takes the difference and its square in
    float16 (each rounded) and sums them in float32; bfloat16's inlined difference and
    square were legalized to float32 (rounded only where stored); rounded to the dtype."""
    dtype = dtype_of(data)
    if dtype == "bfloat16":
        data, mean = _cast(data, "float32", ctx), _cast(mean, "float32", ctx)
    diff = ctx.emit(relax.op.subtract(data, mean))
    square = ctx.emit(relax.op.multiply(diff, diff))
    total = relax.op.mean(_cast(square, _SUMMED_IN.get(dtype, dtype), ctx), axes,
                          keepdims=True)
    return _cast(ctx.emit(total), dtype, ctx)


def _standardized(data, axes: list[int], epsilon: float, ctx) -> relax.Expr:
    """``(data - mean) / sqrt(variance + eps)`` over ``axes``, op by op in the dtype, as
    v0.19's Layer/Instance/GroupNormToInferUnpack wrote it."""
    check_nonempty_average(data, axes, ctx, at_run_time=False)
    mean = _mean(data, axes, ctx)
    var = _variance(data, mean, axes, ctx)
    denom = ctx.emit(relax.op.sqrt(ctx.emit(relax.op.add(var, _scalar(epsilon,
                                                                       dtype_of(data))))))
    return ctx.emit(relax.op.divide(ctx.emit(relax.op.subtract(data, mean)), denom))


def _bias_to_axis(bias, ndim: int, axis: int, ctx) -> relax.Expr:
    """v0.19's ExpandBiasToMatchAxis: a ``(C,)`` operand given trailing unit dims so it
    broadcasts along ``axis`` of an ``ndim``-D tensor."""
    if axis == ndim - 1 or ndim_of(bias) != 1:
        return bias
    return ctx.emit(relax.op.expand_dims(bias, list(range(1, ndim - axis))))


def _scaled_shifted(out, gamma, beta, axis: int, attrs, ctx) -> relax.Expr:
    """``out * gamma + beta`` along ``axis``, the multiply only with ``scale`` and the add
    only with ``center`` (as v0.19's *NormToInferUnpack)."""
    flags = _norm_flags(attrs)
    ndim = ndim_of(out)
    if flags["scale"]:
        out = ctx.emit(relax.op.multiply(out, _bias_to_axis(gamma, ndim, axis, ctx)))
    if flags["center"]:
        out = relax.op.add(out, _bias_to_axis(beta, ndim, axis, ctx))
    return out


def _batch_norm_decomposed(data, gamma, beta, mean, var, axis: int, attrs, ctx):
    """v0.19's BatchNormToInferUnpack: ``scale = 1 / sqrt(var + eps) * gamma``,
    ``shift = -mean * scale + beta``, ``data * scale + shift``, each op in the dtype (with
    constant statistics the backend's folder computes the first two op by op, as v0.19's
    FoldConstant did).  Fields 1 and 2 are the moving statistics, unchanged."""
    flags = _norm_flags(attrs)
    dtype = dtype_of(data)
    ndim = ndim_of(data)
    sqrt_var = ctx.emit(relax.op.sqrt(ctx.emit(relax.op.add(var, _scalar(flags["epsilon"],
                                                                           dtype)))))
    scale = ctx.emit(relax.op.divide(_scalar(1.0, dtype), sqrt_var))
    if flags["scale"]:
        scale = ctx.emit(relax.op.multiply(scale, gamma))
    shift = ctx.emit(relax.op.multiply(ctx.emit(relax.op.negative(mean)), scale))
    if flags["center"]:
        shift = ctx.emit(relax.op.add(shift, beta))
    out = ctx.emit(relax.op.multiply(data, _bias_to_axis(scale, ndim, axis, ctx)))
    out = ctx.emit(relax.op.add(out, _bias_to_axis(shift, ndim, axis, ctx)))
    return relax.Tuple([out, mean, var])


def _group_norm_decomposed(data, gamma, beta, groups: int, axis: int, attrs, ctx):
    """v0.19's GroupNormToInferUnpack: the channel axis split into ``(groups, C/groups)``,
    standardized over that ``C/groups`` axis and every axis after it (not the ones before:
    an NHWC group norm reduced over the channel group alone), reshaped back."""
    dims = shape_of(data)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.error(f"input shape {tuple(dims)}: v0.19's group norm needs static dims "
                        "(its SimplifyInference read each as a constant)")
    grouped = ctx.emit(relax.op.reshape(
        data, dims[:axis] + [groups, dims[axis] // groups] + dims[axis + 1:]))
    out = _standardized(grouped, list(range(axis + 1, len(dims) + 1)),
                        _norm_flags(attrs)["epsilon"], ctx)
    out = ctx.emit(relax.op.reshape(out, dims))
    return _scaled_shifted(out, gamma, beta, axis, attrs, ctx)


@register_converter("nn.batch_norm")
def _batch_norm(inputs, attrs, ctx):
    # Relay's nn.batch_norm is inference-only: moving statistics, never batch ones.
    data, gamma, beta, mean, var = inputs
    ndim = ndim_of(data)
    if ndim >= 0 and not -1 <= int(attrs.get("axis", 1)) < ndim:
        # v0.19's BatchNormRel: ICHECK(axis >= -1 && axis < ndim); -1 alone of the
        # negative axes meant the last one.
        raise ctx.error(f"axis={attrs.get('axis')} for an input of rank {ndim}: "
                        "v0.19's batch_norm took an axis in [-1, rank)")
    _warn_invalid_variance(var, float(attrs.get("epsilon", 1e-5)), ctx)
    if _decomposed(data):
        axis = normalize_axis(attrs.get("axis", 1), ndim_of(data), ctx)
        return _batch_norm_decomposed(data, gamma, beta, mean, var, axis, attrs, ctx)
    return relax.op.nn.batch_norm(data, gamma, beta, mean, var,
                                  axis=int(attrs.get("axis", 1)), training=False,
                                  **_norm_flags(attrs))


@register_converter("nn.layer_norm")
def _layer_norm(inputs, attrs, ctx):
    data, gamma, beta = inputs
    if _decomposed(data):
        axis = normalize_axis(attrs.get("axis", -1), ndim_of(data), ctx)
        out = _standardized(data, [axis], _norm_flags(attrs)["epsilon"], ctx)
        return _scaled_shifted(out, gamma, beta, axis, attrs, ctx)
    gamma, beta, flags = _affine_terms(gamma, beta, attrs)
    return relax.op.nn.layer_norm(data, gamma, beta, axes=[int(attrs.get("axis", -1))],
                                  **flags)


def _spatial_axes(data, channel_axis: int) -> list[int]:
    """Every axis but the batch axis (0) and the channel axis."""
    return [i for i in range(1, ndim_of(data)) if i != channel_axis]


def _axes_after(data, channel_axis: int) -> list[int]:
    """The axes after the channel axis: with the channel group, what v0.19's
    GroupNormToInferUnpack reduced (its ``reduced_axes``; an NHWC group norm reduces
    each pixel's channel group alone, not the spatial axes before the channel)."""
    return list(range(channel_axis + 1, ndim_of(data)))


def _check_groups(data, groups: int, axis: int, ctx) -> None:
    """``num_groups`` positive and dividing the channels, as v0.19's reshape to
    ``(groups, C / groups)`` (GroupNormToInferUnpack) needed to type-check; TVM 0.27
    accepted a negative divisor and failed in codegen."""
    channels = shape_of(data)[axis]
    if groups <= 0 or (isinstance(channels, int) and channels % groups):
        raise ctx.error(f"num_groups={groups} does not divide the {channels} channels "
                        "(v0.19's reshape to (groups, C / groups) failed to type-check)")


@register_converter("nn.group_norm")
def _group_norm(inputs, attrs, ctx):
    data, gamma, beta = inputs
    axis = normalize_axis(attrs.get("axis", 1), ndim_of(data), ctx)
    _check_groups(data, int(attrs["num_groups"]), axis, ctx)
    if _decomposed(data):
        return _group_norm_decomposed(data, gamma, beta, int(attrs["num_groups"]), axis,
                                      attrs, ctx)
    gamma, beta, flags = _affine_terms(gamma, beta, attrs)
    return relax.op.nn.group_norm(data, gamma, beta, num_groups=int(attrs["num_groups"]),
                                  channel_axis=axis, axes=_axes_after(data, axis), **flags)


@register_converter("nn.instance_norm")
def _instance_norm(inputs, attrs, ctx):
    data, gamma, beta = inputs
    if 0 <= ndim_of(data) <= 2:
        # No spatial axis: each "instance" is one value, its variance 0 (the result is
        # beta everywhere). v0.19's InstanceNormRel refused it (ICHECK_GT(ndim, 2)).
        raise ctx.error(f"input of rank {ndim_of(data)}: an instance norm normalizes over "
                        "spatial axes, so it needs rank 3 or more (as v0.19's "
                        "InstanceNormRel)")
    axis = normalize_axis(attrs.get("axis", 1), ndim_of(data), ctx)
    if _decomposed(data):
        out = _standardized(data, _spatial_axes(data, axis), _norm_flags(attrs)["epsilon"],
                            ctx)
        return _scaled_shifted(out, gamma, beta, axis, attrs, ctx)
    gamma, beta, flags = _affine_terms(gamma, beta, attrs)
    return relax.op.nn.instance_norm(data, gamma, beta, channel_axis=axis,
                                     axes=_spatial_axes(data, axis), **flags)
