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
