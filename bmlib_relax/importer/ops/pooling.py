"""Pooling: windowed max/avg (1d/2d/3d), global and adaptive pools.

Relay's pool attribute defaults (layout ``NC[D]HW``, ``ceil_mode=False``,
``count_include_pad=False``, padding ``0``) are spelled out so a Relax default
change can never alter an import.  ``nn.global_avg_pool2d`` imports as
``adaptive_avg_pool2d(x, (1, 1))`` in the same layout.  ``nn.adaptive_max_pool*`` (which
v0.19's ``global_max_pool{1,3}d`` builders made) lowers through topi's ``adaptive_pool``.
``out_layout`` is ignored, as v0.19's pool type relations and computes ignored it (only
its layout-inference used it): the result is in ``layout``.

Two changes of TVM's topi since v0.19 are undone here: with ``ceil_mode`` v0.19
kept a last window that starts in the after-padding (0.27 drops it: a smaller
result), and an integer average came back in Relay's type, the input dtype
(0.27 divides by an int64 / int32 count and returns that dtype).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from tvm import relax, te, tirx, topi

from ..registry import register_converter
from ._utils import (
    check_nonempty_average, check_reads_elements, check_sliding_window, dtype_of,
    expand_padding, repeat_to, shape_of,
)
from .layout import axis_names, spatial_axes, spatial_extents

_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}

_MAX_POOLS = {1: relax.op.nn.max_pool1d, 2: relax.op.nn.max_pool2d, 3: relax.op.nn.max_pool3d}
_AVG_POOLS = {1: relax.op.nn.avg_pool1d, 2: relax.op.nn.avg_pool2d, 3: relax.op.nn.avg_pool3d}
_ADAPTIVE_AVG_POOLS = {1: relax.op.nn.adaptive_avg_pool1d, 2: relax.op.nn.adaptive_avg_pool2d,
                       3: relax.op.nn.adaptive_avg_pool3d}


def _pool(relax_op, ndim: int, is_avg: bool):
    def convert(inputs, attrs, ctx):
        data = inputs[0]
        window = _Window(repeat_to(attrs["pool_size"], ndim),  # required
                         repeat_to(attrs.get("strides", 1), ndim),
                         expand_padding(attrs.get("padding", 0), ndim),
                         repeat_to(attrs.get("dilation", 1), ndim))
        layout = attrs.get("layout") or _LAYOUTS[ndim]
        spatial = spatial_extents(shape_of(data), layout)
        if len(spatial) == ndim:
            check_sliding_window(spatial, window.pool_size, window.strides, window.padding,
                                 window.dilation, ctx)
        ceil_mode = bool(attrs.get("ceil_mode", False))
        # max pools ignore it; Relay's avg pools default to excluding padding.
        include_pad = bool(attrs.get("count_include_pad", False)) if is_avg else False
        padding, pre_pad, fix_counts = window.padding, None, None
        if ceil_mode and _ceil_drops_a_window(spatial, window):
            if include_pad:
                fix_counts = _nonpositive_counts(data, spatial, window, layout, ctx)
                pre_pad = _pad_width(data, layout, padding)
            padding = _ceil_as_padding(padding, window.strides, include_pad)
            ceil_mode, include_pad = False, False
        kwargs = dict(pool_size=window.pool_size, strides=window.strides, padding=padding,
                      dilation=window.dilation, ceil_mode=ceil_mode,
                      count_include_pad=include_pad, layout=layout)
        if is_avg and np.dtype(dtype_of(data)).kind in "iu":
            return ctx.bb.call_te(_integer_avg_pool, data, ndim, pre_pad, **kwargs)
        if pre_pad is not None:
            data = ctx.emit(relax.op.nn.pad(data, pre_pad))
        out = relax_op(data, **kwargs)
        if fix_counts is not None:
            out = _divide_by_nonpositive_counts(ctx.emit(out), fix_counts)
        return out

    return convert


class _Window:
    """A pool's window attributes, ``padding`` as ``[before..., after...]``."""

    def __init__(self, pool_size: Sequence[int], strides: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int]):
        self.pool_size, self.strides = list(pool_size), list(strides)
        self.padding, self.dilation = list(padding), list(dilation)

    def v19_extent(self, i: int, size: int) -> int:
        """The output extent in spatial dim ``i`` under ceil_mode, as v0.19's
        ``calculate_pool_dimension`` (src/relay/op/nn/pooling_common.h) and its topi
        ``pool_impl_nd`` sized it: ``(in + pad - span + stride - 1) / stride + 1``."""
        ndim = len(self.pool_size)
        span = (self.pool_size[i] - 1) * self.dilation[i] + 1
        padded = size + self.padding[i] + self.padding[ndim + i]
        return (padded - span + self.strides[i] - 1) // self.strides[i] + 1


def _ceil_drops_a_window(spatial: Sequence, window: _Window) -> bool:
    """Whether TVM 0.27's topi ``pool_impl_nd`` would drop the last ceil_mode window of a
    spatial dim, one that starts at or past ``in + pad_before`` (a rule topi gained after
    v0.19); a symbolic extent may, so it counts as dropping."""
    for i, size in enumerate(spatial):
        if not isinstance(size, int):
            return True
        last = window.v19_extent(i, size) - 1
        if last * window.strides[i] >= size + window.padding[i]:
            return True
    return False


def _ceil_as_padding(padding: Sequence[int], strides: Sequence[int],
                     padded_input: bool) -> list[int]:
    """ceil_mode as explicit after-padding, which is how v0.19's ``pool_impl_nd``
    implemented it (``pad_tail += stride - 1``, then the floor output size): its max
    pads with ``min_value`` and its count_include_pad=False divisor counts input
    elements only, so neither sees the difference.  ``padded_input``: the Relay padding
    is already in the data (see :func:`_pool`), only the ceil offset remains."""
    ndim = len(strides)
    before = [0] * ndim if padded_input else list(padding[:ndim])
    after = [s - 1 for s in strides] if padded_input else \
        [p + s - 1 for p, s in zip(padding[ndim:], strides)]
    return before + after


def _pad_width(data: relax.Expr, layout: str, padding: Sequence[int]) -> list[int]:
    """``nn.pad`` widths putting Relay's pool ``padding`` into the data, with zeros.

    v0.19's count_include_pad divisor counts the padded cells of a window up to
    ``in + pad_after - 1`` but not the ceil_mode offset beyond (``end = min(end,
    in + pad_tail - 1 - offset)`` in ``pool_impl_nd``); on the padded data the
    count_include_pad=False divisor counts exactly those cells."""
    ndim = len(padding) // 2
    width = [0] * (2 * len(shape_of(data)))
    for i, axis in enumerate(spatial_axes(layout)):
        width[2 * axis], width[2 * axis + 1] = padding[i], padding[ndim + i]
    return width


def _window_counts(size: int, window: _Window, i: int) -> list[int]:
    """v0.19 ``pool_impl_nd``'s count_include_pad window count per output index of
    spatial dim ``i``: ``(min(start + (k - 1) * d, in + pad_after - 1) - start) / d + 1``
    with TIR's truncating ``/``; 0 or negative for a window past even the padding."""
    ndim = len(window.pool_size)
    k, s, d = window.pool_size[i], window.strides[i], window.dilation[i]
    counts = []
    for o in range(window.v19_extent(i, size)):
        start = o * s - window.padding[i]
        end = min(start + (k - 1) * d, size + window.padding[ndim + i] - 1)
        counts.append(int((end - start) / d) + 1)  # C division: toward zero
    return counts


def _nonpositive_counts(data: relax.Expr, spatial: Sequence, window: _Window, layout: str,
                        ctx):
    """The product of v0.19's count_include_pad window counts, shaped to broadcast over
    the pool's result, when some is 0 or negative (else None).

    Only a window past the padded input has one (stride > pool * dilation); its sum is
    0, and v0.19 divided it by that count without the ``max(count, 1)`` of its other
    branch: NaN (0 / 0) or -0.0 for floats; an integer division by 0 is refused."""
    per_dim = []
    for i, size in enumerate(spatial):
        k, s, d = window.pool_size[i], window.strides[i], window.dilation[i]
        if isinstance(size, int):
            per_dim.append(_window_counts(size, window, i))
        elif s > k * d:  # a window may start past the padding: its count depends on size
            raise ctx.error(f"ceil_mode with count_include_pad and strides={window.strides} "
                            f"beyond pool_size * dilation needs static spatial dims (a "
                            f"window past the padding divides by its count), got {spatial}")
        else:
            per_dim.append([1])  # every count positive: it changes no sign
    if all(c > 0 for counts in per_dim for c in counts):
        return None
    product = np.ones([1], dtype=np.int64)
    for counts in per_dim:
        product = np.multiply.outer(product, np.asarray(counts, dtype=np.int64))
    product = product.reshape(product.shape[1:])
    dtype = dtype_of(data)
    if np.dtype(dtype).kind in "iu" and not product.all():
        raise ctx.error("a ceil_mode window past the padded input divides its integer sum "
                        "by a count of 0 (count_include_pad=True), as v0.19's "
                        "topi pool_impl_nd did")
    names = axis_names(layout)
    shape = [1] * len(names)
    for i, axis in enumerate(spatial_axes(layout)):
        shape[axis] = product.shape[i]
    return product.reshape(shape)


def _divide_by_nonpositive_counts(out: relax.Expr, counts: np.ndarray) -> relax.Expr:
    """``out`` (float) with v0.19's value ``0 / count`` where a window's count is not
    positive (there ``out``, which divided the same 0 sum by ``max(count, 1)``, holds
    +0; an integer pool needs no change: 0 / negative is 0, a count of 0 is refused)."""
    dtype = dtype_of(out)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.zeros(counts.shape, dtype) / counts.astype(dtype)
    return relax.op.where(relax.const(counts <= 0), relax.const(values, dtype), out)


_TOPI_POOLS = {1: topi.nn.pool1d, 2: topi.nn.pool2d, 3: topi.nn.pool3d}
_TOPI_ADAPTIVE_POOLS = {1: topi.nn.adaptive_pool1d, 2: topi.nn.adaptive_pool,
                        3: topi.nn.adaptive_pool3d}


def _integer_avg_pool(data: te.Tensor, ndim: int, pre_pad, pool_size, strides, padding,
                      dilation, ceil_mode, count_include_pad, layout) -> te.Tensor:
    """An integer average pool as topi computes it, returned in the input dtype,
    Relay's type of the result (one PrimFunc: ``call_te``).

    v0.19's ``pool_impl_nd`` summed in the input dtype unpadded, and in int32 padded
    (its ``pad(x, ..., 0)`` promotes int8/int16 to the int32 pad value), then divided
    by an int32 count (``div(pool_sum, num_el)``, truncating): int32 data gave int32;
    int8/int16/uint data gave int32 where Relay's type said the input dtype, a build
    v0.19 could not run: the Relay type's dtype is taken (the quotient, at most the
    largest input in magnitude, fits in it).  TVM 0.27's topi computes the same sums
    and quotients but divides by an int64 count and returns int64; Relax's avg_pool
    still calls its result the input dtype, which a cast after it would not undo (a
    bmlib-offloaded consumer then got int64 data where it took int8)."""
    if pre_pad is not None:  # Relay's padding, counted by count_include_pad: in dtype
        data = topi.nn.pad(data, pre_pad[0::2], pre_pad[1::2],
                           pad_value=tirx.const(0, data.dtype))
    out = _TOPI_POOLS[ndim](data, pool_size, strides, dilation, padding, "avg", ceil_mode,
                            layout, count_include_pad)
    return topi.cast(out, data.dtype)


def _integer_adaptive_avg_pool(data: te.Tensor, ndim: int, size, layout) -> te.Tensor:
    """An integer adaptive average as topi computes it, in the input dtype (Relay's
    type).  v0.19's ``adaptive_pool_impl`` summed in the input dtype and divided by the
    window count cast to it (:func:`_check_count_fits` refuses a count that does not
    fit): the input dtype.  TVM 0.27 divides by an int32 count (int8 in: int32 out,
    while Relax calls it int8), with the same quotient."""
    out = _TOPI_ADAPTIVE_POOLS[ndim](data, size, "avg", layout)
    return topi.cast(out, data.dtype)


def _adaptive_avg(data: relax.Expr, ndim: int, size, layout: str, ctx):
    """Relax's adaptive average pool; for integer data :func:`_integer_adaptive_avg_pool`."""
    if np.dtype(dtype_of(data)).kind not in "iu":
        return _ADAPTIVE_AVG_POOLS[ndim](data, size, layout=layout)
    _check_count_fits(data, layout, size, ctx)
    if size is None:  # keeps the spatial size
        size = spatial_extents(shape_of(data), layout)
    return ctx.bb.call_te(_integer_adaptive_avg_pool, data, ndim, list(size), layout)


def _adaptive_output_size(data: relax.Expr, attrs, ndim: int, layout: str):
    """``output_size`` as Relay's AdaptivePool{1,2,3}DRel read it: one value for every
    spatial dim, a None entry keeping that dim of the input, no value keeping them all
    (returned as None)."""
    size = attrs.get("output_size")
    if size is None:
        return None
    size = list(size) if isinstance(size, (list, tuple)) else [size]
    size = size * ndim if len(size) == 1 else size
    spatial = [shape_of(data)[layout.index(c)] for c in _LAYOUTS[ndim][2:]]
    return [spatial[i] if s is None else int(s) for i, s in enumerate(size)]


def _adaptive_avg_pool(ndim: int):
    def convert(inputs, attrs, ctx):
        layout = attrs.get("layout") or _LAYOUTS[ndim]
        _check_spatial_nonempty(inputs[0], layout, ctx)
        size = _adaptive_output_size(inputs[0], attrs, ndim, layout)
        return _adaptive_avg(inputs[0], ndim, size, layout, ctx)

    return convert


def _adaptive_max_pool(ndim: int):
    """``nn.adaptive_max_pool{1,2,3}d`` (also what v0.19's ``global_max_pool{1,3}d``
    builders made): topi's ``adaptive_pool`` with ``"max"``, the compute v0.19 lowered
    it to (Relax has no adaptive max pool).  Window ``o`` of ``m`` over ``n`` input
    elements spans ``[floor(o*n/m), ceil((o+1)*n/m))``, never empty for ``n >= 1``; an
    empty input dim has nothing to take the maximum of and is refused."""
    def convert(inputs, attrs, ctx):
        data = inputs[0]
        layout = attrs.get("layout") or _LAYOUTS[ndim]
        size = _adaptive_output_size(data, attrs, ndim, layout)
        dims = shape_of(data)
        axes = spatial_axes(layout)
        out_dims = list(dims)
        for axis, extent in zip(axes, size if size is not None else [dims[a] for a in axes]):
            out_dims[axis] = extent
        check_reads_elements(data, axes, out_dims, ctx, "takes the maximum")
        if size is None:  # keeps the spatial size
            size = spatial_extents(dims, layout)
        return ctx.bb.call_te(_TOPI_ADAPTIVE_POOLS[ndim], data, list(size), "max", layout)

    return convert


for _ndim in (1, 2, 3):
    register_converter(f"nn.max_pool{_ndim}d")(_pool(_MAX_POOLS[_ndim], _ndim, False))
    register_converter(f"nn.avg_pool{_ndim}d")(_pool(_AVG_POOLS[_ndim], _ndim, True))
    register_converter(f"nn.adaptive_avg_pool{_ndim}d")(_adaptive_avg_pool(_ndim))
    register_converter(f"nn.adaptive_max_pool{_ndim}d")(_adaptive_max_pool(_ndim))


def _check_spatial_nonempty(data, layout: str, ctx) -> None:
    """An adaptive or global average over an empty spatial dim divides by 0."""
    check_nonempty_average(data, spatial_axes(layout), ctx)


def _check_count_fits(data, layout: str, size, ctx) -> None:
    """Refuse an integer adaptive (or global) average whose window count does not fit in
    the input dtype: v0.19's ``adaptive_pool_impl`` computed the divisor as
    ``cast(x->dtype, extent)`` products, so an int8 window of 144 elements divided by a
    wrapped count (or, with constant extents, failed its build on the int8 literal)."""
    dtype = dtype_of(data)
    if np.dtype(dtype).kind not in "iu":
        return
    dims = spatial_extents(shape_of(data), layout)
    out = size if size is not None else dims
    largest = 1
    for n, m in zip(dims, out):
        if not (isinstance(n, int) and isinstance(m, int)) or m < 1:
            return
        largest *= max(-(-(o + 1) * n // m) - (o * n // m) for o in range(m))
    if largest > np.iinfo(dtype).max:
        raise ctx.error(f"averages windows of up to {largest} elements: the count, which "
                        f"v0.19's adaptive_pool_impl computed in the input dtype, does not "
                        f"fit in {dtype}")


@register_converter("nn.global_avg_pool2d")
def _global_avg_pool2d(inputs, attrs, ctx):
    layout = attrs.get("layout") or "NCHW"
    _check_spatial_nonempty(inputs[0], layout, ctx)
    return _adaptive_avg(inputs[0], 2, (1, 1), layout, ctx)


@register_converter("nn.global_max_pool2d")
def _global_max_pool2d(inputs, attrs, ctx):
    layout = attrs.get("layout") or "NCHW"
    spatial = [layout.index("H"), layout.index("W")]
    dims = shape_of(inputs[0])
    check_reads_elements(inputs[0], spatial, [1 if i in spatial else d for i, d in
                                              enumerate(dims)], ctx, "takes the maximum")
    return relax.op.max(inputs[0], axis=spatial, keepdims=True)


