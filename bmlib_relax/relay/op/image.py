"""``relay.image.*``: image ops with Relay v0.19's Python signatures
(``python/tvm/relay/op/image/image.py``)."""
from __future__ import annotations

from .. import ast
from ..builder import const
from ._make import define_ops, dynamic_call, dynamic_form


def _resize(layout: str) -> str:
    return (f"data, size, roi=None, layout='{layout}', method='linear', "
            "coordinate_transformation_mode='half_pixel', rounding_method='', cubic_alpha=-0.5, "
            "cubic_exclude=0, extrapolation_value=0.0, out_dtype=None")


#: Relay's Python API passes rounding_method="" (TOPI's automatic choice: floor for nearest
#: neighbour unless align_corners), where the C++ default a parsed text gets is "round".
_RESIZE_OPTIONS = {"always": ("rounding_method",)}

TABLE = {
    "resize1d": (_resize("NCW"), "data", _RESIZE_OPTIONS),
    "resize2d": (_resize("NCHW"), "data", _RESIZE_OPTIONS),
    "resize3d": (_resize("NCDHW"), "data", _RESIZE_OPTIONS),
    "crop_and_resize": ("data, boxes, box_indices, crop_size, layout, method='bilinear', "
                        "extrapolation_value=0, out_dtype=None", "data boxes box_indices"),
    "dilation2d": ("data, weight, strides=(1, 1), padding=(0, 0), dilations=(1, 1), "
                   "data_layout='NCHW', kernel_layout='IHW', out_dtype=''", "data weight"),
    "affine_grid": ("data, target_shape=None", "data"),
    "grid_sample": ("data, grid, method='bilinear', layout='NCHW', padding_mode='zeros', "
                    "align_corners=True", "data grid"),
}

__all__ = define_ops(globals(), "image.", TABLE)


def _dynamic_resize2d(args: dict):
    """``dyn.image.resize2d``: a size or roi given as an expression; the other becomes a
    constant (int64 size, float32 roi), as Relay's builder made them."""
    size, roi = args["size"], args["roi"]
    size = size if isinstance(size, ast.Expr) else const(list(size), "int64")
    roi = roi if isinstance(roi, ast.Expr) else const(list(roi or [0.0] * 4), "float32")
    attrs = {k: args[k] for k in ("layout", "method", "coordinate_transformation_mode",
                                  "rounding_method", "cubic_alpha", "cubic_exclude",
                                  "extrapolation_value")}
    if args["out_dtype"]:
        attrs["out_dtype"] = args["out_dtype"]
    return dynamic_call("image.resize2d", (args["data"], size, roi), attrs)


dynamic_form(globals(), "resize2d", "size roi", _dynamic_resize2d)

