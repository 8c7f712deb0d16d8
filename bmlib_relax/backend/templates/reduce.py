"""Reduction templates; reduced and kept axes may be symbolic (a mean over a free
sequence length divides by it at run time)."""
from __future__ import annotations

import tvm
from tvm import topi

from ._utils import attr_ints, dims, static_dim
from .registry import register_template



def _mean(data, axis, keepdims):
    total = topi.sum(data, axis, keepdims)
    count = 1
    for ax in range(len(data.shape)) if axis is None else axis:
        count *= dims(data.shape)[ax]
    if static_dim(count) is not None:
        return topi.divide(total, tvm.tirx.const(static_dim(count), data.dtype))
    return topi.divide(total, tvm.tirx.Cast(data.dtype, count))


REDUCTIONS = {
    "relax.sum": topi.sum,
    "relax.mean": _mean,
    "relax.max": topi.max,
    "relax.min": topi.min,
}


def _reduction(fn):
    def template(call, inputs, ctx):
        axis = call.attrs.axis
        return fn(inputs[0], None if axis is None else attr_ints(axis),
                  bool(call.attrs.keepdims))

    return template


for _name, _fn in REDUCTIONS.items():
    register_template(_name, symbolic_dims=True)(_reduction(_fn))
