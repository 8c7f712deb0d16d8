"""``relay.image.*``: image ops with Relay v0.19's Python signatures
(``python/tvm/relay/op/image/image.py``)."""
from __future__ import annotations

from .. import ast
from ..builder import const
from ._make import default_to, define_ops, dynamic_call, dynamic_form


def _resize(layout: str) -> str:
    return (f"data, size, roi=None, layout='{layout}', method='linear', "
            "coordinate_transformation_mode='half_pixel', rounding_method='', cubic_alpha=-0.5, "
            "cubic_exclude=0, extrapolation_value=0.0, out_dtype=None")


def _resize_options(ndim: int) -> dict:
    """Relay's Python API passes rounding_method="" (TOPI's automatic choice: floor for
    nearest neighbour unless align_corners), where the C++ default a parsed text gets is
    "round"; and v0.19's resize{ndim}d began with ``if roi is None: roi = [0.0] * (2 *
    ndim)`` (the C++ default is no roi), so its calls always held both."""
    return {"always": ("rounding_method", "roi"),
            "normalise": {"roi": default_to(lambda _: (0.0,) * (2 * ndim))}}


TABLE = {
    "resize1d": (_resize("NCW"), "data", _resize_options(1)),
    "resize2d": (_resize("NCHW"), "data", _resize_options(2)),
    "resize3d": (_resize("NCDHW"), "data", _resize_options(3)),
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

