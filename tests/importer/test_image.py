"""Resizing: nn.upsampling (Relay's nearest/bilinear) and image.resize2d."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, import_text, ops_in, rand, relay_fn


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
