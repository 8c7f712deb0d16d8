"""Relay layout strings (``NCHW``, ``NCHW16c``, ``OIHW4i4o``) and ``layout_transform``.

A layout is a sequence of primal axes (upper case) and blocked sub-axes (a
factor and the lower-case letter of their primal axis).  A transform between
two layouts of the same primal axes is a reshape that splits every blocked
axis, a ``permute_dims``, and a reshape that merges the blocks of the target;
pure permutations (``NCHW`` -> ``NHWC``) are a single ``permute_dims``.
"""
from __future__ import annotations

import re

from tvm import relax

from ..registry import register_converter
from ..run_checks import cast_dims, emit_run_check, equal
from ._utils import shape_of

_AXIS = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str, ctx) -> list[tuple[str, int]]:
    """``"NCHW16c"`` -> ``[("N", 0), ("C", 0), ("H", 0), ("W", 0), ("c", 16)]``."""
    axes = []
    pos = 0
    for m in _AXIS.finditer(layout):
        if m.start() != pos:
            break
        factor, letter = m.groups()
        if letter.isupper() != (factor == ""):
            raise ctx.error(f"cannot read layout {layout!r}")
        axes.append((letter, int(factor) if factor else 0))
        pos = m.end()
    if pos != len(layout) or not axes:
        raise ctx.error(f"cannot read layout {layout!r}")
    return axes


def axis_names(layout: str) -> list[str]:
    """``"OIHW16i32o"`` -> ``["O", "I", "H", "W", "16i", "32o"]``: one name per dim,
    without :func:`parse_layout`'s validation (the op's own checks refuse a bad one)."""
    return [factor + letter for factor, letter in _AXIS.findall(layout)]


def spatial_axes(layout: str) -> list[int]:
    """The dims of ``layout``'s spatial axes (``D``, ``H``, ``W``), in that order."""
    names = axis_names(layout)
    return [names.index(c) for c in "DHW" if c in names]


def spatial_extents(dims, layout: str) -> list:
    """The extents of ``dims`` (a shape in ``layout``) along its spatial axes."""
    return [dims[i] for i in spatial_axes(layout)]


def layout_transform(data: relax.Expr, src: str, dst: str, ctx) -> relax.Expr:
    """``data`` in layout ``src`` re-laid out as ``dst`` (static blocked dims)."""
    if src == dst:
        return data
    src_axes, dst_axes = parse_layout(src, ctx), parse_layout(dst, ctx)
    if sorted(a for a, f in src_axes if not f) != sorted(a for a, f in dst_axes if not f):
        raise ctx.error(f"layouts {src!r} and {dst!r} have different axes")
    factors: dict[str, int] = {}
    for letter, factor in src_axes + dst_axes:
        if factor:
            primal = letter.upper()
            if factors.setdefault(primal, factor) != factor:
                raise ctx.error(f"layout_transform {src} -> {dst} re-blocks axis {primal}")
    shape = shape_of(data)
    data, shape = _blocks_of_factor(data, shape, src_axes, src, ctx)
    data, shape = _padded_to_blocks(data, shape, src_axes, factors, src, dst, ctx)
    # Labels of the fully split form: "X" (or outer part of a blocked X) and "x" (block).
    split_shape: list = []
    split_labels: list[str] = []
    for (letter, factor), dim in zip(src_axes, shape):
        if factor:
            split_shape.append(dim)
            split_labels.append(letter)
        elif letter in factors and letter.lower() not in dict(src_axes):
            split_shape += [dim // factors[letter], factors[letter]]
            split_labels += [letter, letter.lower()]
        else:
            split_shape.append(dim)
            split_labels.append(letter)
    dst_letters = {letter for letter, _ in dst_axes}
    order: list[str] = []
    merged: list = []
    for letter, factor in dst_axes:
        if factor or letter not in factors or letter.lower() in dst_letters:
            order.append(letter)
            merged.append(split_shape[split_labels.index(letter)])
        else:  # block of a source axis folded back into its primal axis
            order += [letter, letter.lower()]
            merged.append(split_shape[split_labels.index(letter)] * factors[letter])
    out = data
    if len(split_shape) != len(shape):
        out = ctx.emit(relax.op.reshape(out, split_shape))
    perm = [split_labels.index(label) for label in order]
    if perm != list(range(len(perm))):
        out = ctx.emit(relax.op.permute_dims(out, perm))
    if len(merged) != len(order):
        out = relax.op.reshape(out, merged)
    return out


def _padded_to_blocks(data: relax.Expr, shape: list, src_axes: list, factors: dict,
                      src: str, dst: str, ctx):
    """``data`` (and its dims) with every axis the transform splits into blocks padded
    with zeros to a multiple of its factor, as v0.19's ``topi::layout_transform`` did
    (its result shape rounds up, ``shapediv``; the tail reads ``if_then_else(in range,
    x, 0)``): NCHW with C=3 to NCHW2c has two channel blocks, the last half zeros.  A
    run-time-sized axis cannot be rounded up at import and is refused."""
    src_letters = {letter for letter, _ in src_axes}
    widths: list[int] = []
    for (letter, factor), dim in zip(src_axes, shape):
        split = not factor and letter in factors and letter.lower() not in src_letters
        if split and not isinstance(dim, int):
            raise ctx.error(f"layout_transform {src} -> {dst}: axis {letter} is known only "
                            f"when the model runs; it must split into blocks of "
                            f"{factors[letter]} at import")
        widths += [0, -dim % factors[letter] if split else 0]
    if not any(widths):
        return data, shape
    padded = [d + after for d, after in zip(shape, widths[1::2])]
    return ctx.emit(relax.op.nn.pad(data, widths, "constant", 0.0)), padded


def _blocks_of_factor(data: relax.Expr, shape: list, axes: list, layout: str, ctx):
    """``data`` (and its dims) with every blocked axis of ``layout`` (``6n``) as long as
    its factor: a static dim that is not is an error; a run-time-sized one (``?``) is
    checked when the model runs and cast to the factor, since the transform's result
    shape is computed from the factor (as Relay's layout relation did)."""
    pinned = list(shape)
    for axis, ((letter, factor), dim) in enumerate(zip(axes, shape)):
        if not factor:
            continue
        if isinstance(dim, int):
            if dim != factor:
                raise ctx.error(f"axis {axis} ({factor}{letter} of layout {layout!r}) has "
                                f"{dim} entries, not {factor}")
            continue
        emit_run_check(ctx.bb, equal(dim, factor), ctx.location, ctx.op_name,
                       f"axis {axis} ({factor}{letter} of layout {layout!r}) has {{}} "
                       f"entries, not {factor}", dim)
        pinned[axis] = factor
    if pinned == list(shape):
        return data, shape
    return cast_dims(ctx.bb, data, pinned), pinned


@register_converter("layout_transform")
def _layout_transform(inputs, attrs, ctx):
    return layout_transform(inputs[0], attrs["src_layout"], attrs["dst_layout"], ctx)  # required
