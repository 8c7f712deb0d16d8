"""Pools as TVM v0.19's Relay computed them, where TVM 0.27's topi changed.

* ``ceil_mode``: v0.19 sized the output ``(in + pad - span + s - 1) / s + 1``
  (src/relay/op/nn/pooling_common.h ``calculate_pool_dimension``) and its topi
  ``pool_impl_nd`` computed every such window, also a last one that starts in the
  after-padding; 0.27's topi drops that window (a 3x3 result where Relay had 4x4).
* integer data: Relay types a pool's result in the input dtype; 0.27's avg pools
  divide by an int64 (window) or int32 (adaptive) count and return that dtype.

The oracle below follows v0.19's ``include/tvm/topi/nn/pooling.h`` line by line
(padding values, window counts with C's truncating division, wrapping integer sums),
independently of the importer.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError
from conftest import offloaded_partitions

from .helpers import import_text, rand, relay_fn, run_relay


def _tdiv(a: int, b: int) -> int:
    """C's (and TIR's ``Div``) integer division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _lowest(dtype) -> float:
    """``tvm::min_value``: the padding of a max pool."""
    dtype = np.dtype(dtype)
    return np.iinfo(dtype).min if dtype.kind in "iu" else np.finfo(dtype).min


def pool_v19(x, kind, pool, strides, padding, dilation=None, ceil_mode=False,
             count_include_pad=False):
    """v0.19 ``topi::nn::pool_impl_nd`` on ``(N, C, *spatial)`` data; ``padding`` is
    ``[before..., after...]``.  The result is in the input dtype (Relay's type)."""
    nd = len(pool)
    dilation = dilation or [1] * nd
    data = x.shape[2:]
    head, tail = list(padding[:nd]), list(padding[nd:])
    offset = [s - 1 if ceil_mode else 0 for s in strides]
    tail_ceil = [t + o for t, o in zip(tail, offset)]
    out = [(data[i] - (pool[i] - 1) * dilation[i] - 1 + head[i] + tail_ceil[i]) // strides[i] + 1
           for i in range(nd)]
    is_int = x.dtype.kind in "iu"
    # v0.19 pads with an int32 0 (``pad(x, ..., 0)``), which promotes int8/int16/uint8
    # data to int32; unpadded, it sums in the input dtype (wrapping: LLVM's plain add
    # below 32 bits)
    padded_sum = any(head) or any(tail_ceil)
    sum_dtype = np.int32 if padded_sum and x.dtype.itemsize < 4 else x.dtype
    pad_value = _lowest(x.dtype) if kind == "max" else 0
    padded = np.pad(x, [(0, 0), (0, 0)] + list(zip(head, tail_ceil)), constant_values=pad_value)
    result = np.zeros(x.shape[:2] + tuple(out), dtype=x.dtype)
    for o in itertools.product(*[range(n) for n in out]):
        taps = [[o[i] * strides[i] + r * dilation[i] for r in range(pool[i])] for i in range(nd)]
        window = padded[(slice(None), slice(None)) + np.ix_(*taps)].reshape(x.shape[:2] + (-1,))
        if kind == "max":
            result[(slice(None), slice(None)) + o] = window.max(axis=-1)
            continue
        count = 1
        for i in range(nd):
            start = o[i] * strides[i] - head[i]
            end = start + (pool[i] - 1) * dilation[i]
            if count_include_pad:
                end = min(end, data[i] + tail_ceil[i] - 1 - offset[i])
                count *= _tdiv(end - start, dilation[i]) + 1
            else:
                jumps = max(_tdiv(dilation[i] - 1 - start, dilation[i]), 0)
                end = min(end, data[i] - 1)
                count *= _tdiv(end - (start + dilation[i] * jumps), dilation[i]) + 1
        if not count_include_pad:
            count = max(count, 1)
        if is_int:  # pool_sum, then div truncates
            sums = window.sum(axis=-1, dtype=sum_dtype)
            quotient = [_tdiv(int(v), count) for v in sums.ravel()]
            result[(slice(None), slice(None)) + o] = np.array(quotient).reshape(sums.shape)
        else:
            with np.errstate(invalid="ignore"):
                sums = window.astype(np.float64).sum(axis=-1)
                result[(slice(None), slice(None)) + o] = sums / np.float64(count)
    return result


def _pool_text(shape, dtype, kind, nd, pool, strides, padding, dilation=None, ceil_mode=False,
               count_include_pad=False, layout=None):
    attrs = f"pool_size={list(pool)}, strides={list(strides)}, padding={list(padding)}"
    if dilation:
        attrs += f", dilation={list(dilation)}"
    if ceil_mode:
        attrs += ", ceil_mode=True"
    if count_include_pad:
        attrs += ", count_include_pad=True"
    if layout:
        attrs += f', layout="{layout}"'
    return relay_fn(f"%x: Tensor[{tuple(shape)}, {dtype}]", f"nn.{kind}_pool{nd}d(%x, {attrs})")


def _assert_same(got, want):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype)
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # NaN == NaN
        assert np.array_equal(np.signbit(got), np.signbit(want), equal_nan=True)


# (pool, strides, padding [t, l, b, r], dilation); each has a last window (in H, W or both)
# that starts in the after-padding under ceil_mode, on a 5x6 input.
CEIL_2D = {
    "k2s2p1": ((2, 2), (2, 2), (1, 1, 1, 1), (1, 1)),
    "k3s2_asym": ((3, 3), (2, 2), (1, 0, 1, 2), (1, 1)),
    "k3s3p2": ((3, 3), (3, 3), (2, 2, 2, 2), (1, 1)),
    "dilated": ((2, 2), (3, 2), (0, 1, 2, 1), (2, 1)),
    "dilated_start_in_pad": ((2, 2), (3, 3), (0, 0, 2, 2), (2, 1)),
    "no_window_dropped": ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),
}
KINDS = [("max", False), ("avg", False), ("avg", True)]


@pytest.mark.parametrize("kind,include", KINDS)
@pytest.mark.parametrize("case", sorted(CEIL_2D))
def test_ceil_mode_pool2d_keeps_windows_that_start_in_the_padding(kind, include, case):
    pool, strides, padding, dilation = CEIL_2D[case]
    x = rand(1, 2, 5, 6)
    text = _pool_text(x.shape, "float32", kind, 2, pool, strides, padding, dilation, True, include)
    _assert_same(run_relay(text, x), pool_v19(x, kind, pool, strides, padding, dilation, True,
                                              include))


def test_the_probe_4x4_result_and_the_max_of_an_all_padding_window():
    x = np.arange(25, dtype="float32").reshape(1, 1, 5, 5)
    for kind in ("max", "avg"):
        text = _pool_text(x.shape, "float32", kind, 2, (2, 2), (2, 2), (1, 1, 1, 1),
                          ceil_mode=True)
        got = run_relay(text, x)
        assert got.shape == (1, 1, 4, 4)
        # the last row and column hold padding only: tvm::min_value for max, 0 / max(0, 1)
        # for avg (count_include_pad=False)
        edge = np.finfo("float32").min if kind == "max" else 0.0
        np.testing.assert_array_equal(got[0, 0, 3], edge)
        np.testing.assert_array_equal(got[0, 0, :, 3], edge)


@pytest.mark.parametrize("kind,include", KINDS)
@pytest.mark.parametrize("nd,shape,pool,strides,padding,dilation", [
    (1, (1, 2, 7), (2,), (2,), (1, 1), (1,)),
    (1, (1, 2, 8), (3,), (4,), (0, 2), (2,)),
    (3, (1, 2, 5, 4, 3), (2, 2, 2), (2, 2, 2), (1, 1, 0, 1, 1, 1), (1, 1, 1)),
    (3, (1, 1, 3, 5, 4), (2, 3, 2), (2, 2, 3), (0, 1, 1, 2, 1, 1), (1, 1, 1)),
])
def test_ceil_mode_pool1d_and_3d(kind, include, nd, shape, pool, strides, padding, dilation):
    x = rand(*shape)
    text = _pool_text(shape, "float32", kind, nd, pool, strides, padding, dilation, True, include)
    want = pool_v19(x, kind, pool, strides, padding, dilation, True, include)
    # TVM 0.27's topi drops a last window starting at or past in + pad_before: some does
    assert any((want.shape[2 + i] - 1) * strides[i] >= shape[2 + i] + padding[i]
               for i in range(nd))
    _assert_same(run_relay(text, x), want)


@pytest.mark.parametrize("kind,include", KINDS)
def test_ceil_mode_pool2d_nhwc(kind, include):
    x = rand(1, 5, 6, 2)
    pool, strides, padding, dilation = CEIL_2D["k3s2_asym"]
    text = _pool_text(x.shape, "float32", kind, 2, pool, strides, padding, dilation, True,
                      include, layout="NHWC")
    want = pool_v19(x.transpose(0, 3, 1, 2), kind, pool, strides, padding, dilation, True,
                    include)
    _assert_same(run_relay(text, x), want.transpose(0, 2, 3, 1))


def test_count_include_pad_window_past_the_padding_divides_by_its_count():
    # k=1, s=4 / s=5 on 4 rows: the last window starts at row 4 (count 0: 0/0 is NaN in
    # v0.19's float div) or row 5 (count -1: 0/-1 is -0.0).
    x = rand(1, 1, 4, 5)
    for strides in ((4, 4), (5, 4)):
        text = _pool_text(x.shape, "float32", "avg", 2, (1, 1), strides, (0, 0, 0, 0),
                          ceil_mode=True, count_include_pad=True)
        want = pool_v19(x, "avg", (1, 1), strides, (0, 0, 0, 0), None, True, True)
        assert want.shape == (1, 1, 2, 2)
        _assert_same(run_relay(text, x), want)


def test_integer_count_include_pad_window_of_count_zero_is_refused():
    # v0.19 divided the int32 window sum by a count of 0 there.
    text = _pool_text((1, 1, 4, 5), "int32", "avg", 2, (1, 1), (4, 4), (0, 0, 0, 0),
                      ceil_mode=True, count_include_pad=True)
    with pytest.raises(ConversionError, match="nn.avg_pool2d.*count of 0"):
        import_text(text)


@pytest.mark.parametrize("kind,include", KINDS)
def test_ceil_mode_pool2d_offloaded(kind, include):
    x = rand(1, 2, 5, 6)
    pool, strides, padding, dilation = CEIL_2D["k2s2p1"]
    text = _pool_text(x.shape, "float32", kind, 2, pool, strides, padding, dilation, True,
                      include)
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    _assert_same(model(x=x), pool_v19(x, kind, pool, strides, padding, dilation, True, include))


@pytest.mark.parametrize("include", [False, True])
def test_ceil_mode_avg_pool_hidden_by_a_global_pool(include):
    # The shape change followed by a global pool that hides it (the probe's program).
    kind = "avg"
    x = rand(1, 2, 5, 5)
    attrs = "pool_size=[2, 2], strides=[2, 2], padding=[1, 1, 1, 1], ceil_mode=True"
    if include:
        attrs += ", count_include_pad=True"
    text = relay_fn("%x: Tensor[(1, 2, 5, 5), float32]",
                    f"%0 = nn.{kind}_pool2d(%x, {attrs}) /* ty=Tensor[(1, 2, 4, 4), float32] */;"
                    "\n  nn.global_avg_pool2d(%0) /* ty=Tensor[(1, 2, 1, 1), float32] */")
    pooled = pool_v19(x, kind, (2, 2), (2, 2), (1, 1, 1, 1), None, True, include)
    want = pooled.astype(np.float64).mean(axis=(2, 3), keepdims=True).astype("float32")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    np.testing.assert_allclose(model(x=x), want, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- integer dtypes
INT_DTYPES = ["int8", "int16", "int32", "uint8"]


def _int_data(shape, dtype, seed=0):
    """int8/int16/uint8 values near the dtype's range, so that sums in the input dtype
    wrap; int32 ones small: TVM adds int32 with LLVM's ``nsw`` flag, an overflow is
    undefined there and pins nothing."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    bound = 1000 if info.bits >= 32 else info.max * 15 // 16
    return rng.integers(-bound if info.min else 0, bound + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("padding,ceil,include", [
    ((0, 0, 0, 0), False, False),  # unpadded: v0.19 summed in the input dtype, wrapping
    ((1, 1, 1, 1), False, False),  # padded: in int32
    ((1, 1, 1, 1), False, True),
    ((1, 1, 1, 1), True, False),
    ((1, 1, 1, 1), True, True),
])
def test_integer_avg_pool2d_keeps_the_input_dtype(dtype, padding, ceil, include):
    x = _int_data((1, 2, 5, 6), dtype)
    pool, strides = (3, 3), (2, 2)
    text = _pool_text(x.shape, dtype, "avg", 2, pool, strides, padding, None, ceil, include)
    _assert_same(run_relay(text, x), pool_v19(x, "avg", pool, strides, padding, None, ceil,
                                              include))


@pytest.mark.parametrize("dtype", ["int8", "int32"])
@pytest.mark.parametrize("nd,shape,pool,strides,padding", [
    (1, (1, 2, 7), (3,), (2,), (1, 1)),
    (3, (1, 1, 4, 5, 3), (2, 2, 2), (2, 2, 1), (0, 1, 0, 1, 0, 0)),
])
def test_integer_avg_pool1d_3d_keep_the_input_dtype(dtype, nd, shape, pool, strides, padding):
    x = _int_data(shape, dtype, seed=1)
    text = _pool_text(shape, dtype, "avg", nd, pool, strides, padding, None, True, False)
    _assert_same(run_relay(text, x), pool_v19(x, "avg", pool, strides, padding, None, True))


@pytest.mark.parametrize("dtype", ["int8", "int32"])
def test_integer_max_pool_ceil_window_in_padding_is_the_dtype_minimum(dtype):
    x = _int_data((1, 1, 5, 5), dtype)
    text = _pool_text(x.shape, dtype, "max", 2, (2, 2), (2, 2), (1, 1, 1, 1), ceil_mode=True)
    want = pool_v19(x, "max", (2, 2), (2, 2), (1, 1, 1, 1), None, True)
    assert want[0, 0, 3, 3] == np.iinfo(dtype).min
    _assert_same(run_relay(text, x), want)


def _adaptive_v19(x, out_size):
    """v0.19 ``adaptive_pool_impl`` (avg) on (N, C, *spatial): windows
    ``[floor(i*in/out), ceil((i+1)*in/out))``, summed in the input dtype, divided by the
    window's element count (computed in the input dtype: it fits in these tests)."""
    data = x.shape[2:]
    result = np.zeros(x.shape[:2] + tuple(out_size), dtype=x.dtype)
    for o in itertools.product(*[range(n) for n in out_size]):
        sl = tuple(slice(o[i] * data[i] // out_size[i], -(-(o[i] + 1) * data[i] // out_size[i]))
                   for i in range(len(out_size)))
        window = x[(slice(None), slice(None)) + sl].reshape(x.shape[:2] + (-1,))
        sums = window.sum(axis=-1, dtype=x.dtype)
        count = window.shape[-1]
        result[(slice(None), slice(None)) + o] = np.array(
            [_tdiv(int(v), count) for v in sums.ravel()]).reshape(sums.shape)
    return result


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_global_avg_pool2d_keeps_the_input_dtype(dtype):
    x = _int_data((1, 3, 4, 5), dtype, seed=2)
    text = relay_fn(f"%x: Tensor[(1, 3, 4, 5), {dtype}]", "nn.global_avg_pool2d(%x)")
    _assert_same(run_relay(text, x), _adaptive_v19(x, (1, 1)))


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("nd,shape,size", [
    (1, (1, 2, 7), (3,)),
    (2, (1, 2, 5, 7), (2, 4)),
    (3, (1, 1, 3, 4, 5), (2, 3, 2)),
])
def test_integer_adaptive_avg_pool_keeps_the_input_dtype(dtype, nd, shape, size):
    x = _int_data(shape, dtype, seed=3)
    text = relay_fn(f"%x: Tensor[{shape}, {dtype}]",
                    f"nn.adaptive_avg_pool{nd}d(%x, output_size={list(size)})")
    _assert_same(run_relay(text, x), _adaptive_v19(x, size))


@pytest.mark.parametrize("body", ["nn.global_avg_pool2d(%x)",
                                  "nn.adaptive_avg_pool2d(%x, output_size=[1, 2])"])
def test_int8_average_over_more_elements_than_int8_holds_is_refused(body):
    # v0.19's adaptive_pool_impl computed the window count as cast(int8, extent): 16 * 16 and 16 * 8
    # does not fit (its build refused the literal, or divided by a wrapped count).
    text = relay_fn("%x: Tensor[(1, 1, 16, 16), int8]", body)
    with pytest.raises(ConversionError, match="does not fit in int8"):
        import_text(text)


@pytest.mark.parametrize("dtype", ["int8", "int32"])
def test_integer_pools_compiled_beside_an_offloaded_op(dtype):
    # Relax calls an integer avg pool's result the input dtype; a result in another dtype
    # (TVM 0.27 topi's int64) broke the bmlib build's consumer of it.
    from bmlib_relax import relay
    from conftest import run_beside_offloaded_relu

    x = _int_data((1, 2, 5, 5), dtype, seed=4)
    y = relay.var("y", shape=x.shape, dtype=dtype)
    pooled = relay.nn.avg_pool2d(y, pool_size=(2, 2), strides=(2, 2), padding=(1, 1, 1, 1),
                                 ceil_mode=True, count_include_pad=True)
    outs = run_beside_offloaded_relu(
        [relay.var("r", shape=(4,)), y],
        [pooled, relay.nn.global_avg_pool2d(y), relay.add(pooled, pooled)],
        [rand(4), x])
    want = pool_v19(x, "avg", (2, 2), (2, 2), (1, 1, 1, 1), None, True, True)
    _assert_same(outs[0], want)
    _assert_same(outs[1], _adaptive_v19(x, (1, 1)))
    _assert_same(outs[2], want + want)
