"""Goldens printed with their weights inside (#[metadata]) compile like the unbound form.

Reads ``model_bound.relay`` / ``model.params`` from ``$BMLIB_RELAY_GOLDEN`` (not vendored:
the weights are large); skipped only when the variable is unset.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.relay import load_params, parse

from conftest import DATA, Golden, offloaded_partitions, restore_printed_scalars


def _cases() -> list[str]:
    root = os.environ.get("BMLIB_RELAY_GOLDEN")
    if not root:
        return ["<BMLIB_RELAY_GOLDEN unset>"]
    return sorted(p.parent.name for p in Path(root).glob("*/model_bound.relay"))


@pytest.mark.parametrize("case", _cases())
def test_bound_text_reproduces_expected(case):
    root = os.environ.get("BMLIB_RELAY_GOLDEN")
    if not root:
        pytest.skip("BMLIB_RELAY_GOLDEN is not set")
    folder = Path(root) / case
    golden = Golden(DATA / case)
    bound = bmlib_relax.compile(restore_printed_scalars(
        case, parse((folder / "model_bound.relay").read_text(), f"{case}/model_bound.relay")))
    assert offloaded_partitions(bound.relax_module), "nothing offloaded"
    # Only the inputs remain parameters: the weights came from #[metadata].
    assert bound.input_names == [i["name"] for i in golden.manifest["inputs"]]
    unbound = bmlib_relax.compile(restore_printed_scalars(case, parse(golden.text)),
                                  load_params(folder / "model.params"))
    inputs = golden.inputs()
    got, same = bound(**inputs), unbound(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    same = same if isinstance(same, tuple) else (same,)
    for g, s, want in zip(got, same, golden.expected()):
        np.testing.assert_allclose(g, want, **golden.tolerance)
        np.testing.assert_array_equal(g, s)
