"""NaN, infinities and values near the float32 range through bmlib's templates.

The approximations that make the templates fast (rational erf, exp-based cosh/sinh,
Winograd transforms, the max-pool window order) each met a special value differently
from numpy and the plain TVM build; these pin what bmlib gives now.  Offload is
asserted before any value is compared."""
from __future__ import annotations

import math

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.templates import conv_winograd
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _offloaded(build, shapes, arrays):
    mod, _ = make_module(build, shapes)
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    (got,), _ = run_offloaded(partitioned, arrays)
    return mod, got


def test_erf_keeps_nan_and_infinities():
    """``fast_erf`` clamps to [-4, 4] with min/max, which made erf(NaN) 1."""
    x = np.array([[np.nan, np.inf, -np.inf, -0.0, 0.0, 3.9, -4.5, 0.3] * 4], "float32")
    _, got = _offloaded(lambda a: R.erf(a), [x.shape], [x])
    want = np.array([math.erf(v) if not np.isnan(v) else np.nan for v in x.flat], "float32")
    np.testing.assert_allclose(got.ravel(), want, rtol=0, atol=2e-6)
    assert np.array_equal(np.signbit(got.ravel()), np.signbit(want))


def test_gelu_epilogue_of_a_dense_keeps_nan_rows():
    """The erf inside a matmul's GELU epilogue is one block reading its input once (a
    NaN check in a second block ended the epilogue chain and broke the schedule)."""
    rows, k, n = 4, 64, 48

    def build(x, w):
        y = R.matmul(x, R.permute_dims(w, [1, 0]))
        return R.multiply(R.multiply(y, relax.const(0.5, "float32")),
                          R.add(relax.const(1.0, "float32"),
                                R.erf(R.multiply(y, relax.const(0.7071068, "float32")))))

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, k)).astype("float32")
    w = rng.standard_normal((n, k)).astype("float32")
    x[1, 5] = np.nan
    mod, got = _offloaded(build, [x.shape, w.shape], [x, w])
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2, 3]]).any()
    np.testing.assert_allclose(got, run_plain(mod, [x, w])[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cosh", "sinh"])
def test_cosh_and_sinh_near_overflow_and_near_zero(name):
    """``(exp(x) +- exp(-x)) / 2`` was inf for |x| in (88.72, 89.42) where the result is
    finite, and sinh lost up to 2% to cancellation near 0."""
    x = np.concatenate([np.linspace(-89.4, 89.4, 997), np.logspace(-30, 1, 200),
                        -np.logspace(-30, 1, 200), [0.4999, 0.5, 0.5001, 89.41, 89.5, 1e30,
                                                    np.nan, np.inf, -np.inf, -0.0, 0.0]])
    x = x.astype("float32").reshape(1, -1)
    _, got = _offloaded(lambda a: getattr(R, name)(a), [x.shape], [x])
    with np.errstate(over="ignore"):
        want = getattr(np, name)(x.astype("float64"))
        want32 = want.astype("float32")
    finite = np.isfinite(want32)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=0)
    assert np.array_equal(got[~finite], want32[~finite], equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def _nan_propagating_max_pool(x: np.ndarray, size: int, stride: int, pad: int) -> np.ndarray:
    """float64 max pool of NCHW ``x`` (padding ignored) where a NaN in a window wins."""
    n, c, h, w = x.shape
    padded = np.full((n, c, h + 2 * pad, w + 2 * pad), -np.inf)
    padded[:, :, pad:pad + h, pad:pad + w] = x
    oh, ow = (h + 2 * pad - size) // stride + 1, (w + 2 * pad - size) // stride + 1
    out = np.empty((n, c, oh, ow))
    for y in range(oh):
        for z in range(ow):
            window = padded[:, :, y * stride:y * stride + size, z * stride:z * stride + size]
            out[:, :, y, z] = np.max(window, axis=(2, 3))  # np.max propagates NaN
    return out


@pytest.mark.parametrize("size, stride, pad", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_max_pool_window_with_a_nan_is_nan(size, stride, pad):
    """TVM's max keeps or drops a NaN by its place in the visiting order (the plain
    build gave 2 for the window [4, NaN, 2, 1] and -3.4e38 next to a NaN in a padded
    corner); bmlib's pool gives NaN, as numpy and PyTorch do."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 9, 10)).astype("float32")
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 7, 8] = np.nan
    x[0, 1, 4, 5] = np.inf
    _, got = _offloaded(lambda a: R.nn.max_pool2d(a, size, stride, pad), [x.shape], [x])
    want = _nan_propagating_max_pool(x.astype("float64"), size, stride, pad)
    assert np.isnan(want).sum() >= 2
    np.testing.assert_array_equal(got, want.astype("float32"))


def test_max_pool_on_blocked_data_with_a_nan_is_nan():
    """The same on NCHW{b}c data between two convs (the unrolled window max)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 12, 12)).astype("float32")
    w1 = rng.standard_normal((24, 3, 3, 3)).astype("float32")
    w2 = rng.standard_normal((16, 24, 3, 3)).astype("float32")
    x[0, 0, 5, 6] = np.nan

    def build(a):
        pooled = R.nn.max_pool2d(R.nn.conv2d(a, relax.const(w1), padding=1), 3, 2, 1)
        return R.nn.conv2d(pooled, relax.const(w2), padding=1)

    mod, _ = make_module(build, [x.shape])
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    scripts = [prim.script() for prim, _ in lower_and_verify(partitioned).values()]
    assert any('"bmlib.max_pool2d_blocked"' in s for s in scripts)
    (got,), _ = run_offloaded(partitioned, [x])

    def conv(data, weight):
        only, _ = make_module(lambda a: R.nn.conv2d(a, relax.const(weight), padding=1),
                              [data.shape])
        return run_plain(only, [data])[0]

    pooled = _nan_propagating_max_pool(conv(x, w1).astype("float64"), 3, 2, 1)
    want = conv(pooled.astype("float32"), w2)
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------ Winograd
def _conv_module(x_shape, weight):
    return make_module(lambda a: R.nn.conv2d(a, relax.const(weight), padding=1), [x_shape])[0]


def _winograd_conv(monkeypatch, mode: str, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """bmlib's conv2d (3x3, padding 1) of ``x`` with ``BMLIB_WINOGRAD=mode``; asserts
    the Winograd GEMM is there exactly when the mode asks for it."""
    monkeypatch.setenv(conv_winograd.ENV, mode)
    partitioned = partition_for_bmlib(_conv_module(x.shape, weight))
    assert offloaded_partitions(partitioned)
    scripts = [prim.script() for prim, _ in lower_and_verify(partitioned).values()]
    assert any("bmlib_winograd_gemm" in s for s in scripts) == (mode != "0")
    (got,), _ = run_offloaded(partitioned, [x])
    return got


def _direct_conv64(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """float64 conv2d, 3x3, padding 1: each output sums its own window only."""
    h, w = x.shape[2:]
    padded = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    with np.errstate(invalid="ignore"):
        return sum(np.einsum("kc,nchw->nkhw", weight[:, :, i, j].astype("float64"),
                             padded[:, :, i:i + h, j:j + w]) for i in range(3) for j in range(3))


@pytest.mark.parametrize("mode, bound", [("0", 5e-6), ("2", 3e-6), ("4", 1.5e-5)])
def test_winograd_accuracy_against_float64(monkeypatch, mode, bound):
    """The README's per-layer table: largest error over the largest output magnitude
    (measured 1.3e-6 direct, 0.4e-6 F(2x2), 5.2e-6 F(4x4) on this layer)."""
    rng = np.random.default_rng(1)
    channels, size = 128, 28
    weight = (rng.standard_normal((channels, channels, 3, 3)) *
              np.sqrt(2 / (9 * channels))).astype("float32")
    x = np.abs(rng.standard_normal((1, channels, size, size))).astype("float32")
    got = _winograd_conv(monkeypatch, mode, x, weight)
    want = _direct_conv64(x, weight)
    assert np.abs(got - want).max() / np.abs(want).max() < bound


def _tiles_reading(position: int, m: int, extent: int) -> set:
    """Output rows (or columns) of the m-wide Winograd tiles whose input tile (m + 2
    wide, padding 1) holds input row ``position``."""
    return {o for t in range(0, extent, m) if t - 1 <= position <= t + m for o in
            range(t, min(t + m, extent))}


@pytest.mark.parametrize("special", [np.nan, np.inf])
def test_non_finite_input_stays_in_its_windows_without_winograd(monkeypatch, special):
    """``BMLIB_WINOGRAD=0``, the README's advice for models whose activations hold NaN or
    inf: NaN and inf exactly where a direct convolution puts them."""
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((16, 16, 3, 3)).astype("float32")
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    x[0, 3, 5, 6] = special
    got = _winograd_conv(monkeypatch, "0", x, weight)
    want = _direct_conv64(x, weight).astype("float32")
    assert np.isfinite(want).sum() < want.size
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["2", "4"])
def test_winograd_nan_stays_in_the_tiles_that_read_it(monkeypatch, mode):
    """The README's account of Winograd and NaN: F(2x2) puts NaN where a direct conv
    does (each of its outputs reads only its own window's inputs); F(4x4) makes every
    output of the 4x4 tiles whose input tile holds the NaN NaN, nothing beyond them;
    the other outputs are the direct conv's."""
    m = int(mode)
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((16, 16, 3, 3)).astype("float32")
    x = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    x[0, 3, 5, 6] = np.nan
    got = _winograd_conv(monkeypatch, mode, x, weight)
    want = _direct_conv64(x, weight).astype("float32")
    if m == 2:
        nan_at = np.isnan(want[0])
    else:
        rows, cols = _tiles_reading(5, m, 12), _tiles_reading(6, m, 12)
        assert (rows, cols) == ({4, 5, 6, 7}, {4, 5, 6, 7})
        tile = np.zeros((12, 12), bool)
        tile[np.ix_(sorted(rows), sorted(cols))] = True
        nan_at = np.broadcast_to(tile, got[0].shape)
        assert np.isnan(want[0]).sum() < nan_at.sum()
    np.testing.assert_array_equal(np.isnan(got[0]), nan_at)
    np.testing.assert_allclose(got[0][~nan_at], want[0][~nan_at], rtol=1e-4, atol=1e-4)
