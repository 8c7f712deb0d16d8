"""max_pool2d on NCHW as two separable passes: rows (vectorized), then columns.

TOPI's pool2d reduces a KxK window per output pixel with a padding test on
every tap, which the generic reduction rule can only run in parallel: nothing
is vectorized.  The max of a window is the max over its columns of the max
over its rows, so per channel and output row this template first takes the
max of the K input rows the window spans, along the whole input width (whole
vectors, contiguous loads), then the max of K neighbouring entries of that
one row per output pixel.  ResNet-18's 3x3/2 pool on 64x112x112: 0.14 ms vs
0.38 ms for TOPI's (one thread, CPU time; docs/drafts/h-perf.md).

Padding: a max pool ignores padded taps, so a tap outside the input can read
the nearest edge row/column instead, which is in the same window whenever
each padding is smaller than the window (then every window holds at least one
real row and column, and the nearest edge one among them).  Other cases
(padding >= window, ceil_mode, dilation, another layout, symbolic dims) keep
TOPI's compute (:func:`max_pool2d_fast_path` says which).

NaN: a float window holding a NaN gives NaN (:func:`nan_max`), as numpy, PyTorch
and IEEE 754-2019's ``maximum`` do.  TVM's ``max`` is ``a > b ? a : b``, which
keeps or drops a NaN by where it sits in the visiting order: TVM's own pool gave
2 for the window ``[4, NaN, 2, 1]`` and -3.4e38 beside a NaN in a padded corner,
and this template, visiting rows first, gave other values again.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from tvm import te, tirx

from ..schedule import divisor_at_most, write_buffer
from .registry import SCHEDULE_ATTR, register_schedule

ROWS_BLOCK = "bmlib_maxpool_rows"
_BLOCKED = re.compile(r"NCHW(\d+)c")


def _static(dims) -> Optional[list[int]]:
    try:
        return [int(d) for d in dims]
    except TypeError:  # a symbolic dim
        return None


def max_pool2d_fast_path(data: te.Tensor, pool_size: Sequence[int], strides: Sequence[int],
                         dilation: Sequence[int], padding: Sequence[int], ceil_mode: bool,
                         layout: str) -> Optional[te.Tensor]:
    """The separable max pool of ``data``, or None when it does not apply."""
    shape = _static(data.shape)
    blocked = _BLOCKED.fullmatch(layout)
    if (layout != "NCHW" and blocked is None) or ceil_mode or shape is None or \
            any(d != 1 for d in dilation):
        return None
    if len(padding) == 2:
        padding = [padding[0], padding[1], padding[0], padding[1]]
    kh, kw = pool_size
    top, left, bottom, right = padding
    if max(top, bottom) >= kh or max(left, right) >= kw:
        return None
    n, c, h, w = shape[:4]
    sy, sx = strides
    oh = (h + top + bottom - kh) // sy + 1
    ow = (w + left + right - kw) // sx + 1
    if oh < 1 or ow < 1:
        return None

    def clamp(value, upper):
        return tirx.max(tirx.min(value, upper), 0)

    if blocked is not None:
        return _blocked_max_pool(data, (kh, kw), (sy, sx), (top, left), (oh, ow), clamp)

    reducer = _max_reducer(str(data.dtype))
    ky = te.reduce_axis((0, kh), name="ky")
    rows = te.compute(
        (n, c, oh, w),
        lambda nn, cc, y, x: reducer(data[nn, cc, clamp(y * sy + ky - top, h - 1), x], axis=ky),
        name=ROWS_BLOCK)
    kx = te.reduce_axis((0, kw), name="kx")
    return te.compute(
        (n, c, oh, ow),
        lambda nn, cc, y, x: reducer(rows[nn, cc, y, clamp(x * sx + kx - left, w - 1)], axis=kx),
        name="bmlib_maxpool_cols", attrs={SCHEDULE_ATTR: "bmlib.max_pool2d_separable"})


def nan_max(a, b, dtype: str):
    """``max(a, b)`` of ``dtype`` that is NaN when either is: LLVM's ``llvm.maximum``
    (IEEE 754-2019 ``maximum``; vmaxps plus a NaN fix-up on x86).  Integers take
    TVM's ``max``.

    Not ``a > b || isnan(a) ? a : b``: TVM's vectorizer scalarizes ``isnan`` (LLVM
    then gathered and scattered every element: ResNet's stem pool 0.25 -> 1.9 ms),
    and TVM's simplifier folds ``a != a`` to false."""
    if not dtype.startswith(("float", "bfloat")):
        return tirx.max(a, b)
    return tirx.call_llvm_pure_intrin(dtype, "llvm.maximum", a, b)


def _max_reducer(dtype: str):
    """The max reduction over an axis: :func:`nan_max` for floats."""
    if not dtype.startswith(("float", "bfloat")):
        return te.max
    return te.comm_reducer(lambda a, b: nan_max(a, b, dtype), lambda t: tirx.min_value(t),
                           name="nan_max")


def _window_max(tap, count: int, dtype: str):
    """max(tap(0), ..., tap(count - 1)) by :func:`nan_max`, unrolled: no reduction to
    schedule."""
    value = tap(0)
    for k in range(1, count):
        value = nan_max(value, tap(k), dtype)
    return value


def _blocked_max_pool(data, kernel, strides, padding, out_size, clamp):
    """The separable max pool on NCHW{b}c data (see ..blocked_layout): rows, then
    columns, each an unrolled max over the window's taps, the ``b`` channels of a
    block (contiguous) the vectorized axis."""
    n, cb, h, w, block = (int(d) for d in data.shape)
    dtype = str(data.dtype)
    (kh, kw), (sy, sx), (top, left), (oh, ow) = kernel, strides, padding, out_size
    rows = te.compute(
        (n, cb, oh, w, block),
        lambda nn, c, y, x, b: _window_max(
            lambda k: data[nn, c, clamp(y * sy + k - top, h - 1), x, b], kh, dtype),
        name=ROWS_BLOCK)
    return te.compute(
        (n, cb, oh, ow, block),
        lambda nn, c, y, x, b: _window_max(
            lambda k: rows[nn, c, y, clamp(x * sx + k - left, w - 1), b], kw, dtype),
        name="bmlib_maxpool_cols", attrs={SCHEDULE_ATTR: "bmlib.max_pool2d_blocked"})


@register_schedule("bmlib.max_pool2d_blocked")
def schedule_max_pool2d_blocked(sch, block, ctx):
    """(batch, channel block, output row) parallel: the row pass for that output row
    (the whole input width) then the column pass, both vectorized over the block."""
    n, c, y, _, b = sch.get_loops(block)
    sch.parallel(sch.fuse(n, c, y))
    sch.vectorize(b)
    rows = sch.get_producers(block)[0]
    sch.compute_at(rows, sch.get_loops(block)[0])
    sch.vectorize(sch.get_loops(rows)[-1])
    ctx.done.add(ROWS_BLOCK)


@register_schedule("bmlib.max_pool2d_separable")
def schedule_max_pool2d_separable(sch, block, ctx):
    """(batch, channel) parallel | output row: the row pass (one row of the input
    width, computed here, whole vectors) then the column pass over it."""
    n, c, y, _, _ = sch.get_loops(block)
    sch.parallel(sch.fuse(n, c))
    rows = sch.get_producers(block)[0]
    sch.compute_at(rows, y)
    # compute_at drops unit loops: a 1-row window (ky) or a 1-column input (width);
    # the loops it keeps stay in order (width, then the window's rows).
    own = list(sch.get_loops(rows)[2:])
    window_rows = int(sch.get(rows).iter_vars[-1].dom.extent)
    if len(own) == 2:
        width, reduce = own
    elif len(own) == 1 and window_rows == 1:
        width, reduce = own[0], None
    else:
        width, reduce = None, (own[0] if own else None)
    if width is not None and reduce is not None:
        sch.reorder(reduce, width)
    if width is not None:
        lanes = ctx.lanes(str(write_buffer(sch, block).dtype))
        vector = divisor_at_most(int(sch.get(width).extent), lanes)
        if vector > 1:
            width, inner = sch.split(width, [None, vector])
            sch.vectorize(inner)
    if reduce is not None or width is not None:
        sch.decompose_reduction(rows, reduce if reduce is not None else width)
    ctx.done.add(ROWS_BLOCK)

