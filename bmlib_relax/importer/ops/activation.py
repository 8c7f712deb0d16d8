"""Activations, softmax and inference-time dropout (``nn.*``) with Relay's defaults."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ..run_checks import unify_dims
from ._utils import dtype_of, is_integer_dtype, ndim_of, normalize_axis, shape_of


def _select_negative(data: relax.Expr, slope: relax.Expr) -> relax.Expr:
    """``x > 0 ? x : x * slope`` in ``data``'s dtype (integer products wrap), v0.19's
    topi leaky_relu/prelu ``Select`` for the integer dtypes Relax's ops refuse."""
    zero = relax.const(0, dtype_of(data))
    return relax.op.where(relax.op.greater(data, zero), data, relax.op.multiply(data, slope))


@register_converter("nn.relu")
def _relu(inputs, attrs, ctx):
    return relax.op.nn.relu(inputs[0])


@register_converter("nn.leaky_relu")
def _leaky_relu(inputs, attrs, ctx):
    # Relay's LeakyReluAttrs default alpha is 0.25 (not Relax's 0.01).
    alpha = float(attrs.get("alpha", 0.25))
    if is_integer_dtype(dtype_of(inputs[0])):
        # v0.19's make_const(int dtype, alpha) truncated the slope toward zero.
        return _select_negative(inputs[0], relax.const(int(alpha), dtype_of(inputs[0])))
    return relax.op.nn.leakyrelu(inputs[0], alpha=alpha)


@register_converter("nn.prelu")
def _prelu(inputs, attrs, ctx):
    data, alpha = inputs
    if int(attrs.get("axis", 1)) < 0:
        # v0.19's PReluRel indexed the shape with the axis as given: a negative one
        # failed ("indexing -1 on an array"); topi.prelu checked 0 <= axis too.
        raise ctx.error(f"axis={attrs.get('axis')}: v0.19's prelu took a non-negative axis")
    axis = normalize_axis(int(attrs.get("axis", 1)), ndim_of(data), ctx)
    # PReluRel typed alpha as Tensor[(C,)], C the channel axis' extent: anything else was
    # a type error (the template failed with no detail; the host a bare AssertionError).
    channels, alpha_shape = shape_of(data)[axis], tuple(shape_of(alpha))
    if len(alpha_shape) != 1 or (isinstance(channels, int) and
                                 isinstance(alpha_shape[0], int) and alpha_shape[0] != channels):
        raise ctx.error(f"alpha has shape {alpha_shape}, expected ({channels},): one slope per "
                        f"channel of axis {axis}")
    # A run-time-sized channel axis is checked, when the model runs, to be alpha's length
    # (Relay's PReluRel unified them); the template needs it static.
    data, alpha = unify_dims(ctx.bb, [data, alpha], [[(0, axis), (1, 0)]], ctx.location,
                             ctx.op_name, "alpha has one slope per channel")
    if is_integer_dtype(dtype_of(data)):
        trailing = ndim_of(data) - axis - 1
        slope = ctx.emit(relax.op.expand_dims(alpha, list(range(1, 1 + trailing)))) \
            if trailing else alpha
        return _select_negative(data, slope)
    return relax.op.nn.prelu(data, alpha, axis=axis)


@register_converter("nn.softmax")
def _softmax(inputs, attrs, ctx):
    return relax.op.nn.softmax(inputs[0], axis=int(attrs.get("axis", -1)))


@register_converter("nn.log_softmax")
def _log_softmax(inputs, attrs, ctx):
    return relax.op.nn.log_softmax(inputs[0], axis=int(attrs.get("axis", -1)))


@register_converter("nn.dropout")
def _dropout(inputs, attrs, ctx):
    # Relay's nn.dropout returns (output, mask); at inference the output is the
    # input and the mask keeps every element.  The mask is only built when a
    # model projects it (``.1``), so the usual ``.0`` imports as nothing at all.
    data = inputs[0]
    return relax.Tuple([data, relax.op.ones_like(data)])
