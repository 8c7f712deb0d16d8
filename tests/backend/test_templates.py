"""Every TIR template against TVM's own legalization of the same op.

Each case is a one-op (or one-composite) Relax module, partitioned with the
op's entry of the bmlib table, built through the bmlib codegen and compared
with the plain ``tvm.compile`` of the unpartitioned module.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.templates import template_ops

from conftest import offloaded_partitions
from helpers import make_module, pattern_entry, run_offloaded, run_plain

R = relax.op
C = relax.const
NCHW = (1, 8, 10, 10)


def _case(composite, build, inputs, weights=(), dtype="float32", ops=None):
    return pytest.param(composite, build, inputs, weights, dtype, ops, id=composite)


def _round_half_away(q):
    """Relay's round as the importer writes it: ``trunc(q + sign(q) * 0.49999997)``."""
    return R.trunc(R.add(q, R.multiply(R.sign(q), C(0.49999997, "float32"))))


CASES = {
    "convolution": [
        _case("conv2d", lambda x, w: R.nn.conv2d(x, w, padding=1), [NCHW], [(16, 8, 3, 3)]),
        _case("conv2d_bias_bn_relu", lambda x, w, b, g, be, m, v: R.nn.relu(relax.TupleGetItem(R.nn.batch_norm(
                R.add(R.nn.conv2d(x, w, strides=2), R.reshape(b, (16, 1, 1))), g, be, m, v,
                axis=1, training=False), 0)),
            [NCHW], [(16, 8, 3, 3), (16,), (16,), (16,), (16,), (16,)]),
        _case("conv2d", lambda x, w: R.nn.conv2d(x, w, groups=8, padding=1), [NCHW],
              [(8, 1, 3, 3)]),
        _case("conv2d", lambda x, w: R.nn.conv2d(x, w, groups=8, padding=1), [NCHW],
              [(16, 1, 3, 3)]),
        _case("conv2d", lambda x, w: R.nn.conv2d(x, w, groups=2, dilation=2), [NCHW],
              [(4, 4, 3, 3)]),
        _case("conv2d_clip", lambda x, w: R.nn.relu6(R.nn.conv2d(x, w)), [NCHW],
              [(4, 8, 1, 1)]),
        _case("conv2d_bias_clip", lambda x, w, b: R.clip(R.add(R.nn.conv2d(x, w), b),
                                                         0.0, 0.5),
              [NCHW], [(4, 8, 1, 1), (1, 4, 1, 1)]),
        _case("conv2d_bn_leaky_relu", lambda x, w, g, be, m, v: R.nn.leakyrelu(
            relax.TupleGetItem(R.nn.batch_norm(R.nn.conv2d(x, w), g, be, m, v, axis=1,
                                               training=False), 0), 0.1),
            [NCHW], [(4, 8, 3, 3), (4,), (4,), (4,), (4,)]),
        _case("conv2d_swish", lambda x, w: (lambda c: R.multiply(c, R.sigmoid(c)))(
            R.nn.conv2d(x, w)), [NCHW], [(4, 8, 3, 3)]),
        _case("conv2d_relu", lambda x, w: R.nn.relu(R.nn.conv2d(x, w, padding=1)),
              [NCHW], [(8, 8, 3, 3)], "float16"),
        _case("conv2d_transpose", lambda x, w: R.nn.conv2d_transpose(
            x, w, strides=2, padding=1, output_padding=1), [NCHW], [(8, 4, 3, 3)]),
    ],
    "matmul": [
        _case("dense", lambda x, w: R.matmul(x, R.permute_dims(w, [1, 0])), [(4, 32)],
              [(16, 32)]),
        _case("dense_bias_relu", lambda x, w, b: R.nn.relu(R.add(
            R.matmul(x, R.permute_dims(w, [1, 0])), b)), [(4, 32)], [(16, 32), (16,)]),
        _case("dense_bias_gelu", lambda x, w, b: R.nn.gelu(R.add(
            R.matmul(x, R.permute_dims(w, [1, 0])), b)), [(4, 32)], [(16, 32), (16,)]),
        _case("dense_bias_erf_gelu", lambda x, w, b: (lambda t: R.multiply(
            R.multiply(t, relax.const(0.5)),
            R.add(relax.const(1.0), R.erf(R.multiply(t, relax.const(0.707107))))))(
            R.add(R.matmul(x, R.permute_dims(w, [1, 0])), b)), [(4, 32)], [(16, 32), (16,)]),
        _case("dense", lambda x, w: R.matmul(x, R.permute_dims(w, [1, 0])), [(4, 32)],
              [(16, 32)], "float16"),
        _case("batch_matmul", lambda a, b: R.matmul(a, R.permute_dims(b, [0, 2, 1])),
              [(3, 4, 8), (3, 5, 8)]),
        _case("batch_matmul", lambda a, b: R.matmul(a, b), [(2, 3, 4, 8), (3, 8, 5)]),
        _case("matmul", lambda a, b: R.matmul(a, b), [(4, 8), (8, 5)]),
    ],
    "pooling": [
        _case("max_pool2d", lambda x: R.nn.max_pool2d(x, 3, 2, 1), [NCHW]),
        _case("avg_pool2d", lambda x: R.nn.avg_pool2d(x, 2, 2), [NCHW]),
        _case("avg_pool2d", lambda x: R.nn.avg_pool2d(x, 3, 2, 1, ceil_mode=True), [NCHW]),
        _case("adaptive_avg_pool2d", lambda x: R.nn.adaptive_avg_pool2d(x, (1, 1)), [NCHW]),
        _case("adaptive_avg_pool2d", lambda x: R.nn.adaptive_avg_pool2d(x, (3, 4)), [NCHW]),
    ],
    "normalization": [
        _case("softmax", lambda x: R.nn.softmax(x, axis=-1), [(4, 12)]),
        _case("softmax", lambda x: R.nn.softmax(x, axis=1), [(2, 12, 3)], (), "float16"),
        _case("log_softmax", lambda x: R.nn.log_softmax(x), [(4, 12)]),
        _case("layer_norm", lambda x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(4, 16)],
              [(16,), (16,)]),
        _case("batch_norm", lambda x, g, b, m, v: relax.TupleGetItem(R.nn.batch_norm(
            x, g, b, m, v, axis=1, training=False), 0), [NCHW], [(8,)] * 4),
        _case("batch_norm_relu", lambda x, g, b, m, v: R.nn.relu(relax.TupleGetItem(
            R.nn.batch_norm(x, g, b, m, v, axis=1, training=False), 0)), [NCHW], [(8,)] * 4),
    ],
    "elementwise": [
        *[_case(name, lambda a, b, f=fn: f(a, b), [(2, 3, 4), (3, 1)])
          for name, fn in [("add", R.add), ("subtract", R.subtract), ("multiply", R.multiply),
                           ("divide", R.divide), ("maximum", R.maximum),
                           ("minimum", R.minimum)]],
        _case("power", lambda a: R.power(R.abs(a), relax.const(1.5)), [(2, 3)],
              ops=["relax.abs", "relax.power"]),
        *[_case(name, lambda a, f=fn: f(a), [(2, 3, 4)])
          for name, fn in [("relu", R.nn.relu), ("clip", R.nn.relu6), ("gelu", R.nn.gelu),
                           ("silu", R.nn.silu), ("sigmoid", R.sigmoid), ("tanh", R.tanh),
                           ("exp", R.exp), ("negative", R.negative), ("abs", R.abs),
                           ("erf", R.erf)]],
        *[_case(name, lambda a, f=fn: f(R.abs(a)), [(2, 3, 4)], ops=["relax.abs", f"relax.{name}"])
          for name, fn in [("log", R.log), ("sqrt", R.sqrt), ("rsqrt", R.rsqrt)]],
        _case("leakyrelu", lambda a: R.nn.leakyrelu(a, 0.2), [(2, 8)]),
        _case("clip", lambda a: R.clip(a, -0.3, 0.4), [(2, 8)]),
        _case("astype", lambda a: R.astype(a, "float16"), [(2, 8)]),
        _case("elemwise_chain3", lambda a, b: R.tanh(R.multiply(R.exp(a), b)),
              [(2, 8), (2, 8)]),
    ],
    "data_movement": [
        _case("reshape", lambda a: R.reshape(a, (6, 4)), [(2, 3, 4)]),
        _case("permute_dims", lambda a: R.permute_dims(a, [2, 0, 1]), [(2, 3, 4)]),
        # NCHW <-> NCHW{b}c, the edges of backend/blocked_layout.py.
        _case("layout_transform", lambda a: R.layout_transform(
            a, index_map=lambda n, c, h, w: (n, c // 4, h, w, c % 4)), [(2, 8, 3, 5)]),
        _case("layout_transform", lambda a: R.layout_transform(
            a, index_map=lambda n, cb, h, w, c: (n, cb * 3 + c, h, w)), [(1, 2, 3, 5, 3)]),
        _case("expand_dims", lambda a: R.expand_dims(a, [0, 2]), [(3, 4)]),
        _case("squeeze", lambda a: R.squeeze(a, [1]), [(3, 1, 4)]),
        _case("flatten", lambda a: R.flatten(a), [(2, 3, 4)]),
        _case("concat", lambda a, b: R.concat([a, b], axis=1), [(2, 3), (2, 5)]),
        _case("split", lambda a: R.split(a, 3, axis=1), [(2, 6, 4)]),
        _case("split", lambda a: R.split(a, [1, 4], axis=1), [(2, 6, 4)]),
        _case("strided_slice", lambda a: R.strided_slice(a, [0, 1], [0, 1], [2, 5], [1, 2]),
              [(3, 6)]),
        _case("pad", lambda a: R.nn.pad(a, [0, 0, 0, 0, 1, 2, 2, 1], pad_value=0.5),
              [(1, 2, 3, 3)]),
        _case("tile", lambda a: R.tile(a, [2, 1, 3]), [(2, 3, 4)]),
        _case("repeat", lambda a: R.repeat(a, 2, axis=1), [(2, 3, 4)]),
        _case("flip", lambda a: R.flip(a, axis=2), [(2, 3, 4)]),
        _case("resize2d", lambda a: R.image.resize2d(a, (7, 5), method="cubic"),
              [(1, 2, 4, 4)]),
    ],
    "more_math": [
        *[_case(name, lambda a, f=fn: f(a), [(2, 3, 4)])
          for name, fn in [("cos", R.cos), ("sin", R.sin), ("tan", R.tan), ("cosh", R.cosh),
                           ("sinh", R.sinh), ("atan", R.atan), ("asinh", R.asinh),
                           ("ceil", R.ceil), ("floor", R.floor), ("round", R.round),
                           ("trunc", R.trunc), ("sign", R.sign), ("square", R.square)]],
        *[_case(name, lambda a, f=fn: f(R.multiply(R.tanh(a), relax.const(0.9, "float32"))),
                [(2, 3, 4)], ops=["relax.tanh", "relax.multiply", f"relax.{name}"])
          for name, fn in [("acos", R.acos), ("asin", R.asin), ("atanh", R.atanh)]],
        _case("acosh", lambda a: R.acosh(R.add(R.abs(a), relax.const(1.5, "float32"))),
              [(2, 3, 4)], ops=["relax.abs", "relax.add", "relax.acosh"]),
        _case("prelu", lambda a, s: R.nn.prelu(a, s), [(2, 4, 3, 3)], [(4,)]),
        _case("conv3d", lambda x, w: R.nn.conv3d(x, w, padding=1), [(1, 2, 3, 4, 4)],
              [(3, 2, 3, 3, 3)]),
        _case("conv1d", lambda x, w: R.nn.conv1d(x, w, padding=1, strides=2), [(1, 4, 9)],
              [(6, 4, 3)]),
        _case("conv1d_transpose", lambda x, w: R.nn.conv1d_transpose(x, w, strides=2, padding=1),
              [(1, 4, 5)], [(4, 3, 3)]),
        _case("conv3d_transpose", lambda x, w: R.nn.conv3d_transpose(
            x, w, strides=2, padding=1, output_padding=1), [(1, 4, 3, 3, 3)], [(4, 2, 3, 3, 3)]),
        _case("group_norm", lambda x, g, b: R.nn.group_norm(x, g, b, num_groups=2,
                                                             channel_axis=1, axes=[2, 3]),
              [(2, 4, 3, 3)], [(4,), (4,)]),
        _case("instance_norm", lambda x, g, b: R.nn.instance_norm(x, g, b, channel_axis=1,
                                                                   axes=[2, 3]),
              [(2, 4, 3, 3)], [(4,), (4,)]),
        _case("broadcast_to", lambda a: R.broadcast_to(a, (2, 3, 4)), [(3, 1)]),
        _case("stack", lambda a, b: R.stack([a, b], axis=1), [(3, 4), (3, 4)]),
    ],
    "selection": [
        *[_case(name, lambda a, b, f=fn: R.where(f(a, b), a, b), [(3, 4), (3, 4)],
                ops=[f"relax.{name}", "relax.where"])
          for name, fn in [("less", R.less), ("less_equal", R.less_equal),
                           ("greater", R.greater), ("greater_equal", R.greater_equal),
                           ("equal", R.equal), ("not_equal", R.not_equal)]],
        *[_case(name, lambda a, b, f=fn: R.where(f(R.less(a, b), R.greater(a, b)), a, b),
                [(3, 4), (3, 4)])
          for name, fn in [("logical_and", R.logical_and), ("logical_or", R.logical_or),
                           ("logical_xor", R.logical_xor)]],
        _case("logical_not", lambda a, b: R.where(R.logical_not(R.less(a, b)), a, b),
              [(3, 4), (3, 4)]),
        _case("where", lambda a, b: R.where(R.less(a, b), a, R.multiply(b, b)),
              [(3, 4), (3, 4)]),
        _case("take", lambda a: R.take(a, relax.const(np.array([2, 0, 2], "int64"), "int64"), axis=1,
                                       mode="clip"), [(3, 4)]),
        _case("gather_elements", lambda a: R.gather_elements(
            a, relax.const(np.array([[0, 2], [1, 0], [2, 2]], "int64"), "int64"), axis=1), [(3, 4)]),
        _case("argmax", lambda a: R.argmax(a, axis=1), [(3, 4)]),
        _case("argmin", lambda a: R.argmin(a, axis=0, keepdims=True), [(3, 4)]),
        _case("astype", lambda a: R.astype(R.argmax(a, axis=1), "int32"), [(3, 4)]),
        _case("gather_nd", lambda a: R.gather_nd(
            a, relax.const(np.array([[0, 1], [2, 3]], "int64"), "int64")), [(3, 4)]),
    ],
    "reduction": [
        _case("mean", lambda a: R.mean(a, axis=[2, 3], keepdims=True), [(1, 4, 5, 6)]),
        _case("sum", lambda a: R.sum(a, axis=1), [(3, 4, 5)]),
        _case("max", lambda a: R.max(a), [(3, 4, 5)]),
        _case("min", lambda a: R.min(a, axis=[0, 2]), [(3, 4, 5)]),
    ],
    # QNN (issue #18): the imported requantize / quantize arithmetic on integers.
    "qnn": [
        _case("qnn_requantize", lambda a: (lambda m: R.astype(R.clip(R.add(C(3, "int32"), R.astype(
            R.right_shift(R.add(m, R.where(R.greater_equal(m, C(0, "int64")), C(1 << 31, "int64"),
                                           C((1 << 31) - 1, "int64"))), C(32, "int64")), "int32")),
            -128, 127), "int8"))(R.multiply(R.astype(a, "int64"), C(1288490189, "int64"))),
              [(2, 8, 4, 4)], dtype="int32"),
        _case("qnn_requantize", lambda a, s: R.astype(R.clip(R.astype(R.right_shift(R.add(
            R.multiply(R.left_shift(R.astype(a, "int64"), C(1, "int64")),
                       C(1610612736, "int64")), C(1 << 30, "int64")),
            C(31, "int64")), "int32"), 0, 255), "uint8"),
              [(1, 8, 3)], [(8, 1)], dtype="int32"),
        _case("qnn_requantize", lambda a: R.astype(R.clip(R.right_shift(
            R.add(a, C(2, "int32")), C(2, "int32")), -128, 127), "int8"),
              [(3, 5)], dtype="int32"),
        _case("qnn_quantize", lambda x: R.astype(R.clip(R.add(_round_half_away(R.divide(
            x, C(0.01, "float32"))), C(-3.0, "float32")), -128.0, 127.0), "int8"),
              [(2, 7)]),
    ],
}

ALL_CASES = [case for cases in CASES.values() for case in cases]


@pytest.mark.parametrize("composite, build, inputs, weights, dtype, ops", ALL_CASES)
def test_template_matches_tvm_legalization(composite, build, inputs, weights, dtype, ops):
    mod, arrays = make_module(build, inputs, weights, dtype)
    partitioned = partition_for_bmlib(mod, patterns=[pattern_entry(composite)])
    assert offloaded_partitions(partitioned), f"bmlib.{composite} did not match"
    out, records = run_offloaded(partitioned, arrays)
    for record in records.values():
        assert record.composites == [f"bmlib.{composite}"]
    expected = run_plain(mod, arrays)
    tol = 1e-2 if dtype == "float16" else 1e-4
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_every_template_is_exercised():
    """Each registered template appears in some case above (or is listed as composite-only)."""
    covered = set()
    for case in ALL_CASES:
        composite, build, inputs, weights, dtype, ops = case.values
        mod, _ = make_module(build, inputs, weights, dtype)

        def visit(expr):
            if isinstance(expr, relax.Call) and hasattr(expr.op, "name"):
                covered.add(expr.op.name)

        relax.analysis.post_order_visit(mod["main"], visit)
    assert sorted(set(template_ops()) - covered) == []
