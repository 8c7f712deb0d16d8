"""Transposed convolutions on bmlib's gather template (templates/conv_transpose.py):
strides, padding (asymmetric too), output_padding, dilation and groups as Relay
defines them, against TVM's legalization and a NumPy scatter, with the weights
packed at compile time and every block scheduled by its rule."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.backend.target import vector_lanes
from bmlib_relax.backend.templates.conv_transpose import transpose_blocking
from bmlib_relax.compiler import lower_and_verify

import conv_reference
from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op

# data, weight (C, O/groups, KH, KW), attrs
CASES = {
    "k3_s2_p1_op1": ((1, 16, 5, 5), (16, 32, 3, 3), dict(strides=2, padding=1, output_padding=1)),
    "k4_s2_p1_dcgan": ((1, 16, 6, 7), (16, 8, 4, 4), dict(strides=2, padding=1)),
    "k2_s2_unet": ((2, 8, 4, 4), (8, 16, 2, 2), dict(strides=2)),
    "k3_s1_p1": ((2, 8, 5, 5), (8, 16, 3, 3), dict(padding=1)),
    "s23_asym_op_g2": ((1, 8, 5, 4), (8, 6, 3, 3),
                       dict(strides=(2, 3), padding=(1, 0, 2, 1), output_padding=(1, 2), groups=2)),
    "k3_s2_d2_op1": ((1, 8, 5, 5), (8, 16, 3, 3),
                     dict(strides=2, padding=1, dilation=2, output_padding=1)),
    "k5_s3_g4_d2": ((1, 16, 4, 4), (16, 4, 5, 5), dict(strides=3, padding=2, dilation=2, groups=4)),
    "k1_s2": ((1, 24, 3, 3), (24, 10, 1, 1), dict(strides=2)),
    # Several (batch x channel-block) tiles and an even output with padding: the rows
    # of a fused parallel loop made TVM 0.27 mis-simplify (row + pad) // stride here.
    "batch2_blocks_k3_s2_p1_op1": ((2, 8, 4, 4), (8, 64, 3, 3),
                                   dict(strides=2, padding=1, output_padding=1)),
    "batch2_blocks_k4_s2_p1": ((2, 8, 5, 5), (8, 64, 4, 4), dict(strides=2, padding=1)),
    # many (batch x channel-block) tiles (>= MIN_PARALLEL_BLOCKS): blocks in parallel
    "batch2_many_blocks_k3_s2_p1": ((2, 8, 4, 4), (8, 256, 3, 3), dict(strides=2, padding=1)),
}


def _build(name):
    data, weight, attrs = CASES[name]
    return make_module(lambda x, w: R.nn.relu(R.nn.conv2d_transpose(x, w, **attrs)), [data],
                       [weight])


def _weight(mod) -> np.ndarray:
    (const,) = [b.value.args[1] for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and
                b.value.op.name == "relax.nn.conv2d_transpose"]
    return const.value.numpy()


def _offloaded_outputs(partitioned, arrays):
    assert offloaded_partitions(partitioned)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        (got,), records = run_offloaded(partitioned, arrays)
    assert all(not r.unscheduled for r in records.values())
    return got


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv2d_transpose_matches_legalization_and_numpy(name):
    mod, arrays = _build(name)
    got = _offloaded_outputs(partition_for_bmlib(mod), arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
    _, _, attrs = CASES[name]
    want = np.maximum(conv_reference.conv2d_transpose(arrays[0], _weight(mod), **attrs), 0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["k3_s2_p1_op1", "s23_asym_op_g2", "k3_s2_d2_op1"])
def test_conv2d_transpose_structure(name):
    """Weight packed to IOHW{ib}i{ob}o at compile time, the gather block tagged with
    its rule and scheduled (parallel + vectorized), nothing rolled back."""
    data, weight, attrs = CASES[name]
    mod, _ = _build(name)
    partitioned = partition_for_bmlib(mod)
    groups = attrs.get("groups", 1)
    ib, ob = transpose_blocking(data[1], weight[1] * groups, groups,
                                vector_lanes(None, "float32"))
    assert f'kernel_layout="IOHW{ib}i{ob}o"' in partitioned.script()
    (prim, record), = lower_and_verify(partitioned).values()
    script = prim.script()
    assert record.unscheduled == []
    rules = set(re.findall(r'"bmlib_schedule": "([\w.]+)"', script))
    assert rules == {"bmlib.conv2d_transpose_nchwc", "bmlib.pack_nchwc"}
    assert "T.parallel" in script and "T.vectorized" in script


def test_gather_does_no_zero_stuffed_work():
    """Stride 2, 4x4 kernel: each output pixel reduces over 2x2 taps (one stride
    phase), not the 4x4 window a zero-dilated input would need."""
    mod, _ = _build("k4_s2_p1_dcgan")
    (prim, _), = lower_and_verify(partition_for_bmlib(mod)).values()
    script = prim.script()
    assert re.search(r"for [\w, ]+ in T\.grid\((\d+, )?2, 2, \d+\)", script), script
    # the kernel tap is the phase of the output pixel plus a multiple of the stride
    assert re.search(r"\(v_\w+ \+ 1\) % 2 \+ 2 - v_jy \* 2", script)


def test_conv2d_transpose_with_a_weight_input_packs_it_inside():
    mod, arrays = make_module(
        lambda x, w: R.nn.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1),
        [(1, 8, 4, 4), (8, 8, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    assert 'kernel_layout="IOHW"' in partitioned.script()
    got = _offloaded_outputs(partitioned, arrays)
    want = conv_reference.conv2d_transpose(arrays[0], arrays[1], strides=2, padding=1,
                                           output_padding=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [dict(strides=2, padding=1, output_padding=1),
                                   dict(strides=4, padding=2, groups=2),
                                   dict(strides=3, dilation=2, padding=(0, 1))])
def test_conv1d_transpose_through_the_2d_template(attrs):
    mod, arrays = make_module(lambda x, w: R.nn.conv1d_transpose(x, w, **attrs),
                              [(1, 8, 9)], [(8, 6, 5)])
    partitioned = partition_for_bmlib(mod)
    (prim, _), = lower_and_verify(partitioned).values()
    assert "bmlib.conv2d_transpose_nchwc" in prim.script()
    got = _offloaded_outputs(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
    (const,) = [b.value.args[1] for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call)]
    pad = attrs.get("padding", 0)
    pad = (pad, pad) if isinstance(pad, int) else pad
    want = conv_reference.conv2d_transpose(
        arrays[0][:, :, None, :], const.value.numpy()[:, :, None, :],
        strides=(1, attrs["strides"]), padding=(0, pad[0], 0, pad[1]),
        output_padding=(0, attrs.get("output_padding", 0)),
        dilation=(1, attrs.get("dilation", 1)), groups=attrs.get("groups", 1))[:, :, 0, :]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# data, weight (C, O/groups, KD, KH, KW), attrs
CASES_3D = {
    "k3_s2_p1_op1": ((1, 8, 3, 4, 5), (8, 16, 3, 3, 3),
                     dict(strides=2, padding=1, output_padding=1)),
    "asym_pad_g2_dil": ((2, 8, 3, 4, 4), (8, 4, 2, 3, 3),
                        dict(strides=(1, 2, 2), padding=(0, 1, 1, 1, 0, 2), groups=2,
                             dilation=(1, 2, 1))),
    "k2_s2_unet3d": ((1, 16, 3, 3, 3), (16, 8, 2, 2, 2), dict(strides=2)),
    # many (batch x channel-block) tiles (>= MIN_PARALLEL_BLOCKS): blocks in parallel
    "batch2_many_blocks": ((2, 8, 2, 3, 3), (8, 256, 3, 3, 3),
                           dict(strides=2, padding=1, output_padding=1)),
}


@pytest.mark.parametrize("name", sorted(CASES_3D))
def test_conv3d_transpose_gather(name):
    data, weight, attrs = CASES_3D[name]
    mod, arrays = make_module(lambda x, w: R.nn.conv3d_transpose(x, w, **attrs), [data],
                              [weight])
    partitioned = partition_for_bmlib(mod)
    (prim, record), = lower_and_verify(partitioned).values()
    script = prim.script()
    assert record.unscheduled == []
    assert set(re.findall(r'"bmlib_schedule": "([\w.]+)"', script)) == \
        {"bmlib.conv3d_transpose_ncdhwc", "bmlib.pack_ncdhwc"}
    assert "T.parallel" in script and "T.vectorized" in script
    got = _offloaded_outputs(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
    (const,) = [b.value.args[1] for b in mod["main"].body.blocks[0].bindings]
    want = conv_reference.conv3d_transpose(arrays[0], const.value.numpy(), **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_blocked_layout_across_groups_is_a_clear_error():
    """A user-blocked weight whose input block spans two groups is refused by name."""
    from bmlib_relax.errors import CodegenError

    mod, _ = make_module(
        lambda x, w: R.nn.conv2d_transpose(x, w, strides=2, groups=4, kernel_layout="IOHW8i4o"),
        [(1, 16, 4, 4)], [(2, 1, 3, 3, 8, 4)])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with pytest.raises(CodegenError, match=r"op relax.nn.conv2d_transpose: conv2d_transpose: "
                                           r"kernel layout IOHW8i4o blocks 8 input channels, "
                                           r"which does not divide the 4 of a group"):
        lower_and_verify(partitioned)
