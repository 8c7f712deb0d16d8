"""Data-movement templates: reshape-likes, layout changes, joins, slices and padding."""
from __future__ import annotations

from tvm import topi

from ._utils import attr_ints, result_shape
from .registry import register_template


def _static_shape(call) -> list:
    """The result shape from the call's Relax type: static dims as ints, symbolic ones
    (a free batch, a sequence length) as their PrimExpr."""
    return result_shape(call)


@register_template("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten",
                   symbolic_dims=True)
def reshape_like(call, inputs, ctx):
    # Every reshape-like only relabels memory: the result type already holds the shape.
    return topi.reshape(inputs[0], _static_shape(call))


@register_template("relax.permute_dims", symbolic_dims=True)
def permute_dims(call, inputs, ctx):
    axes = call.attrs.axes
    return topi.transpose(inputs[0], None if axes is None else attr_ints(axes))


@register_template("relax.concat", symbolic_dims=True)
def concat(call, inputs, ctx):
    axis = call.attrs.axis
    return topi.concatenate(list(inputs[0]), 0 if axis is None else int(axis))


@register_template("relax.split")
def split(call, inputs, ctx):
    sections = call.attrs.indices_or_sections
    if isinstance(sections, int) or hasattr(sections, "value"):
        sections = int(sections)
    else:
        sections = attr_ints(sections)
    return tuple(topi.split(inputs[0], sections, int(call.attrs.axis)))


@register_template("relax.strided_slice")
def strided_slice(call, inputs, ctx):
    def values(expr):
        return [int(v.value) for v in expr.fields]  # a Tuple of PrimValues

    axes, begin, end = (values(call.args[i]) for i in (1, 2, 3))
    strides = values(call.args[4]) if len(call.args) > 4 else [1] * len(axes)
    return topi.strided_slice(inputs[0], begin, end, strides, axes)


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
