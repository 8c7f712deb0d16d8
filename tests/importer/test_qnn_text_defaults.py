"""QNN attributes that v0.19's printer left out of the text, read with v0.19's defaults.

v0.19's text printer writes only attributes that differ from their C++ default
(``VisitNonDefaultAttrs``), so a model it printed carries no ``alpha`` on a
``qnn.leaky_relu`` of alpha 0.25 (``LeakyReluAttrs``' default) and no
``transpose_b`` on a ``qnn.batch_matmul`` of ``transpose_b=False`` (but always
``transpose_b=True``, which ``MakeQuantizedBatchMatmul`` set).  ``out_dtype`` of
``qnn.quantize`` / ``dequantize`` has no default at all and ``qnn.requantize``'s is
void, which ``RequantizeRel`` refused: text without it never ran on v0.19.
Before, a leaky_relu without alpha used 0.01 (a silent wrong answer), a batch_matmul
without transpose_b multiplied by y transposed, and a missing out_dtype read as int8.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, relay
from bmlib_relax.relay import parse

from conftest import offloaded_partitions

HEADER = '#[version = "0.0.5"]\n'


def _leaky_relu_reference(x: np.ndarray, alpha: float) -> np.ndarray:
    """v0.19's qnn.leaky_relu at scale 1 and zero point 0: x, or alpha * x as a
    fixed-point multiply rounded UPWARD (exact at alpha 0.25 on these inputs)."""
    return np.where(x < 0, np.floor(x * alpha + 0.5), x).astype(x.dtype)


@pytest.mark.parametrize("patterns", [None, []], ids=["bmlib", "host"])
def test_leaky_relu_without_alpha_uses_relays_default_of_a_quarter(patterns):
    text = HEADER + '''def @main(%x: Tensor[(4), int8]) {
  qnn.leaky_relu(%x, 1f, 0, 1f, 0)
}
'''
    x = np.array([-100, -8, 0, 50], "int8")
    model = bmlib_relax.compile(text, {}, patterns=patterns)
    assert bool(offloaded_partitions(model.relax_module)) == (patterns is None)
    got = model(x=x)
    np.testing.assert_array_equal(got, _leaky_relu_reference(x, 0.25))
    np.testing.assert_array_equal(got, [-25, -2, 0, 50])


def test_leaky_relu_builder_records_its_alpha():
    x = relay.var("x", shape=(4,), dtype="int8")
    c = relay.const
    call = relay.qnn.op.leaky_relu(x, 0.25, c(1.0), c(0), c(1.0), c(0))
    text = relay.IRModule.from_expr(relay.Function([x], call)).astext()
    assert "alpha=0.25" in text


def test_batch_matmul_builder_prints_transpose_b_and_runs():
    x = relay.var("x", shape=(1, 2, 3), dtype="int8")
    y = relay.var("y", shape=(1, 4, 3), dtype="int8")
    c = relay.const
    call = relay.qnn.op.batch_matmul(x, y, c(0), c(0), c(1.0), c(1.0))
    text = relay.IRModule.from_expr(relay.Function([x, y], call)).astext()
    assert 'qnn.batch_matmul(%x, %y, 0, 0, 1f, 1f, out_dtype="int32", transpose_b=True)' in text
    xv = np.arange(-3, 3, dtype="int8").reshape(1, 2, 3)
    yv = np.arange(-6, 6, dtype="int8").reshape(1, 4, 3)
    got = bmlib_relax.compile(parse(text), {})(x=xv, y=yv)
    np.testing.assert_array_equal(got, xv.astype("int32") @ yv.astype("int32").transpose(0, 2, 1))


def test_batch_matmul_text_without_transpose_b_is_refused_as_relay_did():
    text = HEADER + '''def @main(%x: Tensor[(1, 2, 3), int8], %y: Tensor[(1, 3, 4), int8]) {
  qnn.batch_matmul(%x, %y, 0, 0, 1f, 1f, out_dtype="int32")
}
'''
    with pytest.raises(ConversionError, match=r"qnn.batch_matmul.*transpose_b=True .*a call "
                                              r"without transpose_b has it False"):
        bmlib_relax.compile(text, {})


@pytest.mark.parametrize("call", [
    "qnn.quantize(%x, 0.5f, 0)",
    "qnn.dequantize(qnn.quantize(%x, 0.5f, 0, out_dtype=\"int8\"), 0.5f, 0)",
    "qnn.requantize(qnn.quantize(%x, 0.5f, 0, out_dtype=\"int8\"), 0.5f, 0, 0.25f, 0)",
], ids=["quantize", "dequantize", "requantize"])
def test_quantize_ops_without_out_dtype_are_refused(call):
    text = HEADER + f'''def @main(%x: Tensor[(4), float32]) {{
  {call}
}}
'''
    with pytest.raises(ConversionError, match=r"out_dtype is required") as info:
        bmlib_relax.compile(text, {})
    assert "<string>:3:" in str(info.value)


def test_per_channel_parameter_on_a_0d_tensor_is_named():
    x = relay.var("x", shape=(), dtype="int8")
    c = lambda v, d: relay.const(np.array(v, d))  # noqa: E731
    out = relay.qnn.op.requantize(x, c([0.3], "float32"), c(2, "int32"), c(0.7, "float32"),
                                  c(-1, "int32"))
    with pytest.raises(ConversionError, match=r"qnn.requantize: a per-channel parameter of "
                                              r"shape \(1,\) cannot apply to a 0-d tensor"):
        bmlib_relax.compile(relay.IRModule.from_expr(relay.Function([x], out)))


@pytest.mark.parametrize("shift", [0, -1, -3])
def test_fixed_point_multiply_by_a_half_takes_v019s_power_of_two_path(shift):
    # q_multiply_shift's legalization (v0.19 intrin_rule.cc) took multiplier 1 << 30 as
    # 0.5: (x + 2^(e-1)) >> e with e = 1 - shift, the add wrapping in int32 -- so
    # INT32_MAX rounds to a negative number, where the int64 formula does not wrap.
    text = HEADER + f'''def @main(%x: Tensor[(7), int32]) {{
  fixed_point_multiply(%x, multiplier=1073741824, shift={shift})
}}
'''
    x = np.array([2 ** 31 - 1, 2 ** 31 - 2, -2 ** 31, 5, -5, 7, 1000], "int32")
    e = 1 - shift
    wrapped = ((x.astype(np.int64) + (1 << (e - 1)) + 2 ** 31) % 2 ** 32 - 2 ** 31)
    np.testing.assert_array_equal(bmlib_relax.compile(text, {})(x=x),
                                  wrapped.astype(np.int32) >> e)
