"""Relay's types on the builder: symbolic dims and ``relay.Any()``, inference of
un-annotated variables, type errors naming the call, and the smaller API pieces
(``relay.ty``, ``Expr.astype``, ``Function.with_attr``, ``f(x)``, ``stack`` of a
let-bound tuple, float16 ``erf``)."""
import numpy as np
import pytest
import scipy.special
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import BmlibError, ConversionError, RelayTypeError
from bmlib_relax.relay.testing import run_infer_type
from conftest import offloaded_partitions


# ---------------------------------------------------------------------- symbolic dims, Any
def test_symbolic_dims_infer_in_the_users_vars():
    n, t = te.var("n"), te.var("t")
    x = relay.var("x", shape=(n, t, 100))
    y = relay.var("y", shape=(n, t, 100))
    assert run_infer_type(relay.concatenate((x, y), axis=2)).checked_type == \
        relay.TensorType((n, t, 200))
    # Relax says t * 2; Relay said t + t: equal as types, and different from t.
    cat = run_infer_type(relay.concatenate((x, y), axis=1)).checked_type
    assert cat == relay.TensorType((n, t + t, 100))
    assert cat != relay.TensorType((n, t, 100))
    assert run_infer_type(relay.expand_dims(x, axis=2)).checked_type == \
        relay.TensorType((n, t, 1, 100))


def test_any_dims_print_as_question_marks_and_stay_dynamic():
    x = relay.var("x", relay.TensorType((relay.Any(), 3)))
    assert x.type_annotation == relay.TensorType((relay.Any(), 3))
    text = run_infer_type(relay.exp(x)).astext()
    assert "Tensor[(?, 3), float32]" in text and "ty=Tensor[(?, 3), float32]" in text
    dense = run_infer_type(relay.nn.dense(relay.var("d", shape=(4, 2)),
                                          relay.var("w", relay.TensorType((relay.Any(), 2)))))
    assert dense.checked_type == relay.TensorType((4, relay.Any()))
    assert dense.type_args[0] == relay.TensorType((4, 2))  # recorded as Relay did


def test_symbolic_and_any_programs_compile_and_run():
    n = te.var("n")
    x = relay.var("x", shape=(n, 3))
    y = relay.var("y", relay.TensorType((relay.Any(), 3)))
    func = relay.Function([x, y], relay.Tuple([relay.nn.relu(x), relay.exp(y) + 1.0]))
    model = bmlib_relax.compile(func)
    relu, out = model(np.array([[-1, 2, 3]] * 5, "float32"), np.zeros((2, 3), "float32"))
    assert relu.shape == (5, 3) and relu.min() == 0
    np.testing.assert_allclose(out, np.full((2, 3), 2.0))


# ---------------------------------------------------------------------- inference from uses
def test_unannotated_weights_are_inferred_from_their_use():
    n = te.var("n")
    x = relay.var("x", shape=(n, 10, 8, 8))
    w = relay.var("w")
    conv = run_infer_type(relay.nn.conv2d(x, w, kernel_size=(3, 3), padding=(1, 1), channels=2))
    assert conv.checked_type == relay.TensorType((n, 2, 8, 8))
    assert conv.args[1].checked_type == relay.TensorType((2, 10, 3, 3))
    bias = relay.var("bias", dtype="float16")
    data = relay.var("data", shape=(10, 2, 3, 4), dtype="float16")
    assert run_infer_type(relay.nn.bias_add(data, bias)).args[1].checked_type == \
        relay.TensorType((2,), "float16")
    dense = run_infer_type(relay.nn.dense(relay.var("d", shape=(4, 5)), relay.var("wd"),
                                          units=3))
    assert dense.args[1].checked_type == relay.TensorType((3, 5))
    tconv = run_infer_type(relay.nn.conv2d_transpose(
        relay.var("t", shape=(1, 4, 5, 5)), relay.var("wt"), channels=6, kernel_size=(3, 3)))
    assert tconv.args[1].checked_type == relay.TensorType((4, 6, 3, 3))



LET_CHAIN = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  let %a = nn.relu(%x);
  let %t = (%a, %x);
  let %d = nn.dropout(%a, rate=0.5f);
  let %b = %d.0;
  let %c = %t.1;
  let %n = 1f;
  add(add(%b, %c), %n)
}
"""


def test_unannotated_let_variables_take_their_values_types():
    # Relay typed ``let %v = value`` from value; uses of %v in tuples, projections and
    # calls came before this was done and were "cannot be inferred: annotate it".
    main = relay.transform.InferType()(relay.parse(LET_CHAIN))["main"]
    lets = {}
    node = main.body
    while isinstance(node, relay.Let):
        lets[node.var.name_hint] = node.var.checked_type
        node = node.body
    tensor = relay.TensorType((2, 3))
    assert lets == {"a": tensor, "t": relay.TupleType([tensor, tensor]),
                    "d": relay.TupleType([tensor, tensor]), "b": tensor, "c": tensor,
                    "n": relay.TensorType(())}
    assert main.body.checked_type == tensor


def test_a_let_bound_function_types_its_parameters_from_the_call():
    text = """#[version = "0.0.5"]
def @main(%a: Tensor[(5, 7), float32], %b: Tensor[(5, 7), float32]) {
  let %f = fn (%x, %y) { add(%x, %y) };
  %0 = %f(%a, %b);
  subtract(%0, %a)
}
"""
    main = relay.transform.InferType()(relay.parse(text))["main"]
    f = main.body.var
    tensor = relay.TensorType((5, 7))
    assert f.checked_type == relay.FuncType([tensor, tensor], tensor)
    assert main.checked_type.ret_type == tensor

def test_an_if_condition_and_a_global_call_type_their_unannotated_variables():
    # v0.19 unified an ``if`` condition with Tensor[(), bool] and a global's argument with
    # its parameter type (its test_vm.py::test_multiple_ifs runs ``fn (%b)`` like this).
    b, v0, v1, v2, v3 = (relay.var(n) for n in ("b", "v0", "v1", "v2", "v3"))
    body = relay.Tuple([v2, v3])
    body = relay.Let(v3, relay.If(b, v1, v0), body)
    body = relay.Let(v2, relay.If(b, v0, v1), body)
    body = relay.Let(v1, relay.Tuple([relay.const(1)]), body)
    body = relay.Let(v0, relay.Tuple([relay.const(0)]), body)
    mod = relay.IRModule({})
    mod["main"] = relay.Function([b], body)
    run = relay.create_executor(mod=mod, kind="vm").evaluate()
    picks = [[int(f.numpy()) for f in pair] for pair in run(False)]
    assert picks == [[1], [0]]
    assert [[int(f.numpy()) for f in pair] for pair in run(True)] == [[0], [1]]

    text = """#[version = "0.0.5"]
def @double(%x: Tensor[(2), float32]) -> Tensor[(2), float32] { add(%x, %x) }
def @main(%c, %y) { if (%c) { @double(%y) } else { %y } }
"""
    main = relay.transform.InferType()(relay.parse(text))["main"]
    assert [p.checked_type for p in main.params] == [relay.TensorType((), "bool"),
                                                     relay.TensorType((2,))]
    model = bmlib_relax.compile(text)
    y = np.array([1.5, -2.0], "float32")
    np.testing.assert_array_equal(model(np.array(True), y), 2 * y)
    np.testing.assert_array_equal(model(np.array(False), y), y)
    # a type parameter fixes nothing: %y stays untyped, as the message says
    generic = """#[version = "0.0.5"]
def @id[A](%x: A) -> A { %x }
def @main(%y) { @id(%y) }
"""
    with pytest.raises(ConversionError, match=r"input %y has no type annotation"):
        bmlib_relax.compile(generic)


def test_a_variable_whose_type_nothing_determines_is_a_clear_error():
    z = relay.var("z")
    with pytest.raises(RelayTypeError, match=r"exp: the type of %z cannot be inferred"):
        run_infer_type(relay.exp(z))


# ---------------------------------------------------------------------- type errors
@pytest.mark.parametrize("build,match", [
    (lambda: relay.squeeze(relay.var("x", shape=(1, 4, 1)), axis=(1,)),
     r"squeeze: axis 1 has size 4"),
    (lambda: relay.reshape(relay.var("x", shape=(2, 3)), [7]), r"reshape: .*product"),
    (lambda: relay.concatenate([relay.var("p", shape=(2, 5)), relay.var("q", shape=(2, 3))],
                               axis=0), r"concatenate"),
    (lambda: relay.nn.bias_add(relay.const(1), relay.const(2), axis=0), r"nn.bias_add"),
])
def test_type_errors_name_the_call(build, match):
    with pytest.raises(RelayTypeError, match=match) as info:
        run_infer_type(build())
    assert isinstance(info.value, BmlibError) and info.value.op


def test_type_error_in_parsed_text_names_the_location():
    mod = relay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 4, 1), float32]) {\n'
                      '  squeeze(%x, axis=[1])\n}\n', "m.relay")
    with pytest.raises(RelayTypeError, match=r"m.relay:3:3: squeeze"):
        relay.transform.InferType()(mod)


# ---------------------------------------------------------------------- smaller API pieces
def test_ty_module_and_expression_helpers():
    assert relay.ty.TensorType is relay.TensorType and relay.ty.TupleType is relay.TupleType
    assert relay.ty.FuncType and relay.ty.TypeVar and relay.ty.IncompleteType
    assert relay.expr.const(1.0).data.dtype == "float32"
    x = relay.var("x", shape=(2, 3))
    assert x.name_hint == "x"
    cast = x.astype("int32")
    assert cast.op.name == "cast" and run_infer_type(cast).checked_type == \
        relay.TensorType((2, 3), "int32")
    assert (x < 1.0).op.name == "less" and (x >= x).op.name == "greater_equal"
    f = relay.Function([x], relay.nn.relu(x)).with_attr("Primitive", 1)
    assert f.attrs["Primitive"] == 1 and "Primitive=1" in f.astext()
    call = f(x)
    assert isinstance(call, relay.Call) and call.op is f
    assert relay.var("s", "int32").type_annotation == relay.TensorType((), "int32")


def test_let_bound_tuple_function_calls_and_fp16_erf_compile():
    a = relay.var("a", shape=(4,))
    b = relay.var("b", shape=(4,))
    h = relay.var("h", shape=(4,), dtype="float16")
    t = relay.var("t")
    stacked = relay.Let(t, relay.Tuple([a, b]), relay.stack(t, axis=0))
    v = relay.var("v", shape=(4,))
    double = relay.Function([v], v * 2.0)
    func = relay.Function([a, b, h], relay.Tuple([relay.nn.relu(a), stacked, double(b),
                                                  relay.erf(h)]))
    model = bmlib_relax.compile(func)
    assert offloaded_partitions(model.relax_module)
    a_np = np.array([-1, 0, 1, 2], "float32")
    b_np = np.array([3, 4, 5, 6], "float32")
    h_np = np.linspace(-2, 2, 4).astype("float16")
    relu, st, dbl, erf = model(a_np, b_np, h_np)
    np.testing.assert_array_equal(relu, np.maximum(a_np, 0))
    np.testing.assert_array_equal(st, np.stack([a_np, b_np]))
    np.testing.assert_array_equal(dbl, b_np * 2)
    assert erf.dtype == np.float16
    np.testing.assert_allclose(erf, scipy.special.erf(h_np.astype("float32")), rtol=1e-2)


def test_fold_constant_evaluates_constant_subgraphs():
    x = relay.var("x", shape=(2,))
    c = relay.add(relay.const(np.array([1.0, 2.0], "float32")), relay.const(3.0))
    mod = relay.transform.FoldConstant()(relay.IRModule.from_expr(
        relay.Function([x], relay.multiply(x, relay.exp(c)))))
    body = mod["main"].body
    assert body.op.name == "multiply" and isinstance(body.args[1], relay.Constant)
    np.testing.assert_allclose(body.args[1].data, np.exp([4.0, 5.0]), rtol=1e-6)
    assert body.args[0] is x  # the non-constant part is untouched


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fold_constant_divides_by_zero_as_relay_did(dtype):
    # Relay folded divide(c, 0f) to IEEE infinities; TVM's legalization inlined the 0 and
    # its constant folder stopped with "Divide by zero" (see bmlib_relax/host_legalize.py)
    x = relay.var("x", shape=(3,), dtype=dtype)
    c = relay.divide(relay.const(np.array([-2.0, 0.0, 3.0]), dtype), relay.const(0.0, dtype))
    mod = relay.transform.FoldConstant()(relay.IRModule.from_expr(
        relay.Function([x], relay.add(x, c))))
    folded = mod["main"].body.args[1]
    assert isinstance(folded, relay.Constant)
    np.testing.assert_array_equal(folded.data, np.array([-np.inf, np.nan, np.inf], dtype))
