"""Quantized ops on bmlib: int8/uint8 composites, bit-exact with Relay's arithmetic.

Each graph is built with ``relay.qnn.op``, compiled through bmlib (weights as
params, so they fold and pack like a prequantized import), and checked three
ways: the expected QNN composite really holds the op (offload asserted first),
the output equals the NumPy model of Relay's canonicalization
(``tests/qnn_reference.py``) exactly, and equals the plain Relax build.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import bmlib_relax
import qnn_reference as ref
from bmlib_relax import relay
from bmlib_relax.backend.codegen import is_bmlib_partition, lower_partition
from bmlib_relax.relay import ast

from conftest import offloaded_partitions, run_plain

qnn = relay.qnn.op


def c(value, dtype=None):
    return relay.const(value, dtype)


def _compile(build, inputs: dict, params: dict):
    variables = {name: relay.var(name, shape=v.shape, dtype=str(v.dtype))
                 for name, v in {**inputs, **params}.items()}
    module = ast.IRModule({"main": relay.Function(list(variables.values()),
                                                  build(**variables))})
    model = bmlib_relax.compile(module, params)
    assert offloaded_partitions(model.relax_module), "nothing offloaded"
    plain = run_plain(bmlib_relax.import_relay(module, params), list(inputs.values()))
    return model, model(**inputs), plain


def _composites(model) -> list[str]:
    return [name for p in model.report.to_dict()["partitions"] for name in p["composites"]]


def _assert_exact(got, want, plain):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, plain)


@pytest.mark.parametrize("dtype,x_zp,rounding,groups,strides", [
    ("uint8", 255, "TONEAREST", 1, (1, 1)),   # per-channel scales, zp at the dtype limit
    ("int8", -128, "UPWARD", 8, (2, 2)),      # depthwise, strided
])
def test_qnn_conv2d_requantize_composite(dtype, x_zp, rounding, groups, strides):
    rng = np.random.default_rng(5)
    lo, hi = ref.QRANGE[dtype]
    x = rng.integers(lo, hi + 1, size=(1, 8, 9, 9)).astype(dtype)
    w = rng.integers(-127, 128, size=(16, 8 // groups, 3, 3)).astype("int8")
    bias = rng.integers(-2000, 2000, size=(16,)).astype("int32")
    w_scale = (np.arange(1, 17, dtype="float32") * 0.002).astype("float32")
    acc_scale = (np.float32(0.05) * w_scale).astype("float32")

    def build(x, w, bias):
        conv = qnn.conv2d(x, w, c(x_zp), c(0), c(0.05), c(w_scale), kernel_size=(3, 3),
                          channels=16, strides=strides, padding=(1, 1), groups=groups)
        acc = relay.nn.bias_add(conv, bias)
        req = qnn.requantize(acc, c(acc_scale), c(0), c(0.1), c(3), axis=1, rounding=rounding,
                             out_dtype=dtype)
        return relay.clip(req, 3, hi)  # ReLU at the output zero point

    model, got, plain = _compile(build, {"x": x}, {"w": w, "bias": bias})
    assert _composites(model) == ["bmlib.qnn_conv2d_requantize"]
    assert model.report.to_dict()["ops_host"] == {}
    acc = ref.conv2d_nchw(x, w, x_zp, 0, strides, (1, 1, 1, 1), groups) + \
        bias.reshape(1, -1, 1, 1)
    want = np.clip(ref.requantize(acc, acc_scale, 0, 0.1, 3, dtype, rounding, axis=1), 3, hi)
    _assert_exact(got, want.astype(dtype), plain)


def test_qnn_conv2d_tir_keeps_int8_operands_and_int32_accumulator():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, size=(1, 8, 6, 6)).astype("int8")
    w = rng.integers(-128, 128, size=(16, 8, 3, 3)).astype("int8")

    def build(x, w):
        conv = qnn.conv2d(x, w, c(2), c(0), c(0.1), c(0.1), kernel_size=(3, 3), channels=16)
        return qnn.requantize(conv, c(0.01), c(0), c(0.3), c(0))

    model, got, plain = _compile(build, {"x": x}, {"w": w})
    np.testing.assert_array_equal(got, plain)
    (gvar, func), = [(g, f) for g, f in model.relax_module.functions.items()
                     if is_bmlib_partition(f) and "conv2d" in g.name_hint]
    prim, _ = lower_partition(func, gvar.name_hint)
    text = prim.script()
    # Operands arrive as int8 (data and the packed weight), the reduction is in int32,
    # and the requantize epilogue writes the int8 result in the same PrimFunc.
    params = re.findall(r'(\w+): T\.Buffer\([^)]*\), "(\w+)"\)', text.split("\n    T.")[0])
    assert [dtype for _, dtype in params][:2] == ["int8", "int8"] and params[-1][1] == "int8"
    assert "float" not in text
    assert re.search(r'alloc_buffer\(\([^)]*\), "int32"', text)  # accumulator
    # The packed data is read as int8 (generic path) or as the uint8 a dot-product
    # instruction takes (tests/backend/test_qnn_dot.py checks which one is used).
    assert re.search(r'T\.Cast\("int32", bmlib_(int8_)?data_pack', text) or \
        "llvm.x86" in text


def test_qnn_dense_and_batch_matmul_requantize_composites():
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, size=(4, 32)).astype("int8")
    w = rng.integers(-128, 128, size=(16, 32)).astype("int8")
    a = rng.integers(0, 256, size=(2, 4, 16)).astype("uint8")
    b = rng.integers(0, 256, size=(2, 8, 16)).astype("uint8")

    def build(x, a, w, b):
        dense = qnn.requantize(qnn.dense(x, w, c(-128), c(0), c(0.02), c(0.01), units=16),
                               c(0.0002), c(0), c(0.03), c(2), rounding="TONEAREST")
        bmm = qnn.requantize(qnn.batch_matmul(a, b, c(128), c(0), c(0.02), c(0.02)),
                             c(0.0004), c(0), c(0.5), c(0), out_dtype="uint8")
        return relay.Tuple([dense, bmm])

    model, got, plain = _compile(build, {"x": x, "a": a}, {"w": w, "b": b})
    assert sorted(_composites(model)) == ["bmlib.qnn_batch_matmul_requantize",
                                          "bmlib.qnn_dense_requantize"]
    want_dense = ref.requantize(ref.dense(x, w, -128, 0), 0.0002, 0, 0.03, 2, "int8",
                                "TONEAREST")
    acc = np.stack([ref.dense(a[i], b[i], 128, 0) for i in range(2)])
    want_bmm = ref.requantize(acc, 0.0004, 0, 0.5, 0, "uint8")
    _assert_exact(got[0], want_dense, plain[0])
    _assert_exact(got[1], want_bmm, plain[1])


def test_qnn_elementwise_composites():
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, size=(1, 4, 5, 5)).astype("int8")
    b = rng.integers(-128, 128, size=(1, 4, 5, 5)).astype("int8")
    f = rng.uniform(-2, 2, size=(1, 4, 5, 5)).astype("float32")

    def build(a, b, f):
        added = qnn.add(a, b, c(0.01), c(2), c(0.02), c(-128), c(0.025), c(127))
        product = qnn.mul(a, b, c(0.01), c(2), c(0.02), c(-128), c(0.0005), c(0))
        quant = qnn.quantize(f, c(0.02), c(1), out_dtype="int8")
        return relay.Tuple([added, product, qnn.dequantize(quant, c(0.02), c(1))])

    model, got, plain = _compile(build, {"a": a, "b": b, "f": f}, {})
    assert {"bmlib.qnn_add", "bmlib.qnn_mul", "bmlib.qnn_quantize",
            "bmlib.qnn_dequantize"} <= set(_composites(model))
    assert model.report.to_dict()["ops_host"] == {}
    _assert_exact(got[0], ref.add(a, b, 0.01, 2, 0.02, -128, 0.025, 127), plain[0])
    _assert_exact(got[1], ref.mul(a, b, 0.01, 2, 0.02, -128, 0.0005, 0), plain[1])
    want = ref.dequantize(ref.quantize(f, 0.02, 1, "int8"), 0.02, 1)
    _assert_exact(got[2], want, plain[2])
