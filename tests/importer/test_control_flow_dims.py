"""Dims of ``if`` and loop results that are partly known only at run time, and the
type check of globals ``@main`` never calls.

v0.19's ``VisitExpr_(IfNode)`` (src/relay/transforms/type_infer.cc) typed an ``if`` as
its branches' types unified (type_solver.cc ``UnifyDim``: ``?`` with anything is ``?``,
equal dims stay): ``if (%c) { %x } else { concatenate((%x, %x)) }`` with
``%x: Tensor[(?, 3)]`` is ``Tensor[(?, 3)]``, and a loop annotated ``-> Tensor[(?, 3)]``
returns that type, so the ops after them run.  Every such program here is compiled with
``bmlib_relax.compile`` and checked against numpy, for each branch and several row
counts.

v0.19's parser ended with ``InferType`` over the whole module (src/relay/parser/parser.cc,
``ParseModule``: ``return infer_type(mod)``): a global ``@main`` never calls was
type-checked too, and an undefined global or an unknown op was an error.  Those are
refused here as well; what this project's type inference cannot type (ADT ``match``,
references) is no error.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax import UnsupportedOpError
from bmlib_relax.errors import RelayTypeError
from bmlib_relax.relay import parse

from conftest import offloaded_partitions

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(2207)


def _compile(text: str, params=None):
    return bmlib_relax.compile(parse(HEADER + text, "dims.relay"), params)


def _run(model, *args):
    out = model._vm["main"](*[tvm.runtime.tensor(np.asarray(a)) for a in args])
    return _numpy(out)


def _numpy(out):
    if hasattr(out, "numpy"):
        return out.numpy()
    return tuple(_numpy(o) for o in out)


def _rows(n, cols=3):
    return RNG.standard_normal((n, cols)).astype("float32")


def _relu(x):
    return np.maximum(x, 0)


# ---------------------------------------------------------------------- if: (?, 3) results
# %0 = if (%c) { %x } else { concatenate((%x, %x), axis=0) }: (?, 3) either way.
IF_ROWS = """
def @main(%x: Tensor[(?, 3), float32], %w: Tensor[(4, 3), float32], %c: bool) {
  %0 = if (%c) { %x } else { concatenate((%x, %x), axis=0) };
  TAIL
}
"""


def _if_rows(x, c):
    return x if c else np.concatenate([x, x], axis=0)


W43 = RNG.standard_normal((4, 3)).astype("float32")
IF_TAILS = {
    "nn.relu(%0)": _relu,
    "add(%0, 1f)": lambda y: y + 1,
    "sum(%0, axis=[0])": lambda y: y.sum(axis=0),
    "mean(%0)": lambda y: np.asarray(y.mean(), "float32"),
    "multiply(%0, %0)": lambda y: y * y,
}


@pytest.mark.parametrize("tail", sorted(IF_TAILS))
def test_an_op_on_an_if_of_run_time_rows_runs(tail):
    model = _compile(IF_ROWS.replace("TAIL", tail), {"w": W43})
    for n in (1, 2, 5):
        for c in (True, False):
            x = _rows(n)
            np.testing.assert_allclose(_run(model, x, c), IF_TAILS[tail](_if_rows(x, c)),
                                       rtol=1e-5, atol=1e-5)


def test_a_dense_on_an_if_of_run_time_rows_is_offloaded():
    text = IF_ROWS.replace("TAIL", "%1 = nn.dense(%0, %w, units=4);\n  nn.relu(%1)")
    model = _compile(text, {"w": W43})
    assert offloaded_partitions(model.relax_module), "the dense after the if not offloaded"
    for n in (1, 3):
        for c in (True, False):
            x = _rows(n)
            np.testing.assert_allclose(_run(model, x, c), _relu(_if_rows(x, c) @ W43.T),
                                       rtol=1e-5, atol=1e-5)


def test_an_if_of_a_static_and_a_run_time_branch_keeps_the_static_dim():
    # (2, 3) and (?, 3) unify to (?, 3) (UnifyDim: Any with 2 is Any)
    text = """
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(?, 3), float32], %c: bool) {
  %0 = if (%c) { %x } else { %y };
  %1 = nn.relu(%0);
  sum(%1, axis=[0])
}
"""
    model = _compile(text)
    x, y = _rows(2), _rows(5)
    np.testing.assert_allclose(_run(model, x, y, True), _relu(x).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(model, x, y, False), _relu(y).sum(0), rtol=1e-5, atol=1e-5)


def test_an_if_of_tuples_of_run_time_rows():
    text = """
def @main(%x: Tensor[(?, 3), float32], %c: bool) {
  %0 = if (%c) {
    (%x, concatenate((%x, %x), axis=0))
  } else {
    (concatenate((%x, %x, %x), axis=0), %x)
  };
  %1 = nn.relu(%0.0);
  %2 = sum(%0.1, axis=[0]);
  (%1, add(%2, 1f))
}
"""
    model = _compile(text)
    for n in (1, 4):
        x = _rows(n)
        for c in (True, False):
            a, b = (x, np.concatenate([x, x])) if c else (np.concatenate([x, x, x]), x)
            got = _run(model, x, c)
            np.testing.assert_allclose(got[0], _relu(a), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[1], b.sum(0) + 1, rtol=1e-5, atol=1e-5)


def test_nested_ifs_of_run_time_rows():
    text = """
def @main(%x: Tensor[(?, 3), float32], %c1: bool, %c2: bool) {
  %0 = if (%c1) {
    if (%c2) { %x } else { concatenate((%x, %x), axis=0) }
  } else {
    %1 = nn.relu(%x);
    concatenate((%1, %x, %x), axis=0)
  };
  %2 = add(%0, 2f);
  sum(%2, axis=[0])
}
"""
    model = _compile(text)
    for n in (1, 3):
        x = _rows(n)
        for c1 in (True, False):
            for c2 in (True, False):
                if c1:
                    y = x if c2 else np.concatenate([x, x])
                else:
                    y = np.concatenate([_relu(x), x, x])
                np.testing.assert_allclose(_run(model, x, c1, c2), (y + 2).sum(0),
                                           rtol=1e-5, atol=1e-5)


def test_an_op_on_an_if_inside_a_global_called_by_main():
    text = """
def @pick(%x: Tensor[(?, 3), float32], %c: bool) {
  if (%c) { %x } else { concatenate((%x, %x), axis=0) }
}
def @main(%x: Tensor[(?, 3), float32], %c: bool) {
  %0 = @pick(%x, %c);
  %1 = nn.relu(%0);
  sum(%1, axis=[0])
}
"""
    model = _compile(text)
    for n in (2, 3):
        x = _rows(n)
        for c in (True, False):
            np.testing.assert_allclose(_run(model, x, c), _relu(_if_rows(x, c)).sum(0),
                                       rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- loops: (?, 3) state
# v0.19's test_any.py loop shape: the carried tensor grows by a row per iteration.
LOOP_ROWS = """
def @main(%x: Tensor[(1, 3), float32], %n: int32) {
  let %f = fn (%i: int32, %acc: Tensor[(?, 3), float32]) -> Tensor[(?, 3), float32] {
    if (less(%i, %n)) {
      %f(add(%i, 1), concatenate((%acc, %x), axis=0))
    } else { %acc }
  };
  %0 = %f(0, %x);
  TAIL
}
"""


def _loop_rows(x, n):
    return np.concatenate([x] * (max(n, 0) + 1), axis=0)


LOOP_TAILS = {
    "nn.relu(%0)": _relu,
    "sum(%0, axis=[0])": lambda y: y.sum(axis=0),
    "add(%0, %0)": lambda y: y + y,
}


@pytest.mark.parametrize("tail", sorted(LOOP_TAILS))
def test_an_op_on_a_loop_result_of_run_time_rows_runs(tail):
    model = _compile(LOOP_ROWS.replace("TAIL", tail))
    x = np.array([[1, -1, 2]], "float32")
    for n in (0, 1, 3):
        np.testing.assert_allclose(_run(model, x, np.array(n, "int32")),
                                   LOOP_TAILS[tail](_loop_rows(x, n)), rtol=1e-5, atol=1e-5)


def test_a_dense_on_a_loop_result_is_offloaded():
    text = LOOP_ROWS.replace("%x: Tensor[(1, 3), float32], %n: int32",
                             "%x: Tensor[(1, 3), float32], %n: int32, "
                             "%w: Tensor[(4, 3), float32]")
    text = text.replace("TAIL", "%1 = nn.dense(%0, %w, units=4);\n  nn.relu(%1)")
    model = _compile(text, {"w": W43})
    assert offloaded_partitions(model.relax_module), "the dense after the loop not offloaded"
    x = _rows(1)
    for n in (0, 2):
        np.testing.assert_allclose(_run(model, x, np.array(n, "int32")),
                                   _relu(_loop_rows(x, n) @ W43.T), rtol=1e-5, atol=1e-5)


def test_a_loop_growing_from_a_run_time_input_it_also_captures():
    # %acc starts as %x (?, 3) and grows by %x each call: `?` is a dim of its own (Relay's
    # Any), not %x's, or the second call would be refused.
    text = """
def @main(%x: Tensor[(?, 3), float32], %n: int32) {
  let %f = fn (%i: int32, %acc: Tensor[(?, 3), float32]) -> Tensor[(?, 3), float32] {
    if (less(%i, %n)) {
      %f(add(%i, 1), concatenate((%acc, %x), axis=0))
    } else { %acc }
  };
  %0 = %f(0, %x);
  mean(%0, axis=[0])
}
"""
    model = _compile(text)
    for rows in (1, 2):
        x = _rows(rows)
        for n in (0, 1, 3):
            np.testing.assert_allclose(_run(model, x, np.array(n, "int32")),
                                       _loop_rows(x, n).mean(0), rtol=1e-5, atol=1e-5)


def test_a_call_of_a_function_chosen_by_an_if():
    # let %h = if (%c) { fn .. } else { fn .. }; %h(%x): an If of the two calls, unified.
    text = """
def @main(%x: Tensor[(?, 3), float32], %c: bool) {
  let %h = if (%c) {
    fn (%y: Tensor[(?, 3), float32]) { %y }
  } else {
    fn (%y: Tensor[(?, 3), float32]) { concatenate((%y, %y), axis=0) }
  };
  %0 = %h(%x);
  sum(nn.relu(%0), axis=[0])
}
"""
    model = _compile(text)
    x = _rows(2)
    for c in (True, False):
        np.testing.assert_allclose(_run(model, x, c), _relu(_if_rows(x, c)).sum(0),
                                   rtol=1e-5, atol=1e-5)


def test_an_op_on_an_unannotated_while_loop_result():
    # relay.loops.while_loop builds `if (cond) { %loop(...) } else { (%i, %acc) }` with no
    # return type: the result is the tuple of the loop variables' types.
    from bmlib_relax import relay

    i = relay.var("i", shape=(), dtype="int32")
    acc = relay.var("acc", shape=(relay.Any(), 3), dtype="float32")
    x = relay.var("x", shape=(1, 3), dtype="float32")
    loop = relay.loops.while_loop(
        lambda i, acc: relay.less(i, relay.const(3, "int32")), [i, acc],
        lambda i, acc: [relay.add(i, relay.const(1, "int32")),
                        relay.concatenate([relay.nn.relu(acc), x], axis=0)])
    out = relay.sum(relay.TupleGetItem(loop(relay.const(0, "int32"), x), 1), axis=[0])
    model = bmlib_relax.compile(relay.IRModule.from_expr(relay.Function([x], out)))
    a = np.array([[-1, 2, -3]], "float32")
    want = a
    for _ in range(3):
        want = np.concatenate([_relu(want), a], axis=0)
    np.testing.assert_allclose(_run(model, a), want.sum(0), rtol=1e-5, atol=1e-5)


def test_an_op_on_a_recursive_global_of_run_time_rows():
    text = """
def @grow(%i: int32, %acc: Tensor[(?, 3), float32]) -> Tensor[(?, 3), float32] {
  if (less(%i, 2)) {
    @grow(add(%i, 1), concatenate((%acc, %acc), axis=0))
  } else { %acc }
}
def @main(%x: Tensor[(?, 3), float32]) {
  %0 = @grow(0, %x);
  %1 = nn.relu(%0);
  sum(%1, axis=[0])
}
"""
    model = _compile(text)
    for n in (1, 3):
        x = _rows(n)
        want = _relu(np.concatenate([x] * 4, axis=0)).sum(0)
        np.testing.assert_allclose(_run(model, x), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- unused globals
MAIN = """
def @main(%a: Tensor[(2, 4), float32]) {
  nn.relu(%a)
}
"""

# A global @main never calls, as v0.19's parser refused it: (error, message pattern).
REFUSED_UNUSED = {
    "ill-typed return": ("""
def @unused(%x: Tensor[(2, 4), float32]) -> Tensor[(3, 3), float32] {
  nn.relu(%x)
}""", RelayTypeError, r"dims.relay:3:1: .*@unused.*declared to return"),
    "mismatched dense": ("""
def @unused(%x: Tensor[(2, 4), float32], %w: Tensor[(5, 3), float32]) {
  nn.dense(%x, %w, units=5)
}""", RelayTypeError, r"dims.relay:4:3: nn.dense: .*@unused"),
    "undefined global": ("""
def @unused(%x: Tensor[(2, 4), float32]) {
  @nope(%x)
}""", UnsupportedOpError, r"dims.relay:4:3: reference to undefined global @nope in @unused"),
    "unknown op": ("""
def @unused(%x: Tensor[(2, 4), float32]) {
  nn.not_an_op(%x)
}""", UnsupportedOpError, r"dims.relay:4:3: nn.not_an_op in @unused"),
    "misspelt attribute": ("""
def @unused(%x: Tensor[(2, 4), float32]) {
  sum(%x, axes=[0])
}""", RelayTypeError, r"dims.relay:4:3: sum: .*@unused.*unknown attribute 'axes'"),
    "if of different branches": ("""
def @unused(%x: Tensor[(2, 4), float32], %c: bool) {
  if (%c) { %x } else { transpose(%x) }
}""", RelayTypeError, r"dims.relay:4:3: .*@unused.*branches have different types"),
}


@pytest.mark.parametrize("name", sorted(REFUSED_UNUSED))
def test_an_ill_typed_global_main_never_calls_is_refused(name):
    text, error, pattern = REFUSED_UNUSED[name]
    with pytest.raises(error, match=pattern):
        _compile(text + MAIN)


# What this project's type inference cannot type (or v0.19 typed): accepted, not imported.
ACCEPTED_UNUSED = {
    "well typed": """
def @unused(%x: Tensor[(2, 4), float32]) -> Tensor[(2, 4), float32] {
  nn.relu(%x)
}""",
    "adt match": """
type List[A] {
  Cons(A, List[A]),
  Nil,
}
def @unused(%l: List[Tensor[(2, 4), float32]]) -> Tensor[(2, 4), float32] {
  match (%l) {
    Cons(%h, _) => %h,
    Nil => zeros(shape=[2, 4], dtype="float32"),
  }
}""",
    "refs": """
def @unused(%x: Tensor[(2, 4), float32]) {
  %0 = ref(%x);
  ref_read(%0)
}""",
    "higher order": """
def @unused(%f: fn (Tensor[(2, 4), float32]) -> Tensor[(2, 4), float32],
            %x: Tensor[(2, 4), float32]) {
  %f(%f(%x))
}""",
    "polymorphic": """
def @unused[A](%x: A) -> A {
  %x
}""",
    "un-annotated parameter": """
def @unused(%x) {
  nn.relu(%x)
}""",
    "let-bound loop": """
def @unused(%x: Tensor[(1, 3), float32], %n: int32) {
  let %f = fn (%i: int32, %acc: Tensor[(?, 3), float32]) -> Tensor[(?, 3), float32] {
    if (less(%i, %n)) {
      %f(add(%i, 1), concatenate((%acc, %x), axis=0))
    } else { %acc }
  };
  %f(0, %x)
}""",
    "unannotated recursion": """
def @unused(%n: int32) {
  if (equal(%n, 0)) { %n } else { @unused(subtract(%n, 1)) }
}""",
    "relay op without a converter": """
def @unused(%x: Tensor[(2, 4), float32]) {
  annotation.checkpoint(%x)
}""",
    "calls main": """
def @unused(%x: Tensor[(2, 4), float32]) {
  @main(%x)
}""",
}


@pytest.mark.parametrize("name", sorted(ACCEPTED_UNUSED))
def test_a_global_main_never_calls_is_accepted_unless_definitely_ill_typed(name):
    model = _compile(ACCEPTED_UNUSED[name] + MAIN)
    names = [gv.name_hint for gv in model.relax_module.functions]
    assert "unused" not in names  # not imported, as Relay's build ignored it
    assert offloaded_partitions(model.relax_module)
    a = RNG.standard_normal((2, 4)).astype("float32")
    np.testing.assert_allclose(_run(model, a), _relu(a), rtol=1e-6)


def test_a_loop_result_its_declared_type_contradicts_is_a_run_check_error():
    """A loop declared ``-> Tensor[(1, 2)]`` over a ``(?, 2)`` state that grows: v0.19
    unified ``?`` with 1 and returned the (4, 2) it computed; here the contradiction is
    a RunCheckError naming the result (it was TVM's raw match_cast RuntimeError)."""
    from bmlib_relax.errors import RunCheckError

    model = bmlib_relax.compile('''#[version = "0.0.5"]
def @main(%n: int32, %x: Tensor[(1, 2), float32]) {
  let %loop = fn (%i: int32, %acc: Tensor[(?, 2), float32]) -> Tensor[(1, 2), float32] {
    if (less(%i, %n)) { %loop(add(%i, 1), concatenate((%acc, %acc))) } else { %acc }
  };
  %loop(0, %x)
}''')
    np.testing.assert_array_equal(model(np.int32(0), np.ones((1, 2), "float32")), [[1, 1]])
    with pytest.raises(RunCheckError, match=r"result in this run does not match its declared "
                                            r"R.Tensor\(\(1, 2\)"):
        model(np.int32(2), np.ones((1, 2), "float32"))


def test_a_function_value_passed_to_a_loop_is_refused_by_what_it_is():
    with pytest.raises(bmlib_relax.ConversionError,
                       match=r"%f takes a function value: a loop or recursive function"):
        bmlib_relax.compile('''#[version = "0.0.5"]
def @main(%n: int32, %x: Tensor[(3), float32]) {
  let %g = fn (%a: Tensor[(3), float32]) { multiply(%a, 2f) };
  let %loop = fn (%i: int32, %f: fn (Tensor[(3), float32]) -> Tensor[(3), float32],
                  %acc: Tensor[(3), float32]) -> Tensor[(3), float32] {
    if (less(%i, %n)) { %loop(add(%i, 1), %f, %f(%acc)) } else { %acc }
  };
  %loop(0, %g, %x)
}''')
