"""FLOP counters, one per Relax op, for the offload report.

A multiply-add counts as 2 FLOPs.  Element-wise ops count 1 per output
element, reductions and pooling 1 per element read.  Ops without a counter
(data movement, casts) count 0.
"""
from __future__ import annotations

import math
from typing import Callable

from tvm import relax

from .registry import Registry

FlopCounter = Callable[[relax.Call], int]

COUNTERS: Registry[FlopCounter] = Registry("FLOP counter for Relax op")


def register_flops(*op_names: str) -> Callable[[FlopCounter], FlopCounter]:
    """Register ``fn(call) -> int`` as the FLOP counter of each Relax op."""
    return COUNTERS.register(*op_names)


def count_flops(call: relax.Call) -> int:
    """FLOPs of one Relax op call (0 for ops without a counter or with dynamic shapes)."""
    counter = COUNTERS.get(getattr(call.op, "name", ""))
    if counter is None:
        return 0
    try:
        return int(counter(call))
    except (TypeError, ValueError, AttributeError):  # dynamic shapes: nothing to count
        return 0


def has_counter(op_name: str) -> bool:
    return op_name in COUNTERS


def _shape(ty) -> list[int]:
    if isinstance(ty, relax.TupleType):
        ty = ty.fields[0]
    return [int(d) for d in ty.shape.values]


def _elements(ty) -> int:
    return math.prod(_shape(ty))


def _per_output_element(per: int) -> FlopCounter:
    return lambda call: per * _elements(call.ty)


def _per_input_element(call: relax.Call) -> int:
    return _elements(call.args[0].ty)


# --------------------------------------------------------------------------- counters
@register_flops("relax.nn.conv2d")
def _conv2d(call):
    # 2 * N * K * OH * OW * (C / groups) * KH * KW  (NCHW output, OIHW weight)
    n, k, oh, ow = _shape(call.ty)
    weight = _shape(call.args[1].ty)
    # A blocked OIHW{ib}i{ob}o weight is [O/ob, I/ib, KH, KW, ib, ob].
    c_per_group = weight[1] * (weight[4] if len(weight) == 6 else 1)
    kh, kw = weight[2], weight[3]
    return 2 * n * k * oh * ow * c_per_group * kh * kw


@register_flops("relax.nn.conv2d_transpose")
def _conv2d_transpose(call):
    # Every input element is scattered onto (K / groups) * KH * KW outputs (IOHW weight).
    n, c, h, w = _shape(call.args[0].ty)
    _, k_per_group, kh, kw = _shape(call.args[1].ty)
    return 2 * n * c * h * w * k_per_group * kh * kw


@register_flops("relax.matmul")
def _matmul(call):
    # 2 * M * N * K per batch: every output element is a length-K dot product.
    return 2 * _elements(call.ty) * _shape(call.args[0].ty)[-1]


register_flops("relax.nn.batch_norm")(_per_output_element(2))  # scale and shift (inference)
register_flops("relax.nn.layer_norm")(_per_output_element(5))  # mean, variance, normalise, affine
register_flops("relax.nn.softmax", "relax.nn.log_softmax")(_per_output_element(5))


@register_flops("relax.nn.max_pool2d", "relax.nn.avg_pool2d")
def _pool2d(call):
    kh, kw = (int(v) for v in call.attrs.pool_size)
    return _elements(call.ty) * kh * kw


register_flops("relax.nn.adaptive_avg_pool2d", "relax.mean", "relax.sum", "relax.max",
               "relax.min", "relax.argmax", "relax.argmin")(_per_input_element)

register_flops(
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum", "relax.power", "relax.nn.relu", "relax.nn.leakyrelu", "relax.nn.gelu",
    "relax.nn.silu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.exp", "relax.log",
    "relax.sqrt", "relax.rsqrt", "relax.negative", "relax.abs", "relax.erf",
)(_per_output_element(1))
