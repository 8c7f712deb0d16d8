"""``relay.testing.mlp``: a three-layer perceptron (128, 64, ``num_classes`` units, ReLU
between, softmax at the end) over the flattened input."""
from __future__ import annotations

from .. import ast
from ..analysis import free_vars
from ..builder import var
from ..op import nn
from . import layers
from .init import create_workload


def get_net(batch_size: int, num_classes: int = 10, image_shape: tuple = (1, 28, 28),
            dtype: str = "float32") -> ast.Function:
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    body = nn.batch_flatten(data)
    for index, units in enumerate((128, 64), start=1):
        body = nn.relu(layers.dense_add_bias(body, units=units, name=f"fc{index}"))
    out = nn.softmax(layers.dense_add_bias(body, units=num_classes, name="fc3"))
    return ast.Function(tuple(free_vars(out)), out)


def get_workload(batch_size: int, num_classes: int = 10, image_shape: tuple = (1, 28, 28),
                 dtype: str = "float32") -> tuple[ast.IRModule, dict]:
    """``(mod, params)`` of the perceptron with Xavier-initialized weights."""
    return create_workload(get_net(batch_size, num_classes, image_shape, dtype))


__all__ = ["get_workload", "get_net"]
