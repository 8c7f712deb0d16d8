"""Normalisation templates: batch_norm (inference), layer_norm, softmax."""
from __future__ import annotations

from tvm import te, tirx, topi

from ._utils import attr_ints
from .registry import register_template


@register_template("relax.nn.batch_norm")
def batch_norm(call, inputs, ctx):
    """Inference batch_norm as ``x * scale[c] + shift[c]``: the per-channel
    ``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale`` are
    computed once (small blocks), so the per-element work is one multiply-add
    that fuses into a producer's epilogue."""
    attrs = call.attrs
    if bool(attrs.training):
        raise ctx.error("training-mode batch_norm (batch statistics) has no template")
    data, gamma, beta, mean, var = inputs
    axis = int(attrs.axis) % len(data.shape)
    eps = tirx.const(float(attrs.epsilon), var.dtype)
    use_scale, use_center = bool(attrs.scale), bool(attrs.center)

    def scale_of(c):
        inv = tirx.rsqrt(var[c] + eps)
        return gamma[c] * inv if use_scale else inv

    scale = te.compute(var.shape, scale_of, name="bmlib_bn_scale")
    shift = te.compute(var.shape, lambda c: (beta[c] if use_center else
                                             tirx.const(0, var.dtype)) - mean[c] * scale[c],
                       name="bmlib_bn_shift")
    out = te.compute(data.shape,
                     lambda *i: data[i] * scale[i[axis]].astype(data.dtype) +
                     shift[i[axis]].astype(data.dtype), name="bmlib_batch_norm")
    return out, mean, var


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
