"""Tensors with a dim of 0: an op whose result has no elements computes nothing (TVM's
lowering failed on several: split, cumsum, upsampling, a transpose), and an op whose
result has elements but would read them from an empty axis is refused, naming it (TVM
read outside the tensor: a take, a resize, a global maximum returned garbage)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError
from conftest import offloaded_partitions

from .helpers import import_text, relay_fn


@pytest.mark.parametrize("data, body, shape", [
    ("Tensor[(2, 0), float32]", "split(%x, indices_or_sections=2, axis=1).1", (2, 0)),
    ("Tensor[(2, 0), float32]", "cumsum(%x, axis=1)", (2, 0)),
    ("Tensor[(2, 0), float32]", "transpose(%x)", (0, 2)),
    ("Tensor[(1, 2, 0, 4), float32]", "nn.upsampling(%x, scale_h=2f, scale_w=2f)", (1, 2, 0, 8)),
    ("Tensor[(2, 4, 0), float32]", "nn.layer_norm(%x, ones(shape=[0], dtype=\"float32\"), "
                                   "zeros(shape=[0], dtype=\"float32\"))", (2, 4, 0)),
    ("Tensor[(0, 3, 4, 4), float32]", "nn.conv2d(%x, ones(shape=[3, 1, 3, 3], dtype=\"float32\"),"
                                      " groups=3, channels=3, kernel_size=[3, 3], padding=[1, 1])",
     (0, 3, 4, 4)),
])
def test_a_result_without_elements_is_built_and_runs(data, body, shape):
    text = relay_fn(f"%x: {data}, %r: Tensor[(3), float32]", f"({body}, nn.relu(%r))")
    assert "R.zeros" in import_text(text).script()
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)  # the relu
    x = np.ones(tuple(int(d) for d in data[data.index("(") + 1:data.index(")")].split(",")),
                "float32")
    empty, relu = model(x, np.array([-1, 0, 2], "float32"))
    assert empty.shape == shape and empty.dtype == np.float32
    np.testing.assert_array_equal(relu, [0, 0, 2])


@pytest.mark.parametrize("data, body, message", [
    ("Tensor[(2, 0), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"), axis=1)",
     "takes along axis 1"),
    ("Tensor[(2, 0), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"), axis=1, mode=\"wrap\")",
     "takes along axis 1"),
    ("Tensor[(0, 2), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"))", "takes along axis 0"),
    ("Tensor[(1, 2, 0, 4), float32]", "image.resize2d(%x, size=[4, 4])", "resizes along axis 2"),
    ("Tensor[(2, 3, 0, 0), float32]", "nn.global_max_pool2d(%x)",
     "takes the maximum along axis 2"),
    ("Tensor[(2, 0), float32]", "nn.pad(%x, 0f, pad_width=[[0, 0], [1, 1]], pad_mode=\"edge\")",
     "an edge pad along axis 1"),
])
def test_reading_elements_from_an_empty_axis_is_named(data, body, message):
    with pytest.raises(ConversionError, match=message + r" of extent 0 .*no element to read") \
            as info:
        import_text(relay_fn(f"%x: {data}", body))
    assert info.value.location.startswith("snippet.relay:3:")


def test_an_empty_take_from_an_empty_axis_and_a_constant_pad_of_one_run():
    text = relay_fn("%x: Tensor[(2, 0), float32]",
                    "(take(%x, zeros(shape=[0], dtype=\"int32\"), axis=1), "
                    "nn.pad(%x, 5f, pad_width=[[0, 0], [1, 1]]))")
    taken, padded = bmlib_relax.compile(text)(np.ones((2, 0), "float32"))
    assert taken.shape == (2, 0)
    np.testing.assert_array_equal(padded, np.full((2, 2), 5, "float32"))
