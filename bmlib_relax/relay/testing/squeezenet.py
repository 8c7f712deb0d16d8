"""``relay.testing.squeezenet``: SqueezeNet 1.0 and 1.1 (Iandola et al.).

A strided stem convolution, then "fire" modules — a 1x1 squeeze convolution feeding a
1x1 and a 3x3 expand convolution whose outputs are concatenated — with 3x3 stride-2 max
pools between groups, then dropout, a 1x1 convolution to ``num_classes``, a global
average pool and a softmax.  1.1 has a smaller stem and pools earlier.  Parameter names
follow v0.19's (``conv1``, ``fire{k}_{input,left,right}_conv``, ``conv_final``).
"""
from __future__ import annotations

from .. import ast
from ..analysis import free_vars
from ..builder import var
from ..op import concatenate, nn
from . import layers
from .init import create_workload

#: Per version: the stem (channels, kernel, stride, padding), then the layers after
#: it: "pool" or a fire module's (squeeze, expand 1x1, expand 3x3) channels.
_POOL = "pool"
VERSIONS = {
    "1.0": ((96, 7, 2, 3), (_POOL, (16, 64, 64), (16, 64, 64), (32, 128, 128), _POOL,
                            (32, 128, 128), (48, 192, 192), (48, 192, 192), (64, 256, 256),
                            _POOL, (64, 256, 256))),
    "1.1": ((64, 3, 2, 1), (_POOL, (16, 64, 64), (16, 64, 64), _POOL, (32, 128, 128),
                            (32, 128, 128), _POOL, (48, 192, 192), (48, 192, 192),
                            (64, 256, 256), (64, 256, 256))),
}


def _conv_relu(data: ast.Expr, name: str, channels: int, kernel: int, stride: int = 1,
               padding: int = 0) -> ast.Expr:
    body = layers.conv2d(data, channels=channels, kernel_size=(kernel, kernel),
                         strides=(stride, stride), padding=(padding, padding), name=name)
    return nn.relu(nn.bias_add(body, var(f"{name}_bias")))


def _fire(data: ast.Expr, prefix: str, squeeze: int, expand1: int, expand3: int) -> ast.Expr:
    squeezed = _conv_relu(data, f"{prefix}_input_conv", squeeze, 1)
    return concatenate((_conv_relu(squeezed, f"{prefix}_left_conv", expand1, 1),
                        _conv_relu(squeezed, f"{prefix}_right_conv", expand3, 3, padding=1)),
                       axis=1)


def get_net(batch_size: int, image_shape: tuple, num_classes: int, version: str,
            dtype: str) -> ast.Function:
    if version not in VERSIONS:
        raise ValueError(f"SqueezeNet version {version!r}: 1.0 or 1.1 expected")
    (channels, kernel, stride, padding), body_layers = VERSIONS[version]
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    body = _conv_relu(data, "conv1", channels, kernel, stride, padding)
    fires = 0
    for layer in body_layers:
        if layer == _POOL:
            body = nn.max_pool2d(body, pool_size=(3, 3), strides=(2, 2))
        else:
            fires += 1
            body = _fire(body, f"fire{fires}", *layer)
    body = _conv_relu(nn.dropout(body, rate=0.5), "conv_final", num_classes, 1)
    out = nn.softmax(nn.batch_flatten(nn.global_avg_pool2d(body)))
    return ast.Function(tuple(free_vars(out)), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000, version: str = "1.0",
                 image_shape: tuple = (3, 224, 224),
                 dtype: str = "float32") -> tuple[ast.IRModule, dict]:
    """``(mod, params)`` of SqueezeNet ``version`` with Xavier-initialized weights."""
    return create_workload(get_net(batch_size, image_shape, num_classes, version, dtype))


__all__ = ["get_workload", "get_net"]
