"""Selection templates: comparisons, ``where``, indexing (``take``, gathers) and
``argmax``/``argmin``.

Their outputs or operands are masks (bool) and indices (int32/int64), which the
pattern check admits for these ops only (``patterns.check_tensors``).  Out
of range indices follow the op's ``mode`` exactly as TVM's legalization does;
the importer gives ``take`` Relay's default, ``clip``, so an index past the
end reads the last element instead of memory outside the tensor.
"""
from __future__ import annotations

from tvm import topi

from ._utils import elementwise_template
from .registry import register_template

COMPARISONS = {
    "relax.less": topi.less,
    "relax.less_equal": topi.less_equal,
    "relax.greater": topi.greater,
    "relax.greater_equal": topi.greater_equal,
    "relax.equal": topi.equal,
    "relax.not_equal": topi.not_equal,
}
LOGICAL = {
    "relax.logical_and": topi.logical_and,
    "relax.logical_or": topi.logical_or,
    "relax.logical_xor": topi.logical_xor,
}



for _name, _fn in {**COMPARISONS, **LOGICAL}.items():
    register_template(_name)(elementwise_template(_fn))


register_template("relax.logical_not")(elementwise_template(topi.logical_not))
register_template("relax.where")(elementwise_template(topi.where))  # (mask, then, else)


@register_template("relax.take")
def take(call, inputs, ctx):
    axis = call.attrs.axis
    return topi.take(inputs[0], inputs[1], None if axis is None else int(axis),
                     mode=str(call.attrs.mode))


@register_template("relax.gather_elements")
def gather_elements(call, inputs, ctx):
    return topi.gather(inputs[0], int(call.attrs.axis), inputs[1])


@register_template("relax.gather_nd")
def gather_nd(call, inputs, ctx):
    indices = inputs[1]
    ndim = len(indices.shape)
    # Relax keeps the index tuple last, topi first.
    indices = topi.transpose(indices, [ndim - 1] + list(range(ndim - 1)))
    return topi.gather_nd(inputs[0], indices, int(call.attrs.batch_dims))


def _arg_reduce(fn):
    def template(call, inputs, ctx):
        axis = call.attrs.axis
        index = fn(inputs[0], None if axis is None else int(axis), bool(call.attrs.keepdims))
        # topi returns int32 indices; Relax declares int64 (the signature check holds us to it)
        return topi.cast(index, str(call.ty.dtype))

    return template


register_template("relax.argmax")(_arg_reduce(topi.argmax))
register_template("relax.argmin")(_arg_reduce(topi.argmin))
