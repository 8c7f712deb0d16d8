"""float16 batch_norm keeps its precision with large running means.

The affine form ``x * scale + (beta - mean * scale)`` cancels two large terms:
in float16 (mean 300, var 0.01) ``300.25 * 10`` rounds to a multiple of 2 and
the offloaded build answered ±2.0 where the exact answer is ±2.5.  The template
computes the per-channel scale/shift and the epilogue in float32 and rounds
once; NumPy weight folding of SimplifyInference chains rounds once, too.  Each
result is compared with a float64 NumPy reference and with the plain build.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.fold import fold_constants
from bmlib_relax.backend.rewrite import const_array

from conftest import offloaded_partitions
from helpers import run_offloaded, run_plain

R = relax.op
EPS = 1e-5
C = 8
MEAN = np.array([300, -300, 500, 1000, 300, 2.5, -700, 300], "float16")
VAR = np.array([0.01, 0.01, 0.04, 0.25, 1.0, 0.01, 0.02, 0.01], "float16")
GAMMA = np.array([1, 1, 0.5, 2, 1, 1, -1, 0.25], "float16")
BETA = np.array([0, 0, 1, -3, 0, 0, 0.5, 0], "float16")
# fp16 holds multiples of 0.25 exactly up to 512 (and of 0.5 up to 1024): mean ± a few steps.
STEPS = np.array([-1, 1, -2, 2, -3, 3, 0, 1], "float64")


def _data(shape) -> np.ndarray:
    """Values near each channel's mean that fp16 holds exactly."""
    n, c, h, w = shape
    spacing = np.where(np.abs(MEAN.astype("f8")) >= 512, 0.5, 0.25)
    steps = np.resize(STEPS, h * w).reshape(h, w)
    data = MEAN.astype("f8")[:, None, None] + spacing[:, None, None] * steps[None]
    out = np.broadcast_to(data, shape).astype("float16")
    assert np.array_equal(out.astype("f8"), np.broadcast_to(data, shape))  # exact in fp16
    return out


def _reference(data: np.ndarray) -> np.ndarray:
    """Inference batch_norm in float64 from the float16 values."""
    per_channel = [v.astype("f8")[None, :, None, None] for v in (GAMMA, BETA, MEAN, VAR)]
    gamma, beta, mean, var = per_channel
    return (data.astype("f8") - mean) / np.sqrt(var + EPS) * gamma + beta


def _module(build, data_shape):
    x = relax.Var("x", relax.TensorType(data_shape, "float16"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(x))
        bb.emit_func_output(out)
    return bb.get()


def _bn(x):
    consts = [relax.const(v) for v in (GAMMA, BETA, MEAN, VAR)]
    return relax.TupleGetItem(R.nn.batch_norm(x, *consts, axis=1, epsilon=EPS,
                                              training=False), 0)


def _identity_conv(x, kernel: int):
    """A conv whose output is its input exactly (centre tap 1 on the diagonal)."""
    weight = np.zeros((C, C, kernel, kernel), "float16")
    weight[np.arange(C), np.arange(C), kernel // 2, kernel // 2] = 1
    return R.nn.conv2d(x, relax.const(weight), padding=kernel // 2)


def _check(mod, data, composites):
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    (got,), records = run_offloaded(partitioned, [data])
    assert [c for r in records.values() for c in r.composites] == composites
    assert not any(r.unscheduled for r in records.values())  # still scheduled
    assert got.dtype == np.float16
    want, bound = _reference(data), _error_bound(data)
    _assert_within(got, want, bound, "the float64 reference")
    _assert_within(got, run_plain(mod, [data])[0], 2 * bound, "the plain build")
    return got


def _assert_within(got, want, bound, what):
    error = np.abs(got.astype("f8") - np.asarray(want, "f8"))
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (f"differs from {what} at {worst}: got {got[worst]}, "
                                    f"want {want[worst]} (bound {bound[worst]:.3g})")


def _error_bound(data: np.ndarray) -> np.ndarray:
    """float32 evaluation of ``x * scale + shift`` (a few float32 ulps of the cancelling
    terms) and one rounding to float16 (half an fp16 ulp of the result)."""
    scale = GAMMA.astype("f8") / np.sqrt(VAR.astype("f8") + EPS)
    shift = BETA.astype("f8") - MEAN.astype("f8") * scale
    terms = np.abs(data.astype("f8") * scale[None, :, None, None]) + \
        np.abs(shift)[None, :, None, None]
    return 4 * 2.0 ** -24 * terms + 2.0 ** -11 * np.abs(_reference(data))


def test_standalone_batch_norm_with_large_means():
    data = _data((1, C, 2, 4))
    got = _check(_module(_bn, data.shape), data, ["bmlib.batch_norm"])
    assert got[0, 0, 0, 0] == np.float16(-2.498)  # was -2.0 (exact: -2.4985)


@pytest.mark.parametrize("kernel", [1, 3], ids=["1x1_gemm", "3x3_nchwc"])
def test_conv2d_batch_norm_with_large_means(kernel):
    data = _data((1, C, 4, 8))
    _check(_module(lambda x: _bn(_identity_conv(x, kernel)), data.shape), data,
           ["bmlib.conv2d_bn"])


SIMPLIFIED_BN_FP16 = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 2, 4), float16], %var: Tensor[(8), float16],
          %mean: Tensor[(8), float16], %gamma: Tensor[(8), float16],
          %beta: Tensor[(8), float16]) {
  %0 = add(%var, 1e-05f16);
  %1 = sqrt(%0);
  %2 = divide(1f16, %1);
  %3 = multiply(%2, %gamma);
  %4 = expand_dims(%3, axis=1, num_newaxis=2);
  %5 = multiply(%x, %4);
  %6 = negative(%mean);
  %7 = multiply(%6, %3);
  %8 = add(%7, %beta);
  %9 = expand_dims(%8, axis=1, num_newaxis=2);
  add(%5, %9)
}
"""


def _folded_constants(mod) -> list[np.ndarray]:
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(const_array(e))
        if isinstance(e, tvm.ir.expr.GenericConst) else None)
    return [c for c in found if c is not None and c.shape == (C, 1, 1)]


def test_folded_simplify_inference_chain_rounds_each_op_to_float16():
    """scale and shift folded from the weights are what v0.19's FoldConstant computed:
    each op of the chain in float16, rounded (as TVM computes it with the weights as
    inputs); the standalone batch_norm above is bmlib's own, in float32."""
    params = {"var": VAR, "mean": MEAN, "gamma": GAMMA, "beta": BETA}
    folded = fold_constants(bmlib_relax.import_relay(SIMPLIFIED_BN_FP16, params))
    scale, shift = _folded_constants(folded)
    f16 = np.float16
    root = np.sqrt((VAR + f16(EPS)).astype("f4")).astype(f16)
    op_scale = (f16(1) / root).astype(f16) * GAMMA
    op_shift = (-MEAN * op_scale).astype(f16) + BETA
    assert scale.dtype == shift.dtype == np.float16
    np.testing.assert_array_equal(scale.ravel(), op_scale)
    np.testing.assert_array_equal(shift.ravel(), op_shift)
