"""Shape and data-movement Relay ops, and annotations dropped at import."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import ints, shape_of


def relay_reshape_shape(in_shape: list, newshape: list[int], ctx) -> list:
    """Resolve Relay's special ``newshape`` values against ``in_shape``.

    0 copies a dim, -1 infers one, -2 copies all remaining dims, -3 merges two
    consecutive dims, -4 splits one dim into the next two values (one may be -1).
    """
    out: list = []
    src = 0
    i = 0
    while i < len(newshape):
        value = newshape[i]
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
            first, second = newshape[i + 1], newshape[i + 2]
            dim = in_shape[src]
            if first == -1:
                first = dim // second
            if second == -1:
                second = dim // first
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
    target = relay_reshape_shape(shape_of(inputs[0]), newshape, ctx)
    return relax.op.reshape(inputs[0], target)


@register_converter("on_device", "device_copy")
def _annotation(inputs, attrs, ctx):
    # Placement annotations have no meaning for a single-target CPU build.
    return inputs[0]
