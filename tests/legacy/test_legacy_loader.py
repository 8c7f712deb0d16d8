"""Legacy Relay-era Python modules load unchanged with tvm.relay redirected."""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.legacy import LegacyModuleError, load_legacy_module, load_pattern_table

LEGACY_MODEL = '''
import numpy as np
import tvm
from tvm import relay
from tvm.relay import nn as rnn
from tvm.relay.build_module import bind_params_by_name


def get_model():
    data = relay.var("data", shape=(1, 3, 8, 8))
    weight = relay.var("weight", shape=(4, 3, 3, 3))
    y = rnn.relu(relay.nn.conv2d(data, weight, padding=(1, 1)))
    func = relay.Function(relay.analysis.free_vars(y), y)
    mod = tvm.IRModule.from_expr(func)
    mod = relay.transform.InferType()(mod)
    return mod, {"weight": np.full((4, 3, 3, 3), 0.1, "float32")}
'''


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_legacy_model_script_runs_unchanged(tmp_path):
    module = load_legacy_module(write(tmp_path, "model.py", LEGACY_MODEL))
    mod, params = module.get_model()
    assert mod["main"].body.checked_type.shape == (1, 4, 8, 8)
    model = bmlib_relax.compile(mod, params)
    out = model(np.ones((1, 3, 8, 8), "float32"))
    assert out[0, 0, 4, 4] == pytest.approx(2.7, rel=1e-5)  # interior: 27 taps x 0.1
    assert model.report.to_dict()["partitions"]


def test_nothing_leaks_into_sys_modules(tmp_path):
    before = {k for k in sys.modules if k.startswith("tvm.relay")}
    load_legacy_module(write(tmp_path, "model.py", LEGACY_MODEL)).get_model()
    assert {k for k in sys.modules if k.startswith("tvm.relay")} == before
    import tvm

    assert not hasattr(tvm, "relay")


def test_register_pattern_table_decorator(tmp_path):
    path = write(tmp_path, "table.py", '''
        from tvm.relay.dataflow_pattern import is_op, wildcard
        from tvm.relay.op.contrib.register import register_pattern_table

        @register_pattern_table("bmlib")
        def my_table():
            return [("bmlib.relu", is_op("nn.relu")(wildcard()))]
    ''')
    ((name, pattern),) = load_pattern_table(path)
    assert name == "bmlib.relu" and pattern.op.name == "nn.relu"


def test_unknown_relay_submodule_is_named(tmp_path):
    path = write(tmp_path, "table.py", "from tvm.relay.testing import resnet\n")
    with pytest.raises(LegacyModuleError) as info:
        load_legacy_module(path)
    assert str(info.value).startswith(f"{path}:1: module raised ModuleNotFoundError: "
                                      "No module named 'tvm.relay.testing'")


def test_syntax_error_is_located(tmp_path):
    path = write(tmp_path, "table.py", "def pattern_table(:\n    pass\n")
    with pytest.raises(LegacyModuleError, match=rf"^{path}:1:\d+: syntax error in module"):
        load_legacy_module(path)


def test_table_without_patterns(tmp_path):
    path = write(tmp_path, "table.py", "x = 1\n")
    with pytest.raises(LegacyModuleError, match="no pattern table found"):
        load_pattern_table(path)
