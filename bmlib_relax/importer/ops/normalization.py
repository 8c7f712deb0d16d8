"""Normalization ops: batch (inference), layer, group and instance norm."""
from __future__ import annotations

import warnings

import numpy as np
from tvm import relax

from ...errors import SuspiciousWeightWarning
from ..registry import register_converter
from ._utils import const_value, dtype_of, ndim_of, normalize_axis, shape_of


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


@register_converter("nn.batch_norm")
def _batch_norm(inputs, attrs, ctx):
    # Relay's nn.batch_norm is inference-only: moving statistics, never batch ones.
    data, gamma, beta, mean, var = inputs
    _warn_invalid_variance(var, float(attrs.get("epsilon", 1e-5)), ctx)
    return relax.op.nn.batch_norm(data, gamma, beta, mean, var,
                                  axis=int(attrs.get("axis", 1)), training=False,
                                  **_norm_flags(attrs))


@register_converter("nn.layer_norm")
def _layer_norm(inputs, attrs, ctx):
    data, gamma, beta = inputs
    gamma, beta, flags = _affine_terms(gamma, beta, attrs)
    return relax.op.nn.layer_norm(data, gamma, beta, axes=[int(attrs.get("axis", -1))],
                                  **flags)


def _spatial_axes(data, channel_axis: int) -> list[int]:
    """Every axis but the batch axis (0) and the channel axis."""
    return [i for i in range(1, ndim_of(data)) if i != channel_axis]


@register_converter("nn.group_norm")
def _group_norm(inputs, attrs, ctx):
    data, gamma, beta = inputs
    gamma, beta, flags = _affine_terms(gamma, beta, attrs)
    axis = normalize_axis(attrs.get("axis", 1), ndim_of(data), ctx)
    return relax.op.nn.group_norm(data, gamma, beta, num_groups=int(attrs["num_groups"]),
                                  channel_axis=axis, axes=_spatial_axes(data, axis), **flags)


@register_converter("nn.instance_norm")
def _instance_norm(inputs, attrs, ctx):
    data, gamma, beta = inputs
    gamma, beta, flags = _affine_terms(gamma, beta, attrs)
    axis = normalize_axis(attrs.get("axis", 1), ndim_of(data), ctx)
    return relax.op.nn.instance_norm(data, gamma, beta, channel_axis=axis,
                                     axes=_spatial_axes(data, axis), **flags)
