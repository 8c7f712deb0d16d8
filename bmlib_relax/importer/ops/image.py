"""Resizing: ``image.resize2d`` and ``nn.upsampling`` (both ``relax.op.image.resize2d``)."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter
from ._utils import check_reads_elements, resize_args, shape_of, size_dims


@register_converter("image.resize2d")
def _resize2d(inputs, attrs, ctx):
    args = resize_args(attrs, "NCHW", default_rounding="round")
    size = size_dims(attrs["size"])
    layout, dims = args["layout"], shape_of(inputs[0])
    if layout in ("NCHW", "NHWC"):
        spatial = [layout.index("H"), layout.index("W")]
        result = [size[spatial.index(i)] if i in spatial else d for i, d in enumerate(dims)]
        check_reads_elements(inputs[0], spatial, result, ctx, "resizes")
    return relax.op.image.resize2d(inputs[0], size, **args)


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
    size = [round(height * float(attrs["scale_h"])), round(width * float(attrs["scale_w"]))]
    method = attrs.get("method", "nearest_neighbor")
    methods = {"nearest_neighbor": "nearest_neighbor", "bilinear": "linear", "bicubic": "cubic"}
    if method not in methods:
        raise ctx.unsupported_attr("method", method)
    align = bool(attrs.get("align_corners", False))
    return relax.op.image.resize2d(
        inputs[0], size, layout=layout, method=methods[method],
        coordinate_transformation_mode="align_corners" if align else "asymmetric",
        rounding_method="", cubic_alpha=-0.5)
