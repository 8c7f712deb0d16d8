"""Normalization converters against numpy (inference batch norm, layer/group/instance norm)."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, import_text, rand, relay_fn


@pytest.mark.parametrize("attrs,axis,center,scale,eps", [
    ("", 1, True, True, 1e-5),
    ("axis=3, epsilon=0.001f", 3, True, True, 1e-3),
    ("center=False", 1, False, True, 1e-5),
    ("scale=False", 1, True, False, 1e-5),
    ("axis=-1", 3, True, True, 1e-5),
])
def test_batch_norm_inference(attrs, axis, center, scale, eps):
    x = rand(2, 3, 4, 5)
    c = x.shape[axis]
    g, b, m, v = rand(c, seed=1), rand(c, seed=2), rand(c, seed=3), rand(c, seed=4, low=0.5,
                                                                           high=1.5)
    ty = f"Tensor[({c}), float32]"
    args = f"%x, %g, %b, %m, %v, {attrs}" if attrs else "%x, %g, %b, %m, %v"
    text = relay_fn(f"%x: Tensor[(2, 3, 4, 5), float32], %g: {ty}, %b: {ty}, %m: {ty}, %v: {ty}",
                    f"%0 = nn.batch_norm({args});\n  %0.0")
    shape = [1, 1, 1, 1]
    shape[axis] = c
    r = lambda a: a.reshape(shape)  # noqa: E731
    ref = (x - r(m)) / np.sqrt(r(v) + eps)
    ref = ref * r(g) if scale else ref
    ref = ref + r(b) if center else ref
    check(text, [x, g, b, m, v], ref, rtol=1e-4, atol=1e-5)
    assert "training=False" in import_text(text)["main"].script()


@pytest.mark.parametrize("attrs,axis", [("", -1), ("axis=1", 1), ("axis=-1, epsilon=0.01f", -1)])
def test_layer_norm(attrs, axis):
    x = rand(2, 4, 6)
    c = x.shape[axis]
    g, b = rand(c, seed=1), rand(c, seed=2)
    args = f"%x, %g, %b, {attrs}" if attrs else "%x, %g, %b"
    text = relay_fn(f"%x: Tensor[(2, 4, 6), float32], %g: Tensor[({c}), float32], "
                    f"%b: Tensor[({c}), float32]", f"nn.layer_norm({args})")
    eps = 0.01 if "0.01" in attrs else 1e-5
    shape = [1, 1, 1]
    shape[axis] = c
    mean, var = x.mean(axis, keepdims=True), x.var(axis, keepdims=True)
    ref = (x - mean) / np.sqrt(var + eps) * g.reshape(shape) + b.reshape(shape)
    check(text, [x, g, b], ref, rtol=1e-4, atol=1e-5)


def test_group_norm_and_instance_norm():
    x = rand(2, 6, 3, 4)
    g, b = rand(6, seed=1), rand(6, seed=2)
    params = ("%x: Tensor[(2, 6, 3, 4), float32], %g: Tensor[(6), float32], "
              "%b: Tensor[(6), float32]")
    xg = x.reshape(2, 3, 2, 3, 4)
    norm = (xg - xg.mean((2, 3, 4), keepdims=True)) / np.sqrt(xg.var((2, 3, 4), keepdims=True)
                                                              + 1e-5)
    ref = norm.reshape(x.shape) * g.reshape(1, 6, 1, 1) + b.reshape(1, 6, 1, 1)
    check(relay_fn(params, "nn.group_norm(%x, %g, %b, num_groups=3)"), [x, g, b], ref,
          rtol=1e-4, atol=1e-5)
    norm = (x - x.mean((2, 3), keepdims=True)) / np.sqrt(x.var((2, 3), keepdims=True) + 1e-5)
    ref = norm * g.reshape(1, 6, 1, 1) + b.reshape(1, 6, 1, 1)
    check(relay_fn(params, "nn.instance_norm(%x, %g, %b)"), [x, g, b], ref, rtol=1e-4, atol=1e-5)


def test_negative_batch_norm_variance_is_a_warning_naming_the_weight():
    """A moving variance below -epsilon makes its channels NaN, which a relu6 after
    turns into a plausible 0 or 6: a SuspiciousWeightWarning names the op's place and
    the weight; valid variances (0 included) warn nothing."""
    import warnings

    import bmlib_relax
    from bmlib_relax.errors import SuspiciousWeightWarning

    ty = "Tensor[(3), float32]"
    text = relay_fn(f"%x: Tensor[(1, 3, 2, 2), float32], %g: {ty}, %b: {ty}, %m: {ty}, "
                    f"%running_v: {ty}",
                    "%0 = nn.batch_norm(%x, %g, %b, %m, %running_v);\n  clip(%0.0, a_min=0f, "
                    "a_max=6f)")
    ones = np.ones(3, "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SuspiciousWeightWarning)
        bmlib_relax.compile(text, {"g": ones, "b": ones, "m": ones,
                                   "running_v": np.array([0.0, 1, 2], "float32")})
    with pytest.warns(SuspiciousWeightWarning,
                      match=r"<string>:3:8: nn.batch_norm: moving_var 'running_v' has 1 of "
                            r"3 entries .* \(first at index 1\)") as caught:
        bmlib_relax.compile(text, {"g": ones, "b": ones, "m": ones,
                                   "running_v": np.array([1.0, -0.5, 2], "float32")})
    assert caught[0].message.param == "running_v"


@pytest.mark.parametrize("attrs, message", [
    ("size=4", r"size=4: the window must have an odd size"),
    ("axis=-1", r"axis=-1: must be 1 \(NCHW\) or 3 \(NHWC\)"),
    ("axis=2", r"axis=2: must be 1 \(NCHW\) or 3 \(NHWC\)"),
])
def test_lrn_forms_relay_refused_are_named(attrs, message):
    # v0.19's topi lrn checked an odd, centred window on the channel axis of a 4-D input
    from bmlib_relax import ConversionError

    text = relay_fn("%x: Tensor[(1, 4, 3, 3), float32]", f"nn.lrn(%x, {attrs})")
    with pytest.raises(ConversionError, match=rf"nn.lrn: {message}"):
        import_text(text)


def test_lrn_nhwc_runs():
    x = rand(1, 3, 3, 5)
    text = relay_fn("%x: Tensor[(1, 3, 3, 5), float32]",
                    "nn.lrn(%x, size=3, axis=3, bias=1f, alpha=0.5f, beta=0.75f)")
    sq = np.pad(x * x, [(0, 0), (0, 0), (0, 0), (1, 1)])
    window = sq[..., :-2] + sq[..., 1:-1] + sq[..., 2:]
    check(text, [x], x / (1 + 0.5 / 3 * window) ** 0.75, rtol=1e-5, atol=1e-6)


def _normalized(x, axes, eps=1e-5):
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("op", ["layer_norm", "group_norm", "instance_norm"])
def test_norms_without_center_or_scale_drop_beta_or_gamma(op, center, scale):
    # v0.19's SimplifyInference multiplied by gamma only with scale=True and added beta only
    # with center=True; TVM 0.27's legalization always computed norm * gamma + beta
    import bmlib_relax
    from conftest import offloaded_partitions

    x = rand(2, 4, 3, 5)
    g = np.array([2, 3, 4, 5], "float32")
    b = np.array([10, 20, 30, 40], "float32")
    extra = {"layer_norm": "axis=1", "group_norm": "num_groups=2", "instance_norm": ""}[op]
    attrs = ", ".join(a for a in (extra, f"center={center}", f"scale={scale}") if a)
    text = relay_fn("%x: Tensor[(2, 4, 3, 5), float32], %g: Tensor[(4), float32], "
                    "%b: Tensor[(4), float32]", f"nn.{op}(%x, %g, %b, {attrs})")
    if op == "layer_norm":
        norm = _normalized(x, (1,))
    elif op == "group_norm":
        norm = _normalized(x.reshape(2, 2, 2, 3, 5), (2, 3, 4)).reshape(x.shape)
    else:
        norm = _normalized(x, (2, 3))
    shape = (1, 4, 1, 1)
    want = norm * (g.reshape(shape) if scale else 1) + (b.reshape(shape) if center else 0)
    check(text, [x, g, b], want, rtol=1e-4, atol=1e-4)
    model = bmlib_relax.compile(text, params={"g": g, "b": b})
    if op != "layer_norm":  # a layer norm over a non-last axis stays on the host
        assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    np.testing.assert_allclose(model(x=x), want, rtol=1e-4, atol=1e-4)
