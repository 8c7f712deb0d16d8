"""Linear-algebra template: ``relax.matmul`` with NumPy batch broadcasting.

Dense weights arrive as ``[K, N]`` constants (folded by :mod:`..rewrite`), so
the schedule vectorizes the output columns ``N`` — contiguous in both the
weight and the output — in a register tile of a few rows by a few vectors,
with the reduction outside the tile and the element-wise epilogue (bias,
activation) computed per tile.

Symbolic rows or columns (a free batch or sequence length) are zero-padded
inside the PrimFunc to whole register tiles and the padding dropped after, so
the tile loops stay static: the padding is the guarded tail.
"""
from __future__ import annotations

import math
import os

import tvm
from tvm import te, topi

from .. import prefetch
from ..schedule import divisor_at_most, inline_epilogue, is_scheduled
from ...switches import switched_on
from ..target import vector_registers
from ._utils import dims, out_dtype, result_shape, same_dim, same_shape, static_dim
from .registry import SCHEDULE_ATTR, register_schedule, register_template


MAX_ACCUMULATORS = 12  # vector registers held by a register tile (16-register targets)
# With 32 vector registers (AVX-512) the tile holds 24 accumulators (8 rows x 3 vectors):
# per k step 3 B vectors and 8 A broadcasts feed 24 FMAs, half the B traffic per FMA of
# the 12-accumulator tile (a 128x768x768 dense: 164 -> 194 GFLOP/s on one core).
WIDE_ACCUMULATORS = 24


def accumulator_budget(target) -> int:
    """Vector accumulators a register tile may hold on ``target``."""
    return WIDE_ACCUMULATORS if vector_registers(target) >= 32 else MAX_ACCUMULATORS


@register_template("relax.matmul", symbolic_dims=True)
def matmul(call, inputs, ctx):
    """Batched ``a @ b``; any dim but the static ones the schedule tiles by may be
    symbolic (a free batch, a sequence length as rows, columns or reduction)."""
    a, b = inputs
    dtype = out_dtype(call.attrs, a.dtype)
    # 1-D operands are promoted to matrices and the added axis dropped at the end.
    a2 = topi.expand_dims(a, 0) if len(a.shape) == 1 else a
    b2 = topi.expand_dims(b, 1) if len(b.shape) == 1 else b
    out_shape = result_shape(call)
    batch_a, batch_b = list(a2.shape[:-2]), list(b2.shape[:-2])
    nbatch = max(len(batch_a), len(batch_b))
    k = te.reduce_axis((0, a2.shape[-1]), name="k")

    def operand_index(batch, idx):
        # Right-aligned broadcast of the batch axes; (static) size-1 axes index 0.
        offset = nbatch - len(batch)
        return [0 if static_dim(d) == 1 else idx[offset + i] for i, d in enumerate(batch)]

    def compute(*idx):
        bidx, i, j = idx[:nbatch], idx[nbatch], idx[nbatch + 1]
        lhs = a2[tuple(operand_index(batch_a, bidx)) + (i, k)]
        rhs = b2[tuple(operand_index(batch_b, bidx)) + (k, j)]
        return te.sum(lhs.astype(dtype) * rhs.astype(dtype), axis=k)

    rows, cols = a2.shape[-2], b2.shape[-1]
    attrs = {SCHEDULE_ATTR: "bmlib.matmul"}
    lanes = ctx.lanes(dtype)
    ragged = ragged_columns(static_dim(rows), static_dim(cols), lanes)
    if static_dim(cols) is None or static_dim(rows) is None or ragged:
        # Symbolic rows / columns, or static columns that are no whole vectors: padded
        # to whole register tiles, so the tile loops are static and vectorized (the
        # guarded tail is the padding, dropped below).
        tile = padded_tile(static_dim(rows), ragged or static_dim(cols), lanes,
                           accumulator_budget(ctx.target))
        if static_dim(rows) is None and tile[0] > 1:
            a2 = _pad_axis(a2, len(a2.shape) - 2, tile[0])
            attrs[TILE_ATTR] = list(tile)
        if static_dim(cols) is None or ragged:
            b2 = _pad_axis(b2, len(b2.shape) - 1, tile[1])
            attrs[TILE_ATTR] = list(tile)
    full = [*_broadcast(batch_a, batch_b, ctx), a2.shape[-2], b2.shape[-1]]
    blocks = 1 if TILE_ATTR in attrs or len(a.shape) != 2 or len(b.shape) != 2 or \
        dtype != "float32" else \
        k_blocks(static_dim(rows), static_dim(a2.shape[-1]), static_dim(cols),
                 lanes, tvm.runtime.DataType(dtype).bits // 8)
    if blocks > 1:
        return _k_split_matmul(a2, b2, blocks, dtype, attrs)
    result = te.compute(full, compute, name="bmlib_matmul", attrs=attrs)
    if TILE_ATTR in attrs:
        padded = result
        result = te.compute([*full[:-2], rows, cols], lambda *idx: padded[idx],
                            name="bmlib_matmul_unpad")
    if not same_shape(dims(result.shape), out_shape):
        result = topi.reshape(result, out_shape)
    return result


# Block annotation: the (rows, columns) register tile a padded matmul was padded to.
TILE_ATTR = "bmlib_matmul_tile"


# ----------------------------------------------------------------- K-blocking
# A dense whose whole input plus one weight panel exceeds the L2 (BERT's FFN2,
# 128x3072 -> 768: a 1.5 MB input and 590 KB panels, 2 MB L2 per core) re-read its
# input from L3 for every column panel.  Such a dense is computed in blocks of the
# reduction instead: ``partial[s] = a[:, block s] @ b[block s, :]`` is a batched
# matmul over ``s``, whose batch axis the schedule fuses in front of the panels (one
# parallel loop, block-major: with 2 threads each takes whole blocks of the
# reduction and every panel), so an input block and a panel block stay in L2 across
# the panels; one pass sums the blocks with the epilogue (bias, residual).  Blocks
# are the fewest whose input block + panel block fit K_SPLIT_BUDGET: FFN2 in 4
# blocks of 768 (528 KiB; 3.90 -> 3.55 ms at 1 thread, 2.04 -> 1.80 at 2, in the
# model); the 768-deep denses (528 KiB whole) stay one block (split in 2 they were
# slower).  ``$BMLIB_DENSE_KSPLIT=0`` switches it off, ``=<KiB>`` sets the budget.
KSPLIT_ENV = "BMLIB_DENSE_KSPLIT"
K_SPLIT_BUDGET = 640 << 10  # bytes of input block + panel block
MAX_K_BLOCKS = 8


def _k_split_budget() -> "int | None":
    """The budget in bytes, or None when ``$BMLIB_DENSE_KSPLIT`` is ``0``/``off``; a
    whole number there is the budget in KiB, anything else keeps the default (as
    ``$BMLIB_CONV_KBLOCK`` does: a measurement switch, it changes no result)."""
    if not switched_on(KSPLIT_ENV):
        return None
    value = os.environ.get(KSPLIT_ENV, "").strip()
    return int(value) * 1024 if value.isdigit() else K_SPLIT_BUDGET


def k_blocks(rows: "int | None", depth: "int | None", cols: "int | None", lanes: int,
             item_bytes: int) -> int:
    """How many blocks the reduction of a static ``[rows, depth] @ [depth, cols]``
    is split into (1: none): the fewest whose input block plus weight panel block
    fit ``K_SPLIT_BUDGET``, each a whole number of prefetch chunks."""
    budget = _k_split_budget()
    if budget is None or None in (rows, depth, cols) or rows < 2:
        return 1  # (a GEMV streams its weight once: nothing to keep in L2)
    width = packed_panel_width(rows, cols, lanes) or matmul_tile(rows, cols, lanes)[1]
    per_step = (rows + width) * item_bytes  # bytes of input column + panel row per k
    if per_step * depth <= budget:
        return 1
    for blocks in range(2, MAX_K_BLOCKS + 1):
        if depth % blocks == 0 and (depth // blocks) % PREFETCH_CHUNK == 0 and \
                per_step * (depth // blocks) <= budget:
            return blocks
    return 1


def _k_split_matmul(a, b, blocks: int, dtype: str, attrs: dict):
    """``a @ b`` as the sum of ``blocks`` partial products over reduction blocks."""
    depth = static_dim(a.shape[-1]) // blocks
    k = te.reduce_axis((0, depth), name="k")
    partial = te.compute(
        [blocks, a.shape[0], b.shape[1]],
        lambda s, i, j: te.sum(a[i, s * depth + k].astype(dtype) *
                               b[s * depth + k, j].astype(dtype), axis=k),
        name="bmlib_matmul_kblock", attrs={**attrs, KSPLIT_ATTR: blocks})

    def total(i, j):
        value = partial[0, i, j]
        for s in range(1, blocks):
            value = value + partial[s, i, j]
        return value

    return te.compute([a.shape[0], b.shape[1]], total, name="bmlib_matmul_ksum")


# Block annotation of a K-blocked partial product: its number of reduction blocks.
KSPLIT_ATTR = "bmlib_matmul_kblocks"


# Symbolic rows are tiled by 3 (padded to a multiple): with 4 vectors of columns that is
# the 12-accumulator tile; matmul_tile would take 12 rows x 1 vector for a multiple of 12.
SYMBOLIC_ROWS_HINT = 3


def padded_tile(rows: "int | None", cols: "int | None", lanes: int,
                accumulators: int = MAX_ACCUMULATORS) -> tuple[int, int]:
    """The register tile of a matmul with symbolic rows or columns (None), as
    :func:`matmul_tile` picks it for ``SYMBOLIC_ROWS_HINT`` rows and up to 4 vectors
    of columns; a symbolic extent is padded to a multiple of the tile."""
    return matmul_tile(rows if rows is not None else SYMBOLIC_ROWS_HINT,
                       cols if cols is not None else 4 * lanes, lanes, accumulators)


def ragged_columns(rows: "int | None", cols: "int | None", lanes: int) -> "int | None":
    """For static columns that are no multiple of the vector (a word-level language
    model's 33278-word decoder), rows > 1: the columns rounded up to whole vectors,
    which the template pads them to (the weight per panel, the result dropping the
    padding per tile); else None.  Tiles of the largest divisor of the columns up to
    a vector (14 lanes, 4 rows) ran that decoder at 2.4x ONNX Runtime's time.  A
    GEMV keeps its own narrower vectors (:func:`packed_panel_width`)."""
    if cols is None or rows is None or rows < 2 or cols <= lanes or cols % lanes == 0:
        return None
    vectors = -(-cols // lanes)
    # whole panels of 3 vectors (the tile of panel_vectors) unless that leaves one panel
    return (-(-vectors // 3) * 3 if vectors >= 6 else vectors) * lanes


def _pad_axis(tensor, axis: int, multiple: int):
    """``tensor`` with ``axis`` (symbolic) zero-padded to a multiple of ``multiple``."""
    extent = tensor.shape[axis]
    shape = list(tensor.shape)
    shape[axis] = (extent + (multiple - 1)) // multiple * multiple

    def compute(*idx):
        zero = tvm.tirx.const(0, tensor.dtype)
        return tvm.tirx.if_then_else(idx[axis] < extent, tensor[idx], zero)

    return te.compute(shape, compute, name=f"{tensor.op.name}_pad")


def _broadcast(batch_a, batch_b, ctx):
    """The broadcast batch dims: a static 1 takes the other side's dim, equal dims
    stay; two different symbolic dims cannot be broadcast at compile time."""
    n = max(len(batch_a), len(batch_b))
    pa = [1] * (n - len(batch_a)) + dims(batch_a)
    pb = [1] * (n - len(batch_b)) + dims(batch_b)
    out = []
    for x, y in zip(pa, pb):
        if static_dim(x) == 1:
            out.append(y)
        elif static_dim(y) == 1 or same_dim(x, y):
            out.append(x)
        elif static_dim(x) is not None and static_dim(y) is not None:
            out.append(max(static_dim(x), static_dim(y)))
        else:
            raise ctx.error(f"batch dims {x} and {y} do not broadcast at compile time")
    return out


def panel_vectors(col_vectors: int, rows: "int | None") -> int:
    """Vectors of columns in a register tile (the width of a packed B panel), from the
    column count alone, so compile-time weight packing (:mod:`..rewrite`) and the
    schedule agree: 3 vectors when they divide (8 rows x 3 = 24 accumulators), else
    4, 2, 1 (keeping two panels or more for the threads).  One row (a GEMV) has no rows to reuse a B vector over: up to 8 vectors,
    8 independent FMA chains per k step."""
    if rows == 1:
        return divisor_at_most(col_vectors, 8)
    fits = [v for v in (3, 4, 2, 1) if col_vectors % v == 0]
    # at least two column panels when the columns allow: they are the parallel loop
    return next((v for v in fits if col_vectors // v >= 2), fits[0])


# The narrowest vector a GEMV panel is cut into when the columns are no multiple of
# the target's vector (1000 classes on 16 lanes: 8-lane vectors).
MIN_VECTOR = 4


def packed_panel_width(rows: "int | None", cols: int, lanes: int) -> "int | None":
    """Width of the column panels a constant ``[K, cols]`` weight is packed into at
    compile time (:mod:`..rewrite`), or None to leave it as it is: whole vectors of
    :func:`panel_vectors`; for one row (a GEMV, e.g. a 1000-class classifier) also
    narrower vectors that divide the columns, since reading the weight contiguously
    is all a GEMV does."""
    vector = lanes if cols % lanes == 0 else None
    if vector is None and rows == 1:
        vector = next((v for v in (lanes // 2, lanes // 4) if v >= MIN_VECTOR and
                       cols % v == 0), None)
    if vector is None or cols == vector:
        return None  # no whole vectors, or a single one: nothing to cut into panels
    return panel_vectors(cols // vector, rows) * vector


def matmul_tile(rows: int, cols: int, lanes: int,
                accumulators: int = MAX_ACCUMULATORS) -> tuple[int, int]:
    """``(rows_tile, cols_tile)`` of the register tile: :func:`panel_vectors` whole
    vectors of columns (when ``cols`` allows) by as many rows as the ``accumulators``
    budget leaves, each a divisor of its extent.

    A tile over 1 KiB is allocated once per parallel iteration (a workspace, see the
    register-tile note in ..schedule), never per tile; LLVM keeps it in registers."""
    if cols % lanes == 0:
        vectors = panel_vectors(cols // lanes, rows)
        return divisor_at_most(rows, max(1, accumulators // vectors)), vectors * lanes
    return divisor_at_most(rows, 4), divisor_at_most(cols, lanes)


# Pack a B panel only when it is large enough to leave the L1 cache on its own.
PACK_MIN_PANEL_BYTES = 16 << 10


@register_schedule("bmlib.matmul")
def schedule_matmul(sch, block, ctx):
    """(batch, N/nt) parallel | M/mi | reduction | mi rows unrolled x nt columns vectorized.

    The column panel of B a parallel iteration works on (``K x nt``) is copied
    into a contiguous buffer once and reused by every row tile: read in place,
    its rows lie ``N`` elements apart, and for ``N`` a multiple of 1024 bytes
    they map to a handful of cache sets, so a large ``K`` missed in every
    cache level (a 128x768x3072 dense ran at 2 GFLOP/s).

    Symbolic extents: a symbolic batch or reduction changes nothing (they are
    outer loops); symbolic rows and columns were padded by the template to whole
    register tiles (``TILE_ATTR``), so the tile loops stay static and vectorized
    (a symbolic extent is never a TIR vector).
    """
    shape = dims(sch.get(block).writes[0].source.shape)
    rows, cols = static_dim(shape[-2]), static_dim(shape[-1])
    padded = sch.get(block).annotations.get(TILE_ATTR)
    if cols is None and padded is None:  # the template pads symbolic columns
        raise ValueError("a matmul with symbolic columns that were not padded to tiles")
    dtype = str(sch.get(block).writes[0].source.dtype)
    lanes = ctx.lanes(dtype)
    budget = accumulator_budget(ctx.target)
    packed_width = _inline_packed_weight(sch, block, cols)
    b_view = _inline_operand_views(sch, block) if packed_width is None else None
    if padded is not None:  # symbolic extents padded to whole tiles by the template
        rows_tile, cols_tile = (int(t) for t in padded)
    elif packed_width is not None:  # the panel width the weight was packed with
        rows_tile = divisor_at_most(rows, max(1, budget * lanes // packed_width))
        cols_tile = packed_width
    else:
        rows_tile, cols_tile = matmul_tile(1 if rows is None else rows, cols, lanes, budget)
    _join_elementwise_branches(sch, block)
    epilogue = inline_epilogue(sch, block)
    unpadded = None  # with padding: the epilogue that reads the padded result
    if epilogue is not None and \
            not same_shape(dims(sch.get(epilogue).writes[0].source.shape), shape):
        unpadded = epilogue if padded is not None else None
        epilogue = None  # a reshape follows: schedule the matmul on its own
    if epilogue is None and KSPLIT_ATTR in sch.get(block).annotations:
        # a partial product's own write-back as the epilogue: it accumulates in a
        # register tile, not in the (L2-sized) buffer of partial products
        epilogue = sch.cache_write(block, 0, "global")
    anchor = epilogue if epilogue is not None else block
    loops = sch.get_loops(anchor)
    batch, i, j = loops[:len(shape) - 2], loops[len(shape) - 2], loops[len(shape) - 1]
    io, ii = sch.split(i, [None, rows_tile])
    jo, ji = sch.split(j, [None, cols_tile])
    rest = loops[len(shape):]  # the reduction, when the anchor is the matmul itself
    sch.reorder(*batch, jo, io, *rest, ii, ji)
    outer = sch.fuse(*batch, jo)
    sch.parallel(outer)
    reduction = 1
    for iv in sch.get(block).iter_vars:
        if int(iv.iter_type) != 0:
            extent = static_dim(iv.dom.extent)
            reduction = None if extent is None or reduction is None else reduction * extent
    if epilogue is not None:
        sch.compute_at(block, io)
        ctx.done.add(str(sch.get(epilogue).name_hint))
        # Accumulators stay a "global" tile: see the note on register
        # tiles in ..schedule.
        _register_tile(sch, ii, ji, rows_tile, cols_tile, lanes)
        if reduction == 1:  # an outer product (K = 1): no reduction loop to move
            return
        kinds = [kind for kind, ext in (("rows", rows_tile), ("cols", cols_tile)) if ext > 1]
        inner = sch.get_loops(block)[-1 - len(kinds):]
        k, tile_loops = inner[-1], inner[:-1]
        sch.reorder(k, *tile_loops)
        by_kind = dict(zip(kinds, tile_loops))
        _register_tile(sch, by_kind.get("rows"), by_kind.get("cols"), rows_tile, cols_tile,
                       lanes)
    else:
        k = rest[0]
        _register_tile(sch, ii, ji, rows_tile, cols_tile, lanes)
    if packed_width is not None and rows is not None and rows > 1 and padded is None:
        k = _mark_panel_prefetch(sch, block, k, rows // rows_tile)
    sch.decompose_reduction(block, k)
    if unpadded is not None:
        _epilogue_per_tile(sch, unpadded, io, lanes if cols is not None else None, ctx)
    if b_view is not None:  # B's views, computed per panel: the panel itself
        if _view_per_panel(sch, b_view, outer, lanes):
            ctx.done.add(b_view)
    elif packed_width is None:  # else the weight already is in panels
        # Symbolic rows: a free batch / sequence length is taken to span several row tiles.
        _pack_b_panel(sch, block, outer, 2 if rows is None else rows // rows_tile, cols_tile,
                      lanes)


def _join_elementwise_branches(sch, block) -> None:
    """Inline the element-wise blocks after the matmul whose readers are all
    element-wise blocks of the same shape, so a branching epilogue becomes one
    block computed per tile: GELU reads the biased product twice
    (``0.5 * y * (1 + erf(y / sqrt(2)))``), which stopped :func:`inline_epilogue` at
    the bias and left the activation a pass of its own over the whole output."""
    shape = dims(sch.get(block).writes[0].source.shape)
    outputs = {str(sch.get(b).name_hint)
               for b in sch.get_output_blocks(sch.get_sblock("root"))}

    def elementwise(b) -> bool:
        stmt = sch.get(b)
        return SCHEDULE_ATTR not in stmt.annotations and len(stmt.writes) == 1 and \
            all(int(iv.iter_type) == 0 for iv in stmt.iter_vars) and \
            same_shape(dims(stmt.writes[0].source.shape), shape) and \
            not is_scheduled(sch, b)

    frontier = [c for c in sch.get_consumers(block) if elementwise(c)]
    if len(frontier) != 1 or len(sch.get_consumers(frontier[0])) < 2:
        return  # no branching after the matmul: inline_epilogue takes the chain
    seen = set()
    while frontier:
        current = frontier.pop(0)
        name = str(sch.get(current).name_hint)
        if name in seen:
            continue
        seen.add(name)
        consumers = sch.get_consumers(current)
        if name in outputs or not consumers or not all(elementwise(c) for c in consumers):
            continue
        frontier.extend(consumers)
        sch.compute_inline(current)


def _is_view(sch, producer) -> bool:
    """A data-movement block (reshape, permute_dims): it stores a load, computes nothing."""
    stmt = sch.get(producer)
    return SCHEDULE_ATTR not in stmt.annotations and len(stmt.reads) == 1 and \
        isinstance(stmt.body, tvm.tirx.BufferStore) and \
        isinstance(stmt.body.value, tvm.ir.expr.TensorLoad) and \
        all(int(iv.iter_type) == 0 for iv in stmt.iter_vars) and \
        len(sch.get_consumers(producer)) == 1


def _inline_views(sch, block, buffer) -> bool:
    """Inline the chain of views that produces ``buffer`` for ``block``; False if none."""
    inlined = False
    while True:
        producers = [p for p in sch.get_producers(block)
                     if sch.get(p).writes[0].source.same_as(buffer) and _is_view(sch, p)]
        if len(producers) != 1:
            return inlined
        buffer = sch.get(producers[0]).reads[0].source
        sch.compute_inline(producers[0])
        inlined = True


def _inline_operand_views(sch, block) -> "str | None":
    """Read operands through the head-splitting views of attention in place.

    A batched matmul of a partition that took the ``reshape`` / ``permute_dims`` of
    its operands (the ``batch_matmul_heads`` patterns) reads the rows of A through
    them (A is read one element at a time, any layout will do), and B when its
    columns stay contiguous (the vectorized axis).  Otherwise (``K^T``) the views of
    B are folded into one block, returned by name: the schedule computes it per
    column panel, so it is the packed panel.  Either way no partition, VM call and
    buffer per view."""
    stmt = sch.get(block)
    if len(stmt.reads) < 2:
        return None
    a_buffer, b_buffer = stmt.reads[-2].source, stmt.reads[-1].source
    _inline_views(sch, block, a_buffer)
    trial = sch.copy()
    if not _inline_views(trial, trial.get_sblock(stmt.name_hint), b_buffer):
        return None
    if _columns_contiguous(trial, trial.get_sblock(stmt.name_hint)):
        _inline_views(sch, block, b_buffer)
        return None
    (last,) = [p for p in sch.get_producers(block)
               if sch.get(p).writes[0].source.same_as(b_buffer)]
    _inline_views(sch, last, sch.get(last).reads[0].source)
    return str(sch.get(last).name_hint)


def _view_per_panel(sch, view: str, outer, lanes: int) -> bool:
    """Compute B's (folded) view block at the parallel loop: each iteration copies
    its ``K x nr`` panel out of the source, contiguous for the register tile.  False
    when it cannot move there (the view then stays a pass of its own)."""
    block = sch.get_sblock(view)
    try:
        sch.compute_at(block, outer)
    except Exception:  # noqa: BLE001 - a schedule error leaves the schedule as it was
        return False
    inner = sch.get_loops(block)[-1]
    extent = static_dim(sch.get(inner).extent)
    if extent is not None and extent % lanes == 0:
        _, vector = sch.split(inner, [None, lanes])
        sch.vectorize(vector)
    return True


def _columns_contiguous(sch, block) -> bool:
    """B's read in the matmul moves by one element along its last axis per column."""
    stmt = sch.get(block)
    column = [iv.var for iv in stmt.iter_vars if int(iv.iter_type) == 0][-1]
    region = stmt.reads[-1].region
    analyzer = tvm.sym.Analyzer()  # the iteration ranges fold the views' div / mod
    for iv in stmt.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    for axis, extent in enumerate(region):
        coefficients = tvm.sym.detect_linear_equation(analyzer.simplify(extent.min),
                                                      [column])
        want = 1 if axis == len(region) - 1 else 0
        if len(coefficients) != 2 or static_dim(coefficients[0]) != want:
            return False
    return True


def _inline_packed_weight(sch, block, cols) -> "int | None":
    """Read a compile-time packed weight in place: when B is ``reshape(permute_dims(W,
    [1, 0, 2]), [K, N])`` of a ``[N / nr, K, nr]`` parameter (see ``pack_dense_weight``
    in :mod:`..rewrite`), inline both view blocks, so the matmul reads ``W[j // nr, k,
    j % nr]``: each parallel iteration streams one contiguous ``K x nr`` panel, with no
    copy at run time.  Returns ``nr``, or None (B left as it is)."""
    if cols is None:
        return None
    b_buffer = sch.get(block).reads[-1].source
    producers = [p for p in sch.get_producers(block)
                 if sch.get(p).writes[0].source.same_as(b_buffer)]
    if len(producers) != 1:
        return None
    chain = [producers[0]]
    inner = sch.get_producers(chain[0])
    if len(inner) != 1:
        return None
    chain.append(inner[0])
    if sch.get_producers(chain[1]) or len(sch.get(chain[1]).reads) != 1:
        return None
    for view in chain:
        stmt = sch.get(view)
        if SCHEDULE_ATTR in stmt.annotations or len(stmt.reads) != 1 or \
                any(int(iv.iter_type) != 0 for iv in stmt.iter_vars):
            return None
    source = sch.get(chain[1]).reads[0].source
    shape = [static_dim(d) for d in source.shape]
    b_shape = [static_dim(d) for d in b_buffer.shape]
    if len(shape) != 3 or len(b_shape) != 2 or None in shape or None in b_shape or \
            b_shape != [shape[1], shape[0] * shape[2]] or shape[0] * shape[2] != cols:
        return None
    for view in chain:
        sch.compute_inline(view)
    return shape[2]


def _epilogue_per_tile(sch, epilogue, io, lanes, ctx) -> None:
    """Copy each tile out of the padded result (with the bias / activation) right after
    it is computed, while it is in L1, instead of in a pass of its own.  Its rows are
    vectorized when the columns are static (``lanes``): only the padded rows are
    guarded then; padded columns leave a guarded scalar row to LLVM."""
    try:
        sch.reverse_compute_at(epilogue, io)
    except Exception:  # noqa: BLE001 - then the epilogue runs as a pass of its own
        return
    ctx.done.add(str(sch.get(epilogue).name_hint))
    if lanes is not None:
        column = sch.get_loops(epilogue)[-1]
        if static_dim(sch.get(column).extent) is not None and \
                static_dim(sch.get(column).extent) % lanes == 0:
            _, vector = sch.split(column, [None, lanes])
            sch.vectorize(vector)


def _register_tile(sch, ii, ji, rows_tile: int, cols_tile: int, lanes: int) -> None:
    """Rows unrolled, columns as whole vectors: ``ji`` is split into unrolled
    vectors of exactly ``lanes`` (LLVM handles a 48-wide vector badly: a 4x48
    tile ran 10x slower than 4x(3x16))."""
    if ji is not None and cols_tile > 1:
        # a GEMV panel of half vectors (1000 columns: 40 = 5 x 8 lanes) splits the same way
        vector = lanes if cols_tile % lanes == 0 else math.gcd(cols_tile, lanes)
        if cols_tile > vector >= MIN_VECTOR and cols_tile % vector == 0:
            jv, jl = sch.split(ji, [None, vector])
            sch.unroll(jv)
            sch.vectorize(jl)
        else:
            sch.vectorize(ji)
    if ii is not None and rows_tile > 1:
        sch.unroll(ii)


def _pack_b_panel(sch, block, outer, row_tiles: int, cols_tile: int, lanes: int) -> None:
    """Copy B's ``K x cols_tile`` panel to a contiguous buffer at the parallel loop."""
    b_buffer = sch.get(block).reads[-1].source
    b_shape = [static_dim(d) for d in b_buffer.shape]
    if row_tiles < 2 or None in b_shape[-2:] or len(b_shape) < 2 or cols_tile % lanes:
        return  # no reuse across row tiles, or a 1-D operand
    panel_bytes = b_shape[-2] * cols_tile * tvm.runtime.DataType(str(b_buffer.dtype)).bits // 8
    if panel_bytes < PACK_MIN_PANEL_BYTES:
        return
    index = [i for i, region in enumerate(sch.get(block).reads)
             if region.source.same_as(b_buffer)][0]
    panel = sch.cache_read(block, index, "global")
    sch.compute_at(panel, outer)
    inner = sch.get_loops(panel)[-1]
    if int(sch.get(inner).extent) % lanes == 0:
        _, vector = sch.split(inner, [None, lanes])
        sch.vectorize(vector)


# ----------------------------------------------------------------- panel prefetch
# A packed weight is streamed from memory once per model run (a BERT layer has 28 MB
# of weights, more than the caches keep between runs): the first row tile of every
# panel waited on memory.  While a parallel iteration computes panel p, it prefetches
# panel p + 1 into L2, a few cache lines before every chunk of PREFETCH_CHUNK k steps,
# spread over all its row tiles, so the next panel is cached when the iteration moves
# on (bert_layer, 1 thread: 12.1 -> 10.9 ms).  The schedule splits and marks the
# reduction loop, :mod:`..prefetch` adds the statements after scheduling.  Not in the
# innermost reduction loop: before a chunk the accumulators stay in registers for the
# chunk's 64 steps.
PREFETCH_CHUNK = 64  # k steps between two prefetch bursts
MIN_PREFETCH_CHUNK = 8  # fewer: not worth reloading the accumulators around a burst
PREFETCH_AHEAD = 1  # panels (2 measured slower: 11.3 vs 11.0 ms)


def _mark_panel_prefetch(sch, block, k, row_tiles: int):
    """Split the reduction loop ``k`` (inside the row-tile loop, inside the parallel
    panel loop) of a matmul reading a packed ``[N / nr, K, nr]`` weight into chunks
    and mark the chunk loop; returns the loop to decompose the reduction at."""
    weight = sch.get(block).reads[-1].source
    shape = [static_dim(d) for d in weight.shape]
    depth = static_dim(sch.get(k).extent)
    if len(shape) != 3 or None in shape or depth is None:
        return k
    chunk = divisor_at_most(depth, PREFETCH_CHUNK)
    if chunk < MIN_PREFETCH_CHUNK:
        return k
    # a K-blocked partial product reduces over one block of the panel's depth
    blocks = int(sch.get(block).annotations.get(KSPLIT_ATTR, 1))
    if shape[1] != depth * blocks:
        return k
    ko, _ = sch.split(k, [None, chunk])
    prefetch.mark(sch, ko, "panel", str(weight.name), row_tiles, *shape, blocks)
    return ko


@prefetch.register_prefetch("panel")
def _panel_prefetch(site: prefetch.PrefetchSite):
    """The prefetch loop to put before a chunk (``site.loop``: the chunk loop ``ko``),
    or None when the flat weight buffer is not found or the loop is not where the
    schedule put it.  Its parent is the row-tile loop ``io`` (or none, with a single
    row tile: that loop was folded away) and the enclosing parallel loop runs over the
    panels ``p``.  Chunk ``ko`` of row tile ``io`` fetches lines ``[(io * KO + ko) *
    per, ... + per)`` of the next panel; every address is clamped into the weight (the
    last panel fetches itself).  (A GEMV is not marked: it only streams its weight,
    which the hardware prefetcher follows.)  A K-blocked partial product (``blocks``
    > 1) runs over (reduction block, panel) pairs, block-major: the next pair's block
    of its panel is fetched."""
    name = str(site.mark[0])
    row_tiles, panels, depth, width, blocks = (int(v) for v in site.mark[1:])
    weight = site.buffers.get(name)
    panel_loop = site.parallel
    parent = site.enclosing[-1] if site.enclosing else None
    if weight is None or panel_loop is None:
        return None
    if parent is not None and not parent.same_as(panel_loop):
        row_tile = parent.loop_var
    elif row_tiles == 1:
        row_tile = 0
    else:
        return None
    loop = site.loop
    lines = max(1, depth // blocks * width // prefetch.elements_per_line(weight))
    chunks = int(loop.extent)
    if blocks > 1:  # the parallel loop is (block, panel), block-major
        pair = tvm.tirx.min(panel_loop.loop_var + PREFETCH_AHEAD, blocks * panels - 1)
        start = tvm.tirx.floormod(pair, panels) * (depth * width) + \
            tvm.tirx.floordiv(pair, panels) * (depth // blocks * width)
    else:
        nxt = tvm.tirx.min(tvm.tirx.floormod(panel_loop.loop_var, panels) + PREFETCH_AHEAD,
                           panels - 1)
        start = nxt * (depth * width)
    return prefetch.spread_prefetch(weight, start, lines, row_tiles * chunks,
                                    row_tile * chunks + loop.loop_var)
