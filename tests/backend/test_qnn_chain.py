"""int8 MobileNet-style chains built for speed (#18 follow-up), structure only.

What made the int8 ``qnn_mobilenet_tiny`` no faster than its fp32 build was per
call cost, not arithmetic.  These tests pin the structure that removes it (the
timing itself is ``scripts/bench_qnn.py``, never a test):

* the quantized composites of a chain are one partition (quantize .. dequantize),
  the float tail keeps its own partitions;
* a partition receives no 0-d constant arguments: requantize multiplier, rounding
  term, shift and zero points are immediates in its code;
* an int8 depthwise conv's zero-point ``nn.pad`` is no separate pass (inlined into
  the phase-split pack);
* a folded (``lv = const``) int8 weight is packed at compile time;

and the outputs stay bit-exact (golden / NumPy model of Relay's arithmetic).
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
import qnn_reference as ref
from bmlib_relax import relay
from bmlib_relax.backend.codegen import is_bmlib_partition, lower_partition
from bmlib_relax.relay import ast

from conftest import DATA, Golden, offloaded_partitions, parse_golden, restore_printed_scalars

qnn = relay.qnn.op


def c(value, dtype=None):
    return relay.const(value, dtype)


def _partitions(model) -> dict:
    return {gv.name_hint: f for gv, f in model.relax_module.functions.items()
            if is_bmlib_partition(f)}


def _composites(func) -> list[str]:
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Function) and expr.attrs is not None and \
                "Composite" in expr.attrs:
            found.append(str(expr.attrs["Composite"]))

    relax.analysis.post_order_visit(func, visit)
    return found


@pytest.fixture(scope="module")
def mobilenet():
    case = "qnn_mobilenet_tiny"
    golden = Golden(DATA / case)
    module = restore_printed_scalars(case, parse_golden(golden))
    return golden, bmlib_relax.compile(module, golden.params())


def test_quantized_chain_is_one_partition_and_exact(mobilenet):
    golden, model = mobilenet
    assert offloaded_partitions(model.relax_module)
    chains = [f for f in _partitions(model).values()
              if any(n.startswith("bmlib.qnn_") for n in _composites(f))]
    assert len(chains) == 1, "the quantized layers are split over several partitions"
    names = _composites(chains[0])
    assert names.count("bmlib.qnn_conv2d_requantize") == 5
    assert "bmlib.qnn_quantize" in names and "bmlib.qnn_dequantize" in names
    # the float tail (pool, dense, softmax) is partitioned as before, outside the chain
    assert len(_partitions(model)) > 1
    out = model(**golden.inputs())
    (want,) = golden.expected()
    np.testing.assert_allclose(out, want, **golden.tolerance)


def test_partitions_take_no_scalar_constant_arguments(mobilenet):
    _, model = mobilenet
    for name, func in _partitions(model).items():
        for param in func.params:
            assert len(param.ty.shape.values) > 0, f"{name}: 0-d parameter {param.name}"


def _depthwise_model(x, w):
    variables = {"x": relay.var("x", shape=x.shape, dtype="int8"),
                 "w": relay.var("w", shape=w.shape, dtype="int8")}
    conv = qnn.conv2d(variables["x"], variables["w"], c(-128), c(0), c(0.05), c(0.03),
                      kernel_size=(3, 3), channels=x.shape[1], groups=x.shape[1],
                      strides=(2, 2), padding=(1, 1))
    out = qnn.requantize(conv, c(0.0015), c(0), c(0.06), c(-128), rounding="UPWARD",
                         out_dtype="int8")
    module = ast.IRModule({"main": relay.Function(list(variables.values()), out)})
    return bmlib_relax.compile(module, {"w": w})


def test_depthwise_zero_point_pad_is_inlined_and_scalars_are_immediates():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, size=(1, 16, 16, 16)).astype("int8")
    x[0, 0, 0, :4] = [-128, 127, -128, 127]
    w = rng.integers(-127, 128, size=(16, 1, 3, 3)).astype("int8")
    model = _depthwise_model(x, w)
    (name, func), = _partitions(model).items()
    prim, _ = lower_partition(func, name)
    script = prim.script()
    assert "bmlib_int8_dw_pad" in script
    assert "PadInput" not in script, "the zero-point pad is still a pass of its own"
    assert 'T.Buffer((), "int64")' not in script and "scalar" not in script
    acc = ref.conv2d_nchw(x, w, -128, 0, strides=(2, 2), padding=(1, 1, 1, 1), groups=16)
    want = ref.requantize(acc, 0.0015, 0, 0.06, -128, "int8", "UPWARD").astype("int8")
    np.testing.assert_array_equal(model(x=x), want)


def test_folded_int8_weight_is_packed_at_compile_time(mobilenet):
    _, model = mobilenet
    layouts = []
    from tvm import relax

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            layouts.append(str(expr.attrs.kernel_layout))

    for func in _partitions(model).values():
        relax.analysis.post_order_visit(func, visit)
    # pointwise convs (16 and 32 input channels: whole instruction groups) and the
    # depthwise ones are re-laid out; only the RGB conv packs its own (3 channels)
    assert sum(layout != "OIHW" for layout in layouts) == 4, layouts
