"""The seed case: the Relay bmlib pipeline that failed with ``num_args should be 8``.

``SEED_RELAY`` is the model as Relay printed it; every parameter but ``%data``
was bound as a weight.  The two legacy pattern variants are the ones the
Relay-era ``bmlib`` pattern table used, written with Relay's DFPattern API.
"""
from __future__ import annotations

import numpy as np

from ..recipe import recipe_tensor
from ..relay.dataflow_pattern import is_constant, is_op, is_tuple_get_item, wildcard

SEED_RELAY = """\
#[version = "0.0.5"]
def @main(%data1: Tensor[(128), float32], %data: Tensor[(1, 128, 12, 40), float32], %weight: Tensor[(128, 128, 1, 1), float32], %gamma: Tensor[(128), float32], %beta: Tensor[(128), float32], %moving_mean: Tensor[(128), float32], %moving_var: Tensor[(128), float32]) {
  %0 = reshape(%data1, newshape=[1, 128, 1, 1]);
  %1 = nn.conv2d(%data, %weight, padding=[0, 0, 0, 0]);
  %2 = add(%0, %1);
  %3 = nn.batch_norm(%2, %gamma, %beta, %moving_mean, %moving_var);
  %4 = %3.0;
  nn.relu(%4)
}
"""

COMPOSITE_NAME = "bmlib.reshape_conv2d_add_bn_relu"
INPUT_SHAPE = (1, 128, 12, 40)
WEIGHT_SHAPES = {
    "data1": (128,), "weight": (128, 128, 1, 1), "gamma": (128,), "beta": (128,),
    "moving_mean": (128,), "moving_var": (128,),
}


def pattern_all_wildcards():
    """Variant 1: every operand a wildcard (broke the Relay codegen's arity)."""
    return is_op("nn.relu")(is_tuple_get_item(is_op("nn.batch_norm")(
        is_op("add")(is_op("reshape")(wildcard()), is_op("nn.conv2d")(wildcard(), wildcard())),
        wildcard(), wildcard(), wildcard(), wildcard()), 0))


def pattern_constant_weights():
    """Variant 2: the weights written as ``is_constant()``."""
    return is_op("nn.relu")(is_tuple_get_item(is_op("nn.batch_norm")(
        is_op("add")(is_op("reshape")(is_constant()), is_op("nn.conv2d")(wildcard(), is_constant())),
        is_constant(), is_constant(), is_constant(), is_constant()), 0))


def seed_params() -> dict[str, np.ndarray]:
    """Recipe-v1 weights (identical to the golden's ``model.params``)."""
    return {name: recipe_tensor(name, shape) for name, shape in WEIGHT_SHAPES.items()}


def seed_input() -> np.ndarray:
    return recipe_tensor("data", INPUT_SHAPE, role="input")


def numpy_reference(data: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """The seed graph in plain numpy (inference batch_norm, eps 1e-5)."""
    w = params["weight"][:, :, 0, 0].astype(np.float64)
    conv = np.einsum("oi,nihw->nohw", w, data.astype(np.float64))
    x = params["data1"].reshape(1, 128, 1, 1) + conv
    c = (1, 128, 1, 1)
    x = (x - params["moving_mean"].reshape(c)) / np.sqrt(params["moving_var"].reshape(c) + 1e-5)
    x = x * params["gamma"].reshape(c) + params["beta"].reshape(c)
    return np.maximum(x, 0).astype(np.float32)
