"""``relay.testing.mobilenet``: MobileNet v1 (``get_workload(batch_size=1, ...)``).

A 3x3 stride-2 stem, then depthwise-separable blocks (3x3 depthwise, 1x1 pointwise,
each with batch norm and ReLU); ``alpha`` scales every width and ``is_shallow`` drops
the five 512-channel blocks.  ``layout`` is ``NCHW`` or ``NHWC`` (depthwise kernels
``HWOI`` in NHWC).
"""
from __future__ import annotations

from .. import ast
from ..analysis import free_vars
from ..builder import var
from ..op import nn
from . import layers
from .init import create_workload

BN_EPSILON = 1e-5

#: (depthwise channels, pointwise channels, downsample) after the stem.
_BLOCKS = ((32, 64, False), (64, 128, True), (128, 128, False), (128, 256, True),
           (256, 256, False), (256, 512, True))
_DEEP_BLOCKS = ((512, 512, False),) * 5
_TAIL_BLOCKS = ((512, 1024, True), (1024, 1024, False))


def _bn_relu(data: ast.Expr, name: str, axis: int) -> ast.Expr:
    return nn.relu(layers.batch_norm_infer(data, epsilon=BN_EPSILON, axis=axis, name=name))


def conv_block(data: ast.Expr, name: str, channels: int, kernel_size: tuple = (3, 3),
               strides: tuple = (1, 1), padding: tuple = (1, 1),
               layout: str = "NCHW") -> ast.Expr:
    """conv2d + batch norm + ReLU."""
    conv = layers.conv2d(data, channels=channels, kernel_size=kernel_size, strides=strides,
                         padding=padding, data_layout=layout,
                         kernel_layout=layers.conv_kernel_layout(layout), name=f"{name}_conv")
    return _bn_relu(conv, f"{name}_bn", layout.index("C"))


def separable_conv_block(data: ast.Expr, name: str, depthwise_channels: int,
                         pointwise_channels: int, downsample: bool = False,
                         layout: str = "NCHW") -> ast.Expr:
    """Depthwise 3x3 (stride 2 when ``downsample``) then pointwise 1x1, each followed by
    batch norm and ReLU."""
    stride = (2, 2) if downsample else (1, 1)
    axis = layout.index("C")
    depthwise = layers.conv2d(
        data, channels=depthwise_channels, groups=depthwise_channels, kernel_size=(3, 3),
        strides=stride, padding=(1, 1), data_layout=layout,
        kernel_layout=layers.conv_kernel_layout(layout, is_depthwise=True),
        name=f"{name}_depthwise_conv1")
    body = _bn_relu(depthwise, f"{name}_bn1", axis)
    pointwise = layers.conv2d(body, channels=pointwise_channels, kernel_size=(1, 1),
                              data_layout=layout,
                              kernel_layout=layers.conv_kernel_layout(layout),
                              name=f"{name}_conv2")
    return _bn_relu(pointwise, f"{name}_bn2", axis)


def mobile_net(num_classes: int = 1000, data_shape: tuple = (1, 3, 224, 224),
               dtype: str = "float32", alpha: float = 1.0, is_shallow: bool = False,
               layout: str = "NCHW") -> ast.Function:
    """The network as a function of ``%data`` and its weights."""
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"mobilenet: layout {layout!r} is not NCHW or NHWC")
    data = var("data", shape=data_shape, dtype=dtype)
    body = conv_block(data, "conv_block_1", int(32 * alpha), strides=(2, 2), layout=layout)
    blocks = _BLOCKS + (() if is_shallow else _DEEP_BLOCKS) + _TAIL_BLOCKS
    for index, (depthwise, pointwise, downsample) in enumerate(blocks):
        body = separable_conv_block(body, f"separable_conv_block_{index + 1}",
                                    int(depthwise * alpha), int(pointwise * alpha),
                                    downsample, layout)
    body = nn.batch_flatten(nn.global_avg_pool2d(body, layout=layout))
    body = layers.dense_add_bias(body, units=num_classes, name="fc")
    out = nn.softmax(body)
    return ast.Function(tuple(free_vars(out)), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000,
                 image_shape: tuple = (3, 224, 224), dtype: str = "float32",
                 layout: str = "NCHW") -> tuple[ast.IRModule, dict]:
    """``(mod, params)`` of MobileNet v1 with Xavier-initialized weights."""
    return create_workload(mobile_net(num_classes, (batch_size, *image_shape), dtype,
                                      layout=layout))


__all__ = ["get_workload", "mobile_net", "conv_block", "separable_conv_block"]
