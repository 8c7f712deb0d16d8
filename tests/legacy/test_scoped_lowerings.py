"""Lowerings supplied to one compile/convert call do not outlive it.

``--lowerings`` and ``compile(..., lowerings=...)`` used to stay registered for
the whole process, so a later plain ``compile()`` silently lowered with them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.cli import EXAMPLE_DIR
from bmlib_relax.convert import convert
from bmlib_relax.errors import ParamError
from bmlib_relax.examples import seed
from bmlib_relax.legacy import load_legacy_module
from bmlib_relax.legacy.lowerings import (get_legacy_lowering, lowering_scope,
                                          register_legacy_lowering, register_lower_map,
                                          unregister_legacy_lowering)

NAME = seed.COMPOSITE_NAME
EXAMPLE = Path(EXAMPLE_DIR)


def _example_lowering():
    return load_legacy_module(EXAMPLE / "bmlib_lowerings.py")._LOWER_MAP[NAME]


def _counting(calls: list):
    original = _example_lowering()

    def counted(call, inputs):
        calls.append(call.op.name)
        return original(call, inputs)

    return counted


def _compile(**kwargs):
    return bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params(),
                               patterns=[(NAME, seed.pattern_all_wildcards())], **kwargs)


def _check_output(model):
    data = seed.seed_input()
    np.testing.assert_allclose(model(data), seed.numpy_reference(data, seed.seed_params()),
                               rtol=1e-5, atol=1e-5)


def test_compile_lowerings_apply_to_that_call_only():
    calls: list = []
    model = _compile(lowerings={NAME: _counting(calls)})
    assert calls == ["nn.relu"]
    _check_output(model)
    assert get_legacy_lowering(NAME) is None
    plain = _compile()
    assert calls == ["nn.relu"]  # the later compile lowered with the templates
    assert plain.report.partitions[0].ops  # ... and something was offloaded
    _check_output(plain)


def test_convert_lowerings_file_applies_to_that_conversion_only(tmp_path):
    calls_log = tmp_path / "calls.txt"
    lowerings = tmp_path / "counting_lowerings.py"
    lowerings.write_text(
        "from bmlib_relax.legacy import load_legacy_module\n"
        f"_original = load_legacy_module({str(EXAMPLE / 'bmlib_lowerings.py')!r})"
        f"._LOWER_MAP[{NAME!r}]\n"
        "def _counted(call, inputs):\n"
        f"    with open({str(calls_log)!r}, 'a') as log:\n"
        "        log.write('call\\n')\n"
        "    return _original(call, inputs)\n"
        f"_LOWER_MAP = {{{NAME!r}: _counted}}\n")
    result = convert(str(EXAMPLE / "model.relay"), str(tmp_path / "out"),
                     params=str(EXAMPLE / "params.npz"),
                     patterns_path=str(EXAMPLE / "bmlib_patterns_wildcard.py"),
                     lowerings_path=str(lowerings))
    assert result.report["partitions"]
    assert calls_log.read_text().count("call") == 1
    assert get_legacy_lowering(NAME) is None
    _compile()
    assert calls_log.read_text().count("call") == 1


def test_explicit_registration_stays_global():
    calls: list = []
    register_legacy_lowering(NAME, _counting(calls), override=True)
    try:
        _compile()
        _compile()
        assert calls == ["nn.relu", "nn.relu"]
    finally:
        unregister_legacy_lowering(NAME)


def test_scoped_lowering_wins_over_global_and_register_lower_map_is_scoped():
    def first(call, inputs):
        return "global"

    def second(call, inputs):
        return "scoped"

    register_legacy_lowering(NAME, first, override=True)
    try:
        with lowering_scope():
            register_lower_map({NAME: second})
            assert get_legacy_lowering(NAME) is second
        assert get_legacy_lowering(NAME) is first
    finally:
        unregister_legacy_lowering(NAME)


def test_bad_lowerings_argument_is_a_param_error():
    with pytest.raises(ParamError, match=f"legacy lowering for composite {NAME!r} is not callable"):
        _compile(lowerings={NAME: "not a function"})
    with pytest.raises(ParamError, match="lowerings must map composite names"):
        _compile(lowerings=[NAME])
