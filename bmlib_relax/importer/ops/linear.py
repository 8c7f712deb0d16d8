"""Dense / matmul family and ``nn.bias_add``.

Import forms (the bmlib patterns match exactly these):

* ``nn.dense(x, w)`` -> ``matmul(x, permute_dims(w, [1, 0]), out_dtype)``
* ``nn.batch_matmul(a, b)`` -> ``matmul(a', b')`` where the operand Relay
  transposes is wrapped in ``permute_dims(.., [0, 2, 1])``
* ``nn.bias_add(x, b, axis)`` -> ``add(x, b)`` on the last axis, else
  ``add(x, reshape(b, [C, 1, ..., 1]))``
"""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ..run_checks import BROADCAST_REASON, unify_dims
from ._utils import (
    check_nonempty_reduction, check_product_operands, ndim_of, normalize_axis, out_dtype,
    shape_of,
)


def _swap_last_two(expr: relax.Expr) -> relax.Expr:
    ndim = ndim_of(expr)
    return relax.op.permute_dims(expr, list(range(ndim - 2)) + [ndim - 1, ndim - 2])


@register_converter("nn.dense")
def _dense(inputs, attrs, ctx):
    data, weight = inputs
    check_product_operands(*inputs, ctx)
    check_nonempty_reduction([shape_of(weight)[-1]], ctx, "the reduction (K = 0)")
    units = attrs.get("units")
    if units is not None and isinstance(shape_of(weight)[0], int) \
            and int(units) != shape_of(weight)[0]:
        raise ctx.error(f"units={units} does not match the weight's {shape_of(weight)[0]} rows")
    return relax.op.matmul(data, relax.op.permute_dims(weight, [1, 0]), out_dtype(attrs))


@register_converter("nn.matmul")
def _matmul(inputs, attrs, ctx):
    # Relay's MatmulAttrs default both transposes to False.
    a, b = inputs
    check_product_operands(*inputs, ctx)
    if attrs.get("transpose_a", False):
        a = _swap_last_two(a)
    if attrs.get("transpose_b", False):
        b = _swap_last_two(b)
    units = attrs.get("units")
    weight = inputs[1]
    columns = shape_of(weight)[-2 if attrs.get("transpose_b", False) else -1] \
        if ndim_of(weight) >= 2 else None
    if units is not None and isinstance(columns, int) and int(units) != columns:
        # MatmulRel typed the weight from units: another width was a type conflict
        raise ctx.error(f"units={units} does not match the weight's {columns} columns")
    return relax.op.matmul(a, b, out_dtype(attrs))


@register_converter("nn.batch_matmul")
def _batch_matmul(inputs, attrs, ctx):
    # Relay's BatchMatmulAttrs C++ defaults are transpose_a=False, transpose_b=False;
    # the Python API passed transpose_b=True, which the printer then wrote out.
    a, b = inputs
    if ndim_of(a) != 3 or ndim_of(b) != 3:  # v0.19's BatchMatmulRel
        raise ctx.error(f"takes 3-D operands (batch, rows, columns), got {ndim_of(a)}-D "
                        f"and {ndim_of(b)}-D")
    check_product_operands(*inputs, ctx)
    # The batch (broadcast when one is 1) and the reduction length of the two
    # operands, when only known at run time, are checked equal there (Relay did then).
    k_a = 1 if attrs.get("transpose_a", False) else 2
    k_b = 2 if attrs.get("transpose_b", False) else 1
    a, b = unify_dims(ctx.bb, [a, b], [[(0, 0), (1, 0)]], ctx.location, ctx.op_name,
                      BROADCAST_REASON, broadcast=True)
    a, b = unify_dims(ctx.bb, [a, b], [[(0, k_a), (1, k_b)]], ctx.location, ctx.op_name,
                      "the reduction lengths of a product must be equal")
    if attrs.get("transpose_a", False):
        a = relax.op.permute_dims(a, [0, 2, 1])
    if attrs.get("transpose_b", False):
        b = relax.op.permute_dims(b, [0, 2, 1])
    return relax.op.matmul(a, b, out_dtype(attrs))


@register_converter("nn.bias_add")
def _bias_add(inputs, attrs, ctx):
    data, bias = inputs
    ndim = ndim_of(data)
    axis = normalize_axis(attrs.get("axis", 1), ndim, ctx)
    if axis == ndim - 1:
        return relax.op.add(data, bias)
    channels = shape_of(bias)[0]
    return relax.op.add(data, relax.op.reshape(bias, [channels] + [1] * (ndim - 1 - axis)))
