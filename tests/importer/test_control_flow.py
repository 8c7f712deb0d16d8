"""Relay control flow and modules on Relax: ``if``/``else``, calls between global
functions, recursion (recursive globals and Relay's let-bound loops), closures,
tuple parameters and ``shape_of`` -- each compiled with ``bmlib_relax.compile``,
run on the VM and checked against numpy (or Relay's semantics written out here).

The second half runs the TVM-test corpus programs with these constructs and
states, per program, whether it must run (with its expected output) or end in
a clear, located error.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError, UnsupportedOpError, import_relay
from bmlib_relax.relay import parse

from conftest import corpus_dir, offloaded_partitions

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(13)


def _compile(text: str, params=None):
    return bmlib_relax.compile(parse(HEADER + text, "cf.relay"), params)


def _run(model, *args):
    out = model._vm["main"](*[_tensor(a) for a in args])
    return _numpy(out)


def _tensor(value):
    if isinstance(value, tuple):
        return [_tensor(v) for v in value]
    return tvm.runtime.tensor(np.asarray(value))


def _numpy(out):
    if hasattr(out, "numpy"):
        return out.numpy()
    return tuple(_numpy(o) for o in out)


def _relu(x):
    return np.maximum(x, 0)


# ---------------------------------------------------------------------- if / else
IF_ELSE = """
def @main(%c: bool, %x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32]) {
  if (%c) {
    nn.relu(nn.dense(%x, %w, units=4))
  } else {
    %0 = nn.dense(%x, %w, units=4);
    multiply(%0, 2f)
  }
}
"""


def test_if_else_takes_both_branches_and_offloads_inside():
    x = RNG.standard_normal((2, 8)).astype("float32")
    w = RNG.standard_normal((4, 8)).astype("float32")
    model = _compile(IF_ELSE, {"w": w})
    # One partition per branch: patterns match inside the If's SeqExprs.
    assert len(offloaded_partitions(model.relax_module)) >= 2, "branches not offloaded"
    assert "if c:" in model.relax_module["main"].script()
    dense = x @ w.T
    np.testing.assert_allclose(_run(model, True, x), _relu(dense), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(model, False, x), dense * 2, rtol=1e-5, atol=1e-5)


def test_a_node_named_in_a_branch_and_used_after_the_if_runs_either_way():
    # As TVM's printer writes a node shared by a branch and the code after the If:
    # named inside the branch where it is printed first (see the parser).
    text = """
def @main(%c: bool, %x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32]) {
  %2 = if (%c) {
    %0 = nn.dense(%x, %w, units=4);
    %1 = nn.relu(%0);
    multiply(%1, 2f)
  } else {
    nn.dense(%x, %w, units=4)
  };
  add(%2, %0)
}
"""
    x = RNG.standard_normal((2, 8)).astype("float32")
    w = RNG.standard_normal((4, 8)).astype("float32")
    model = _compile(text, {"w": w})
    assert offloaded_partitions(model.relax_module)
    dense = x @ w.T
    np.testing.assert_allclose(_run(model, True, x), _relu(dense) * 2 + dense,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(model, False, x), dense * 2, rtol=1e-5, atol=1e-5)


def test_if_inside_a_branch_of_an_if():
    text = """
def @main(%a: bool, %b: bool, %x: Tensor[(3), float32]) {
  if (%a) {
    if (%b) { add(%x, 1f) } else { subtract(%x, 1f) }
  } else {
    negative(%x)
  }
}
"""
    model = _compile(text)
    x = np.array([1, 2, 3], "float32")
    for a, b, expected in [(True, True, x + 1), (True, False, x - 1), (False, True, -x)]:
        np.testing.assert_allclose(_run(model, a, b, x), expected)


SEVERAL_CALLS_PER_BRANCH = """
def @main(%x: Tensor[(1, LAYOUT_X), float32], %w: Tensor[(LAYOUT_W3), float32],
          %w2: Tensor[(LAYOUT_W1), float32]) {
  %c = greater(sum(%x), 0f);
  %r = if (%c) {
    %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=5, kernel_size=[3, 3]LAYOUT);
    nn.relu(%0)
  } else {
    %1 = nn.conv2d(%x, %w2, padding=[0, 0, 0, 0], channels=5, kernel_size=[1, 1]LAYOUT);
    %2 = exp(negative(%1));
    cumsum(%2, axis=1)
  };
  add(%r, 1f)
}
"""
LAYOUTS = {
    "NCHW": {"LAYOUT_X": "3, 6, 7", "LAYOUT_W3": "5, 3, 3, 3", "LAYOUT_W1": "5, 3, 1, 1",
             "LAYOUT": ""},
    "NHWC": {"LAYOUT_X": "6, 7, 3", "LAYOUT_W3": "3, 3, 3, 5", "LAYOUT_W1": "1, 1, 3, 5",
             "LAYOUT": ', data_layout="NHWC", kernel_layout="HWIO"'},
}


def _conv_reference(x, w, padding, layout):
    """conv2d (stride 1) in numpy, for either layout."""
    if layout == "NHWC":
        x, w = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), "float32")
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out.transpose(0, 2, 3, 1) if layout == "NHWC" else out


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_branches_of_several_calls_run_either_way(layout):
    """TVM 0.27's memory planner gives the branch that runs second storage that only the
    first branch allocates: with several calls in a branch that branch crashed the
    process (a segmentation fault in StorageObj::AllocTensor), in the plain build as in
    the bmlib one.  Branches of more than one binding are functions of their own now
    (importer.branches); each direction runs, before and after the other."""
    text = SEVERAL_CALLS_PER_BRANCH
    for key, value in LAYOUTS[layout].items():
        text = text.replace(key, value)
    shapes = {"w": tuple(int(d) for d in LAYOUTS[layout]["LAYOUT_W3"].split(", ")),
              "w2": tuple(int(d) for d in LAYOUTS[layout]["LAYOUT_W1"].split(", "))}
    params = {k: RNG.standard_normal(v).astype("float32") for k, v in shapes.items()}
    x = np.abs(RNG.standard_normal((1,) + tuple(
        int(d) for d in LAYOUTS[layout]["LAYOUT_X"].split(", ")))).astype("float32")
    then_ref = _relu(_conv_reference(x, params["w"], 1, layout)) + 1
    else_ref = np.cumsum(np.exp(-_conv_reference(-x, params["w2"], 0, layout)), axis=1) + 1
    model = _compile(text, params)
    assert offloaded_partitions(model.relax_module)
    plain = relax.VirtualMachine(
        tvm.compile(import_relay(parse(HEADER + text), params), target="llvm"), tvm.cpu())
    for run in (lambda v: model(v), lambda v: plain["main"](tvm.runtime.tensor(v)).numpy()):
        for _ in range(2):  # else after then, then after else
            np.testing.assert_allclose(run(-x), else_ref, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(run(x), then_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dim", ["?", "n"])
def test_if_over_a_symbolic_dim(dim):
    """A branch's scope takes its function's parameters, so the dims they define stay
    defined in the branch: the If's result keeps ``(n, 6)`` (it was erased to ``ndim=2``
    and the import was ill-formed: "Var gv2 is not defined" at build)."""
    text = f"""
def @main(%c: bool, %x: Tensor[({dim}, 6), float32]) {{
  %0 = if (%c) {{ nn.relu(%x) }} else {{ %1 = sigmoid(%x); multiply(%1, 2f) }};
  (%0, add(%0, 1f))
}}
"""
    mod = import_relay(parse(HEADER + text))
    relax.analysis.well_formed(mod)  # raises on an ill-formed module (TVM 0.27)
    assert "(n, 6)" in mod["main"].script().replace("d0", "n")
    model = _compile(text)
    for rows in (1, 3):
        x = RNG.standard_normal((rows, 6)).astype("float32")
        first, second = _run(model, True, x)
        np.testing.assert_allclose(first, _relu(x), rtol=1e-6)
        first, second = _run(model, False, x)
        np.testing.assert_allclose(second, 2 / (1 + np.exp(-x)) + 1, rtol=1e-5)


# ---------------------------------------------------------------------- global calls
GLOBAL_CALLS = """
def @layer(%x: Tensor[(2, 8), float32], %w: Tensor[(8, 8), float32]) -> Tensor[(2, 8), float32] {
  nn.relu(nn.dense(%x, %w, units=8))
}
def @twice(%x: Tensor[(2, 8), float32], %w: Tensor[(8, 8), float32]) -> Tensor[(2, 8), float32] {
  @layer(@layer(%x, %w), %w)
}
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(8, 8), float32]) {
  add(@twice(%x, %w), @layer(%x, %w))
}
"""


def test_main_calls_helpers_that_call_helpers():
    x = RNG.standard_normal((2, 8)).astype("float32")
    w = RNG.standard_normal((8, 8)).astype("float32")
    model = _compile(GLOBAL_CALLS, {"w": w})
    assert offloaded_partitions(model.relax_module), "nothing offloaded"
    # @layer and @twice are Relax global functions (not inlined); the dense is offloaded
    # inside @layer, which runs three times per inference.
    assert _plain_functions(model.relax_module) == ["layer", "main", "twice"]
    assert model.report.functions["layer"]["partitions"]
    assert model.report.functions["layer"]["runs"] == 3

    def layer(v):
        return _relu(v @ w.T)

    np.testing.assert_allclose(_run(model, x), layer(layer(x)) + layer(x), rtol=1e-4,
                               atol=1e-4)


# ---------------------------------------------------------------------- recursion
RECURSIVE_GLOBAL = """
def @sum_to(%i: int32, %acc: int32) -> int32 {
  if (equal(%i, 0)) {
    %acc
  } else {
    @sum_to(subtract(%i, 1), add(%acc, %i))
  }
}
def @main(%n: int32) {
  @sum_to(%n, 0)
}
"""


def test_recursive_global_sums_to_n():
    model = _compile(RECURSIVE_GLOBAL)
    lifted = [gv.name_hint for gv in model.relax_module.functions if gv.name_hint.startswith("sum_to")]
    assert lifted, "the recursive global is not a Relax function"
    for n in (0, 1, 10, 100):
        assert int(_run(model, np.array(n, "int32"))) == n * (n + 1) // 2


LET_LOOP = """
def @main(%n: int32, %x: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) {
  let %loop = fn (%i: int32, %acc: Tensor[(2, 4), float32]) -> Tensor[(2, 4), float32] {
    if (less(%i, %n)) {
      %loop(add(%i, 1), add(nn.dense(%acc, %w, units=4), %x))
    } else {
      %acc
    }
  };
  %loop(0, %x)
}
"""


def test_let_bound_recursive_loop_with_free_variables():
    """Relay's loop: ``%n``, ``%x`` and the weight are free in the loop body."""
    x = RNG.standard_normal((2, 4)).astype("float32")
    w = (RNG.standard_normal((4, 4)) * 0.3).astype("float32")
    model = _compile(LET_LOOP, {"w": w})
    assert offloaded_partitions(model.relax_module), "nothing offloaded"
    for n in (0, 1, 3):
        expected = x
        for _ in range(n):
            expected = expected @ w.T + x
        np.testing.assert_allclose(_run(model, np.array(n, "int32"), x), expected,
                                   rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------- closures
CLOSURES = """
def @scale(%v: Tensor[(3), float32]) -> Tensor[(3), float32] {
  multiply(%v, 3f)
}
def @main(%c: bool, %x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  let %add_y = fn (%a: Tensor[(3), float32]) { add(%a, %y) };
  let %pick = if (%c) { %add_y } else { @scale };
  let %pair = (%add_y, @scale);
  let %f = %pair.1;
  add(%pick(%x), %f(%x))
}
"""


def test_closures_globals_as_values_and_functions_chosen_by_if():
    model = _compile(CLOSURES)
    x = np.array([1, 2, 3], "float32")
    y = np.array([10, 20, 30], "float32")
    np.testing.assert_allclose(_run(model, True, x, y), (x + y) + 3 * x)
    np.testing.assert_allclose(_run(model, False, x, y), 3 * x + 3 * x)


# ---------------------------------------------------------------------- tuple parameters
TUPLE_PARAM = """
def @main(%t: (Tensor[(2, 3), float32], (Tensor[(3), float32], Tensor[(), float32]))) {
  %0 = %t.1;
  multiply(add(%t.0, %0.0), %0.1)
}
"""


def test_tuple_typed_parameter():
    a = RNG.standard_normal((2, 3)).astype("float32")
    b = RNG.standard_normal((3,)).astype("float32")
    s = np.array(0.5, "float32")
    expected = (a + b) * s
    # bmlib_relax.compile: one tensor input per field, named by its path.
    model = _compile(TUPLE_PARAM)
    assert model.input_names == ["t.0", "t.1.0", "t.1.1"]
    np.testing.assert_allclose(model(a, b, s), expected, rtol=1e-6)
    np.testing.assert_allclose(model(**{"t.0": a, "t.1.0": b, "t.1.1": s}), expected, rtol=1e-6)
    # import_relay: a Relax tuple parameter.
    mod = import_relay(parse(HEADER + TUPLE_PARAM))
    assert isinstance(mod["main"].params[0].ty, relax.TupleType)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"]([_tensor(a), [_tensor(b), _tensor(s)]]).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


# ---------------------------------------------------------------------- shape_of
def test_shape_of_static_and_dynamic():
    text = """
def @main(%x: Tensor[(?, 3), float32], %y: Tensor[(2, 5), float32]) {
  (shape_of(%x), shape_of(%y, dtype="int64"))
}
"""
    model = _compile(text)
    dynamic, static = _run(model, np.zeros((4, 3), "float32"), np.zeros((2, 5), "float32"))
    assert dynamic.dtype == np.int32 and dynamic.tolist() == [4, 3]
    assert static.dtype == np.int64 and static.tolist() == [2, 5]


def test_independent_dynamic_dims_broadcast_when_equal_and_say_so_when_not():
    # Relay broadcast two `?` dims at run time; Relax cannot relate them when it builds.
    # They are checked equal when the model runs, and the op then runs as Relay's did.
    text = ("def @main(%a: Tensor[(?, ?), float32], %b: Tensor[(?, ?), float32], "
            "%c: Tensor[(4, ?), float32]) {\n  %0 = add(%a, %b);\n  multiply(%0, %c)\n}\n")
    model = _compile(text)
    assert offloaded_partitions(model.relax_module)
    a, b, c = (RNG.standard_normal((4, 3)).astype("float32") for _ in range(3))
    np.testing.assert_allclose(model(a, b, c), (a + b) * c, rtol=1e-6)
    with pytest.raises(RunCheckError, match=r"^cf.relay:3:8: add: operand 1 has 2 entries on "
                                            r"axis 1 and operand 0 3 on axis 1; .*equal"):
        model(a, b[:, :2], c)
    # A 1 where the other is only known at run time is refused too, not broadcast ...
    with pytest.raises(RunCheckError, match=r"operand 1 has 1 entries on axis 0 and "
                                            r"operand 0 4"):
        model(a, b[:1], c)
    # ... and a run-time dim against a static one must equal it.
    with pytest.raises(RunCheckError, match=r"^cf.relay:4:3: multiply: operand 0 has 2 "
                                            r"entries on axis 0 and operand 1 4"):
        model(a[:2], b[:2], c)


@pytest.mark.parametrize("params, body, reference, bad", [
    # joined tensors agree on every other axis (concatenate), on all (stack)
    ("%a: Tensor[(?, ?), float32], %b: Tensor[(?, ?), float32]",
     "%0 = (%a, %b);\n  concatenate(%0, axis=0)", lambda a, b: np.concatenate([a, b]),
     lambda a, b: (a, b[:, :2])),
    ("%a: Tensor[(?), float32], %b: Tensor[(?), float32]",
     "%0 = (%a, %b);\n  stack(%0, axis=1)", lambda a, b: np.stack([a, b], 1),
     lambda a, b: (a, b[:2])),
    # a batch product: the batch broadcasts from 1, the reduction lengths must agree
    ("%a: Tensor[(?, ?, ?), float32], %b: Tensor[(?, ?, ?), float32]",
     "nn.batch_matmul(%a, %b, transpose_b=True)", lambda a, b: a @ b.transpose(0, 2, 1),
     lambda a, b: (a, b[:, :, :2])),
])
def test_ops_over_independent_run_time_dims_check_them_when_the_model_runs(
        params, body, reference, bad):
    # Relax would leave the result shape unknown (and TVM's VM failed to build it with a
    # raw InternalError): the dims are checked equal when the model runs instead.
    model = _compile(f"def @main({params}) {{\n  {body}\n}}\n")
    assert offloaded_partitions(model.relax_module)
    rank = len(model.input_specs[0]["shape"])
    a, b = (RNG.standard_normal((3, 4, 5)[:rank]).astype("float32") for _ in range(2))
    if rank == 3:
        b = RNG.standard_normal((3, 6, 5)).astype("float32")
    np.testing.assert_allclose(model(a, b), reference(a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(RunCheckError, match=r"^cf.relay:\d+:\d+: \S+: operand 1 has 2 entries"):
        model(*bad(a, b))


def test_prelu_of_a_run_time_channel_axis_and_one_hot():
    model = _compile("def @main(%x: Tensor[(?, ?, ?), float32], %a: Tensor[(2), float32], "
                     "%i: Tensor[(?), int32]) {\n  %0 = nn.prelu(%x, %a, axis=1);\n"
                     "  %1 = one_hot(%i, 1f, 0f, depth=3, axis=-1, dtype=\"float32\");\n"
                     "  (%0, %1)\n}\n")
    x = RNG.standard_normal((2, 2, 3)).astype("float32")
    alpha = np.array([0.1, 0.5], "float32")
    i = np.array([0, 2, 5, 1], "int32")
    got, hot = model(x, alpha, i)
    np.testing.assert_allclose(got, np.where(x > 0, x, x * alpha[None, :, None]), rtol=1e-6)
    np.testing.assert_array_equal(hot, np.eye(3, dtype="float32")[[0, 2, 0, 1]] * [[1], [1], [0], [1]])
    with pytest.raises(RunCheckError, match=r"nn.prelu: operand 0 has 3 entries on axis 1"):
        model(RNG.standard_normal((2, 3, 3)).astype("float32"), alpha, i)


# ---------------------------------------------------------------------- TVM-test corpus
# Programs of $BMLIB_RELAY_CORPUS/tvm_tests with control flow, closures, global
# functions or scalar `int` types.  RUN: (input builder, expected outputs written
# from Relay's semantics); the program is compiled with bmlib_relax.compile.
def _int(v):
    return np.array(v, "int32")


def _mat(seed):
    return np.random.default_rng(seed).standard_normal((5, 7)).astype("float32")


X57, Y57, Z57 = _mat(1), _mat(2), _mat(3)

CORPUS_RUN = {
    # let-bound recursive function that is never called; main returns ().
    "229_test_dead_recursion.relay": [((), ())],
    # if (cast(x, bool)) { (x + x) * 2 } else { x }: both branches.
    "251_test_simple_if.relay": [((_int(3),), _int(12)), ((_int(0),), _int(0))],
    # add of two (?, ?) inputs: each `?` a dim of its own, checked equal when it runs.
    "286_test_dynamic_input_input.relay": [((X57, Y57), X57 + Y57)],
    "287_test_dynamic_input_expected.relay": [((X57, Z57), X57 + Z57)],
    # A function stored in a tuple, projected and called: f(x, y) = x + y.
    "274_test_function_in_tuple_input.relay": [((X57, Y57), X57 + Y57)],
    "275_test_function_in_tuple_expected.relay": [((X57, Y57), X57 + Y57)],
    # let %h = if (%x) { %f } else { %g }; %h(%z): z + y or z - y.
    "304_test_conditional_input.relay": [((np.array(True), Y57, Z57), Z57 + Y57),
                                         ((np.array(False), Y57, Z57), Z57 - Y57)],
    "305_test_conditional_expected.relay": [((np.array(True), Y57, Z57), Z57 + Y57),
                                            ((np.array(False), Y57, Z57), Z57 - Y57)],
    # if (x < 5) { x + 3 } else { x }, with an unused let-bound closure.
    "346_TestUnusedLetBoundIRModule.relay": [((np.array(2, "int64"),), np.array(5, "int64")),
                                             ((np.array(9, "int64"),), np.array(9, "int64"))],
    # shape_of of a static tensor: int32 [10, 10].
    "338_VariantTestFunction.relay": [((np.ones((10, 10), "float32"),), np.array([10, 10],
                                                                                 "int32"))],
    # Scalar `int` parameters (int32) and lets.
    "222_test_dead_let.relay": [((_int(7),), _int(7))],
    "223_test_dead_let.relay": [((_int(7),), _int(7))],
    "224_test_one_live_let.relay": [((_int(7),), _int(2))],
    "225_test_one_live_let.relay": [((_int(7),), _int(2))],
    "226_test_nested_let.relay": [((_int(4), _int(5)), _int(4))],
    "227_test_nested_let.relay": [((_int(4), _int(5)), _int(4))],
    "249_test_simple_linear.relay": [((_int(3),), _int(24))],
}

# Programs with calls between global functions: each non-inlined global is a Relax
# global function of the same name (GLOBAL_FUNCTIONS), bmlib partitions inside it.
X10 = np.random.default_rng(4).standard_normal((10, 10)).astype("float32")
X8, Y8 = (np.random.default_rng(s).standard_normal(8).astype("float32") for s in (5, 6))
_RELU10 = np.maximum(X10, 0)
CORPUS_RUN.update({
    # Extern=1 global: add(%a, %a); the dynamic one returns Tensor[(?, ?)].
    "143_test_lower_extern.relay": [((X57,), X57 + X57)],
    "144_test_lower_extern_with_dynamic_shape.relay": [((X57,), X57 + X57)],
    # Collage's outlined partitions (Primitive=1, Compiler=...) called from main.
    "202_test_partition_single_op_byoc.relay": [((X10,), _RELU10)],
    # relu_add(abs(relu(x))) = abs(relu(x)) + relu(abs(relu(x))).
    "204_test_partition_diamond_valid_topology.relay": [((X10,), 2 * _RELU10)],
    "205_test_partition_diamond_valid_topology.relay": [((X10,), 2 * _RELU10)],
    "207_test_tvm_max_depth.relay": [((X10,), _RELU10)],
    "208_test_tvm_max_depth.relay": [((X10,), _RELU10)],
    "210_test_byoc_max_depth.relay": [((X10,), _RELU10)],
    "211_test_byoc_max_depth.relay": [((X10,), _RELU10)],
    # A global returning a tuple: main returns (relu(x), relu(x), abs(relu(x))).
    "213_test_partition_output_tuple.relay": [((X10,), (_RELU10, _RELU10, _RELU10))],
    # A tuple-typed parameter: concatenate((relu(x), relu(relu(x)))).
    "215_test_partition_intermediate_tuple.relay": [((X10,), np.concatenate([_RELU10] * 2))],
    # abs(relu(relu(relu(x)) + relu(abs(x)))).
    "217_test_fusion_benefit.relay": [((X10,), _RELU10 + np.abs(X10))],
    # add_add(abs(relu(x)), relu(x)) = abs(r) + (r + abs(r)).
    "219_test_double_residual.relay": [((X10,), 3 * _RELU10)],
    "221_test_pruning_heuristic.relay": [((X10,), 3 * _RELU10)],
    # A polymorphic global taking a function (inlined: the function is static).
    "242_test_simple.relay": [((_mat(5)[:5, :5],), _mat(5)[:5, :5])],
    # on_device / device_copy are identities on one CPU: f(y, x) = y + x.
    "306_test_global_input.relay": [((X57, Y57), Y57 + X57)],
    "307_test_global_expected.relay": [((X57, Y57), Y57 + X57)],
    "312_test_free_on_device_input.relay": [((X57, Y57, Z57), X57 + Y57 + Z57)],
    "313_test_free_on_device_expected.relay": [((X57, Y57, Z57), X57 + Y57 + Z57)],
    # Inline=1: inlined, as Relay's Inline pass does: (x + y) * 2.
    "323_test_tir_external_generation_outline_with_target_instance.relay": [
        ((X8, Y8), (X8 + Y8) * 2)],
    # @id[A](%x: A) -> A typed at its call: a float32 scalar.
    "324_test_type_arg_infer.relay": [((np.array(2.5, "float32"),), np.array(2.5, "float32"))],
})

IDENTITY_GLOBALS = {"on_scope_b", "id"}
GLOBAL_FUNCTIONS = {
    "143_test_lower_extern.relay": ["my_add"],
    "144_test_lower_extern_with_dynamic_shape.relay": ["my_dyn"],
    "202_test_partition_single_op_byoc.relay": ["collage_example_target_hook_nn_relu"],
    "204_test_partition_diamond_valid_topology.relay": [
        "collage_example_target_hook_nn_relu", "collage_example_target_hook_nn_relu_add"],
    "205_test_partition_diamond_valid_topology.relay": [
        "collage_example_target_hook", "collage_example_target_hook_nn_relu"],
    "207_test_tvm_max_depth.relay": ["collage_example_target_hook"],
    "208_test_tvm_max_depth.relay": ["collage_example_target_hook_nn_relu"],
    "210_test_byoc_max_depth.relay": ["collage_example_target_hook_nn_relu_nn_relu"],
    "211_test_byoc_max_depth.relay": ["collage_example_target_hook_nn_relu_nn_relu_nn_relu"],
    "213_test_partition_output_tuple.relay": ["collage_example_target_hook"],
    "215_test_partition_intermediate_tuple.relay": [
        "collage_example_target_hook", "collage_example_target_hook_concatenate"],
    "217_test_fusion_benefit.relay": [
        "collage_example_target_hook_nn_relu_nn_relu_nn_relu_add_nn_relu"],
    "219_test_double_residual.relay": [
        "collage_example_target_hook_add_add", "collage_example_target_hook_nn_relu"],
    "221_test_pruning_heuristic.relay": ["collage_example_target_hook_nn_relu_nn_relu_add_add"],
    "242_test_simple.relay": [],
    "306_test_global_input.relay": ["f"],
    "307_test_global_expected.relay": ["f"],
    "312_test_free_on_device_input.relay": ["on_scope_b"],
    "313_test_free_on_device_expected.relay": ["on_scope_b"],
    "323_test_tir_external_generation_outline_with_target_instance.relay": [],
    "324_test_type_arg_infer.relay": ["id"],
}

# file -> (error class, pattern): constructs Relax has no counterpart for, or programs
# Relax rejects, stay clear errors naming the place.
CORPUS_ERRORS = {
    # log of an int32 (a dead-code test; TVM never ran it): Relax requires a float.
    "228_test_live_recursion.relay": (ConversionError,
                                      r"228_test_live_recursion.relay:7:24: log: .*float dtype"),
    "252_test_simple_if.relay": (UnsupportedOpError, r"memory.kill"),
    "253_test_simple_match.relay": (UnsupportedOpError, r"253_test_simple_match.relay:\d+:\d+: "
                                                        r"match \(ADT pattern matching\)"),
    "241_test_refs.relay": (UnsupportedOpError, r"241_test_refs.relay:\d+:\d+: ref "),
    "314_test_lowered_input.relay": (UnsupportedOpError, r"call_lowered"),
    # Printed without its #[metadata]: the loop's initial state is a missing constant
    # (and the dyn.broadcast_to in it takes a shape known only when the loop runs).
    "345_TestRecursiveIRModule.relay": (ConversionError, r"345_TestRecursiveIRModule.relay:"
                                                         r"\d+:\d+: constant: meta\[relay."
                                                         r"Constant\]\[1\] has no value"),
    "136_test_init_module_and_metatable.relay": (UnsupportedOpError,
                                                 r"reference to undefined global @f"),
}


def _corpus_module(name: str):
    text = (corpus_dir() / "tvm_tests" / name).read_text()
    if not text.lstrip().startswith("#[version"):
        text = HEADER + text
    return parse(text, name)


@pytest.mark.parametrize("name", sorted(CORPUS_RUN))
def test_corpus_program_runs(name):
    model = bmlib_relax.compile(_corpus_module(name))
    if name in GLOBAL_FUNCTIONS:
        # Every (non-inlined) Relay global is a Relax global function of that name,
        # called through its GlobalVar; bmlib partitions are made inside it.
        plain = _plain_functions(model.relax_module)
        assert plain == sorted(GLOBAL_FUNCTIONS[name] + ["main"])
        for function in GLOBAL_FUNCTIONS[name]:
            counts = model.report.functions[function]
            assert counts["ops_host"] == 0, (function, counts)
            # Identity globals compute nothing; every other one calls its partitions.
            assert bool(counts["partitions"]) == (function not in IDENTITY_GLOBALS), counts
    for args, expected in CORPUS_RUN[name]:
        _assert_outputs(_run(model, *args), expected)


@pytest.mark.parametrize("name", sorted(GLOBAL_FUNCTIONS))
def test_corpus_program_with_globals_merged(name):
    """merge=True merges inside every function (TVM's pass alone only takes main)."""
    model = bmlib_relax.compile(_corpus_module(name), merge=True)
    assert _plain_functions(model.relax_module) == sorted(GLOBAL_FUNCTIONS[name] + ["main"])
    assert not model.report.ops_host
    # Identity programs (242, 324) compute nothing; the others are offloaded.
    assert bool(offloaded_partitions(model.relax_module)) == \
        (name not in ("242_test_simple.relay", "324_test_type_arg_infer.relay"))
    for args, expected in CORPUS_RUN[name]:
        _assert_outputs(_run(model, *args), expected)


def _plain_functions(mod) -> list[str]:
    """Relax functions of ``mod`` that are neither bmlib partitions nor composites."""
    return sorted(gv.name_hint for gv, f in mod.functions.items()
                  if isinstance(f, relax.Function) and
                  (f.attrs is None or not ({"Codegen", "Composite"} & set(f.attrs.keys()))))


def _assert_outputs(out, expected):
    if isinstance(expected, tuple):
        assert isinstance(out, tuple) and len(out) == len(expected)
        for o, e in zip(out, expected):
            _assert_outputs(o, e)
        return
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(CORPUS_ERRORS))
def test_corpus_program_is_a_clear_error(name):
    error, pattern = CORPUS_ERRORS[name]
    with pytest.raises(error) as info:
        import_relay(_corpus_module(name))
    assert re.search(pattern, str(info.value)), str(info.value)


# ---------------------------------------------------------------------- returned functions
RETURNS_CLOSURE = """
def @main(%y: Tensor[(3), float32]) -> fn (Tensor[(3), float32]) -> Tensor[(3), float32] {
  fn (%a: Tensor[(3), float32]) -> Tensor[(3), float32] { add(%a, %y) }
}
"""


@pytest.mark.parametrize("name,text", [
    ("245_test_eta_expand_global_var.relay", None),
    ("246_test_eta_expand_global_var.relay", None),
    ("closure", RETURNS_CLOSURE),
])
def test_returned_function_is_a_vm_closure(name, text):
    """``@main`` returning ``@aux``, an eta-expanded ``@aux`` or a closure over ``%y``:
    a Relax function value the VM returns as a closure (plain build)."""
    module = _corpus_module(name) if text is None else parse(HEADER + text, "cf.relay")
    mod = import_relay(module)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    if text is None:
        closure = vm["main"]()
        arg = np.array(7, "int32")
        expected = arg
    else:
        y = np.array([1, 2, 3], "float32")
        closure = vm["main"](_tensor(y))
        arg = np.array([10, 20, 30], "float32")
        expected = arg + y
    np.testing.assert_array_equal(vm.invoke_closure(closure, _tensor(arg)).numpy(), expected)
    if text is not None:
        with pytest.raises(UnsupportedOpError, match=r"cf.relay:3:1: @main returns a function"):
            bmlib_relax.compile(module)


def test_convert_with_a_loop_and_tuple_inputs(tmp_path):
    """``bmlib-relax convert --check`` on a Relay loop in a branch with a tuple input:
    the artifact takes ``t.0``/``t.1`` and agrees with the plain build."""
    from bmlib_relax.convert import convert

    text = HEADER + """
def @main(%n: int32, %t: (Tensor[(2, 4), float32], Tensor[(2, 4), float32]),
          %w: Tensor[(4, 4), float32]) {
  let %loop = fn (%i: int32, %acc: Tensor[(2, 4), float32]) -> Tensor[(2, 4), float32] {
    if (less(%i, %n)) {
      %loop(add(%i, 1), add(nn.dense(%acc, %w, units=4), %t.1))
    } else {
      %acc
    }
  };
  %loop(0, %t.0)
}
"""
    model_path = tmp_path / "loop.relay"
    model_path.write_text(text)
    w = (RNG.standard_normal((4, 4)) * 0.3).astype("float32")
    result = convert(str(model_path), str(tmp_path / "out"), params={"w": w}, check=True)
    model = bmlib_relax.load(str(tmp_path / "out" / "model.so"))
    assert model.input_names == ["n", "t.0", "t.1"]
    a, b = (RNG.standard_normal((2, 4)).astype("float32") for _ in range(2))
    expected = a
    for _ in range(3):
        expected = expected @ w.T + b
    np.testing.assert_allclose(model(np.array(3, "int32"), a, b), expected, rtol=1e-4,
                               atol=1e-4)
    assert result.check_passed
    # The dense inside the lifted loop function is a bmlib partition.
    assert result.report["partitions"], "nothing offloaded"
    assert offloaded_partitions(result.model.relax_module)


def test_a_long_relay_loop_runs_and_survives_export(tmp_path):
    """The Relax VM nests a native call per loop iteration: ~2500 iterations overflowed
    the main thread's 8 MiB stack (a segmentation fault).  A recursive model's calls run
    on a thread with a deep stack, and its artifact remembers that it recurses."""
    text = """
def @main(%n: int32, %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %loop = fn (%i: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {
    if (less(%i, %n)) { %loop(add(%i, 1), add(%acc, 1f)) } else { %acc }
  };
  %loop(0, %x)
}
"""
    model = _compile(text)
    assert model.recursive and not _compile(IF_ELSE, {"w": np.ones((4, 8), "float32")}).recursive
    x = np.zeros(2, "float32")
    np.testing.assert_array_equal(model(np.int32(20000), x), [20000, 20000])
    model.export_library(tmp_path / "loop.so")
    loaded = bmlib_relax.load(tmp_path / "loop.so")
    assert loaded.recursive
    np.testing.assert_array_equal(loaded(np.int32(20000), x), [20000, 20000])
    with pytest.raises(bmlib_relax.ParamError):  # errors still reach the caller
        loaded(np.int32(1), np.zeros(3, "float32"))


LOOP_OVER_A_FREE_BATCH = """
def @main(%n: int32, %x: Tensor[(DIM, 8), float32]) {
  let %loop = fn (%i: int32, %acc: Tensor[(DIM, 8), float32]) -> Tensor[(DIM, 8), float32] {
    if (less(%i, %n)) { %loop(add(%i, 1), add(tanh(%acc), %x)) } else { %acc }
  };
  %loop(0, %x)
}
"""
COUNT_OVER_A_FREE_BATCH = """
def @count(%i: int32, %acc: Tensor[(DIM, 8), float32], %x: Tensor[(DIM, 8), float32])
    -> Tensor[(DIM, 8), float32] {
  if (equal(%i, 0)) { %acc } else { @count(subtract(%i, 1), add(tanh(%acc), %x), %x) }
}
def @main(%n: int32, %x: Tensor[(DIM, 8), float32]) {
  @count(%n, %x, %x)
}
"""


@pytest.mark.parametrize("text, dim", [(LOOP_OVER_A_FREE_BATCH, "?"),
                                       (LOOP_OVER_A_FREE_BATCH, "b"),
                                       (COUNT_OVER_A_FREE_BATCH, "?"),
                                       (COUNT_OVER_A_FREE_BATCH, "b")])
def test_a_loop_over_a_free_batch(text, dim):
    """A loop's state and what it captures share the batch dim: a let-bound loop is typed
    by its first call (the captured %x and %acc get one function-own dim), a recursive
    global shares a named dim across its signature (its `?` dims, each a var of its own,
    are checked equal where the body adds them).  Both were import errors claiming
    "independent `?` dims" while printing one name twice."""
    model = _compile(text.replace("DIM", dim))
    for rows in (1, 4):
        x = RNG.standard_normal((rows, 8)).astype("float32")
        want = x
        for _ in range(3):
            want = np.tanh(want) + x
        np.testing.assert_allclose(_run(model, np.int32(3), x), want, rtol=1e-5, atol=1e-5)


def test_relay_loops_while_loop_over_a_growing_state_runs():
    # relay.loops.while_loop, as TVM's dynamic tests build it: no return annotation (read
    # off the else branch), and a state declared (?, 1) that starts (1, 1) and grows.
    from bmlib_relax import relay

    i = relay.var("i", shape=(), dtype="int32")
    st = relay.var("st", shape=(relay.Any(), 1), dtype="int32")

    def cond(i, st):
        return relay.less(i, relay.const(5, "int32"))

    def body(i, st):
        grown = relay.concatenate([st, relay.reshape(i, (1, 1))], axis=0)
        return i + relay.const(1, "int32"), grown

    loop = relay.loops.while_loop(cond, [i, st], body)
    start = relay.var("start", shape=(1, 1), dtype="int32")
    func = relay.Function([start], relay.TupleGetItem(
        loop(relay.const(1, "int32"), start), 1))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    got = model(np.array([[7]], "int32"))
    np.testing.assert_array_equal(got, np.array([[7], [1], [2], [3], [4]], "int32"))
