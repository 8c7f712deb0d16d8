"""Reductions whose TVM 0.27 lowering drifted from v0.19's Relay: an integer ``mean``
(v0.19's MeanCompute: the sum in the input dtype divided by the element count cast to
it) and ``argmax``/``argmin`` with ``select_last_index`` (v0.19's sequential
MakeArgmaxReducer / MakeArgminReducer, with NaNs and rows of the reducer's initial
value).  The references below are written from those v0.19 definitions."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError
from conftest import offloaded_partitions

from .helpers import check, import_text, relay_fn, run_relay

RELU_IN = np.array([-1, 0, 2], "float32")


def compile_beside_relu(params: str, bodies: list[str]):
    """Compile ``(*bodies, nn.relu(%r))`` and assert the relu (at least) was offloaded."""
    text = relay_fn(f"{params}, %r: Tensor[(3), float32]",
                    "(" + ", ".join(bodies + ["nn.relu(%r)"]) + ")")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return text, model


def run_both(text: str, model, *inputs: np.ndarray) -> list[list[np.ndarray]]:
    """The results of the compiled model and of the plain Relax build, each without the
    relu (checked here)."""
    runs = []
    for outs in (model(*inputs, RELU_IN), run_relay(text, *inputs, RELU_IN)):
        np.testing.assert_array_equal(outs[-1], [0, 0, 2])
        runs.append(outs[:-1])
    return runs


# ------------------------------------------------------------------ integer mean (v0.19)
def trunc_div(a: int, b: int) -> int:
    """C's integer division (LLVM sdiv/udiv): the quotient rounded toward zero."""
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def relay_int_mean(x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    """v0.19 MeanCompute for an integer ``x``: ``topi::sum`` in x's dtype (wrapping),
    divided (``topi::divide``: truncating) by the element count cast to x's dtype."""
    total = np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    axes = range(x.ndim) if axis is None else axis
    count = int(np.prod([x.shape[a] for a in axes]))
    divisor = int(np.array(count, np.int64).astype(x.dtype))
    flat = [trunc_div(int(t), divisor) for t in np.asarray(total).reshape(-1)]
    return np.array(flat, dtype=object).astype(x.dtype).reshape(np.shape(total))


INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
MEAN_ATTRS = [  # (Relay attrs, numpy axis, keepdims) over a (3, 5, 4) tensor
    ("axis=[1]", (1,), False),
    ("axis=[-1], keepdims=True", (2,), True),
    ("", None, False),
    ("axis=[1], exclude=True", (0, 2), False),
    ("axis=[0, 2], keepdims=True", (0, 2), True),
    ("axis=[0, 1, 2], keepdims=True", (0, 1, 2), True),
]


def full_range(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Values over the dtype's whole range: sums wrap, signed ones are negative too."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_an_integer_mean_is_the_wrapped_sum_truncated_by_the_count(dtype):
    x = full_range((3, 5, 4), dtype)
    bodies = [f"mean(%x, {attrs})" if attrs else "mean(%x)" for attrs, _, _ in MEAN_ATTRS]
    text, model = compile_beside_relu(f"%x: Tensor[(3, 5, 4), {dtype}]", bodies)
    for outs in run_both(text, model, x):
        for got, (attrs, axis, keepdims) in zip(outs, MEAN_ATTRS):
            want = relay_int_mean(x, axis, keepdims)
            assert got.dtype == np.dtype(dtype), attrs  # Relay's MeanRel keeps the dtype
            assert got.shape == want.shape, attrs
            np.testing.assert_array_equal(got, want, err_msg=attrs)


def test_an_integer_mean_rounds_toward_zero():
    x = np.array([[100, 100, -3], [-7, -1, -1], [7, 8, 9], [-9, -9, -9]], "int32")
    text, model = compile_beside_relu("%x: Tensor[(4, 3), int32]", ["mean(%x, axis=[1])"])
    for [got] in run_both(text, model, x):
        assert got.dtype == np.int32 and got.tolist() == [65, -3, 8, -9]


def test_an_integer_mean_feeds_the_ops_after_it():
    # the int64 result Relax's mean wrote broke these (a TypeError, a dtype mismatch)
    x = np.array([[7, 8, 9], [1, 2, 4], [-9, -9, -9], [100, 20, 3]], "int8")
    y = np.array([1, -2, 3, 4], "int8")
    text, model = compile_beside_relu(
        "%x: Tensor[(4, 3), int8], %y: Tensor[(4), int8]",
        ["add(mean(%x, axis=[1]), %y)",
         "concatenate((mean(%x, axis=[1], keepdims=True), %x), axis=1)",
         "cast(mean(%x, axis=[1]), dtype=\"float32\")"])
    mean = relay_int_mean(x, (1,), False)
    for added, joined, cast in run_both(text, model, x, y):
        assert added.dtype == np.int8 and joined.dtype == np.int8
        np.testing.assert_array_equal(added, (mean + y).astype("int8"))
        np.testing.assert_array_equal(joined, np.concatenate([mean[:, None], x], axis=1))
        np.testing.assert_array_equal(cast, mean.astype("float32"))


@pytest.mark.parametrize("dtype, shape, body, count", [
    ("int8", (2, 128), "mean(%x, axis=[1])", 128),
    ("int8", (16, 8), "mean(%x)", 128),
    ("int8", (2, 8, 16), "mean(%x, axis=[0], exclude=True, keepdims=True)", 128),
    ("uint8", (2, 256), "mean(%x, axis=[-1])", 256),
    ("int16", (2, 32768), "mean(%x, axis=[1])", 32768),
    ("uint16", (65536, 2), "mean(%x, axis=[0])", 65536),
])
def test_an_integer_mean_whose_count_does_not_fit_its_dtype_is_refused(dtype, shape, body,
                                                                          count):
    # v0.19 cast the count to the dtype as a constant: IntImm refused the literal
    with pytest.raises(ConversionError, match=rf"mean: .*{count} elements.*{dtype}") as info:
        import_text(relay_fn(f"%x: Tensor[{shape}, {dtype}]", body))
    assert info.value.location.startswith("snippet.relay:3:")


@pytest.mark.parametrize("dtype, n", [("int8", 127), ("uint8", 255), ("int16", 300)])
def test_an_integer_mean_whose_count_just_fits_runs(dtype, n):
    x = full_range((2, n), dtype, seed=n)
    text, model = compile_beside_relu(f"%x: Tensor[(2, {n}), {dtype}]", ["mean(%x, axis=[1])"])
    for [got] in run_both(text, model, x):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, relay_int_mean(x, (1,), False))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_an_integer_mean_over_a_run_time_extent(dtype):
    # the count is cast when the model runs: it wraps as v0.19's tir Cast did
    text, model = compile_beside_relu(f"%x: Tensor[(?, 3), {dtype}]",
                                      ["mean(%x, axis=[0])", "mean(%x, axis=[1], keepdims=True)"])
    for n in (1, 5, 200, 300):
        x = full_range((n, 3), dtype, seed=n)
        for over_rows, over_cols in run_both(text, model, x):
            assert over_rows.dtype == over_cols.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(over_rows, relay_int_mean(x, (0,), False))
            np.testing.assert_array_equal(over_cols, relay_int_mean(x, (1,), True))


@pytest.mark.parametrize("dtype, n", [("int8", 256), ("int8", 0), ("uint8", 512)])
def test_an_integer_mean_whose_run_time_count_is_zero_in_its_dtype_is_refused(dtype, n):
    # Relay divided by the wrapped count 0: the process stopped with SIGFPE
    _, model = compile_beside_relu(f"%x: Tensor[(?, 3), {dtype}]", ["mean(%x, axis=[0])"])
    with pytest.raises(RunCheckError, match=rf"<string>:3:\d+: mean: averages over {n} "
                                            rf"elements in this run.*{dtype}.* 0"):
        model(np.ones((n, 3), dtype), RELU_IN)
    got, _ = model(np.full((4, 3), 6, dtype), RELU_IN)  # a later run is computed
    np.testing.assert_array_equal(got, [6, 6, 6])


def test_an_int8_mean_dividing_the_lowest_sum_by_a_count_of_minus_one_is_refused():
    # 255 elements: the int8 count is -1; -128 / -1 overflows (SIGFPE in Relay)
    _, model = compile_beside_relu("%x: Tensor[(?, 2), int8]", ["mean(%x, axis=[0])"])
    x = np.zeros((255, 2), "int8")
    x[0] = [-128, 5]
    with pytest.raises(RunCheckError, match=r"mean: .*-128.*-1"):
        model(x, RELU_IN)
    x[0] = [-127, 5]
    got, _ = model(x, RELU_IN)
    np.testing.assert_array_equal(got, [127, -5])


# ------------------------------------------------------------- argmax / argmin (v0.19)
def relay_arg_reduce(x: np.ndarray, op: str, last: bool, axis, keepdims: bool) -> np.ndarray:
    """v0.19's CommReduceIdx with MakeArgmaxReducer / MakeArgminReducer, run in index
    order (the reduced axes flattened row-major): the state starts at (-1, min_value)
    (argmin: max_value), and keeps its index when ``acc > x`` (argmin: ``<``) or, on a
    tie, when its index is smaller (larger with ``select_last_index``) than x's; it keeps
    its value only when ``acc > x``.  Comparisons with NaN are false."""
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in axis)
    kept = [a for a in range(x.ndim) if a not in axes]
    rows = np.transpose(x, kept + list(axes)).reshape([x.shape[a] for a in kept] + [-1])
    if x.dtype == bool:  # an unsigned type of one bit: 0 to 1
        start = np.bool_(op == "argmin")
    else:
        info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
        start = x.dtype.type(info.min if op == "argmax" else info.max)
    out = np.empty(rows.shape[:-1], "int32")
    for at in np.ndindex(*rows.shape[:-1]):
        idx, val = -1, start
        for k, v in enumerate(rows[at]):
            better = bool(val > v) if op == "argmax" else bool(val < v)
            proper = idx > k if last else idx < k
            keep_index = better or (bool(val == v) and proper)
            idx, val = (idx if keep_index else k), (val if better else v)
        out[at] = idx
    if keepdims:
        out = out.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])
    return out


ARG_ATTRS = [  # (Relay attrs, axis, keepdims) over a (rows, 2, 3) tensor
    ("axis=[2]", (2,), False),
    ("axis=[1, 2], keepdims=True", (1, 2), True),
    ("axis=[0], exclude=True", (1, 2), False),
    ("axis=[-2]", (1,), False),
    ("", None, False),
]

INF, NAN = np.inf, np.nan
F32_LOW, F32_HIGH = float(np.finfo("float32").min), float(np.finfo("float32").max)
FLOAT_ROWS = [  # six values each: a (2, 3) block per row
    [-INF] * 6, [INF] * 6, [F32_LOW] * 6, [F32_HIGH] * 6, [NAN] * 6,
    [-INF, F32_LOW, -INF, -INF, F32_LOW, -INF], [INF, F32_HIGH, INF, F32_HIGH, INF, INF],
    [1, NAN, 0.5, 0.5, 0.25, 0.5], [NAN, 1, 0.5, 1, 0, 1], [1, 2, 2, NAN, 3, 3],
    [1, 2, 2, 0, 3, NAN], [-INF, NAN, -INF, -INF, -INF, -INF], [NAN, INF, INF, 1, INF, NAN],
    [3, 3, 1, 3, -1, -1], [0.0, -0.0, 0.0, -0.0, -0.0, 0.0], [-INF, -INF, 1, -INF, 1, -INF],
    [2, NAN, 2, NAN, 2, 1], [5, 4, 3, 2, 1, 0], [0, 1, 2, 3, 4, 5],
]


def float_rows(dtype: str) -> np.ndarray:
    rows = np.array(FLOAT_ROWS, "float64")
    if dtype != "float32":  # the dtype's own extremes
        info = np.finfo(dtype)
        rows[rows == F32_LOW], rows[rows == F32_HIGH] = info.min, info.max
    rng = np.random.default_rng(1)  # ties from a small pool
    ties = rng.choice([-1.0, 0.0, 2.0, NAN, -INF], size=(24, 6), p=[.3, .3, .3, .05, .05])
    return np.concatenate([rows, ties]).astype(dtype).reshape(-1, 2, 3)


def int_rows(dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    rows = [[info.min] * 6, [info.max] * 6, [0] * 6, [info.min, 0, info.min, 0, 0, info.min],
            [info.max, 1, info.max, 1, 1, info.max]]
    rng = np.random.default_rng(2)
    ties = rng.choice([info.min, 0, 1, info.max], size=(24, 6))
    return np.concatenate([np.array(rows), ties]).astype(dtype).reshape(-1, 2, 3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "uint8", "int32"])
def test_arg_reductions_follow_the_sequential_reducer(dtype):
    x = float_rows(dtype) if dtype.startswith("float") else int_rows(dtype)
    cases = [(op, last, attrs, axis, keepdims) for op in ("argmax", "argmin")
             for last in (False, True) for attrs, axis, keepdims in ARG_ATTRS]
    bodies = [f"{op}(%x, {attrs + ', ' if attrs else ''}select_last_index={last})"
              for op, last, attrs, _, _ in cases]
    text, model = compile_beside_relu(f"%x: Tensor[{x.shape}, {dtype}]", bodies)
    for outs in run_both(text, model, x):
        for got, (op, last, attrs, axis, keepdims) in zip(outs, cases):
            want = relay_arg_reduce(x, op, last, axis, keepdims)
            what = f"{op}({dtype}, {attrs}, select_last_index={last})"
            assert got.dtype == np.int32 and got.shape == want.shape, what
            np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("dtype, values, op, expected", [
    # a row of the reducer's initial value: the first element replaces (-1, init)
    ("uint8", [0, 0, 0], "argmax", 2), ("int8", [-128, -128, -128], "argmax", 2),
    ("uint8", [255, 255, 255], "argmin", 2), ("float32", [F32_LOW] * 3, "argmax", 2),
    # -inf is below float32's min_value (the lowest finite float): never taken
    ("float32", [-INF] * 3, "argmax", -1), ("float32", [INF] * 3, "argmin", -1),
    ("float32", [-INF, 1, -INF], "argmax", 1),
    # a NaN is always taken, and the value after it too
    ("float32", [1, NAN, 0.5], "argmax", 2), ("float32", [1, 0.5, NAN], "argmax", 2),
    ("float32", [NAN, 1, 0.5], "argmax", 1), ("float32", [0.5, NAN, 1], "argmin", 2),
    ("float32", [-INF, NAN, -INF], "argmax", 2),
])
def test_select_last_index_on_the_reducers_edge_values(dtype, values, op, expected):
    text = relay_fn(f"%x: Tensor[(1, 3), {dtype}]",
                    f"{op}(%x, axis=[1], select_last_index=True)")
    x = np.array([values], dtype)
    assert relay_arg_reduce(x, op, True, (1,), False).tolist() == [expected]  # the oracle
    for got in (bmlib_relax.compile(text)(x), run_relay(text, x)):
        assert got.dtype == np.int32 and got.tolist() == [expected]


@pytest.mark.parametrize("shape, attrs, axis, runs", [
    ("(?, 6)", "axis=[1]", (1,), [(4, 6), (1, 6)]),
    ("(4, ?)", "axis=[1]", (1,), [(4, 6), (4, 9), (4, 1)]),
    ("(2, ?, 3)", "axis=[1, 2]", (1, 2), [(2, 2, 3), (2, 4, 3)]),
    ("(?, 2, 3)", "axis=[0], exclude=True", (1, 2), [(6, 2, 3), (2, 2, 3)]),
])
def test_select_last_index_over_run_time_extents(shape, attrs, axis, runs):
    bodies = [f"{op}(%x, {attrs}, select_last_index=True)" for op in ("argmax", "argmin")]
    text, model = compile_beside_relu(f"%x: Tensor[{shape}, float32]", bodies)
    values = float_rows("float32").reshape(-1)
    for dims in runs:
        x = values[:int(np.prod(dims))].reshape(dims)
        for outs in run_both(text, model, x):
            for got, op in zip(outs, ("argmax", "argmin")):
                np.testing.assert_array_equal(got, relay_arg_reduce(x, op, True, axis, False),
                                              err_msg=f"{op} {dims}")


def test_arg_reductions_of_bool():
    # v0.19 starts a bool from min_value 0 (argmin: max_value 1): a row of False gives
    # argmax -1, of True argmin -1, unless select_last_index takes its last element
    x = np.array([[0, 1, 1], [0, 0, 0], [1, 1, 1], [1, 0, 1]], bool)
    cases = [(op, last) for op in ("argmax", "argmin") for last in (False, True)]
    bodies = [f"{op}(%x, axis=[1], select_last_index={last})" for op, last in cases]
    text, model = compile_beside_relu("%x: Tensor[(4, 3), bool]", bodies)
    for outs in run_both(text, model, x):
        for got, (op, last) in zip(outs, cases):
            want = relay_arg_reduce(x, op, last, (1,), False)
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {last}")
    assert relay_arg_reduce(x, "argmax", False, (1,), False).tolist() == [1, -1, 0, 0]
    assert relay_arg_reduce(x, "argmin", True, (1,), False).tolist() == [0, 2, 2, 1]


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_of_bool(op):
    # Relay's bool was uint1: max is any, min is all (TVM 0.27 has no extreme value for bool)
    x = np.array([[True, False, True], [False, False, False], [True, True, True]])
    text = relay_fn("%x: Tensor[(3, 3), bool]", f"{op}(%x, axis=[1])")
    out = run_relay(text, x)
    np.testing.assert_array_equal(out, x.max(1) if op == "max" else x.min(1))
    assert out.dtype == np.bool_


@pytest.mark.parametrize("shape", [(2, 300), ("?", 300)])
def test_float16_variance_rounds_the_difference_and_square_as_v019(shape):
    """v0.19's VarianceCompute: ``(x - mean)`` and its square are float16 ops (each
    rounded; 300^2 overflows to inf), the sum of squares is float32, rounded back."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (2, 300)).astype("float16")
    x[1, 0] = 400  # its square, 1.6e5, is past float16's 65504: inf
    mean = (x.astype("float32").sum(axis=1, keepdims=True) / 300).astype("float16")
    with np.errstate(over="ignore"):  # the overflow to inf is the point
        square = ((x - mean) * (x - mean)).astype("float16")  # numpy float16 ops round each
    want = (square.astype("float32").sum(axis=1) / np.float32(300)).astype("float16")
    assert np.isinf(want[1]) and np.isfinite(want[0])
    dims = ", ".join(str(d) for d in shape)
    text = relay_fn(f"%x: Tensor[({dims}), float16]",
                    "variance(%x, mean(%x, axis=[1], keepdims=True), axis=[1])")
    check(text, [x], want, rtol=0, atol=0)
