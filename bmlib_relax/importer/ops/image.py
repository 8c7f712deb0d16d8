"""Resizing: ``image.resize2d`` and ``nn.upsampling`` (both ``relax.op.image.resize2d``)."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import (
    check_reads_elements, integer_upscale, nearest_rounding, resize_args, shape_of, size_dims,
)
from .spatial import check_corner_mode_size, check_resize_args, upsampled_dim


@register_converter("image.resize2d")
def _resize2d(inputs, attrs, ctx):
    args = resize_args(attrs, "NCHW", default_rounding="round")
    size = size_dims(attrs["size"])
    check_resize_args(args, args["roi"], size, ctx)
    layout, dims = args["layout"], shape_of(inputs[0])
    if layout in ("NCHW", "NHWC"):
        spatial = [layout.index("H"), layout.index("W")]
        result = [size[spatial.index(i)] if i in spatial else d for i, d in enumerate(dims)]
        check_reads_elements(inputs[0], spatial, result, ctx, "resizes")
    _check_floor_nearest_buildable(args, dims, size, ctx)
    return _resize2d_as_relay(inputs[0], size, args, dims)


def _check_floor_nearest_buildable(args: dict, dims: list, size: list, ctx) -> None:
    """A nearest-neighbour ``asymmetric`` ``floor`` resize to a static size of an input
    whose H or W is known only at run time: topi's ``can_convert_multiply_to_intdiv``
    (v0.19's too) reads ``.value`` of ``size / H`` and failed with a raw AttributeError
    when the model was built.  Refused by name instead."""
    layout = args["layout"]
    if args["method"] != "nearest_neighbor" or \
            args["coordinate_transformation_mode"] != "asymmetric" or \
            args["rounding_method"] != "floor" or layout not in ("NCHW", "NHWC"):
        return
    for axis, out in zip("HW", size):
        if isinstance(out, int) and not isinstance(dims[layout.index(axis)], int):
            raise ctx.error(
                f"a nearest_neighbor asymmetric resize with rounding_method=\"floor\" of "
                f"an input whose {axis} is known only at run time: TVM's resize (as "
                "v0.19's) cannot build it (its integer-division test needs a static "
                f"{axis}); give the input a static {axis}, or another rounding_method")


def _resize2d_as_relay(data, size, args, dims):
    """``relax.op.image.resize2d`` as v0.19's ``_resize_2d`` chose pixels: a nearest-
    neighbour ``asymmetric`` resize indexed each axis that is a whole upscale by integer
    division (:func:`integer_upscale`), ignoring the rounding method, where TVM 0.27 does
    so only for ``floor``.  Both axes whole: ``floor`` is that division.  One axis: the
    two axes are resized one after the other (nearest neighbour is separable), the whole
    one with ``floor``."""
    layout, rounding = args["layout"], args["rounding_method"]
    if args["method"] != "nearest_neighbor" or \
            args["coordinate_transformation_mode"] != "asymmetric" or \
            rounding == "floor" or layout not in ("NCHW", "NHWC"):
        return relax.op.image.resize2d(data, size, **args)
    axes = [layout.index("H"), layout.index("W")]
    whole = [integer_upscale(dims[axis], out) for axis, out in zip(axes, size)]
    if all(whole):
        return relax.op.image.resize2d(data, size, **{**args, "rounding_method": "floor"})
    if not any(whole):
        return relax.op.image.resize2d(data, size, **args)
    first = 0 if whole[0] else 1  # the whole axis, with floor; then the other one
    partial = list(dims[a] for a in axes)
    partial[first] = size[first]
    data = relax.op.image.resize2d(data, partial, **{**args, "rounding_method": "floor"})
    return relax.op.image.resize2d(data, size, **args)


@register_converter("nn.upsampling")
def _upsampling(inputs, attrs, ctx):
    # Relay lowers upsampling to a resize whose size is round(dim * scale), with
    # "asymmetric" coordinates (or "align_corners") and the resize's automatic
    # rounding (floor for nearest neighbour).
    layout = attrs.get("layout") or "NCHW"
    if layout not in ("NCHW", "NHWC"):
        raise ctx.unsupported_attr("layout", layout)
    dims = shape_of(inputs[0])
    if len(dims) != 4:
        raise ctx.error(f"expects a 4-D {layout} input, got shape {tuple(dims)}")
    height, width = dims[layout.index("H")], dims[layout.index("W")]
    if not isinstance(height, int) or not isinstance(width, int):
        raise ctx.error("nn.upsampling needs static spatial dims")
    size = [upsampled_dim(height, float(attrs["scale_h"]), "scale_h", ctx),
            upsampled_dim(width, float(attrs["scale_w"]), "scale_w", ctx)]
    method = attrs.get("method", "nearest_neighbor")
    methods = {"nearest_neighbor": "nearest_neighbor", "bilinear": "linear", "bicubic": "cubic"}
    if method not in methods:
        raise ctx.unsupported_attr("method", method)
    align = bool(attrs.get("align_corners", False))
    mode = "align_corners" if align else "asymmetric"
    check_corner_mode_size(mode, size, ctx)
    args = dict(roi=None, layout=layout, method=methods[method],
                coordinate_transformation_mode=mode,
                rounding_method=nearest_rounding(methods[method], mode, ""),
                cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=None)
    return _resize2d_as_relay(inputs[0], size, args, dims)
