"""Dense / matmul family and ``nn.bias_add``.

Import forms (the bmlib patterns match exactly these):

* ``nn.dense(x, w)`` -> ``matmul(x, permute_dims(w, [1, 0]), out_dtype)``
* ``nn.batch_matmul(a, b)`` -> ``matmul(a', b')`` where the operand Relay
  transposes is wrapped in ``permute_dims(.., [0, 2, 1])``
* ``nn.bias_add(x, b, axis)`` -> ``add(x, b)`` on the last axis, else
  ``add(x, reshape(b, [C, 1, ..., 1]))``
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from ..registry import register_converter
from ..run_checks import BROADCAST_REASON, unify_dims
from ._utils import (
    check_nonempty_reduction, check_product_operands, folded_value, ndim_of, normalize_axis,
    out_dtype, shape_of,
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


#: The most elements ``nn.sparse_dense`` densifies its sparse operand to (1 GiB of float32).
MAX_DENSIFIED_ELEMENTS = 1 << 28


@register_converter("nn.sparse_dense")
def _sparse_dense(inputs, attrs, ctx):
    """v0.19's ``nn.sparse_dense``: ``dense @ as_dense(S)^T`` (``sparse_lhs``: ``as_dense(S)
    @ dense^T``) with ``S`` in CSR (1-d ``data``) or BSR (``(nnz, bs_r, bs_c)`` blocks).

    The sparse operand of a pruned model is its weights: bound at import, it is made dense
    here (duplicates summing, as topi's loop over each row's entries did) and the product
    is a plain ``matmul`` -- which bmlib offloads.  Entries outside the matrix, or an
    ``indptr`` that does not walk ``data`` forward, made topi read past its arrays; they
    are refused, naming the entry."""
    dense = inputs[0]
    values, columns, offsets = _bound_sparse_arrays(inputs[1:], ctx)
    if ndim_of(dense) != 2:
        raise ctx.error(f"the dense operand is {ndim_of(dense)}-d: v0.19's sparse_dense "
                        "took a 2-d matrix")
    width = shape_of(dense)[1]
    if not isinstance(width, int):
        raise ctx.error("the dense operand's columns are known only at run time: the sparse "
                        "operand's width must be static")
    matrix = _densified(values, columns, offsets, width, ctx)
    weight = relax.const(matrix.astype(str(dense.ty.dtype)))
    if attrs.get("sparse_lhs", False):
        return relax.op.matmul(weight, relax.op.permute_dims(dense, [1, 0]))
    return relax.op.matmul(dense, relax.op.permute_dims(weight, [1, 0]))


def _bound_sparse_arrays(operands, ctx) -> list:
    """The ``(data, indices, indptr)`` arrays of a sparse operand bound at import."""
    arrays = [folded_value(v, ctx) for v in operands]
    if any(a is None for a in arrays):
        raise ctx.error("the sparse operand (data, indices, indptr) is known only when the "
                        "model runs; bind it as weights (params) to import the op")
    return arrays


def _checked_entries(values: np.ndarray, columns: np.ndarray, offsets: np.ndarray,
                     column_blocks: int, ctx) -> np.ndarray:
    """``offsets`` as int64, once every stored entry a row reaches lies inside the arrays
    and the matrix (``column_blocks`` columns): topi's loops read whatever indptr and
    indices said, past the arrays' ends."""
    offsets = offsets.astype(np.int64)
    bad = np.flatnonzero((np.diff(offsets) < 0) | (offsets[1:] > min(values.shape[0],
                                                                     columns.size)))
    if offsets.size and (offsets[0] < 0 or bad.size):
        at = 0 if offsets[0] < 0 else int(bad[0]) + 1
        raise ctx.error(f"indptr[{at}] is {int(offsets[at])}: indptr must rise from 0 to at "
                        f"most the {min(values.shape[0], columns.size)} stored entries")
    used = np.concatenate([np.arange(offsets[r], offsets[r + 1])
                           for r in range(offsets.size - 1)] or [np.zeros(0, np.int64)])
    outside = used[(columns[used] < 0) | (columns[used] >= column_blocks)]
    if outside.size:
        raise ctx.error(f"indices[{int(outside[0])}] is {int(columns[outside[0]])}: outside the "
                        f"{column_blocks} column block(s) of the matrix")
    return offsets


def _densified(values: np.ndarray, columns: np.ndarray, offsets: np.ndarray, width: int,
               ctx) -> np.ndarray:
    """The ``(rows, width)`` matrix a CSR / BSR triple describes, checked entry by entry."""
    if values.ndim not in (1, 3) or columns.ndim != 1 or offsets.ndim != 1 or \
            offsets.size < 1:
        raise ctx.error(f"data {values.shape}, indices {columns.shape} and indptr "
                        f"{offsets.shape} are no CSR (1-d data) or BSR (3-d data) matrix")
    block_rows, block_cols = values.shape[1:] if values.ndim == 3 else (1, 1)
    if block_cols == 0 or width % block_cols:
        raise ctx.error(f"blocks of {block_cols} columns do not tile the dense operand's "
                        f"{width} columns")
    rows = (offsets.size - 1) * block_rows
    if rows * width > MAX_DENSIFIED_ELEMENTS:
        raise ctx.error(f"the sparse operand is {rows} x {width}: more than "
                        f"{MAX_DENSIFIED_ELEMENTS} elements to make dense")
    offsets = _checked_entries(values, columns, offsets, width // block_cols, ctx)
    matrix = np.zeros((rows, width), values.dtype)
    for row in range(offsets.size - 1):
        for entry in range(offsets[row], offsets[row + 1]):
            col = int(columns[entry]) * block_cols
            block = values[entry] if values.ndim == 3 else values[entry].reshape(1, 1)
            matrix[row * block_rows:(row + 1) * block_rows, col:col + block_cols] += block
    return matrix


@register_converter("nn.sparse_add")
def _sparse_add(inputs, attrs, ctx):
    """v0.19's ``nn.sparse_add``: ``dense + as_dense(S)``, ``S`` in CSR of the dense
    operand's shape and dtype (SparseAddRel); made dense at import, as for
    ``nn.sparse_dense``."""
    dense = inputs[0]
    values, columns, offsets = _bound_sparse_arrays(inputs[1:], ctx)
    dims = shape_of(dense)
    if len(dims) != 2 or not all(isinstance(d, int) for d in dims):
        raise ctx.error(f"the dense operand is {tuple(dims)}: sparse_add takes a 2-d matrix "
                        "of static shape")
    if values.ndim != 1 or str(values.dtype) != str(dense.ty.dtype):
        raise ctx.error(f"the sparse data is {values.ndim}-d {values.dtype}: SparseAddRel took "
                        f"1-d data of the dense operand's dtype ({dense.ty.dtype})")
    if offsets.size - 1 != dims[0]:
        raise ctx.error(f"indptr has {offsets.size} entries for the dense operand's {dims[0]} "
                        f"rows: it needs rows + 1")
    return relax.op.add(dense, relax.const(_densified(values, columns, offsets, dims[1], ctx)))


@register_converter("nn.sparse_transpose")
def _sparse_transpose(inputs, attrs, ctx):
    """v0.19's ``nn.sparse_transpose`` of a square CSR matrix (SparseTransposeRel: the
    three arrays keep their shapes): the transposed rows hold their entries in the order
    of the original rows, as topi's counting sort placed them.  Computed at import from
    bound arrays; the result is the three arrays as constants."""
    values, columns, offsets = _bound_sparse_arrays(inputs, ctx)
    if values.ndim != 1 or columns.ndim != 1 or offsets.ndim != 1 or offsets.size < 1:
        raise ctx.error(f"data {values.shape}, indices {columns.shape} and indptr "
                        f"{offsets.shape}: sparse_transpose takes a CSR matrix of 1-d arrays")
    size = offsets.size - 1
    offsets = _checked_entries(values, columns, offsets, size, ctx)
    rows_of = [[] for _ in range(size)]
    for row in range(size):
        for entry in range(offsets[row], offsets[row + 1]):
            rows_of[int(columns[entry])].append((row, entry))
    order = [pair for column in rows_of for pair in column]
    data = np.zeros_like(values)
    indices = np.zeros_like(columns)
    data[:len(order)] = [values[entry] for _, entry in order]
    indices[:len(order)] = [row for row, _ in order]
    indptr = np.zeros(offsets.shape, str(inputs[2].ty.dtype))
    indptr[1:] = np.cumsum([len(column) for column in rows_of])
    return relax.Tuple([relax.const(data), relax.const(indices), relax.const(indptr)])
