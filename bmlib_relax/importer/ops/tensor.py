"""Shape and data-movement Relay ops, and annotations dropped at import.

Forms: ``transpose`` -> ``permute_dims``; ``nn.batch_flatten`` ->
``reshape(x, [N, prod(rest)])``; ``concatenate`` -> ``concat``; ``split`` ->
``split`` (a tuple, projected with ``TupleGetItem``); Relay's ``reshape``
special values are resolved to an explicit shape at import.
"""
from __future__ import annotations

from functools import reduce
from operator import mul

import numpy as np
import tvm
from tvm import relax
from tvm.sym.analyzer import Analyzer

from ..registry import register_converter
from ..run_checks import (BROADCAST_REASON, cast_dims, emit_element_count_check,
                          emit_run_check, emit_tensor_check, equal, known_dims, unify_dims)
from ._utils import (
    check_index_values, check_reads_elements, dtype_of, folded_value, index_tuple_length, ints,
    ndim_of, normalize_axis, optional_ints, run_time_dims, scalar_operand, shape_of,
)
from ...relay import ast
from ...relay.op import reshape_like_shape, split_problem

_INT64_MAX = 2**63 - 1


def relay_reshape_shape(in_shape: list, newshape: list[int], ctx) -> list:
    """Resolve Relay's special ``newshape`` values against ``in_shape``.

    0 copies a dim, -1 infers one, -2 copies all remaining dims, -3 merges two
    consecutive dims, -4 splits one dim into the next two values (one may be -1).
    """
    out: list = []
    src = 0
    i = 0

    def source_dims(count: int, special: int) -> None:
        # what v0.19's InferNewShape read past the input's rank (its ICHECKs)
        if src + count > len(in_shape):
            raise ctx.error(f"newshape={tuple(newshape)}: {special} reads input dim "
                            f"{src + count - 1}, past the input's {len(in_shape)} dims")

    while i < len(newshape):
        value = newshape[i]
        if value in (0, -3, -4):
            source_dims(2 if value == -3 else 1, value)
        if value > 0:
            out.append(value)
            src += 1
        elif value == 0:
            out.append(in_shape[src])
            src += 1
        elif value == -1:
            out.append(-1)
            src += 1
        elif value == -2:
            out.extend(in_shape[src:])
            src = len(in_shape)
        elif value == -3:
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
            out.extend([first, second])
            src += 1
            i += 2
        else:
            raise ctx.unsupported_attr("newshape", tuple(newshape))
        i += 1
    return out


@register_converter("reshape")
def _reshape(inputs, attrs, ctx):
    newshape = ints(attrs.get("newshape", attrs.get("shape")))
    if attrs.get("allowzero", 0) and 0 in newshape:
        raise ctx.unsupported_attr("allowzero", attrs["allowzero"])
    target = relay_reshape_shape(shape_of(inputs[0]), newshape, ctx)
    return relax.op.reshape(inputs[0], target)


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
    return relax.op.reshape(inputs[0], reshape_like_shape(shape_of(inputs[0]),
                                                          shape_of(inputs[1]), attrs))



@register_converter("nn.batch_flatten")
def _batch_flatten(inputs, attrs, ctx):
    dims = shape_of(inputs[0])
    return relax.op.reshape(inputs[0], [dims[0], reduce(mul, dims[1:], 1)])


@register_converter("transpose")
def _transpose(inputs, attrs, ctx):
    # axes=None reverses the dims, like numpy.
    return relax.op.permute_dims(inputs[0], optional_ints(attrs.get("axes")))


@register_converter("squeeze")
def _squeeze(inputs, attrs, ctx):
    axes = optional_ints(attrs.get("axis"))
    dims = shape_of(inputs[0])
    for axis in axes or ():
        axis = normalize_axis(axis, len(dims), ctx)
        if isinstance(dims[axis], int) and dims[axis] != 1:  # Relay rejects it, Relax not
            raise ctx.error(f"axis {axis} has size {dims[axis]}, not 1: it cannot be squeezed")
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
    if int(attrs.get("batch_dims", 0)) != 0:
        raise ctx.unsupported_attr("batch_dims", attrs["batch_dims"])
    mode = attrs.get("mode", "clip")  # Relay's default clips out-of-range indices
    axis = attrs.get("axis")
    dims, index_dims = shape_of(data), shape_of(indices)
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
    return relax.op.nn.pad(inputs[0], width, modes[mode], float(pad_value))


@register_converter("broadcast_to")
def _broadcast_to(inputs, attrs, ctx):
    return _broadcast(inputs[0], ints(attrs["shape"]), ctx)  # required


@register_converter("broadcast_to_like")
def _broadcast_to_like(inputs, attrs, ctx):
    return _broadcast(inputs[0], shape_of(inputs[1]), ctx)


def _broadcast(data: relax.Expr, target: list, ctx) -> relax.Expr:
    data = _sized_as_target(data, target, ctx)
    if len(target) == ndim_of(data) and all(
            (isinstance(a, int) and isinstance(b, int) and a == b) or
            (not isinstance(a, int) and not isinstance(b, int) and a.same_as(b))
            for a, b in zip(shape_of(data), target)):
        return data  # already the target's shape (a broadcast of run-time dims to themselves)
    return relax.op.broadcast_to(data, target)


def _sized_as_target(data: relax.Expr, target: list, ctx) -> relax.Expr:
    """``data`` whose run-time-sized dims are checked, when the model runs, to equal the
    target's dim on their axis (right-aligned), and cast to it.  TVM's broadcast_to
    decides when it builds whether a dim broadcasts: a run-time dim it cannot relate to
    the target's was indexed as if equal, so a 1 row (or 3 rows) broadcast to 5 read
    past the input — garbage, silently.  A run-time 1 that Relay broadcast is refused
    by name, as for every broadcasting op (:data:`BROADCAST_REASON`)."""
    dims = shape_of(data)
    if all(isinstance(d, int) for d in dims) or len(target) < len(dims):
        return data
    offset = len(target) - len(dims)
    analyzer = Analyzer()
    cast, changed = list(data.ty.shape.values), False
    for axis, dim in enumerate(dims):
        want = target[offset + axis]
        if isinstance(dim, int) or (not isinstance(want, int) and
                                    (dim.same_as(want) or analyzer.can_prove_equal(dim, want))):
            continue
        emit_run_check(ctx.bb, equal(dim, want), ctx.location, ctx.op_name,
                       f"the input has {{}} entries on axis {axis}, the target {{}}; "
                       f"{BROADCAST_REASON}", dim, want)
        cast[axis], changed = want, True
    return cast_dims(ctx.bb, data, cast) if changed else data


@register_converter("collapse_sum_like")
def _collapse_sum_like(inputs, attrs, ctx):
    return relax.op.collapse_sum_like(inputs[0], inputs[1])


@register_converter("collapse_sum_to")
def _collapse_sum_to(inputs, attrs, ctx):
    return relax.op.collapse_sum_to(inputs[0], ints(attrs["shape"]))  # required


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
