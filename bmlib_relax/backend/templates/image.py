"""Image templates: ``image.resize2d`` in every method and coordinate mode
(Relay's ``image.resize2d`` and ``nn.upsampling`` import to it)."""
from __future__ import annotations

from tvm import topi

from .registry import register_template


@register_template("relax.image.resize2d")
def resize2d(call, inputs, ctx):
    attrs = call.attrs
    size = [int(v) for v in call.args[1].values]
    return topi.image.resize2d(
        inputs[0], [float(v) for v in attrs.roi], size, layout=str(attrs.layout),
        method=str(attrs.method),
        coordinate_transformation_mode=str(attrs.coordinate_transformation_mode),
        rounding_method=str(attrs.rounding_method), bicubic_alpha=float(attrs.cubic_alpha),
        bicubic_exclude=int(attrs.cubic_exclude),
        extrapolation_value=float(attrs.extrapolation_value),
        out_dtype=_dtype_or_none(attrs.out_dtype))


def _dtype_or_none(dtype) -> str | None:
    text = "" if dtype is None else str(dtype)
    return None if text in ("", "None", "void") else text

