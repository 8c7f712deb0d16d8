"""NHWC graphs on bmlib: the layout pass runs them in NCHW, conv_fold folds the
TF-style batch-norm scale and SAME padding into the convolutions, and every
result equals the unconverted plain build."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax.backend.conv_fold import channel_scale, fold_into_convolutions
from bmlib_relax.backend.fold import fold_constants
from bmlib_relax.backend.layout import convert_nhwc_to_nchw
from bmlib_relax.flops import count_flops, layout_dims
from bmlib_relax.recipe import recipe_tensor
from bmlib_relax.relay import parse

from conftest import host_ops_besides_views, offloaded_partitions, run_plain

NHWC = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 9, 9, 3), float32], %w1: Tensor[(3, 3, 3, 8), float32],
          %s1: Tensor[(8), float32], %b1: Tensor[(8), float32],
          %w2: Tensor[(1, 1, 8, 16), float32], %w3: Tensor[(3, 3, 16, 16), float32]) {
  %0 = nn.pad(%x, 0 /* ty=int32 */, pad_width=[[0, 0], [1, 1], [1, 1], [0, 0]]);
  %1 = nn.conv2d(%0, %w1, padding=[0, 0, 0, 0], channels=8, kernel_size=[3, 3],
                 data_layout="NHWC", kernel_layout="HWIO");
  %2 = multiply(%1, %s1);
  %3 = add(%2, %b1);
  %4 = nn.relu(%3);
  %5 = nn.max_pool2d(%4, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 1, 1], layout="NHWC");
  %6 = nn.conv2d(%5, %w2, padding=[0, 0, 0, 0], channels=16, kernel_size=[1, 1],
                 data_layout="NHWC", kernel_layout="HWIO");
  %7 = nn.relu(%6);
  %8 = nn.conv2d(%7, %w3, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3],
                 data_layout="NHWC", kernel_layout="HWIO");
  %9 = add(%8, %6);
  %10 = sigmoid(%9);
  (mean(%10, axis=[1, 2]), %10)
}
"""
SHAPES = {"w1": (3, 3, 3, 8), "s1": (8,), "b1": (8,), "w2": (1, 1, 8, 16), "w3": (3, 3, 16, 16)}
PARAMS = {name: recipe_tensor(name, shape) for name, shape in SHAPES.items()}
X = recipe_tensor("x", (1, 9, 9, 3), role="input")


def _ops(mod) -> list[str]:
    names = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: names.append(e.op.name)
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return names


def _imported():
    return bmlib_relax.import_relay(parse(NHWC), PARAMS)


def test_nhwc_chain_runs_in_nchw_with_one_transpose_per_edge():
    converted = fold_constants(convert_nhwc_to_nchw(_imported()))
    ops = _ops(converted)
    # One transpose at the input, one for the NHWC output; none between neighbours.
    assert ops.count("relax.permute_dims") == 2, ops
    assert ops.count("relax.nn.conv2d") == 3
    script = converted.script()
    assert 'data_layout="NHWC"' not in script and 'layout="NHWC"' not in script
    np.testing.assert_allclose(run_plain(converted, [X])[1], run_plain(_imported(), [X])[1],
                               rtol=1e-5, atol=1e-5)


def test_scale_and_padding_fold_into_the_convolutions():
    folded = fold_into_convolutions(fold_constants(convert_nhwc_to_nchw(_imported())))
    ops = _ops(folded)
    assert "relax.multiply" not in ops and "relax.nn.pad" not in ops, ops
    reference = run_plain(_imported(), [X])
    for got, want in zip(run_plain(folded, [X]), reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_nhwc_model_is_fully_offloaded_and_matches_the_plain_build():
    model = bmlib_relax.compile(NHWC, PARAMS)
    assert offloaded_partitions(model.relax_module)
    report = model.report.to_dict()
    assert host_ops_besides_views(model.report) == {}
    assert report["flops_total"] == report["flops_offloaded"] > 0
    for got, want in zip(model(X), run_plain(_imported(), [X])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_nhwc_and_nchw_versions_of_one_model_agree():
    nchw = NHWC.replace('data_layout="NHWC", kernel_layout="HWIO"', "") \
        .replace(', layout="NHWC"', "").replace("(1, 9, 9, 3)", "(1, 3, 9, 9)") \
        .replace("[[0, 0], [1, 1], [1, 1], [0, 0]]", "[[0, 0], [0, 0], [1, 1], [1, 1]]") \
        .replace("multiply(%1, %s1)", "multiply(%1, expand_dims(%s1, axis=1, num_newaxis=2))") \
        .replace("add(%2, %b1)", "add(%2, expand_dims(%b1, axis=1, num_newaxis=2))") \
        .replace("axis=[1, 2]", "axis=[2, 3]")
    for name in ("w1", "w2", "w3"):
        nchw = nchw.replace(f"%{name}: Tensor[{tuple(SHAPES[name])}".replace(",)", ")"),
                            f"%{name}: Tensor[{tuple(np.empty(SHAPES[name]).transpose(3, 2, 0, 1).shape)}")
    params = dict(PARAMS)
    for name in ("w1", "w2", "w3"):
        params[name] = np.ascontiguousarray(PARAMS[name].transpose(3, 2, 0, 1))  # HWIO -> OIHW
    nhwc_out = bmlib_relax.compile(NHWC, PARAMS)(X)
    nchw_out = bmlib_relax.compile(nchw, params)(np.ascontiguousarray(X.transpose(0, 3, 1, 2)))
    np.testing.assert_allclose(nhwc_out[0], nchw_out[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nhwc_out[1], nchw_out[1].transpose(0, 2, 3, 1), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("shape, ok", [((), True), ((1,), True), ((8, 1, 1), True),
                                       ((1, 8, 1, 1), True), ((8,), False), ((1, 1, 1, 8), False),
                                       ((2, 8, 1, 1), False)])
def test_only_per_channel_scales_fold(shape, ok):
    assert (channel_scale(np.ones(shape, "float32"), 8) is not None) == ok


def test_flop_counters_read_the_layouts():
    assert layout_dims([2, 3, 3, 3, 16, 32], "OIHW16i32o") == {"O": 64, "I": 48, "H": 3, "W": 3}
    x = relax.Var("x", relax.TensorType((1, 8, 8, 3), "float32"))
    w = relax.Var("w", relax.TensorType((3, 3, 3, 16), "float32"))
    call = relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO")
    bb = relax.BlockBuilder()
    with bb.function("f", [x, w]):
        out = bb.emit(call)
        bb.emit_func_output(out)
    (binding,) = bb.get()["f"].body.blocks[0].bindings
    assert count_flops(binding.value) == 2 * 16 * 8 * 8 * 3 * 9


def test_nhwc_conv_inside_a_relay_global_function():
    """The layout pass rebuilt every function as a public ``main``: a private global with
    an NHWC conv clashed with the module's own main ("duplicate global symbol")."""
    text = """#[version = "0.0.5"]
def @block(%x: Tensor[(2, 7, 7, 5), float32], %w: Tensor[(3, 3, 5, 5), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=5, kernel_size=[3, 3],
                    data_layout="NHWC", kernel_layout="HWIO"))
}
def @main(%x: Tensor[(2, 7, 7, 5), float32], %w: Tensor[(3, 3, 5, 5), float32]) {
  @block(negative(%x), %w)
}
"""
    w = recipe_tensor("w", (3, 3, 5, 5))
    x = recipe_tensor("x", (2, 7, 7, 5), role="input")
    model = bmlib_relax.compile(text, {"w": w})
    assert offloaded_partitions(model.relax_module)
    assert model.report.to_dict()["ops_offloaded"].get("relax.nn.conv2d") == 1
    reference = run_plain(bmlib_relax.import_relay(parse(text), {"w": w}), [x])
    np.testing.assert_allclose(model(x), reference, rtol=1e-4, atol=1e-4)
