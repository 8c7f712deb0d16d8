"""Attributes that make a result no tensor can be, or an axis that is not there: each is
a ConversionError naming the op and its place, at import (TVM built a negative or
wrapped allocation, folded an arange into a numpy array of terabytes while building,
read past a topk's input, or failed with a raw IndexError / internal check)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError
from bmlib_relax.relay import parse
from conftest import offloaded_partitions

from .helpers import relay_fn

X = np.arange(12, dtype="float32").reshape(3, 4)


def _compile(body: str, params: str = "%x: Tensor[(3, 4), float32]"):
    return bmlib_relax.compile(parse(relay_fn(params, body), "attrs.relay"))


def _compile_offloaded(body: str, params: str = "%x: Tensor[(3, 4), float32]"):
    """``relu(body)`` (the inputs are not negative): something runs on bmlib."""
    model = _compile(f"nn.relu({body})", params)
    assert offloaded_partitions(model.relax_module)
    return model


@pytest.mark.parametrize("op, body, message", [
    ("tile", "tile(%x, reps=[-1, 2])", r"reps=\[-1, 2\]: every repetition must be positive"),
    ("nn.pad", "nn.pad(%x, 0f, pad_width=[[-5, 0], [0, 0]])", r"\(-2, 4\).*a negative dim"),
    ("repeat", "repeat(%x, repeats=-1, axis=1)", r"repeats=-1 must be at least 1"),
    ("arange", 'arange(0f, 1e12f, 1f, dtype="float32")', r"a dim of 2\*\*31 or more"),
    ("zeros", 'zeros(shape=[4611686018427387905, 4], dtype="float32")', r"2\*\*31 or more"),
    ("topk", 'topk(%x, k=10, ret_type="values")', "k=10 is more than the 4 entries on axis 1"),
    ("cumsum", "cumsum(%x, axis=5)", r"axis=5 is out of range for a 2-d tensor \(-2 <= axis"),
    ("sum", "sum(%x, axis=[2])", "axis=2 is out of range for a 2-d tensor"),
    ("nn.space_to_depth", "nn.space_to_depth(reshape(%x, newshape=[1, 1, 3, 4]), block_size=0)",
     "block_size=0 must be positive"),
])
def test_an_impossible_result_is_refused_at_import(op, body, message):
    with pytest.raises(ConversionError, match=rf"^attrs.relay:3:\d+: {op}: .*{message}"):
        _compile(body)


@pytest.mark.parametrize("k", [4, 0, -1])
def test_topk_takes_k_up_to_the_axis_length_and_all_below_one(k):
    values = _compile_offloaded(f'topk(%x, k={k}, ret_type="values")')(X)
    np.testing.assert_array_equal(values, -np.sort(-X, axis=1)[:, :k if k > 0 else 4])


def test_a_block_that_does_not_divide_drops_the_rest_as_relay_did():
    """Relay's depth_to_space has c // b**2 output channels and space_to_depth an
    (h // b, w // b) image: the leftover channels, rows and columns are not read."""
    x = np.arange(5 * 5 * 5, dtype="float32").reshape(1, 5, 5, 5)
    params = "%x: Tensor[(1, 5, 5, 5), float32]"
    d2s = _compile_offloaded("nn.depth_to_space(%x, block_size=2)", params)(x)
    np.testing.assert_array_equal(
        d2s, x[:, :4].reshape(1, 2, 2, 1, 5, 5).transpose(0, 3, 4, 1, 5, 2).reshape(1, 1, 10, 10))
    crd = _compile_offloaded('nn.depth_to_space(%x, block_size=2, mode="CRD")', params)(x)
    np.testing.assert_array_equal(
        crd, x[:, :4].reshape(1, 1, 2, 2, 5, 5).transpose(0, 1, 4, 2, 5, 3).reshape(1, 1, 10, 10))
    s2d = _compile_offloaded("nn.space_to_depth(%x, block_size=2)", params)(x)
    np.testing.assert_array_equal(
        s2d, x[:, :, :4, :4].reshape(1, 5, 2, 2, 2, 2).transpose(0, 3, 5, 1, 2, 4)
        .reshape(1, 20, 2, 2))
