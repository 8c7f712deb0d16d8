"""Spatial re-arrangements and normalisations Relay has as single ops.

Forms: ``nn.depth_to_space``/``nn.space_to_depth``/``nn.space_to_batch_nd``/
``nn.batch_to_space_nd`` -> ``reshape`` + ``permute_dims`` (+ ``pad`` /
``strided_slice``); ``vision.yolo_reorg`` -> a ``take`` of the flattened
input at the constant positions Relay's reorg reads; ``nn.global_*_pool1d/3d``
-> ``mean``/``max`` over the spatial axes (kept); ``nn.lrn`` and
``nn.l2_normalize`` -> their element-wise formulas; ``image.resize1d`` ->
``resize2d`` on a unit height; ``image.resize3d``/``nn.upsampling3d`` ->
``resize3d``; ``image.affine_grid``/``image.grid_sample`` -> the Relax ops;
``nn.mirror_pad``/``nn.dilate`` -> TOPI's computes (``call_te``).
"""
from __future__ import annotations

import math
from functools import reduce
from operator import mul

import numpy as np
import tvm
from tvm import relax
from tvm.topi import image as topi_image
from tvm.topi import nn as topi_nn

from ..registry import register_converter
from ..run_checks import emit_run_check
from ._utils import (
    check_mirror_range, check_reads_elements, dtype_of, ints, ndim_of, nearest_rounding,
    optional_ints, resize_args, shape_of, size_dims, static_shape,
)


def _prod(values) -> int:
    return reduce(mul, values, 1)


def _to_nchw(data, layout: str, ctx):
    if layout == "NCHW":
        return data
    if layout == "NHWC":
        return ctx.emit(relax.op.permute_dims(data, [0, 3, 1, 2]))  # emitted: shape read next
    raise ctx.unsupported_attr("layout", layout)


def _from_nchw(data, layout: str):
    return data if layout == "NCHW" else relax.op.permute_dims(data, [0, 2, 3, 1])


@register_converter("nn.depth_to_space")
def _depth_to_space(inputs, attrs, ctx):
    layout = attrs.get("layout", "NCHW")
    block = _block_size(attrs, ctx)
    data = _to_nchw(inputs[0], layout, ctx)
    n, c, h, w = static_shape(data, ctx)
    if c < block * block:  # no output channel: v0.19's result was empty
        empty = relax.op.zeros([n, 0, h * block, w * block], dtype_of(data))
        return _from_nchw(empty, layout)
    if c % (block * block):  # Relay's output has c // block**2 channels: it reads the first
        c -= c % (block * block)
        data = relax.op.strided_slice(data, axes=[1], begin=[0], end=[c])
    if attrs.get("mode", "DCR") == "DCR":
        x = relax.op.reshape(data, [n, block, block, c // (block * block), h, w])
        x = relax.op.permute_dims(x, [0, 3, 4, 1, 5, 2])
    else:  # CRD
        x = relax.op.reshape(data, [n, c // (block * block), block, block, h, w])
        x = relax.op.permute_dims(x, [0, 1, 4, 2, 5, 3])
    x = relax.op.reshape(x, [n, c // (block * block), h * block, w * block])
    return _from_nchw(x, layout)


def _block_size(attrs, ctx) -> int:
    block = int(attrs["block_size"])
    if block < 1:
        raise ctx.error(f"block_size={block} must be positive")
    return block


@register_converter("nn.space_to_depth")
def _space_to_depth(inputs, attrs, ctx):
    layout = attrs.get("layout", "NCHW")
    block = _block_size(attrs, ctx)
    data = _to_nchw(inputs[0], layout, ctx)
    n, c, h, w = static_shape(data, ctx)
    if h % block or w % block:  # Relay's output is (h // block, w // block): the rest is dropped
        h, w = h - h % block, w - w % block
        data = relax.op.strided_slice(data, axes=[2, 3], begin=[0, 0], end=[h, w])
    x = relax.op.reshape(data, [n, c, h // block, block, w // block, block])
    x = relax.op.permute_dims(x, [0, 3, 5, 1, 2, 4])
    x = relax.op.reshape(x, [n, c * block * block, h // block, w // block])
    return _from_nchw(x, layout)


@register_converter("nn.space_to_batch_nd")
def _space_to_batch_nd(inputs, attrs, ctx):
    data = inputs[0]
    dims = static_shape(data, ctx)
    blocks = ints(attrs["block_shape"])
    pads = [ints(p) for p in attrs["paddings"]]
    m = len(blocks)
    pad_width = [0, 0]
    for before, after in pads:
        pad_width += [before, after]
    pad_width += [0, 0] * (len(dims) - 1 - m)
    value = float(attrs.get("pad_value", 0))
    x = relax.op.nn.pad(data, pad_width, "constant", value) if any(pad_width) else data
    padded = [dims[0]] + [dims[1 + i] + sum(pads[i]) for i in range(m)] + dims[1 + m:]
    shape = [dims[0]]
    for i in range(m):
        shape += [padded[1 + i] // blocks[i], blocks[i]]
    shape += dims[1 + m:]
    x = relax.op.reshape(x, shape)
    rest = list(range(1 + 2 * m, len(shape)))
    order = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + rest
    x = relax.op.permute_dims(x, order)
    out = [dims[0] * _prod(blocks)] + [padded[1 + i] // blocks[i] for i in range(m)] + \
        dims[1 + m:]
    return relax.op.reshape(x, out)


@register_converter("nn.batch_to_space_nd")
def _batch_to_space_nd(inputs, attrs, ctx):
    data = inputs[0]
    dims = static_shape(data, ctx)
    blocks = ints(attrs["block_shape"])
    crops = [ints(c) for c in attrs["crops"]]
    m = len(blocks)
    batch = dims[0] // _prod(blocks)
    x = relax.op.reshape(data, blocks + [batch] + dims[1:])
    order = [m]
    for i in range(m):
        order += [m + 1 + i, i]
    order += list(range(2 * m + 1, len(dims) + m))
    x = relax.op.permute_dims(x, order)
    full = [batch] + [dims[1 + i] * blocks[i] for i in range(m)] + dims[1 + m:]
    x = relax.op.reshape(x, full)
    axes = list(range(1, m + 1))
    begin = [crops[i][0] for i in range(m)]
    end = [full[1 + i] - crops[i][1] for i in range(m)]
    return relax.op.strided_slice(x, axes, begin, end)


def reorg_positions(dims: list[int], stride: int) -> np.ndarray:
    """Flat input positions Relay's ``vision.yolo_reorg`` reads, in output order."""
    batch, channels, height, width = dims
    out_c = channels // (stride * stride)
    b, k, j, i = np.meshgrid(np.arange(batch), np.arange(channels), np.arange(height),
                             np.arange(width), indexing="ij")
    c2 = k % out_c
    offset = k // out_c
    w2 = i * stride + offset % stride
    h2 = j * stride + offset // stride
    return (w2 + width * stride * (h2 + height * stride * (c2 + out_c * b))).reshape(-1)


@register_converter("vision.yolo_reorg")
def _yolo_reorg(inputs, attrs, ctx):
    data = inputs[0]
    dims = static_shape(data, ctx)
    stride = int(attrs["stride"])
    _check_reorg(dims, stride, ctx)
    positions = reorg_positions(dims, stride).astype("int64")
    flat = relax.op.take(relax.op.reshape(data, [-1]), relax.const(positions, "int64"), axis=0)
    batch, channels, height, width = dims
    return relax.op.reshape(flat, [batch, channels * stride * stride, height // stride,
                                   width // stride])


def _check_reorg(dims: list, stride: int, ctx) -> None:
    """v0.19's reorg read ``channels // stride**2`` channel groups: with channels not a
    multiple of ``stride**2`` (or fewer) it mixed the rest in (or divided by zero)."""
    if len(dims) != 4:
        raise ctx.error(f"expects a 4-D NCHW input, got shape {tuple(dims)}")
    if stride < 1:
        raise ctx.error(f"stride={stride} must be positive")
    if dims[1] % (stride * stride):
        raise ctx.error(f"{dims[1]} channels are not a multiple of stride**2 = "
                        f"{stride * stride}")


@register_converter("nn.lrn")
def _lrn(inputs, attrs, ctx):
    # out = x / (bias + alpha / size * window_sum(x^2))^beta, window centred on ``axis``.
    data = inputs[0]
    dims = shape_of(data)
    size = int(attrs.get("size", 5))
    axis = int(attrs.get("axis", 1))
    dtype = dtype_of(data)
    # v0.19's topi lrn checked these when Relay built it (the window is centred: odd)
    if len(dims) != 4:
        raise ctx.error(f"expects a 4-D input, got shape {tuple(dims)}")
    if size < 1 or size % 2 != 1:  # v0.19: ICHECK_EQ(size % 2, 1), C's remainder (-1 % 2 == -1)
        raise ctx.error(f"size={size}: the window must have an odd size")
    if axis not in (1, 3):
        raise ctx.error(f"axis={axis}: must be 1 (NCHW) or 3 (NHWC)")
    if not dtype.startswith(("float", "bfloat")):
        raise ctx.error(f"takes floats, got {dtype}")
    sq = relax.op.multiply(data, data)
    half = size // 2
    pad_width = []
    for i in range(len(dims)):
        pad_width += [half, half] if i == axis else [0, 0]
    padded = relax.op.nn.pad(sq, pad_width, "constant", 0.0)
    total = None
    for offset in range(size):
        part = relax.op.strided_slice(padded, [axis], [offset], [offset + dims[axis]])
        total = part if total is None else relax.op.add(total, part)
    scale = relax.op.add(relax.const(float(attrs.get("bias", 2)), dtype),
                         relax.op.multiply(relax.const(float(attrs.get("alpha", 1e-4)) / size,
                                                       dtype), total))
    return relax.op.divide(data, relax.op.power(scale,
                                                relax.const(float(attrs.get("beta", 0.75)),
                                                            dtype)))


@register_converter("nn.l2_normalize")
def _l2_normalize(inputs, attrs, ctx):
    data = inputs[0]
    dtype = dtype_of(data)
    if dtype != "float32":
        # v0.19's L2NormToInferUnpack compared the sum with a float32 eps: any other dtype
        # failed BroadcastRel in relay.build
        raise ctx.error(f"{dtype} data: v0.19's relay.build refused it (its SimplifyInference "
                        f"took maximum({dtype} sum, float32 eps))")
    axes = optional_ints(attrs.get("axis"))
    total = relax.op.sum(relax.op.multiply(data, data), axes, keepdims=True)
    eps = relax.const(float(attrs["eps"]), dtype)
    return relax.op.divide(data, relax.op.sqrt(relax.op.maximum(total, eps)))


@register_converter("image.resize1d")
def _resize1d(inputs, attrs, ctx):
    # A unit height added in front of the width: the 2-D resize of an (N, C, 1, W) image.
    args = resize_args(attrs, "NCW", default_rounding="round")
    layout = args.pop("layout")
    if layout not in ("NCW", "NWC"):
        raise ctx.unsupported_attr("layout", layout)
    data = inputs[0]
    roi = args.pop("roi")
    size = size_dims(attrs["size"])
    check_resize_args(args, roi, size, ctx)
    _check_resize_reads(data, [layout.index("W")], size, ctx)
    if args["coordinate_transformation_mode"] in CORNER_MODES:
        # These modes scale by (in - 1) / (out - 1): 0 / 0 on the unit height, so they
        # take TOPI's 1-D resize (on the host) instead.
        return ctx.bb.call_te(
            topi_image.resize1d, data, list(roi or (0.0, 0.0)), size, layout, args["method"],
            args["coordinate_transformation_mode"], args["rounding_method"],
            args["cubic_alpha"], args["cubic_exclude"], args["extrapolation_value"],
            args["out_dtype"], primfunc_name_hint="image_resize1d")
    height_axis = 2 if layout == "NCW" else 1
    x = relax.op.expand_dims(data, [height_axis])
    roi2 = (0.0, roi[0], 1.0, roi[1]) if roi else None
    y = relax.op.image.resize2d(x, [1, size[0]], roi=roi2,
                                layout="NCHW" if layout == "NCW" else "NHWC", **args)
    return relax.op.squeeze(y, [height_axis])


@register_converter("image.resize3d")
def _resize3d(inputs, attrs, ctx):
    args = resize_args(attrs, "NCDHW", default_rounding="round")
    size = size_dims(attrs["size"])
    check_resize_args(args, args["roi"], size, ctx)
    layout = args["layout"]
    if layout in ("NCDHW", "NDHWC"):
        _check_resize_reads(inputs[0], [layout.index(a) for a in "DHW"], size, ctx)
    return relax.op.image.resize3d(inputs[0], size, **args)


def _check_resize_reads(data, spatial: list, size: list, ctx) -> None:
    """A resize to a non-empty image reads its input along ``spatial``: an empty axis
    there has nothing to read (TVM read beside the buffer)."""
    dims = list(shape_of(data))
    if len(dims) <= max(spatial):
        return  # the rank is refused by the op's own checks
    result = [size[spatial.index(i)] if i in spatial else d for i, d in enumerate(dims)]
    check_reads_elements(data, spatial, result, ctx, "resizes")


#: What v0.19's TOPI resize took (``get_inx``, ``get_closest_index``, ``_resize_*``);
#: anything else raised a bare ValueError in its build, as in TVM 0.27's legalization.
_RESIZE_METHODS = ("nearest_neighbor", "linear", "cubic")
_RESIZE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                 "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_ROUNDINGS = ("", "round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def check_resize_args(args: dict, roi, size: list, ctx) -> None:
    """A resize's method, coordinate mode, rounding, ``roi`` and target ``size`` as
    v0.19's TOPI took them (``len(size)`` spatial axes: an roi of twice as many values
    in ``tf_crop_and_resize``; see also :func:`check_corner_mode_size`)."""
    ndim = len(size)
    for name, allowed in (("method", _RESIZE_METHODS),
                          ("coordinate_transformation_mode", _RESIZE_MODES)):
        if args[name] not in allowed:
            raise ctx.error(f"{name}={args[name]!r} is not one of {', '.join(allowed)}")
    if args["method"] == "nearest_neighbor" and args["rounding_method"] not in \
            _NEAREST_ROUNDINGS:
        raise ctx.error(f"rounding_method={args['rounding_method']!r} is not one of "
                        f"{', '.join(repr(r) for r in _NEAREST_ROUNDINGS)}")
    if args["coordinate_transformation_mode"] == "tf_crop_and_resize" and roi and \
            len(roi) != 2 * ndim:
        raise ctx.error(f"roi={list(roi)}: tf_crop_and_resize of {ndim} spatial axes takes "
                        f"{2 * ndim} values")
    check_corner_mode_size(args["coordinate_transformation_mode"], size, ctx)


#: Coordinate modes that map the corner pixels onto each other: they scale an axis by
#: ``(in - 1) / (out - 1)``.
CORNER_MODES = ("align_corners", "tf_crop_and_resize")


def check_corner_mode_size(mode: str, size: list, ctx) -> None:
    """v0.19's TOPI resize scaled an axis of a :data:`CORNER_MODES` mode by ``(in - 1) /
    (out - 1)``: to a size of 1 that is a division by zero, which failed the build
    ("Divide by zero"); TVM 0.27's fails the same way, with no op named."""
    if mode in CORNER_MODES and any(isinstance(d, int) and d == 1 for d in size):
        raise ctx.error(f"size={list(size)}: {mode} scales by (in - 1) / (out - 1), "
                        "a division by zero on the unit dim (Relay could not build it)")


def upsampled_dim(dim: int, scale: float, attr: str, ctx) -> int:
    """``round(dim * scale)``, v0.19's upsampling output dim (``UpSamplingRel`` cast it
    to the input dim's int32): a scale that is not finite, or a result outside int32 or
    negative, had no defined size there and is refused by name."""
    scaled = dim * scale
    if not math.isfinite(scaled) or not 0 <= round(scaled) < 2**31:
        raise ctx.error(f"{attr}={scale}: the output dim round({dim} * {scale}) is not a "
                        "size (v0.19 cast it to int32; the result was undefined)")
    return round(scaled)


@register_converter("nn.upsampling3d")
def _upsampling3d(inputs, attrs, ctx):
    layout = attrs.get("layout") or "NCDHW"
    dims = shape_of(inputs[0])
    scales = [float(attrs.get(k, 1)) for k in ("scale_d", "scale_h", "scale_w")]
    size = []
    for axis_name, scale in zip("DHW", scales):
        dim = dims[layout.index(axis_name)]
        if not isinstance(dim, int):
            raise ctx.error("nn.upsampling3d needs static spatial dims")
        size.append(upsampled_dim(dim, scale, f"scale_{axis_name.lower()}", ctx))
    methods = {"nearest_neighbor": "nearest_neighbor", "trilinear": "linear"}
    method = attrs.get("method", "nearest_neighbor")
    if method not in methods:
        raise ctx.unsupported_attr("method", method)
    mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    check_corner_mode_size(mode, size, ctx)
    # v0.19's upsampling3d left the rounding to resize3d ("": round under align_corners,
    # llvm.round's halves away from zero): nearest_rounding picks 0.27's method for it
    return relax.op.image.resize3d(
        inputs[0], size, layout=layout, method=methods[method],
        coordinate_transformation_mode=mode,
        rounding_method=nearest_rounding(methods[method], mode, ""), cubic_alpha=-0.5)


@register_converter("image.affine_grid")
def _affine_grid(inputs, attrs, ctx):
    target = ints(attrs["target_shape"])
    # v0.19's topi affine_grid asserted these (a 1-row grid divides by 0); TVM 0.27's
    # assert surfaced as a bare AssertionError when the model was built
    if len(target) != 2 or min(target) <= 1:
        raise ctx.error(f"target_shape={target}: needs a height and a width above 1")
    return relax.op.image.affine_grid(inputs[0], target, align_corners=True)


# What v0.19's topi grid_sample took, by the data's rank: methods and the one layout.
_GRID_SAMPLE_FORMS = {4: (("bilinear", "nearest", "bicubic"), "NCHW"),
                      5: (("bilinear", "nearest"), "NCDHW")}


def _check_grid(data, grid, ctx) -> None:
    """The grid holds one coordinate per spatial axis on axis 1 ((N, 2, H, W) for 4-D data,
    (N, 3, D, H, W) for 5-D) and one sampling plan per image: TOPI reads those (v0.19's
    GridSampleRel did not check them and read beside the grid)."""
    rank = ndim_of(data)
    if ndim_of(grid) != rank:
        raise ctx.error(f"the grid must be {rank}-D for {rank}-D data, got "
                        f"{ndim_of(grid)}-D")
    grid_dims, data_dims = shape_of(grid), shape_of(data)
    if isinstance(grid_dims[1], int) and grid_dims[1] != rank - 2:
        raise ctx.error(f"the grid has shape {tuple(grid_dims)}: axis 1 must hold the "
                        f"{rank - 2} coordinates of each sample")
    if all(isinstance(d, int) for d in (grid_dims[0], data_dims[0])) and \
            grid_dims[0] != data_dims[0]:
        raise ctx.error(f"the grid's batch {grid_dims[0]} is not the data's {data_dims[0]}")


@register_converter("image.grid_sample")
def _grid_sample(inputs, attrs, ctx):
    method = attrs.get("method", "bilinear")
    layout = attrs.get("layout", "NCHW")
    padding_mode = attrs.get("padding_mode", "zeros")
    methods, rank_layout = _GRID_SAMPLE_FORMS.get(ndim_of(inputs[0]), ((), None))
    if rank_layout is None:
        raise ctx.error(f"expects a 4-D or 5-D input, got {ndim_of(inputs[0])}-D")
    for name, value, allowed in (("method", method, methods),
                                 ("layout", layout, (rank_layout,)),
                                 ("padding_mode", padding_mode,
                                  ("zeros", "border", "reflection"))):
        if value not in allowed:
            raise ctx.unsupported_attr(name, value)
    _check_grid(inputs[0], inputs[1], ctx)
    return relax.op.image.grid_sample(
        inputs[0], inputs[1], method=method, layout=layout, padding_mode=padding_mode,
        align_corners=bool(attrs.get("align_corners", True)))


# ---------------------------------------------------------------------------- mirror_pad
def _mirror_pad_widths(value, ndim: int, ctx) -> list[tuple[int, int]]:
    """``pad_width`` as (before, after) per axis, as v0.19's MirrorPadRel required: one
    pair per dim, non-negative."""
    pairs = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(pairs) != ndim:
        raise ctx.error(f"the input has {ndim} dims and {len(pairs)} pad width "
                        f"pair{'s' if len(pairs) != 1 else ''}: there must be one per dim")
    out = []
    for axis, pair in enumerate(pairs):
        widths = ints(pair)
        if len(widths) != 2:
            raise ctx.error(f"the pad width of axis {axis} has {len(widths)} values, not a "
                            "pair (before, after)")
        if min(widths) < 0:
            raise ctx.error(f"the pad widths of axis {axis} are {tuple(widths)}: they must "
                            "not be negative")
        out.append((widths[0], widths[1]))
    return out


@register_converter("nn.mirror_pad")
def _mirror_pad(inputs, attrs, ctx):
    """TOPI's ``mirror_pad`` (``call_te``): TVM 0.27's compute is v0.19's."""
    data = inputs[0]
    mode = str(attrs.get("mode", "SYMMETRIC"))
    if mode not in ("SYMMETRIC", "REFLECT"):
        raise ctx.error(f'mode="{mode}": a mirror pad is SYMMETRIC or REFLECT')
    pairs = _mirror_pad_widths(attrs["pad_width"], ndim_of(data), ctx)
    check_mirror_range(data, pairs, mode == "REFLECT", f"a {mode} mirror pad", ctx)
    return ctx.bb.call_te(topi_nn.mirror_pad, data, [b for b, _ in pairs],
                          [a for _, a in pairs], mode)


# -------------------------------------------------------------------------------- dilate
@register_converter("nn.dilate")
def _dilate(inputs, attrs, ctx):
    """TOPI's ``dilate`` (``call_te``): TVM 0.27's compute is v0.19's, ``(n - 1) * s + 1``
    entries per axis.  v0.19's DilateRel wanted one stride per dim; its compute divided
    the index by each stride, so they must be positive; an empty axis dilated would have
    a negative extent."""
    data = inputs[0]
    strides = ints(attrs["strides"])
    dims = shape_of(data)
    if len(strides) != len(dims):
        raise ctx.error(f"the input has {len(dims)} dims and {len(strides)} "
                        f"stride{'s' if len(strides) != 1 else ''}: there must be one per dim")
    if min(strides, default=1) < 1:
        raise ctx.error(f"strides={strides} must be positive")
    for axis, (dim, stride) in enumerate(zip(dims, strides)):
        if stride == 1:
            continue
        if isinstance(dim, int) and dim == 0:
            raise ctx.error(f"axis {axis} is empty: dilated by {stride} it would have a "
                            f"negative extent {1 - stride}")
        if not isinstance(dim, int):
            emit_run_check(ctx.bb, tvm.tirx.GE(dim, tvm.tirx.const(1, str(dim.ty))),
                           ctx.location, ctx.op_name,
                           f"axis {axis} has {{}} entries in this run: dilated by {stride} "
                           "an empty axis would have a negative extent", dim)
    value = float(attrs.get("dilation_value", 0.0))
    return ctx.bb.call_te(topi_nn.dilate, data, strides, value)
