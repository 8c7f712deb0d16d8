"""Linear-algebra template: ``relax.matmul`` with NumPy batch broadcasting.

Dense weights arrive as ``[K, N]`` constants (folded by :mod:`..rewrite`), so
the schedule vectorizes the output columns ``N`` — contiguous in both the
weight and the output — in a register tile of a few rows by a few vectors,
with the reduction outside the tile and the element-wise epilogue (bias,
activation) computed per tile.
"""
from __future__ import annotations

from tvm import te, topi

from ..schedule import divisor_at_most, inline_epilogue
from ._utils import out_dtype
from .registry import SCHEDULE_ATTR, register_schedule, register_template

MAX_ACCUMULATORS = 12  # vector registers held by a register tile


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
    result = te.compute(full, compute, name="bmlib_matmul",
                        attrs={SCHEDULE_ATTR: "bmlib.matmul"})
    if [int(d) for d in result.shape] != out_shape:
        result = topi.reshape(result, out_shape)
    return result


def _broadcast(batch_a, batch_b):
    n = max(len(batch_a), len(batch_b))
    pa = [1] * (n - len(batch_a)) + [int(d) for d in batch_a]
    pb = [1] * (n - len(batch_b)) + [int(d) for d in batch_b]
    return [max(x, y) for x, y in zip(pa, pb)]


@register_schedule("bmlib.matmul")
def schedule_matmul(sch, block, ctx):
    """(batch, M/mi, N/nt) parallel | reduction | mi rows unrolled x nt columns vectorized."""
    shape = [int(d) for d in sch.get(block).writes[0].source.shape]
    rows, cols = shape[-2], shape[-1]
    lanes = ctx.lanes(str(sch.get(block).writes[0].source.dtype))
    rows_tile = divisor_at_most(rows, 4)
    if cols % lanes == 0:
        cols_tile = lanes * divisor_at_most(cols // lanes, max(1, MAX_ACCUMULATORS // rows_tile))
        cols_tile = min(cols_tile, 4 * lanes) if cols_tile > 4 * lanes else cols_tile
        while cols % cols_tile:
            cols_tile -= lanes
    else:
        cols_tile = divisor_at_most(cols, lanes)
    epilogue = inline_epilogue(sch, block)
    if epilogue is not None and \
            [int(d) for d in sch.get(epilogue).writes[0].source.shape] != shape:
        epilogue = None  # a reshape follows: schedule the matmul on its own
    anchor = epilogue if epilogue is not None else block
    loops = sch.get_loops(anchor)
    batch, i, j = loops[:len(shape) - 2], loops[len(shape) - 2], loops[len(shape) - 1]
    io, ii = sch.split(i, [None, rows_tile])
    jo, ji = sch.split(j, [None, cols_tile])
    rest = loops[len(shape):]  # the reduction, when the anchor is the matmul itself
    sch.reorder(*batch, io, jo, *rest, ii, ji)
    outer = sch.fuse(*batch, io, jo)
    sch.parallel(outer)
    if epilogue is not None:
        sch.compute_at(block, outer)
        ctx.done.add(str(sch.get(epilogue).name_hint))
        # Accumulators stay a "global" tile: see the note on register
        # tiles in ..schedule.
        sch.unroll(ii) if rows_tile > 1 else None
        sch.vectorize(ji)
        tile = [ext for ext in (rows_tile, cols_tile) if ext > 1]
        inner = sch.get_loops(block)[-1 - len(tile):]
        k, tile_loops = inner[-1], inner[:-1]
        sch.reorder(k, *tile_loops)
    else:
        k = rest[0]
        tile_loops = [loop for loop, ext in ((ii, rows_tile), (ji, cols_tile)) if ext > 1]
    if len(tile_loops) == 2:
        sch.unroll(tile_loops[0])
    if tile_loops and cols_tile > 1:
        sch.vectorize(tile_loops[-1])
    sch.decompose_reduction(block, k)
