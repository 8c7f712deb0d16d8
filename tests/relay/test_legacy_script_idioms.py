"""Idioms of v0.19 Relay scripts, ported by swapping the import, behave as in v0.19.

* ``relay.const(array)`` and ``bind_params_by_name`` hold copies (v0.19's
  ``_nd.array(value)``): a script refilling one buffer for several layers got one
  constant per layer, here every layer saw the buffer's last contents.
* ``relay.const`` of a TVM tensor keeps its dtype (v0.19's narrowing table is keyed
  by numpy dtypes; a tensor's dtype is a string and never matched).
* ``astext()`` prints in place only v0.19's simple scalars (int16/32/64, float16/32/64,
  bool; ``support::IsSimpleScalarDtype``): an ``int8`` scalar is a metadata constant,
  whose 0-d shape survives the metadata (``np.ascontiguousarray`` made it 1-d).
* ``IRModule`` takes ``GlobalVar`` keys (``mod[gv] = f``, ``gv in mod``,
  ``IRModule({gv: f})``, ``from_expr(main, functions={gv: f})``) and dims answer
  ``.value`` as v0.19's ``IntImm`` did.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.relay import parse
from bmlib_relax.relay.params import bind_params_by_name


def test_const_holds_a_copy_of_a_refilled_buffer():
    buffer = np.empty((4, 4), "float32")
    x = relay.var("x", shape=(1, 4))
    h = x
    for scale in (2.0, 3.0, 4.0):
        buffer[:] = np.eye(4, dtype="float32") * scale
        h = relay.nn.dense(h, relay.const(buffer))
    model = bmlib_relax.compile(relay.Function([x], h))
    np.testing.assert_array_equal(model(x=np.ones((1, 4), "float32")), np.full((1, 4), 24.0))


def test_bind_params_by_name_holds_a_copy():
    x = relay.var("x", shape=(3,))
    w = relay.var("w", shape=(3,))
    func = relay.Function([x, w], relay.add(x, w))
    weights = np.ones(3, "float32")
    bound = bind_params_by_name(func, {"w": weights})
    weights[:] = 9
    got = bmlib_relax.compile(bound)(x=np.zeros(3, "float32"))
    np.testing.assert_array_equal(got, np.ones(3))


@pytest.mark.parametrize("value", [np.array([1e-300, 2.0]), np.array([2 ** 40], "int64")],
                         ids=["float64", "int64"])
def test_const_of_a_tvm_tensor_keeps_its_dtype(value):
    const = relay.const(tvm.runtime.tensor(value))
    assert const.data.dtype == value.dtype
    np.testing.assert_array_equal(const.data, value)
    # numpy values are still narrowed as v0.19 narrowed them
    assert relay.const(np.array([0.5, 2.0])).data.dtype == np.float32


@pytest.mark.parametrize("dtype", ["int8", "uint8", "uint16", "uint32", "uint64"])
def test_scalars_v019_could_not_print_in_place_go_to_the_metadata(dtype):
    x = relay.var("x", shape=(2,), dtype=dtype)
    func = relay.Function([x], relay.add(x, relay.const(np.array(5, dtype))))
    text = relay.IRModule.from_expr(func).astext()
    assert f"add(%x, meta[relay.Constant][0] /* ty={dtype} */)" in text
    back = parse(text)["main"].body.args[1]
    assert back.data.shape == () and back.data.dtype == dtype and int(back.data) == 5


@pytest.mark.parametrize("dtype, literal", [("int16", "-2i16"), ("int32", "7"),
                                            ("int64", "7i64"), ("float16", "0.5f16"),
                                            ("float32", "0.5f"), ("float64", "0.5f64")])
def test_simple_scalars_still_print_in_place(dtype, literal):
    value = -2 if dtype == "int16" else 7 if dtype.startswith("int") else 0.5
    x = relay.var("x", shape=(2,), dtype=dtype)
    func = relay.Function([x], relay.add(x, relay.const(np.array(value, dtype), dtype)))
    assert f"add(%x, {literal})" in relay.IRModule.from_expr(func).astext()


def _double():
    a = relay.var("a", shape=(2,))
    return relay.Function([a], relay.add(a, a))


def test_module_keys_may_be_global_vars():
    gv = relay.GlobalVar("double")
    x = relay.var("x", shape=(2,))
    main = relay.Function([x], relay.Call(gv, [x]))
    for mod in (relay.IRModule({gv: _double(), "main": main}),
                relay.IRModule.from_expr(main, functions={gv: _double()})):
        assert gv in mod and "@double" in mod and mod[gv] is mod["double"]
        assert mod.get_global_var("double").name_hint == "double"
        assert sorted(g.name_hint for g in mod.get_global_vars()) == ["double", "main"]
        np.testing.assert_array_equal(bmlib_relax.compile(mod)(x=np.ones(2, "float32")),
                                      [2, 2])
    mod = relay.IRModule.from_expr(main)
    mod[gv] = _double()
    assert mod["double"] is mod[gv]
    with pytest.raises(TypeError, match="named by str or GlobalVar"):
        mod[3]


def test_dims_answer_value_like_relays_int_imm():
    x = relay.var("x", shape=(2, 3))
    mod = relay.transform.InferType()(relay.IRModule.from_expr(
        relay.Function([x], relay.nn.relu(x))))
    shape = mod["main"].checked_type.ret_type.shape
    assert [d.value for d in shape] == [2, 3] and list(shape) == [2, 3]
    assert [int(d) for d in shape] == [2, 3] and repr(shape) == "(2, 3)"


def _fold(body, *params):
    mod = relay.IRModule.from_expr(relay.Function(list(params), body))
    return relay.transform.FoldConstant()(mod)["main"]


def test_fold_constant_takes_the_branch_of_a_constant_condition():
    x = relay.var("x", shape=(2,))
    folded = _fold(relay.If(relay.const(True), relay.add(x, x), relay.multiply(x, x)), x)
    assert folded.body.op.name == "add"


def test_fold_constant_folds_shape_queries_of_static_shapes_and_infers_types():
    x = relay.var("x", shape=(2, 3))
    folded = _fold(relay.Tuple([relay.shape_of(x), relay.ndarray_size(x, dtype="int64")]), x)
    shape, size = folded.body.fields
    np.testing.assert_array_equal(shape.data, [2, 3])
    assert shape.data.dtype == np.int32 and size.data.dtype == np.int64 and int(size.data) == 6
    # the module is typed again afterwards, as v0.19's function passes ended
    assert str(folded.checked_type.ret_type) == "(Tensor[(2), int32], int64)"


def test_fold_constant_leaves_qnn_ops_unless_asked():
    w = relay.const(np.array([0.5, -1.0], "float32"))
    body = relay.qnn.op.quantize(w, relay.const(0.5), relay.const(0), out_dtype="int8")
    x = relay.var("x", shape=(2,), dtype="int8")
    call = relay.add(x, body)
    kept = _fold(call, x)
    assert kept.body.args[1].op.name == "qnn.quantize"
    mod = relay.IRModule.from_expr(relay.Function([x], call))
    folded = relay.transform.FoldConstant(fold_qnn=True)(mod)["main"]
    np.testing.assert_array_equal(folded.body.args[1].data, [1, -2])


def test_str_of_an_expression_is_relay_text_without_header_or_metadata():
    """v0.19's ``str(expr)`` / ``print(expr)`` was ``PrettyPrint``: the text printer with
    no version line and no metadata section (constants as ``meta[...]`` references)."""
    x = relay.var("x", shape=(2,))
    expr = relay.nn.relu(relay.add(x, relay.const(np.ones(2, "float32"))))
    text = str(expr)
    assert not text.startswith("#[version") and "#[metadata]" not in text
    assert "free_var %x: Tensor[(2), float32];" in text
    assert "add(%x, meta[relay.Constant][0]" in text and text.rstrip().endswith("nn.relu(%0)")
    assert str(relay.Function([x], relay.nn.relu(x))).startswith("fn (%x: Tensor[(2), float32])")
    assert repr(x).startswith("Var(")  # repr keeps the fields
