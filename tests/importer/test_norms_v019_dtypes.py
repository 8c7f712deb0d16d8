"""Normalisation ops in dtypes other than float32 against v0.19's decomposition.

v0.19's ``relay.build`` ran ``SimplifyInference`` (src/relay/transforms/
simplify_inference.cc), which rewrote batch/layer/instance/group norm into ordinary
Relay ops in the tensor's dtype, so each step was rounded to that dtype; ``mean`` and
``variance`` (src/relay/op/tensor/reduce.cc MeanCompute/VarianceCompute) summed a
float16 tensor in float32 (the squared differences still taken in float16) and rounded
the quotient back.  With bound weights ``FoldConstant`` folded the parameter-only part
of a batch norm op by op in the dtype.  The references below apply that decomposition
with numpy, rounding after every op: float16 and bfloat16 ops as TVM computes them on
the CPU (in float32, then rounded), float64 ones exactly.

bfloat16 is checked with a tolerance: v0.19 legalized bfloat16 compute to float32 and
rounded only where a fused kernel stored to memory, so its exact bits depend on fusion.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conftest import offloaded_partitions

from .helpers import check, import_text, ops_in, relay_fn

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64}
# float16: bit for bit (TVM 0.27's norm ops, in float32 rounded once, were up to 0.35
# away);
# bfloat16: two bfloat16 steps (v0.19's bits depended on its fusion, module doc)
TOLERANCE = {"float16": dict(rtol=0, atol=0), "bfloat16": dict(rtol=1e-2, atol=1e-2),
             "float64": dict(rtol=1e-12, atol=1e-12)}


# ----------------------------------------------------------------------------- references
def _rounded(value, dtype: str) -> np.ndarray:
    """A float64 op result as TVM gives it in ``dtype`` (half types: through float32)."""
    value = np.asarray(value, np.float64)
    if dtype == "float64":
        return value
    return value.astype(np.float32).astype(DTYPES[dtype]).astype(np.float64)


def _scalar(value: float, dtype: str) -> float:
    """v0.19's MakeConstantScalar(dtype, static_cast<float>(value))."""
    return float(np.float32(value).astype(DTYPES[dtype]))


def _mean(x, axes, dtype):
    """v0.19 MeanCompute: sum / count (float16 summed in float32; bfloat16's sum was
    legalized to float32 too), rounded to the dtype."""
    return _rounded(x.sum(axis=axes, keepdims=True) / np.prod([x.shape[a] for a in axes]),
                    dtype)


def _variance(x, mean, axes, dtype):
    """v0.19 VarianceCompute: ``(x - mean)^2`` in the dtype (float16 rounds each; the
    legalized bfloat16 inlined them in float32), summed in float32, / count, rounded."""
    rnd = (lambda v: _rounded(v, dtype)) if dtype == "float16" else (lambda v: v)
    diff = rnd(x - mean)
    sq = rnd(diff * diff)
    return _rounded(sq.sum(axis=axes, keepdims=True) / np.prod([x.shape[a] for a in axes]),
                    dtype)


def _bias(v, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = v.size
    return v.reshape(shape)


def batch_norm_ref(x, g, b, m, v, axis, eps, scale, center, dtype):
    """v0.19 BatchNormToInferUnpack, op by op."""
    r = lambda val: _rounded(val, dtype)  # noqa: E731
    x, g, b, m, v = (a.astype(np.float64) for a in (x, g, b, m, v))
    s = r(_scalar(1.0, dtype) / r(np.sqrt(r(v + _scalar(eps, dtype)))))
    if scale:
        s = r(s * g)
    shift = r(-m * s)
    if center:
        shift = r(shift + b)
    return r(r(x * _bias(s, x.ndim, axis)) + _bias(shift, x.ndim, axis))


def norm_ref(x, g, b, axes, axis, eps, scale, center, dtype, groups=None):
    """v0.19 Layer/Instance/GroupNormToInferUnpack, op by op."""
    r = lambda val: _rounded(val, dtype)  # noqa: E731
    x, g, b = (a.astype(np.float64) for a in (x, g, b))
    shape = x.shape
    if groups is not None:
        x = x.reshape(shape[:axis] + (groups, shape[axis] // groups) + shape[axis + 1:])
        axes = list(range(axis + 1, x.ndim))
    mean = _mean(x, tuple(axes), dtype)
    var = _variance(x, mean, tuple(axes), dtype)
    denom = r(np.sqrt(r(var + _scalar(eps, dtype))))
    out = r(r(x - mean) / denom).reshape(shape)
    if scale:
        out = r(out * _bias(g, out.ndim, axis))
    if center:
        out = r(out + _bias(b, out.ndim, axis))
    return out


# ----------------------------------------------------------------------------- helpers
def _data(shape, dtype, seed=0, centre=300.0, spread=3.0):
    """Values far from 0 next to a small spread: where float16 rounding shows."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * spread + centre).astype(DTYPES.get(dtype, dtype))


def _vec(n, dtype, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, n).astype(DTYPES.get(dtype, dtype))


def _assert_v019(got, want, dtype):
    assert str(got.dtype) == dtype, f"returned {got.dtype}, typed {dtype}"
    np.testing.assert_allclose(got.astype(np.float64), want, **TOLERANCE[dtype])


def _compiled(text, params, inputs, dtype):
    """Run through ``bmlib_relax.compile``; float16 and float32 (which bmlib takes) must
    be offloaded."""
    import bmlib_relax

    model = bmlib_relax.compile(text, params=params)
    if dtype in ("float16", "float32"):
        assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model(**inputs)


# ----------------------------------------------------------------------------- batch_norm
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("attrs,axis,eps,scale,center", [
    ("", 1, 1e-5, True, True),
    ("axis=3, epsilon=0.001f", 3, 1e-3, True, True),
    ("scale=False", 1, 1e-5, False, True),
    ("center=False", 1, 1e-5, True, False),
])
@pytest.mark.parametrize("bound", [False, True])
def test_batch_norm(dtype, attrs, axis, eps, scale, center, bound):
    shape = (2, 4, 3, 5) if axis == 1 else (2, 3, 5, 4)
    x = _data(shape, dtype)
    g, b = _vec(4, dtype, 1), _vec(4, dtype, 2)
    m = (np.array([300, 299, 301, 300.5]) + _vec(4, "float64", 3, -0.3, 0.3)).astype(DTYPES[dtype])
    v = _vec(4, dtype, 4, 0.5, 3.0)
    ty = f"Tensor[(4), {dtype}]"
    text = relay_fn(f"%x: Tensor[{shape}, {dtype}], %g: {ty}, %b: {ty}, %m: {ty}, %v: {ty}",
                    f"%0 = nn.batch_norm(%x, %g, %b, %m, %v{', ' + attrs if attrs else ''});\n"
                    "  %0.0")
    want = batch_norm_ref(x, g, b, m, v, axis, eps, scale, center, dtype)
    if bound:
        got = _compiled(text, dict(g=g, b=b, m=m, v=v), dict(x=x), dtype)
    else:
        got = check(text, [x, g, b, m, v], want, **TOLERANCE[dtype])
        _assert_v019(got, want, dtype)
        got = _compiled(text, None, dict(x=x, g=g, b=b, m=m, v=v), dtype)
    _assert_v019(got, want, dtype)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_batch_norm_result_keeps_its_dtype_for_the_next_op(dtype):
    # bfloat16 used to come back float32, and the add after it failed with a TypeError
    ty = f"Tensor[(2), {dtype}]"
    text = relay_fn(f"%x: Tensor[(1, 2, 2, 2), {dtype}], %g: {ty}, %b: {ty}, %m: {ty}, "
                    f"%v: {ty}", "%0 = nn.batch_norm(%x, %g, %b, %m, %v);\n  %1 = %0.0;\n"
                    "  add(%1, %x)")
    cast = DTYPES[dtype]
    x = np.arange(8).reshape(1, 2, 2, 2).astype(cast)
    g, b, m, v = (np.array(p, cast) for p in ([2, 3], [1, -1], [1, 2], [4, 1]))
    bn = batch_norm_ref(x, g, b, m, v, 1, 1e-5, True, True, dtype)
    want = _rounded(bn + x.astype(np.float64), dtype)
    _assert_v019(_compiled(text, None, dict(x=x, g=g, b=b, m=m, v=v), dtype), want, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_batch_norm_of_a_dynamic_batch_keeps_its_dtype(dtype):
    ty = f"Tensor[(4), {dtype}]"
    text = relay_fn(f"%x: Tensor[(?, 4, 3, 3), {dtype}], %g: {ty}, %b: {ty}, %m: {ty}, "
                    f"%v: {ty}", "%0 = nn.batch_norm(%x, %g, %b, %m, %v);\n  %0.0")
    x = _data((2, 4, 3, 3), dtype)
    g, b, m, v = _vec(4, dtype, 1), _vec(4, dtype, 2), _vec(4, dtype, 3, 299, 301), \
        _vec(4, dtype, 4, 0.5, 2)
    import bmlib_relax

    for kw in ({}, {"patterns": []}):  # offloaded where bmlib takes it, and on the host
        got = bmlib_relax.compile(text, **kw)(x=x, g=g, b=b, m=m, v=v)
        _assert_v019(got, batch_norm_ref(x, g, b, m, v, 1, 1e-5, True, True, dtype), dtype)


# ----------------------------------------------------------------------------- other norms
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("attrs,axis,eps,scale,center", [
    ("", 2, 1e-5, True, True),
    ("axis=1, epsilon=0.01f", 1, 1e-2, True, True),
    ("center=False, scale=False", 2, 1e-5, False, False),
])
def test_layer_norm(dtype, attrs, axis, eps, scale, center):
    shape = (2, 4, 16)
    x = _data(shape, dtype)
    c = shape[axis]
    g, b = _vec(c, dtype, 1), _vec(c, dtype, 2)
    text = relay_fn(f"%x: Tensor[{shape}, {dtype}], %g: Tensor[({c}), {dtype}], "
                    f"%b: Tensor[({c}), {dtype}]",
                    f"nn.layer_norm(%x, %g, %b{', ' + attrs if attrs else ''})")
    want = norm_ref(x, g, b, [axis], axis, eps, scale, center, dtype)
    _assert_v019(check(text, [x, g, b], want, **TOLERANCE[dtype]), want, dtype)
    _assert_v019(_compiled(text, dict(g=g, b=b), dict(x=x), dtype), want, dtype)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("attrs,axis,scale,center", [
    ("", 1, True, True),
    ("axis=3", 3, True, True),
    ("scale=False", 1, False, True),
])
def test_instance_norm(dtype, attrs, axis, scale, center):
    shape = (2, 4, 3, 5) if axis == 1 else (2, 3, 5, 4)
    x = _data(shape, dtype)
    g, b = _vec(4, dtype, 1), _vec(4, dtype, 2)
    text = relay_fn(f"%x: Tensor[{shape}, {dtype}], %g: Tensor[(4), {dtype}], "
                    f"%b: Tensor[(4), {dtype}]",
                    f"nn.instance_norm(%x, %g, %b{', ' + attrs if attrs else ''})")
    axes = [i for i in range(1, 4) if i != axis]
    want = norm_ref(x, g, b, axes, axis, 1e-5, scale, center, dtype)
    _assert_v019(check(text, [x, g, b], want, **TOLERANCE[dtype]), want, dtype)
    _assert_v019(_compiled(text, dict(g=g, b=b), dict(x=x), dtype), want, dtype)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("attrs,axis,center", [
    ("num_groups=2", 1, True),
    # v0.19 reduced the channel group and the axes after the channel axis only
    ("num_groups=2, axis=3", 3, True),
    ("num_groups=4, center=False", 1, False),
])
def test_group_norm(dtype, attrs, axis, center):
    shape = (2, 4, 3, 5) if axis == 1 else (2, 3, 5, 4)
    x = _data(shape, dtype)
    g, b = _vec(4, dtype, 1), _vec(4, dtype, 2)
    text = relay_fn(f"%x: Tensor[{shape}, {dtype}], %g: Tensor[(4), {dtype}], "
                    f"%b: Tensor[(4), {dtype}]", f"nn.group_norm(%x, %g, %b, {attrs})")
    groups = int(attrs.split("num_groups=")[1].split(",")[0])
    want = norm_ref(x, g, b, None, axis, 1e-5, True, center, dtype, groups=groups)
    _assert_v019(check(text, [x, g, b], want, **TOLERANCE[dtype]), want, dtype)
    _assert_v019(_compiled(text, dict(g=g, b=b), dict(x=x), dtype), want, dtype)


@pytest.mark.parametrize("shape,attrs,axis", [
    ((2, 3, 5, 4), "num_groups=2, axis=3", 3),
    ((2, 3, 4, 5), "num_groups=2, axis=2", 2),
    ((2, 4, 3, 5), "num_groups=2", 1),
])
def test_float32_group_norm_reduces_the_axes_after_the_channel_axis_only(shape, attrs, axis):
    # v0.19's GroupNormToInferUnpack split the channel axis into (groups, C / groups) and
    # reduced that second axis and every axis after it: an NHWC group norm normalised each
    # pixel's channel group alone (TVM 0.27's import reduced every non-batch axis)
    c = shape[axis]
    x = _data(shape, "float32", centre=0.0, spread=1.0)
    g, b = _vec(c, "float32", 1), _vec(c, "float32", 2)
    text = relay_fn(f"%x: Tensor[{shape}, float32], %g: Tensor[({c}), float32], "
                    f"%b: Tensor[({c}), float32]", f"nn.group_norm(%x, %g, %b, {attrs})")
    xg = x.astype(np.float64).reshape(shape[:axis] + (2, c // 2) + shape[axis + 1:])
    axes = tuple(range(axis + 1, xg.ndim))
    norm = (xg - xg.mean(axes, keepdims=True)) / np.sqrt(xg.var(axes, keepdims=True) + 1e-5)
    want = norm.reshape(shape) * _bias(g, 4, axis) + _bias(b, 4, axis)
    check(text, [x, g, b], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_compiled(text, dict(g=g, b=b), dict(x=x), "float32"), want,
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,groups,message", [
    ("(2, 4, 3, 5)", 3, r"num_groups=3 does not divide the 4 channels"),
    ("(?, 4, 3, 5)", 2, r"input shape .*: v0.19's group norm needs static dims"),
])
def test_group_norm_forms_relay_could_not_build_are_named(shape, groups, message):
    # v0.19's GroupNormToInferUnpack reshaped to (groups, C / groups) (a reshape that did
    # not type-check) and read every dim as a constant (a symbolic one crashed it)
    from bmlib_relax import ConversionError

    text = relay_fn(f"%x: Tensor[{shape}, float16], %g: Tensor[(4), float16], "
                    "%b: Tensor[(4), float16]", f"nn.group_norm(%x, %g, %b, num_groups={groups})")
    with pytest.raises(ConversionError, match=rf"nn.group_norm: {message}"):
        import_text(text)


def test_float32_keeps_the_fused_norm_ops():
    # float32 keeps Relax's norm ops (bmlib's templates); other dtypes are decomposed
    for dtype, fused in (("float32", True), ("float16", False)):
        ty = f"Tensor[(4), {dtype}]"
        ops = ops_in(import_text(relay_fn(
            f"%x: Tensor[(2, 4, 3, 5), {dtype}], %g: {ty}, %b: {ty}, %m: {ty}, %v: {ty}",
            "%0 = nn.batch_norm(%x, %g, %b, %m, %v);\n  %1 = %0.0;\n"
            "  %2 = nn.layer_norm(%1, %g, %b, axis=1);\n"
            "  %3 = nn.instance_norm(%2, %g, %b);\n  nn.group_norm(%3, %g, %b, num_groups=2)")))
        for op in ("batch_norm", "layer_norm", "instance_norm", "group_norm"):
            assert (f"relax.nn.{op}" in ops) == fused, (dtype, op, ops)


# ----------------------------------------------------------------------------- l2_normalize
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_l2_normalize_outside_float32_is_refused_as_relay_did(dtype):
    # v0.19 L2NormToInferUnpack: maximum(sum(x * x), <float32 eps>): for any other dtype
    # the maximum fails BroadcastRel ("data types float16 and float32 do not match")
    from bmlib_relax import ConversionError

    text = relay_fn(f"%x: Tensor[(2, 4), {dtype}]", "nn.l2_normalize(%x, eps=1e-05f, axis=[1])")
    with pytest.raises(ConversionError, match="nn.l2_normalize"):
        import_text(text)
