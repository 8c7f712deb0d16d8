"""Type annotations that contradict the inferred types are type errors, as in v0.19.

v0.19's ``TypeInferencer`` (src/relay/transforms/type_infer.cc) *unifies* each
annotation with the inferred type: a ``let`` variable's annotation with its value's
type (``VisitExpr_(LetNode)``), a function's declared return type with its body's
(``VisitExpr_(FunctionNode)``), an ``if`` condition with ``Tensor[(), bool]`` and the
two branches with each other (``VisitExpr_(IfNode)``), a callee's parameter types with
the arguments.  The unifier (src/relay/analysis/type_solver.cc, ``UnifyDim``) lets a
``?`` dim match any dim (the result is ``?``), binds a named/symbolic dim to a static
one (the result is the static dim), and fills ``_`` with the other side's type; any
other difference (dtype, rank, two different static dims, tuple arity) is an error.

The importer (``bmlib_relax.compile``) refuses the same programs with a located
ConversionError, including a local function's declared return type and a ``let``
variable annotated with a function type, which it compiled before.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import ConversionError, RelayTypeError

from conftest import offloaded_partitions

HEADER = '#[version = "0.0.5"]\n'
X = "%x: Tensor[(2), float32]"


def _main(params: str, body: str, ret: str = "") -> str:
    arrow = f" -> {ret}" if ret else ""
    return f"{HEADER}def @main({params}){arrow} {{\n  {body}\n}}\n"


def _infer(text: str) -> relay.IRModule:
    return relay.transform.InferType()(relay.parse(text, "ann.relay"))


def _compile(text: str, params=None):
    return bmlib_relax.compile(relay.parse(text, "ann.relay"), params or {})


# Each program v0.19's InferType refused: (params, body, declared return type, message).
ILL_TYPED = [
    pytest.param(X, "negative(%x)", "Tensor[(3), int32]",
                 r"@main.*declared to return Tensor\[\(3\), int32\].*Tensor\[\(2\), float32\]",
                 id="main-ret-dtype-and-shape"),
    pytest.param(X, "negative(%x)", "Tensor[(3), float32]", r"dimension 0 conflicts: 3 .* 2",
                 id="main-ret-dim"),
    pytest.param(X, "negative(%x)", "Tensor[(2, 1), float32]", r"1 dimensions?|rank",
                 id="main-ret-rank"),
    pytest.param(X, "(%x, %x)", "(Tensor[(2), float32], Tensor[(2), int8])", r"int8",
                 id="main-ret-tuple-field"),
    pytest.param(X, "(%x, %x)", "(Tensor[(2), float32],)", r"declared to return",
                 id="main-ret-tuple-arity"),
    pytest.param(X, "let %y: Tensor[(2), int32] = negative(%x); add(%y, 1)", "",
                 r"let %y is declared Tensor\[\(2\), int32\].*Tensor\[\(2\), float32\]",
                 id="let-dtype"),
    pytest.param(X, "let %y: Tensor[(5), float32] = negative(%x); %y", "",
                 r"let %y.*dimension 0 conflicts", id="let-dim"),
    pytest.param(X, "let %t: (Tensor[(2), float32], _, Tensor[(2), int32]) = (%x, %x, %x); %t",
                 "", r"let %t is declared", id="let-tuple-with-hole"),
    pytest.param(X, "let %t: ((Tensor[(2), float32], Tensor[(3), float32]),) = ((%x, %x),); %t",
                 "", r"let %t.*dimension 0 conflicts: 3", id="let-nested-tuple"),
    pytest.param(X + ", %c: Tensor[(2), int32]", "if (%c) { %x } else { negative(%x) }", "",
                 r"condition must be Tensor\[\(\), bool\].*Tensor\[\(2\), int32\]",
                 id="if-cond-vector"),
    pytest.param(X + ", %c: int32", "if (%c) { %x } else { negative(%x) }", "",
                 r"condition must be Tensor\[\(\), bool\]", id="if-cond-int-scalar"),
    pytest.param(X + ", %c: Tensor[(1), bool]", "if (%c) { %x } else { negative(%x) }", "",
                 r"condition must be Tensor\[\(\), bool\]", id="if-cond-bool-vector"),
    pytest.param(X + ", %c: bool", 'if (%c) { %x } else { cast(%x, dtype="int32") }', "",
                 r"branches have different types", id="if-branch-dtype"),
    pytest.param(X + ", %c: bool", "if (%c) { %x } else { (%x, %x) }", "",
                 r"branches have different types", id="if-branch-tuple"),
    pytest.param(X + ", %c: bool", "if (%c) { %x } else { concatenate((%x, %x)) }", "",
                 r"branches have different types", id="if-branch-dim"),
    pytest.param(X, "%0 = fn (%p: Tensor[(2), float32]) -> Tensor[(7), int32] { negative(%p) };"
                    " %0(%x)", "", r"declared to return Tensor\[\(7\), int32\]",
                 id="local-fn-ret"),
    pytest.param(X, "let %f: fn (Tensor[(2), float32]) -> Tensor[(7), int32] = "
                    "fn (%p: Tensor[(2), float32]) { negative(%p) }; %f(%x)", "",
                 r"let %f is declared fn \(Tensor\[\(2\), float32\]\) -> Tensor\[\(7\), int32\]",
                 id="let-fn-ret"),
    pytest.param(X, "let %f: fn (Tensor[(2), int32]) -> Tensor[(2), int32] = "
                    "fn (%p: Tensor[(2), float32]) { negative(%p) }; %f(%x)", "",
                 r"let %f is declared", id="let-fn-param"),
    pytest.param(X, "let %f: fn (Tensor[(2), float32], Tensor[(2), float32]) -> "
                    "Tensor[(2), float32] = fn (%p: Tensor[(2), float32]) { negative(%p) }; "
                    "%f(%x)", "", r"let %f is declared", id="let-fn-arity"),
    pytest.param(X, "let %f: fn (Tensor[(2), float32]) -> (Tensor[(2), float32], "
                    "Tensor[(2), int8]) = fn (%p: Tensor[(2), float32]) { (%p, negative(%p)) }; "
                    "%f(%x)", "", r"let %f is declared", id="let-fn-tuple-ret"),
]


@pytest.mark.parametrize("params, body, ret, message", ILL_TYPED)
def test_infer_type_refuses_what_v019_refused(params, body, ret, message):
    with pytest.raises(RelayTypeError, match=message) as info:
        _infer(_main(params, body, ret))
    assert info.value.location and info.value.location.startswith("ann.relay:")


@pytest.mark.parametrize("params, body, ret, message", ILL_TYPED)
def test_compile_refuses_what_v019_refused(params, body, ret, message):
    with pytest.raises(ConversionError) as info:
        _compile(_main(params, body, ret))
    assert info.value.location and info.value.location.startswith("ann.relay:")


def test_let_bound_function_with_unannotated_params_checks_the_arguments():
    """``let %f: fn (Tensor[(2), int32]) -> _ = fn (%p) {...}``: %p is int32 (the
    annotation unified with the function's type), so a float32 argument is an error."""
    text = _main(X, "let %f: fn (Tensor[(2), int32]) -> Tensor[(2), int32] = "
                    "fn (%p) { negative(%p) }; %f(%x)")
    with pytest.raises(RelayTypeError):
        _infer(text)
    with pytest.raises(ConversionError, match=r"Tensor\[\(2\), int32\]"):
        _compile(text)


def test_inlined_global_checks_its_declared_return_type():
    text = (f"{HEADER}def @g(%a: Tensor[(2), float32], Inline=1) -> Tensor[(7), int32] {{\n"
            "  negative(%a)\n}\n"
            f"def @main({X}) {{\n  @g(%x)\n}}\n")
    with pytest.raises(RelayTypeError, match=r"declared to return"):
        _infer(text)
    with pytest.raises(ConversionError, match=r"Tensor\[\(7\), int32\]"):
        _compile(text)


# ------------------------------------------------------------------ what unification allows
def _let_var_type(mod: relay.IRModule) -> relay.ty.Type:
    return mod["main"].body.var.checked_type


def test_a_run_time_dim_in_an_annotation_unifies_with_a_static_one():
    """UnifyDim: Any against 2 is Any, so %y is ``Tensor[(?), float32]``."""
    mod = _infer(_main(X, "let %y: Tensor[(?), float32] = negative(%x); add(%y, 1f)"))
    assert _let_var_type(mod) == relay.TensorType((relay.Any(),), "float32")
    assert mod["main"].body.checked_type == relay.TensorType((relay.Any(),), "float32")


def test_a_named_dim_in_an_annotation_is_bound_to_the_static_one():
    """UnifyDim: a shape var against an IntImm is the IntImm."""
    mod = _infer(_main(X, "let %y: Tensor[(n), float32] = negative(%x); %y"))
    assert _let_var_type(mod) == relay.TensorType((2,), "float32")


def test_a_hole_in_an_annotation_takes_the_value_type():
    mod = _infer(_main(X, "let %t: (Tensor[(2), float32], _) = (%x, cast(%x, dtype=\"int8\"));"
                          " %t"))
    expected = relay.TupleType([relay.TensorType((2,), "float32"),
                                relay.TensorType((2,), "int8")])
    assert _let_var_type(mod) == expected
    assert mod["main"].body.checked_type == expected


def test_declared_return_type_with_a_run_time_dim_is_the_functions_return_type():
    mod = _infer(_main(X, "negative(%x)", "Tensor[(?), float32]"))
    assert mod["main"].checked_type.ret_type == relay.TensorType((relay.Any(),), "float32")
    assert mod["main"].body.checked_type == relay.TensorType((2,), "float32")


def test_if_branches_unify_and_a_bool_scalar_condition_is_accepted():
    mod = _infer(_main(X + ", %z: Tensor[(?), float32], %c: bool",
                       "if (%c) { %x } else { %z }"))
    assert mod["main"].body.checked_type == relay.TensorType((relay.Any(),), "float32")


def test_a_closure_parameter_of_a_run_time_dim_takes_a_static_argument():
    """A call unifies the argument types with the parameters': ``?`` takes ``2``."""
    mod = _infer(_main(X, "%0 = fn (%p: Tensor[(?), float32]) -> Tensor[(?), float32] "
                          "{ negative(%p) }; %0(%x)"))
    assert mod["main"].body.checked_type == relay.TensorType((relay.Any(),), "float32")


def test_a_let_bound_function_of_matching_type_infers_and_runs():
    text = _main("%x: Tensor[(2, 8), float32]",
                 "let %f: fn (Tensor[(2, 8), float32]) -> Tensor[(?, 8), float32] = "
                 "fn (%p: Tensor[(2, 8), float32]) -> Tensor[(2, 8), float32] { nn.relu(%p) };"
                 " %f(%x)")
    mod = _infer(text)
    assert mod["main"].body.checked_type == relay.TensorType((relay.Any(), 8), "float32")
    model = _compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = np.linspace(-2, 2, 16, dtype="float32").reshape(2, 8)
    np.testing.assert_allclose(model(x=x), np.maximum(x, 0))


def test_a_local_function_of_matching_declared_type_runs():
    text = _main("%x: Tensor[(2, 8), float32]",
                 "%0 = fn (%p: Tensor[(2, 8), float32]) -> Tensor[(?, 8), float32] "
                 "{ nn.relu(%p) }; %0(%x)")
    model = _compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = np.linspace(-2, 2, 16, dtype="float32").reshape(2, 8)
    np.testing.assert_allclose(model(x=x), np.maximum(x, 0))


LOOP = """let %loop: fn (int32, Tensor[(2), float32]) -> RET = fn (%i: int32, %acc: Tensor[(2), float32]) {
    if (less(%i, %n)) { %loop(add(%i, 1), negative(%acc)) } else { %acc }
  };
  %loop(0, %x)"""


def test_a_loop_takes_its_return_type_from_the_let_annotation():
    """A recursive function without a return type: its ``let`` variable's function type
    gives it (v0.19 unified the two), so the loop compiles and runs."""
    text = _main("%n: int32, " + X, LOOP.replace("RET", "Tensor[(2), float32]"))
    _infer(text)
    model = _compile(text)
    x = np.array([1.5, -2.0], "float32")
    for n in (0, 3, 4):  # n negations
        np.testing.assert_allclose(model(n=np.array(n, "int32"), x=x), x * (-1) ** n)


def test_a_loop_contradicting_the_let_annotation_is_refused():
    text = _main("%n: int32, " + X, LOOP.replace("RET", "Tensor[(2), int32]"))
    with pytest.raises(RelayTypeError):
        _infer(text)
    with pytest.raises(ConversionError) as info:
        _compile(text)
    assert info.value.location.startswith("ann.relay:")
