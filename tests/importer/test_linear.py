"""Dense, batch_matmul and bias_add: numerics and the import forms bmlib patterns match."""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax import ConversionError

from .helpers import check, import_text, ops_in, rand, relay_fn


def test_dense_with_units_and_nd_input():
    x, w = rand(2, 3, 8), rand(5, 8, seed=1)
    text = relay_fn("%x: Tensor[(2, 3, 8), float32], %w: Tensor[(5, 8), float32]",
                    "nn.dense(%x, %w, units=5)")
    check(text, [x, w], x @ w.T)
    assert ops_in(import_text(text)) == ["relax.permute_dims", "relax.matmul"]
    script = import_text(text)["main"].script()
    assert "R.permute_dims(w, axes=[1, 0])" in script


def test_dense_units_mismatch_is_an_error():
    text = relay_fn("%x: Tensor[(2, 8), float32], %w: Tensor[(5, 8), float32]",
                    "nn.dense(%x, %w, units=4)")
    with pytest.raises(ConversionError, match="nn.dense: units=4"):
        import_text(text)


def test_dense_out_dtype():
    x, w = rand(2, 8, dtype="float16"), rand(5, 8, dtype="float16", seed=1)
    text = relay_fn("%x: Tensor[(2, 8), float16], %w: Tensor[(5, 8), float16]",
                    'nn.dense(%x, %w, units=None, out_dtype="float32")')
    out = check(text, [x, w], x.astype("float32") @ w.astype("float32").T, rtol=1e-2, atol=1e-2)
    assert out.dtype == np.float32


@pytest.mark.parametrize("flags,a_shape,b_shape", [
    ("", (2, 3, 4), (2, 4, 5)),                                  # C++ defaults: no transpose
    ("transpose_b=True", (2, 3, 4), (2, 5, 4)),
    ("transpose_a=True", (2, 4, 3), (2, 4, 5)),
    ("transpose_a=True, transpose_b=True", (2, 4, 3), (2, 5, 4)),
    ("transpose_b=True", (1, 3, 4), (2, 5, 4)),                  # broadcast batch
])
def test_batch_matmul_transpose_flags(flags, a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    args = f"%a, %b, {flags}" if flags else "%a, %b"
    text = relay_fn(f"%a: Tensor[{a_shape}, float32], %b: Tensor[{b_shape}, float32]",
                    f"nn.batch_matmul({args})")
    ta = a.transpose(0, 2, 1) if "transpose_a=True" in flags else a
    tb = b.transpose(0, 2, 1) if "transpose_b=True" in flags else b
    check(text, [a, b], ta @ tb)
    expected_ops = ["relax.permute_dims"] * flags.count("True") + ["relax.matmul"]
    assert ops_in(import_text(text)) == expected_ops


@pytest.mark.parametrize("axis,shape", [(1, (2, 3, 4, 5)), (-1, (2, 3, 4, 5)), (3, (2, 3, 4, 5)),
                                        (2, (2, 3, 4, 5)), (0, (3, 4)), (-3, (2, 3, 4, 5))])
def test_bias_add_axis(axis, shape):
    x = rand(*shape)
    channels = shape[axis]
    b = rand(channels, seed=1)
    text = relay_fn(f"%x: Tensor[{shape}, float32], %b: Tensor[({channels}), float32]",
                    f"nn.bias_add(%x, %b, axis={axis})")
    norm = axis % len(shape)
    ref = x + b.reshape([channels] + [1] * (len(shape) - 1 - norm))
    check(text, [x, b], ref)
    last = norm == len(shape) - 1
    assert ops_in(import_text(text)) == (["relax.add"] if last else ["relax.reshape", "relax.add"])


def test_bias_add_constant_bias_has_the_same_form():
    x, b = rand(1, 3, 2, 2), rand(3, seed=1)
    text = relay_fn("%x: Tensor[(1, 3, 2, 2), float32], %b: Tensor[(3), float32]",
                    "nn.bias_add(%x, %b)")
    mod = import_text(text, {"b": b})
    assert ops_in(mod) == ["relax.reshape", "relax.add"]
    check(text, [x], x + b.reshape(3, 1, 1), params={"b": b})


def test_matmul_op_defaults_to_no_transpose():
    a, b = rand(3, 4), rand(4, 2, seed=1)
    text = relay_fn("%a: Tensor[(3, 4), float32], %b: Tensor[(4, 2), float32]",
                    "nn.matmul(%a, %b)")
    check(text, [a, b], a @ b)


@pytest.mark.parametrize("params, body, message", [
    ("%a: Tensor[(3, 4), float32], %b: Tensor[(5, 4), float32]",
     "nn.matmul(%a, %b, units=6, transpose_b=True)", r"units=6 does not match the weight's 5"),
    ("%a: Tensor[(2, 2, 3, 4), float32], %b: Tensor[(2, 2, 4, 5), float32]",
     "nn.batch_matmul(%a, %b, transpose_b=False)", r"takes 3-D operands .* got 4-D and 4-D"),
    ("%a: Tensor[(3, 4), float32], %b: Tensor[(4, 5), float32]",
     "nn.batch_matmul(%a, %b, transpose_b=False)", r"takes 3-D operands .* got 2-D and 2-D"),
])
def test_products_relay_refused_are_named(params, body, message):
    from bmlib_relax import ConversionError

    with pytest.raises(ConversionError, match=message):
        import_text(relay_fn(params, body))
