"""``relay.testing.resnet``: pre-activation ResNets (``get_workload(num_layers=18, ...)``).

Depths 18/34 use basic blocks (two 3x3 convs) and 50 and deeper bottlenecks (1x1, 3x3,
1x1), in four stages on ImageNet-sized inputs; inputs of height 28 or less get the
three-stage CIFAR form (depth ``6n+2``, or ``9n+2`` >= 164 with bottlenecks), as v0.19
offered.  ``layout`` is ``NCHW`` or ``NHWC`` (kernels ``OIHW`` / ``HWIO``).
"""
from __future__ import annotations

from typing import Any

from .. import ast
from ..analysis import free_vars
from ..builder import var
from ..op import add, nn
from . import layers
from .init import create_workload

IMAGENET_UNITS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
                  152: (3, 8, 36, 3), 200: (3, 24, 36, 3), 269: (3, 30, 48, 8)}
BN_EPSILON = 2e-5


class _Builder:
    """Layers of one network in one layout, naming their parameters."""

    def __init__(self, layout: str):
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"resnet: layout {layout!r} is not NCHW or NHWC")
        self.layout = layout
        self.kernel_layout = layers.conv_kernel_layout(layout)
        self.channel_axis = layout.index("C")

    def bn(self, data: ast.Expr, name: str, scale: bool = True) -> ast.Expr:
        return layers.batch_norm_infer(data, epsilon=BN_EPSILON, axis=self.channel_axis,
                                       scale=scale, name=name)

    def bn_relu(self, data: ast.Expr, name: str) -> ast.Expr:
        return nn.relu(self.bn(data, name))

    def conv(self, data: ast.Expr, channels: int, kernel: int, stride: int,
             name: str) -> ast.Expr:
        return layers.conv2d(data, channels=channels, kernel_size=(kernel, kernel),
                             strides=(stride, stride), padding=(kernel // 2, kernel // 2),
                             data_layout=self.layout, kernel_layout=self.kernel_layout,
                             name=name)

    def unit(self, data: ast.Expr, channels: int, stride: int, project: bool, name: str,
             bottleneck: bool) -> ast.Expr:
        """One residual unit: BN-ReLU before each conv; a 1x1 projection of the first
        activation joins the sum when the shape changes."""
        act = self.bn_relu(data, f"{name}_bn1")
        if bottleneck:
            body = self.conv(act, channels // 4, 1, 1, f"{name}_conv1")
            body = self.conv(self.bn_relu(body, f"{name}_bn2"), channels // 4, 3, stride,
                             f"{name}_conv2")
            body = self.conv(self.bn_relu(body, f"{name}_bn3"), channels, 1, 1,
                             f"{name}_conv3")
        else:
            body = self.conv(act, channels, 3, stride, f"{name}_conv1")
            body = self.conv(self.bn_relu(body, f"{name}_bn2"), channels, 3, 1,
                             f"{name}_conv2")
        shortcut = self.conv(act, channels, 1, stride, f"{name}_sc") if project else data
        return add(body, shortcut)


def _plan(num_layers: int, height: int) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """``(units per stage, filters (stem first), bottleneck)`` for a depth and height."""
    if height <= 28:
        if num_layers >= 164 and (num_layers - 2) % 9 == 0:
            return ((num_layers - 2) // 9,) * 3, (16, 64, 128, 256), True
        if num_layers < 164 and (num_layers - 2) % 6 == 0:
            return ((num_layers - 2) // 6,) * 3, (16, 16, 32, 64), False
        raise ValueError(f"resnet: no CIFAR-style network of {num_layers} layers (6n+2, or "
                         "9n+2 >= 164)")
    if num_layers not in IMAGENET_UNITS:
        raise ValueError(f"resnet: num_layers {num_layers} is not one of "
                         f"{sorted(IMAGENET_UNITS)}")
    if num_layers >= 50:
        return IMAGENET_UNITS[num_layers], (64, 256, 512, 1024, 2048), True
    return IMAGENET_UNITS[num_layers], (64, 64, 128, 256, 512), False


def resnet(units: tuple[int, ...], filters: tuple[int, ...], bottleneck: bool,
           num_classes: int, data_shape: tuple[int, ...], layout: str = "NCHW",
           dtype: str = "float32") -> ast.Function:
    """The network as a function of ``%data`` and its weights."""
    build = _Builder(layout)
    data = var("data", shape=data_shape, dtype=dtype)
    body = build.bn(data, "bn_data", scale=False)
    if len(units) == 3:  # CIFAR-style: no downsampling stem
        body = build.conv(body, filters[0], 3, 1, "conv0")
    else:
        body = build.bn_relu(build.conv(body, filters[0], 7, 2, "conv0"), "bn0")
        body = nn.max_pool2d(body, pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
                             layout=layout)
    for stage, count in enumerate(units):
        for index in range(count):
            stride = 2 if index == 0 and stage > 0 else 1
            body = build.unit(body, filters[stage + 1], stride, project=index == 0,
                              name=f"stage{stage + 1}_unit{index + 1}", bottleneck=bottleneck)
    body = build.bn_relu(body, "bn1")
    body = nn.batch_flatten(nn.global_avg_pool2d(body, layout=layout))
    body = layers.dense_add_bias(body, units=num_classes, name="fc1")
    out = nn.softmax(body)
    return ast.Function(tuple(free_vars(out)), out)


def get_net(batch_size: int, num_classes: int, num_layers: int = 50,
            image_shape: tuple = (3, 224, 224), layout: str = "NCHW",
            dtype: str = "float32", **kwargs: Any) -> ast.Function:
    height = image_shape[1] if layout == "NCHW" else image_shape[0]
    units, filters, bottleneck = _plan(num_layers, height)
    return resnet(units, filters, bottleneck, num_classes, (batch_size, *image_shape),
                  layout, dtype)


def get_workload(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18,
                 image_shape: tuple = (3, 224, 224), layout: str = "NCHW",
                 dtype: str = "float32", **kwargs: Any) -> tuple[ast.IRModule, dict]:
    """``(mod, params)`` of a ResNet with Xavier-initialized weights."""
    return create_workload(get_net(batch_size, num_classes, num_layers, image_shape, layout,
                                   dtype, **kwargs))


__all__ = ["get_workload", "get_net", "resnet"]
