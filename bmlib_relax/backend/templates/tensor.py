"""Data-movement templates: reshape-likes, layout changes, joins, slices and padding."""
from __future__ import annotations

import tvm
from tvm import te, topi
from tvm.sym.analyzer import Analyzer

from ._utils import attr_ints, dims, result_shape, static_dim
from .registry import register_template


def _static_shape(call) -> list:
    """The result shape from the call's Relax type: static dims as ints, symbolic ones
    (a free batch, a sequence length) as their PrimExpr."""
    return result_shape(call)


@register_template("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten",
                   symbolic_dims=True)
def reshape_like(call, inputs, ctx):
    # Every reshape-like only relabels memory: the result type already holds the shape.
    shape = _static_shape(call)
    data = inputs[0]
    if _has_symbolic(data) or any(static_dim(d) is None for d in shape):
        groups = _reshape_groups(list(data.shape), shape)
        if groups is not None:
            return _grouped_reshape(data, shape, groups)
    return topi.reshape(data, shape)


# A reshape group spans at most this many dims on either side (searched exhaustively).
_MAX_GROUP_DIMS = 6


def _reshape_groups(src: list, dst: list) -> "list[tuple[int, int, int, int]] | None":
    """``[(i0, i1, j0, j1)]``: runs of source dims ``src[i0:i1]`` and result dims
    ``dst[j0:j1]`` of provably equal size that together cover both shapes, each as
    short as possible; None when the shapes do not split so (then the reshape goes
    through one flat index).

    topi's reshape flattens the whole index and unflattens it against the other
    shape; with symbolic dims that is a chain of divisions by symbolic products,
    which TVM's simplifier took minutes over (a ``layout_transform`` of a ``(?, ?, ?,
    ?, ?)`` input: 94 s) and the generated code divides in every element.  Per group
    the divisions only span the dims that really merge or split (``(n*6, ...)`` from
    ``(n, 6, ...)``: ``i // 6, i % 6``)."""
    analyzer = Analyzer()
    groups = []
    i = j = 0
    while i < len(src) or j < len(dst):
        found = None
        for total in range(2, 2 * _MAX_GROUP_DIMS + 1):
            for a in range(1, min(total, _MAX_GROUP_DIMS + 1)):
                b = total - a
                if b > _MAX_GROUP_DIMS or i + a > len(src) or j + b > len(dst):
                    continue
                if analyzer.can_prove_equal(_product(src[i:i + a]), _product(dst[j:j + b])):
                    found = (a, b)
                    break
            if found:
                break
        if found is None:
            return None
        a, b = found
        # a trailing run of 1s joins the last group rather than making groups of its own
        groups.append((i, i + a, j, j + b))
        i, j = i + a, j + b
        if i == len(src) or j == len(dst):
            rest_src, rest_dst = src[i:], dst[j:]
            if any(static_dim(d) != 1 for d in rest_src + rest_dst):
                return None
            i0, _, j0, _ = groups.pop()
            groups.append((i0, len(src), j0, len(dst)))
            break
    return groups


def _product(values: list):
    out = tvm.tirx.const(1, "int64")
    for v in values:
        out = out * v
    return out


def _grouped_reshape(data, shape: list, groups: list):
    """The reshape of ``data`` to ``shape``, index arithmetic kept inside each group of
    :func:`_reshape_groups`."""
    src = list(data.shape)

    def compute(*idx):
        index = []
        for i0, i1, j0, j1 in groups:
            flat = 0
            for j in range(j0, j1):  # row-major position inside the group
                flat = flat * shape[j] + idx[j] if j > j0 else idx[j]
            parts = []
            for i in range(i1 - 1, i0 - 1, -1):  # unravel into the source dims
                if i == i0:
                    parts.append(flat)
                else:
                    parts.append(tvm.tirx.floormod(flat, src[i]))
                    flat = tvm.tirx.floordiv(flat, src[i])
            index += reversed(parts)
        return data[tuple(index)]

    return te.compute(shape, compute, name="bmlib_reshape")


@register_template("relax.permute_dims", symbolic_dims=True)
def permute_dims(call, inputs, ctx):
    axes = call.attrs.axes
    return topi.transpose(inputs[0], None if axes is None else attr_ints(axes))


@register_template("relax.concat", symbolic_dims=True)
def concat(call, inputs, ctx):
    axis = call.attrs.axis
    return topi.concatenate(list(inputs[0]), 0 if axis is None else int(axis))


@register_template("relax.split", symbolic_dims=True)
def split(call, inputs, ctx):
    data = inputs[0]
    axis = int(call.attrs.axis) % len(data.shape)
    if _has_symbolic(data):
        return _split_by_result_types(call, data, axis)
    sections = call.attrs.indices_or_sections
    if static_dim(sections) is not None:
        sections = static_dim(sections)
    else:
        sections = attr_ints(sections)
    return tuple(topi.split(data, sections, axis))


def _has_symbolic(tensor) -> bool:
    return any(static_dim(d) is None for d in tensor.shape)


def _split_by_result_types(call, data, axis: int) -> tuple:
    """Each part at the offset the sizes of the parts before it give: the sizes come
    from the Relax result types, which already resolve sections / indices against a
    symbolic extent."""
    parts, offset = [], 0
    for index, field in enumerate(call.ty.fields):
        shape = dims(field.shape.values)
        parts.append(te.compute(shape, _shifted(data, axis, offset), name=f"bmlib_split_{index}"))
        offset = offset + shape[axis]
    return tuple(parts)


def _shifted(data, axis: int, offset):
    """``fcompute`` reading ``data`` with ``axis`` shifted by ``offset``."""
    def compute(*idx):
        return data[tuple(i + offset if ax == axis else i for ax, i in enumerate(idx))]

    return compute


@register_template("relax.strided_slice", symbolic_dims=True)
def strided_slice(call, inputs, ctx):
    def values(expr):
        return [int(v.value) for v in expr.fields]  # a Tuple of PrimValues

    axes, begin, end = (values(call.args[i]) for i in (1, 2, 3))
    strides = values(call.args[4]) if len(call.args) > 4 else [1] * len(axes)
    data = inputs[0]
    if _has_symbolic(data):
        return _strided_slice_symbolic(call, data, axes, begin, strides)
    return topi.strided_slice(data, begin, end, strides, axes)


def _strided_slice_symbolic(call, data, axes, begin, strides):
    """A slice of a tensor with symbolic dims: the result shape is the Relax type's
    (clamping resolved there); each sliced axis starts at its canonical begin (negative
    counted from the end, clamped to the extent) and steps by its stride.  (topi's
    slice takes the begin/end literally on a symbolic extent, and its result shape
    disagrees with the Relax type: the signature check catches it.)"""
    rank = len(data.shape)
    starts = {}
    for axis, first, step in zip(axes, begin, strides):
        axis %= rank
        extent = data.shape[axis]
        start = tvm.tirx.const(first, str(extent.ty))
        start = start + extent if first < 0 else start
        if step > 0:
            start = tvm.tirx.max(tvm.tirx.min(start, extent), 0)
        else:
            start = tvm.tirx.max(tvm.tirx.min(start, extent - 1), -1)
        starts[axis] = (start, step)

    def compute(*idx):
        return data[tuple(starts[ax][0] + i * starts[ax][1] if ax in starts else i
                          for ax, i in enumerate(idx))]

    return te.compute(result_shape(call), compute, name="bmlib_strided_slice")


@register_template("relax.nn.pad")
def pad(call, inputs, ctx):
    attrs = call.attrs
    if str(attrs.pad_mode) != "constant":
        raise ctx.error(f"pad_mode {attrs.pad_mode} has no template")
    width = attr_ints(attrs.pad_width)
    before, after = width[0::2], width[1::2]
    return topi.nn.pad(inputs[0], before, after, float(attrs.pad_value))


@register_template("relax.tile")
def tile(call, inputs, ctx):
    return topi.tile(inputs[0], attr_ints(call.attrs.repeats))


@register_template("relax.repeat")
def repeat(call, inputs, ctx):
    data, axis = inputs[0], call.attrs.axis
    if axis is None:  # numpy semantics: repeat the flattened tensor
        data = topi.reshape(data, [int(_elements(data.shape))])
        axis = 0
    return topi.repeat(data, int(call.attrs.repeats), int(axis))


@register_template("relax.flip")
def flip(call, inputs, ctx):
    return topi.flip(inputs[0], int(call.attrs.axis))


def _elements(shape) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


@register_template("relax.broadcast_to", symbolic_dims=True)
def broadcast_to(call, inputs, ctx):
    return topi.broadcast_to(inputs[0], _static_shape(call))


@register_template("relax.stack", symbolic_dims=True)
def stack(call, inputs, ctx):
    axis = call.attrs.axis
    return topi.stack(list(inputs[0]), 0 if axis is None else int(axis))


@register_template("relax.layout_transform")
def layout_transform(call, inputs, ctx):
    """A bijective ``layout_transform`` (no padding; the NCHW <-> NCHW{b}c conversions of
    ..blocked_layout): each output element reads the input at the inverse index map."""
    data = inputs[0]
    if call.attrs.pad_value is not None:
        raise ctx.error("layout_transform with padding has no template")
    inverse = call.attrs.index_map.inverse([int(d) for d in data.shape])
    return te.compute(_static_shape(call),
                      lambda *idx: data[tuple(inverse.map_indices(list(idx)))],
                      name="bmlib_layout_transform")
