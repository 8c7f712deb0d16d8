"""Resizes, pools and prelu as v0.19 computed or refused them (probes of 2026-12-04).

* A resize's ``out_dtype`` on the host: TVM 0.27's legalization dropped it, so a
  ``uint8`` image resized to ``float32`` came back ``uint8``, its fractions truncated
  (v0.19's ``_cast_output`` casts the interpolated value).
* ``resize1d`` / ``resize3d`` of an empty spatial axis read beside the buffer;
  ``resize1d`` with ``tf_crop_and_resize`` never built (the unit height divided 0 / 0);
  ``tf_crop_and_resize`` to a size of 1 and unknown methods / modes / roundings / roi
  lengths ended in raw TVM or Python errors.
* Pools ignore ``out_layout`` (v0.19's type relations and computes never read it): the
  result stays in ``layout``; a max pool with another ``out_layout`` crashed the build.
* ``nn.prelu``'s alpha must be ``(C,)`` (``PReluRel``).
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError

HEADER = '#[version = "0.0.5"]\n'


def _text(params: str, body: str) -> str:
    return HEADER + f"def @main({params}) {{\n  {body}\n}}\n"


@pytest.mark.parametrize("patterns", [None, []], ids=["default", "host"])
def test_resize_out_dtype_is_the_result_dtype(patterns):
    x = np.array([[[[0, 3], [20, 40]]]], "uint8")  # (1, 1, 2, 2)
    text = _text("%x: Tensor[(1, 1, 2, 2), uint8]",
                 'image.resize2d(%x, size=[2, 3], method="linear", '
                 'coordinate_transformation_mode="align_corners", out_dtype="float32")')
    got = bmlib_relax.compile(text, {}, patterns=patterns)(x=x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[0, 0], [[0, 1.5, 3], [20, 30, 40]])
    chained = text.replace("out_dtype=\"float32\")", "out_dtype=\"float32\");\n  add(%0, 0.25f)") \
        .replace("  image.resize2d", "  %0 = image.resize2d")
    got = bmlib_relax.compile(chained, {}, patterns=patterns)(x=x)
    np.testing.assert_allclose(got[0, 0], [[0.25, 1.75, 3.25], [20.25, 30.25, 40.25]])


def test_resize3d_out_dtype_on_the_host():
    x = np.arange(8, dtype="uint8").reshape(1, 1, 2, 2, 2) * 3
    text = _text("%x: Tensor[(1, 1, 2, 2, 2), uint8]",
                 'image.resize3d(%x, size=[2, 2, 3], method="linear", '
                 'coordinate_transformation_mode="align_corners", out_dtype="float32")')
    got = bmlib_relax.compile(text, {})(x=x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[0, 0, 0, 0], [0, 1.5, 3])


@pytest.mark.parametrize("op, shape, size", [
    ("image.resize1d", (1, 1, 0), "[3]"),
    ("image.resize3d", (1, 1, 0, 3, 4), "[2, 3, 4]"),
    ("image.resize3d", (1, 1, 2, 3, 0), "[2, 3, 4]"),
])
def test_resize_of_an_empty_spatial_axis_is_refused(op, shape, size):
    text = _text(f"%x: Tensor[{shape}, float32]", f"{op}(%x, size={size})")
    with pytest.raises(ConversionError, match=r"resizes along axis \d of extent 0"):
        bmlib_relax.compile(text, {})


@pytest.mark.parametrize("patterns", [None, []], ids=["default", "host"])
def test_resize1d_tf_crop_and_resize_builds_and_crops(patterns):
    text = _text("%x: Tensor[(1, 1, 4), float32]",
                 'image.resize1d(%x, size=[3], roi=[0.1f, 0.9f], method="linear", '
                 'coordinate_transformation_mode="tf_crop_and_resize")')
    got = bmlib_relax.compile(text, {}, patterns=patterns)(x=np.array([[[1, 2, 4, 8]]],
                                                                        "float32"))
    # v0.19: in_x = 0.1 * 3 + x * 0.8 * 3 / 2 -> 0.3, 1.5, 2.7, linear between neighbours
    np.testing.assert_allclose(got[0, 0], [1.3, 3.0, 6.8], rtol=1e-5)


@pytest.mark.parametrize("attrs, message", [
    ('method="bilinear"', "method='bilinear' is not one of"),
    ('coordinate_transformation_mode="foo"', "coordinate_transformation_mode='foo' is not"),
    ('method="nearest_neighbor", rounding_method="foo"', "rounding_method='foo' is not"),
    ('coordinate_transformation_mode="tf_crop_and_resize", roi=[0.1f, 0.9f]',
     r"roi=\[0.1, 0.9\]: tf_crop_and_resize of 2 spatial axes takes 4 values"),
    ('coordinate_transformation_mode="tf_crop_and_resize", roi=[0f, 0f, 1f, 1f], '
     'method="linear", size=[1, 3]', r"size=\[1, 3\]: tf_crop_and_resize scales by"),
])
@pytest.mark.parametrize("patterns", [None, []], ids=["default", "host"])
def test_resize_attributes_v019_could_not_build_are_named(attrs, message, patterns):
    size = "" if "size=" in attrs else "size=[3, 3], "
    text = _text("%x: Tensor[(1, 1, 2, 2), float32]", f"image.resize2d(%x, {size}{attrs})")
    with pytest.raises(ConversionError, match=message):
        bmlib_relax.compile(text, {}, patterns=patterns)


@pytest.mark.parametrize("pool", [
    "nn.max_pool2d(%x, pool_size=[2, 2], layout=\"NHWC\", out_layout=\"NCHW\")",
    "nn.avg_pool2d(%x, pool_size=[2, 2], layout=\"NHWC\", out_layout=\"NCHW\")",
    "nn.global_avg_pool2d(%x, layout=\"NHWC\", out_layout=\"NCHW\")",
    "nn.global_max_pool2d(%x, layout=\"NHWC\", out_layout=\"NCHW\")",
    "nn.adaptive_avg_pool2d(%x, output_size=[2, 2], layout=\"NHWC\", out_layout=\"NCHW\")",
])
def test_pools_leave_the_result_in_their_layout_whatever_out_layout_says(pool):
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 3)).astype("float32")
    with_out = bmlib_relax.compile(_text("%x: Tensor[(1, 4, 4, 3), float32]", pool), {})
    without = bmlib_relax.compile(_text("%x: Tensor[(1, 4, 4, 3), float32]",
                                        pool.replace(', out_layout="NCHW"', "")), {})
    got = with_out(x=x)
    assert got.shape[-1] == 3  # NHWC, as v0.19
    np.testing.assert_array_equal(got, without(x=x))


@pytest.mark.parametrize("alpha_shape", [(3,), (1,), (2, 1)])
def test_prelu_alpha_must_have_one_slope_per_channel(alpha_shape):
    text = _text(f"%x: Tensor[(1, 4, 4, 2), float32], %a: Tensor[{alpha_shape}, float32]",
                 "nn.prelu(%x, %a, axis=3)")
    shape = f"({alpha_shape[0]},)" if len(alpha_shape) == 1 else str(alpha_shape)
    with pytest.raises(ConversionError, match=rf"nn.prelu: alpha has shape {re_escape(shape)}, "
                                              r"expected \(2,\)"):
        bmlib_relax.compile(text, {})


def re_escape(text: str) -> str:
    import re

    return re.escape(text)
