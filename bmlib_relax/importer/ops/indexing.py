"""Gathers, scatters, scans and index arithmetic.

Forms: ``gather(data, axis, indices)`` -> ``gather_elements``; ``gather_nd``
-> ``gather_nd`` with Relay's index-tuple axis (first) moved last, where Relax
(ONNX) keeps it; ``adv_index`` -> ``index_tensor``; ``cumsum``/``cumprod``,
``scatter_elements``, ``reverse_sequence``, ``meshgrid``, ``sort``/``argsort``
/``topk``, ``one_hot`` -> the Relax op of the same meaning; ``trilu`` ->
``tril``/``triu``; ``unravel_index`` and ``sparse_to_dense`` are composed from
integer arithmetic and ``scatter_nd``; ``fixed_point_multiply`` is the int64
multiply-round-shift Relay lowers it to; ``searchsorted`` -> TOPI's binary search
(``call_te``); ``argwhere`` -> ``nonzero`` transposed to Relay's ``(?, rank)`` int32.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, topi

from ..registry import register_converter
from ._utils import (
    check_index_values, check_integer_divisor, check_reads_elements, const_value, dtype_of,
    folded_value, index_tuple_length, ints, is_integer_dtype, ndim_of, normalize_axis,
    optional_ints, scalar_operand, shape_of,
)
from ..run_checks import (
    cast_dims, emit_element_count_check, emit_run_check, emit_tensor_check, equal, none_hold,
    unify_dims,
)


def _one_value_per_row(values: relax.Expr, count, ctx) -> relax.Expr:
    """``sparse_values`` as one value per index row: a 0-d value for every row, else
    as many values as rows, checked when the model runs where either count is known
    only then.  v0.19's sparse_to_dense read ``sparse_values[j]`` for row ``j`` with
    no check: fewer values than rows read past their end (garbage in the output)."""
    dims = shape_of(values)
    if len(dims) > 1:
        raise ctx.error(f"sparse_values is {len(dims)}-d: v0.19's SparseToDenseRel took a "
                        "0-d or 1-d tensor")
    if not dims:
        return relax.op.broadcast_to(values, [count])
    have = dims[0]
    if isinstance(have, int) and isinstance(count, int):
        if have != count:
            raise ctx.error(f"sparse_values has {have} entries for {count} index rows: "
                            "v0.19's sparse_to_dense read one value per row (past the end "
                            "of sparse_values)")
        return values
    emit_run_check(ctx.bb, equal(have, count), ctx.location, ctx.op_name,
                   "sparse_values has {} entries for {} index rows: one value per row "
                   "(v0.19's sparse_to_dense read past the end of sparse_values)",
                   have, count)
    return cast_dims(ctx.bb, values, [count])


@register_converter("gather")
def _gather(inputs, attrs, ctx):
    data, indices = inputs
    axis = normalize_axis(attrs["axis"], ndim_of(data), ctx)
    check_reads_elements(data, [axis], shape_of(indices), ctx, "gathers")
    _check_other_dims_within(data, indices, axis, ctx, equal=True)
    check_index_values(indices, [shape_of(data)[axis]], ctx, "indices")
    return relax.op.gather_elements(data, indices, axis)


def _check_other_dims_within(data, indices, axis, ctx, equal=False):
    """gather/scatter_elements read (write) ``data`` at the positions of ``indices`` on
    every axis but ``axis``: an index tensor longer there than the data would reach
    outside it (scatter_elements: heap corruption).  Static dims are decided here; a
    run-time-sized (``?``) one is checked when the model runs (``RunCheckError``).
    With ``equal`` (gather: v0.19's GatherRel asserted ``AssertEQ`` off the axis,
    which refused two different static dims and let a ``?`` through) a static pair
    must be equal; at run time shorter indices compute what v0.19 computed."""
    rule = (f"the indices may be at most as long as the data on every axis but "
            f"axis={axis}")
    for k, (index_dim, data_dim) in enumerate(zip(shape_of(indices), shape_of(data))):
        if k == axis or (not isinstance(index_dim, int) and index_dim.same_as(data_dim)):
            continue
        if isinstance(index_dim, int) and isinstance(data_dim, int):
            if index_dim > data_dim or (equal and index_dim != data_dim):
                raise ctx.error(
                    f"indices have {index_dim} entries on axis {k}, the data {data_dim}: "
                    + (f"the indices must be as long as the data on every axis but "
                       f"axis={axis} (v0.19's GatherRel)" if equal else rule))
            continue
        emit_run_check(ctx.bb, _dim(index_dim) <= _dim(data_dim), ctx.location, ctx.op_name,
                       f"indices have {{}} entries on axis {k}, the data {{}}: {rule} "
                       "(TVM would read or write outside the tensor)",
                       _dim(index_dim), _dim(data_dim))


def _dim(dim):
    """A shape dim as an int64 TIR expression (a static one as a constant)."""
    return tvm.tirx.const(dim, "int64") if isinstance(dim, int) else dim


@register_converter("gather_nd")
def _gather_nd(inputs, attrs, ctx):
    data, indices = inputs
    if attrs.get("index_rank") is not None and int(attrs["index_rank"]) != shape_of(indices)[0]:
        raise ctx.unsupported_attr("index_rank", attrs["index_rank"])
    ndim = ndim_of(indices)
    index_dims, batch = shape_of(indices), int(attrs.get("batch_dims", 0))
    _check_gather_nd(data, indices, batch, ctx)
    if isinstance(index_dims[0], int):  # indices index the data's first index_dims[0] axes
        indexed = list(range(batch, min(batch + index_dims[0], ndim_of(data))))
        check_reads_elements(data, indexed, index_dims[1:] + shape_of(data)[indexed[-1] + 1:]
                             if indexed else index_dims[1:], ctx, "gathers")
    if isinstance(index_dims[0], int):
        check_index_values(indices, shape_of(data)[batch:batch + index_dims[0]], ctx,
                           "indices")
    last = relax.op.permute_dims(indices, list(range(1, ndim)) + [0])
    if dtype_of(indices) != "int64":  # Relax takes int64 indices only
        last = relax.op.astype(last, "int64")
    return relax.op.gather_nd(data, last, int(attrs.get("batch_dims", 0)))


def _check_gather_nd(data, indices, batch: int, ctx) -> None:
    """v0.19's GatherNDRel: a static index-tuple length ``M`` (the first dim of
    ``indices``), at most the data's rank, and ``batch_dims`` leading dims equal in the
    data and the indices (after the tuple axis).  Past those, topi indexed outside the
    shapes (``M + batch_dims`` data axes), an error in v0.19."""
    data_dims, index_dims = shape_of(data), shape_of(indices)
    count = index_tuple_length(data, indices, "GatherND", "indices shape does satisfy", ctx)
    if batch < 0 or batch + count > len(data_dims) or batch > len(index_dims) - 1:
        raise ctx.error(f"batch_dims={batch} does not fit: {count}-entry index tuples after "
                        f"{batch} batch axes need 0 <= batch_dims <= "
                        f"{min(len(data_dims) - count, len(index_dims) - 1)} for "
                        f"{len(data_dims)}-d data and {len(index_dims)}-d indices")
    for i in range(batch):
        a, b = data_dims[i], index_dims[i + 1]
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ctx.error(f"batch_dims={batch}: the data has {a} entries on axis {i}, the "
                            f"indices {b} on axis {i + 1}; the batch axes must be equal")


@register_converter("adv_index")
def _adv_index(inputs, attrs, ctx):
    fields = list(inputs[0].fields) if isinstance(inputs[0], relax.Tuple) else None
    if not fields:
        raise ctx.error("adv_index needs a literal tuple (data, index, ...)")
    data, indexes = fields[0], fields[1:]
    if len(indexes) > ndim_of(data):  # v0.19's AdvIndexRel: ICHECK_LE
        raise ctx.error(f"too many indices for data: {len(indexes)} index tensors, "
                        f"{ndim_of(data)}-d data")
    if all(isinstance(d, int) for i in indexes for d in shape_of(i)):
        # the indexes broadcast against each other; the result takes the other axes too
        count = max([int(np.prod(shape_of(i), dtype=np.int64)) for i in indexes], default=1)
        check_reads_elements(data, list(range(len(indexes))),
                             [count] + shape_of(data)[len(indexes):], ctx, "indexes")
    for k, index in enumerate(indexes):
        check_index_values(index, [shape_of(data)[k]], ctx, f"index tensor {k}")
    return relax.op.index_tensor(data, relax.Tuple(indexes))


def _scan(relax_op, one_bit):
    def convert(inputs, attrs, ctx):
        axis = attrs.get("axis")
        if ndim_of(inputs[0]) == 0:  # ScanopRel read shape[0] of the (flattened) input
            raise ctx.error("of a 0-d tensor: v0.19's scan typed its input's first dim, "
                            "which a scalar has not")
        if axis is not None:
            axis = normalize_axis(axis, ndim_of(inputs[0]), ctx)
        exclusive = bool(attrs.get("exclusive") or False)
        dtype = attrs.get("dtype") or None
        if (dtype or dtype_of(inputs[0])) == "bool":
            return _bool_scan(relax_op, one_bit, inputs[0], axis, exclusive, ctx)
        return relax_op(inputs[0], axis, dtype, exclusive)
    return convert


def _bool_scan(relax_op, one_bit, data, axis, exclusive, ctx):
    """A scan whose result (and accumulator) is bool.  v0.19's topi scan IR added
    (multiplied) in the output dtype, and its bool was the 1-bit uint: ``+`` wrapped (a
    running parity), ``*`` was ``and``.  TVM 0.27 has no bool arithmetic (its build
    fails), so the scan runs on 0/1 in int64 and ``one_bit`` folds it back (x & 1 for
    the sum; a product of 0/1 is already 0/1)."""
    if dtype_of(data) != "bool":  # v0.19 cast the data to the output dtype first
        data = ctx.emit(relax.op.astype(data, "bool"))
    ints = ctx.emit(relax.op.astype(data, "int64"))
    scanned = ctx.emit(relax_op(ints, axis, "int64", exclusive))
    return relax.op.astype(one_bit(scanned), "bool")


register_converter("cumsum")(_scan(
    relax.op.cumsum, lambda x: relax.op.bitwise_and(x, relax.const(1, "int64"))))
register_converter("cumprod")(_scan(relax.op.cumprod, lambda x: x))


@register_converter("scatter_elements")
def _scatter_elements(inputs, attrs, ctx):
    data, indices, updates = inputs
    reduction = attrs.get("reduction", "update")
    if reduction not in ("update", "add", "mul", "mean", "min", "max"):
        raise ctx.unsupported_attr("reduction", reduction)
    axis = normalize_axis(attrs.get("axis", 0), ndim_of(data), ctx)
    dims = shape_of(data)
    if any(isinstance(d, int) and d == 0 for d in shape_of(indices)):
        return data  # no update: TVM's lowering divided by the empty extent
    _check_other_dims_within(data, indices, axis, ctx)
    check_index_values(indices, [dims[axis]], ctx, "indices", wraps=True)
    if len(dims) >= 3 and not all(isinstance(d, int) for d in shape_of(indices) + dims):
        return _flat_scatter_elements(data, indices, updates, axis, reduction, ctx)
    return relax.op.scatter_elements(data, indices, updates, axis, reduction)


def _flat_scatter_elements(data, indices, updates, axis, reduction, ctx):
    """scatter_elements on the flattened data, for >= 3-d tensors of dynamic shape.

    TVM's lowering of an n-d scatter_elements with symbolic dims repeats the whole
    index arithmetic inside every subscript: LLVM then takes minutes (28 s for 3-d,
    > 2 min for 4-d).  The same result comes from the element offsets
    ``sum_j coord_j * stride_j`` (``coord_axis`` = the index, made non-negative)
    and a 1-d scatter_elements.
    """
    data_dims, index_dims = shape_of(data), shape_of(indices)
    ndim = len(data_dims)
    index = ctx.emit(relax.op.astype(indices, "int64"))
    def scalar(dim):  # a 0-d int64 tensor of a (possibly symbolic) dim
        if isinstance(dim, int):
            return relax.const(dim, "int64")
        vector = ctx.emit(relax.op.shape_to_tensor(relax.ShapeExpr([dim])))
        return ctx.emit(relax.op.reshape(vector, []))

    axis_dim = scalar(data_dims[axis])
    index = ctx.emit(relax.op.where(relax.op.less(index, relax.const(0, "int64")),
                                    relax.op.add(index, axis_dim), index))
    offset = None
    stride = None
    for j in reversed(range(ndim)):
        if j == axis:
            coord = index
        else:
            ramp = relax.op.arange(0, index_dims[j], 1, "int64")
            coord = ctx.emit(relax.op.reshape(ramp, [index_dims[j] if k == j else 1
                                                     for k in range(ndim)]))
        term = coord if stride is None else relax.op.multiply(coord, stride)
        offset = ctx.emit(term if offset is None else relax.op.add(offset, term))
        step = scalar(data_dims[j])
        stride = ctx.emit(step if stride is None else relax.op.multiply(stride, step))
    offset = ctx.emit(relax.op.broadcast_to(offset, index_dims))
    flat = relax.op.scatter_elements(
        ctx.emit(relax.op.reshape(data, [-1])), ctx.emit(relax.op.reshape(offset, [-1])),
        ctx.emit(relax.op.reshape(updates, [-1])), 0, reduction)
    return relax.op.reshape(ctx.emit(flat), data_dims)


@register_converter("reverse_sequence")
def _reverse_sequence(inputs, attrs, ctx):
    batch_axis = int(attrs.get("batch_axis", 0))
    data_dims, lengths = shape_of(inputs[0]), shape_of(inputs[1])
    if -len(data_dims) <= batch_axis < len(data_dims) and lengths:
        batch, count = data_dims[batch_axis], lengths[0]
        if isinstance(batch, int) and isinstance(count, int) and batch != count:
            # Relay's ReverseSequenceRel message, verbatim (typo included): scripts match it
            raise ctx.error("For reverse_sequnece seq_lengths size should match with dimension "
                            f"of batch axis, but got dimension of batch_axis = {batch}, and "
                            f"seq_length size = {count}")
    return relax.op.reverse_sequence(inputs[0], inputs[1], int(attrs.get("seq_axis", 1)),
                                     int(attrs.get("batch_axis", 0)))


@register_converter("meshgrid")
def _meshgrid(inputs, attrs, ctx):
    # Relay's meshgrid takes 0-d tensors as length-1 vectors; Relax's only 1-d ones.
    grids = inputs[0]
    fields = list(grids.fields) if isinstance(grids, relax.Tuple) else None
    if fields is not None and any(ndim_of(f) == 0 for f in fields):
        grids = relax.Tuple([ctx.emit(relax.op.reshape(f, [1])) if ndim_of(f) == 0 else f
                             for f in fields])
    return relax.op.meshgrid(grids, attrs.get("indexing", "ij"))


# The dtypes of TVM's contrib sort kernels (src/runtime/contrib/sort/sort.cc, the same
# tables in v0.19, whose Relay strategies called them on the CPU): any other dtype failed
# when the model ran ("Unsupported input dtype"), so it is refused at import.
_SORT_DATA = ("float16", "float32", "float64", "int32", "int64")
_INDEX_DTYPES = ("int32", "int64", "float32", "float64")
_TOPK_DATA = ("float16", "float32", "float64", "int8", "uint8", "int32", "int64")


def _check_kernel_dtypes(ctx, kernel, data_dtype, data_dtypes, index_dtype=None,
                         index_dtypes=()):
    """Refuse a data (index) dtype the contrib ``kernel`` has no instance for."""
    if data_dtype not in data_dtypes:
        raise ctx.error(f"TVM's {kernel} kernel (as v0.19's) takes no {data_dtype} data, only "
                        f"{'/'.join(data_dtypes)}: the run would fail (cast the input first)")
    if index_dtype is not None and index_dtype not in index_dtypes:
        raise ctx.error(f"TVM's {kernel} kernel (as v0.19's) gives no {index_dtype} indices "
                        f"for {data_dtype} data, only {'/'.join(index_dtypes)}: the run "
                        "would fail")


@register_converter("sort")
def _sort(inputs, attrs, ctx):
    # the axis normalised as SortRel's kernel did, refused out of range (an axis below
    # -ndim read outside the shape array, garbage; one past it failed in the kernel)
    axis = normalize_axis(attrs.get("axis", -1), ndim_of(inputs[0]), ctx)
    _check_kernel_dtypes(ctx, "sort", dtype_of(inputs[0]), _SORT_DATA)
    return relax.op.sort(inputs[0], axis, descending=not bool(attrs.get("is_ascend", 1)))


@register_converter("argsort")
def _argsort(inputs, attrs, ctx):
    axis = normalize_axis(attrs.get("axis", -1), ndim_of(inputs[0]), ctx)
    dtype = attrs.get("dtype") or "int32"
    _check_kernel_dtypes(ctx, "argsort", dtype_of(inputs[0]), _SORT_DATA, dtype, _INDEX_DTYPES)
    return relax.op.argsort(inputs[0], axis, descending=not bool(attrs.get("is_ascend", 1)),
                            dtype=dtype)


@register_converter("topk")
def _topk(inputs, attrs, ctx):
    k = attrs.get("k", 1)
    if not isinstance(k, int):
        raise ctx.error("topk needs a constant k")
    if k < -1:
        # TopKRel took k < 1 as "all", but v0.19's kernel reserved k + 1 heap entries
        # before reading k: the run died in vector::reserve
        raise ctx.error(f"k={k}: TVM's topk kernel (as v0.19's) fails for k < -1 (k < 1 "
                        "takes every entry: use k=0 or k=-1)")
    axis = normalize_axis(attrs.get("axis", -1), ndim_of(inputs[0]), ctx)
    length = shape_of(inputs[0])[axis]
    if isinstance(length, int) and k > length:  # k < 1 takes all, as Relay's did
        raise ctx.error(f"k={k} is more than the {length} entries on axis {axis}: TVM "
                        "would read past them")
    if not isinstance(length, int) and k >= 1:
        # The result has k entries; the kernel writes min(k, length) of them (v0.19's
        # too), so a shorter run left the rest as whatever memory held.
        emit_run_check(ctx.bb, tvm.tirx.const(k, "int64") <= _dim(length), ctx.location,
                       ctx.op_name, f"k={k} is more than the {{}} entries on axis {axis} "
                       "of this run's input", _dim(length))
    data_dtype, dtype = dtype_of(inputs[0]), attrs.get("dtype") or "int32"
    ret_type = attrs.get("ret_type", "both")
    # the kernel reads the index dtype only when it writes indices; int8/uint8 data also
    # take indices of their own dtype
    index_dtypes = _INDEX_DTYPES + ((data_dtype,) if data_dtype in ("int8", "uint8") else ())
    _check_kernel_dtypes(ctx, "topk", data_dtype, _TOPK_DATA,
                         dtype if ret_type != "values" else None, index_dtypes)
    return relax.op.topk(inputs[0], int(k), axis, ret_type,
                         largest=not bool(attrs.get("is_ascend", False)), dtype=dtype)


@register_converter("one_hot")
def _one_hot(inputs, attrs, ctx):
    indices, on_value, off_value = inputs
    dtype = attrs.get("dtype") or dtype_of(on_value)
    depth, axis = int(attrs["depth"]), int(attrs.get("axis", -1))
    _check_one_hot(depth, axis, ndim_of(indices), ctx)
    if folded_value(on_value, ctx) is None or folded_value(off_value, ctx) is None:
        return _one_hot_of_run_time_values(indices, on_value, off_value, dtype, depth,
                                           axis, ctx)
    on = scalar_operand(on_value, ctx, "on_value")
    off = scalar_operand(off_value, ctx, "off_value")
    result = relax.op.one_hot(indices, relax.prim_value(on), relax.prim_value(off),
                              depth, axis)
    return relax.op.astype(result, dtype)


def _one_hot_of_run_time_values(indices, on_value, off_value, dtype: str, depth: int,
                                axis: int, ctx) -> relax.Expr:
    """``on_value`` / ``off_value`` known only at run time (model inputs): v0.19's
    topi::one_hot read them then, as 0-d tensors cast to ``dtype``.  Relax's one_hot
    takes constants, so it builds the mask and ``where`` picks the two values."""
    for name, value in (("on_value", on_value), ("off_value", off_value)):
        if ndim_of(value) != 0:
            raise ctx.error(f"{name} has shape {tuple(shape_of(value))}: one_hot takes a "
                            "0-d tensor (v0.19's topi::one_hot read it as a scalar)")
    mask = relax.op.one_hot(indices, relax.prim_value(True), relax.prim_value(False),
                            depth, axis)
    return relax.op.where(ctx.emit(mask), relax.op.astype(on_value, dtype),
                          relax.op.astype(off_value, dtype))


def _check_one_hot(depth: int, axis: int, ndim: int, ctx) -> None:
    """v0.19's OneHotRel: ``depth > 0`` (ICHECK_GT) and the new axis at ``axis`` of the
    ``ndim + 1``-d result, ``-1`` meaning last; any other negative axis (or one past
    ``ndim``) made it read past the indices' shape, an error."""
    if depth <= 0:
        raise ctx.error(f"depth={depth}: one_hot needs a depth > 0")
    if depth >= 2 ** 31:  # OneHotAttrs.depth was a C int (TVM's attribute would wrap)
        raise ctx.error(f"depth={depth}: one_hot takes a depth below 2^31")
    if not -1 <= axis <= ndim:
        raise ctx.error(f"axis={axis} is out of range for one_hot of {ndim}-d indices "
                        f"(-1 <= axis <= {ndim}; -1 is the last axis, no other negative "
                        "axis counts from the end)")


@register_converter("trilu")
def _trilu(inputs, attrs, ctx):
    data, k = inputs
    upper = bool(attrs.get("upper", True))
    value = folded_value(k, ctx)
    if value is not None and value.size == 1:
        return (relax.op.triu if upper else relax.op.tril)(data, int(value.reshape(()).item()))
    # k is a run-time scalar (Relay's trilu takes a tensor): keep where col - row >= k
    # (upper) or <= k (lower) on the last two axes.
    rows, cols = shape_of(data)[-2:]
    row = ctx.emit(relax.op.reshape(relax.op.arange(0, rows, 1, "int64"), [rows, 1]))
    col = ctx.emit(relax.op.reshape(relax.op.arange(0, cols, 1, "int64"), [1, cols]))
    diagonal = ctx.emit(relax.op.subtract(col, row))
    offset = ctx.emit(relax.op.astype(k, "int64"))
    keep = (relax.op.greater_equal if upper else relax.op.less_equal)(diagonal, offset)
    zero = relax.const(0, dtype_of(data))
    return relax.op.where(ctx.emit(keep), data, zero)


@register_converter("sparse_reshape")
def _sparse_reshape(inputs, attrs, ctx):
    """Relay's sparse_reshape: each index row is flattened with ``prev_shape``'s strides
    and unflattened with the strides of ``new_shape`` (its ``-1`` resolved from the
    element count); returns (new indices, resolved new shape) in the operands' dtypes."""
    indices, prev_shape, new_shape = inputs
    index_dtype, shape_dtype = dtype_of(indices), dtype_of(new_shape)

    def i64(x):
        return ctx.emit(relax.op.astype(x, "int64"))

    def strides(shape):  # suffix products: prod(shape[i + 1:])
        flipped = ctx.emit(relax.op.flip(shape, axis=0))
        return ctx.emit(relax.op.flip(relax.op.cumprod(flipped, axis=0, exclusive=True), axis=0))

    prev, new = i64(prev_shape), i64(new_shape)
    minus_one = relax.const(-1, "int64")
    one = relax.const(1, "int64")
    total = ctx.emit(relax.op.prod(prev, axis=[0]))
    is_unknown = ctx.emit(relax.op.equal(new, minus_one))
    known = ctx.emit(relax.op.prod(relax.op.where(is_unknown, one, new), axis=[0]))
    unknowns = relax.op.sum(relax.op.astype(is_unknown, "int64"))
    one_inferable = relax.op.logical_and(relax.op.equal(unknowns, one),
                                         relax.op.greater(known, relax.const(0, "int64")))
    emit_tensor_check(ctx, relax.op.logical_and(
        none_hold(relax.op.less(new, minus_one)),
        relax.op.logical_or(none_hold(is_unknown), one_inferable)),
        "the new shape may hold dims >= 0 and one -1, inferred from the other dims, which "
        "then must not hold a 0")
    emit_element_count_check(ctx, prev, None)  # shapes counted, never allocated
    emit_element_count_check(ctx, new, None)
    # where() computes both sides: known is 0 where no -1 asks for it (a 0 dim), so >= 1
    resolved = ctx.emit(relax.op.where(is_unknown, relax.op.floor_divide(
        total, relax.op.maximum(known, one)), new))
    emit_tensor_check(ctx, relax.op.equal(relax.op.prod(resolved), total),
                      "the new shape does not hold the dense shape's element count")
    prev_strides = strides(prev)
    columns = shape_of(indices)[1]
    if not isinstance(columns, int):  # one stride per index column, checked at run time
        prev_strides = ctx.bb.match_cast(prev_strides, relax.TensorType([columns], "int64"))
    flat = ctx.emit(relax.op.sum(relax.op.multiply(i64(indices), relax.op.expand_dims(
        prev_strides, 0)), axis=[1], keepdims=True))
    # column i = (flat % (stride_i * dim_i)) // stride_i, without the modulo on column 0
    # (an index beyond the shape keeps its overflow there, as Relay's compute did)
    # at least 1: an empty shape's 0 strides would stop an index's division with SIGFPE
    new_strides = ctx.emit(relax.op.maximum(strides(resolved), one))
    outer = ctx.emit(relax.op.maximum(relax.op.multiply(new_strides, resolved), one))
    first = ctx.emit(relax.op.equal(relax.op.arange(0, shape_of(resolved)[0], 1, "int64"),
                                    relax.const(0, "int64")))
    outer = ctx.emit(relax.op.where(first, relax.const(np.iinfo("int64").max, "int64"), outer))
    new_indices = ctx.emit(relax.op.astype(relax.op.floor_divide(
        relax.op.floor_mod(flat, relax.op.expand_dims(outer, 0)),
        relax.op.expand_dims(new_strides, 0)), index_dtype))
    prev_len, new_len = shape_of(prev_shape)[0], shape_of(new_shape)[0]
    if isinstance(prev_len, int) and prev_len == new_len:
        # Relay returns the indices untouched when the shape does not change
        equal = relax.op.astype(relax.op.equal(prev, resolved), "int32")
        same = ctx.emit(relax.op.equal(relax.op.min(equal), relax.const(1, "int32")))
        new_indices = ctx.emit(relax.op.where(same, indices, new_indices))
    return relax.Tuple([new_indices, ctx.emit(relax.op.astype(resolved, shape_dtype))])


@register_converter("unravel_index")
def _unravel_index(inputs, attrs, ctx):
    # out[i] = indices // stride_i % shape_i, stacked on a new first axis.
    indices, shape = inputs
    dtype = dtype_of(indices)
    dims = folded_value(shape, ctx)
    if dims is not None:
        values = [int(d) for d in dims.reshape(-1)]
        if any(d <= 0 for d in values):
            raise ctx.error(f"the shape {values} has a dim that is not positive: no index "
                            "unravels into it (and a 0 would divide by zero)")
        dim_exprs = [relax.const(d, dtype) for d in values]
        stride_exprs = [relax.const(int(np.prod(values[i + 1:], dtype=np.int64)), dtype)
                        for i in range(len(values))]
    else:  # a shape tensor known only at run time: its (static) length is enough
        rank = shape_of(shape)[0]
        if not isinstance(rank, int):
            raise ctx.error("unravel_index needs a shape operand of static length")
        shape = ctx.emit(relax.op.astype(shape, dtype))
        emit_tensor_check(ctx, none_hold(relax.op.less_equal(shape, relax.const(0, dtype))),
                          "the shape has a dim that is not positive in this run: no index "
                          "unravels into it (and a 0 would stop the process with SIGFPE)")
        dim_exprs = [relax.op.take(shape, relax.const(i, "int64"), axis=0) for i in range(rank)]
        stride_exprs = [relax.const(1, dtype)] * rank
        for i in range(rank - 2, -1, -1):
            stride_exprs[i] = relax.op.multiply(stride_exprs[i + 1], dim_exprs[i + 1])
    parts = []
    for dim, stride in zip(dim_exprs, stride_exprs):
        q = relax.op.floor_divide(indices, stride)
        parts.append(relax.op.floor_mod(q, dim))
    return relax.op.stack(relax.Tuple(parts), axis=0)


@register_converter("sparse_to_dense")
def _sparse_to_dense(inputs, attrs, ctx):
    """v0.19's topi::sparse_to_dense compares every output position with each index row:
    a row sets the positions whose first ``M`` coordinates (its length; a 0-d or 1-d
    ``sparse_indices`` has rows of 1) equal it, the later row winning, and a row equal
    to no position (an index outside ``output_shape``, a negative one) sets nothing.

    The same as a ``scatter_nd`` of the rows (slices of the output past ``M`` axes) into
    the output grown by one entry on each of the first ``M`` axes, every row outside
    the output sent to that extra corner, which is then sliced off."""
    indices, values, default = inputs
    out_shape = ints(attrs["output_shape"])
    dtype = dtype_of(values)
    idx_dims = shape_of(indices)
    if len(idx_dims) > 2:
        raise ctx.error(f"sparse_indices is {len(idx_dims)}-d: v0.19's sparse_to_dense "
                        "compares 0-d, 1-d or 2-d indices only")
    count = idx_dims[0] if idx_dims else 1
    width = idx_dims[1] if len(idx_dims) == 2 else 1
    if not isinstance(width, int) or not 1 <= width <= len(out_shape):
        raise ctx.error(f"sparse_indices rows have {width} columns for a {len(out_shape)}-d "
                        f"output: each row gives the first 1 to {len(out_shape)} "
                        "coordinates of the positions it sets")
    rows = ctx.emit(relax.op.astype(relax.op.reshape(indices, [count, width]), "int64"))
    limits = relax.const(np.array(out_shape[:width], "int64").reshape(1, width), "int64")
    outside = ctx.emit(relax.op.logical_or(relax.op.less(rows, relax.const(0, "int64")),
                                           relax.op.greater_equal(rows, limits)))
    stray = relax.op.greater(relax.op.sum(relax.op.astype(outside, "int64"), axis=[1],
                                          keepdims=True), relax.const(0, "int64"))
    rows = ctx.emit(relax.op.where(stray, limits, rows))  # the extra corner
    grown = [d + 1 if k < width else d for k, d in enumerate(out_shape)]
    base = relax.op.full(grown, relax.op.astype(default, dtype), dtype)
    updates = _one_value_per_row(values, count, ctx)
    if width < len(out_shape):  # each row's value fills its slice
        updates = relax.op.broadcast_to(
            relax.op.reshape(updates, [count] + [1] * (len(out_shape) - width)),
            [count] + out_shape[width:])
    scattered = ctx.emit(relax.op.scatter_nd(base, rows, ctx.emit(updates), "update"))
    return relax.op.strided_slice(scattered, list(range(width)), [0] * width,
                                  out_shape[:width])


@register_converter("fixed_point_multiply")
def _fixed_point_multiply(inputs, attrs, ctx):
    # x * multiplier * 2^(shift - 31), rounded half up: int64 multiply, add half, shift.
    data = inputs[0]
    multiplier, shift = int(attrs["multiplier"]), int(attrs["shift"])
    if multiplier == 1 << 30 and shift - 1 < 0 and dtype_of(data) == "int32":
        # v0.19's q_multiply_shift legalization took 0.5 * 2^shift as a power of two:
        # (x + 2^(e-1)) >> e in int32, the add wrapping near INT32_MAX (intrin_rule.cc).
        # (Its left shift, for shift > 1, is the general formula's low 32 bits.)
        exp = 1 - shift
        rounded = relax.op.add(data, relax.const(1 << (exp - 1), "int32")) if exp < 32 \
            else data
        return relax.op.right_shift(rounded, relax.const(min(exp, 31), "int32"))
    left, right = max(shift, 0), max(-shift, 0)
    total = 31 + right
    x = relax.op.astype(data, "int64")
    if left:
        x = relax.op.left_shift(x, relax.const(left, "int64"))
    x = relax.op.multiply(x, relax.const(multiplier, "int64"))
    x = relax.op.add(x, relax.const(1 << (total - 1), "int64"))
    x = relax.op.right_shift(x, relax.const(total, "int64"))
    return relax.op.astype(x, dtype_of(data))


@register_converter("mod", "trunc_mod")
def _trunc_mod(inputs, attrs, ctx):
    # Relay's mod truncates toward zero (C's %, fmod for floats).
    lhs, rhs = inputs
    check_integer_divisor(rhs, ctx, lhs)
    if dtype_of(lhs).startswith("float"):
        # relax.mod is TVM's truncmod, as Relay's was: LLVM's frem, exact.  The formula
        # x - trunc(x / y) * y rounds x / y first (5.3 mod 0.1 gave -1e-7 for 0.09999),
        # and TVM folds its "* 0" for a zero divisor (x mod 0 gave x for fmod's NaN).
        return relax.op.mod(lhs, rhs)
    if dtype_of(lhs).startswith("uint"):
        # no signs: truncation and floor agree (the signed fix-up's sign() of an unsigned
        # type would need the constant -1, which TVM cannot make)
        return relax.op.floor_mod(lhs, rhs)
    # floor_divide corrected toward zero where the signs differ and it is inexact.
    floor_q = relax.op.floor_divide(lhs, rhs)
    inexact = relax.op.not_equal(relax.op.multiply(floor_q, rhs), lhs)
    negative = relax.op.less(relax.op.multiply(relax.op.sign(lhs), relax.op.sign(rhs)),
                             relax.const(0, dtype_of(lhs)))
    fix = relax.op.astype(relax.op.logical_and(inexact, negative), dtype_of(lhs))
    quotient = relax.op.add(floor_q, fix)
    return relax.op.subtract(lhs, relax.op.multiply(quotient, rhs))


@register_converter("trunc_divide")
def _trunc_divide(inputs, attrs, ctx):
    lhs, rhs = inputs  # an integer divisor is checked by _trunc_mod, below
    if dtype_of(lhs).startswith("float"):
        return relax.op.trunc(relax.op.divide(lhs, rhs))
    # (lhs - trunc_mod) is an exact multiple of rhs: any division gives the quotient.
    return relax.op.floor_divide(relax.op.subtract(lhs, _trunc_mod(inputs, attrs, ctx)), rhs)


def _log_base(base: float):
    def convert(inputs, attrs, ctx):
        data = inputs[0]
        return relax.op.divide(relax.op.log(data),
                               relax.const(float(np.log(base)), dtype_of(data)))
    return convert


register_converter("log2")(_log_base(2.0))
register_converter("log10")(_log_base(10.0))


@register_converter("nn.fast_softmax")
def _fast_softmax(inputs, attrs, ctx):
    return relax.op.nn.softmax(inputs[0], int(attrs.get("axis", -1)))


@register_converter("ndarray_size")
def _ndarray_size(inputs, attrs, ctx):
    dims = shape_of(inputs[0])
    dtype = attrs.get("dtype") or "int32"
    if all(isinstance(d, int) for d in dims):
        return relax.const(np.array(int(np.prod(dims, dtype=np.int64)), dtype=dtype), dtype)
    count = tvm.tirx.const(1, "int64")
    for d in dims:
        count = count * d
    # the element count of a run-time shape, as a 0-d tensor
    counted = ctx.emit(relax.op.shape_to_tensor(relax.ShapeExpr([count])))
    return relax.op.astype(relax.op.reshape(counted, []), dtype)


@register_converter("slice_like")
def _slice_like(inputs, attrs, ctx):
    data, like = inputs
    dims, target = shape_of(data), shape_of(like)
    axes = optional_ints(attrs.get("axes"))
    if axes is not None and not axes:
        raise ctx.error("Axes cannot be empty.")
    axes = list(range(min(len(dims), len(target)))) if axes is None else \
        [normalize_axis(a, len(dims), ctx, "axes") for a in axes]
    checked = [_check_slice_like_axis(dims, target, axis, ctx) for axis in axes]
    # a run-time extent checked not to exceed the data: the slice is shape_like's extent,
    # not the min() Relax would infer (which keeps the result from templates; a
    # match_cast of that min() crashed TVM's build)
    return relax.op.strided_slice(data, axes, [0] * len(axes), [target[a] for a in axes],
                                  assume_inbound=any(checked))


def _check_slice_like_axis(dims, target, axis, ctx) -> bool:
    """v0.19's SliceLikeRel: the axis exists in ``shape_like`` and its extent there is at
    most the data's (``Assert(oshape <= dshape)``, its messages).  A run-time-sized
    (``?``) extent is checked when the model runs (the slice would have clamped to a
    smaller result than the shape Relay gave it): True when such a check was emitted."""
    if axis >= len(target):
        raise ctx.error(f"Axis {axis} exceeds dimension {len(target)} of target_shape.")
    want, have = target[axis], dims[axis]
    if isinstance(want, int) and isinstance(have, int):
        if want > have:
            raise ctx.error(f"End index of axis {axis} exceeds input shape: {want} vs {have}")
        return False
    if not isinstance(want, int) and want.same_as(have):
        return False
    emit_run_check(ctx.bb, _dim(want) <= _dim(have), ctx.location, ctx.op_name,
                   f"shape_like has {{}} entries on axis {axis}, the data {{}}: End index of "
                   f"axis {axis} exceeds input shape", _dim(want), _dim(have))
    return True


@register_converter("sequence_mask")
def _sequence_mask(inputs, attrs, ctx):
    # data[t, b, ...] (axis=0 is time) is replaced by mask_value where t >= valid_length[b].
    data, valid_length = inputs
    axis = int(attrs.get("axis", 0))
    dims = shape_of(data)
    ndim = len(dims)
    axis = normalize_axis(axis, ndim, ctx)
    batch_axis = 1 - axis
    steps = relax.op.arange(0, dims[axis], 1, dtype_of(valid_length))
    steps = relax.op.reshape(steps, [dims[axis] if i == axis else 1 for i in range(ndim)])
    lengths = relax.op.reshape(valid_length,
                               [dims[batch_axis] if i == batch_axis else 1 for i in range(ndim)])
    keep = relax.op.less(steps, lengths)
    mask_value = relax.const(float(attrs.get("mask_value", 0)), dtype_of(data))
    return relax.op.where(keep, data, mask_value)


@register_converter("strided_set")
def _strided_set(inputs, attrs, ctx):
    """v0.19's topi.strided_set: the result is ``data`` where ``within_index`` selects a
    position on every axis, and there ``value`` at ``make_idx``'s position.  The
    selection is a product of per-axis lists (constant here), so it is a ``take`` of
    ``value`` along each axis scattered into ``data`` with ``scatter_nd``."""
    data, value, begin, end, strides = inputs
    consts = [const_value(x) for x in (begin, end, strides)]
    if any(c is None for c in consts):
        raise ctx.error("strided_set needs constant begin/end/strides")
    begin_v, end_v, strides_v = ([int(v) for v in c.reshape(-1)] for c in consts)
    dims = shape_of(data)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.error("strided_set needs a static shape")
    if ndim_of(value) != len(dims):
        raise ctx.error(f"the value is {ndim_of(value)}-d, the data {len(dims)}-d: v0.19's "
                        "strided_set read the value at one index per data axis")
    selected, sources = [], []
    for axis, dim in enumerate(dims):
        cells, source = _strided_set_axis(begin_v, end_v, strides_v, axis, dim, ctx)
        extent = shape_of(value)[axis]
        if source and isinstance(extent, int) and max(source) >= extent:
            raise ctx.error(f"strided_set reads v outside it: axis {axis} selects "
                            f"{len(source)} positions reading v up to index {max(source)}, "
                            f"v has {extent}")
        if source and not isinstance(extent, int):
            emit_run_check(ctx.bb, tvm.tirx.const(max(source), "int64") < extent,
                           ctx.location, ctx.op_name,
                           f"strided_set reads v up to index {max(source)} on axis {axis}, "
                           "v has {} entries there in this run", extent)
        selected.append(cells)
        sources.append(source)
    if any(not cells for cells in selected):
        return data  # nothing selected: the data unchanged
    for axis, source in enumerate(sources):
        extent = shape_of(value)[axis]
        if not (isinstance(extent, int) and source == list(range(extent))):
            value = ctx.emit(relax.op.take(value, relax.const(np.array(source, "int64"), "int64"),
                                           axis=axis))
    grid = np.stack(np.meshgrid(*selected, indexing="ij"), axis=-1).astype("int64")
    return relax.op.scatter_nd(data, relax.const(grid, "int64"), value, "update")


def _strided_set_axis(begin, end, strides, axis, dim, ctx):
    """The positions of axis ``axis`` (extent ``dim``) that v0.19's strided_set set, and
    the value's index each reads: topi.strided_set's defaults (stride 1 past the strides
    given; begin 0 or ``dim``, end ``dim + 1`` or ``-(dim + 1)`` past theirs; a negative
    begin/end counted from the end once), then topi/utils.py's ``within_index`` and
    ``make_idx`` (floor ``%`` and ``//``, begin clamped to ``dim - 1`` for the index)."""
    s = strides[axis] if axis < len(strides) else 1
    if s == 0:
        raise ctx.error(f"strided_set with stride 0 on axis {axis}: v0.19's position test "
                        "divided by it")
    b = begin[axis] if axis < len(begin) else (0 if s > 0 else dim)
    e = end[axis] if axis < len(end) else (dim + 1 if s > 0 else -(dim + 1))
    b, e = (b + dim if b < 0 else b), (e + dim if e < 0 else e)
    step = abs(s)
    clamped = dim - 1 if dim < b else b
    cells, source = [], []
    for i in range(dim):
        if s < 0:
            inside = e < i <= b and ((i - e) + e % step + 1) % step == 0
        else:
            inside = b <= i < e and (i - b) % s == 0
        if inside:
            cells.append(i)
            source.append((clamped - i) // step if s < 0 else (i - clamped) // s)
    return cells, source


@register_converter("unique")
def _unique(inputs, attrs, ctx):
    """Relay's unique: (values, first indices, inverse indices, num_unique[, counts]).

    Relay kept every output at the input's length ``n`` (only the first
    ``num_unique`` entries meaningful), with int32 indices; Relax's unique
    returns exact-length outputs, which are padded to ``n`` here.
    """
    import tvm

    data = inputs[0]
    if ndim_of(data) != 1:
        raise ctx.error("unique takes a 1-d tensor")
    (n,) = shape_of(data)
    if not isinstance(n, int):
        # the padded outputs of a dynamic length crash TVM's build: refuse by name
        raise ctx.error("unique of a tensor of dynamic length is not supported")
    # v0.19's topi.unique sorted with the contrib argsort kernel, which had no instance
    # for other dtypes (as for sort/argsort here).
    _check_kernel_dtypes(ctx, "argsort (in unique)", dtype_of(data), _SORT_DATA)
    if dtype_of(data).startswith("float"):
        # v0.19 marked a new value where sorted neighbours differ (NE): every NaN was a
        # value of its own. Relax's unique (numpy's) merges them: refused when it matters.
        emit_tensor_check(ctx, none_hold(relax.op.isnan(data)),
                          "an input with NaN: v0.19 counted every NaN as a distinct "
                          "value, this build would merge them")
    counts = bool(attrs.get("return_counts", False))
    found = ctx.emit(relax.op.unique(data, sorted=bool(attrs.get("sorted", True)),
                                     return_index=True, return_inverse=True,
                                     return_counts=counts, axis=0))
    values = ctx.emit(relax.TupleGetItem(found, 0))
    size = tvm.tirx.Var("num_unique", "int64")
    ctx.bb.match_cast(ctx.emit(relax.op.shape_of(values)), relax.ShapeType([size]))

    def exact(index, length, dtype):  # a field of unknown shape, its length made known
        field = ctx.emit(relax.TupleGetItem(found, index))
        source = dtype_of(data) if index == 0 else "int64"
        field = ctx.bb.match_cast(field, relax.TensorType([length], source))
        return field if source == dtype else ctx.emit(relax.op.astype(field, dtype))

    def padded(index, dtype, fill_value=0):
        field = exact(index, size, dtype)
        fill = relax.op.full([n], relax.const(fill_value, dtype), dtype)
        joined = ctx.emit(relax.op.concat([field, fill], axis=0))
        head = ctx.emit(relax.op.strided_slice(joined, [0], [0], [n]))
        return ctx.bb.match_cast(head, relax.TensorType([n], dtype))

    # v0.19's _calc_first_occurence padded the first indices with n (its docstring: "The
    # end of the tensor is padded with the length of the input data"); the values' and
    # counts' tails were undefined there
    outputs = [padded(0, dtype_of(data)), padded(1, "int32", n),
               exact(2, n, "int32"),
               ctx.emit(relax.op.astype(relax.op.shape_to_tensor(relax.ShapeExpr([size])),
                                        "int32"))]
    if counts:
        outputs.append(padded(3, "int32"))
    return relax.Tuple(outputs)


# -------------------------------------------------------------------------- searchsorted
def _check_searchsorted(seq, values, dtype: str, ctx) -> list:
    """v0.19's SearchSortedRel (values of rank 1 or more; an N-d sequence of the values'
    rank and outer dims), what its ``topi.searchsorted`` needed (an integer ``dtype``:
    its binary search shifts indices of that type, and must hold the sequence's length),
    and a run check for outer dims known only at run time (v0.19 read past the
    sequence).  Returns the operands with those dims made one."""
    seq_dims, value_dims = shape_of(seq), shape_of(values)
    if not value_dims:
        raise ctx.error("the values must have rank 1 or more (v0.19's SearchSortedRel)")
    if not seq_dims:
        raise ctx.error("the sorted sequence must have rank 1 or more")
    if not is_integer_dtype(dtype):
        raise ctx.error(f"dtype={dtype}: the indices come from an integer binary search "
                        "(v0.19's topi shifts them), the dtype must be an integer type")
    length, largest = seq_dims[-1], int(np.iinfo(dtype).max)
    if isinstance(length, int) and length > largest:
        raise ctx.error(f"dtype={dtype} holds indices up to {largest}, the sequence has "
                        f"{length} entries (v0.19's search would wrap)")
    if not isinstance(length, int) and largest < 2**63 - 1:
        emit_run_check(ctx.bb, tvm.tirx.LE(length, tvm.tirx.const(largest, "int64")),
                       ctx.location, ctx.op_name, f"the sequence has {{}} entries in this "
                       f"run, dtype={dtype} holds indices up to {largest}", length)
    if len(seq_dims) == 1:
        return [seq, values]
    if len(seq_dims) != len(value_dims):
        raise ctx.error(f"ranks of sorted_sequence ({len(seq_dims)}) and values "
                        f"({len(value_dims)}) must be the same when sorted_sequence is "
                        "multi-dimensional")
    for axis, (a, b) in enumerate(zip(seq_dims[:-1], value_dims[:-1])):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ctx.error(f"sorted_sequence {tuple(seq_dims)} and values "
                            f"{tuple(value_dims)} do not have the same shape along outer "
                            f"axes (axis {axis})")
    return unify_dims(ctx.bb, [seq, values], [[(0, a), (1, a)] for a in
                                              range(len(seq_dims) - 1)],
                      ctx.location, ctx.op_name, "each row of values is searched in the "
                      "sequence's row of the same index")


@register_converter("searchsorted")
def _searchsorted(inputs, attrs, ctx):
    """TOPI's ``searchsorted`` (``call_te``): TVM 0.27's binary search is v0.19's, so an
    unsorted row gives the same index v0.19 gave."""
    dtype = str(attrs.get("dtype") or "int32")
    seq, values = _check_searchsorted(inputs[0], inputs[1], dtype, ctx)
    return ctx.bb.call_te(topi.searchsorted, seq, values, bool(attrs.get("right", False)),
                          dtype)


# ------------------------------------------------------------------------------ argwhere
@register_converter("argwhere")
def _argwhere(inputs, attrs, ctx):
    """v0.19's ``argwhere``: the indices of the entries ``!= 0`` in row-major order, an
    ``(?, rank)`` int32 tensor, for ranks 1 to 5 (its shape functions); Relax's
    ``nonzero`` gives them transposed, ``(rank, ?)`` int64, in the same order."""
    data = inputs[0]
    rank = ndim_of(data)
    if not 1 <= rank <= 5:
        raise ctx.error(f"takes a tensor of rank 1 to 5 (v0.19's shape functions), got "
                        f"rank {rank}")
    if dtype_of(data) != "bool":
        data = ctx.emit(relax.op.not_equal(data, relax.const(0, dtype_of(data))))
    # nonzero's count is known only when it runs: a fresh dim, as Relay's ``?``
    count = tvm.tirx.Var("argwhere_count", "int64")
    indices = ctx.bb.match_cast(ctx.emit(relax.op.nonzero(data)),
                                relax.TensorType([rank, count], "int64"))
    return relax.op.astype(relax.op.permute_dims(indices, [1, 0]), "int32")
