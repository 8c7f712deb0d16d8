"""max_pool2d's separable template (rows, then columns): same results as the plain
build, the rule applied, and TOPI's compute kept where clamping taps to the edge
would not be exact (issue #15; speed is measured by the benchmark, not here)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _pool(pool_size, strides, padding, ceil_mode=False, dilation=(1, 1)):
    def build(x):
        return R.nn.max_pool2d(x, pool_size, strides, padding, dilation, ceil_mode)

    return build


def _lowered_script(mod) -> str:
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    (prim, _), = lower_and_verify(partitioned).values()
    return prim.script()


@pytest.mark.parametrize("shape, pool_size, strides, padding", [
    ((1, 4, 16, 16), (3, 3), (2, 2), (1, 1, 1, 1)),   # ResNet's stem pool
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1, 1, 1)),    # odd sizes, batch 2
    ((1, 2, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0)),     # no padding
    ((1, 3, 10, 7), (3, 2), (1, 1), (2, 0, 0, 1)),    # asymmetric padding, stride 1
    ((1, 2, 5, 5), (5, 5), (1, 1), (4, 4, 4, 4)),     # padding = window - 1
])
def test_separable_max_pool_matches_the_plain_build(shape, pool_size, strides, padding):
    mod, arrays = make_module(_pool(pool_size, strides, padding), [shape])
    arrays = [a - 0.5 for a in arrays]  # negative values: padding must not count as 0
    assert "bmlib_maxpool_cols" in _lowered_script(mod)
    partitioned = partition_for_bmlib(mod)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_array_equal(got, run_plain(mod, arrays)[0])


def test_separable_max_pool_is_scheduled():
    mod, _ = make_module(_pool((3, 3), (2, 2), (1, 1, 1, 1)), [(1, 4, 32, 32)])
    script = _lowered_script(mod)
    assert "T.parallel" in script and "T.vectorized" in script
    assert "bmlib_maxpool_rows_init" in script  # the row pass, computed per output row


@pytest.mark.parametrize("pool_size, strides, padding, ceil_mode", [
    ((2, 2), (2, 2), (2, 2, 2, 2), False),  # padding >= window: all-padding windows
    ((3, 3), (2, 2), (0, 0, 0, 0), True),   # ceil_mode
])
def test_other_max_pools_keep_topi(pool_size, strides, padding, ceil_mode):
    mod, arrays = make_module(_pool(pool_size, strides, padding, ceil_mode), [(1, 2, 7, 7)])
    assert "bmlib_maxpool_cols" not in _lowered_script(mod)
    (got,), _ = run_offloaded(partition_for_bmlib(mod), arrays)
    np.testing.assert_array_equal(got, run_plain(mod, arrays)[0])
