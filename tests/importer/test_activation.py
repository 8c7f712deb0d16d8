"""Activations, softmax and dropout with Relay's defaults."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, import_text, ops_in, rand, relay_fn

X = "%x: Tensor[(2, 3, 4), float32]"


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("body,ref", [
    ("nn.relu(%x)", lambda x: np.maximum(x, 0)),
    ("nn.leaky_relu(%x)", lambda x: np.where(x > 0, x, 0.25 * x)),  # Relay default alpha
    ("nn.leaky_relu(%x, alpha=0.1f)", lambda x: np.where(x > 0, x, 0.1 * x)),
    ("nn.softmax(%x)", lambda x: _softmax(x, -1)),
    ("nn.softmax(%x, axis=1)", lambda x: _softmax(x, 1)),
    ("nn.log_softmax(%x, axis=0)", lambda x: np.log(_softmax(x, 0))),
    ("nn.log_softmax(%x)", lambda x: np.log(_softmax(x, -1))),
])
def test_activation(body, ref):
    x = rand(2, 3, 4)
    check(relay_fn(X, body), [x], ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [1, 2])
def test_prelu_axis(axis):
    x = rand(2, 3, 4)
    alpha = rand((2, 3, 4)[axis], seed=1)
    text = relay_fn(f"{X}, %a: Tensor[({x.shape[axis]}), float32]",
                    f"nn.prelu(%x, %a, axis={axis})")
    shape = [1, 1, 1]
    shape[axis] = -1
    check(text, [x, alpha], np.where(x > 0, x, alpha.reshape(shape) * x))


def test_relu_and_leaky_relu_forms():
    text = relay_fn(X, "%0 = nn.relu(%x);\n  nn.leaky_relu(%0, alpha=0.2f)")
    assert ops_in(import_text(text)) == ["relax.nn.relu", "relax.nn.leakyrelu"]


def test_dropout_is_identity_and_returns_a_tuple():
    x = rand(2, 3, 4)
    text = relay_fn(X, "%0 = nn.dropout(%x, rate=0.5f);\n  %1 = %0.0;\n  add(%1, 1f)")
    check(text, [x], x + 1)
    assert ops_in(import_text(text)) == ["relax.add"]
    # The mask (.1) keeps everything at inference.
    both = relay_fn(X, "%0 = nn.dropout(%x);\n  (%0.0, %0.1)")
    check(both, [x], [x, np.ones_like(x)])
