"""``relay.image.*``: image ops with Relay's Python signatures."""
from __future__ import annotations

from ._make import define_ops

TABLE = {
    "resize2d": ("data", (("roi", None), ("size", None), ("layout", "NCHW"), ("method", "linear"),
                          ("coordinate_transformation_mode", "half_pixel"),
                          ("rounding_method", ""), ("cubic_alpha", -0.5), ("cubic_exclude", 0),
                          ("extrapolation_value", 0.0), ("out_dtype", None))),
}

__all__ = define_ops(globals(), "image.", TABLE)
