"""Convolutions inside merged partitions (``merge=True``, issue #15) are scheduled.

A merged partition holds several convolutions, so an element-wise block can read
two of them: the add of a residual block, ``conv(x) + shortcut(x)``.  The first
conv's rule takes that add as its epilogue and tiles it; the second conv's rule
used to take the same, already tiled add as its epilogue too and fail
(``reorder`` for the NCHW[c] conv, ``transform_block_layout`` for the flat-pixel
conv and the 1x1 GEMM), so it was rolled back (UnscheduledBlockWarning: scalar,
serial code; ResNet-18 in merge mode ran 1.6x slower than default).  Now the
second conv keeps its own unpack as its epilogue and is scheduled.  Each case
checks the offload and the merge first, then that no block is unscheduled, then
the outputs against the plain Relax build.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.backend.templates.conv import PREFETCH_ENV
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _residual_add(stride, shortcut_kernel):
    """relu(conv3x3(x) + shortcut(x)): the add reads two convolutions."""
    def build(x, w1, w2):
        main = R.nn.conv2d(x, w1, strides=stride, padding=1)
        shortcut = R.nn.conv2d(x, w2, strides=stride, padding=shortcut_kernel // 2)
        return R.nn.relu(R.add(main, shortcut))
    return build


def _conv_feeds_conv_and_add(x, w1, w2):
    """a = relu(conv(x)); relu(conv(a) + a): a conv output with two consumers."""
    a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
    return R.nn.relu(R.add(R.nn.conv2d(a, w2, padding=1), a))


def _conv_then_1x1(x, w1, w2):
    """A 1x1 conv (the NCHW GEMM) after a 3x3 one, in one partition."""
    a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
    return R.nn.relu(R.nn.conv2d(a, w2))


# (build, input shape, weight shapes, schedule rules the partition must use)
CASES = {
    # 28 columns: row tiles (of 7 or 4 columns: AVX-512 or AVX2); the shortcut is a
    # strided 1x1 (packed subsample).
    "rows + strided 1x1 shortcut": (_residual_add(2, 1), (1, 16, 56, 56),
                                    [(32, 16, 3, 3), (32, 16, 1, 1)], {"bmlib.conv2d_nchwc"}),
    # 11x11 output (no whole row tiles of 4, 5, 6 or 7 pixels): flat-pixel tiles for both.
    "flat + flat 3x3 shortcut": (_residual_add(1, 3), (1, 16, 11, 11),
                                 [(32, 16, 3, 3), (32, 16, 3, 3)],
                                 {"bmlib.conv2d_nchwc_flat"}),
    # 64 output pixels are whole vectors: the 1x1 shortcut is the NCHW GEMM.
    "3x3 + 1x1 GEMM shortcut": (_residual_add(1, 1), (1, 16, 8, 8),
                                [(32, 16, 3, 3), (32, 16, 1, 1)], {"bmlib.conv2d_1x1_gemm"}),
    "conv output read by a conv and the add": (_conv_feeds_conv_and_add, (1, 16, 14, 14),
                                               [(16, 16, 3, 3), (16, 16, 3, 3)], set()),
    "3x3 then 1x1 GEMM": (_conv_then_1x1, (1, 16, 8, 8), [(32, 16, 3, 3), (32, 32, 1, 1)],
                          {"bmlib.conv2d_1x1_gemm"}),
}


@pytest.mark.parametrize("winograd", ["0", "1"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_merged_convolutions_are_scheduled_and_correct(monkeypatch, case, winograd):
    # BMLIB_WINOGRAD: the direct template's rules ("0"), or Winograd for the 3x3
    # stride-1 convs ("1", templates/conv_winograd.py).
    monkeypatch.setenv("BMLIB_WINOGRAD", winograd)
    build, shape, weights, rules = CASES[case]
    mod, arrays = make_module(build, [shape], weights)
    # The NCHW schedules (GEMM, unpack epilogues) of merged partitions; the blocked
    # layout's merged partitions are checked in test_blocked_layout.py.
    partitioned = partition_for_bmlib(mod, merge=True, blocked_layout=False)
    assert offloaded_partitions(partitioned)
    # The scheduled blocks, before prefetches flatten the function (they are inserted
    # again for the run below).
    with monkeypatch.context() as unfetched:
        unfetched.setenv(PREFETCH_ENV, "0")
        lowered = lower_and_verify(partitioned)
    (name, (prim, record)), = lowered.items()  # merged: both convolutions in one partition
    script = prim.script()
    convs = {b for b in re.findall(r'T\.sblock\("(bmlib_conv2d\w*|bmlib_winograd_gemm\w*_update)"\)',
                                   script) if not b.endswith("_init")}
    assert len(convs) == 2, convs
    for rule in rules if winograd == "0" else ():
        assert f'"bmlib_schedule": "{rule}"' in script
    assert record.unscheduled == []
    assert "T.parallel" in script and "T.vectorized" in script
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        (got,), records = run_offloaded(partitioned, arrays)
    assert all(not r.unscheduled for r in records.values())
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
