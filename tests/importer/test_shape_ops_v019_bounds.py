"""Shape and data-movement ops at the edges v0.19's Relay defined, where the import read
past a tensor, dropped part of it or raised a raw error.

Expected values come from v0.19's definitions: InferNewShape (src/relay/op/tensor/
transform.cc) for ``reshape``'s -1, BroadCastToLikeRel / ConcreteBroadcast for
``broadcast_to_like``, CollapseSumLikeRel's broadcast, ``topi::pad`` / ``topi::full``
casting the fill to the dtype (an int wraps), and the shape funcs' asserts for
``squeeze`` and ``split`` of a run-time axis.  Where v0.19 itself read outside the data
(a reflect pad as wide as the axis) or floored silently, the project refuses instead.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.errors import ConversionError, RunCheckError

from .helpers import check, relay_fn, run_relay


@pytest.mark.parametrize("shape, newshape, want", [
    ((0, 4), "[0, -1]", (0, 4)),         # the -1 reads the dim 0 did not copy
    ((3, 0), "[0, 0, -1]", (3, 0, 1)),   # nothing left: 1
    ((0, 4), "[-3, -1]", (0, 1)),
    ((2, 0, 3), "[0, -1, 3]", (2, 0, 3)),
    ((2, 3, 4), "[-1, 0]", (8, 3)),      # a 0 after the -1 copies input dim 1
])
def test_reshape_infers_minus_one_from_the_dims_left_as_v019(shape, newshape, want):
    out = run_relay(relay_fn(f"%x: Tensor[{shape}, float32]", f"reshape(%x, newshape={newshape})"),
                    np.arange(int(np.prod(shape)), dtype="float32").reshape(shape))
    assert out.shape == want
    np.testing.assert_array_equal(out.ravel(), np.arange(int(np.prod(shape))))


@pytest.mark.parametrize("op", ["reshape", "contrib_reverse_reshape"])
def test_minus_one_of_a_run_time_count_it_does_not_divide_is_a_run_check(op):
    """(?, 6) with 3 rows to [4, -1]: Relax's floor division made (4, 4) of 18 elements."""
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 6), float32]",
                                         f"{op}(%x, newshape=[4, -1])"))
    x = np.arange(24, dtype="float32").reshape(4, 6)
    np.testing.assert_array_equal(model(x=x), x.reshape(4, 6))
    with pytest.raises(RunCheckError, match=rf"{op}: the input of 18 elements does not "
                                            r"divide into the new shape's other dims, of 4"):
        model(x=x[:3])


def test_squeeze_of_a_run_time_axis_checks_it_is_one_and_takes_a_repeated_axis():
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 3), float32]",
                                         "squeeze(%x, axis=[0])"))
    np.testing.assert_array_equal(model(x=np.ones((1, 3), "float32")), np.ones(3))
    with pytest.raises(RunCheckError, match=r"squeeze: axis 0 has 2 entries in this run, "
                                            r"not 1"):
        model(x=np.ones((2, 3), "float32"))
    x = np.arange(6, dtype="float32").reshape(1, 3, 1, 2)
    check(relay_fn("%x: Tensor[(1, 3, 1, 2), float32]", "squeeze(%x, axis=[0, 0])"), [x],
          x.reshape(3, 1, 2))


def test_split_of_a_run_time_axis_checks_sections_and_indices():
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 2), float32]",
                                         "split(%x, indices_or_sections=3)"))
    x = np.arange(12, dtype="float32").reshape(6, 2)
    for got, want in zip(model(x=x), np.split(x, 3)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(RunCheckError, match=r"axis 0 has 4 entries in this run: 3 sections "
                                            r"must divide it"):
        model(x=x[:4])
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 2), float32]",
                                         "split(%x, indices_or_sections=[1, 3])"))
    for got, want in zip(model(x=x[:3]), np.split(x[:3], [1, 3])):
        np.testing.assert_array_equal(got, want)  # the last part empty
    with pytest.raises(RunCheckError, match=r"the split indices \[1, 3\] must lie within"):
        model(x=x[:2])


def test_broadcast_to_like_a_run_time_shape_keeps_the_static_data():
    """v0.19 typed broadcast_to_like((2, 3), (?, 3)) as (2, 3): the data, whatever rows
    the other operand has (4 rows used to read two rows past the data)."""
    model = bmlib_relax.compile(relay_fn(
        "%x: Tensor[(2, 3), float32], %y: Tensor[(?, 3), float32]", "broadcast_to_like(%x, %y)"))
    x = np.arange(6, dtype="float32").reshape(2, 3)
    for rows in (4, 1):
        np.testing.assert_array_equal(model(x=x, y=np.zeros((rows, 3), "float32")), x)
    model = bmlib_relax.compile(relay_fn(
        "%x: Tensor[(1, 3), float32], %y: Tensor[(?, 3), float32]", "broadcast_to_like(%x, %y)"))
    np.testing.assert_array_equal(model(x=x[:1], y=np.zeros((4, 3), "float32")),
                                  np.broadcast_to(x[:1], (4, 3)))


def test_reflect_pad_wider_than_the_axis_allows_is_refused():
    x = np.arange(12, dtype="float32").reshape(3, 4)
    body = 'nn.pad(%x, 0f, pad_width=[[0, {w}], [0, 0]], pad_mode="reflect")'
    check(relay_fn("%x: Tensor[(3, 4), float32]", body.format(w=2)), [x],
          np.pad(x, [(0, 2), (0, 0)], mode="reflect"))
    with pytest.raises(ConversionError, match=r"axis 0 pads 3 entries beside a dim of 3: a "
                                              r"pad_mode=reflect pad takes at most 2"):
        bmlib_relax.compile(relay_fn("%x: Tensor[(3, 4), float32]", body.format(w=3)))
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 4), float32]", body.format(w=1)))
    np.testing.assert_array_equal(model(x=x[:2]), np.pad(x[:2], [(0, 1), (0, 0)], "reflect"))
    with pytest.raises(RunCheckError, match=r"axis 0 has 1 entries in this run: a "
                                            r"pad_mode=reflect pad of 1 needs at least 2"):
        model(x=x[:1])


@pytest.mark.parametrize("dtype, value, want", [("int8", 300, 44), ("uint8", -1, 255),
                                                ("int8", -129, 127)])
def test_an_integer_fill_outside_the_dtype_wraps_as_v019_cast_it(dtype, value, want):
    x = np.ones((2, 2), dtype)
    expected = np.pad(x, [(1, 0), (0, 0)], constant_values=want)
    check(relay_fn(f"%x: Tensor[(2, 2), {dtype}]",
                   f"nn.pad(%x, {value}, pad_width=[[1, 0], [0, 0]])"), [x], expected)
    check(relay_fn("", f'full({value}, shape=[2], dtype="{dtype}")'), [],
          np.full(2, want, dtype))
    check(relay_fn(f"%x: Tensor[(2, 2), {dtype}]", f"full_like(%x, {value})"), [x],
          np.full((2, 2), want, dtype))


def test_full_like_of_bool_takes_a_nonzero_fill_as_true():
    check(relay_fn("%x: Tensor[(2), bool]", "full_like(%x, 2)"), [np.zeros(2, bool)],
          np.ones(2, bool))


@pytest.mark.parametrize("body, params, message", [
    ("collapse_sum_like(%x, %y)", ", %y: Tensor[(4, 2, 3), float32]", "more dims than the data"),
    ("collapse_sum_to(%x, shape=[4, 2, 3])", "", "more dims than the data"),
    ("collapse_sum_to(%x, shape=[4, 3])", "", r"axis 0: 4 against 2"),
    ("nn.batch_flatten(%s)", "", "needs a batch axis"),
])
def test_shapes_v019_type_inference_refused_are_refused_by_name(body, params, message):
    if body.startswith("nn.batch_flatten"):
        text = relay_fn("%s: float32", body)
    else:
        text = relay_fn(f"%x: Tensor[(2, 3), float32]{params}", body)
    with pytest.raises(ConversionError, match=message):
        bmlib_relax.compile(text)
    if "collapse_sum_to" in body:  # what it accepts still sums the broadcast axes
        x = np.arange(6, dtype="float32").reshape(2, 3)
        check(relay_fn("%x: Tensor[(2, 3), float32]", "collapse_sum_to(%x, shape=[1, 3])"),
              [x], x.sum(0, keepdims=True))
