"""``relay.testing.vgg``: VGG 11/13/16/19 (Simonyan & Zisserman), optionally with batch norm.

Five stages of 3x3 same-padded convolutions (64, 128, 256, 512, 512 channels), each
followed by a 2x2 stride-2 max pool, then three dense layers (4096, 4096,
``num_classes``) with ReLU and dropout between, and a softmax.  Parameter names follow
v0.19's (``conv{stage}_{layer}_weight``/``_bias``, ``bn{stage}_{layer}_*``,
``fc6``..``fc8``), so weights saved for one load into the other.
"""
from __future__ import annotations

from .. import ast
from ..analysis import free_vars
from ..builder import var
from ..op import nn
from . import layers
from .init import create_workload

#: Convolutions per stage for each depth; every variant has the same stage widths.
STAGE_DEPTHS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3),
                19: (2, 2, 4, 4, 4)}
STAGE_WIDTHS = (64, 128, 256, 512, 512)


def _features(data: ast.Expr, depths: tuple, batch_norm: bool) -> ast.Expr:
    body = data
    for stage, (count, width) in enumerate(zip(depths, STAGE_WIDTHS), start=1):
        for layer in range(1, count + 1):
            name = f"conv{stage}_{layer}"
            body = layers.conv2d(body, kernel_size=(3, 3), padding=(1, 1), channels=width,
                                 name=name)
            body = nn.bias_add(body, var(f"{name}_bias"))
            if batch_norm:
                body = layers.batch_norm_infer(body, name=f"bn{stage}_{layer}")
            body = nn.relu(body)
        body = nn.max_pool2d(body, pool_size=(2, 2), strides=(2, 2))
    return body


def _classifier(features: ast.Expr, num_classes: int) -> ast.Expr:
    body = nn.batch_flatten(features)
    for name in ("fc6", "fc7"):
        body = nn.dropout(nn.relu(layers.dense_add_bias(body, units=4096, name=name)), rate=0.5)
    return layers.dense_add_bias(body, units=num_classes, name="fc8")


def get_net(batch_size: int, image_shape: tuple, num_classes: int, dtype: str,
            num_layers: int = 11, batch_norm: bool = False) -> ast.Function:
    if num_layers not in STAGE_DEPTHS:
        raise ValueError(f"VGG has 11, 13, 16 or 19 layers, not {num_layers}")
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    out = nn.softmax(_classifier(_features(data, STAGE_DEPTHS[num_layers], batch_norm),
                                 num_classes))
    return ast.Function(tuple(free_vars(out)), out)


def get_workload(batch_size: int, num_classes: int = 1000, image_shape: tuple = (3, 224, 224),
                 dtype: str = "float32", num_layers: int = 11,
                 batch_norm: bool = False) -> tuple[ast.IRModule, dict]:
    """``(mod, params)`` of VGG-``num_layers`` with Xavier-initialized weights."""
    return create_workload(get_net(batch_size, image_shape, num_classes, dtype, num_layers,
                                   batch_norm))


__all__ = ["get_workload", "get_net"]
