"""Every golden compiled with bmlib offload matches the Relay build, in both partition modes.

Each case first checks that something was really offloaded (a ``Codegen="bmlib"``
partition exists and the report counts offloaded ops), so a silent fallback to
the host cannot pass.  A case listed in ``HOST_ONLY`` (none today: ``take``, once
host-only, has a bmlib template) asserts instead that its op stayed on the host.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.relay import ast
from bmlib_relax.relay.analysis import post_order_list
from bmlib_relax.relay.rewrite import substitute

from conftest import DATA, Golden, offloaded_partitions, parse_golden, restore_printed_scalars

CASES = sorted(p.name for p in DATA.iterdir() if (p / "manifest.json").exists())
HOST_ONLY: dict[str, str] = {}  # case -> the Relax op with no bmlib template
# Cases of views only: unmerged, each would be a partition copying its tensor, so they
# stay on the host; merged (and with $BMLIB_HOST_VIEWS=0) bmlib's templates run them.
VIEWS_ONLY = {"op_batch_flatten", "op_expand_squeeze", "op_reshape_special"}
MODES = {"default": False, "merge": True}
FLOP_FLOOR = {"resnet18": 0.9, "mobilenet": 0.9, "transformer_block": 0.9}

_compiled: dict[tuple[str, bool], bmlib_relax.CompiledModel] = {}


def _module(golden: Golden) -> ast.IRModule:
    """The golden's Relay module, with the value ``op_take``'s text lost filled back in.

    ``op_take`` printed ``meta[relay.Constant][0]`` (its expected rows are input rows,
    which gives the indices back).  ``op_split``'s boxed ``indices_or_sections`` are
    recovered by the parser from the printed types (``parse_golden``).
    """
    module = restore_printed_scalars(golden.name, parse_golden(golden))
    func, mapping = module["main"], {}
    for node in post_order_list(func):
        if isinstance(node, ast.Constant) and node.data is None:
            (data,) = golden.inputs().values()
            rows = [int(np.flatnonzero((data == row).all(axis=1))[0])
                    for row in golden.expected()[0]]
            mapping[node] = ast.Constant(np.array(rows, "int32"), span=node.span)
    return ast.IRModule({"main": substitute(func, mapping)}) if mapping else module


def compiled(case: str, merge: bool) -> bmlib_relax.CompiledModel:
    """Compile each (golden, mode) once per session; several tests share the big models."""
    key = (case, merge)
    if key not in _compiled:
        golden = Golden(DATA / case)
        _compiled[key] = bmlib_relax.compile(_module(golden), golden.params(), merge=merge)
    return _compiled[key]


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", CASES)
def test_golden_offloaded_matches_relay_build(case, mode):
    golden = Golden(DATA / case)
    model = compiled(case, MODES[mode])
    report = model.report.to_dict()
    if case in HOST_ONLY:
        assert HOST_ONLY[case] in report["ops_host"]
    elif case in VIEWS_ONLY and mode == "default":
        assert not offloaded_partitions(model.relax_module)
        assert {h["reason"] for h in report["host_ops"]} == {"view_on_host"}
    else:
        assert offloaded_partitions(model.relax_module), f"{case}: nothing offloaded"
        assert model.report.num_offloaded > 0
    out = model(**golden.inputs())
    outs = list(out) if isinstance(out, tuple) else [out]
    expected = golden.expected()
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **golden.tolerance)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", sorted(FLOP_FLOOR))
def test_models_put_their_flops_on_bmlib(case, mode):
    report = compiled(case, MODES[mode]).report
    data = report.to_dict()
    assert data["flops_total"] > 0
    assert data["flops_offloaded"] / data["flops_total"] >= FLOP_FLOOR[case], str(report)
    # Merging changes the partitions, not the work.
    assert data["flops_total"] == compiled(case, not MODES[mode]).report.flops_total


@pytest.mark.parametrize("case", ["resnet18"])
def test_merged_partition_schedules_every_block(case):
    """Merged partitions (#15): the residual adds read two convolutions in one
    partition; no conv rule may be rolled back there (it was: 4 blocks)."""
    model = compiled(case, True)
    assert offloaded_partitions(model.relax_module)
    assert len(model.report.partitions) < len(compiled(case, False).report.partitions)
    unscheduled = [(p.name, p.unscheduled) for p in model.report.partitions if p.unscheduled]
    assert unscheduled == []
    golden = Golden(DATA / case)
    np.testing.assert_allclose(model(**golden.inputs()), golden.expected()[0],
                               **golden.tolerance)


# QNN goldens (issue #18): the quantized convolutions / dense run inside bmlib partitions.
QNN_COMPOSITES = {
    "qnn_conv2d_requantize": {"bmlib.qnn_conv2d_requantize"},
    "qnn_conv2d_depthwise": {"bmlib.qnn_conv2d_requantize"},
    "qnn_conv2d_per_channel_int8_out": {"bmlib.qnn_conv2d_requantize"},
    "qnn_mobilenet_tiny": {"bmlib.qnn_conv2d_requantize"},
    "qnn_dense_requantize": {"bmlib.qnn_dense_requantize"},
    "qnn_add_mul_concat": {"bmlib.qnn_add", "bmlib.qnn_mul", "bmlib.qnn_concatenate"},
    "qnn_requantize_rounding": {"bmlib.qnn_requantize"},
}


@pytest.mark.parametrize("case", sorted(QNN_COMPOSITES))
def test_qnn_goldens_offload_their_quantized_ops(case):
    report = compiled(case, False).report.to_dict()
    composites = {c for p in report["partitions"] for c in p["composites"]}
    assert QNN_COMPOSITES[case] <= composites, composites
    # No integer conv/matmul or requantize arithmetic is left on the host.
    for op in ("relax.nn.conv2d", "relax.matmul", "relax.right_shift", "relax.left_shift"):
        assert op not in report["ops_host"], report["ops_host"]
