"""Activations, softmax and inference-time dropout (``nn.*``) with Relay's defaults."""
from __future__ import annotations

from tvm import relax

from ..registry import register_converter


@register_converter("nn.relu")
def _relu(inputs, attrs, ctx):
    return relax.op.nn.relu(inputs[0])


@register_converter("nn.leaky_relu")
def _leaky_relu(inputs, attrs, ctx):
    # Relay's LeakyReluAttrs default alpha is 0.25 (not Relax's 0.01).
    return relax.op.nn.leakyrelu(inputs[0], alpha=float(attrs.get("alpha", 0.25)))


@register_converter("nn.prelu")
def _prelu(inputs, attrs, ctx):
    return relax.op.nn.prelu(inputs[0], inputs[1], axis=int(attrs.get("axis", 1)))


@register_converter("nn.softmax")
def _softmax(inputs, attrs, ctx):
    return relax.op.nn.softmax(inputs[0], axis=int(attrs.get("axis", -1)))


@register_converter("nn.log_softmax")
def _log_softmax(inputs, attrs, ctx):
    return relax.op.nn.log_softmax(inputs[0], axis=int(attrs.get("axis", -1)))


@register_converter("nn.dropout")
def _dropout(inputs, attrs, ctx):
    # Relay's nn.dropout returns (output, mask); at inference the output is the
    # input and the mask keeps every element.  The mask is only built when a
    # model projects it (``.1``), so the usual ``.0`` imports as nothing at all.
    data = inputs[0]
    return relax.Tuple([data, relax.op.ones_like(data)])
