"""Convolutions, pools and batch_norm with a symbolic batch (issue #14).

A model whose batch is ``?`` compiles once, without ``input_shapes``: its
conv2d / depthwise / pools / batch_norm / bias / relu run on bmlib with the
batch a ``tir.Var``, and every batch size gives what a build pinned to that
size gives (and what the plain Relax build gives).  Symbolic channel or
spatial dims are refused by the pattern checks and stay on the host, saying
why.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir

import bmlib_relax
from bmlib_relax.backend.codegen import lower_partition
from bmlib_relax.backend.partition import partition_for_bmlib
from bmlib_relax.backend.templates import register_template
from bmlib_relax.compiler import compile_plain
from bmlib_relax.importer import import_relay
from bmlib_relax.relay import parse

from conftest import offloaded_partitions

# A relay.testing-style ResNet block, NCHW, batch `?`: conv+bias+batch_norm+relu, max
# pool, a 3x3 conv (row tiles), a 1x1 conv as GEMM, the residual add+relu, a strided 1x1,
# a depthwise conv, an avg pool, a 3x3 conv on 4x4 (flat pixel tiles), a grouped conv,
# global average pooling and the classifier.
RESNET_BLOCK = """#[version = "0.0.5"]
def @main(%data: Tensor[(?, 8, 16, 16), float32],
          %w0: Tensor[(32, 8, 3, 3), float32], %b0: Tensor[(32), float32],
          %gamma: Tensor[(32), float32], %beta: Tensor[(32), float32],
          %mean: Tensor[(32), float32], %var: Tensor[(32), float32],
          %w1: Tensor[(32, 32, 3, 3), float32], %w2: Tensor[(32, 32, 1, 1), float32],
          %w3: Tensor[(16, 32, 1, 1), float32], %wd: Tensor[(16, 1, 3, 3), float32],
          %w4: Tensor[(16, 16, 3, 3), float32], %wg: Tensor[(16, 8, 3, 3), float32],
          %fc: Tensor[(10, 16), float32], %fcb: Tensor[(10), float32]) {
  %0 = nn.conv2d(%data, %w0, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b0);
  %2 = nn.batch_norm(%1, %gamma, %beta, %mean, %var);
  %3 = nn.relu(%2.0);
  %4 = nn.max_pool2d(%3, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
  %5 = nn.conv2d(%4, %w1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %6 = nn.relu(%5);
  %7 = nn.conv2d(%6, %w2, padding=[0, 0, 0, 0], channels=32, kernel_size=[1, 1]);
  %8 = add(%7, %4);
  %9 = nn.relu(%8);
  %10 = nn.conv2d(%9, %w3, strides=[2, 2], padding=[0, 0, 0, 0], channels=16, kernel_size=[1, 1]);
  %11 = nn.conv2d(%10, %wd, padding=[1, 1, 1, 1], groups=16, channels=16, kernel_size=[3, 3]);
  %12 = nn.relu(%11);
  %13 = nn.conv2d(%12, %w4, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %14 = nn.conv2d(%13, %wg, padding=[1, 1, 1, 1], groups=2, channels=16, kernel_size=[3, 3]);
  %15 = nn.avg_pool2d(%14, pool_size=[2, 2], strides=[2, 2]);
  %16 = nn.global_avg_pool2d(%15);
  %17 = nn.batch_flatten(%16);
  %18 = nn.dense(%17, %fc, units=10);
  nn.bias_add(%18, %fcb)
}
"""

# The TensorFlow form: NHWC data, HWIO weights, explicit SAME padding, batch norm as
# multiply/add, a residual, and a mean over H, W (the layout pass's NCHW twins).
NHWC_BLOCK = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 12, 12, 4), float32], %k0: Tensor[(3, 3, 4, 16), float32],
          %s0: Tensor[(16), float32], %t0: Tensor[(16), float32],
          %k1: Tensor[(1, 1, 16, 16), float32], %t1: Tensor[(16), float32]) {
  %0 = nn.pad(%x, 0f, pad_width=[[0, 0], [1, 1], [1, 1], [0, 0]]);
  %1 = nn.conv2d(%0, %k0, padding=[0, 0, 0, 0], channels=16, kernel_size=[3, 3],
                 data_layout="NHWC", kernel_layout="HWIO");
  %2 = multiply(%1, %s0);
  %3 = add(%2, %t0);
  %4 = nn.relu(%3);
  %5 = nn.max_pool2d(%4, pool_size=[3, 3], strides=[2, 2], padding=[0, 0, 1, 1], layout="NHWC");
  %6 = nn.conv2d(%5, %k1, padding=[0, 0, 0, 0], channels=16, kernel_size=[1, 1],
                 data_layout="NHWC", kernel_layout="HWIO");
  %7 = add(%6, %t1);
  %8 = add(%7, %5);
  %9 = nn.relu(%8);
  mean(%9, axis=[1, 2], keepdims=True)
}
"""

# Channel and spatial dims bmlib's conv/pool templates cannot take symbolic.
SYMBOLIC_SPATIAL = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8, ?, ?), float32], %w: Tensor[(16, 8, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])
}
"""

# Other template paths: depthwise with a channel multiplier (TOPI's compute), a dilated
# conv, a strided 1x1 (subsampled packing), ceil-mode and padded pools.
OTHER_PATHS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8, 9, 9), float32], %w: Tensor[(16, 1, 3, 3), float32],
          %w2: Tensor[(8, 16, 3, 3), float32], %w3: Tensor[(8, 8, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=8, channels=16, kernel_size=[3, 3]);
  %1 = nn.conv2d(%0, %w2, padding=[2, 2, 2, 2], dilation=[2, 2], channels=8, kernel_size=[3, 3]);
  %2 = nn.conv2d(%1, %w3, strides=[2, 2], channels=8, kernel_size=[1, 1]);
  %3 = nn.max_pool2d(%2, pool_size=[2, 2], strides=[1, 1], ceil_mode=True);
  nn.avg_pool2d(%3, pool_size=[3, 3], padding=[1, 1, 1, 1], count_include_pad=True)
}
"""

CONV_OPS = ("relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d",
            "relax.nn.adaptive_avg_pool2d", "relax.nn.batch_norm")


def _weights(text: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights for every parameter of ``@main`` but the first (variances positive)."""
    rng = np.random.default_rng(seed)
    main = parse(text)["main"]
    weights = {}
    for param in main.params[1:]:
        shape = [int(d) for d in param.type_annotation.shape]
        value = rng.standard_normal(shape).astype("float32") * 0.5
        weights[param.name] = np.abs(value) + 0.5 if param.name == "var" else value
    return weights


def _single(outputs):
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def _plain(text: str, weights: dict, x: np.ndarray) -> np.ndarray:
    executable = compile_plain(import_relay(parse(text), weights))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return _single(vm["main"](tvm.runtime.tensor(x))).numpy()


def _host_ops(model) -> set[str]:
    return set(model.report.ops_host)


@pytest.fixture(scope="module")
def resnet_block():
    weights = _weights(RESNET_BLOCK)
    return weights, bmlib_relax.compile(RESNET_BLOCK, weights)


def test_resnet_block_is_offloaded_with_a_symbolic_batch(resnet_block):
    _, model = resnet_block
    assert offloaded_partitions(model.relax_module)
    assert model.report.inputs[0]["shape"][1:] == [8, 16, 16]
    assert isinstance(model.report.inputs[0]["shape"][0], str)  # still symbolic
    assert not _host_ops(model) & set(CONV_OPS), str(model.report)
    assert model.report.ops_offloaded["relax.nn.conv2d"] == 7
    # Every block of every partition got its schedule rule (none rolled back).
    assert not any(p.unscheduled for p in model.report.partitions), str(model.report)


@pytest.mark.parametrize("batch", [1, 3])
def test_resnet_block_any_batch_matches_pinned_and_plain(resnet_block, batch):
    weights, model = resnet_block
    x = np.random.default_rng(batch).standard_normal((batch, 8, 16, 16)).astype("float32")
    pinned = bmlib_relax.compile(RESNET_BLOCK, weights,
                                 input_shapes={"data": (batch, 8, 16, 16)})
    assert offloaded_partitions(pinned.relax_module)
    got = _single(model(x))
    assert got.shape == (batch, 10)
    np.testing.assert_allclose(got, _single(pinned(x)), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, _plain(RESNET_BLOCK, weights, x), rtol=1e-4, atol=1e-4)
    if batch > 1:  # the samples are computed apart, not broadcast from one
        assert not np.allclose(got[0], got[1])


def test_nhwc_twins_take_a_symbolic_batch():
    weights = _weights(NHWC_BLOCK, seed=1)
    model = bmlib_relax.compile(NHWC_BLOCK, weights)
    assert offloaded_partitions(model.relax_module)
    assert model.report.ops_offloaded["relax.nn.conv2d"] == 2
    assert "relax.nn.max_pool2d" in model.report.ops_offloaded
    assert not _host_ops(model) & set(CONV_OPS), str(model.report)
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 12, 12, 4)).astype("float32")
        got = _single(model(x))
        assert got.shape == (batch, 1, 1, 16)
        np.testing.assert_allclose(got, _plain(NHWC_BLOCK, weights, x), rtol=1e-4, atol=1e-4)


def test_other_conv_and_pool_paths_take_a_symbolic_batch():
    weights = _weights(OTHER_PATHS, seed=5)
    model = bmlib_relax.compile(OTHER_PATHS, weights)
    assert offloaded_partitions(model.relax_module)
    assert not model.report.ops_host, str(model.report)
    for batch in (1, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 9, 9)).astype("float32")
        got = _single(model(x))
        assert got.shape == (batch, 8, 4, 4)
        np.testing.assert_allclose(got, _plain(OTHER_PATHS, weights, x), rtol=1e-4, atol=1e-4)


def test_symbolic_spatial_dims_stay_on_the_host_and_say_why():
    weights = _weights(SYMBOLIC_SPATIAL, seed=2)
    model = bmlib_relax.compile(SYMBOLIC_SPATIAL, weights)
    assert {"relax.nn.conv2d", "relax.nn.max_pool2d"} <= _host_ops(model)
    reasons = {r["op"]: r for r in model.report.to_dict()["host_ops"]}
    for op in ("relax.nn.conv2d", "relax.nn.max_pool2d"):
        assert reasons[op]["reason"] == "dynamic_shape"
        assert "symbolic batch" in reasons[op]["detail"]
    x = np.random.default_rng(3).standard_normal((2, 8, 6, 10)).astype("float32")
    got = _single(model(x))
    assert got.shape == (2, 16, 3, 5)
    np.testing.assert_allclose(got, _plain(SYMBOLIC_SPATIAL, weights, x), rtol=1e-4, atol=1e-4)


def _conv_partition(text: str, weights: dict):
    partitioned = partition_for_bmlib(import_relay(parse(text), weights))
    names = [n for n in offloaded_partitions(partitioned) if "conv2d" in n]
    assert names
    return partitioned[names[0]], names[0]


def _loops(func: tvm.tirx.PrimFunc) -> list:
    """The loops around every block of ``func``."""
    sch = s_tir.Schedule(func.without_attr("global_symbol"))
    return [sch.get(loop) for block in sch.get_child_blocks(sch.get_sblock("root"))
            for loop in sch.get_loops(block)]


def test_schedule_parallelizes_over_the_batch_and_vectorizes_static_axes():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 16, 8, 8), float32], %w: Tensor[(32, 16, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]))
}
"""
    func, name = _conv_partition(text, _weights(text))
    prim, record = lower_partition(func, name)
    assert not record.unscheduled
    batch = prim.params[0].shape[0]
    assert isinstance(batch, tvm.tirx.Var)
    loops = _loops(prim)
    uses_batch = lambda e: any(v.same_as(batch) for v in tvm.tirx.analysis.undefined_vars(e))  # noqa: E731
    parallel = [lp for lp in loops if lp.kind == tvm.tirx.ForKind.PARALLEL]
    vectorized = [lp for lp in loops if lp.kind == tvm.tirx.ForKind.VECTORIZED]
    assert parallel and all(uses_batch(lp.extent) for lp in parallel)
    assert vectorized and all(isinstance(lp.extent, tvm.tirx.IntImm) for lp in vectorized)


def test_register_template_refuses_an_unknown_symbolic_dims_value():
    with pytest.raises(ValueError, match="symbolic_dims"):
        register_template("relax.nn.conv2d", symbolic_dims="spatial")


def test_convert_of_a_symbolic_batch_model_succeeds_and_says_how_it_checked(tmp_path, capfd):
    from bmlib_relax.convert import convert

    model = tmp_path / "model.relay"
    model.write_text(NHWC_BLOCK)
    params = tmp_path / "params.npz"
    np.savez(params, **_weights(NHWC_BLOCK, seed=1))
    result = convert(model, tmp_path / "out", params=params, check=True)
    report = result.report
    assert report["partitions"] and result.check_passed, report["check"]
    assert isinstance(report["inputs"][0]["shape"][0], str)
    assert any("symbolic dims" in w and "x" in w for w in report["warnings"])
    assert report["outputs"][0]["shape"] == [1, 1, 1, 16]  # checked at batch 1
    loaded = bmlib_relax.load(result.files["model.so"])
    # TVM's "Scope Saving:" / "Scope Loaded:" log line per dynamically sized allocation
    # (export, load) is not passed on.
    assert "Warning: Scope" not in capfd.readouterr().err
    x = np.random.default_rng(4).standard_normal((3, 12, 12, 4)).astype("float32")
    np.testing.assert_allclose(_single(loaded(x)), _plain(NHWC_BLOCK, _weights(NHWC_BLOCK, 1), x),
                               rtol=1e-4, atol=1e-4)


def test_bench_times_unpinned_and_pinned_builds_call_by_call():
    from bmlib_relax.bench.harness import ModelResult, render, time_interleaved

    calls = []
    timings, ratios = time_interleaved({"bmlib": lambda: calls.append("a"),
                                        "bmlib_unpinned": lambda: calls.append("b")},
                                       min_seconds=0.0, min_runs=4)
    assert calls[:2] == ["a", "b"] and calls[2:] == ["a", "b"] * 4  # warm-up, then pairs
    assert len(ratios) == 4 and timings["bmlib"].runs == timings["bmlib_unpinned"].runs == 4
    result = ModelResult("resnet50_tf", 1, 1, {"bmlib": 1.0, "bmlib_unpinned": 2.0}, timings,
                         {"unpinned_vs_pinned": 0.0}, ratios)
    assert "unpinned/pinned median of pair ratios" in render([result], 1.0, "", {})
