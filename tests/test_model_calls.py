"""Calling a compiled or loaded model: what inputs it takes and how it binds them.

Relay identifies variables by identity, so two inputs may share a name (the
builder API allows ``relay.var("a")`` twice); binding by name used to feed the
same array to both (``a - b`` returned ``[0, 0]``).
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import ParamError

from conftest import offloaded_partitions

A = np.array([1, 2], "float32")
B = np.array([10, 20], "float32")


@pytest.fixture(scope="module")
def same_name_model():
    a = relay.var("a", shape=(2,), dtype="float32")
    b = relay.var("a", shape=(2,), dtype="float32")
    model = bmlib_relax.compile(relay.Function([a, b], relay.subtract(a, b)))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model


@pytest.fixture(scope="module")
def scalar_model():
    s = relay.var("s", shape=(), dtype="float32")
    t = relay.var("t", shape=(3,), dtype="float32")
    return bmlib_relax.compile(relay.Function([s, t], relay.multiply(t, s)))


def test_importer_keeps_two_inputs_with_the_same_name_distinct(same_name_model):
    first, second = same_name_model.relax_module["main"].params
    assert first.name == second.name == "a"
    assert not first.same_as(second)
    assert [s["name"] for s in same_name_model.input_specs] == ["a", "a"]


def test_same_name_inputs_bind_positionally(same_name_model):
    np.testing.assert_array_equal(same_name_model(A, B), [-9, -18])
    np.testing.assert_array_equal(same_name_model(B, A), [9, 18])


def test_ambiguous_keyword_raises_naming_it(same_name_model):
    with pytest.raises(ParamError, match="'a' is ambiguous.*positionally"):
        same_name_model(a=A)
    with pytest.raises(ParamError, match="'a' is ambiguous"):
        same_name_model(A, a=B)


def test_artifact_signature_keeps_same_name_inputs_apart(same_name_model, tmp_path):
    same_name_model.export_library(tmp_path / "m.so")
    loaded = bmlib_relax.load(tmp_path / "m.so")
    assert [s["name"] for s in loaded.input_specs] == ["a", "a"]
    np.testing.assert_array_equal(loaded(A, B), [-9, -18])
    with pytest.raises(ParamError, match="ambiguous"):
        loaded(a=A)


def test_weight_for_a_shared_name_is_ambiguous():
    a = relay.var("a", shape=(2,), dtype="float32")
    b = relay.var("a", shape=(2,), dtype="float32")
    with pytest.raises(ParamError, match="weight 'a' is ambiguous"):
        bmlib_relax.compile(relay.Function([a, b], relay.subtract(a, b)), {"a": A})


def test_tvm_tensor_input_is_accepted(same_name_model):
    got = same_name_model(tvm.runtime.tensor(A), tvm.runtime.tensor(B))
    np.testing.assert_array_equal(got, [-9, -18])


def test_nested_list_input_takes_the_declared_dtype(same_name_model):
    np.testing.assert_array_equal(same_name_model([1, 2], [10, 20]), [-9, -18])


def test_float_list_for_an_integer_input_is_refused(tmp_path):
    i = relay.var("i", shape=(2,), dtype="int32")
    model = bmlib_relax.compile(relay.Function([i], relay.add(i, i)))
    np.testing.assert_array_equal(model([1, 2]), [2, 4])
    with pytest.raises(ParamError, match="float64 values given for a int32 input"):
        model([1.5, 2.0])


def test_a_list_is_never_wrapped_or_overflowed_into_the_input_dtype():
    # numpy's same-kind casts wrap 300 to 44 in int8 and turn 1e300 into inf in float32.
    i = relay.var("i", shape=(3,), dtype="int8")
    f = relay.var("f", shape=(2,), dtype="float32")
    model = bmlib_relax.compile(relay.Function([i, f], relay.Tuple([i, f])))
    out = model([1, -2, 127], [0.5, 1e30])
    np.testing.assert_array_equal(out[0], np.array([1, -2, 127], "int8"))
    with pytest.raises(ParamError, match="input 'i'.*int64 values given for a int8 input"):
        model([300, 1, 2], [0.5, 1.0])
    with pytest.raises(ParamError, match="input 'f'.*would change"):
        model([1, 2, 3], [1e300, 1.0])


def test_ragged_list_is_a_param_error(same_name_model):
    with pytest.raises(ParamError, match="input 'a'.*ragged"):
        same_name_model([[1, 2], [3]], B)


def test_object_array_is_a_param_error(same_name_model):
    with pytest.raises(ParamError, match="Python objects"):
        same_name_model(np.array([1, "x"], dtype=object), B)


def test_wrong_shape_is_a_param_error(same_name_model):
    with pytest.raises(ParamError, match="expected shape"):
        same_name_model(np.zeros(3, "float32"), B)


def test_scalar_inputs_work(scalar_model):
    assert scalar_model.input_specs[0]["shape"] == []
    t = np.array([1, 2, 3], "float32")
    np.testing.assert_array_equal(scalar_model(np.float32(2), t), [2, 4, 6])
    np.testing.assert_array_equal(scalar_model(np.array(3, "float32"), t), [3, 6, 9])
    np.testing.assert_array_equal(scalar_model(s=0.5, t=[2, 4, 6]), [1, 2, 3])
    np.testing.assert_array_equal(scalar_model(tvm.runtime.tensor(np.array(2, "float32")), t),
                                  [2, 4, 6])


def test_scalar_input_of_wrong_rank_is_a_param_error(scalar_model):
    with pytest.raises(ParamError, match="input 's'"):
        scalar_model(np.array([2], "float32"), np.ones(3, "float32"))


def test_a_tuple_typed_input_takes_nested_tuples_as_relay_vm_did():
    # %t: ((A, B), C) is built as inputs t.0.0, t.0.1, t.1; Relay's VM took the nesting
    text = """#[version = "0.0.5"]
def @main(%t: ((Tensor[(?, 4), float32], Tensor[(?, 4), float32]), Tensor[(?, 4), float32]),
          %y: Tensor[(?, 4), float32]) {
  %0 = %t.0; %1 = %0.1; %2 = %t.1; %3 = multiply(%1, %2); add(%3, %y)
}"""
    model = bmlib_relax.compile(text)
    assert [s["name"] for s in model.input_specs] == ["t.0.0", "t.0.1", "t.1", "y"]
    a, b, c, y = (np.full((3, 4), v, "float32") for v in (1, 2, 3, 4))
    want = b * c + y
    np.testing.assert_array_equal(model([[a, b], c], y), want)
    np.testing.assert_array_equal(model(t=((a, b), c), y=y), want)
    np.testing.assert_array_equal(model(a, b, c, y), want)  # the flat inputs, as before
    with pytest.raises(ParamError, match=r"input 't' is a tuple of 3 tensor\(s\) .*got 2"):
        model([a, b], y)


CALLEE_DECLARES_STATIC = '''#[version = "0.0.5"]
def @f(%a: Tensor[(3, 4), float32]) -> Tensor[(3, 4), float32] {
  nn.relu(%a)
}
def @main(%x: Tensor[(?, 4), float32]) {
  @f(%x)
}'''


def test_a_callee_given_another_shape_is_named_as_the_callee_not_as_an_input():
    # @f declares 3 rows; main's run-time dim reaches it with 5.  The VM's check is
    # @f's, on @f's parameter: it was reported as "input 'a'", a name the model's
    # inputs do not have.
    model = bmlib_relax.compile(CALLEE_DECLARES_STATIC, {})
    np.testing.assert_array_equal(model(x=-np.ones((3, 4), "float32")), np.zeros((3, 4)))
    with pytest.raises(bmlib_relax.errors.RunCheckError,
                       match=r"^@f: its parameter 'a' is called with a value that does not "
                             r"match its declared R\.Tensor\(\(3, 4\)"):
        model(x=np.ones((5, 4), "float32"))


def test_a_main_parameter_check_still_names_the_input():
    from bmlib_relax.runtime import _vm_shape_error

    text = ("Check failed: input_shape[i] == reg (5 vs. 3) : ErrorContext(fn=main, "
            "loc=param[0], param=x, annotation=R.Tensor((n * 2, 4), dtype=\"float32\"))  "
            "match_cast error,  shape[0] mismatch to specified constant.")
    error = _vm_shape_error(RuntimeError(text))
    assert isinstance(error, ParamError)
    assert str(error).startswith("input 'x' does not match R.Tensor((n * 2, 4)")
    assert _vm_shape_error(RuntimeError("something else")) is None
