"""QNN scales and zero points as v0.19's type relations and canonicalizations took them.

``qnn.mul`` with scalar scales subtracts its zero points as given (QnnMulCanonicalize: a
plain right-aligned broadcast, so a 1-D zero point runs along the last axis); a
per-channel parameter holds one value per entry of its axis (qnn/utils.h AssignType: a
(1,) one against an axis of 3 was a type error); parameters without an axis are scalars
(IsScalarType); ``qnn.leaky_relu`` / ``qnn.avg_pool2d`` take int8/uint8 only; the binary
ops take any integer dtype (QnnBroadcastRel checked none; ConvertDtype clipped).
Expected integers are computed here from those definitions.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.errors import ConversionError

from .helpers import check, relay_fn


def test_mul_with_scalar_scales_subtracts_a_vector_zero_point_along_the_last_axis():
    zp = np.array([1, 2, 3], "int32")
    for shape in ((3, 3), (2, 3)):  # square: along axis 0 gave plausible wrong integers
        a = np.arange(10, 10 + 10 * int(np.prod(shape)), 10).astype("int8").reshape(shape)
        b = np.ones(shape, "int8")
        b.flat[4 % b.size] = 2
        model = bmlib_relax.compile(relay_fn(
            f"%a: Tensor[{shape}, int8], %b: Tensor[{shape}, int8], %zp: Tensor[(3), int32]",
            "qnn.mul(%a, %b, 1f, %zp, 1f, 0, 1f, 0)"), {"zp": zp})
        want = np.clip((a.astype(np.int32) - zp) * b, -128, 127).astype("int8")
        np.testing.assert_array_equal(model(a=a, b=b), want)


@pytest.mark.parametrize("body, message", [
    ('qnn.quantize(%f, %s3, 0, axis=1, out_dtype="int8")',
     "output_scale has 1 value\\(s\\), but axis 1 it applies along has 3"),
    ('qnn.requantize(%q, %s3, 0, 0.5f, 0, out_dtype="int8")',
     "input_scale has 1 value\\(s\\), but axis 1 it applies along has 3"),
    ("qnn.add(%q, %q, %s3, 0, 0.1f, 0, 0.1f, 0)", "lhs_scale has 1 value"),
    ('qnn.requantize(%q, 0.25f, 0, 0.5f, %z4, out_dtype="int8")',
     "output_zero_point must be a scalar, got shape \\(4,\\)"),
    ("qnn.leaky_relu(%q, %v3, 0, 0.1f, 0, alpha=0.1f)", "input_scale must be a scalar"),
    ("qnn.concatenate((%q, %q), (%v3, 0.2f), (0, 0), 0.2f, 0, axis=0)",
     "input_scales\\[0\\] must be a scalar"),
    ("qnn.leaky_relu(%w, 0.1f, 0, 0.1f, 0, alpha=0.1f)", "must be one of int8, uint8, got int16"),
    ("qnn.avg_pool2d(%w4, 0.1f, 0, 0.2f, 0, pool_size=[2, 2], strides=[1, 1], "
     'padding=[0, 0, 0, 0], dilation=[1, 1], layout="NCHW")', "must be one of int8, uint8"),
])
def test_parameters_v019s_type_relations_refused_are_refused_by_name(body, message):
    params = ("%f: Tensor[(2, 3), float32], %q: Tensor[(2, 3), int8], %w: Tensor[(2, 3), int16], "
              "%w4: Tensor[(1, 1, 2, 2), int16], %s3: Tensor[(1), float32], "
              "%v3: Tensor[(3), float32], %z4: Tensor[(4), int32]")
    weights = {"s3": np.array([0.5], "float32"), "v3": np.array([0.1, 0.2, 0.3], "float32"),
               "z4": np.zeros(4, "int32")}
    with pytest.raises(ConversionError, match=message):
        bmlib_relax.compile(relay_fn(params, body), weights)


def test_binary_qnn_ops_take_uint16_and_clip_to_its_range():
    u = np.array([[1000, 2000, 65000]], "uint16")
    check(relay_fn("%a: Tensor[(1, 3), uint16], %b: Tensor[(1, 3), uint16]",
                   "qnn.add(%a, %b, 0.5f, 0, 0.5f, 0, 0.5f, 0)"), [u, u],
          np.clip(u.astype(np.int64) * 2, 0, 65535).astype("uint16"))
