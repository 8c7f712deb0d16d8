"""Shape and data-movement Relay ops, and annotations dropped at import.

Forms: ``transpose`` -> ``permute_dims``; ``nn.batch_flatten`` ->
``reshape(x, [N, prod(rest)])``; ``concatenate`` -> ``concat``; ``split`` ->
``split`` (a tuple, projected with ``TupleGetItem``); Relay's ``reshape``
special values are resolved to an explicit shape at import (``contrib_reverse_reshape``'s
read right to left); ``einsum`` -> ``einsum``; ``invert_permutation`` -> ``argsort``;
``matrix_set_diag`` -> TOPI's compute (``call_te``).
"""
from __future__ import annotations

from functools import reduce
from operator import mul

import numpy as np
import tvm
from tvm import relax, topi
from tvm.sym.analyzer import Analyzer

from ..registry import register_converter
from ..run_checks import (BROADCAST_REASON, emit_element_count_check,
                          emit_run_check, emit_tensor_check, equal, known_dims, none_hold,
                          unify_dims)
from ._utils import (
    check_index_values, check_mirror_range, check_reads_elements, checked_broadcast_to,
    dtype_of, fill_in_dtype,
    folded_value, index_tuple_length, ints, is_integer_dtype, ndim_of, normalize_axis,
    optional_ints, run_time_dims, scalar_operand, shape_of, static_shape,
)
from ...relay import ast
from ...relay.op import reshape_like_shape, split_problem

_INT64_MAX = 2**63 - 1


def relay_reshape_shape(in_shape: list, newshape: list[int], ctx,
                        allowzero: bool = False) -> list:
    """Resolve Relay's special ``newshape`` values against ``in_shape``.

    0 copies a dim (with ``allowzero``, ONNX's, it is a dim of 0, as v0.19's
    InferNewShape took it), -1 infers one, -2 copies all remaining dims, -3 merges two
    consecutive dims, -4 splits one dim into the next two values (one may be -1).
    A -1 is inferred as v0.19's InferNewShape did when the dims it reads are known: the
    input dims no 0/-2/-3/-4 took, over the result dims none of them gave — which keeps
    the input's dims through a zero-size tensor ((0, 4) to [0, -1] is (0, 4)), where a
    division of the element count could not.
    """
    out: list = []
    used_in: set[int] = set()   # input dims a 0, -2, -3 or -4 carried over
    used_out: set[int] = set()  # result dims they gave
    src = 0
    i = 0

    def source_dims(count: int, special: int) -> None:
        # what v0.19's InferNewShape read past the input's rank (its ICHECKs)
        if src + count > len(in_shape):
            raise ctx.error(f"newshape={tuple(newshape)}: {special} reads input dim "
                            f"{src + count - 1}, past the input's {len(in_shape)} dims")

    while i < len(newshape):
        value = newshape[i]
        if value in (0, -3, -4) and not (value == 0 and allowzero):
            source_dims(2 if value == -3 else 1, value)
        if value > 0 or (value == 0 and allowzero):
            out.append(value)
            src += 1
        elif value == 0:
            used_in.add(src)
            used_out.add(len(out))
            out.append(in_shape[src])
            src += 1
        elif value == -1:
            if -1 in out:  # v0.19's ICHECK "One and only one dim can be inferred"
                raise ctx.error(f"newshape={tuple(newshape)}: only one dim can be inferred "
                                "(-1)")
            out.append(-1)
            src += 1
        elif value == -2:
            used_in.update(range(src, len(in_shape)))
            used_out.update(range(len(out), len(out) + len(in_shape) - src))
            out.extend(in_shape[src:])
            src = len(in_shape)
        elif value == -3:
            used_in.update((src, src + 1))
            used_out.add(len(out))
            out.append(in_shape[src] * in_shape[src + 1])
            src += 2
        elif value == -4:
            if i + 2 >= len(newshape):
                raise ctx.error(f"newshape={tuple(newshape)}: -4 needs the two dims it "
                                "splits into after it")
            first, second = newshape[i + 1], newshape[i + 2]
            dim = in_shape[src]
            if first == -1:
                first = dim // second
            if second == -1:
                second = dim // first
            if isinstance(dim, int) and isinstance(first, int) and isinstance(second, int) \
                    and first * second != dim:
                raise ctx.error(f"newshape={tuple(newshape)}: -4 splits input dim {src} "
                                f"({dim}) into {first} x {second}")
            used_in.add(src)
            used_out.update((len(out), len(out) + 1))
            out.extend([first, second])
            src += 1
            i += 2
        else:
            raise ctx.unsupported_attr("newshape", tuple(newshape))
        i += 1
    if -1 in out:
        at = out.index(-1)
        inferred = _inferred_dim(in_shape, out, used_in, used_out | {at})
        if inferred is not None:
            out[at] = inferred
    return out


def _inferred_dim(in_shape: list, out: list, used_in: set[int],
                  used_out: set[int]) -> int | None:
    """v0.19's InferNewShape value for a -1: the product of the input dims not in
    ``used_in`` floor-divided by the result dims not in ``used_out`` (nor the -1's);
    None when one of those is known at run time only, or 0 (Relax infers it from the
    count, checked by :func:`_check_count_at_run_time`).  A count it does not divide then
    fails ReshapeRel's comparison of the counts, as in v0.19."""
    rest_in = [d for k, d in enumerate(in_shape) if k not in used_in]
    rest_out = [d for k, d in enumerate(out) if k not in used_out]
    if not all(isinstance(d, int) for d in rest_in + rest_out) or 0 in rest_out:
        return None
    return reduce(mul, rest_in, 1) // reduce(mul, rest_out, 1)


@register_converter("reshape")
def _reshape(inputs, attrs, ctx):
    newshape = ints(attrs.get("newshape", attrs.get("shape")))
    allowzero = bool(attrs.get("allowzero", 0))
    target = relay_reshape_shape(shape_of(inputs[0]), newshape, ctx, allowzero)
    if allowzero and 0 in newshape:
        return _reshape_to_empty(inputs[0], newshape, target, ctx)
    _check_count_at_run_time(inputs[0], target, ctx)
    return relax.op.reshape(inputs[0], target)


def _check_count_at_run_time(data: relax.Expr, target: list, ctx) -> None:
    """A reshape whose element counts are equal only for some run-time dims (a ``?``
    input to a static shape, ``reshape_like`` of a ``?`` operand) checks them when the
    model runs: a view of another count read past the input, or dropped its tail
    (v0.19's ReshapeRel unified them; its VM refused such a view)."""
    dims = list(shape_of(data))
    if all(isinstance(d, int) for d in dims) and all(isinstance(d, int) for d in target):
        return  # counted at import
    one = tvm.tirx.const(1, "int64")
    count_in = reduce(mul, dims, one)
    if any(isinstance(d, int) and d == -1 for d in target):
        # Relax infers that dim by a floor division of the count: a count the other
        # dims do not divide would drop its tail (v0.19's VM floored too, silently)
        known = reduce(mul, [d for d in target if not (isinstance(d, int) and d == -1)], one)
        holds = Analyzer().simplify(tvm.tirx.EQ(tvm.tirx.floormod(count_in, known),
                                                 tvm.tirx.const(0, "int64")))
        message = "the input of {} elements does not divide into the new shape's other " \
                  "dims, of {} elements"
        count_out = known
    else:
        count_out = reduce(mul, target, one)
        holds = Analyzer().simplify(tvm.tirx.EQ(count_in, count_out))
        message = "the input of {} elements does not fit the new shape of {}"
    if isinstance(holds, tvm.tirx.IntImm) and bool(holds.value):
        return
    emit_run_check(ctx.bb, holds, ctx.location, ctx.op_name, message, count_in, count_out)


def _reshape_to_empty(data, newshape: list[int], target: list, ctx) -> relax.Expr:
    """``reshape(allowzero=1)`` to a shape with a literal 0 dim (ONNX's ``Reshape``): an
    empty result, so the input must have no elements either (v0.19's ReshapeRel compared
    the counts).  Relax's reshape always copies a dim for a 0, so the empty result is made
    as zeros of the shape."""
    if -1 in target:  # v0.19's InferNewShape divided the rest by the 0 dim
        raise ctx.error(f"newshape={tuple(newshape)} with allowzero: -1 cannot be inferred "
                        "beside a dim of 0")
    dims = shape_of(data)
    count = 1
    for d in dims:
        count = count * d if isinstance(d, int) and isinstance(count, int) else None
        if count is None:
            break
    if count is None and not any(isinstance(d, int) and d == 0 for d in dims):
        raise ctx.error(f"newshape={tuple(newshape)} with allowzero needs an input known to "
                        f"be empty, got shape {tuple(dims)}")
    if count:
        raise ctx.error(f"newshape={tuple(newshape)} with allowzero has no elements, the "
                        f"input {tuple(dims)} has {count}")
    return relax.op.zeros(relax.ShapeExpr([int(d) for d in target]), dtype_of(data))


def run_time_reshape(inputs, attrs, ctx):
    """``reshape`` to a shape tensor read when the model runs (Relay's ``dyn.reshape``
    whose shape is not known at import, see :mod:`.dynamic`):
    its values > 0 are dims, 0 copies the input's dim at that index, one -1 takes what
    is left.  The shape is computed from those rules on the host, checked (only those
    special values, at most one -1, the element count kept) and cast to fresh dims."""
    data, newshape = inputs
    shape = shape_of(newshape)
    if len(shape) != 1 or not isinstance(shape[0], int):
        raise ctx.error(f"the new shape must be a 1-D tensor of known length, got shape "
                        f"{shape}")
    count, rank = shape[0], ndim_of(data)
    values = relax.op.astype(newshape, "int64")
    dims = relax.op.shape_to_tensor(relax.op.shape_of(data))
    if count <= rank:
        aligned = relax.op.strided_slice(dims, [0], [0], [count])
    else:
        aligned = relax.op.concat([dims, relax.op.ones([count - rank], "int64")])
    copied = values if attrs.get("allowzero", 0) else \
        relax.op.where(relax.op.equal(values, _i64(0)), aligned, values)
    copied = ctx.emit(copied)
    inferred_at = relax.op.equal(copied, _i64(-1))
    known = relax.op.prod(relax.op.where(inferred_at, _i64(1), copied))
    total = ctx.emit(relax.op.prod(dims))
    rest = relax.op.floor_divide(total, relax.op.maximum(known, _i64(1)))
    target = ctx.emit(relax.op.where(inferred_at, rest, copied))
    emit_tensor_check(ctx, relax.op.logical_and(
        relax.op.greater_equal(relax.op.min(values), _i64(-1)),
        relax.op.less_equal(relax.op.sum(relax.op.astype(inferred_at, "int64")), _i64(1))),
        "the new shape may hold dims, 0 (copy) and one -1 (infer) only")
    emit_element_count_check(ctx, target, dtype_of(data))  # else the count below may wrap
    emit_tensor_check(ctx, relax.op.equal(relax.op.prod(target), total),
                      "the new shape does not hold the input's element count")
    fresh = run_time_dims(target, [f"reshape_d{i}" for i in range(count)], ctx)
    return relax.op.reshape(data, relax.ShapeExpr(fresh))


def _i64(value: int) -> relax.Expr:
    return relax.const(value, "int64")


@register_converter("reshape_like")
def _reshape_like(inputs, attrs, ctx):
    target = reshape_like_shape(shape_of(inputs[0]), shape_of(inputs[1]), attrs)
    _check_count_at_run_time(inputs[0], list(target), ctx)
    return relax.op.reshape(inputs[0], target)



@register_converter("nn.batch_flatten")
def _batch_flatten(inputs, attrs, ctx):
    dims = shape_of(inputs[0])
    if not dims:  # v0.19's BatchFlattenRel wanted a batch axis
        raise ctx.error("the input is 0-d: batch_flatten needs a batch axis")
    return relax.op.reshape(inputs[0], [dims[0], reduce(mul, dims[1:], 1)])


@register_converter("transpose")
def _transpose(inputs, attrs, ctx):
    # axes=None reverses the dims, like numpy.
    return relax.op.permute_dims(inputs[0], optional_ints(attrs.get("axes")))


@register_converter("squeeze")
def _squeeze(inputs, attrs, ctx):
    axes = optional_ints(attrs.get("axis"))
    dims = shape_of(inputs[0])
    if axes:  # v0.19 marked a repeated axis once (SqueezeRel), Relax refuses it
        axes = sorted({normalize_axis(axis, len(dims), ctx) for axis in axes})
    for axis in axes or ():
        if isinstance(dims[axis], int):
            if dims[axis] != 1:  # Relay rejects it, Relax not
                raise ctx.error(f"axis {axis} has size {dims[axis]}, not 1: it cannot be "
                                "squeezed")
            continue
        # a run-time axis: Relax drops it whatever its length (only the first row was
        # left); v0.19's shape func asserted "Removed dimension must have size 1"
        emit_run_check(ctx.bb, equal(dims[axis], 1), ctx.location, ctx.op_name,
                       f"axis {axis} has {{}} entries in this run, not 1: it cannot be "
                       "squeezed", dims[axis])
    return relax.op.squeeze(inputs[0], axes)


@register_converter("expand_dims")
def _expand_dims(inputs, attrs, ctx):
    count = int(attrs.get("num_newaxis", 1))
    axis = int(attrs["axis"])  # required
    ndim = ndim_of(inputs[0])
    # v0.19's ExpandDimsRel
    if count < 0:
        raise ctx.error(f"num_newaxis={count} must not be negative")
    if not -ndim - 1 <= axis <= ndim:
        raise ctx.error(f"axis={axis} is out of range for a {ndim}-d tensor "
                        f"([{-ndim - 1}, {ndim}])")
    if count == 0:
        return inputs[0]
    if axis < 0:  # Relay counts a negative axis against the input rank + 1
        axis += ndim + 1
    return relax.op.expand_dims(inputs[0], list(range(axis, axis + count)))


@register_converter("concatenate")
def _concatenate(inputs, attrs, ctx):
    axis = int(attrs.get("axis", 0))
    return relax.op.concat(_equal_other_dims(inputs[0], axis, ctx), axis=axis)


@register_converter("stack")
def _stack(inputs, attrs, ctx):
    return relax.op.stack(_equal_other_dims(inputs[0], None, ctx),
                          axis=int(attrs.get("axis", 0)))


def _equal_other_dims(parts: relax.Expr, axis, ctx) -> relax.Expr:
    """The tuple of tensors ``parts`` with every dim but ``axis`` (all for ``None``) one
    across the tensors: run-time-sized ones are checked equal when the model runs
    (Relay's check then; Relax needs the result shape when it builds, and two ``?``
    dims would leave it unknown, which TVM's VM cannot allocate)."""
    fields = list(parts.fields) if isinstance(parts, relax.Tuple) else None
    ty = parts.ty
    if fields is None:
        if not isinstance(ty, relax.TupleType):
            return parts
        fields = [ctx.emit(relax.TupleGetItem(parts, i)) for i in range(len(ty.fields))]
    ranks = {len(d) for d in (known_dims(f) for f in fields) if d is not None}
    if len(ranks) != 1:
        return parts
    rank = ranks.pop()
    joined = None if axis is None else axis % rank
    groups = [[(k, a) for k in range(len(fields))] for a in range(rank) if a != joined]
    # Relay's ConcatenateRel typed a mixed static / `?` axis as the static dim only when
    # the joined axis is itself run-time-sized ([(?, 3), (?, ?)] -> (?, 3), but
    # [(1, 3), (1, ?)] -> (2, ?)); the run-time check holds either way.
    dynamic_join = joined is not None and any(
        not isinstance(known_dims(f)[joined], tvm.tirx.IntImm) for f in fields)
    unified = unify_dims(ctx.bb, fields, groups, ctx.location, ctx.op_name,
                         "the tensors joined must agree on every other axis",
                         prefer_static=joined is None or dynamic_join)
    if all(u.same_as(f) for u, f in zip(unified, fields)):
        return parts
    return relax.Tuple(unified)


def _check_split(sections, dim, ctx) -> None:
    """Relay's SplitRel (:func:`~bmlib_relax.relay.op.split_problem`), which the import
    must apply itself (Relax splits unevenly, and a count past the dim made that many
    empty parts: a million sections took minutes)."""
    problem = split_problem(sections, dim)
    if problem is not None:
        raise ctx.error(problem)


def _check_split_at_run_time(sections, dim, axis: int, ctx) -> None:
    """A split of a run-time axis: Relax splits whatever length comes, so sections that
    do not divide it gave uneven parts and indices past it empty or short ones, under
    the types Relay gave them.  v0.19's shape func asserted the sections divide it; the
    indices must lie within it (the last part then has ``dim - last`` >= 0 entries)."""
    if isinstance(dim, int):
        return
    if isinstance(sections, int):
        if sections <= 1:
            return
        holds = tvm.tirx.EQ(tvm.tirx.floormod(dim, tvm.tirx.const(sections, str(dim.ty))),
                            tvm.tirx.const(0, str(dim.ty)))
        message = f"axis {axis} has {{}} entries in this run: {sections} sections must " \
                  "divide it"
    else:
        if not sections:
            return
        holds = tvm.tirx.GE(dim, tvm.tirx.const(sections[-1], str(dim.ty)))
        message = f"axis {axis} has {{}} entries in this run: the split indices " \
                  f"{list(sections)} must lie within it"
    emit_run_check(ctx.bb, holds, ctx.location, ctx.op_name, message, dim)


@register_converter("split")
def _split(inputs, attrs, ctx):
    value = attrs["indices_or_sections"]  # required
    if isinstance(value, ast.MetaRef):
        raise ctx.error(f"indices_or_sections=meta[{value.kind}][{value.index}] has no value: "
                        "the text has no #[metadata] section")
    # An int is a number of equal sections, a list the split indices.
    sections = ints(value) if isinstance(value, (list, tuple)) else int(value)
    axis = normalize_axis(int(attrs.get("axis", 0)), ndim_of(inputs[0]), ctx)
    _check_split(sections, shape_of(inputs[0])[axis], ctx)
    _check_split_at_run_time(sections, shape_of(inputs[0])[axis], axis, ctx)
    if sections in (1, []):
        # One part: Relay still returns a 1-tuple, while Relax's split would
        # return the tensor itself.
        return relax.Tuple([inputs[0]])
    return relax.op.split(inputs[0], sections, axis=axis)


@register_converter("strided_slice")
def _strided_slice(inputs, attrs, ctx):
    data = inputs[0]
    dims = shape_of(data)
    mode = attrs.get("slice_mode", "end")
    if mode not in ("end", "size"):
        raise ctx.unsupported_attr("slice_mode", mode)
    axes, begin, end, strides = _relay_slice_lists(
        ints(attrs["begin"]), ints(attrs["end"]),  # required
        optional_ints(attrs.get("strides")), optional_ints(attrs.get("axes")), len(dims), mode,
        ctx)
    if mode == "size":
        end, strides = _size_mode_ends(begin, end), [1] * len(axes)
    begin, end = _clamp_far_bounds(begin, end, strides)
    _check_slice_ranges(dims, axes, begin, end, strides, ctx)
    first: dict[int, tuple[int, int, int]] = {}
    for i, axis in enumerate(axes):
        if not isinstance(dims[axis], int):
            cut, begin[i], end[i], strides[i] = _symbolic_slice_steps(
                begin[i], end[i], strides[i], axis, dims[axis], ctx)
            if cut is not None:
                first[axis] = cut
    if first:
        data = ctx.emit(relax.op.strided_slice(
            data, list(first), [c[0] for c in first.values()],
            [c[1] for c in first.values()], [c[2] for c in first.values()]))
        # The cut's length is an expression of the axis's (``min(d, 2**63-1) -
        # min(1, d)``); a var of its own keeps the slice after it on bmlib, whose
        # PrimFuncs bind symbolic dims from whole dims of their inputs.
        cut_dims = [tvm.tirx.Var(f"{dims[a]}_cut", "int64") if a in first else d
                    for a, d in enumerate(data.ty.shape.values)]
        data = ctx.bb.match_cast(data, relax.TensorType(cut_dims, dtype_of(data)))
    steps, strides = _reversed_steps_to_start(dims, axes, end, strides)
    if not steps:
        return relax.op.strided_slice(data, axes, begin, end, strides)
    data = ctx.emit(relax.op.strided_slice(data, axes, begin, end, strides))
    # the reversed axes' extents as fresh run-time dims: TVM's sizing of the slice to the
    # start is an expression over INT64_MIN that bmlib's int32 indexing would refuse
    reversed_dims = [tvm.tirx.Var(f"{dims[a]}_reversed", "int64") if a in steps else d
                     for a, d in enumerate(data.ty.shape.values)]
    data = ctx.bb.match_cast(data, relax.TensorType(reversed_dims, dtype_of(data)))
    return relax.op.strided_slice(data, list(steps), [0] * len(steps),
                                  [_INT64_MAX] * len(steps), list(steps.values()))


def _clamp_far_bounds(begin: list[int], end: list[int], strides: list[int]) -> tuple:
    """Bounds past +-2**62 against their stride's direction, as CanonicalizeIndex
    clamped them whatever the extent: a forward slice from / to before the start runs
    from / to 0, a reversed slice from before the start or to past the end is empty
    (``x[0:0:-1]``).  TVM 0.27 sized them over a run-time extent as ``extent -
    INT64_MIN``, which overflows ("Literal value exceeds range of int64").  The bounds
    in the stride's direction (a forward end or a reversed begin past the far side) are
    the "to the end" sentinels and stay."""
    begin, end = list(begin), list(end)
    for i, stride in enumerate(strides):
        if stride > 0:
            begin[i] = 0 if begin[i] <= -_FAR else begin[i]
            end[i] = 0 if end[i] <= -_FAR else end[i]
        elif begin[i] <= -_FAR or end[i] >= _FAR:  # from before the start / to past the end
            begin[i], end[i] = 0, 0
    return begin, end


def _reversed_steps_to_start(dims, axes, end, strides) -> tuple[dict[int, int], list[int]]:
    """``({axis: step}, strides)`` for the run-time-sized axes sliced backwards to their
    start with a stride below -1, whose stride becomes -1: ``x[b::-s]`` is
    ``x[b::-1][::s]``.  TVM 0.27 sizes ``x[b:INT64_MIN:-s]`` of a symbolic axis as empty
    (its ceil-division overflows int64), while a stride of -1, and a forward slice to
    INT64_MAX, it sizes right."""
    steps, strides = {}, list(strides)
    for i, axis in enumerate(axes):
        if not isinstance(dims[axis], int) and strides[i] < -1 and end[i] <= -_FAR:
            steps[axis], strides[i] = -strides[i], -1
    return steps, strides


def _relay_slice_lists(begin: list[int], end: list[int], strides: list[int] | None,
                       axes: list[int] | None, rank: int, mode: str, ctx):
    """``(axes, begin, end, strides)``, one entry per sliced axis, as v0.19's
    StridedSliceRel (src/relay/op/tensor/transform.cc) and topi::strided_slice filled
    them.  With ``axes`` the four lists must be equally long.  Without, the slice
    covers every axis and each list is filled up to the rank (none may be longer:
    topi's StridedSliceOutputShape checked all four lengths equal): a stride with 1,
    then a begin with 0 on a positive stride and the last index otherwise (Relay's
    INT64_MAX; -1 here outside size mode, see below), an end with 0 on a negative
    stride (a reversed axis stops before index 0) and INT64_MAX otherwise.  Each axis
    reads its own stride: one stride is not repeated.

    A missing ``strides`` is a stride of 1 on every axis (Relay's builder passed
    ``strides or [1]``, the same without ``axes``).  Axes no list reaches are
    whole-axis, unit-stride slices and are left out of the result.
    """
    if axes is not None:
        if not axes:
            raise ctx.error("axes=[] slices no axis: Relay refused the empty slice "
                            "(topi's strided_slice read begin[0])")
        strides = strides or [1] * len(axes)
        if not len(axes) == len(begin) == len(end) == len(strides):
            raise ctx.error(f"axes {axes}, begin, end and strides must be equally long "
                            f"({len(axes)}, {len(begin)}, {len(end)}, {len(strides)}), as "
                            "Relay's StridedSliceRel required")
        return [normalize_axis(a, rank, ctx, "axes") for a in axes], begin, end, strides
    strides = strides or [1]
    if rank == 0:
        raise ctx.error("a 0-d tensor has no axis to slice: Relay refused the slice")
    for name, values in (("begin", begin), ("end", end), ("strides", strides)):
        if len(values) > rank:
            raise ctx.error(f"{name} has {len(values)} entries, more than the axes of a "
                            f"{rank}-d tensor: Relay refused the slice (without axes=, "
                            "begin, end and strides give at most one entry per axis)")
    used = max(len(begin), len(end), len(strides))
    strides = strides + [1] * (used - len(strides))
    # Relay's INT64_MAX begin on a stride <= 0 is the last index, as -1 is on every extent
    # (CanonicalizeIndex clamps both to extent - 1); -1 keeps run-time-sized axes and
    # bmlib's int32 index literals in range.  Size mode adds sizes to it: keep Relay's.
    last = _INT64_MAX if mode == "size" else -1
    begin = begin + [0 if s > 0 else last for s in strides[len(begin):]]
    end = end + [0 if s < 0 else _INT64_MAX for s in strides[len(end):]]
    return list(range(used)), begin, end, strides


def _size_mode_ends(begin: list[int], sizes: list[int]) -> list[int]:
    """The ends of a ``slice_mode="size"`` slice, as v0.19's ConvertToVec
    (topi/detail/strided_slice.h): ``begin + size`` in int64 arithmetic (a sum past
    INT64_MAX wraps negative, and the slice then runs against its stride: refused as
    Relay did), INT64_MAX (to the end) for a negative size."""
    return [_INT64_MAX if size < 0 else (b + size + 2**63) % 2**64 - 2**63
            for b, size in zip(begin, sizes)]


def _check_slice_ranges(dims, axes, begin, end, strides, ctx) -> None:
    """What TVM's strided_slice output shape refused, at import and named: a zero stride,
    and a range running against its stride once both bounds are put inside a static
    axis (negative ones counted from its end): ``begin=[3], end=[0]`` on a positive
    stride selects nothing, which Relay's build stopped on (``Input [Begin=3, End=0] is
    invalid``); ``begin == end`` is an empty axis, which it allowed."""
    for i, axis in enumerate(axes):
        stride = strides[i]
        if stride == 0:
            raise ctx.error(f"strides[{i}] is 0: a slice needs a non-zero stride")
        extent = dims[axis]
        if not isinstance(extent, int):
            continue
        low, high = (-1, extent - 1) if stride < 0 else (0, extent)

        def inside(index: int) -> int:
            return min(max(index + extent if index < 0 else index, low), high)

        first, last = inside(begin[i]), inside(end[i])
        if (last < first) if stride > 0 else (last > first):
            raise ctx.error(f"begin {begin[i]} and end {end[i]} run against stride {stride} on "
                            f"axis {axis} (extent {extent}): Relay refused such a slice")


_FAR = 2**62  # beyond it a bound is a "to the end" sentinel, whatever the extent


def _symbolic_slice_steps(begin: int, end: int, stride: int, axis: int, extent, ctx):
    """``x[begin:end:stride]`` on a symbolic axis as slices whose extent TVM sizes
    without going negative: ``(cut, begin, end, stride)``, ``cut`` an optional
    slice to take first.

    TVM 0.27 sizes a slice of a symbolic axis ``d`` as ``clamp(end) - clamp(begin)``
    (over the stride) without flooring it at 0.  When one bound counts from the
    start and the other from the end (``x[1:-1]``), which comes first depends on
    ``d``: at a run where the slice is empty the extent is negative and the
    allocation dies with std::bad_alloc.  Bounds on the same side are ordered
    already (or the slice is empty for every ``d``: then ``0:0``); mixed ones are
    cut in two: ``x[b:-e]`` is ``x[b:][:-e]``, ``x[-b:e:-s]`` is ``x[e+1:][-b::-s]``.
    The other mixed pair (``x[-b:e]``, ``x[b:-e:-s]``) has no such form: the model
    checks at run time that it is not empty and names the op if it is.

    A reversed slice from a begin past 2**62 starts at the last index, as from -1 on
    every extent (CanonicalizeIndex clamps both): TVM 0.27 sized the former negative.
    """
    if stride < 0 and begin >= _FAR:
        begin = -1
    from_end = begin < 0, end < 0
    if stride > 0:
        if from_end[0] == from_end[1]:
            return (None, 0, 0, 1) if end <= begin else (None, begin, end, stride)
        if end >= _FAR or begin <= -_FAR:
            return None, begin, end, stride  # the slice ends at the axis's end
        if not from_end[0]:  # x[b:-e]
            return (begin, _INT64_MAX, 1), 0, end, stride
        nonempty = extent + begin <= end  # x[-b:e]
    else:
        if from_end[0] == from_end[1]:
            return (None, 0, 0, 1) if end >= begin else (None, begin, end, stride)
        if end <= -_FAR or begin >= _FAR:
            return None, begin, end, stride  # the slice ends at the axis's start
        if from_end[0]:  # x[-b:e:-s]
            return (end + 1, _INT64_MAX, 1), begin, -_INT64_MAX - 1, stride
        nonempty = extent + end <= begin  # x[b:-e:-s]
    emit_run_check(
        ctx.bb, nonempty, ctx.location, ctx.op_name,
        f"begin={begin}, end={end}, strides={stride} on axis {axis} selects nothing from "
        "its {} entries, and an empty slice of an axis whose length is only known at run "
        "time cannot be sized (TVM would size it negative); give the axis a fixed size "
        "(compile(..., input_shapes=...) / --input-shapes) or inputs where the slice is "
        "not empty", extent)
    return None, begin, end, stride


@register_converter("take")
def _take(inputs, attrs, ctx):
    data, indices = inputs
    mode = attrs.get("mode", "clip")  # Relay's default clips out-of-range indices
    axis = attrs.get("axis")
    dims, index_dims = shape_of(data), shape_of(indices)
    batch_dims = int(attrs.get("batch_dims", 0))
    if batch_dims != 0:
        return _take_batched(data, indices, axis, batch_dims, mode, ctx)
    if axis is None:
        check_reads_elements(data, None, index_dims, ctx, "takes")
    else:
        at = normalize_axis(int(axis), len(dims), ctx)
        check_reads_elements(data, [at], dims[:at] + index_dims + dims[at + 1:], ctx, "takes")
    if mode == "fast":  # unchecked in TVM's lowering: out of range reads outside
        check_index_values(indices, [reduce(mul, dims, 1) if axis is None else dims[at]], ctx,
                           "indices")
    if axis is None:  # Relay takes from the flattened input
        data = relax.op.reshape(data, [-1])
        axis = 0
    return relax.op.take(data, indices, axis=int(axis), mode=mode)


def _take_batched(data, indices, axis, batch_dims: int, mode: str, ctx) -> relax.Expr:
    """``take`` with ``batch_dims``, as v0.19's TakeRel and topi::take defined it: the
    first ``batch_dims`` axes of data and indices pair up, and each batch takes along
    ``axis`` with its own indices (out: ``data[:axis] + indices[batch_dims:] +
    data[axis + 1:]``).  Built as a ``gather_nd`` over ``axis`` moved next to the
    batch, its result moved back; ``clip`` / ``wrap`` map the indices first."""
    dims, index_dims = shape_of(data), shape_of(indices)
    if axis is None:
        raise ctx.error(f"batch_dims={batch_dims} needs an axis: v0.19's take flattened the "
                        "data without one")
    at = normalize_axis(int(axis), len(dims), ctx)
    batch = batch_dims + len(index_dims) if batch_dims < 0 else batch_dims
    if not 0 <= batch <= min(at, len(index_dims)):
        raise ctx.error(f"batch_dims={batch_dims} must lie within the indices' {len(index_dims)} "
                        f"dims and not past axis {at} (v0.19's TakeRel)")
    for k in range(batch):
        if isinstance(dims[k], int) and isinstance(index_dims[k], int) and \
                dims[k] != index_dims[k]:
            raise ctx.error(f"the data has {dims[k]} entries on batch axis {k}, the indices "
                            f"{index_dims[k]}: batch axes pair up")
    check_reads_elements(data, [at], dims[:at] + index_dims[batch:] + dims[at + 1:], ctx,
                         "takes")
    length = dims[at]
    if mode != "fast" and not isinstance(length, int):
        raise ctx.error(f"batch_dims with mode={mode!r} over axis {at} of a run-time size "
                        "is not supported; give the axis a static size")
    index = relax.op.astype(indices, "int64")
    if mode == "clip":
        index = relax.op.clip(index, relax.prim_value(tvm.tirx.const(0, "int64")),
                              relax.prim_value(tvm.tirx.const(length - 1, "int64")))
    elif mode == "wrap":
        index = relax.op.floor_mod(index, relax.const(length, "int64"))
    else:  # fast: unchecked in TVM's lowering
        check_index_values(indices, [length], ctx, "indices")
    rank, index_rank = len(dims), len(index_dims) - batch
    moved = list(range(batch)) + [at] + list(range(batch, at)) + list(range(at + 1, rank))
    gathered = ctx.emit(relax.op.gather_nd(relax.op.permute_dims(data, moved),
                                           relax.op.expand_dims(index, -1), batch))
    between = at - batch  # data axes between the batch and ``axis``
    order = list(range(batch)) + \
        list(range(batch + index_rank, batch + index_rank + between)) + \
        list(range(batch, batch + index_rank)) + \
        list(range(batch + index_rank + between, batch + index_rank + rank - 1 - batch))
    return relax.op.permute_dims(gathered, order)


@register_converter("tile")
def _tile(inputs, attrs, ctx):
    reps = ints(attrs["reps"])  # required
    if any(r <= 0 for r in reps):  # v0.19's TileRel
        raise ctx.error(f"reps={reps}: every repetition must be positive")
    return relax.op.tile(inputs[0], reps)


@register_converter("repeat")
def _repeat(inputs, attrs, ctx):
    repeats = int(attrs["repeats"])
    if repeats < 1:  # v0.19's RepeatRel
        raise ctx.error(f"repeats={repeats} must be at least 1")
    return relax.op.repeat(inputs[0], repeats, axis=int(attrs["axis"]))


@register_converter("reverse")
def _reverse(inputs, attrs, ctx):
    return relax.op.flip(inputs[0], axis=int(attrs["axis"]))  # required


@register_converter("nn.pad")
def _pad(inputs, attrs, ctx):
    # Relay's second operand is the pad value; Relax wants it as a number.
    modes = {"constant": "constant", "edge": "replicate", "reflect": "reflect"}
    mode = attrs.get("pad_mode", "constant")
    if mode not in modes:
        raise ctx.unsupported_attr("pad_mode", mode)
    width = ints(attrs["pad_width"])
    if mode != "constant":  # edge and reflect pads copy elements of the padded axes
        pairs = list(zip(width[::2], width[1::2]))
        padded = [d + before + after if isinstance(d, int) else d
                  for d, (before, after) in zip(shape_of(inputs[0]), pairs)]
        check_reads_elements(inputs[0], [i for i, pair in enumerate(pairs) if any(pair)],
                             padded, ctx, f"a pad_mode={mode} pad")
        if mode == "reflect":
            check_mirror_range(inputs[0], pairs, True, "a pad_mode=reflect pad", ctx)
    if len(inputs) > 1 and folded_value(inputs[1], ctx) is None and mode == "constant":
        # A pad value known only at run time: pad with zeros, then select it where a
        # padded mask of ones is zero.
        data, value = inputs
        padded = relax.op.nn.pad(data, width, "constant", 0.0)
        inside = relax.op.nn.pad(relax.op.ones_like(data), width, "constant", 0.0)
        return relax.op.where(relax.op.astype(inside, "bool"), padded,
                              relax.op.astype(value, dtype_of(data)))
    # edge and reflect pads ignore the pad value (v0.19's topi pad reads it for constant only)
    pad_value = scalar_operand(inputs[1], ctx, "the pad value") \
        if len(inputs) > 1 and mode == "constant" else 0.0
    return relax.op.nn.pad(inputs[0], width, modes[mode],
                           fill_in_dtype(pad_value, dtype_of(inputs[0])).item())


@register_converter("broadcast_to")
def _broadcast_to(inputs, attrs, ctx):
    return checked_broadcast_to(inputs[0], ints(attrs["shape"]), ctx)  # required


@register_converter("broadcast_to_like")
def _broadcast_to_like(inputs, attrs, ctx):
    target = _like_target(shape_of(inputs[0]), shape_of(inputs[1]))
    return checked_broadcast_to(inputs[0], target, ctx)


def _like_target(dims: list, like: list) -> list:
    """The shape ``broadcast_to_like`` gives: v0.19's BroadCastToLikeRel unified the
    ``like`` type with the broadcast of both, where a static dim other than 1 against a
    run-time one wins (ConcreteBroadcast) — the data itself, never read past its end."""
    offset = len(like) - len(dims)
    if offset < 0:
        return list(like)
    target = list(like)
    for axis, dim in enumerate(dims):
        if isinstance(dim, int) and dim != 1 and not isinstance(like[offset + axis], int):
            target[offset + axis] = dim
    return target


@register_converter("collapse_sum_like")
def _collapse_sum_like(inputs, attrs, ctx):
    _check_collapse(shape_of(inputs[0]), shape_of(inputs[1]), ctx)
    return relax.op.collapse_sum_like(inputs[0], inputs[1])


@register_converter("collapse_sum_to")
def _collapse_sum_to(inputs, attrs, ctx):
    shape = ints(attrs["shape"])  # required
    _check_collapse(shape_of(inputs[0]), shape, ctx)
    return relax.op.collapse_sum_to(inputs[0], shape)


def _check_collapse(dims: list, target: list, ctx) -> None:
    """v0.19's CollapseSumLikeRel / CollapseSumToRel: the data must be the broadcast of
    itself and the target — a target of no higher rank whose dims are 1 or the data's
    (right-aligned); checked here where both are known, as Relax's own check is a raw
    error."""
    if len(target) > len(dims):
        raise ctx.error(f"the target shape {tuple(target)} has more dims than the data "
                        f"{tuple(dims)}: a collapse sum cannot add dims")
    offset = len(dims) - len(target)
    for axis, want in enumerate(target):
        have = dims[offset + axis]
        if isinstance(want, int) and isinstance(have, int) and want not in (1, have):
            raise ctx.error(f"the target shape {tuple(target)} does not broadcast to the "
                            f"data {tuple(dims)} (axis {offset + axis}: {want} against "
                            f"{have})")


@register_converter("scatter_nd")
def _scatter_nd(inputs, attrs, ctx):
    # Relay's indices are (M, Y...) with the index tuple first; Relax's (ONNX's)
    # put it last.
    data, indices, updates = inputs
    mode = attrs.get("mode", "update")
    reductions = {"update": "update", "add": "add", "mul": "mul", "min": "min", "max": "max"}
    if mode not in reductions:
        raise ctx.unsupported_attr("mode", mode)
    index_tuple_length(data, indices, "ScatterND", "M must be less than or equal to N", ctx)
    if any(isinstance(d, int) and d == 0 for d in shape_of(indices)[1:]):
        return data  # no update: TVM's lowering divided by the empty extent
    ndim = ndim_of(indices)
    if isinstance(shape_of(indices)[0], int):
        check_index_values(indices, shape_of(data)[:shape_of(indices)[0]], ctx, "indices")
    indices = relax.op.permute_dims(indices, list(range(1, ndim)) + [0])
    return relax.op.scatter_nd(data, indices, updates, reductions[mode])


@register_converter("on_device", "device_copy")
def _annotation(inputs, attrs, ctx):
    # Placement annotations have no meaning for a single-target CPU build.
    return inputs[0]


@register_converter("shape_of")
def _shape_of(inputs, attrs, ctx):
    """``shape_of(x, dtype)``: a constant when the shape is static, else the run-time
    shape (``shape_to_tensor(shape_of(x))``, int64) cast to ``dtype``."""
    dtype = str(attrs.get("dtype") or "int32")
    dims = shape_of(inputs[0])
    if all(isinstance(d, int) for d in dims):
        return relax.const(np.array(dims, dtype=dtype), dtype)
    shape = ctx.emit(relax.op.shape_of(inputs[0]))
    tensor = ctx.emit(relax.op.shape_to_tensor(shape))
    return tensor if dtype == "int64" else relax.op.astype(tensor, dtype)


# ------------------------------------------------------------------------------- einsum
#: The ellipsis in a parsed subscript (v0.19's ``EinsumEquation::kEllipsis``, ``'\0'``:
#: below every letter, so it sorts first).
_ELLIPSIS = "\0"


def parse_einsum(equation: str, ctx) -> tuple[list[list[str]], list[str]]:
    """(input subscripts, output subscript) of an einsum equation, as v0.19's
    ``topi::EinsumEquation::FromString`` read it: spaces ignored, at most one ``->``
    (a ``,`` after it still starts an input), one ``...`` per subscript, ASCII letters
    as labels; without an arrow the output is every label used once, in character
    order, after the ellipsis if any input has one."""
    inputs: list[list[str]] = []
    current: list[str] = []
    arrow = ellipsis = False
    i = 0
    while i < len(equation):
        char = equation[i]
        if char == "-":
            if arrow:
                raise ctx.error(f"equation {equation!r}: it can only have one arrow")
            if equation[i + 1:i + 2] != ">":
                raise ctx.error(f"equation {equation!r}: invalid arrow (a '-' without '>')")
            arrow = True
            i += 1
        if char in "-,":
            inputs.append(current)
            current, ellipsis = [], False
        elif char == ".":
            if ellipsis:
                raise ctx.error(f"equation {equation!r}: an ellipsis can only appear once in "
                                "each subscript")
            if equation[i:i + 3] != "...":
                raise ctx.error(f"equation {equation!r}: invalid ellipsis (not '...')")
            current.append(_ELLIPSIS)
            ellipsis = True
            i += 2
        elif char != " ":
            if not (char.isascii() and char.isalpha()):
                raise ctx.error(f"equation {equation!r}: invalid character {char!r} (labels "
                                "are letters)")
            current.append(char)
        i += 1
    if arrow:
        return inputs, current
    inputs.append(current)
    counts: dict[str, int] = {}
    for subscript in inputs:
        for label in subscript:
            counts[label] = counts.get(label, 0) + 1
    return inputs, [label for label in sorted(counts)
                    if label == _ELLIPSIS or counts[label] == 1]


def _einsum_operands(data: relax.Expr, ctx) -> list[relax.Expr]:
    """The tensors of einsum's tuple operand (a tuple expression or a tuple value)."""
    if isinstance(data, relax.Tuple):
        return list(data.fields)
    if not isinstance(data.ty, relax.TupleType):
        raise ctx.error(f"einsum takes a tuple of tensors, got {data.ty}")
    return [ctx.emit(relax.TupleGetItem(data, i)) for i in range(len(data.ty.fields))]


def _einsum_groups(inputs: list[list[str]], operands: list[relax.Expr], ctx) -> list:
    """The (operand, axis) groups einsum broadcasts together, as v0.19's
    ``EinsumBuilder::InferShape``: every use of a label, and the ellipsis' dims
    right-aligned.  A subscript that does not cover its operand's dims, and two static
    extents that are neither equal nor 1 (its ``Cannot broadcast extents``), are
    refused."""
    labels: dict[str, list] = {}
    ellipsis: dict[int, list] = {}  # position from the right -> uses
    for k, (subscript, operand) in enumerate(zip(inputs, operands)):
        rank, count = ndim_of(operand), sum(label != _ELLIPSIS for label in subscript)
        if count > rank or (count < rank and _ELLIPSIS not in subscript):
            shown = "".join(subscript).replace(_ELLIPSIS, "...")
            raise ctx.error(f"the subscript {shown!r} of operand {k} has {count} "
                            f"label{'s' if count != 1 else ''} for its {rank} dims")
        axis = 0
        for label in subscript:
            if label == _ELLIPSIS:
                covered = rank - count
                for j in range(covered):
                    ellipsis.setdefault(covered - j, []).append((k, axis + j))
                axis += covered
            else:
                labels.setdefault(label, []).append((k, axis))
                axis += 1
    groups = list(labels.items()) + [(f"... dim -{r}", uses) for r, uses in ellipsis.items()]
    for name, uses in groups:
        static = {shape_of(operands[k])[a] for k, a in uses}
        static = {d for d in static if isinstance(d, int) and d != 1}
        if len(static) > 1:
            raise ctx.error(f"label {name!r} has the extents {sorted(static)}: they cannot "
                            "be broadcast (each must equal the others or be 1)")
    return [uses for _, uses in groups]


@register_converter("einsum")
def _einsum(inputs, attrs, ctx):
    """``relax.einsum``: TVM 0.27 lowers it with the same ``topi::einsum`` as v0.19
    (ellipses, repeated and broadcast labels, implicit output).  What v0.19's EinsumRel
    and ``InferShape`` refused is refused here by name; a run-time dim is checked to
    equal the other uses of its label when the model runs (a run-time 1 is not
    broadcast, as for every broadcasting op)."""
    equation = str(attrs["equation"])
    operands = _einsum_operands(inputs[0], ctx)
    if not operands:
        raise ctx.error("einsum needs at least one operand (the tuple is empty)")
    subscripts, output = parse_einsum(equation, ctx)
    if len(subscripts) != len(operands):
        raise ctx.error(f"the equation {equation!r} has subscripts for {len(subscripts)} "
                        f"operand{'s' if len(subscripts) != 1 else ''}, got "
                        f"{len(operands)} operands")
    dtypes = [dtype_of(x) for x in operands]
    if len(set(dtypes)) > 1:
        raise ctx.error(f"operand dtypes {', '.join(dtypes)}: einsum requires all tensors "
                        "to have the same dtype")
    used = {label for subscript in subscripts for label in subscript}
    for label in output:
        if label != _ELLIPSIS and label not in used:
            raise ctx.error(f"the output label {label!r} is in no input subscript of "
                            f"{equation!r}")
    groups = _einsum_groups(subscripts, operands, ctx)
    operands = unify_dims(ctx.bb, operands, groups, ctx.location, ctx.op_name,
                          BROADCAST_REASON, broadcast=True)
    return relax.op.einsum(operands, explicit_einsum(subscripts, output, operands))


def explicit_einsum(inputs: list[list[str]], output: list[str],
                    operands: list[relax.Expr]) -> str:
    """The parsed equation in explicit form, for ``relax.einsum``.  An ellipsis summed
    over (absent from the output) is spelt as letters no subscript uses, one per dim
    counted from the right (broadcast as v0.19 broadcast the ellipsis): TVM 0.27's
    ``topi::einsum`` builds that reduction with an int32 index over the int64 extents of
    Relax shapes, which its ``IterVar`` check refuses (v0.19's shapes were int32)."""
    spell = {_ELLIPSIS: "..."}
    if _ELLIPSIS not in output and any(_ELLIPSIS in sub for sub in inputs):
        free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                if all(c not in sub for sub in inputs) and c not in output]
        covered = [ndim_of(x) - (len(sub) - 1) for sub, x in zip(inputs, operands)
                   if _ELLIPSIS in sub]
        letters = free[:max(covered)][::-1]  # letters[-r]: the r-th dim from the right
        texts = []
        for sub, x in zip(inputs, operands):
            count = ndim_of(x) - (len(sub) - 1)
            dims = "".join(letters[len(letters) - count:]) if count else ""
            texts.append("".join(dims if label == _ELLIPSIS else label for label in sub))
        return ",".join(texts) + "->" + "".join(output)
    return ",".join("".join(spell.get(c, c) for c in sub) for sub in inputs) + "->" + \
        "".join(spell.get(c, c) for c in output)


# -------------------------------------------------------------------- invert_permutation
@register_converter("invert_permutation")
def _invert_permutation(inputs, attrs, ctx):
    """v0.19's ``topi.invert_permutation`` wrote ``result[data[i]] = i`` (a 1-D integer
    tensor, result of its dtype): for a permutation that is ``argsort(data)``.  A value
    out of range wrote outside the result and a repeated one left entries unwritten, so
    anything but a permutation of ``0..n-1`` is refused (at import for a constant, else
    when the model runs)."""
    data = inputs[0]
    dtype = dtype_of(data)
    if ndim_of(data) != 1:
        raise ctx.error(f"takes a 1-D tensor (v0.19's compute indexes its result by the "
                        f"values), got shape {tuple(shape_of(data))}")
    if not is_integer_dtype(dtype):
        raise ctx.error(f"takes integer values (v0.19's compute indexes its result by "
                        f"them), got {dtype}")
    count = shape_of(data)[0]
    value = folded_value(data, ctx)
    if value is not None:
        if not np.array_equal(np.sort(value.astype(np.int64)), np.arange(count)):
            raise ctx.error(f"the constant {value.tolist()} is not a permutation of "
                            f"0..{count - 1}")
    else:
        expected = relax.op.arange(relax.prim_value(count) if not isinstance(count, int)
                                   else count, dtype="int64")
        sorted_values = relax.op.sort(relax.op.astype(data, "int64"))
        emit_tensor_check(ctx, none_hold(relax.op.not_equal(sorted_values, expected)),
                          "the data must be a permutation of 0..n-1 (each value once) in "
                          "every run; this run's is not (v0.19 wrote outside its result or "
                          "left entries unset)")
    # TVM's sort kernels take and give 32- and 64-bit integers only
    wide = data if dtype == "int64" else ctx.emit(relax.op.astype(data, "int64"))
    if dtype in ("int32", "int64"):
        return relax.op.argsort(wide, dtype=dtype)
    return relax.op.astype(ctx.emit(relax.op.argsort(wide, dtype="int64")), dtype)


# ----------------------------------------------------------------------- matrix_set_diag
def matrix_set_diag_attrs(attrs) -> tuple[int, int, bool, bool]:
    """(k1, k2, super_diag_right_align, sub_diag_right_align): v0.19's
    ``MatrixSetDiagAttrs`` (the builder resolves ``k``/``align`` into them, as v0.19's
    Python ``matrix_set_diag`` did)."""
    return (int(attrs.get("k1", 0)), int(attrs.get("k2", 0)),
            bool(attrs.get("super_diag_right_align", True)),
            bool(attrs.get("sub_diag_right_align", False)))


def _longest_set_diagonal(rows: int, cols: int, k1: int, k2: int) -> tuple[int, int]:
    """(diagonals, entries) v0.19's compute reads of the diagonal tensor: the diagonals
    ``k1..k2`` that meet a ``rows x cols`` matrix reach index ``k2 - k`` of the band
    axis, and the longest (the one nearest the main diagonal) is as long as the last
    axis must be.  (0, 0) when none meets it."""
    low, high = max(k1, 1 - rows), min(k2, cols - 1)
    if rows == 0 or cols == 0 or low > high:
        return 0, 0
    if low > 0:
        longest = min(rows, cols - low)
    elif high < 0:
        longest = min(cols, rows + high)
    else:
        longest = min(rows, cols)
    return k2 - low + 1, longest


def _check_matrix_set_diag(data_dims, diag_dims, k1, k2, ctx) -> None:
    """What v0.19 refused, and what made it read outside the diagonal tensor.  Its
    MatrixSetDiagRel stated the shapes with ``reporter->Assert``/``AssertEQ``, whose
    results its TypeReporter ignored: only ``k1 <= k2`` (an ICHECK) and the ranks its
    compute indexes by held; a short diagonal was read past its end."""
    if k2 < k1:
        raise ctx.error(f"k1={k1} must not exceed k2={k2}")
    if len(data_dims) < 2:
        raise ctx.error(f"takes a matrix or a batch of them, got shape {tuple(data_dims)}")
    band = k1 != k2
    rank = len(data_dims) - (0 if band else 1)
    if len(diag_dims) != rank:
        what = f"a band k1={k1}..k2={k2}" if band else "a single diagonal"
        raise ctx.error(f"{what} of a {len(data_dims)}-d input takes a {rank}-d diagonal "
                        f"tensor, got shape {tuple(diag_dims)}")
    rows, cols = data_dims[-2:]
    diagonals, longest = _longest_set_diagonal(rows, cols, k1, k2)
    if longest == 0 or any(d == 0 for d in data_dims[:-2]):
        return  # no entry is set: nothing is read
    for axis, (have, want) in enumerate(zip(diag_dims, data_dims[:-2])):
        if have < want:
            raise ctx.error(f"the diagonal has {have} entries on batch axis {axis}, the "
                            f"input {want}: v0.19 read past the diagonal")
    if band and diag_dims[-2] < diagonals:
        raise ctx.error(f"k1={k1}, k2={k2} set {diagonals} diagonals of a {rows}x{cols} "
                        f"matrix, the diagonal tensor holds {diag_dims[-2]}: v0.19 read "
                        "past it")
    if diag_dims[-1] < longest:
        raise ctx.error(f"the longest diagonal set has {longest} entries, the diagonal "
                        f"tensor {diag_dims[-1]}: v0.19 read past it")


@register_converter("matrix_set_diag")
def _matrix_set_diag(inputs, attrs, ctx):
    """TOPI's ``matrix_set_diag`` (``call_te``): TVM 0.27's compute is v0.19's."""
    data, diagonal = inputs
    k1, k2, super_right, sub_right = matrix_set_diag_attrs(attrs)
    data_dims = static_shape(data, ctx)
    diag_dims = static_shape(diagonal, ctx, "the diagonal")
    _check_matrix_set_diag(data_dims, diag_dims, k1, k2, ctx)
    if dtype_of(diagonal) != dtype_of(data):
        raise ctx.error(f"the diagonal is {dtype_of(diagonal)}, the input {dtype_of(data)}: "
                        "they must have one dtype")
    align = f"{'RIGHT' if super_right else 'LEFT'}_{'RIGHT' if sub_right else 'LEFT'}"
    return ctx.bb.call_te(topi.matrix_set_diag, data, diagonal, (k1, k2), align)


# ---------------------------------------------------------------- contrib_reverse_reshape
def reverse_reshape_shape(in_shape: list, newshape: list[int], allowzero: bool, ctx) -> list:
    """v0.19's ``InferNewShape(..., reverse=true)`` and ReverseReshapeRel: Relay's
    ``reshape`` special values read right to left (both shapes reversed, the result
    reversed back).  Its quirks are kept: ``-1`` is inferred from the input dims no
    0/-2/-3/-4 consumed, divided by the other output dims (floor division), and placed
    at its index in ``newshape``; a static result must keep the element count."""
    ishape, new = in_shape[::-1], newshape[::-1]
    shown = f"newshape={tuple(newshape)}"
    out: list = []
    used_in: set[int] = set()
    used_out: set[int] = set()
    src, infer, i = 0, -1, 0

    def copy(count: int, special: int) -> None:
        if src + count > len(ishape):
            raise ctx.error(f"{shown}: {special} reads input dim {src + count - 1} from the "
                            f"right, past the input's {len(ishape)} dims")

    while i < len(new):
        value = new[i]
        if value > 0 or (value == 0 and allowzero):
            out.append(value)
            src += 1
        elif value == 0:
            copy(1, 0)
            used_in.add(src)
            used_out.add(len(out))
            out.append(ishape[src])
            src += 1
        elif value == -1:
            if infer >= 0:
                raise ctx.error(f"{shown}: only one dim can be inferred (-1)")
            infer = i
            out.append(1)
            src += 1
        elif value == -2:
            while src < len(ishape):
                used_in.add(src)
                used_out.add(len(out))
                out.append(ishape[src])
                src += 1
        elif value == -3:
            copy(2, -3)
            used_in.update((src, src + 1))
            used_out.add(len(out))
            out.append(ishape[src] * ishape[src + 1])
            src += 2
        elif value == -4:
            if i + 2 >= len(new):
                raise ctx.error(f"{shown}: -4 needs the two dims it splits into before it "
                                "(read right to left)")
            copy(1, -4)
            used_in.add(src)
            dim, first, second = ishape[src], new[i + 1], new[i + 2]
            src, i = src + 1, i + 2
            if first == -1 and second == -1:
                raise ctx.error(f"{shown}: the two dims -4 splits into cannot both be -1")
            used_out.update((len(out), len(out) + 1))
            if first == -1:
                out += [dim // second, second]
            else:
                out += [first, dim // first if second == -1 else second]
        else:
            raise ctx.error(f"{shown}: unsupported special value {value}")
        i += 1
    if infer >= 0:
        out = _reverse_reshape_infer(ishape, out, used_in, used_out, infer, shown, ctx)
    static = [d for d in out + ishape if isinstance(d, int)]
    if len(static) == len(out) + len(ishape) and \
            reduce(mul, out, 1) != reduce(mul, ishape, 1):
        raise ctx.error(f"{shown}: the input shape {tuple(in_shape)} and the reshaped shape "
                        f"{tuple(out[::-1])} are not compatible (element counts differ)")
    return out[::-1]


def _reverse_reshape_infer(ishape, out, used_in, used_out, infer, shown, ctx) -> list:
    """``out`` with v0.19's inferred dim set at ``infer`` (-1 for Relax to infer when a
    dim it divides is known only at run time)."""
    if infer >= len(out):
        raise ctx.error(f"{shown}: the -1 lands past the result's {len(out)} dims")
    if any(isinstance(d, int) and d == 0 for j, d in enumerate(out) if j not in used_out):
        raise ctx.error(f"{shown}: the -1 is inferred by dividing by a 0 dim")
    # v0.19 divided by its placeholder 1 at ``infer``: skipping it is the same
    dim = _inferred_dim(ishape, out, used_in, used_out | {infer})
    out = list(out)
    out[infer] = -1 if dim is None else dim
    return out


@register_converter("contrib_reverse_reshape")
def _reverse_reshape(inputs, attrs, ctx):
    newshape = ints(attrs.get("newshape", attrs.get("shape")))
    target = reverse_reshape_shape(shape_of(inputs[0]), newshape,
                                   bool(attrs.get("allowzero", 0)), ctx)
    _check_count_at_run_time(inputs[0], target, ctx)
    return relax.op.reshape(inputs[0], target)
