"""Normalization and activation attributes as v0.19's type relations took them.

* ``nn.group_norm`` with a negative ``num_groups`` (TVM 0.27 accepted ``6 % -2 == 0`` and
  codegen failed with a raw InternalError) is refused like one that does not divide C.
* ``nn.instance_norm`` of rank <= 2 has no spatial axis: v0.19's InstanceNormRel refused
  it; here it returned ``beta`` everywhere.
* ``nn.lrn`` with a negative size: v0.19's ``size % 2 == 1`` is C's remainder.
* ``nn.batch_norm`` takes axes in [-1, rank) and ``nn.prelu`` non-negative ones (BatchNormRel,
  PReluRel).
* ``clip`` bounds beyond a float type (v0.19's FloatImm range check) are named.
* ``nn.leaky_relu`` / ``nn.prelu`` of integers: v0.19's TOPI ``Select(x > 0, x, x * a)`` in
  the integer dtype (the slope of leaky_relu truncated toward zero; products wrap); Relax's
  ops refuse integers.
"""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax import ConversionError

from .helpers import check, import_text, relay_fn


def test_group_norm_with_a_negative_group_count_is_named():
    text = relay_fn("%x: Tensor[(2, 6, 5), float32], %g: Tensor[(6), float32], "
                    "%b: Tensor[(6), float32]", "nn.group_norm(%x, %g, %b, num_groups=-2)")
    with pytest.raises(ConversionError, match="nn.group_norm: num_groups=-2 does not divide"):
        import_text(text)


@pytest.mark.parametrize("shape", [(2, 6), (6,)])
def test_instance_norm_without_spatial_axes_is_refused(shape):
    channels = shape[-1] if len(shape) == 1 else shape[1]
    axis = 0 if len(shape) == 1 else 1
    text = relay_fn(f"%x: Tensor[{shape}, float32], %g: Tensor[({channels}), float32], "
                    f"%b: Tensor[({channels}), float32]",
                    f"nn.instance_norm(%x, %g, %b, axis={axis})")
    with pytest.raises(ConversionError, match=f"rank {len(shape)}.*rank 3 or more"):
        import_text(text)


@pytest.mark.parametrize("size", [-1, -3])
def test_lrn_with_a_negative_size_is_refused_as_not_odd(size):
    text = relay_fn("%x: Tensor[(1, 4, 3, 3), float32]", f"nn.lrn(%x, size={size})")
    with pytest.raises(ConversionError, match=f"size={size}: the window must have an odd"):
        import_text(text)


def test_batch_norm_axis_below_minus_one_is_refused_and_minus_one_kept():
    params = ("%x: Tensor[(3, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32], "
              "%m: Tensor[(3), float32], %v: Tensor[(3), float32]")
    with pytest.raises(ConversionError, match=r"axis=-2 .*\[-1, rank\)"):
        import_text(relay_fn(params, "nn.batch_norm(%x, %g, %b, %m, %v, axis=-2).0"))
    last = relay_fn(params.replace("(3, 4)", "(4, 3)"),
                    "nn.batch_norm(%x, %g, %b, %m, %v, axis=-1).0")
    x = np.arange(12, dtype="float32").reshape(4, 3)
    ones, zeros = np.ones(3, "float32"), np.zeros(3, "float32")
    check(last, [x, ones, zeros, zeros, ones], x / np.sqrt(1 + 1e-5), rtol=1e-5)


def test_prelu_negative_axis_is_refused():
    text = relay_fn("%x: Tensor[(2, 3), float32], %a: Tensor[(3), float32]",
                    "nn.prelu(%x, %a, axis=-1)")
    with pytest.raises(ConversionError, match="axis=-1: v0.19's prelu took a non-negative"):
        import_text(text)


@pytest.mark.parametrize("dtype, alpha", [("int8", 2.0), ("int8", 0.7), ("int32", -3.9),
                                          ("uint8", 2.0)])
def test_integer_leaky_relu_selects_with_the_truncated_slope(dtype, alpha):
    info = np.iinfo(dtype)
    x = np.array([info.min, max(info.min, -100), max(info.min, -3), 0, 5, info.max], dtype)
    text = relay_fn(f"%x: Tensor[(6), {dtype}]", f"nn.leaky_relu(%x, alpha={alpha}f)")
    slope = int(alpha)  # make_const(int dtype, alpha): toward zero
    wrapped = (x.astype(np.int64) * slope).astype(dtype)  # the product wraps in the dtype
    check(text, [x], np.where(x > 0, x, wrapped))


def test_integer_prelu_multiplies_by_the_channel_slope():
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (2, 3, 2, 2)).astype("int8")
    slopes = np.array([2, -1, 3], "int8")
    text = relay_fn("%x: Tensor[(2, 3, 2, 2), int8], %a: Tensor[(3), int8]",
                    "nn.prelu(%x, %a)")
    product = (x.astype(np.int64) * slopes[None, :, None, None]).astype("int8")
    check(text, [x, slopes], np.where(x > 0, x, product))


@pytest.mark.parametrize("dtype, bounds", [("float16", "a_min=-1e5f, a_max=1f"),
                                           ("float16", "a_min=0f, a_max=70000f"),
                                           ("float32", "a_min=0f, a_max=1e39f64")])
def test_float_clip_bound_beyond_the_type_is_named(dtype, bounds):
    """v0.19's FloatImm range check refused these; TVM 0.27's codegen failed naming only
    the partition."""
    text = relay_fn(f"%x: Tensor[(4), {dtype}]", f"clip(%x, {bounds})")
    with pytest.raises(ConversionError, match=f"beyond the largest {dtype}"):
        import_text(text)


def test_float16_clip_with_infinite_bounds_still_runs():
    x = np.array([-7e4 / 2, -1, 0, 3e4], "float16")
    check(relay_fn("%x: Tensor[(4), float16]", "clip(%x, a_min=-inff, a_max=1f)"), [x],
          np.minimum(x, 1))
