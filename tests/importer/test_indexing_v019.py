"""Indexing ops where the importer strayed from TVM v0.19's Relay.

Each expectation is derived from v0.19's source: its type relations (GatherRel,
SliceLikeRel, TopKRel, OneHotRel, GatherNDRel, ScatterNDRel, AdvIndexRel in
src/relay/op/tensor/transform.cc and src/relay/op/algorithm/topk.cc), its TOPI
computes (topi.strided_set with within_index/make_idx, topi.unique's
_calc_first_occurence, topi::sparse_to_dense, the scan IR of topi.cumsum) and the
dtype tables of its contrib sort kernel (src/runtime/contrib/sort/sort.cc)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError, relay
from bmlib_relax.relay import parse
from conftest import offloaded_partitions, run_beside_offloaded_relu

from .helpers import import_text, relay_fn, run_relay

DATA = np.arange(8, dtype="float32").reshape(2, 4)


def _compile(params: str, body: str, bound=None):
    """``relu(body)``: the relu is offloaded, so the model runs bmlib and host code."""
    model = bmlib_relax.compile(parse(relay_fn(params, f"nn.relu({body})"), "index.relay"),
                                bound or {})
    assert offloaded_partitions(model.relax_module)
    return model


def _const(values, dtype="int32"):
    return relay.const(np.array(values, dtype))


# ------------------------------------------------------- 1. gather / scatter_elements, ? dims
GATHER = ("%d: Tensor[(2, ?), float32], %i: Tensor[(?, ?), int64]", "gather(%d, %i, axis=0)")
SCATTER = ("%d: Tensor[(2, ?), float32], %i: Tensor[(?, ?), int64], "
           "%u: Tensor[(?, ?), float32]",
           "scatter_elements(%d, %i, %u, axis=0, reduction=\"update\")")


@pytest.mark.parametrize("columns", [6, 64])
def test_run_time_indices_longer_than_the_data_are_refused(columns):
    """Unchecked, gather read the next row (or past the buffer) and scatter_elements
    wrote there (heap corruption for 64 columns)."""
    gather, scatter = _compile(*GATHER), _compile(*SCATTER)
    index = np.zeros((1, columns), "int64")
    with pytest.raises(RunCheckError, match=rf"gather: indices have {columns} entries on "
                                            r"axis 1, the data 4"):
        gather(DATA, index)
    with pytest.raises(RunCheckError, match=rf"scatter_elements: indices have {columns} "
                                            r"entries on axis 1, the data 4"):
        scatter(DATA, index, np.full((1, columns), 100.0, "float32"))


def test_run_time_indices_within_the_data_still_run():
    gather, scatter = _compile(*GATHER), _compile(*SCATTER)
    index = np.array([[1, 0, 1]], "int64")  # shorter on axis 1: v0.19 computed it
    np.testing.assert_array_equal(gather(DATA, index), DATA[index, np.arange(3)])
    expected = DATA.copy()
    expected[[1, 0, 1], [0, 1, 2]] = 100.0
    np.testing.assert_array_equal(scatter(DATA, index, np.full((1, 3), 100.0, "float32")),
                                  expected)


def test_static_gather_indices_must_match_the_data_on_other_axes():
    """v0.19's GatherRel asserted equal dims off the axis (AssertEQ): shorter is refused."""
    with pytest.raises(ConversionError, match="indices have 3 entries on axis 1, the data 4"):
        import_text(relay_fn("%d: Tensor[(2, 4), float32], %i: Tensor[(1, 3), int64]",
                             "gather(%d, %i, axis=0)"))


def test_static_scatter_elements_takes_shorter_indices():
    """ScatterElementsRel checked no shapes: shorter indices update part of the data."""
    out = run_relay(relay_fn("%d: Tensor[(2, 4), float32], %i: Tensor[(1, 2), int64], "
                             "%u: Tensor[(1, 2), float32]",
                             "scatter_elements(%d, %i, %u, axis=0)"),
                    DATA, np.array([[1, 0]], "int64"), np.array([[7, 9]], "float32"))
    expected = DATA.copy()
    expected[1, 0], expected[0, 1] = 7, 9
    np.testing.assert_array_equal(out, expected)


# ------------------------------------------------------------------- 2. sort / argsort axis
@pytest.mark.parametrize("body", ["argsort(%x, axis=-3)", "sort(%x, axis=-3)",
                                  "sort(%x, axis=5)", "argsort(%x, axis=2)"])
def test_sort_axis_out_of_range_is_refused(body):
    with pytest.raises(ConversionError, match=r"axis=-?\d is out of range for a 2-d tensor"):
        import_text(relay_fn("%x: Tensor[(2, 3), float32]", body))


def test_sort_negative_axis_in_range_sorts():
    x = np.array([[3, 1, 2], [9, 7, 8]], "float32")
    out = run_relay(relay_fn("%x: Tensor[(2, 3), float32]", "argsort(%x, axis=-2, "
                             "is_ascend=False)"), x)
    np.testing.assert_array_equal(out, np.argsort(-x, axis=0, kind="stable"))


# ------------------------------------------------------------------------- 3. strided_set
def _strided_set_v019(a, v, begin, end, strides):
    """topi.strided_set of v0.19: within_index selects a position, make_idx reads v."""
    out = a.copy()
    axes = []
    for i, dim in enumerate(a.shape):
        s = strides[i] if i < len(strides) else 1
        b = begin[i] if i < len(begin) else (0 if s > 0 else dim)
        e = end[i] if i < len(end) else (dim + 1 if s > 0 else -(dim + 1))
        b, e = (b + dim if b < 0 else b), (e + dim if e < 0 else e)
        axes.append((b, e, s, dim))
    for pos in np.ndindex(*a.shape):
        source = []
        for i, (b, e, s, dim) in zip(pos, axes):
            if s < 0:
                inside = e < i <= b and ((i - e) + e % abs(s) + 1) % abs(s) == 0
            else:
                inside = b <= i < e and (i - b) % s == 0
            if not inside:
                break
            clamped = dim - 1 if dim < b else b
            source.append((clamped - i) // abs(s) if s < 0 else (i - clamped) // s)
        else:
            out[pos] = v[tuple(source)]
    return out


@pytest.mark.parametrize("shape, vshape, begin, end, strides", [
    ((1, 5), (1, 2), [0, 4], [1, 0], [1, -2]),      # the probe: v0.19 gives [[0, 2, 0, 1, 0]]
    ((1, 7), (1, 3), [0, 6], [1, 0], [1, -3]),
    ((6, 5), (2, 5), [5, 0], [0, 5], [-3, 1]),
    ((4, 5), (2, 5), [0, 0], [4, 5], [2]),          # strides shorter than the rank: 1 after
    ((4, 5), (4, 3), [0, 1], [4, 4], [1]),
    ((3, 4), (2, 3), [0, 1], [2, 4], [1, 1]),
    ((6,), (2,), [-1], [-6], [-3]),
])
def test_strided_set_writes_the_cells_v019_wrote(shape, vshape, begin, end, strides):
    x = relay.var("x", shape=shape, dtype="float32")
    v = relay.var("v", shape=vshape, dtype="float32")
    data = np.arange(np.prod(shape), dtype="float32").reshape(shape) + 1
    values = -np.arange(np.prod(vshape), dtype="float32").reshape(vshape) - 1
    (out,) = run_beside_offloaded_relu(
        [x, v], [relay.strided_set(x, v, _const(begin), _const(end), _const(strides))],
        [data, values])
    np.testing.assert_array_equal(out, _strided_set_v019(data, values, begin, end, strides))


def test_strided_set_refuses_a_zero_stride_and_a_short_value():
    x = relay.var("x", shape=(4, 5), dtype="float32")
    v = relay.var("v", shape=(1, 5), dtype="float32")
    for strides, message in [([0, 1], "stride 0"), ([1, 1], "reads v outside")]:
        func = relay.Function([x, v], relay.strided_set(x, v, _const([0, 0]), _const([4, 5]),
                                                        _const(strides)))
        with pytest.raises(ConversionError, match=message):
            bmlib_relax.compile(relay.IRModule.from_expr(func))


# ------------------------------------------------------------------------------ 4. unique
@pytest.mark.parametrize("is_sorted", [True, False])
def test_unique_indices_are_padded_with_the_input_length(is_sorted):
    x = np.array([4, 5, 1, 2, 3, 3, 4, 5], "int32")
    out = run_relay(relay_fn("%x: Tensor[(8), int32]",
                             f"unique(%x, sorted={is_sorted})"), x)
    values, first = np.unique(x, return_index=True)
    if not is_sorted:  # in order of first occurrence (v0.19: indices = sort(first))
        first = np.sort(first)
        values = x[first]
    count = len(values)
    assert out[3].tolist() == [count]
    np.testing.assert_array_equal(out[0][:count], values)
    np.testing.assert_array_equal(out[1], np.concatenate([first, [8] * (8 - count)]))


# -------------------------------------------------------------------------- 5. slice_like
def test_slice_like_larger_than_the_data_is_refused():
    with pytest.raises(ConversionError, match="End index of axis 1 exceeds input shape: 5 vs 4"):
        import_text(relay_fn("%x: Tensor[(3, 4), float32], %l: Tensor[(2, 5), float32]",
                             "slice_like(%x, %l)"))


@pytest.mark.parametrize("axes, message", [
    ("[1]", "Axis 1 exceeds dimension 1 of target_shape"),
    ("[]", "Axes cannot be empty"),
])
def test_slice_like_axes_are_checked_against_the_like(axes, message):
    with pytest.raises(ConversionError, match=message):
        import_text(relay_fn("%x: Tensor[(3, 4), float32], %l: Tensor[(2), float32]",
                             f"slice_like(%x, %l, axes={axes})"))


def test_slice_like_run_time_like_larger_than_the_data_is_a_run_check_error():
    model = _compile("%x: Tensor[(3, 4), float32], %l: Tensor[(?, ?), float32]",
                     "slice_like(%x, %l)")
    x = np.arange(12, dtype="float32").reshape(3, 4)
    np.testing.assert_array_equal(model(x, np.zeros((2, 3), "float32")), x[:2, :3])
    with pytest.raises(RunCheckError, match=r"slice_like: .*5 entries on axis 1.*the data 4"):
        model(x, np.zeros((2, 5), "float32"))


# ----------------------------------------------------------- 6. raw exceptions, by name
def _parity_scan(x, axis, exclusive, product):
    """v0.19's scan IR in the bool (1-bit) type: + wraps (xor), * is and."""
    ints = np.moveaxis(x.astype(np.int64), axis, -1)
    out = np.empty_like(ints)
    acc = np.full(ints.shape[:-1], 1 if product else 0)
    for k in range(ints.shape[-1]):
        if exclusive:
            out[..., k] = acc
        acc = acc * ints[..., k] if product else (acc + ints[..., k]) % 2
        if not exclusive:
            out[..., k] = acc
    return np.moveaxis(out, -1, axis).astype(bool)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("exclusive", [False, True])
def test_bool_scans_compute_in_one_bit(op, exclusive):
    x = np.array([[True, False, True, True], [True, True, True, False]])
    text = relay_fn("%x: Tensor[(2, 4), bool]",
                    f"{op}(%x, axis=1, exclusive={exclusive})")
    out = run_relay(text, x)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, _parity_scan(x, 1, exclusive, op == "cumprod"))


def test_bool_cumsum_without_axis_flattens():
    x = np.array([True, False, True, True])
    out = run_relay(relay_fn("%x: Tensor[(4), bool]", "cumsum(%x)"), x)
    np.testing.assert_array_equal(out, [True, True, False, True])


def test_topk_k_below_minus_one_is_refused():
    """TopKRel took k < 1 as all, but v0.19's kernel reserved k + 1 entries first: the run
    died in vector::reserve."""
    with pytest.raises(ConversionError, match="k=-2"):
        import_text(relay_fn("%x: Tensor[(2, 3), float32]", "topk(%x, k=-2)"))


@pytest.mark.parametrize("axis", [-2, 2, 5])
def test_one_hot_axis_out_of_range_is_refused(axis):
    with pytest.raises(ConversionError, match=f"axis={axis}"):
        import_text(relay_fn("%i: Tensor[(2), int32]",
                             f"one_hot(%i, 1f, 0f, depth=3, axis={axis}, dtype=\"float32\")"))


def test_one_hot_axis_in_range_places_the_depth():
    out = run_relay(relay_fn("%i: Tensor[(2), int32]",
                             "one_hot(%i, 1f, 0f, depth=3, axis=0, dtype=\"float32\")"),
                    np.array([2, 0], "int32"))
    np.testing.assert_array_equal(out, np.eye(3, dtype="float32")[[2, 0]].T)


def _batched_take(data, index, axis, batch, mode):
    """v0.19's topi::take with ``batch_dims``, element by element."""
    length = data.shape[axis]
    index = np.clip(index, 0, length - 1) if mode == "clip" else \
        np.mod(index, length) if mode == "wrap" else index
    shape = data.shape[:axis] + index.shape[batch:] + data.shape[axis + 1:]
    out = np.empty(shape, data.dtype)
    for pos in np.ndindex(*shape):
        b, between = pos[:batch], pos[batch:axis]
        taken, rest = pos[axis:axis + index.ndim - batch], pos[axis + index.ndim - batch:]
        out[pos] = data[b + between + (index[b + taken],) + rest]
    return out


@pytest.mark.parametrize("data_shape, index_shape, axis, batch_dims, mode", [
    ((2, 5), (2, 3), 1, 1, "clip"),
    ((2, 3, 5), (2, 4), 2, 1, "wrap"),
    ((2, 3, 5, 2), (2, 3, 4), 2, 2, "clip"),
    ((2, 3, 5, 2), (2, 4, 2), 2, 1, "fast"),
    ((2, 3, 4), (2, 3, 2), 2, -1, "wrap"),
])
def test_take_with_batch_dims_takes_per_batch(data_shape, index_shape, axis, batch_dims,
                                              mode):
    # v0.19 took batch_dims (TakeRel, topi::take); it was refused as unsupported
    rng = np.random.default_rng(len(data_shape) * 10 + axis)
    data = rng.standard_normal(data_shape).astype("float32")
    length = data_shape[axis]
    low, high = (0, length) if mode == "fast" else (-length - 2, length + 2)
    index = rng.integers(low, high, index_shape).astype("int32")
    model = _compile(f"%x: Tensor[{data_shape}, float32], %i: Tensor[{index_shape}, int32]",
                     f'take(%x, %i, axis={axis}, batch_dims={batch_dims}, mode="{mode}")')
    batch = batch_dims % len(index_shape) if batch_dims < 0 else batch_dims
    np.testing.assert_array_equal(model(data, index),
                                  np.maximum(_batched_take(data, index, axis, batch, mode), 0))


def test_take_with_batch_dims_past_the_axis_is_refused():
    with pytest.raises(ConversionError, match=r"batch_dims=2 must lie within .* not past "
                                              r"axis 1"):
        import_text(relay_fn("%x: Tensor[(2, 3, 4), float32], %i: Tensor[(2, 3), int32]",
                             "take(%x, %i, axis=1, batch_dims=2)"))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_takes_its_on_and_off_values_at_run_time(axis):
    # v0.19's topi::one_hot read on_value/off_value as 0-d tensors when the model ran
    # (cast to dtype); they were refused as "must be a constant scalar"
    model = _compile("%i: Tensor[(2, 3), int32], %on: float64, %off: int32",
                     f'one_hot(%i, %on, %off, depth=4, axis={axis}, dtype="float32")')
    indices = np.array([[0, 3, 1], [2, 9, -1]], "int32")
    for on, off in ((5.5, -1), (-2.25, 3)):
        got = model(i=indices, on=np.float64(on), off=np.int32(off))
        hot = indices[..., None] == np.arange(4)  # an index outside [0, 4) sets none
        want = np.maximum(np.where(np.moveaxis(hot, -1, axis if axis >= 0 else -1), on, off),
                          0).astype("float32")
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ConversionError, match=r"on_value has shape \(2,\): one_hot takes a "
                                              r"0-d tensor"):
        import_text(relay_fn("%i: Tensor[(2), int32], %on: Tensor[(2), float32]",
                             'one_hot(%i, %on, 0f, depth=3, dtype="float32")'))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint32", "bool"])
@pytest.mark.parametrize("op", ["sort", "argsort"])
def test_sort_of_a_dtype_the_kernel_lacks_is_refused(op, dtype):
    with pytest.raises(ConversionError, match=f"{dtype}"):
        import_text(relay_fn(f"%x: Tensor[(5), {dtype}]", f"{op}(%x)"))


@pytest.mark.parametrize("dtype", ["int16", "uint32", "bool"])
def test_topk_of_a_dtype_the_kernel_lacks_is_refused(dtype):
    with pytest.raises(ConversionError, match=f"{dtype}"):
        import_text(relay_fn(f"%x: Tensor[(5), {dtype}]", "topk(%x, k=2)"))


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "float16", "uint32", "bool"])
@pytest.mark.parametrize("op", ["argsort(%x, dtype=\"{}\")",
                                "topk(%x, k=2, ret_type=\"indices\", dtype=\"{}\")"])
def test_index_dtype_the_kernel_lacks_is_refused(op, dtype):
    with pytest.raises(ConversionError, match=f"{dtype}"):
        import_text(relay_fn("%x: Tensor[(5), float32]", op.format(dtype)))


def test_topk_of_int8_still_runs():
    """v0.19's topk kernel (unlike sort) takes int8 and uint8 data."""
    x = np.array([3, -1, 2, 7, 0], "int8")
    out = run_relay(relay_fn("%x: Tensor[(5), int8]", "topk(%x, k=2, ret_type=\"values\")"),
                    x)
    np.testing.assert_array_equal(out, [7, 3])


# ---------------------------------------------------------------------- 7. sparse_to_dense
def _sparse_to_dense_v019(indices, shape, values, default):
    """topi::sparse_to_dense: every output position compared with each index row (the
    first columns of the position only); a later row wins, a row matching nothing is
    ignored."""
    indices = np.asarray(indices)
    indices = indices.reshape(1, 1) if indices.ndim == 0 else indices.reshape(len(indices), -1)
    values = np.broadcast_to(values, (len(indices),))
    out = np.full(shape, default, dtype=values.dtype)
    for pos in np.ndindex(*shape):
        for row, value in zip(indices, values):
            if all(pos[k] == row[k] for k in range(len(row))):
                out[pos] = value
    return out


def test_sparse_to_dense_ignores_an_index_outside_the_output():
    i = relay.var("i", shape=(3,), dtype="int32")
    x = relay.var("x", shape=(2,), dtype="float32")
    values = np.array([5, 6, 7], "float32")
    out = run_beside_offloaded_relu([x, i], [relay.sparse_to_dense(
        i, (4,), relay.const(values), relay.const(-1.0))],
        [np.ones(2, "float32"), np.array([1, 4, -1], "int32")])[0]
    np.testing.assert_array_equal(out, _sparse_to_dense_v019([1, 4, -1], (4,), values, -1))
    np.testing.assert_array_equal(out, [-1, 5, -1, -1])


@pytest.mark.parametrize("indices", [np.array([0, 2], "int32"), np.array([[0], [2]], "int32"),
                                     np.array([[0], [7]], "int32")])
def test_sparse_to_dense_short_index_rows_fill_whole_rows(indices):
    x = relay.var("x", shape=(2,), dtype="float32")
    i = relay.var("i", shape=indices.shape, dtype="int32")
    values = np.array([5, 6], "float32")
    out = run_beside_offloaded_relu([x, i], [relay.sparse_to_dense(
        i, (3, 2), relay.const(values), relay.const(-1.0))],
        [np.ones(2, "float32"), indices])[0]
    np.testing.assert_array_equal(out, _sparse_to_dense_v019(indices, (3, 2), values, -1))


def test_sparse_to_dense_index_rows_longer_than_the_rank_are_refused():
    with pytest.raises(ConversionError, match="3 columns.*2-d output"):
        import_text(relay_fn("%i: Tensor[(2, 3), int64], %v: Tensor[(2), float32]",
                             "sparse_to_dense(%i, %v, 0f, output_shape=[3, 4])"))


# ---------------------------------------------------------------------- 8. messages
@pytest.mark.parametrize("params, body, message", [
    ("%x: Tensor[(4), float32], %i: Tensor[(2), int64], %j: Tensor[(2), int64]",
     "adv_index((%x, %i, %j))", "too many indices for data: 2 index tensors, 1-d data"),
    ("%x: Tensor[(4, 3), float32], %i: Tensor[(3, 2), int64]", "gather_nd(%x, %i)",
     "GatherND: indices shape does satisfy"),
    ("%x: Tensor[(4, 3), float32], %i: Tensor[(1, 4, 2), int64]",
     "gather_nd(%x, %i, batch_dims=2)", "batch_dims=2"),
    ("%x: Tensor[(4, 3), float32], %i: Tensor[(2, 4), int64]",
     "gather_nd(%x, %i, batch_dims=1)", "batch_dims=1"),
    ("%x: Tensor[(3, 4), float32], %i: Tensor[(?, 1), int64]", "gather_nd(%x, %i)",
     "GatherND needs a static shape for the first axis of indices"),
    ("%x: Tensor[(3, 4), float32], %i: Tensor[(?, 1), int64], %u: Tensor[(1), float32]",
     "scatter_nd(%x, %i, %u)", "ScatterND needs a static shape for the first axis of indices"),
])
def test_malformed_index_operands_are_named(params, body, message):
    with pytest.raises(ConversionError, match=message):
        import_text(relay_fn(params, body))
