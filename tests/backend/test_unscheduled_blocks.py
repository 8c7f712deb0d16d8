"""A schedule rule that fails is rolled back (the block stays correct) — and is
never silent: the codegen warns naming the block and the rule, and the report
counts ``unscheduled_blocks`` per partition (dict, text, markdown, JSON schema)."""
from __future__ import annotations

import json
import warnings

import jsonschema
import numpy as np
import pytest
from tvm import relax

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.schedule import UnscheduledBlockWarning
from bmlib_relax.backend.templates.registry import SCHEDULES, get_schedule_rule
from bmlib_relax.convert import REPORT_SCHEMA_PATH, render_markdown
from bmlib_relax.report import build_report

from conftest import offloaded_partitions
from helpers import make_module, run_offloaded, run_plain

R = relax.op


def _dense_relu_module():
    return make_module(lambda x, w: R.nn.relu(R.matmul(x, R.permute_dims(w, [1, 0]))),
                       [(4, 32)], [(16, 32)])


def _build(mod, arrays):
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs, records = run_offloaded(partitioned, arrays)
    report = build_report(partitioned, records)
    return outputs, report, [w for w in caught if w.category is UnscheduledBlockWarning]


@pytest.fixture
def failing_matmul_rule(monkeypatch):
    assert get_schedule_rule("bmlib.matmul") is not None

    def failing(sch, block, ctx):
        sch.parallel(sch.get_loops(block)[0])  # half-done when it fails: must be rolled back
        raise RuntimeError("this rule does not fit")

    monkeypatch.setitem(SCHEDULES._entries, "bmlib.matmul", failing)


def _report_dict(report) -> dict:
    """The partitions part of report.json, validated by the shipped schema."""
    data = report.to_dict()
    schema = json.loads(open(REPORT_SCHEMA_PATH).read())
    jsonschema.validate(data["partitions"], schema["properties"]["partitions"])
    return data


def test_scheduled_partitions_report_zero_unscheduled_blocks():
    mod, arrays = _dense_relu_module()
    _, report, caught = _build(mod, arrays)
    assert caught == []
    (part,) = _report_dict(report)["partitions"]
    assert part["unscheduled_blocks"] == 0 and part["unscheduled"] == []
    assert "unscheduled" not in str(report)


def test_failing_rule_is_counted_warned_and_still_correct(failing_matmul_rule):
    mod, arrays = _dense_relu_module()
    outputs, report, caught = _build(mod, arrays)
    np.testing.assert_allclose(outputs[0], run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)

    (warning,) = caught
    message = str(warning.message)
    (part,) = _report_dict(report)["partitions"]
    assert f"bmlib partition {part['name']!r}" in message
    assert "block 'bmlib_matmul' (rule bmlib.matmul: RuntimeError: this rule does not fit)" \
        in message
    assert part["unscheduled_blocks"] == 1
    assert part["unscheduled"] == [
        "block 'bmlib_matmul' (rule bmlib.matmul: RuntimeError: this rule does not fit)"]

    text = str(report)
    assert "unscheduled blocks: 1" in text and "block 'bmlib_matmul'" in text

    markdown = render_markdown({"model": "m.relay", "bmlib_relax_version": "x", "merge": False,
                                "inputs": [], "patterns": [], "unmatched_patterns": [],
                                "warnings": [], **report.to_dict()}, text)
    (row,) = [line for line in markdown.splitlines() if line.startswith(f"| `{part['name']}`")]
    assert row.endswith("| 1; block 'bmlib_matmul' (rule bmlib.matmul: RuntimeError: this "
                        "rule does not fit) |")


def test_tagged_block_without_a_rule_is_counted(monkeypatch):
    assert get_schedule_rule("bmlib.matmul") is not None  # the table is loaded
    monkeypatch.delitem(SCHEDULES._entries, "bmlib.matmul")
    mod, arrays = _dense_relu_module()
    outputs, report, caught = _build(mod, arrays)
    np.testing.assert_allclose(outputs[0], run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)
    assert len(caught) == 1 and "no schedule rule registered" in str(caught[0].message)
    assert report.partitions[0].unscheduled_blocks == 1
