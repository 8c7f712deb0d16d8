"""Relax modules in: what ``bmlib_relax.compile`` checks before it builds one.

Dynamic dims that are expressions (``cast(H) * 2`` from an ONNX ``Resize``), weights
that disagree on a shared symbolic dim, declared ``inputs``, a data-dependent shape
(``ConstantOfShape``) and names the frontends renamed.  References come from
onnxruntime or NumPy, never from the code under test.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import bmlib_relax
from bmlib_relax.backend.patterns import static_shape
from bmlib_relax.errors import ConversionError, ParamError
from bmlib_relax.relax_input import prepare_relax_module

from conftest import offloaded_partitions


def _onnx_model(nodes, inputs, outputs, initializers=(), opset=17):
    pytest.importorskip("onnx")
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _onnxruntime(model, feeds: dict) -> list:
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)


# --------------------------------------------------------------------------- static dims
def test_a_cast_of_a_symbolic_dim_is_not_static():
    """``tir.Cast`` has a ``value`` field: ``hasattr(d, "value")`` took it for an IntImm."""
    from bmlib_relax.dims import all_static, dim_or_text, is_static_dim, static_dim, static_dims

    h = tirx.Var("H", "int64")
    cast = tirx.Cast("int64", tirx.Cast("float32", h) * 2.0)
    assert hasattr(cast, "value")  # what made the old test wrong
    for dim, text in ((h, "H"), (cast, "int(H * 2.0)"), (h * 2, "H * 2")):
        assert not is_static_dim(dim) and static_dim(dim) is None
        assert dim_or_text(dim) == text  # not TVMScript's T.Cast("int64", ...)
    assert static_dim(tirx.IntImm("int64", 7)) == 7 and static_dim(3) == 3
    assert static_dims([1, tirx.IntImm("int32", 4)]) == [1, 4]
    assert static_dims([1, cast]) is None and not all_static([1, cast])
    assert static_shape(relax.TensorType([1, 3, cast, 4], "float32")) is None
    assert static_shape(relax.TensorType([1, 3, 2, 4], "float32")) == [1, 3, 2, 4]


def test_resize_of_dynamic_height_and_width_matches_onnxruntime():
    """ONNX Resize (scales 2) of an input with dynamic H/W: output dims ``cast(H * 2.0)``.
    The pattern checks raised a raw TypeError on them; now the resize runs on the host
    and the multiply before it (whole symbolic dims) is still offloaded."""
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    float_ = TensorProto.FLOAT
    model = _onnx_model(
        [helper.make_node("Mul", ["x", "x"], ["a"]),
         helper.make_node("Resize", ["a", "", "scales"], ["r"], mode="nearest"),
         helper.make_node("Relu", ["r"], ["y"])],
        [helper.make_tensor_value_info("x", float_, [1, 2, "H", "W"])],
        [helper.make_tensor_value_info("y", float_, [1, 2, "H2", "W2"])],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], "float32"), "scales")])
    mod = from_onnx(model)
    compiled = bmlib_relax.compile(mod)
    assert offloaded_partitions(compiled.relax_module)
    rng = np.random.default_rng(0)
    for shape in [(1, 2, 3, 5), (1, 2, 4, 2)]:
        x = rng.standard_normal(shape).astype("float32")
        want = _onnxruntime(model, {"x": x})[0]
        got = compiled(x)
        assert got.shape == want.shape == (1, 2, 2 * shape[2], 2 * shape[3])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # The report shows the output dims as a reader writes them.
    out_shape = compiled.report.to_dict()["signature"]["outputs"][0]["shape"]
    assert out_shape == [1, 2, "int(2.0 * H)", "int(2.0 * W)"], out_shape
    # The BYOC entry point takes the same module (it raised the same TypeError).
    partitioned = bmlib_relax.partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)


# --------------------------------------------------------------------------- params
def _module(params: dict, body) -> tvm.IRModule:
    """``main(**params)`` returning ``body(*vars)`` (the BlockBuilder, not TVMScript,
    whose ``R.Tensor(("n", 3))`` annotations read as undefined names to pyflakes)."""
    args = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params.items()]
    builder = relax.BlockBuilder()
    with builder.function("main", args):
        with builder.dataflow():
            out = builder.emit_output(body(*args))
        builder.emit_func_output(out)
    return builder.get()


_N = tirx.Var("n", "int64")
SharedDim = _module({"x": [_N, 3], "w": [_N, 3], "v": [_N, 3]},
                    lambda x, w, v: relax.op.add(relax.op.add(x, w), v))


def _ones(*shape):
    return np.ones(shape, "float32")


@pytest.mark.parametrize("w, v", [((2, 3), (4, 3)), ((1, 3), (4, 3)), ((4, 3), (1, 3))],
                         ids=["2-vs-4", "1-vs-4", "4-vs-1"])
def test_weights_disagreeing_on_a_symbolic_dim_are_refused(w, v):
    """``w`` and ``v`` both have ``n`` rows: sizes 2 and 4 were a raw ValueError from TVM;
    1 and 4 were accepted (broadcasting hid it) with ``n`` pinned to the last one bound."""
    with pytest.raises(ParamError) as info:
        prepare_relax_module(SharedDim, {"w": _ones(*w), "v": _ones(*v)})
    text = str(info.value)
    assert "'n'" in text and "'w'" in text and "'v'" in text, text
    assert str(w[0]) in text and str(v[0]) in text, text


def test_a_symbolic_dim_inside_an_expression_is_checked_too():
    """``v`` has ``2 * n`` rows: with ``w`` binding ``n`` = 3, 6 rows fit and 5 do not."""
    n = tirx.Var("n", "int64")
    mod = _module({"x": [n, 3], "w": [n, 3], "v": [n * 2, 3]},
                  lambda x, w, v: relax.Tuple([relax.op.add(x, w), v]))
    with pytest.raises(ParamError, match=r"'v'.*n \* 2.*'w'"):
        prepare_relax_module(mod, {"w": _ones(3, 3), "v": _ones(5, 3)})
    bound = prepare_relax_module(mod, {"w": _ones(3, 3), "v": _ones(6, 3)})
    assert [p.name for p in bound["main"].params] == ["x"]


def test_weights_agreeing_on_a_symbolic_dim_pin_it():
    compiled = bmlib_relax.compile(SharedDim, {"w": _ones(4, 3), "v": _ones(4, 3) * 2})
    assert compiled.report.to_dict()["signature"]["inputs"][0]["shape"] == [4, 3]
    x = np.arange(12, dtype="float32").reshape(4, 3)
    np.testing.assert_allclose(compiled(x), x + 3)


# --------------------------------------------------------------------------- inputs
AddWeight = _module({"x": [2, 3], "w": [3, 4]},
                    lambda x, w: relax.op.nn.relu(relax.op.matmul(x, w)))


def test_declared_inputs_of_a_relax_module_are_checked_as_for_relay():
    with pytest.raises(ParamError, match=r"neither declared inputs nor given weights.*: w"):
        bmlib_relax.compile(AddWeight, inputs=["x"])
    with pytest.raises(ParamError, match=r"'nope' are not parameters of @main.*w, x"):
        bmlib_relax.compile(AddWeight, inputs=["nope"])
    with pytest.raises(ParamError, match="'w' are also given as weights"):
        bmlib_relax.compile(AddWeight, {"w": _ones(3, 4)}, inputs=["x", "w"])
    # Both unbound, both declared: fine (nothing is built here).
    mod = prepare_relax_module(AddWeight, inputs=["x", "w"])
    assert [p.name for p in mod["main"].params] == ["x", "w"]


def test_declared_inputs_with_a_weight_bound_compile():
    w = np.arange(12, dtype="float32").reshape(3, 4) - 6
    compiled = bmlib_relax.compile(AddWeight, {"w": w}, inputs=["x"])
    assert compiled.input_names == ["x"]
    assert offloaded_partitions(compiled.relax_module)
    x = np.array([[1, 0, 0], [0.5, -1, 2]], "float32")
    np.testing.assert_allclose(compiled(x), np.maximum(x @ w, 0), rtol=1e-6)


def test_declared_inputs_count_weights_the_frontend_kept_as_parameters():
    """``from_onnx(..., keep_params_in_input=True)`` attaches the weights: they are bound,
    so declaring only the real input is enough."""
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    float_ = TensorProto.FLOAT
    model = _onnx_model([helper.make_node("Add", ["x", "b"], ["y"])],
                        [helper.make_tensor_value_info("x", float_, [2, 3])],
                        [helper.make_tensor_value_info("y", float_, [2, 3])],
                        [numpy_helper.from_array(_ones(2, 3), "b")])
    mod = from_onnx(model, keep_params_in_input=True)
    assert len(mod["main"].params) == 2
    assert [p.name for p in prepare_relax_module(mod, inputs=["x"])["main"].params] == ["x"]


# --------------------------------------------------------------------------- renamed names
def _renamed_input_model():
    """An ONNX input called ``input.1`` (torch.onnx's usual name): ``from_onnx``
    sanitises it to ``input_1``."""
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    float_ = TensorProto.FLOAT
    model = _onnx_model([helper.make_node("Add", ["input.1", "b"], ["y"])],
                        [helper.make_tensor_value_info("input.1", float_, [2, 3])],
                        [helper.make_tensor_value_info("y", float_, [2, 3])],
                        [numpy_helper.from_array(_ones(2, 3), "b")])
    with pytest.warns(UserWarning, match="Renaming"):
        return from_onnx(model)


def test_a_name_the_frontend_renamed_is_pointed_at():
    mod = _renamed_input_model()
    assert [p.name for p in mod["main"].params] == ["input_1"]
    for kwargs in (dict(inputs=["input.1"]), dict(params={"input.1": _ones(2, 3)})):
        with pytest.raises(ParamError) as info:
            prepare_relax_module(mod, **kwargs)
        text = str(info.value)
        assert "'input.1'" in text and "input_1" in text and "rename" in text, text


# --------------------------------------------------------------------------- shapes
def test_constant_of_shape_with_a_shape_input_runs():
    """``ConstantOfShape(s)`` with ``s`` a model input: ``broadcast_to(c, tensor_to_shape(s))``,
    which TVM's VM codegen refused (a raw InternalError; plain tvm.compile too)."""
    from onnx import TensorProto, helper

    model = _onnx_model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5]))],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    from tvm.relax.frontend.onnx import from_onnx

    with pytest.warns(UserWarning):
        mod = from_onnx(model)
    compiled = bmlib_relax.compile(mod)
    assert "match_cast" not in mod.script()  # the caller's module is left as it was
    for shape in ([2, 3], [3, 1]):
        s = np.array(shape, "int64")
        want = _onnxruntime(model, {"s": s})[0]
        np.testing.assert_array_equal(compiled(s), want)
        np.testing.assert_array_equal(want, np.full(shape, 2.5, "float32"))


def test_a_shape_of_unknown_rank_is_refused_before_the_build():
    """A shape tensor of symbolic length ``k``: the shape's rank is unknown at compile
    time, so there is nothing to bind its dims to."""
    s = relax.Var("s", relax.TensorType([tirx.Var("k", "int64")], "int64"))
    builder = relax.BlockBuilder()
    with builder.function("main", [s]):
        with builder.dataflow():
            shape = builder.emit(relax.op.tensor_to_shape(s))
            out = builder.emit_output(relax.op.broadcast_to(relax.const(1.0), shape))
        builder.emit_func_output(out)
    mod = builder.get()
    assert mod["main"].body.blocks[0].bindings[0].var.ty.ndim == -1
    with pytest.raises(ConversionError, match=r"broadcast_to.*run-time shape.*rank"):
        bmlib_relax.compile(mod)
