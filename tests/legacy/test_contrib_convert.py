"""``bmlib-relax convert`` with Relay-era contrib tables: goldens end to end, and
``--partition-fn`` running a vendor's ``partition_for_<x>`` helper."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA, Golden, cli

FIXTURES = Path(__file__).parent / "fixtures"


def convert_golden(tmp_path, case, table, *extra):
    np.savez(tmp_path / "params.npz", **Golden(DATA / case).params())
    proc = cli("convert", DATA / case / "model.relay", "--params", tmp_path / "params.npz",
               "--patterns", FIXTURES / table, "--check", "-q", "-o", tmp_path / "out", *extra)
    report = json.loads((tmp_path / "out" / "report.json").read_text()) \
        if (tmp_path / "out" / "report.json").exists() else None
    return proc, report


def test_resnet18_with_the_dnnl_table(tmp_path):
    # Relay's MergeComposite(dnnl pattern_table()) on the bound ResNet-18: 8 x
    # dnnl.conv2d_bias (see test_contrib_tables.RESNET18); they are lowered by the bmlib
    # templates under the table's name, the rest stays on the host.
    proc, report = convert_golden(tmp_path, "resnet18", "dnnl_style.py")
    assert proc.returncode == 0, proc.stderr
    assert "check passed" in proc.stdout
    assert {c for p in report["partitions"] for c in p["composites"]} == {"dnnl.conv2d_bias"}
    assert report["ops_offloaded"] == {"relax.nn.conv2d": 8, "relax.add": 8}
    assert report["check"]["ok"] is True
    assert "dnnl.conv2d_bias" not in report["unmatched_patterns"]
    # the table's qnn.* entries have no Relax form: said, not hidden (conv1d and conv3d
    # have templates, so their entries stay in the table)
    (left_out,) = [w for w in report["warnings"] if "pattern(s) of the table left out" in w]
    assert "dnnl.qnn.conv2d" in left_out and "dnnl.qnn.dense" in left_out
    assert "dnnl.conv1d_bias_relu" not in left_out and "dnnl.conv3d_bias_relu" not in left_out


def test_mobilenet_with_the_tensorrt_table(tmp_path):
    # 27 conv2d + 27 batch_norm + 27 relu + pool, flatten, dense, bias_add, softmax:
    # every op of the model in a tensorrt.* composite, all on bmlib.
    proc, report = convert_golden(tmp_path, "mobilenet", "tensorrt_style.py")
    assert proc.returncode == 0, proc.stderr
    assert report["check"]["ok"] is True and report["ops_host"] == {}
    assert {c for p in report["partitions"] for c in p["composites"]} == {
        "tensorrt.nn.conv2d", "tensorrt.nn.batch_norm", "tensorrt.nn.relu",
        "tensorrt.nn.global_avg_pool2d", "tensorrt.nn.batch_flatten", "tensorrt.nn.dense",
        "tensorrt.nn.bias_add", "tensorrt.nn.softmax"}
    offloaded = report["ops_offloaded"]
    assert (offloaded["relax.nn.conv2d"], offloaded["relax.nn.batch_norm"],
            offloaded["relax.nn.relu"]) == (27, 27, 27)


SMALL = """#[version = "0.0.5"]
def @main(%data: Tensor[(1, 3, 8, 8), float32], %w1: Tensor[(8, 3, 3, 3), float32],
          %b1: Tensor[(8), float32], %w2: Tensor[(8, 8, 1, 1), float32],
          %g: Tensor[(8), float32], %be: Tensor[(8), float32], %m: Tensor[(8), float32],
          %v: Tensor[(8), float32]) {
  %0 = nn.conv2d(%data, %w1, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b1);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2, padding=[0, 0, 0, 0], channels=8, kernel_size=[1, 1]);
  %4 = nn.batch_norm(%3, %g, %be, %m, %v);
  nn.relu(%4.0)
}
"""


TWO_DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 16), float32], %w: Tensor[(8, 16), float32], %b: Tensor[(8), float32],
          %w2: Tensor[(8, 8), float32], %b2: Tensor[(8), float32]) {
  %0 = nn.dense(%x, %w, units=8);
  %1 = nn.bias_add(%0, %b, axis=-1);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2, units=8);
  nn.bias_add(%3, %b2, axis=-1)
}
"""


def test_partition_fn_rewrites_a_bias_add_above_a_rewritten_one(tmp_path):
    """CanonicalizeOps rebuilt the second dense over the first bias_add's rewrite without
    its type and then refused the second bias_add ("needs types: run InferType()",
    right after InferType): ResNet-18 and the mlp golden failed the same way."""
    rng = np.random.default_rng(1)
    (tmp_path / "model.relay").write_text(TWO_DENSE)
    np.savez(tmp_path / "params.npz", **{
        name: rng.standard_normal(shape).astype("float32")
        for name, shape in {"w": (8, 16), "b": (8,), "w2": (8, 8), "b2": (8,)}.items()})
    proc = cli("convert", tmp_path / "model.relay", "--params", tmp_path / "params.npz",
               "--patterns", FIXTURES / "dnnl_style.py", "--partition-fn", "partition_for_dnnl",
               "--check", "-q", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["check"]["ok"] is True


@pytest.fixture
def small_model(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "model.relay").write_text(SMALL)
    np.savez(tmp_path / "params.npz",
             w1=rng.standard_normal((8, 3, 3, 3)).astype("float32"),
             b1=rng.standard_normal(8).astype("float32"),
             w2=rng.standard_normal((8, 8, 1, 1)).astype("float32"),
             g=(rng.random(8) + 0.5).astype("float32"),
             be=rng.standard_normal(8).astype("float32"),
             m=rng.standard_normal(8).astype("float32"),
             v=(rng.random(8) + 0.5).astype("float32"))
    return tmp_path


def test_partition_fn_runs_the_helpers_passes(small_model):
    """partition_for_dnnl: CanonicalizeOps turns bias_add into add(expand_dims(b)),
    FoldConstant folds it to a (8, 1, 1) constant, so dnnl.conv2d_bias_relu matches the
    first conv; SimplifyInference turns the batch_norm into multiply/add, which no dnnl
    composite covers: AnnotateTarget offloads those ops singly (target.dnnl), and
    MergeCompilerRegions puts everything in one region.  --check compares with the model
    as given, so the rewrites themselves are checked too."""
    proc = cli("convert", small_model / "model.relay", "--params", small_model / "params.npz",
               "--patterns", FIXTURES / "dnnl_style.py", "--partition-fn", "partition_for_dnnl",
               "--check", "-q", "-o", small_model / "out")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((small_model / "out" / "report.json").read_text())
    assert report["check"]["ok"] is True and report["ops_host"] == {}
    (partition,) = report["partitions"]
    assert partition["composites"] == ["dnnl.conv2d_bias_relu", "dnnl.annotated.nn.conv2d",
                                       "dnnl.annotated.multiply", "dnnl.annotated.add",
                                       "dnnl.annotated.nn.relu"]


def test_partition_fn_with_an_unsupported_pass_names_it(small_model):
    proc = cli("convert", small_model / "model.relay", "--params", small_model / "params.npz",
               "--patterns", FIXTURES / "dnnl_style.py", "--partition-fn",
               "partition_for_dnnl_v019", "-q", "-o", small_model / "out")
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert "dnnl_style.py:" in first and "partition_for_dnnl_v019()" in first
    assert "relay.transform.FoldScaleAxis has no faithful equivalent" in first


def test_partition_fn_that_does_not_exist_lists_the_others(small_model):
    proc = cli("convert", small_model / "model.relay", "--params", small_model / "params.npz",
               "--patterns", FIXTURES / "dnnl_style.py", "--partition-fn", "partition_for_x",
               "-q", "-o", small_model / "out")
    assert proc.returncode == 2
    assert "no function 'partition_for_x'" in proc.stderr
    assert "partition_for_dnnl, partition_for_dnnl_v019" in proc.stderr
