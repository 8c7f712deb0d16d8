"""The tvm.relay builder API: graphs built in Python, typed, printed, compiled."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.importer import supported_ops
from bmlib_relax.relay import analysis, ast


def small_convnet():
    data = relay.var("data", shape=(1, 3, 8, 8))
    weight = relay.var("weight", shape=(4, 3, 3, 3))
    bias = relay.var("bias", shape=(4,))
    y = relay.nn.conv2d(data, weight, padding=(1, 1), channels=4, kernel_size=(3, 3))
    y = relay.nn.relu(relay.nn.bias_add(y, bias))
    y = relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = relay.nn.batch_flatten(y) * relay.const(0.5)
    return relay.Function(analysis.free_vars(y), y)


def numpy_convnet(x, w, b):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 8, 8), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 8, j:j + 8], w[:, :, i, j])
    out = np.maximum(out + b.reshape(1, 4, 1, 1), 0)
    out = out.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5))
    return (out.reshape(1, -1) * 0.5).astype(np.float32)


def test_builder_graph_compiles_and_matches_numpy():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    mod = relay.IRModule.from_expr(small_convnet())
    model = bmlib_relax.compile(mod, {"weight": w, "bias": b})
    assert model.report.to_dict()["partitions"], "nothing offloaded"
    np.testing.assert_allclose(model(x), numpy_convnet(x, w, b), rtol=1e-5, atol=1e-5)


def test_infer_type_annotates_every_node():
    mod = relay.transform.InferType()(relay.IRModule.from_expr(small_convnet()))
    func = mod["main"]
    assert func.body.checked_type == relay.TensorType((1, 64), "float32")
    assert func.checked_type.ret == relay.TensorType((1, 64), "float32")
    conv = func.body.args[0].args[0].args[0].args[0].args[0]
    assert conv.op.name == "nn.conv2d"
    assert conv.checked_type == relay.TensorType((1, 4, 8, 8), "float32")


def test_checked_type_before_inference_is_a_clear_error():
    with pytest.raises(ValueError, match="run relay.transform.InferType"):
        _ = relay.var("x", shape=(1,)).checked_type


def test_built_module_prints_and_reparses():
    mod = relay.IRModule.from_expr(small_convnet())
    text = mod.astext()
    assert "nn.conv2d(%data, %weight, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3])" in text
    assert analysis.structural_equal(relay.parse(text), mod)


@pytest.mark.parametrize("name", ["xé", "é", "输入", "x\u00b2"])
def test_non_ascii_names_print_as_names_the_parser_reads(name):
    """Relay identifiers are ASCII (v0.19's tokenizer ``IsIdent``): the printer renames
    the rest instead of printing text its own parser refuses."""
    x = relay.var(name, shape=(2,))
    mod = relay.IRModule.from_expr(relay.Function([x], relay.negative(x)))
    assert analysis.structural_equal(relay.parse(mod.astext()), mod)


def test_tuple_results_and_positional_attributes():
    x = relay.var("x", shape=(2, 6))
    parts = relay.split(x, 3, axis=1)
    assert len(parts) == 3 and parts[2].index == 2
    bn = relay.nn.batch_norm(x, *(relay.var(n, shape=(6,)) for n in "gbmv"), 1, 1e-3)
    assert bn[0].tuple_value.attrs["epsilon"] == 1e-3
    r = relay.reshape(x, [3, -1])
    assert r.attrs["newshape"] == (3, -1)
    assert isinstance(relay.nn.dropout(x), ast.TupleGetItem)
    cat = relay.concatenate([x, x], axis=0)
    assert isinstance(cat.args[0], relay.Tuple) and cat.attrs["axis"] == 0


def test_signatures_follow_relay():
    params = list(inspect.signature(relay.nn.conv2d).parameters)
    assert params[:4] == ["data", "weight", "strides", "padding"]
    assert list(inspect.signature(relay.nn.dense).parameters) == ["data", "weight", "units",
                                                                  "out_dtype"]


def test_every_importable_op_has_a_builder():
    # a dyn.* op is made by the static op's builder when a shape / size is an expression
    built = set(relay.op.registered_ops().values()) | set(relay.op.DYNAMIC_FORMS)
    missing = [name for name in supported_ops() if name not in built]
    assert missing == [], f"ops without a builder function: {missing}"
    for path in relay.op.registered_ops():  # each listed builder function exists
        namespace, _, short = path.rpartition(".")
        module = {"": relay, "nn": relay.nn, "image": relay.image,
                  "vision": relay.vision, "qnn": relay.qnn.op}[namespace]
        assert callable(getattr(module, short)), path


def test_operators_on_expressions():
    x = relay.var("x", shape=(3,))
    y = 2.0 * x - x / 4
    assert y.op.name == "subtract" and y.args[0].op.name == "multiply"
    assert (-x).op.name == "negative"


def test_python_defaults_that_differ_from_the_text_format_are_recorded():
    """relay.nn.batch_matmul defaults to transpose_b=True in Python but False in text."""
    a, b = relay.var("a", shape=(2, 3, 4)), relay.var("b", shape=(2, 5, 4))
    call = relay.nn.batch_matmul(a, b)
    assert call.attrs["transpose_b"] is True
    assert relay.nn.leaky_relu(a).attrs["alpha"] == 0.01
    rng = np.random.default_rng(1)
    xa, xb = rng.standard_normal((2, 3, 4), "float32"), rng.standard_normal((2, 5, 4), "float32")
    mod = relay.IRModule.from_expr(relay.Function([a, b], call))
    out = bmlib_relax.compile(relay.parse(mod.astext()))(xa, xb)
    np.testing.assert_allclose(out, xa @ xb.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_inferred_types_print_like_relay():
    """After InferType the body prints exactly as a real Relay printed the seed golden."""
    from conftest import DATA

    golden = (DATA / "seed_reshape_conv2d_add_bn_relu" / "model.relay").read_text()
    mod = relay.transform.InferType()(relay.parse(golden))
    printed = mod.astext().splitlines()
    assert printed[2:9] == golden.splitlines()[2:9]
    assert printed[1].endswith(") -> Tensor[(1, 128, 12, 40), float32] {")


@pytest.mark.parametrize("value, dtype, expected", [
    (1.5, None, "float32"), (3, None, "int32"), (True, None, "bool"),
    (np.array([1.0, 2.0]), None, "float32"),  # numpy float64: narrowed as Relay did
    (np.arange(3), None, "int32"),            # numpy int64 too
    (np.array([1, 2], "int8"), None, "int8"),
    (np.array([1.0]), "float64", "float64"), (np.arange(3), "int64", "int64"),
    ([1, 2], None, "int32"),
    # numpy scalars (np.float64 subclasses float): np.array() of them, then narrowed
    (np.float64(0.1), None, "float32"), (np.int64(5), None, "int32"),
    (np.float32(0.5), None, "float32"), (np.float16(1.5), None, "float16"),
    (np.bool_(True), None, "bool"), (np.float64(0.1), "float64", "float64")])
def test_const_dtype_follows_relay(value, dtype, expected):
    """relay.const without a dtype narrows float64 -> float32 and int64 -> int32, for
    Python numbers and numpy arrays alike (TVM v0.19's python/tvm/relay/expr.py)."""
    assert str(relay.const(value, dtype).data.dtype) == expected


@pytest.mark.parametrize("value, dtype, says", [
    (2**40, None, "past int32"), (np.array([0, 2**40]), None, "past int32"),
    (-2**31 - 1, None, "past int32"), (2**70, None, "past int32"),
    (2**40, "int32", "out of bounds"), (float("nan"), "int32", "NaN"),
    (1, "bogus", "not understood")])
def test_const_a_value_its_dtype_cannot_hold_is_an_error_naming_it(value, dtype, says):
    """Relay's const wrapped an int64 past int32 silently when it narrowed it (2**40 ->
    0); numpy's own errors named neither the call nor the value.  Both are a
    ConversionError naming relay.const and the value; the edges of int32 still fit."""
    with pytest.raises(bmlib_relax.ConversionError, match="relay.const") as caught:
        relay.const(value, dtype)
    assert says in str(caught.value)
    assert relay.const(2**31 - 1).data.dtype == np.int32
    assert relay.const(-2**31).data == -2**31
    assert relay.const(2**40, "int64").data == 2**40


def test_str_of_a_type_is_its_relay_text():
    """str() of a Relay type gave its text (legacy checks compare or log it); repr()
    keeps the fields; a tuple type nested thousands deep prints a placeholder, not a
    RecursionError."""
    assert str(relay.TensorType((2, 3), "float32")) == "Tensor[(2, 3), float32]"
    assert str(relay.TensorType((1, relay.Any()), "int8")) == "Tensor[(1, ?), int8]"
    pair = ast.TupleType((relay.TensorType((2,), "float32"), ast.TupleType(())))
    assert str(pair) == "(Tensor[(2), float32], ())"
    assert repr(pair).startswith("TupleType(fields=")
    x = relay.var("x", shape=(2, 3))
    mod = relay.transform.InferType()(relay.IRModule.from_expr(
        relay.Function([x], relay.sum(x, axis=[1]))))
    assert str(mod["main"].body.checked_type) == "Tensor[(2), float32]"
    deep = x
    for _ in range(3000):
        deep = relay.Tuple([deep])
    mod = relay.transform.InferType()(relay.IRModule.from_expr(relay.Function([x], deep)))
    assert "nested too deeply" in str(mod["main"].body.checked_type)
