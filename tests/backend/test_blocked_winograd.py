"""Winograd convolutions inside the blocked layout.

The blocked layout pass (``backend/blocked_layout.py``) gives a 3x3 stride-1 conv
where Winograd wins (``templates/conv_winograd.py``) its transformed weight
(``HWOI{kb}o``) and keeps its activations blocked: it reads the NCHW{b}c twin its
producer wrote and writes NCHW{kb}c for the next conv, with no pack, unpack or
layout conversion between the partitions.  Checked: the layouts in the partitioned
``main``, the Winograd blocks in the built PrimFuncs, FLOPs counted as the 3x3
convolution's, and the outputs against TVM's plain build.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from tvm import relax

import bmlib_relax
from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _block(x, w1, w2, w3):
    """conv3x3 -> relu -> conv3x3 (+ shortcut) -> relu -> conv3x3 -> mean -> flatten."""
    a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
    b = R.nn.relu(R.add(R.nn.conv2d(a, w2, padding=1), a))
    c = R.nn.relu(R.nn.conv2d(b, w3, padding=1))
    return R.reshape(R.mean(c, axis=[2, 3], keepdims=True), [1, int(w3.ty.shape.values[0])])


@pytest.mark.parametrize("channels, size, mode", [
    (32, 8, "4"),     # F(4x4), tiles not a whole number of the output (8 = 2 x 4)
    (32, 9, "2"),     # F(2x2) on an odd size
    (48, 7, "1"),     # 48 channels: an output block of 16
])
def test_winograd_convs_read_and_write_blocked_activations(monkeypatch, channels, size, mode):
    monkeypatch.setenv("BMLIB_WINOGRAD", mode)
    mod, arrays = make_module(_block, [(1, channels, size, size)],
                              [(channels, channels, 3, 3)] * 3)
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    main = partitioned["main"].script()
    # Every conv is a Winograd one on blocked activations (the first reads the NCHW
    # input), and only the classifier edge converts back to NCHW.
    text = partitioned.script()
    layouts = re.findall(r'data_layout="(\w+)", kernel_layout="(\w+)", out_layout="(\w+)"',
                         text)
    assert len(layouts) == 3, layouts
    assert all(re.fullmatch(r"HWOI\d+o", kernel) for _, kernel, _ in layouts), layouts
    assert sorted(data for data, _, _ in layouts)[0] == "NCHW"
    assert sum(bool(re.fullmatch(r"NCHW\d+c", data)) for data, _, _ in layouts) == 2
    assert all(re.fullmatch(r"NCHW\d+c", out) for _, _, out in layouts)
    assert "layout_transform" not in main or main.count("layout_transform") <= 1
    lowered = lower_and_verify(partitioned)
    scripts = [prim.script() for prim, _ in lowered.values()]
    assert sum("bmlib_winograd_gemm" in s for s in scripts) == 3
    assert all(not record.unscheduled for _, record in lowered.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)


def test_flops_of_a_blocked_winograd_model_are_the_direct_convolutions(monkeypatch):
    channels, size = 32, 8
    monkeypatch.setenv("BMLIB_WINOGRAD", "4")
    mod, _ = make_module(_block, [(1, channels, size, size)], [(channels, channels, 3, 3)] * 3)
    winograd = bmlib_relax.compile(mod)
    monkeypatch.setenv("BMLIB_WINOGRAD", "0")
    direct = bmlib_relax.compile(mod)
    assert "HWOI" in winograd.relax_module.script() and \
        "HWOI" not in direct.relax_module.script()
    assert winograd.report.flops_total == direct.report.flops_total
    per_conv = 2 * channels * size * size * channels * 9
    assert winograd.report.flops_total >= 3 * per_conv
