"""Weights are packed for a template only when the conv's dtypes are ones a template takes.

A bound (constant) conv weight was re-laid out to ``OIHW{ib}i{ob}o`` whatever the
conv's data and result dtypes; a conv the backend then left on the host (an ``int8``
result, a ``float64`` ``out_dtype``) reached TVM's own lowering with a layout it cannot
lower, and compiling died with a raw ``CodeGenVM cannot emit this Relax operator``.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from conftest import offloaded_partitions

CONV = ('nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3], '
        'out_dtype="{out}")', (4, 4, 3, 3))
CONV_T = ('nn.conv2d_transpose(%x, %w, channels=4, kernel_size=[3, 3], out_dtype="{out}")',
          (4, 4, 3, 3))


def _program(body: str, dtype: str, wshape) -> str:
    return (f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 4, 5, 5), {dtype}], '
            f'%w: Tensor[{wshape}, {dtype}]) {{\n  {body}\n}}\n')


def _values(dtype: str, wshape):
    x = (np.arange(100) % 7 - 3).reshape(1, 4, 5, 5).astype(dtype)
    w = (np.arange(np.prod(wshape)) % 5 - 2).reshape(wshape).astype(dtype)
    return x, w


@pytest.mark.parametrize("op", ["conv", "conv_transpose"])
@pytest.mark.parametrize("dtype, out", [("int8", "int8"), ("uint8", "uint8"), ("int8", "int16"),
                                        ("int8", "float32"), ("float32", "float64"),
                                        ("float16", "float64")])
def test_a_conv_left_on_the_host_keeps_a_weight_its_lowering_reads(op, dtype, out):
    body, wshape = CONV if op == "conv" else CONV_T
    text = _program(body.format(out=out), dtype, wshape)
    x, w = _values(dtype, wshape)
    as_input = bmlib_relax.compile(text)(x=x, w=w)
    bound = bmlib_relax.compile(text, params={"w": w})(x=x)
    assert bound.dtype == np.dtype(out)
    np.testing.assert_array_equal(bound, as_input)


@pytest.mark.parametrize("op", ["conv", "conv_transpose"])
def test_a_float32_conv_weight_is_still_packed_and_offloaded(op):
    body, wshape = CONV if op == "conv" else CONV_T
    text = _program(body.format(out="float32"), "float32", wshape)
    x, w = _values("float32", wshape)
    model = bmlib_relax.compile(text, params={"w": w})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    assert "OIHW" in model.relax_module.script() or "IOHW" in model.relax_module.script()
    assert any(f"i{ob}o" in model.relax_module.script() for ob in (4, 8, 16, 32))
    np.testing.assert_allclose(model(x=x), bmlib_relax.compile(text)(x=x, w=w), rtol=1e-5,
                               atol=1e-5)
