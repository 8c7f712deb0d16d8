"""Linear-algebra template: ``relax.matmul`` with NumPy batch broadcasting."""
from __future__ import annotations

from tvm import te, topi

from ._utils import out_dtype
from .registry import register_template


@register_template("relax.matmul")
def matmul(call, inputs, ctx):
    a, b = inputs
    dtype = out_dtype(call.attrs, a.dtype)
    # 1-D operands are promoted to matrices and the added axis dropped at the end.
    a2 = topi.expand_dims(a, 0) if len(a.shape) == 1 else a
    b2 = topi.expand_dims(b, 1) if len(b.shape) == 1 else b
    out_shape = [int(d) for d in call.ty.shape.values]
    batch_a, batch_b = list(a2.shape[:-2]), list(b2.shape[:-2])
    nbatch = max(len(batch_a), len(batch_b))
    k = te.reduce_axis((0, a2.shape[-1]), name="k")

    def operand_index(batch, idx):
        # Right-aligned broadcast of the batch axes; size-1 axes index 0.
        offset = nbatch - len(batch)
        return [0 if int(d) == 1 else idx[offset + i] for i, d in enumerate(batch)]

    def compute(*idx):
        bidx, i, j = idx[:nbatch], idx[nbatch], idx[nbatch + 1]
        lhs = a2[tuple(operand_index(batch_a, bidx)) + (i, k)]
        rhs = b2[tuple(operand_index(batch_b, bidx)) + (k, j)]
        return te.sum(lhs.astype(dtype) * rhs.astype(dtype), axis=k)

    full = [*(_broadcast(batch_a, batch_b)), a2.shape[-2], b2.shape[-1]]
    result = te.compute(full, compute, name="matmul")
    if [int(d) for d in result.shape] != out_shape:
        result = topi.reshape(result, out_shape)
    return result


def _broadcast(batch_a, batch_b):
    n = max(len(batch_a), len(batch_b))
    pa = [1] * (n - len(batch_a)) + [int(d) for d in batch_a]
    pb = [1] * (n - len(batch_b)) + [int(d) for d in batch_b]
    return [max(x, y) for x, y in zip(pa, pb)]
