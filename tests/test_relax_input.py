"""Relax modules in (issue #16 part 3): ``bmlib_relax.compile`` on an ONNX model imported
with TVM's own frontend, and TVM's BYOC flow with the codegen ``import bmlib_relax``
registers."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax.errors import ConversionError, ParamError

from conftest import ROOT, offloaded_partitions

onnx = pytest.importorskip("onnx")

ONNX_MODEL = textwrap.dedent("""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def small_cnn():
        '''Conv(+bias) -> Relu -> MaxPool -> Flatten -> Gemm, built with onnx.helper.'''
        rng = np.random.default_rng(0)
        weights = {"W": rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.2,
                   "B": rng.standard_normal(8).astype("float32") * 0.1,
                   "F": rng.standard_normal((10, 288)).astype("float32") * 0.05}
        nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Flatten", ["p"], ["f"]),
                 helper.make_node("Gemm", ["f", "F"], ["y"], transB=1)]
        graph = helper.make_graph(
            nodes, "small_cnn",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
            initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
""")
_namespace: dict = {}
exec(ONNX_MODEL, _namespace)
small_cnn = _namespace["small_cnn"]
X = np.random.default_rng(1).uniform(-1, 1, (1, 3, 12, 12)).astype("float32")


def plain(mod: tvm.IRModule) -> np.ndarray:
    ex = tvm.compile(mod, target="llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(X)).numpy()


def test_compile_accepts_an_onnx_relax_module():
    from tvm.relax.frontend.onnx import from_onnx

    model = small_cnn()
    onnx.checker.check_model(model)
    mod = from_onnx(model)
    compiled = bmlib_relax.compile(mod)
    assert offloaded_partitions(compiled.relax_module)
    composites = {c for p in compiled.report.partitions for c in p.composites}
    assert {"bmlib.conv2d_bias_relu", "bmlib.dense"} <= composites, composites
    np.testing.assert_allclose(compiled(x=X), plain(mod), rtol=1e-4, atol=1e-4)
    report = compiled.report.to_dict()
    assert report["signature"]["inputs"] == [{"name": "x", "shape": [1, 3, 12, 12],
                                              "dtype": "float32"}]
    assert report["signature"]["outputs"] == [{"name": "out0", "shape": [1, 10],
                                               "dtype": "float32"}]
    assert report["versions"]["apache_tvm"] == tvm.__version__ and report["target"]


def test_weights_kept_as_inputs_are_bound():
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(small_cnn(), keep_params_in_input=True)
    assert len(mod["main"].params) == 4
    compiled = bmlib_relax.compile(mod)
    assert compiled.input_names == ["x"]
    assert offloaded_partitions(compiled.relax_module)
    np.testing.assert_allclose(compiled(X), plain(from_onnx(small_cnn())), rtol=1e-4, atol=1e-4)


def test_relax_module_errors():
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(small_cnn())
    with pytest.raises(ParamError, match="'nope' are no parameter of main"):
        bmlib_relax.compile(mod, {"nope": np.zeros(1, "float32")})
    with pytest.raises(ParamError, match="input_shapes applies to Relay input"):
        bmlib_relax.compile(mod, input_shapes={"x": (1, 3, 12, 12)})
    renamed = tvm.IRModule({tvm.ir.GlobalVar("forward"): mod["main"]})
    with pytest.raises(ConversionError, match="no 'main' function"):
        bmlib_relax.compile(renamed)


@pytest.mark.parametrize("tvm_first", [False, True], ids=["bmlib-then-tvm", "tvm-then-bmlib"])
def test_relax_native_byoc_path_with_only_import_bmlib_relax(tvm_first, tmp_path):
    """partition_for_bmlib -> RunCodegen -> tvm.compile -> VirtualMachine, as documented."""
    script = ONNX_MODEL + textwrap.dedent(f"""
        import sys
        {"import tvm" if tvm_first else ""}
        import bmlib_relax
        assert {tvm_first!r} or "tvm" not in sys.modules, "import bmlib_relax must stay light"

        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx

        mod = from_onnx(small_cnn())
        partitioned = bmlib_relax.partition_for_bmlib(mod)
        assert any(f.attrs is not None and "Codegen" in f.attrs
                   for f in partitioned.functions.values()), "nothing offloaded"
        with_ext = relax.transform.RunCodegen()(partitioned)
        ex = tvm.compile(with_ext, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 12, 12)).astype("float32")
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](
            tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert "bmlib_relax.backend.codegen" in sys.modules  # the trampoline loaded it
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
