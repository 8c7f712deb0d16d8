"""int8 conv2d / dense / batch_matmul on the target's dot-product instruction (#18).

Structure: the built code of a quantized composite holds ``vpdpbusd`` for an
AVX-512 VNNI target, ``vpmaddwd`` for an AVX2 (or AVX-512BW without VNNI) one,
and neither for a plain x86-64 one (checked on the assembly, so any target can
be checked on any x86 host).  Exactness: run on this host (when it has the
instruction), the outputs equal the NumPy model of Relay's canonicalized
arithmetic (``tests/qnn_reference.py``) bit for bit, including int8 data at
its limits (the +128 shift and its compensation), uint8 data, input channels
that are not whole instruction groups, 1x1, strided and zero-point padded
convolutions, and a golden network.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import bmlib_relax
import qnn_reference as ref
from bmlib_relax import relay
from bmlib_relax.backend.codegen import build_prim_funcs, is_bmlib_partition, lower_partition
from bmlib_relax.backend.dot_product import AVX2_MADD, AVX512_MADD, VNNI, target_dot_product
from bmlib_relax.backend.target import resolve_target
from bmlib_relax.relay import ast

from conftest import DATA, Golden, offloaded_partitions, parse_golden, restore_printed_scalars

qnn = relay.qnn.op

VNNI_TARGET = {"kind": "llvm", "mcpu": "cascadelake"}
AVX512BW_TARGET = {"kind": "llvm", "mcpu": "skylake-avx512"}
AVX2_TARGET = "llvm -mcpu=haswell"  # as a Relay/tvmc user writes it
GENERIC_TARGET = {"kind": "llvm", "mcpu": "x86-64"}
INSTRUCTIONS = ("vpdpbusd", "vpmaddwd")
HOST_DOT = target_dot_product(None)


def _host_has(feature: str) -> bool:
    import tvm

    return bool(tvm.target.codegen.target_has_features(feature, resolve_target(None)))


def c(value, dtype=None):
    return relay.const(value, dtype)


def _module(build, variables):
    return ast.IRModule({"main": relay.Function(list(variables.values()), build(**variables))})


def _variables(arrays: dict):
    return {name: relay.var(name, shape=v.shape, dtype=str(v.dtype)) for name, v in arrays.items()}


def _instructions(model, target) -> dict[str, int]:
    """How often each dot-product instruction occurs in the partitions' assembly."""
    resolved = resolve_target(target)
    prims = {gv.name_hint: lower_partition(f, gv.name_hint, resolved)[0]
             for gv, f in model.relax_module.functions.items() if is_bmlib_partition(f)}
    asm = build_prim_funcs(prims, resolved).inspect_source("asm")
    return {name: len(re.findall(rf"\b{name}\b", asm)) for name in INSTRUCTIONS}


def _conv_model(x, w, x_zp, strides, padding, target, dtype):
    arrays = {"x": x, "w": w}

    def build(x, w):
        conv = qnn.conv2d(x, w, c(x_zp), c(0), c(0.05), c(0.01),
                          kernel_size=arrays["w"].shape[2:], channels=int(arrays["w"].shape[0]),
                          strides=strides, padding=padding)
        return qnn.requantize(conv, c(0.0005), c(0), c(0.1), c(3), rounding="UPWARD",
                              out_dtype=dtype)

    model = bmlib_relax.compile(_module(build, _variables(arrays)), {"w": w}, target=target)
    assert offloaded_partitions(model.relax_module), "nothing offloaded"
    composites = [n for p in model.report.to_dict()["partitions"] for n in p["composites"]]
    assert composites == ["bmlib.qnn_conv2d_requantize"]
    return model


def _conv_want(x, w, x_zp, strides, padding, dtype):
    acc = ref.conv2d_nchw(x, w, x_zp, 0, strides, tuple(padding) * 2, 1)
    return ref.requantize(acc, 0.0005, 0, 0.1, 3, dtype, "UPWARD").astype(dtype)


def _data(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = ref.QRANGE[dtype]
    x = rng.integers(lo, hi + 1, size=shape).astype(dtype)
    x.flat[:2] = (lo, hi)  # the dtype limits: the shift's extremes
    return x


def _weight(shape, seed=1):
    w = np.random.default_rng(seed).integers(-128, 128, size=shape).astype("int8")
    w.flat[:2] = (-128, 127)
    return w


def test_instruction_chosen_from_target_features():
    assert target_dot_product({"kind": "llvm", "mcpu": "rocketlake"}) is VNNI
    assert target_dot_product(VNNI_TARGET) is VNNI
    assert target_dot_product(AVX512BW_TARGET) is AVX512_MADD
    assert target_dot_product(AVX2_TARGET) is AVX2_MADD
    assert target_dot_product(GENERIC_TARGET) is None
    # A feature switched off in mattr is honoured.
    assert target_dot_product({"kind": "llvm", "mcpu": "rocketlake",
                               "mattr": ["-avx512vnni"]}) is AVX512_MADD


@pytest.mark.parametrize("target,instruction", [
    (VNNI_TARGET, "vpdpbusd"), (AVX512BW_TARGET, "vpmaddwd"), (AVX2_TARGET, "vpmaddwd"),
    (GENERIC_TARGET, None)])
def test_conv2d_assembly_holds_the_targets_instruction(target, instruction):
    x, w = _data("int8", (1, 8, 6, 6)), _weight((16, 8, 3, 3))
    model = _conv_model(x, w, 3, (1, 1), (1, 1), target, "int8")
    counts = _instructions(model, target)
    for name in INSTRUCTIONS:
        assert (counts[name] > 0) == (name == instruction), (target, counts)
    dot = target_dot_product(target)
    if dot is None or _host_has(dot.feature):
        np.testing.assert_array_equal(model(x=x), _conv_want(x, w, 3, (1, 1), (1, 1), "int8"))


needs_host_dot = pytest.mark.skipif(HOST_DOT is None, reason="host has no int8 dot product")


@needs_host_dot
@pytest.mark.parametrize("dtype,x_zp,in_channels,out_channels,kernel,strides,padding", [
    ("int8", 0, 8, 32, 3, (1, 1), (1, 1)),     # padding with the shifted zero
    ("int8", -128, 8, 16, 3, (1, 1), (1, 1)),  # zero point at the limit: nn.pad + zp term
    ("uint8", 255, 16, 32, 1, (1, 1), (0, 0)),  # uint8 data read as is, 1x1
    ("int8", 5, 3, 16, 3, (2, 2), (1, 1)),     # RGB input: channels padded to a group
    ("int8", 0, 12, 16, 1, (2, 2), (0, 0)),    # strided 1x1
])
def test_conv2d_on_host_instruction_is_bit_exact(dtype, x_zp, in_channels, out_channels,
                                                 kernel, strides, padding):
    x, w = _data(dtype, (1, in_channels, 9, 9)), _weight((out_channels, in_channels, kernel,
                                                          kernel))
    model = _conv_model(x, w, x_zp, strides, padding, None, dtype)
    assert _instructions(model, None)[HOST_DOT.instruction] > 0
    np.testing.assert_array_equal(model(x=x), _conv_want(x, w, x_zp, strides, padding, dtype))


@needs_host_dot
def test_dense_and_batch_matmul_on_host_instruction_are_bit_exact():
    x, w = _data("int8", (4, 30)), _weight((32, 30))

    def dense(x, w):
        acc = qnn.dense(x, w, c(-1), c(0), c(0.05), c(0.01), units=32)
        return qnn.requantize(acc, c(0.0005), c(0), c(0.1), c(3), rounding="TONEAREST",
                              out_dtype="int8")

    model = bmlib_relax.compile(_module(dense, _variables({"x": x, "w": w})), {"w": w})
    assert offloaded_partitions(model.relax_module)
    assert _instructions(model, None)[HOST_DOT.instruction] > 0
    acc = (x.astype(np.int64) + 1) @ w.astype(np.int64).T
    want = ref.requantize(acc, 0.0005, 0, 0.1, 3, "int8", "TONEAREST").astype("int8")
    np.testing.assert_array_equal(model(x=x), want)

    # batch_matmul of two activations: the weight side is packed inside the PrimFunc.
    a, b = _data("int8", (2, 5, 20), 3), _weight((2, 16, 20), 4)

    def batch(a, b):
        acc = qnn.batch_matmul(a, b, c(7), c(0), c(0.05), c(0.01))
        return qnn.requantize(acc, c(0.0005), c(0), c(0.1), c(3), out_dtype="int8")

    model = bmlib_relax.compile(_module(batch, _variables({"a": a, "b": b})), {})
    composites = [n for p in model.report.to_dict()["partitions"] for n in p["composites"]]
    assert "bmlib.qnn_batch_matmul_requantize" in composites
    assert _instructions(model, None)[HOST_DOT.instruction] > 0
    acc = np.einsum("bmk,bnk->bmn", a.astype(np.int64) - 7, b.astype(np.int64))
    want = ref.requantize(acc, 0.0005, 0, 0.1, 3, "int8", "UPWARD").astype("int8")
    np.testing.assert_array_equal(model(a=a, b=b), want)


@needs_host_dot
@pytest.mark.parametrize("case", ["qnn_conv2d_per_channel_int8_out", "qnn_mobilenet_tiny"])
def test_goldens_through_the_instruction(case):
    golden = Golden(DATA / case)
    module = restore_printed_scalars(case, parse_golden(golden))
    model = bmlib_relax.compile(module, golden.params())
    assert offloaded_partitions(model.relax_module)
    assert _instructions(model, None)[HOST_DOT.instruction] > 0
    out = model(**golden.inputs())
    (want,) = golden.expected()
    if str(want.dtype).startswith("int"):
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out, want, **golden.tolerance)


def test_report_gives_partition_dtypes_and_why_an_int8_op_stays_on_host():
    x, w = _data("int8", (1, 8, 6, 6)), _weight((16, 8, 3, 3))

    def build(x, w):
        conv = qnn.conv2d(x, w, c(0), c(0), c(0.05), c(0.01), kernel_size=(3, 3), channels=16,
                          padding=(1, 1))
        req = qnn.requantize(conv, c(0.0005), c(0), c(0.1), c(0), out_dtype="int8")
        return relay.nn.max_pool2d(req, pool_size=(2, 2), strides=(2, 2))  # int8, no QNN op

    model = bmlib_relax.compile(_module(build, _variables({"x": x, "w": w})), {"w": w})
    report = model.report.to_dict()
    (partition,) = report["partitions"]
    assert partition["dtypes"]["outputs"] == ["int8"]
    assert partition["dtypes"]["inputs"][0] == "int8"  # data and weight; then int scalars
    assert "float32" not in partition["dtypes"]["inputs"]
    reasons = {r["op"]: r for r in report["host_ops"]}
    assert reasons["relax.nn.max_pool2d"]["reason"] == "dtype_not_supported"
    assert "quantized composites" in reasons["relax.nn.max_pool2d"]["detail"]


@pytest.mark.parametrize("size,x_zp,strides,pixel_vectors", [
    (16, 0, (1, 1), True), (16, -128, (1, 1), True), (16, 3, (2, 2), True),
    (5, 3, (2, 2), False)])  # 3 output columns: under half a vector with AVX2 or AVX-512
def test_depthwise_int8_is_bit_exact(size, x_zp, strides, pixel_vectors):
    """Depthwise has no channel group for a dot product: rows of half a vector or more
    are vectorized along output pixels (whole-vector int8 stores; strided windows read
    phase-split columns), narrower ones keep the channel-blocked template; both exact."""
    x, w = _data("int8", (1, 16, size, size)), _weight((16, 1, 3, 3))

    def build(x, w):
        conv = qnn.conv2d(x, w, c(x_zp), c(0), c(0.05), c(0.01), kernel_size=(3, 3),
                          channels=16, groups=16, strides=strides, padding=(1, 1))
        return qnn.requantize(conv, c(0.0005), c(0), c(0.1), c(3), out_dtype="int8")

    model = bmlib_relax.compile(_module(build, _variables({"x": x, "w": w})), {"w": w})
    (gvar, func), = [(g, f) for g, f in model.relax_module.functions.items()
                     if is_bmlib_partition(f)]
    prim, record = lower_partition(func, gvar.name_hint)
    assert not record.unscheduled
    assert ("bmlib_int8_depthwise" in prim.script()) == pixel_vectors
    acc = ref.conv2d_nchw(x, w, x_zp, 0, strides, (1, 1, 1, 1), 16)
    want = ref.requantize(acc, 0.0005, 0, 0.1, 3, "int8", "UPWARD").astype("int8")
    np.testing.assert_array_equal(model(x=x), want)


def test_unmatched_instruction_loop_falls_back_to_correct_scalar_code(monkeypatch):
    """If the marked loop is not the contiguous form the instruction needs, the build
    warns and keeps the (correct) multiply-add loops instead of failing or guessing."""
    from bmlib_relax.backend.schedule import UnscheduledBlockWarning
    from bmlib_relax.backend.templates import qnn_conv

    def refuse(loop):
        raise ValueError("test: not contiguous")

    monkeypatch.setattr(qnn_conv, "_instruction", refuse)
    x, w = _data("int8", (1, 8, 6, 6)), _weight((16, 8, 3, 3))
    with pytest.warns(UnscheduledBlockWarning, match="not emitted"):
        model = _conv_model(x, w, 3, (1, 1), (1, 1), VNNI_TARGET, "int8")
    with pytest.warns(UnscheduledBlockWarning, match="not emitted"):
        assert _instructions(model, VNNI_TARGET)["vpdpbusd"] == 0
    if _host_has("avx512vnni"):
        np.testing.assert_array_equal(model(x=x), _conv_want(x, w, 3, (1, 1), (1, 1), "int8"))
