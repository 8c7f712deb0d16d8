"""A fully offloaded model runs without exporting its library first.

With every op on bmlib there is no host TIR function; TVM 0.27 then builds the host
module as an empty C source module, and a "c" module makes ``Executable.jit()``
export the whole library (every weight serialised, compiled and linked by the system
compiler, read back) before the VM can run it.  ``compile`` keeps the host module
LLVM instead (one empty PrimFunc), so the executable is runnable as it is.
"""
from __future__ import annotations

import numpy as np
import tvm

import bmlib_relax
from bmlib_relax.compiler import HOST_ANCHOR

FULLY_OFFLOADED = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w: Tensor[(8, 8, 3, 3), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]))
}"""


def _kinds(module) -> list[str]:
    kinds = [module.kind]
    for sub in module.imports:
        kinds += _kinds(sub)
    return kinds


def test_fully_offloaded_model_has_no_c_module_to_export(monkeypatch):
    w = np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype("float32")
    model = bmlib_relax.compile(FULLY_OFFLOADED, {"w": w})
    assert model.report.ops_host == {} or not sum(model.report.ops_host.values())
    assert "c" not in _kinds(model.executable.mod), _kinds(model.executable.mod)
    assert any(m.implements_function(HOST_ANCHOR) for m in model.executable.mod.imports)
    # runnable as built: jit() must not go through export_library
    monkeypatch.setattr(tvm.runtime.Executable, "export_library",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("exported")))
    model.executable._jitted_mod = None
    assert model.executable.jit() is not None
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype("float32")
    got = model(x)
    assert got.shape == (1, 8, 6, 6) and np.all(got >= 0)


def test_models_with_host_ops_run_too():
    text = """#[version = "0.0.5"]
def @main(%i: Tensor[(4, 6), int32], %x: Tensor[(4, 6), float32]) {
  (bitwise_not(%i), nn.relu(%x))
}"""
    model = bmlib_relax.compile(text)
    assert sum(model.report.ops_host.values())  # bitwise_not has no template
    assert "c" not in _kinds(model.executable.mod)
    i = np.arange(24, dtype="int32").reshape(4, 6)
    x = np.linspace(-1, 1, 24, dtype="float32").reshape(4, 6)
    inverted, relu = model(i, x)
    np.testing.assert_array_equal(inverted, ~i)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
