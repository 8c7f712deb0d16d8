"""Grouped conv2d (1 < groups < channels) on bmlib's own template
(templates/conv_grouped.py): against TVM's legalization and NumPy, with the
weights packed at compile time, and every block scheduled by its rule."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.backend.target import vector_lanes
from bmlib_relax.backend.templates.conv_grouped import group_blocking
from bmlib_relax.compiler import lower_and_verify

import conv_reference
from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op

# data, weight (O, C/groups, KH, KW), attrs
CASES = {
    "g4_pad1": ((1, 32, 9, 9), (64, 8, 3, 3), dict(padding=1, groups=4)),
    "g2_s2_d2_batch2": ((2, 12, 11, 11), (18, 6, 3, 3),
                        dict(strides=2, padding=2, dilation=2, groups=2)),
    "resnext_g8_width4": ((1, 32, 8, 8), (32, 4, 3, 3), dict(padding=1, groups=8)),
    "shufflenet_g3_1x1": ((1, 24, 6, 6), (48, 8, 1, 1), dict(groups=3)),
    "g2_asym_pad_s_hw": ((1, 8, 7, 10), (12, 4, 3, 2),
                         dict(strides=(1, 2), padding=(1, 0, 2, 1), groups=2)),
    "g4_out_ne_in": ((1, 16, 6, 6), (8, 4, 3, 3), dict(strides=2, padding=1, groups=4)),
    # groups two vectors wide on a 7x7 map: no divisor of 7 fills half a 4-pixel tile,
    # so the output pixels are tiled flat (bmlib.group_conv2d_nchwc_flat)
    "g2_width32_7x7": ((1, 64, 7, 7), (64, 32, 3, 3), dict(padding=1, groups=2)),
}


def _build(name):
    data, weight, attrs = CASES[name]
    return make_module(lambda x, w: R.nn.relu(R.nn.conv2d(x, w, **attrs)), [data], [weight])


def _weight(mod) -> np.ndarray:
    (const,) = [b.value.args[1] for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    return const.value.numpy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_grouped_conv2d_matches_legalization_and_numpy(name):
    mod, arrays = _build(name)
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        (got,), records = run_offloaded(partitioned, arrays)
    assert all(not r.unscheduled for r in records.values())
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
    _, _, attrs = CASES[name]
    want = np.maximum(conv_reference.conv2d(arrays[0], _weight(mod), **attrs), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["g4_pad1", "resnext_g8_width4", "g2_s2_d2_batch2",
                                  "g2_asym_pad_s_hw", "g2_width32_7x7"])
def test_grouped_conv2d_structure(name):
    """Packed weight (blocked inside a group), the block tagged with the grouped
    rule, scheduled (parallel + vectorized), nothing rolled back, no topi compute."""
    data, weight, attrs = CASES[name]
    mod, _ = _build(name)
    partitioned = partition_for_bmlib(mod)
    groups = attrs["groups"]
    ib, ob = group_blocking(data[1], weight[0], groups, vector_lanes(None, "float32"))
    assert f'kernel_layout="OIHW{ib}i{ob}o"' in partitioned.script()
    assert (data[1] // groups) % ib == 0 and (weight[0] // groups) % ob == 0
    (prim, record), = lower_and_verify(partitioned).values()
    script = prim.script()
    assert record.unscheduled == []
    rules = set(re.findall(r'"bmlib_schedule": "([\w.]+)"', script))
    # row tiles, or flat-pixel tiles when the width is no multiple of the tile
    assert rules in ({"bmlib.group_conv2d_nchwc", "bmlib.pack_nchwc"},
                     {"bmlib.group_conv2d_nchwc_flat", "bmlib.pack_nchwc"})
    assert "T.parallel" in script and "T.vectorized" in script
    if name == "g2_width32_7x7":
        assert "bmlib.group_conv2d_nchwc_flat" in rules
    if name == "resnext_g8_width4":  # 8 columns: whole row tiles
        assert "bmlib.group_conv2d_nchwc" in rules


def test_grouped_conv2d_with_a_weight_input_packs_it_inside():
    """A weight that is not a constant stays OIHW and is packed in the PrimFunc."""
    mod, arrays = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1, groups=4),
                              [(1, 16, 6, 6), (16, 4, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    assert 'kernel_layout="OIHW"' in partitioned.script()
    (prim, record), = lower_and_verify(partitioned).values()
    assert record.unscheduled == [] and "bmlib.group_conv2d_nchwc" in prim.script()
    (got,), _ = run_offloaded(partitioned, arrays)
    want = conv_reference.conv2d(arrays[0], arrays[1], padding=1, groups=4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)


def test_blocked_layout_across_groups_is_a_clear_error():
    """A user-blocked weight whose output block spans two groups (16 channels per block,
    8 per group) cannot be computed group by group: the build names the op and layouts."""
    from bmlib_relax.errors import CodegenError

    mod, _ = make_module(lambda x, w: R.nn.conv2d(x, w, groups=8, kernel_layout="OIHW4i16o"),
                         [(1, 32, 6, 6)], [(4, 1, 3, 3, 4, 16)])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with pytest.raises(CodegenError, match=r"op relax.nn.conv2d: grouped conv2d: kernel layout "
                                           r"OIHW4i16o blocks 16 output channels, which does "
                                           r"not divide the 8 of a group \(groups=8\)"):
        lower_and_verify(partitioned)


@pytest.mark.parametrize("groups", [2, 4])
def test_int8_grouped_conv_is_exact(groups):
    """QNN grouped conv (int8 weights packed inside a group, int32 accumulator) through
    the Relay front door: bit-exact with the plain build and a NumPy integer conv."""
    import bmlib_relax
    from bmlib_relax import relay
    from bmlib_relax.relay import ast

    rng = np.random.default_rng(groups)
    x = rng.integers(-128, 128, size=(1, 8, 7, 7)).astype("int8")
    w = rng.integers(-127, 128, size=(16, 8 // groups, 3, 3)).astype("int8")
    xv, wv = relay.var("x", shape=x.shape, dtype="int8"), relay.var("w", shape=w.shape,
                                                                     dtype="int8")
    conv = relay.qnn.op.conv2d(xv, wv, relay.const(3), relay.const(0), relay.const(0.05),
                               relay.const(0.02), kernel_size=(3, 3), channels=16,
                               padding=(1, 1), groups=groups)
    module = ast.IRModule({"main": relay.Function([xv, wv], conv)})
    model = bmlib_relax.compile(module, {"w": w})
    assert offloaded_partitions(model.relax_module)
    assert re.search(rf'groups={groups}, data_layout="NCHW", kernel_layout="OIHW\d+i\d+o"',
                     model.relax_module.script())  # packed at compile time
    got = model(x=x)
    want = conv_reference.conv2d(x.astype("int64") - 3, w, padding=1, groups=groups)
    np.testing.assert_array_equal(got, want.astype("int32"))
    np.testing.assert_array_equal(
        got, run_plain(bmlib_relax.import_relay(module, {"w": w}), [x])[0])
