"""Corpus tests: every Relay program of the shared corpus parses (or fails) as
TVM's parser did, and round-trips through the printer.

The corpus is read from ``$BMLIB_RELAY_CORPUS`` (CI: ``../shared/relay_corpus``);
the tests skip only when that variable is unset.  Nothing is copied into the repo.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import pytest

from bmlib_relax.errors import ParseError
from bmlib_relax.relay import ast as A
from bmlib_relax.relay.analysis import post_order, structural_equal
from bmlib_relax.relay.parser import parse, parse_expr
from bmlib_relax.relay.printer import astext

SEMVER = '#[version = "0.0.5"]\n'


def _corpus() -> Optional[Path]:
    value = os.environ.get("BMLIB_RELAY_CORPUS")
    return Path(value) if value else None


class Case(NamedTuple):
    name: str
    succeed: bool
    is_expr: bool
    prepend_semver: bool


def _tvm_cases() -> list[Case]:
    root = _corpus()
    if root is None:
        return []
    cases = []
    for line in (root / "tvm_tests" / "INDEX.md").read_text().splitlines():
        if not re.match(r"\| \d{3}_\S+\.relay \|", line):
            continue
        cells = [c.strip() for c in line.split("|")]
        name, expect, mode = cells[1], cells[4], cells[5]
        cases.append(Case(name, expect.startswith("succeed"), mode.startswith("parse_expr"),
                          "helper prepends" in mode))
    return cases


def _external_files() -> list[str]:
    root = _corpus()
    if root is None:
        return []
    ext = root / "external"
    return sorted(str(p.relative_to(ext)) for p in ext.rglob("*.relay"))


def _params(values: list) -> list:
    """Parametrize values, or one skipping placeholder when the corpus is unset."""
    if values:
        return values
    return [pytest.param(None, marks=pytest.mark.skip(reason="BMLIB_RELAY_CORPUS is not set"))]


def _ids(value) -> str:
    return value.name if isinstance(value, Case) else str(value)


def _stack_overflow_text(head: str) -> str:
    """316_test_stack_overflow_input holds only the head of the program; TVM's
    test_pass_plan_devices.test_stack_overflow appends a generated chain of adds.
    Mirror that generation (it is also our deep-chain regression test)."""
    end = 1555
    lines = [head.rstrip("\n")]
    for i in range(2, end):
        lines.append(f"\t%{i} = add(%{i - 1}, %{i - 2});")
    lines.append(f"\tadd(%{end - 1}, %{end - 2})")
    lines.append("\t}")
    return "\n".join(lines)


def _tvm_text(case: Case) -> str:
    text = (_corpus() / "tvm_tests" / case.name).read_text()
    if case.name.startswith("316_test_stack_overflow"):
        text = _stack_overflow_text(text)
    if case.prepend_semver:
        text = SEMVER + text
    return text


def _parse_case(case: Case):
    text = _tvm_text(case)
    return (parse_expr if case.is_expr else parse)(text, case.name)


TVM_CASES = _tvm_cases()
EXTERNAL = _external_files()


def test_corpus_index_counts():
    if _corpus() is None:
        pytest.skip("BMLIB_RELAY_CORPUS is not set")
    assert len(TVM_CASES) == 352
    assert sum(c.succeed for c in TVM_CASES) == 340
    assert len(EXTERNAL) == 29


@pytest.mark.parametrize("case", _params(TVM_CASES), ids=_ids)
def test_tvm_corpus_file(case: Case):
    if case.succeed:
        result = _parse_case(case)
        assert isinstance(result, (A.IRModule, A.Expr))
    else:
        with pytest.raises(ParseError):
            _parse_case(case)


def _roundtrip(original, is_expr: bool) -> None:
    text = astext(original)
    again = (parse_expr if is_expr else parse)(text, "<printed>")
    assert structural_equal(original, again), text[:2000]
    # Printing is deterministic and a fixed point after one round.
    assert astext(again) == text


@pytest.mark.parametrize("case", _params([c for c in TVM_CASES if c.succeed]), ids=_ids)
def test_tvm_corpus_roundtrip(case: Case):
    _roundtrip(_parse_case(case), case.is_expr)


@pytest.mark.parametrize("name", _params(EXTERNAL), ids=_ids)
def test_external_corpus_parses_and_roundtrips(name: str):
    path = _corpus() / "external" / name
    mod = parse(path.read_text(), str(path))
    assert "main" in mod
    _roundtrip(mod, False)


def test_external_meta_constants_resolved_from_metadata():
    if _corpus() is None:
        pytest.skip("BMLIB_RELAY_CORPUS is not set")
    mod = parse((_corpus() / "external" / "027_fuzz_metadata_tracne.relay").read_text())
    consts = [n for n in post_order(mod["main"])
              if isinstance(n, A.Constant) and n.meta_index is not None]
    assert consts and all(c.data is not None for c in consts)
    assert len(mod.metadata["constants"]) == 3


# ---------------------------------------------------------------------- goldens
def _golden_root() -> Optional[Path]:
    value = os.environ.get("BMLIB_RELAY_GOLDEN")
    if value:
        return Path(value)
    corpus = _corpus()
    return corpus.parent / "relay_golden" if corpus is not None else None


def _golden_cases() -> list[str]:
    root = _golden_root()
    if root is None or not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/model_bound.relay"))


@pytest.mark.parametrize("case", _params(_golden_cases()), ids=_ids)
def test_golden_bound_constants_match_params(case: str):
    tvm = pytest.importorskip("tvm")
    folder = _golden_root() / case
    mod = parse((folder / "model_bound.relay").read_text(), str(folder / "model_bound.relay"))
    consts = sorted({id(n): n for n in post_order(mod["main"])
                     if isinstance(n, A.Constant) and n.meta_index is not None}.values(),
                    key=lambda c: c.meta_index)
    assert consts, "model_bound.relay has no meta constants"
    assert all(c.data is not None for c in consts), "unresolved meta[relay.Constant]"
    raw = tvm.runtime.load_param_dict(bytearray((folder / "model.params").read_bytes()))
    params = {k: v.numpy() for k, v in raw.items()}
    manifest = json.loads((folder / "manifest.json").read_text())
    order = [p["name"] for p in manifest["params"] if p["name"] in params]
    # Constant N is the N-th bound weight in manifest order; check by value.  (QNN goldens
    # also have graph constants, per-channel scales and zero points, after the weights.)
    assert len(consts) == len(order) or (case.startswith("qnn_") and len(consts) > len(order))
    for const, name in zip(consts, order):
        expected = params[name]
        assert const.data.dtype == expected.dtype, name
        assert const.data.shape == expected.shape, name
        np.testing.assert_array_equal(const.data, expected, err_msg=name)
    # Printed with its metadata, the module reads back to the same constants.
    _roundtrip(mod, False)
