"""Pooling: windowed max/avg (1d/2d/3d), global and adaptive pools.

Relay's pool attribute defaults (layout ``NC[D]HW``, ``ceil_mode=False``,
``count_include_pad=False``, padding ``0``) are spelled out so a Relax default
change can never alter an import.  ``nn.global_avg_pool2d`` imports as
``adaptive_avg_pool2d(x, (1, 1))`` in the same layout.
"""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import (
    check_nonempty_average, check_reads_elements, check_sliding_window, expand_padding,
    repeat_to, shape_of,
)
from .layout import spatial_axes, spatial_extents

_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}

_MAX_POOLS = {1: relax.op.nn.max_pool1d, 2: relax.op.nn.max_pool2d, 3: relax.op.nn.max_pool3d}
_AVG_POOLS = {1: relax.op.nn.avg_pool1d, 2: relax.op.nn.avg_pool2d, 3: relax.op.nn.avg_pool3d}
_ADAPTIVE_AVG_POOLS = {1: relax.op.nn.adaptive_avg_pool1d, 2: relax.op.nn.adaptive_avg_pool2d,
                       3: relax.op.nn.adaptive_avg_pool3d}


def _pool(relax_op, ndim: int, is_avg: bool):
    def convert(inputs, attrs, ctx):
        pool_size = repeat_to(attrs["pool_size"], ndim)  # required
        strides = repeat_to(attrs.get("strides", 1), ndim)
        padding = expand_padding(attrs.get("padding", 0), ndim)
        dilation = repeat_to(attrs.get("dilation", 1), ndim)
        layout = attrs.get("layout") or _LAYOUTS[ndim]
        spatial = spatial_extents(shape_of(inputs[0]), layout)
        if len(spatial) == ndim:
            check_sliding_window(spatial, pool_size, strides, padding, dilation, ctx)
        return relax_op(
            inputs[0],
            pool_size=pool_size,
            strides=strides,
            padding=padding,
            dilation=dilation,
            ceil_mode=bool(attrs.get("ceil_mode", False)),
            # max pools ignore it; Relay's avg pools default to excluding padding.
            count_include_pad=bool(attrs.get("count_include_pad", False)) if is_avg else False,
            layout=layout,
            out_layout=attrs.get("out_layout") or None,
        )

    return convert


def _adaptive_avg_pool(ndim: int):
    def convert(inputs, attrs, ctx):
        layout = attrs.get("layout") or _LAYOUTS[ndim]
        _check_spatial_nonempty(inputs[0], layout, ctx)
        size = attrs.get("output_size")
        if size is not None:
            size = list(size) if isinstance(size, (list, tuple)) else [size]
            size = size * ndim if len(size) == 1 else size
            # A None entry keeps that spatial dim of the input.
            spatial = [shape_of(inputs[0])[layout.index(c)] for c in _LAYOUTS[ndim][2:]]
            size = [spatial[i] if s is None else int(s) for i, s in enumerate(size)]
        return _ADAPTIVE_AVG_POOLS[ndim](inputs[0], size, layout=layout,
                                         out_layout=attrs.get("out_layout") or None)

    return convert


for _ndim in (1, 2, 3):
    register_converter(f"nn.max_pool{_ndim}d")(_pool(_MAX_POOLS[_ndim], _ndim, False))
    register_converter(f"nn.avg_pool{_ndim}d")(_pool(_AVG_POOLS[_ndim], _ndim, True))
    register_converter(f"nn.adaptive_avg_pool{_ndim}d")(_adaptive_avg_pool(_ndim))


def _check_spatial_nonempty(data, layout: str, ctx) -> None:
    """An adaptive or global average over an empty spatial dim divides by 0."""
    check_nonempty_average(data, spatial_axes(layout), ctx)


@register_converter("nn.global_avg_pool2d")
def _global_avg_pool2d(inputs, attrs, ctx):
    layout = attrs.get("layout") or "NCHW"
    _check_spatial_nonempty(inputs[0], layout, ctx)
    return relax.op.nn.adaptive_avg_pool2d(inputs[0], (1, 1), layout=layout,
                                           out_layout=attrs.get("out_layout") or None)


@register_converter("nn.global_max_pool2d")
def _global_max_pool2d(inputs, attrs, ctx):
    layout = attrs.get("layout") or "NCHW"
    if attrs.get("out_layout") not in (None, "", layout):
        raise ctx.unsupported_attr("out_layout", attrs["out_layout"])
    spatial = [layout.index("H"), layout.index("W")]
    dims = shape_of(inputs[0])
    check_reads_elements(inputs[0], spatial, [1 if i in spatial else d for i, d in
                                              enumerate(dims)], ctx, "takes the maximum")
    return relax.op.max(inputs[0], axis=spatial, keepdims=True)


