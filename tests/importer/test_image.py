"""Resizing: nn.upsampling (Relay's nearest/bilinear) and image.resize2d."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, import_text, ops_in, rand, relay_fn, run_relay


def test_upsampling_nearest():
    x = rand(1, 2, 3, 4)
    text = relay_fn("%x: Tensor[(1, 2, 3, 4), float32]",
                    "nn.upsampling(%x, scale_h=2f, scale_w=3f)")
    check(text, [x], x.repeat(2, axis=2).repeat(3, axis=3))
    assert ops_in(import_text(text)) == ["relax.image.resize2d"]


def test_upsampling_bilinear_align_corners():
    x = rand(1, 1, 2, 2)
    text = relay_fn("%x: Tensor[(1, 1, 2, 2), float32]",
                    'nn.upsampling(%x, scale_h=2f, scale_w=2f, method="bilinear", '
                    "align_corners=True)")
    t = np.array([0, 1 / 3, 2 / 3, 1])
    rows = x[0, 0, 0][None, :] * (1 - t[:, None]) + x[0, 0, 1][None, :] * t[:, None]  # (4, 2)
    ref = rows[:, :1] * (1 - t[None, :]) + rows[:, 1:] * t[None, :]
    check(text, [x], ref.reshape(1, 1, 4, 4), rtol=1e-5, atol=1e-6)


def test_resize2d_nearest_asymmetric():
    x = rand(1, 2, 4, 4)
    text = relay_fn("%x: Tensor[(1, 2, 4, 4), float32]",
                    'image.resize2d(%x, size=[2, 2], method="nearest_neighbor", '
                    'coordinate_transformation_mode="asymmetric", rounding_method="floor")')
    check(text, [x], x[:, :, ::2, ::2])


def test_upsampling_of_a_tensor_that_is_no_image_is_named():
    from bmlib_relax import ConversionError

    with pytest.raises(ConversionError, match=r"nn.upsampling: expects a 4-D NCHW input, "
                                              r"got shape \(2, 5\)"):
        import_text(relay_fn("%x: Tensor[(2, 5), float32]",
                             "nn.upsampling(%x, scale_h=2f, scale_w=2f)"))


def _nearest_rows(in_size, out_size, mode, rounding):
    """Source rows of v0.19's nearest-neighbour resize along one axis, from its definition:
    float32 coordinates, ``round`` = C's round (halves away from zero), clamped."""
    x = np.arange(out_size, dtype=np.float32)
    if mode == "align_corners":
        coord = np.float32(in_size - 1) / np.float32(out_size - 1) * x
    else:  # asymmetric
        coord = np.float32(in_size) / np.float32(out_size) * x
    if rounding == "round":
        index = np.sign(coord) * np.floor(np.abs(coord.astype(np.float64)) + 0.5)
    else:
        index = np.floor(coord + np.float32(1e-5))
    return np.clip(index.astype(int), 0, in_size - 1)


@pytest.mark.parametrize("rounding", ["round", ""])
def test_resize2d_nearest_align_corners_takes_halves_up_as_relay(rounding):
    # 3 -> 5 with align_corners reads sources 0, 0.5, 1, 1.5, 2: v0.19's round (llvm.round)
    # took 0.5 to pixel 1, TVM 0.27's to pixel 0.  "" meant "round" under align_corners.
    import bmlib_relax
    from conftest import offloaded_partitions

    x = rand(1, 1, 3, 3)
    text = relay_fn("%x: Tensor[(1, 1, 3, 3), float32]",
                    'image.resize2d(%x, size=[5, 5], method="nearest_neighbor", '
                    f'coordinate_transformation_mode="align_corners", rounding_method="{rounding}")')
    rows = _nearest_rows(3, 5, "align_corners", "round")
    assert list(rows) == [0, 1, 1, 2, 2]
    want = x[:, :, rows][:, :, :, rows]
    check(text, [x], want, rtol=0, atol=0)
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    np.testing.assert_array_equal(model(x=x), want)


@pytest.mark.parametrize("rounding", ["round", "round_prefer_floor", "round_prefer_ceil", "ceil"])
def test_resize2d_nearest_whole_upscale_divides_as_relay(rounding):
    # v0.19 indexed a whole asymmetric upscale (3x) by integer division whatever the rounding
    # method: output column 2 reads source 2 // 3 = 0 where "round" of 0.67 gives 1.
    x = rand(1, 2, 2, 2)
    text = relay_fn("%x: Tensor[(1, 2, 2, 2), float32]",
                    'image.resize2d(%x, size=[6, 6], method="nearest_neighbor", '
                    f'coordinate_transformation_mode="asymmetric", rounding_method="{rounding}")')
    rows = np.arange(6) // 3
    check(text, [x], x[:, :, rows][:, :, :, rows], rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_resize2d_nearest_one_whole_axis_divides_the_other_rounds(layout):
    # height 2 -> 4 is a whole upscale (integer division), width 3 -> 5 is not (round)
    x = rand(1, 2, 2, 3) if layout == "NCHW" else rand(1, 2, 3, 2)
    shape = ", ".join(map(str, x.shape))
    text = relay_fn(f"%x: Tensor[({shape}), float32]",
                    'image.resize2d(%x, size=[4, 5], method="nearest_neighbor", '
                    f'layout="{layout}", coordinate_transformation_mode="asymmetric", '
                    'rounding_method="round")')
    rows, cols = np.arange(4) // 2, _nearest_rows(3, 5, "asymmetric", "round")
    if layout == "NCHW":
        want = x[:, :, rows][:, :, :, cols]
    else:
        want = x[:, rows][:, :, cols]
    check(text, [x], want, rtol=0, atol=0)


def test_upsampling_nearest_align_corners_takes_halves_up_as_relay():
    x = rand(1, 1, 3, 3)
    text = relay_fn("%x: Tensor[(1, 1, 3, 3), float32]",
                    "nn.upsampling(%x, scale_h=1.6666666f, scale_w=1.6666666f, "
                    "align_corners=True)")
    rows = _nearest_rows(3, 5, "align_corners", "round")
    check(text, [x], x[:, :, rows][:, :, :, rows], rtol=0, atol=0)


def _crop_nearest_reference(x, boxes, box_indices, crop, extrapolation):
    """tf_crop_and_resize nearest neighbour as v0.19 defined it, NCHW: float32 source
    coordinates, C's round (halves away from zero), outside the image: extrapolation."""
    n, c, h, w = x.shape
    out = np.empty((len(boxes), c, *crop), x.dtype)
    for b, (y1, x1, y2, x2) in enumerate(boxes.astype(np.float32)):
        for i in range(crop[0]):
            for j in range(crop[1]):
                sy = y1 * np.float32(h - 1) + np.float32((h - 1) * (y2 - y1)) / np.float32(crop[0] - 1) * np.float32(i)
                sx = x1 * np.float32(w - 1) + np.float32((w - 1) * (x2 - x1)) / np.float32(crop[1] - 1) * np.float32(j)
                if sy < 0 or sy > h - 1 or sx < 0 or sx > w - 1:
                    out[b, :, i, j] = extrapolation
                else:
                    r = int(np.floor(float(sy) + 0.5))
                    q = int(np.floor(float(sx) + 0.5))
                    out[b, :, i, j] = x[box_indices[b], :, r, q]
    return out


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_crop_and_resize_nearest_takes_halves_up_as_relay(layout):
    # a box over the whole 3x3 image read at 5x5 hits sources 0.5 and 1.5: v0.19's round took
    # them to pixels 1 and 2, TVM 0.27's TOPI to 0 and 2
    x = np.arange(36, dtype="float32").reshape(2, 2, 3, 3)
    boxes = np.array([[0, 0, 1, 1], [-0.5, 0.25, 0.5, 1.5]], "float32")
    index = np.array([0, 1], "int32")
    want = _crop_nearest_reference(x, boxes, index, (5, 5), -1.0)
    assert want[0, 0, 1, 1] == x[0, 0, 1, 1]  # source 0.5 -> pixel 1
    data = x if layout == "NCHW" else x.transpose(0, 2, 3, 1)
    shape = ", ".join(map(str, data.shape))
    text = relay_fn(f"%x: Tensor[({shape}), float32], %b: Tensor[(2, 4), float32], "
                    "%i: Tensor[(2), int32]",
                    f'image.crop_and_resize(%x, %b, %i, crop_size=[5, 5], layout="{layout}", '
                    'method="nearest_neighbor", extrapolation_value=-1f)')
    out = run_relay(text, data, boxes, index)
    np.testing.assert_array_equal(out if layout == "NCHW" else out.transpose(0, 3, 1, 2), want)


def test_crop_and_resize_to_a_single_row_is_named():
    from bmlib_relax import ConversionError

    text = relay_fn("%x: Tensor[(1, 1, 3, 3), float32], %b: Tensor[(1, 4), float32], "
                    "%i: Tensor[(1), int32]",
                    "image.crop_and_resize(%x, %b, %i, crop_size=[1, 5])")
    with pytest.raises(ConversionError, match=r"crop_size=\[1, 5\]: .*division by zero"):
        import_text(text)


@pytest.mark.parametrize("attrs, message", [
    ('padding_mode="foo"', r'"padding_mode=foo" is not supported'),
    ('method="linear"', r'"method=linear" is not supported'),
    ('layout="NHWC"', r'"layout=NHWC" is not supported'),
])
def test_grid_sample_forms_topi_refused_are_named(attrs, message):
    # v0.19's (and 0.27's) topi asserted these: a bare AssertionError when the model built
    from bmlib_relax import ConversionError

    text = relay_fn("%x: Tensor[(1, 2, 4, 4), float32], %g: Tensor[(1, 2, 3, 3), float32]",
                    f"image.grid_sample(%x, %g, {attrs})")
    with pytest.raises(ConversionError, match=rf"image.grid_sample: {message}"):
        import_text(text)


def test_affine_grid_of_one_row_is_named():
    from bmlib_relax import ConversionError

    text = relay_fn("%t: Tensor[(1, 2, 3), float32]", "image.affine_grid(%t, target_shape=[1, 4])")
    with pytest.raises(ConversionError, match=r"target_shape=\[1, 4\]: needs a height and a "
                                              r"width above 1"):
        import_text(text)


@pytest.mark.parametrize("op, shape, scales, named", [
    ("nn.upsampling", (1, 1, 2, 2), "scale_h=inff, scale_w=2f", "scale_h=inf"),
    ("nn.upsampling", (1, 1, 2, 2), "scale_h=2f, scale_w=-2f", "scale_w=-2.0"),
    ("nn.upsampling", (1, 1, 2, 2), "scale_h=nanf, scale_w=1f", "scale_h=nan"),
    ("nn.upsampling", (1, 1, 2, 2), "scale_h=2f, scale_w=1e30f", "scale_w=1e\\+30"),
    ("nn.upsampling3d", (1, 1, 2, 2, 2), "scale_d=1e20f, scale_h=2f, scale_w=2f",
     "scale_d=1e\\+20"),
])
def test_upsampling_scale_without_a_defined_output_size_is_named(op, shape, scales, named):
    """v0.19 cast ``round(dim * scale)`` to int32: beyond it (or for inf/NaN/negative
    scales) the size was undefined. Here: an OverflowError/ValueError from Python's
    ``round``, or TVM's FFI type message, before; now a ConversionError naming the scale."""
    from bmlib_relax import ConversionError

    text = relay_fn(f"%x: Tensor[{shape}, float32]", f"{op}(%x, {scales})")
    with pytest.raises(ConversionError, match=f"{op}: {named}.*is not a size"):
        import_text(text)


@pytest.mark.parametrize("layout, shape, out", [("NCHW", (1, 3, 2, 2), (1, 0, 4, 4)),
                                                ("NHWC", (1, 2, 2, 3), (1, 4, 4, 0))])
def test_depth_to_space_with_fewer_channels_than_a_block_is_empty(layout, shape, out):
    """v0.19's DepthToSpaceRel gave C // block**2 = 0 channels: an empty result (TVM 0.27
    failed to build the reshape with an internal message)."""
    text = relay_fn(f"%x: Tensor[{shape}, float32]",
                    f'nn.depth_to_space(%x, block_size=2, layout="{layout}")')
    got = run_relay(text, rand(*shape))
    assert got.shape == out


@pytest.mark.parametrize("layout, shape", [("NCHW", "(1, 2, ?, ?)"), ("NHWC", "(1, 5, ?, 2)")])
def test_a_floor_nearest_asymmetric_resize_of_a_run_time_size_is_named(layout, shape):
    # topi's can_convert_multiply_to_intdiv read .value of size / H: a raw AttributeError
    # ("'Div' object has no attribute 'value'") when the model was built
    from bmlib_relax import ConversionError

    text = relay_fn(f"%x: Tensor[{shape}, float32]",
                    f'image.resize2d(%x, size=[7, 3], roi=[0f, 0f, 0f, 0f], layout="{layout}", '
                    'method="nearest_neighbor", coordinate_transformation_mode="asymmetric", '
                    'rounding_method="floor")')
    axis = "H" if "?, ?" in shape or layout == "NCHW" else "W"
    with pytest.raises(ConversionError, match=rf"image.resize2d: a nearest_neighbor asymmetric "
                                              rf"resize .* whose {axis} is known only at run"):
        import_text(text)
