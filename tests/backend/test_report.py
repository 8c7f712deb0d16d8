"""The offload report: FLOP counts per op, per partition and per model, table and JSON."""
from __future__ import annotations

import json

import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.flops import count_flops
from bmlib_relax.report import build_report

from helpers import make_module, run_offloaded

R = relax.op


def _conv_dense(x, w, g, b, m, v, fc):
    conv = R.nn.conv2d(x, w, strides=2, padding=1, groups=2)              # (1, 8, 5, 5)
    bn = relax.TupleGetItem(R.nn.batch_norm(conv, g, b, m, v, axis=1, training=False), 0)
    flat = R.reshape(R.nn.relu(bn), (1, 200))
    return R.cumsum(R.matmul(flat, R.permute_dims(fc, [1, 0])), axis=1)  # cumsum: host


CONV_FLOPS = 2 * 1 * 8 * 5 * 5 * (4 // 2) * 3 * 3
BN_FLOPS, RELU_FLOPS = 2 * 200, 200
DENSE_FLOPS = 2 * 1 * 10 * 200
CUMSUM_FLOPS = 10  # one add per output element


@pytest.fixture(scope="module", params=[False, True], ids=["default", "merge"])
def report(request):
    mod, arrays = make_module(_conv_dense, [(1, 4, 10, 10)],
                              [(8, 2, 3, 3), (8,), (8,), (8,), (8,), (10, 200)])
    partitioned = partition_for_bmlib(mod, merge=request.param)
    _, records = run_offloaded(partitioned, arrays)
    return build_report(partitioned, records)


def test_flops_follow_the_op_formulas(report, request):
    merged = request.node.callspec.params["report"]
    data = report.to_dict()
    assert data["flops_offloaded"] == CONV_FLOPS + BN_FLOPS + RELU_FLOPS + DENSE_FLOPS
    assert data["flops_total"] == data["flops_offloaded"] + CUMSUM_FLOPS
    assert sum(p["flops"] * p["calls"] for p in data["partitions"]) == data["flops_offloaded"]
    # unmerged, the flattening reshape alone would be a copy: a view on the host
    assert data["ops_host"] == ({"relax.cumsum": 1} if merged else
                                {"relax.cumsum": 1, "relax.reshape": 1})
    json.dumps(data)  # JSON-ready


def test_table_shows_partitions_flops_and_host_ops(report):
    text = str(report)
    assert text.splitlines()[1].startswith("FLOPs: ")
    assert f"({100 * report.offloaded_fraction:.1f} %)" in text
    assert "bmlib.conv2d_bn_relu" in text and "ops on host: cumsum x1" in text
    assert all(len(line) < 200 for line in text.splitlines()[:3])


def test_unknown_ops_count_zero():
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    normalize = relax.BlockBuilder().normalize  # gives the calls their types
    assert count_flops(normalize(R.permute_dims(x))) == 0
    assert count_flops(normalize(R.add(x, x))) == 6
