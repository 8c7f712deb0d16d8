"""Attributes v0.19's printer left out mean their C++ defaults (``op_schema.TEXT_DEFAULTS``).

v0.19 printed only attributes that differ from the C++ ``set_default`` of the op's
attrs struct.  So ``nn.lrn(%x)`` means alpha 1e-4 (``LRNAttrs``), not the Python
API's 1e-5 -- it was read as 1e-5, up to 4.6% off -- and a FlowNet ``nn.correlation``
prints only ``max_displacement`` and ``padding``, which the importer refused as
"missing attribute".  The Relay views that pattern checks read answer with the same
defaults, and the builder records every attribute whose Python default differs from
the C++ one (or that the C++ attrs require), so its text reads back the same in v0.19.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.relay import ast as A
from bmlib_relax.relay import parse
from bmlib_relax.relay.dataflow_pattern import is_op, wildcard

HEADER = '#[version = "0.0.5"]\n'


def _lrn_reference(x: np.ndarray, size=5, bias=2.0, alpha=1e-4, beta=0.75) -> np.ndarray:
    """v0.19's topi lrn over axis 1: x / (bias + alpha / size * window sum of x^2)^beta."""
    sq = np.pad(x.astype("float64") ** 2, [(0, 0), (size // 2, size // 2), (0, 0), (0, 0)])
    window = sum(sq[:, i:i + x.shape[1]] for i in range(size))
    return (x / (bias + alpha / size * window) ** beta).astype(x.dtype)


def test_lrn_without_alpha_uses_the_cxx_default():
    text = HEADER + "def @main(%x: Tensor[(1, 6, 2, 2), float32]) {\n  nn.lrn(%x)\n}\n"
    x = (np.random.default_rng(0).standard_normal((1, 6, 2, 2)) * 30).astype("float32")
    got = bmlib_relax.compile(text, {})(x=x)
    np.testing.assert_allclose(got, _lrn_reference(x, alpha=1e-4), rtol=1e-5)
    assert not np.allclose(got, _lrn_reference(x, alpha=1e-5), rtol=1e-3)


def test_correlation_as_v019_printed_it_runs_as_with_every_field_written():
    short = HEADER + '''def @main(%a: Tensor[(1, 2, 3, 3), float32], %b: Tensor[(1, 2, 3, 3), float32]) {
  nn.correlation(%a, %b, max_displacement=1, padding=[1, 1])
}
'''
    full = short.replace("max_displacement=1, padding=[1, 1]",
                         "kernel_size=1, max_displacement=1, stride1=1, stride2=1, "
                         'padding=[1, 1], is_multiply=True, layout="NCHW"')
    rng = np.random.default_rng(1)
    a, b = (rng.random((1, 2, 3, 3), dtype="float32") for _ in range(2))
    np.testing.assert_array_equal(bmlib_relax.compile(short, {})(a=a, b=b),
                                  bmlib_relax.compile(full, {})(a=a, b=b))


@pytest.mark.parametrize("shape, call, spelled", [
    ((1, 4, 2, 2), "nn.depth_to_space(%x)", "nn.depth_to_space(%x, block_size=1)"),
    ((1, 4, 2, 2), "nn.space_to_depth(%x)", "nn.space_to_depth(%x, block_size=1)"),
    ((1, 2, 2, 3), "nn.space_to_batch_nd(%x, paddings=[[0, 0], [0, 0]])",
     "nn.space_to_batch_nd(%x, block_shape=[1, 1], paddings=[[0, 0], [0, 0]])"),
    ((1, 2, 2, 3), "nn.batch_to_space_nd(%x, crops=[[0, 0], [0, 0]])",
     "nn.batch_to_space_nd(%x, block_shape=[1, 1], crops=[[0, 0], [0, 0]])"),
    ((1, 4, 2, 2), "vision.yolo_reorg(%x)", "vision.yolo_reorg(%x, stride=1)"),
])
def test_fields_with_a_cxx_default_may_be_left_out(shape, call, spelled):
    def model(body):
        return bmlib_relax.compile(
            HEADER + f"def @main(%x: Tensor[{shape}, float32]) {{\n  {body}\n}}\n", {})

    x = np.arange(np.prod(shape), dtype="float32").reshape(shape)
    np.testing.assert_array_equal(model(call)(x=x), model(spelled)(x=x))


def test_relay_views_answer_with_the_cxx_defaults():
    mod = parse(HEADER + '''def @main(%x: Tensor[(1, 4, 4, 4), int8], %y: Tensor[(1, 2, 4), int8],
          %z: Tensor[(1, 3, 4), int8], %f: Tensor[(1, 5, 2, 2), float32]) {
  %0 = qnn.avg_pool2d(%x, 1f, 0, 1f, 0, pool_size=[2, 2], strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]);
  %1 = qnn.batch_matmul(%y, %z, 0, 0, 1f, 1f, out_dtype="int32");
  %2 = image.resize2d(%f, size=[4, 4], method="nearest_neighbor");
  %3 = nn.lrn(%f);
  (%0, %1, %2, %3)
}
''')
    calls = {c.op.name: c for c in mod["main"].body.fields if isinstance(c, A.Call)}
    assert calls["qnn.avg_pool2d"].attrs.layout == "NCHW"
    assert calls["qnn.avg_pool2d"].attrs.count_include_pad is False
    assert calls["qnn.batch_matmul"].attrs.transpose_b is False
    assert calls["image.resize2d"].attrs.rounding_method == "round"
    assert calls["nn.lrn"].attrs.alpha == pytest.approx(1e-4)
    pattern = is_op("qnn.batch_matmul")(*[wildcard()] * 6).has_attr({"transpose_b": True})
    assert not pattern.match(calls["qnn.batch_matmul"])


@pytest.mark.parametrize("build, printed", [
    (lambda x: relay.nn.lrn(x), "alpha=1e-05"),
    (lambda x: relay.nn.max_pool2d(x), "pool_size=[1, 1]"),
    (lambda x: relay.nn.avg_pool2d(x), "pool_size=[1, 1]"),
    (lambda x: relay.nn.upsampling(x), "scale_h=1, scale_w=1"),
])
def test_builder_records_what_v019s_python_always_passed(build, printed):
    x = relay.var("x", shape=(1, 6, 4, 4))
    mod = relay.IRModule.from_expr(relay.Function([x], build(x)))
    assert printed in mod.astext()
    xv = np.random.default_rng(2).standard_normal((1, 6, 4, 4)).astype("float32")
    got = bmlib_relax.compile(parse(mod.astext()), {})(x=xv)
    assert got.shape == (1, 6, 4, 4) and np.isfinite(got).all()
