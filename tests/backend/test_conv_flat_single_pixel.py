"""A conv2d whose output is a single pixel (EfficientNet's classifier: a 1x1 conv
with 1280 -> 1000 channels on the 1x1 map after global pooling) takes the flat-pixel
rule ``bmlib.conv2d_nchwc_flat``.  That rule used to fail there with a ``vectorize``
error and be rolled back (UnscheduledBlockWarning: correct, but scalar and serial):
a one-pixel tile has no pixel loop after ``compute_at``.  Now it schedules."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _conv(padding):
    return lambda x, w: R.nn.relu(R.nn.conv2d(x, w, padding=padding))


@pytest.mark.parametrize("in_channels, out_channels, kernel", [
    (1280, 1000, 1),   # EfficientNet-B0's classifier (ob = 10 on 16 lanes, 8 on 8)
    (64, 10, 1),       # output channels below one vector
    (48, 20, 1),
    (40, 36, 3),       # a padded 3x3 on a 1x1 map
    (24, 16, 1),       # whole vectors, still a 1-pixel tile
])
def test_one_pixel_conv_is_scheduled_and_correct(in_channels, out_channels, kernel):
    mod, arrays = make_module(_conv(kernel // 2), [(1, in_channels, 1, 1)],
                              [(out_channels, in_channels, kernel, kernel)])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    lowered = lower_and_verify(partitioned)
    (prim, record), = lowered.values()
    script = prim.script()
    assert '"bmlib_schedule": "bmlib.conv2d_nchwc_flat"' in script
    assert record.unscheduled == []
    assert "T.parallel" in script and "T.vectorized" in script
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        (got,), records = run_offloaded(partitioned, arrays)
    assert all(not r.unscheduled for r in records.values())
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
    # and against numpy: relu(W x) at the kernel's centre tap
    x = arrays[0][0, :, 0, 0].astype("float64")
    w = np.asarray(partitioned_weight(mod))[:, :, kernel // 2, kernel // 2]
    np.testing.assert_allclose(got[0, :, 0, 0], np.maximum(w @ x, 0), rtol=1e-4, atol=1e-4)


def partitioned_weight(mod):
    """The OIHW weight constant of the one-conv module (before packing)."""
    (const,) = [b.value.args[1] for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    return const.value.numpy().astype("float64")

