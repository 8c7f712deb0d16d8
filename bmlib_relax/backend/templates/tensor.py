"""Data-movement templates: reshape-likes and layout changes."""
from __future__ import annotations

from tvm import topi

from ._utils import shape_values
from .registry import register_template


@register_template("relax.reshape")
def reshape(call, inputs, ctx):
    return topi.reshape(inputs[0], shape_values(call.args[1]))
