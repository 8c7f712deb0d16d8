"""``strided_slice`` with begin/end/strides of different lengths, filled as v0.19's Relay did.

v0.19's StridedSliceRel (src/relay/op/tensor/transform.cc) and topi::strided_slice
(include/tvm/topi/transform.h): without ``axes`` the slice covers every axis, and a
missing entry of axis ``i`` is filled from that axis' stride (itself filled with 1):
``begin`` with 0 (stride > 0) or INT64_MAX (the last index), ``end`` with INT64_MAX
(stride > 0) or 0 — so a reversed axis stops *before* index 0.  With ``axes`` the four
lists must be equally long.  In ``slice_mode="size"`` the fill still reads the given
strides, then ConvertToVec (topi/detail/strided_slice.h) turns each end into
``begin + size`` (INT64_MAX for a negative size) with stride 1.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, relay

from conftest import offloaded_partitions

from .helpers import check, import_text, rand, relay_fn

_MAX = 2**63 - 1


def _slice_text(shape, attrs: str) -> str:
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    return relay_fn(f"%x: Tensor[({dims}), float32]", f"strided_slice(%x, {attrs})")


@pytest.mark.parametrize("attrs,ref", [
    # one stride is strides[0]; the other axes get stride 1 (not the same stride)
    ("begin=[0, 0], end=[4, 6], strides=[2]", lambda x: x[0:4:2, 0:6]),
    ("begin=[3, 1], end=[0, 5], strides=[-1]", lambda x: x[3:0:-1, 1:5]),
    ("begin=[3, 5], end=[0, 0], strides=[-1]", None),  # axis 1: 5 -> 0 on stride 1: refused
    ("begin=[0, 1], end=[4, 6], strides=[3]", lambda x: x[0:4:3, 1:6]),
    # a missing end on a negative stride is 0: index 0 is left out
    ("begin=[0, 3], end=[2], strides=[1, -1]", lambda x: x[0:2, 3:0:-1]),
    ("begin=[0, -1], end=[4], strides=[1, -2]", lambda x: x[0:4, 5:0:-2]),
    # a missing begin on a negative stride is the last index; its end too is 0
    ("begin=[0], end=[2], strides=[1, -1]", lambda x: x[0:2, 5:0:-1]),
    ("begin=[], end=[], strides=[-1, -1]", lambda x: x[3:0:-1, 5:0:-1]),
    ("begin=[1], end=[3], strides=[1, 2]", lambda x: x[1:3, 0::2]),
    # strides fills the axes begin/end leave out, on a positive stride to the end
    ("begin=[2], end=[4]", lambda x: x[2:4, :]),
])
def test_missing_entries_are_filled_per_axis(attrs, ref):
    x = rand(4, 6)
    text = _slice_text(x.shape, attrs)
    if ref is None:
        with pytest.raises(ConversionError, match="strided_slice: begin 5 and end 0 run against"):
            import_text(text)
        return
    check(text, [x], ref(x))


def test_fill_reaches_every_axis_of_a_higher_rank():
    x = rand(3, 4, 5)
    check(_slice_text(x.shape, "begin=[1], end=[3], strides=[1, 1, -2]"), [x],
          x[1:3, :, 4:0:-2])
    check(_slice_text(x.shape, "begin=[0, 3], end=[3], strides=[2, -1]"), [x],
          x[0:3:2, 3:0:-1, :])


def test_a_single_stride_is_not_repeated_when_bmlib_runs_the_slice():
    # the probe's repro, through the builder: Relay typed it (2, 4), not (2, 2)
    v = relay.var("x", shape=(4, 4), dtype="float32")
    model = bmlib_relax.compile(relay.IRModule.from_expr(
        relay.Function([v], relay.strided_slice(v, [0, 0], [4, 4], [2]))))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = np.arange(16, dtype="float32").reshape(4, 4)
    np.testing.assert_array_equal(model(x), x[0:4:2, :])


def test_missing_reversed_bounds_on_a_run_time_axis():
    # the fill is the same on an axis of unknown length: x[:, d-1:0:-1]
    text = relay_fn("%x: Tensor[(2, ?), float32]",
                    "strided_slice(%x, begin=[0], end=[2], strides=[1, -1])")
    model = bmlib_relax.compile(text)
    for cols in (1, 2, 5):
        x = rand(2, cols)
        np.testing.assert_array_equal(model(x), x[:, cols - 1:0:-1])


@pytest.mark.parametrize("attrs,ref", [
    ("begin=[0], end=[2], strides=[1, -2]", lambda x: x[:, -1:0:-2]),  # filled bounds
    ("begin=[-1], end=[0], strides=[-2], axes=[1]", lambda x: x[:, -1:0:-2]),
    ("begin=[9223372036854775807], end=[0], strides=[-2], axes=[1]", lambda x: x[:, -1:0:-2]),
    ("begin=[-2], end=[-9223372036854775808], strides=[-2], axes=[1]", lambda x: x[:, -2::-2]),
])
def test_reversed_strides_below_minus_one_on_a_run_time_axis(attrs, ref):
    # TVM 0.27 sized x[b:INT64_MIN:-2] of a symbolic axis as empty, and a begin of
    # INT64_MAX negative: the import takes such a slice as x[b::-1][::2]
    text = relay_fn("%x: Tensor[(2, ?, 3), float32]", f"strided_slice(%x, {attrs})")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    assert not model.report.ops_host  # both slices on bmlib (the reversed extent rebound)
    for cols in (1, 2, 5, 8):
        x = rand(2, cols, 3)
        np.testing.assert_array_equal(model(x), ref(x))


@pytest.mark.parametrize("attrs,ref", [
    # the fill reads the given strides even though size mode then ignores them: a
    # reversed axis is filled begin=INT64_MAX, size 0 -> an empty axis
    ('begin=[1], end=[2], strides=[1, -1], slice_mode="size"', lambda x: x[1:3, 6:6]),
    # a missing size on a forward axis is INT64_MAX: from begin to the end
    ('begin=[1, 0], end=[2], slice_mode="size"', lambda x: x[1:3, 0:]),
    ('begin=[1, -2], end=[2], slice_mode="size"', lambda x: x[1:3, -2:]),
    ('begin=[1], end=[2], strides=[-1], slice_mode="size"', lambda x: x[1:3, :]),
])
def test_size_mode_fill(attrs, ref):
    x = rand(4, 6)
    check(_slice_text(x.shape, attrs), [x], ref(x))


def test_size_mode_fill_past_int64_is_refused():
    # begin 2 + the filled size INT64_MAX wrapped negative in v0.19's ConvertToVec: the
    # end came before the begin and StridedSliceOutputShape refused the slice
    with pytest.raises(ConversionError, match="strided_slice: begin 2 and end "):
        import_text(_slice_text((4, 6), 'begin=[1, 2], end=[2], slice_mode="size"'))


@pytest.mark.parametrize("attrs,message", [
    ("begin=[0, 0], end=[2, 2], strides=[1], axes=[0, 1]",
     r"axes \[0, 1\], begin, end and strides must be equally long \(2, 2, 2, 1\)"),
    ("begin=[0], end=[2], strides=[1, 1], axes=[1]",
     r"axes \[1\], begin, end and strides must be equally long \(1, 1, 1, 2\)"),
    ("begin=[0], end=[2, 2], strides=[1, 1], axes=[0, 1]",
     r"axes \[0, 1\], begin, end and strides must be equally long \(2, 1, 2, 2\)"),
    # no strides is a stride of 1 per axis; the short end is still refused
    ("begin=[0, 0], end=[2], axes=[0, 1]", r"axes \[0, 1\], .* equally long \(2, 2, 1, 2\)"),
    ("begin=[], end=[], strides=[], axes=[]", r"axes=\[\] slices no axis"),
])
def test_axes_need_lists_of_their_length(attrs, message):
    # v0.19's StridedSliceRel: "axes, begin, end, and strides must have the same length"
    with pytest.raises(ConversionError, match="strided_slice: " + message):
        import_text(_slice_text((4, 6), attrs))


def test_axes_with_no_strides_still_slice_with_stride_one():
    x = rand(4, 6)
    check(_slice_text(x.shape, "begin=[1, 2], end=[3, 5], axes=[1, 0]"), [x], x[2:5, 1:3])


@pytest.mark.parametrize("attrs,name", [
    ("begin=[0, 0, 0], end=[1, 1]", "begin"),
    ("begin=[0], end=[1, 1, 1]", "end"),
    ("begin=[0], end=[1], strides=[1, 1, 1]", "strides"),
])
def test_lists_longer_than_the_rank_are_refused(attrs, name):
    # without axes Relay filled each list up to the rank, then required all of them to be
    # as long as the axes (topi's StridedSliceOutputShape ICHECK): a longer one was refused
    with pytest.raises(ConversionError,
                       match=rf"strided_slice: {name} has 3 entries, more than the axes "
                             "of a 2-d tensor"):
        import_text(_slice_text((4, 6), attrs))


@pytest.mark.parametrize("attrs,ref", [
    ("begin=[0], end=[-9223372036854775808], strides=[1], axes=[1]", lambda x: x[:, 0:0]),
    ("begin=[-9223372036854775808], end=[3], strides=[1], axes=[1]", lambda x: x[:, 0:3]),
    ("begin=[-9223372036854775808], end=[0], strides=[-1], axes=[1]", lambda x: x[:, 0:0]),
    ("begin=[-1], end=[9223372036854775807], strides=[-2], axes=[1]", lambda x: x[:, 0:0]),
])
def test_far_bounds_against_the_stride_on_a_run_time_axis(attrs, ref):
    # CanonicalizeIndex clamped them whatever the extent; TVM 0.27 sized them as
    # extent - INT64_MIN: "Literal value ... exceeds range of int64"
    text = relay_fn("%x: Tensor[(2, ?, 3), float32]", f"strided_slice(%x, {attrs})")
    model = bmlib_relax.compile(text)
    for cols in (1, 4):
        x = rand(2, cols, 3)
        np.testing.assert_array_equal(model(x), ref(x))
