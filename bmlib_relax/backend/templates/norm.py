"""Normalisation templates: batch_norm (inference), layer_norm, softmax."""
from __future__ import annotations

from tvm import topi

from ._utils import attr_ints
from .registry import register_template


@register_template("relax.nn.batch_norm")
def batch_norm(call, inputs, ctx):
    attrs = call.attrs
    if bool(attrs.training):
        raise ctx.error("training-mode batch_norm (batch statistics) has no template")
    data, gamma, beta, mean, var = inputs
    return topi.nn.batch_norm(data, gamma, beta, mean, var, axis=int(attrs.axis),
                              epsilon=float(attrs.epsilon), center=bool(attrs.center),
                              scale=bool(attrs.scale), training=False)


@register_template("relax.nn.layer_norm")
def layer_norm(call, inputs, ctx):
    attrs = call.attrs
    data, gamma, beta = inputs
    if not (bool(attrs.center) and bool(attrs.scale)):
        raise ctx.error("layer_norm without center/scale has no template")
    return topi.nn.layer_norm(data, gamma, beta, attr_ints(attrs.axes), float(attrs.epsilon))


@register_template("relax.nn.softmax")
def softmax(call, inputs, ctx):
    return topi.nn.softmax(inputs[0], axis=int(call.attrs.axis))


@register_template("relax.nn.log_softmax")
def log_softmax(call, inputs, ctx):
    return topi.nn.log_softmax(inputs[0], axis=int(call.attrs.axis))
