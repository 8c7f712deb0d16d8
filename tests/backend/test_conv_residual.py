"""A residual block's shortcut add (and the activation after it) joins the
convolution's partition: ``conv2d (+ bias) (+ bn) + shortcut (+ relu)`` is one
composite (``bmlib.conv2d_bias_add_relu`` ...) whose add and relu run in the conv's
epilogue, on the register tile, instead of a separate element-wise partition that
reads the conv's output back."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning

from conftest import offloaded_partitions
from helpers import composite_names, make_module, run_offloaded, run_plain

R = relax.op


def _check(mod, arrays, want_composite):
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    assert want_composite in sorted(set(composite_names(partitioned))), sorted(set(composite_names(partitioned)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        got, records = run_offloaded(partitioned, arrays)
    assert all(not r.unscheduled for r in records.values())
    for have, want in zip(got, run_plain(mod, arrays)):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-4)
    return partitioned


@pytest.mark.parametrize("channels, size, kernel", [
    (16, 8, 3),    # row tiles
    (32, 7, 3),    # 7x7 output: the flat-pixel tiling
    (64, 8, 1),    # 1x1: the NCHW GEMM
    (24, 5, 3),    # channels not a multiple of the vector width
])
def test_bias_shortcut_relu_is_one_partition(channels, size, kernel):
    def build(x, w, b):
        y = R.add(R.nn.conv2d(x, w, padding=kernel // 2), R.reshape(b, (channels, 1, 1)))
        return R.nn.relu(R.add(y, x))   # the shortcut is the block's input

    mod, arrays = make_module(build, [(1, channels, size, size)],
                              [(channels, channels, kernel, kernel), (channels,)])
    partitioned = _check(mod, arrays, "bmlib.conv2d_bias_add_relu")
    # nothing but the one partition: the add is not left to an element-wise one
    assert len(offloaded_partitions(partitioned)) == 1


def test_shortcut_from_another_conv_and_operand_order():
    def build(x, w1, w2):
        a = R.nn.conv2d(x, w1, padding=1)
        b = R.nn.conv2d(x, w2, strides=1)
        return R.nn.relu(R.add(b, a))   # shortcut on the left of the add

    mod, arrays = make_module(build, [(1, 16, 6, 6)], [(32, 16, 3, 3), (32, 16, 1, 1)])
    _check(mod, arrays, "bmlib.conv2d_add_relu")


def test_batch_norm_then_shortcut_without_activation():
    def build(x, w, g, bt, m, v):
        y = R.nn.batch_norm(R.nn.conv2d(x, w, padding=1), g, bt, m, relax.const(np.abs(v.value.numpy()) + 1),
                            axis=1, training=False)[0]
        return R.add(y, x)

    mod, arrays = make_module(build, [(1, 16, 6, 6)],
                              [(16, 16, 3, 3), (16,), (16,), (16,), (16,)])
    _check(mod, arrays, "bmlib.conv2d_bn_add")


def test_per_channel_operand_is_a_bias_not_a_shortcut():
    def build(x, w, b):
        return R.nn.relu(R.add(R.nn.conv2d(x, w, padding=1), b))

    mod, arrays = make_module(build, [(1, 16, 6, 6)], [(16, 16, 3, 3), (1, 16, 1, 1)])
    partitioned = _check(mod, arrays, "bmlib.conv2d_bias_relu")
    assert not [c for c in sorted(set(composite_names(partitioned))) if "_add" in c]


def test_broadcast_operand_is_not_taken_as_shortcut():
    """An operand that broadcasts over channels (1, 1, H, W) is no shortcut: the
    conv keeps its own partition and the add runs as an element-wise one."""
    def build(x, s, w):
        return R.add(R.nn.conv2d(x, w, padding=1), s)

    mod, arrays = make_module(build, [(1, 16, 6, 6), (1, 1, 6, 6)], [(16, 16, 3, 3)])
    partitioned = _check(mod, arrays, "bmlib.conv2d")
    assert not [c for c in sorted(set(composite_names(partitioned))) if c.endswith("_add")]
