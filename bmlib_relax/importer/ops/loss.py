"""Relay's loss ops: ``nn.nll_loss``, ``nn.cross_entropy``, ``nn.cross_entropy_with_logits``.

Forms (each as v0.19 computed it, see the converters):

* ``nll_loss(p, t, w)`` -> ``T = where(t != ignore_index, -gather_elements(p, t, axis=1)
  * take(w, t), 0)``; "none" is ``T``, "sum" ``sum(T)``, "mean" ``sum(T) / sum(W)``
  with ``W = where(t != ignore_index, take(w, t), 0)``;
* ``cross_entropy(x, y)`` -> ``-sum(log(x) * y) / N``; ``cross_entropy_with_logits(x,
  y)`` -> ``-sum(x * y) / N``, ``N`` the batch (``x.shape[0]``).

A sum over a tensor with a static empty axis is 0 (TVM's reduction would leave it
uninitialised); one whose axis is known at run time only is checked to be non-empty.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..registry import register_converter
from ..run_checks import emit_run_check, emit_tensor_check, none_hold, unify_dims
from ._utils import (
    check_reduced_axes_nonempty_at_run_time, dtype_of, folded_value, is_integer_dtype,
    shape_of,
)

#: Floating dtypes the losses compute in.  v0.19 also typed bfloat16 (NLLLossRel), but
#: computed it through its BF16 legalization, which is not reproduced here.
_FLOATS = ("float16", "float32", "float64")
_REDUCTIONS = ("mean", "sum", "none")


def _empty(value: relax.Expr) -> bool:
    """Whether a tensor has a static dim of 0 (no element)."""
    return any(isinstance(d, int) and d == 0 for d in shape_of(value))


def _total(value: relax.Expr, ctx) -> relax.Expr:
    """``topi::sum`` over every axis: 0 for a static empty tensor, and a run-time-sized
    axis checked to be non-empty (TVM initialises a reduction inside its loop)."""
    value = ctx.emit(value)
    if _empty(value):
        return relax.const(0, dtype_of(value))
    check_reduced_axes_nonempty_at_run_time(value, None, ctx)
    return relax.op.sum(value)


def _dim_value(dim, dtype: str, ctx) -> relax.Expr:
    """A dim as a 0-d tensor of ``dtype``: TIR's ``BinaryOpMatchTypes`` cast the
    IntImm shape dim to the float operand (in float16, a batch past 65504 is inf)."""
    if isinstance(dim, int):
        with np.errstate(over="ignore"):
            return relax.const(np.array(dim).astype(dtype), dtype)
    as_tensor = ctx.emit(relax.op.shape_to_tensor(relax.ShapeExpr([dim])))
    return relax.op.astype(relax.op.reshape(as_tensor, []), dtype)


# ------------------------------------------------------------------------------ nll_loss
def _check_nll_types(predictions, targets, weights, ctx) -> None:
    """NLLLossRel's checks, in its order (src/relay/op/nn/nn.cc)."""
    p_dims, t_dims, w_dims = shape_of(predictions), shape_of(targets), shape_of(weights)
    if len(p_dims) - len(t_dims) != 1:
        raise ctx.error(f"predictions should be one dimension larger than targets, "
                        f"predictions shape = {tuple(p_dims)}, targets shape = "
                        f"{tuple(t_dims)} (NLLLossRel)")
    if len(w_dims) != 1:
        raise ctx.error(f"weights should be a one dimension Tensor with its length the "
                        f"number of classes, but a Tensor of dimension {len(w_dims)} was "
                        "provided (NLLLossRel)")
    if len(p_dims) == 1:
        raise ctx.error("predictions are 1-D (no batch axis): v0.19's NLLLossRel read their "
                        "axis 1, the classes, and failed (IndexError)")
    p_classes, w_classes = p_dims[1], w_dims[0]
    if isinstance(p_classes, int) and isinstance(w_classes, int) and p_classes != w_classes:
        raise ctx.error(f"the second dimension of predictions should be the number of "
                        f"classes, which is the length of weights, predictions shape = "
                        f"{tuple(p_dims)}, weights shape = {tuple(w_dims)} (NLLLossRel)")
    p_dtype, w_dtype = dtype_of(predictions), dtype_of(weights)
    if p_dtype != w_dtype or p_dtype not in _FLOATS + ("bfloat16",):
        raise ctx.error(f"predictions ({p_dtype}) and weights ({w_dtype}) should be of the "
                        "same floating type (NLLLossRel)")
    if p_dtype == "bfloat16":
        raise ctx.error("bfloat16 predictions: v0.19 computed them through its BF16 "
                        f"legalization, not reproduced here; use one of {', '.join(_FLOATS)}")
    if not dtype_of(targets).startswith("int"):
        raise ctx.error(f"targets should be of int type, got {dtype_of(targets)} "
                        "(NLLLossRel)")


def _check_target_dims(predictions, targets, ctx) -> None:
    """topi's nll_loss computes over the targets' shape and reads ``predictions(n, c,
    i1, ...)``: targets no longer than the predictions on each of those axes (Relay
    did not check; longer read outside the predictions)."""
    p_dims = shape_of(predictions)
    for k, t_dim in enumerate(shape_of(targets)):
        axis = 0 if k == 0 else k + 1
        p_dim = p_dims[axis]
        if isinstance(t_dim, int) and isinstance(p_dim, int):
            if t_dim > p_dim:
                raise ctx.error(f"targets have {t_dim} entries on axis {k}, the predictions "
                                f"{p_dim} on axis {axis}: topi's nll_loss would read "
                                "outside the predictions")
            continue
        if not isinstance(t_dim, int) and not isinstance(p_dim, int) and t_dim.same_as(p_dim):
            continue
        t_val = tvm.tirx.const(t_dim, "int64") if isinstance(t_dim, int) else t_dim
        p_val = tvm.tirx.const(p_dim, "int64") if isinstance(p_dim, int) else p_dim
        emit_run_check(ctx.bb, tvm.tirx.LE(t_val, p_val), ctx.location, ctx.op_name,
                       f"targets have {{}} entries on axis {k}, the predictions {{}} on axis "
                       f"{axis}: topi's nll_loss would read outside the predictions",
                       t_val, p_val)


def _check_target_values(targets: relax.Expr, kept: relax.Expr, classes, ignore_index: int,
                         ctx) -> None:
    """Every target not equal to ``ignore_index`` is a class in ``[0, C)``: topi read
    ``predictions(n, c)`` and ``weights(c)`` unchecked, outside the tensors."""
    rule = f"targets must lie in [0, {classes}) (the classes) or be ignore_index={ignore_index}"
    value = folded_value(targets, ctx)
    if value is not None and isinstance(classes, int):
        values = value.astype(np.int64)
        bad = (values != ignore_index) & ((values < 0) | (values >= classes))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ctx.error(f"targets: entry {list(at)} is {values[at]}: {rule}; topi would "
                            "read outside the predictions and weights")
        return
    if isinstance(classes, int):
        limit: relax.Expr = relax.const(classes, "int64")
    else:
        limit = ctx.emit(relax.op.shape_to_tensor(relax.ShapeExpr([classes])))
    wide = ctx.emit(relax.op.astype(targets, "int64"))
    outside = relax.op.logical_or(relax.op.less(wide, relax.const(0, "int64")),
                                  relax.op.greater_equal(wide, limit))
    bad = ctx.emit(relax.op.logical_and(kept, outside))
    emit_tensor_check(ctx, none_hold(bad), f"{rule} in every run; this run's are not (topi "
                                           "would read outside the predictions and weights)")


def _picked(predictions, weights, index, classes, ctx):
    """``predictions(n, c, i1, ...)`` and ``weights(c)`` at every target position (index:
    the targets, ignored ones replaced by class 0).  With no class at all (a static C of
    0) every target is ignored (checked), and nothing is read."""
    dtype = dtype_of(predictions)
    if classes == 0:
        zeros = relax.op.zeros(shape_of(index), dtype)
        return zeros, zeros
    gathered = relax.op.gather_elements(predictions, relax.op.expand_dims(index, [1]), axis=1)
    return relax.op.squeeze(gathered, [1]), relax.op.take(weights, index, axis=0)


@register_converter("nn.nll_loss")
def _nll_loss(inputs, attrs, ctx):
    """v0.19's ``topi::nll_loss`` (include/tvm/topi/nn.h): ``T = -p[n, t, ...] * w[t]``,
    0 where ``t == ignore_index`` (compared in the wider integer type, as TIR widened the
    target or the int32 constant); "mean" divides ``sum(T)`` by the sum of the weights of
    the targets not ignored (``sum(W)``: 0/0 is NaN when every one is), not by a count."""
    predictions, targets, weights = inputs
    reduction = str(attrs.get("reduction", "mean"))
    ignore_index = int(attrs.get("ignore_index", -100))
    _check_nll_types(predictions, targets, weights, ctx)
    if reduction not in _REDUCTIONS:
        raise ctx.error(f"reduction={reduction!r}: v0.19's nll_loss computes "
                        f"{', '.join(map(repr, _REDUCTIONS))}")
    predictions, weights = unify_dims(
        ctx.bb, [predictions, weights], [[(0, 1), (1, 0)]], ctx.location, ctx.op_name,
        "NLLLossRel required the weights' length to be the number of classes")
    _check_target_dims(predictions, targets, ctx)
    classes = shape_of(predictions)[1]
    dtype = dtype_of(predictions)
    wide = ctx.emit(relax.op.astype(targets, "int64"))
    kept = ctx.emit(relax.op.not_equal(wide, relax.const(ignore_index, "int64")))
    _check_target_values(targets, kept, classes, ignore_index, ctx)
    index = ctx.emit(relax.op.where(kept, wide, relax.const(0, "int64")))
    picked, weight = _picked(predictions, weights, index, classes, ctx)
    zero = relax.const(0, dtype)
    weight = ctx.emit(weight)
    loss = relax.op.where(kept, relax.op.multiply(relax.op.negative(picked), weight), zero)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return _total(loss, ctx)
    if _empty(index):  # 0 / 0, which TVM would fold into a "Divide by zero" failure
        return relax.const(np.nan, dtype)
    return relax.op.divide(_total(loss, ctx),
                           _total(relax.op.where(kept, weight, zero), ctx))


# ------------------------------------------------------------------------- cross_entropy
def _cross_entropy_operands(inputs, ctx):
    """CrossEntropyRel (src/relay/op/nn/nn.cc): 2-D predictions and targets of one shape
    (a run-time-sized dim is checked when the model runs).  The dtypes: v0.19 multiplied
    elements with TIR's type matching, which casts integer (and bool) targets to the
    floating predictions; targets of another floating dtype made the result wider than
    the type Relay gave it (the predictions' dtype) and are refused, as are integer
    predictions (no ``log`` of integers; the division by the batch promoted them)."""
    x, y = inputs
    x_dims, y_dims = shape_of(x), shape_of(y)
    if len(x_dims) != 2 or len(y_dims) != 2:
        raise ctx.error(f"predictions and targets must be 2-D, x shape = {tuple(x_dims)}, "
                        f"y shape = {tuple(y_dims)} (CrossEntropyRel)")
    if any(isinstance(a, int) and isinstance(b, int) and a != b
           for a, b in zip(x_dims, y_dims)):
        raise ctx.error(f"shapes of x and y are inconsistent, x shape = {tuple(x_dims)}, "
                        f"y shape = {tuple(y_dims)} (CrossEntropyRel)")
    x_dtype, y_dtype = dtype_of(x), dtype_of(y)
    if x_dtype not in _FLOATS:
        raise ctx.error(f"predictions of dtype {x_dtype}: only floating predictions "
                        f"({', '.join(_FLOATS)}) are supported")
    if y_dtype != x_dtype:
        if not (is_integer_dtype(y_dtype) or y_dtype == "bool"):
            raise ctx.error(f"targets of dtype {y_dtype} with {x_dtype} predictions: v0.19 "
                            f"computed in {y_dtype}, not the {x_dtype} its type gave")
        y = relax.op.astype(y, x_dtype)
    y = ctx.emit(y)
    return unify_dims(ctx.bb, [x, y], [[(0, 0), (1, 0)], [(0, 1), (1, 1)]], ctx.location,
                      ctx.op_name, "CrossEntropyRel required equal shapes")


def _mean_over_batch(products: relax.Expr, x: relax.Expr, ctx) -> relax.Expr:
    """``-topi.sum(products) / x.shape[0]`` (python/tvm/relay/op/nn/_nn.py); no batch
    is ``-0 / 0``, NaN (TVM would fold that division into a "Divide by zero" failure)."""
    if shape_of(x)[0] == 0:
        return relax.const(np.nan, dtype_of(x))
    total = _total(products, ctx)
    batch = _dim_value(shape_of(x)[0], dtype_of(x), ctx)
    return relax.op.divide(relax.op.negative(total), batch)


@register_converter("nn.cross_entropy")
def _cross_entropy(inputs, attrs, ctx):
    """v0.19's compute_cross_entropy: ``-sum(log(x) * y) / N`` (a 0-d result)."""
    x, y = _cross_entropy_operands(inputs, ctx)
    return _mean_over_batch(relax.op.multiply(relax.op.log(x), y), x, ctx)


@register_converter("nn.cross_entropy_with_logits")
def _cross_entropy_with_logits(inputs, attrs, ctx):
    """v0.19's compute_cross_entropy_with_logits: ``-sum(x * y) / N``: the predictions are
    taken as log-probabilities already (no softmax)."""
    x, y = _cross_entropy_operands(inputs, ctx)
    return _mean_over_batch(relax.op.multiply(x, y), x, ctx)
