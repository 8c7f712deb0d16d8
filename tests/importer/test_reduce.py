"""Reductions: axis / keepdims / exclude, and argmax's int32 result."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, rand, relay_fn

X = "%x: Tensor[(2, 3, 4, 5), float32]"
NP = {"mean": np.mean, "sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("op", sorted(NP))
@pytest.mark.parametrize("attrs,axis,keepdims", [
    ("", None, False),
    ("axis=[1]", (1,), False),
    ("axis=[2, 3], keepdims=True", (2, 3), True),
    ("axis=[-1, 0]", (0, 3), False),
    ("axis=[1], exclude=True", (0, 2, 3), False),
    ("axis=[0, 1], keepdims=True, exclude=True", (2, 3), True),
])
def test_reduce(op, attrs, axis, keepdims):
    x = rand(2, 3, 4, 5, low=0.5, high=1.5)
    body = f"{op}(%x, {attrs})" if attrs else f"{op}(%x)"
    check(relay_fn(X, body), [x], NP[op](x, axis=axis, keepdims=keepdims), rtol=1e-4,
          atol=1e-5)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("attrs,axis,keepdims", [
    ("axis=[1]", 1, False), ("axis=[-1], keepdims=True", 3, True), ("", None, False),
])
def test_arg_reduce_is_int32(op, attrs, axis, keepdims):
    x = rand(2, 3, 4, 5)
    body = f"{op}(%x, {attrs})" if attrs else f"{op}(%x)"
    ref = getattr(np, op)(x, axis=axis, keepdims=keepdims).astype("int32")
    out = check(relay_fn(X, body), [x], ref)
    assert out.dtype == np.int32
