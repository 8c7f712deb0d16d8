"""Index values outside the data they index.

TVM's gathers and scatters (as Relay's) index their buffers unchecked: an out-of-range
``adv_index``/``gather``/``gather_nd`` read beside the tensor (a plausible-looking
value; a negative index read what lies before it), and an out-of-range
``scatter_nd``/``scatter_elements`` wrote beside it (heap corruption, a crash of the
process).  A run-time index is now checked when the model runs (``RunCheckError``
naming the op and its place), a constant one at import (``ConversionError`` naming the
bad entry)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError
from bmlib_relax.relay import parse
from conftest import offloaded_partitions

from .helpers import relay_fn

DATA = np.arange(12, dtype="float32").reshape(4, 3)


def _compile(params: str, body: str, bound=None):
    """``relu(body)``: the relu is offloaded, so the model runs bmlib and host code."""
    text = relay_fn(params, f"nn.relu({body})")
    model = bmlib_relax.compile(parse(text, "index.relay"), bound or {})
    assert offloaded_partitions(model.relax_module)
    return model


# (params, body, numpy reference of a row index ``i`` into DATA's axis 0, index array)
CASES = {
    "adv_index": ("%x: Tensor[(4, 3), float32], %i: Tensor[(2), int64]",
                  "adv_index((%x, %i))",
                  lambda i: DATA[[1, i]], lambda i: np.array([1, i], "int64")),
    "gather": ("%x: Tensor[(4, 3), float32], %i: Tensor[(2, 3), int64]",
               "gather(%x, %i, axis=0)",
               lambda i: np.take_along_axis(DATA, np.array([[1, 0, 2], [i, 0, 0]]), 0),
               lambda i: np.array([[1, 0, 2], [i, 0, 0]], "int64")),
    "gather_nd": ("%x: Tensor[(4, 3), float32], %i: Tensor[(1, 2), int64]",
                  "gather_nd(%x, %i)",
                  lambda i: DATA[[1, i]], lambda i: np.array([[1, i]], "int64")),
    "scatter_nd": ("%x: Tensor[(4, 3), float32], %i: Tensor[(1, 1), int64]",
                   "scatter_nd(%x, %i, ones(shape=[1, 3], dtype=\"float32\"))",
                   lambda i: np.where(np.arange(4)[:, None] == i, 1.0, DATA),
                   lambda i: np.array([[i]], "int64")),
    "take_fast": ("%x: Tensor[(4, 3), float32], %i: Tensor[(2), int64]",
                  "take(%x, %i, axis=0, mode=\"fast\")",
                  lambda i: DATA[[1, i]], lambda i: np.array([1, i], "int64")),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_an_index_in_range_gives_the_element(op):
    params, body, reference, index = CASES[op]
    model = _compile(params, body)
    for i in (0, 3):
        np.testing.assert_array_equal(model(DATA, index(i)), reference(i))


@pytest.mark.parametrize("value", [4, 1000000, -1, -5])
@pytest.mark.parametrize("op", sorted(CASES))
def test_an_index_out_of_range_is_a_run_check_error(op, value):
    params, body, _, index = CASES[op]
    model = _compile(params, body)
    name = "take" if op == "take_fast" else op
    with pytest.raises(RunCheckError, match=rf"^index.relay:3:\d+: {name}: .*must lie in "
                                            r"\[0, 4\)"):
        model(DATA, index(value))
    np.testing.assert_array_equal(model(DATA, index(2)), CASES[op][2](2))  # still runs


def test_scatter_elements_wraps_negative_indices_and_refuses_the_rest():
    model = _compile("%x: Tensor[(4, 3), float32], %i: Tensor[(1, 3), int64]",
                     "scatter_elements(%x, %i, ones(shape=[1, 3], dtype=\"float32\"), axis=0)")
    expected = DATA.copy()
    expected[[3, 0, 1], [0, 1, 2]] = 1.0
    np.testing.assert_array_equal(model(DATA, np.array([[-1, 0, 1]], "int64")), expected)
    for bad in (4, -5):
        with pytest.raises(RunCheckError, match=r"scatter_elements: indices must lie in "
                                                r"\[-4, 4\)"):
            model(DATA, np.array([[0, bad, 0]], "int64"))


def test_the_bound_of_a_run_time_sized_axis_is_this_runs_extent():
    model = _compile("%x: Tensor[(?, 3), float32], %i: Tensor[(1, 2), int64]",
                     "gather_nd(%x, %i)")
    rows = np.arange(15, dtype="float32").reshape(5, 3)
    np.testing.assert_array_equal(model(rows, np.array([[1, 4]], "int64")), rows[[1, 4]])
    with pytest.raises(RunCheckError, match="gather_nd: indices must lie in"):
        model(DATA, np.array([[1, 4]], "int64"))


def test_an_index_tuple_is_checked_against_each_axis_it_indexes():
    model = _compile("%x: Tensor[(4, 3), float32], %i: Tensor[(2, 1), int64]",
                     "gather_nd(%x, %i)")
    assert model(DATA, np.array([[3], [2]], "int64")).tolist() == [11]
    with pytest.raises(RunCheckError, match=r"must lie in \[0, 4\), \[0, 3\) at positions "
                                            r"0..1 of axis 0"):
        model(DATA, np.array([[2], [3]], "int64"))  # row 2 exists, column 3 does not


def test_an_empty_run_time_index_indexes_nothing():
    model = _compile("%x: Tensor[(4, 3), float32], %i: Tensor[(?), int64]",
                     "adv_index((%x, %i))")
    assert model(DATA, np.zeros(0, "int64")).shape == (0, 3)


def test_a_constant_index_out_of_range_is_refused_at_import():
    with pytest.raises(ConversionError, match=r"^index.relay:3:\d+: gather_nd: indices: entry "
                                              r"\[1, 0\] is 7, out of range"):
        _compile("%x: Tensor[(4, 3), float32], %i: Tensor[(2, 1), int64]", "gather_nd(%x, %i)",
                 {"i": np.array([[0], [7]], "int64")})


def test_sparse_to_dense_ignores_indices_outside_the_output():
    # v0.19's topi::sparse_to_dense compares each output position with the index rows:
    # a row outside the output matches none and is ignored (no read or write past it)
    model = _compile("%i: Tensor[(2, 2), int64], %v: Tensor[(2), float32]",
                     "sparse_to_dense(%i, %v, 0f, output_shape=[3, 4])")
    out = model(np.array([[0, 1], [2, 3]], "int64"), np.array([5, 6], "float32"))
    assert out[0, 1] == 5 and out[2, 3] == 6 and out.sum() == 11
    out = model(np.array([[0, 1], [2, 4]], "int64"), np.array([5, 6], "float32"))
    assert out[0, 1] == 5 and out.sum() == 5


@pytest.mark.parametrize("op", ["sparse_to_dense", "dyn.sparse_to_dense"])
def test_sparse_to_dense_takes_one_value_per_index_row(op):
    # v0.19 read sparse_values[j] for index row j unchecked: 1 value for 4 rows read
    # three floats past its end into the output (4.58e-41, 9.16e-18, ...)
    shape = "output_shape=[3, 4])" if op == "sparse_to_dense" else "%s)"
    params = "%i: Tensor[(?, 2), int64], %v: Tensor[(?), float32]" + \
        (", %s: Tensor[(2), int64]" if op != "sparse_to_dense" else "")
    model = _compile(params, f"{op}(%i, %v, 0f, {shape}",
                     {"s": np.array([3, 4], "int64")} if op != "sparse_to_dense" else None)
    rows = np.array([[0, 0], [1, 1], [2, 2], [2, 3]], "int64")
    out = model(i=rows, v=np.array([5, 6, 7, 8], "float32"))
    want = np.zeros((3, 4), "float32")
    want[rows[:, 0], rows[:, 1]] = [5, 6, 7, 8]
    np.testing.assert_array_equal(out, want)
    for values in ([5.0], []):
        with pytest.raises(RunCheckError, match=rf"index.relay:3:\d+: {op}: sparse_values "
                                                rf"has {len(values)} entries for 4 index rows"):
            model(i=rows, v=np.array(values, "float32"))


def test_sparse_to_dense_with_a_constant_count_of_values_not_the_rows_is_refused():
    with pytest.raises(ConversionError, match=r"sparse_values has 3 entries for 2 index rows"):
        _compile("%i: Tensor[(2, 2), int64], %v: Tensor[(3), float32]",
                 "sparse_to_dense(%i, %v, 0f, output_shape=[3, 4])")


def test_gather_indices_longer_than_the_data_on_another_axis_are_refused():
    with pytest.raises(ConversionError, match="indices have 4 entries on axis 1, the data 3"):
        _compile("%x: Tensor[(4, 3), float32], %i: Tensor[(2, 4), int64]",
                 "gather(%x, %i, axis=0)")


IMAGES = np.arange(2 * 3 * 8 * 8, dtype="float32").reshape(2, 3, 8, 8)


@pytest.mark.parametrize("op, params, body, batch_index", [
    ("image.crop_and_resize",
     "%x: Tensor[(2, 3, 8, 8), float32], %b: Tensor[(1, 4), float32], %i: Tensor[(1), int32]",
     "image.crop_and_resize(%x, %b, %i, crop_size=[2, 2])",
     lambda k: (np.array([[0, 0, 1, 1]], "float32"), np.array([k], "int32"))),
    ("vision.roi_align", "%x: Tensor[(2, 3, 8, 8), float32], %r: Tensor[(1, 5), float32]",
     "vision.roi_align(%x, %r, pooled_size=[2, 2], spatial_scale=1f, sample_ratio=2)",
     lambda k: (np.array([[k, 0, 0, 4, 4]], "float32"),)),
    ("vision.roi_pool", "%x: Tensor[(2, 3, 8, 8), float32], %r: Tensor[(1, 5), float32]",
     "vision.roi_pool(%x, %r, pooled_size=[2, 2], spatial_scale=1f)",
     lambda k: (np.array([[k, 0, 0, 4, 4]], "float32"),)),
])
def test_the_image_of_a_box_or_roi_is_checked(op, params, body, batch_index):
    """Out of range, TOPI cropped/pooled from beside the batch: NaN and garbage for -1 and
    2, a crash for a large index."""
    model = _compile(params, body)
    first, second = model(IMAGES, *batch_index(0)), model(IMAGES, *batch_index(1))
    np.testing.assert_array_equal(second - first, 3 * 8 * 8)  # the next image's values
    for bad in (-1, 2, 1000000):
        with pytest.raises(RunCheckError, match=rf"{op}: .*must lie in \[0, 2\)"):
            model(IMAGES, *batch_index(bad))


def test_unravel_index_into_a_shape_with_a_zero_dim_is_refused():
    """Its strides divide: a 0 dim in the shape stopped the process with SIGFPE."""
    model = bmlib_relax.compile(parse(relay_fn(
        "%i: Tensor[(2), int64], %s: Tensor[(2), int64]", "unravel_index(%i, %s)"),
        "index.relay"))
    np.testing.assert_array_equal(model(np.array([3, 5], "int64"), np.array([2, 4], "int64")),
                                  np.array(np.unravel_index([3, 5], (2, 4))))
    with pytest.raises(RunCheckError, match="unravel_index: the shape has a dim that is not "
                                            "positive"):
        model(np.array([3, 5], "int64"), np.array([0, 4], "int64"))
    with pytest.raises(ConversionError, match=r"the shape \[2, 0\] has a dim that is not"):
        bmlib_relax.compile(parse(relay_fn("%i: Tensor[(2), int64], %s: Tensor[(2), int64]",
                                           "unravel_index(%i, %s)"), "index.relay"),
                            {"s": np.array([2, 0], "int64")})


@pytest.mark.parametrize("new_shape, message", [
    ([0, -1], "may hold .* one -1, inferred from the other dims, which then must not hold a 0"),
    ([3, 0], "does not hold the dense shape's element count"),
    ([4, 2], "does not hold the dense shape's element count"),
    ([-1, -1], "may hold dims >= 0 and one -1"),
    ([-2, 3], "may hold dims >= 0 and one -1"),
])
def test_sparse_reshape_refuses_a_shape_it_cannot_reshape_to(new_shape, message):
    """A 0 in the new shape divided by zero (SIGFPE: where() computes both its sides) and a
    changed element count gave indices into another tensor; TensorFlow refuses both."""
    model = bmlib_relax.compile(parse(relay_fn(
        "%i: Tensor[(?, 2), int64], %p: Tensor[(2), int64], %n: Tensor[(2), int64]",
        "sparse_reshape(%i, %p, %n)"), "index.relay"))
    indices, dense = np.array([[0, 1], [1, 2]], "int64"), np.array([2, 3], "int64")
    new_indices, shape = model(indices, dense, np.array([3, -1], "int64"))
    assert shape.tolist() == [3, 2] and new_indices.tolist() == [[0, 1], [2, 1]]
    with pytest.raises(RunCheckError, match=f"sparse_reshape: the new shape {message}"):
        model(indices, dense, np.array(new_shape, "int64"))


@pytest.mark.parametrize("op", ["roi_align", "roi_pool"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_roi_coordinate_that_is_not_finite_is_refused(op, value):
    """TOPI's bounds tests compare false with NaN: a NaN box pooled plausible values from
    the image's edge (roi_align gave 8.25 ... for a NaN corner)."""
    extra = ", sample_ratio=2" if op == "roi_align" else ""
    model = _compile("%x: Tensor[(2, 3, 8, 8), float32], %r: Tensor[(1, 5), float32]",
                     f"vision.{op}(%x, %r, pooled_size=[2, 2], spatial_scale=1f{extra})")
    with pytest.raises(RunCheckError, match=f"vision.{op}: the ROIs hold a NaN or infinite"):
        model(IMAGES, np.array([[0, 0, 0, value, 4]], "float32"))
    assert np.isfinite(model(IMAGES, np.array([[0, 0, 0, 2.5, 4]], "float32"))).all()
