"""Relay global functions stay Relax global functions, and bmlib offloads inside them.

``@main`` calling ``@f`` calling ``@g`` imports as three Relax functions of those
names linked by GlobalVar calls; ``bmlib_relax.compile`` partitions inside each
(also with ``merge=True``), the report counts ops and FLOPs per function, weights
bound as parameters of ``@main`` reach the function that uses them, and every
output is checked against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, topi

import bmlib_relax
from bmlib_relax import import_relay, relay
from bmlib_relax.errors import RelayTypeError
from bmlib_relax.importer.branches import BRANCH_OF_ATTR
from bmlib_relax.importer.provenance import origin_of
from bmlib_relax.relay import parse
from bmlib_relax.relay.dataflow_pattern import is_op, wildcard

from conftest import offloaded_partitions

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(1313)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _relu(x):
    return np.maximum(x, 0)


def _callees(func: relax.Function) -> list[str]:
    """Names of the global functions ``func`` calls (in call order, repeated)."""
    names: list[str] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar):
            names.append(expr.op.name_hint)

    relax.analysis.post_order_visit(func, visit)
    return names


def _with_branches(mod: tvm.IRModule, name: str) -> list[str]:
    """``name`` and the If branches lifted out of it (see importer.branches), nested too."""
    names, pending = [], [name]
    while pending:
        current = pending.pop()
        names.append(current)
        pending += [gv.name_hint for gv, f in mod.functions.items()
                    if f.attrs is not None and str(f.attrs.get(BRANCH_OF_ATTR, "")) == current]
    return names


def _callees_with_branches(mod: tvm.IRModule, name: str) -> list[str]:
    """What ``name`` calls, its lifted branches' calls included (the branches not)."""
    names = _with_branches(mod, name)
    return [c for n in names for c in _callees(mod[n]) if c not in names]


def _partitions_called_by(mod: tvm.IRModule, name: str) -> list[str]:
    """The bmlib partitions the function ``name`` (or a branch lifted out of it) calls:
    offload inside that function."""
    offloaded = set(offloaded_partitions(mod))
    return [callee for callee in _callees_with_branches(mod, name) if callee in offloaded]


def _plain_functions(mod: tvm.IRModule) -> list[str]:
    """The Relax functions that are neither partitions nor lifted If branches."""
    return sorted(gv.name_hint for gv, f in mod.functions.items()
                  if isinstance(f, relax.Function) and
                  (f.attrs is None or
                   not ({"Codegen", "Composite", BRANCH_OF_ATTR} & set(f.attrs.keys()))))


# --------------------------------------------------------------------- main -> f -> g
MAIN_F_G = HEADER + """
def @g(%h: Tensor[(1, 64), float32], %wd: Tensor[(5, 64), float32]) -> Tensor[(1, 5), float32] {
  nn.dense(%h, %wd, units=5)
}
def @f(%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(4, 3, 3, 3), float32],
       %b: Tensor[(4), float32], %wd: Tensor[(5, 64), float32]) -> Tensor[(1, 5), float32] {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.relu(nn.bias_add(%0, %b));
  @g(nn.batch_flatten(%1), %wd)
}
def @main(%x: Tensor[(1, 3, 4, 4), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %b: Tensor[(4), float32], %wd: Tensor[(5, 64), float32]) {
  nn.softmax(@f(%x, %w, %b, %wd))
}
"""


def _main_f_g_params():
    return {"w": _rand(4, 3, 3, 3, scale=0.5), "b": _rand(4), "wd": _rand(5, 64, scale=0.2)}


def _conv3x3(x, w):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, wid = x.shape
    out = np.zeros((n, w.shape[0], h, wid), "float64")
    for i in range(h):
        for j in range(wid):
            patch = padded[:, :, i:i + 3, j:j + 3]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out


def _main_f_g_numpy(x, w, b, wd):
    h = _relu(_conv3x3(x, w) + b[None, :, None, None]).reshape(1, -1)
    logits = h @ wd.T
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_globals_import_as_relax_functions_called_by_global_var():
    mod = import_relay(parse(MAIN_F_G, "fg.relay"), _main_f_g_params())
    assert sorted(gv.name_hint for gv in mod.functions) == ["f", "g", "main"]
    assert _callees(mod["main"]) == ["f"]
    assert _callees(mod["f"]) == ["g"]
    # The convolution is in @f, the dense in @g, the softmax in @main: nothing inlined.
    assert "conv2d" in mod["f"].script() and "conv2d" not in mod["main"].script()
    assert "matmul" in mod["g"].script() and "matmul" not in mod["f"].script()
    # Weights bound as parameters of @main are passed to @f, which passes %wd on to @g.
    assert [p.name for p in mod["main"].params] == ["x"]
    assert len(mod["f"].params) == 4 and len(mod["g"].params) == 2


@pytest.mark.parametrize("merge", [False, True])
def test_main_f_g_offloads_inside_every_function(merge):
    params = _main_f_g_params()
    model = bmlib_relax.compile(parse(MAIN_F_G, "fg.relay"), params, merge=merge)
    mod = model.relax_module
    assert _plain_functions(mod) == ["f", "g", "main"]
    # Offload inside the non-main functions first: @f's conv and @g's dense are partitions.
    in_f, in_g = _partitions_called_by(mod, "f"), _partitions_called_by(mod, "g")
    assert in_f, "nothing offloaded inside @f"
    assert in_g, "nothing offloaded inside @g"
    assert _partitions_called_by(mod, "main"), "the softmax in @main is not offloaded"
    assert _callees(mod["main"]).count("f") == 1 and _callees(mod["f"]).count("g") == 1
    # Weights every call passes are constants inside the functions (packed for the
    # templates like main's): @f's and @g's weight parameters are gone.
    assert [p.name for p in mod["f"].params] == ["x"] and [p.name for p in mod["g"].params] == ["h"]
    composites = {p.name: p.composites for p in model.report.partitions}
    if merge:  # neighbouring composites inside @f are merged into one partition
        assert len(in_f) == 1 and composites[in_f[0]] == ["bmlib.conv2d_bias_relu",
                                                          "bmlib.reshape"]
    else:  # the reshape alone would be a copy: a view on the host instead
        assert len(in_f) == 1
        assert [(r.op, r.reason) for r in model.report.host_reasons] == [
            ("relax.reshape", "view_on_host")]
    # The report counts per function; all FLOPs are on bmlib.
    functions = model.report.functions
    assert set(functions) == {"f", "g", "main"}
    assert functions["f"]["partitions"] == sorted(in_f)
    assert functions["f"]["ops_host"] == (0 if merge else 1) and functions["g"]["ops_host"] == 0
    assert functions["f"]["flops_offloaded"] >= 2 * 4 * 3 * 9 * 16  # the conv's MACs
    assert functions["g"]["flops_offloaded"] == 2 * 5 * 64
    assert model.report.flops_host == 0 and model.report.offloaded_fraction == 1.0
    assert model.report.to_dict()["functions"]["g"]["partitions"] == sorted(in_g)
    assert "per function" in str(model.report)
    x = _rand(1, 3, 4, 4)
    np.testing.assert_allclose(model(x), _main_f_g_numpy(x, **params), rtol=1e-4, atol=1e-5)


def test_weights_as_inputs_reach_the_function():
    """Without bound weights, @main's tensor inputs flow into @f and @g unchanged."""
    params = _main_f_g_params()
    model = bmlib_relax.compile(parse(MAIN_F_G, "fg.relay"))
    assert _partitions_called_by(model.relax_module, "f")
    assert len(model.relax_module["f"].params) == 4  # nothing to bind
    x = _rand(1, 3, 4, 4)
    out = model(x, params["w"], params["b"], params["wd"])
    np.testing.assert_allclose(out, _main_f_g_numpy(x, **params), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------- called twice
TWICE = HEADER + """
def @layer(%x: Tensor[(2, 8), float32], %w: Tensor[(8, 8), float32]) -> Tensor[(2, 8), float32] {
  nn.relu(nn.dense(%x, %w, units=8))
}
def @main(%x: Tensor[(2, 8), float32], %w1: Tensor[(8, 8), float32],
          %w2: Tensor[(8, 8), float32]) {
  %0 = @layer(%x, %w1);
  add(@layer(%0, %w2), %0)
}
"""


@pytest.mark.parametrize("merge", [False, True])
def test_global_called_twice_with_different_arguments(merge):
    w1, w2 = _rand(8, 8, scale=0.4), _rand(8, 8, scale=0.4)
    model = bmlib_relax.compile(parse(TWICE), {"w1": w1, "w2": w2}, merge=merge)
    mod = model.relax_module
    assert _plain_functions(mod) == ["layer", "main"]  # one function, two calls
    assert len(mod["layer"].params) == 2  # two different weights: the parameter stays
    # The report: @layer's partition runs twice per inference (as when it was inlined).
    layer = model.report.functions["layer"]
    assert layer["runs"] == 2 and model.report.functions["main"]["runs"] == 1
    dense = [p for p in model.report.partitions if p.name in layer["partitions"]]
    assert [p.calls for p in dense] == [2] * len(dense)
    assert model.report.flops_offloaded == 2 * layer["flops_offloaded"] + \
        model.report.functions["main"]["flops_offloaded"]
    assert "layer (runs 2x)" in str(model.report)
    assert _callees(mod["main"]).count("layer") == 2
    assert _partitions_called_by(mod, "layer"), "nothing offloaded inside @layer"
    x = _rand(2, 8)
    first = _relu(x @ w1.T)
    np.testing.assert_allclose(model(x), _relu(first @ w2.T) + first, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- inside an if
IN_BRANCH = HEADER + """
def @scale(%v: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) -> Tensor[(2, 4), float32] {
  multiply(nn.dense(%v, %w, units=4), 2f)
}
def @main(%c: bool, %x: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) {
  if (%c) {
    @scale(%x, %w)
  } else {
    @scale(negative(%x), %w)
  }
}
"""


@pytest.mark.parametrize("merge", [False, True])
def test_global_called_from_inside_if_branches(merge):
    """With merge=True @scale's dense and multiply become one partition; @main has an
    If (which MergeCompositeFunctions cannot take): one partition per composite."""
    w = _rand(4, 4)
    model = bmlib_relax.compile(parse(IN_BRANCH), {"w": w}, merge=merge)
    mod = model.relax_module
    assert "if c:" in mod["main"].script()
    assert _callees_with_branches(mod, "main").count("scale") == 2  # one call per branch
    assert len(_partitions_called_by(mod, "scale")) == (1 if merge else 2)
    assert _partitions_called_by(mod, "main"), "the negative in the else branch stays on host"
    x = _rand(2, 4)
    np.testing.assert_allclose(model(np.array(True), x), 2 * (x @ w.T), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model(np.array(False), x), 2 * (-x @ w.T), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- tuple result
TUPLE_RESULT = HEADER + """
def @heads(%x: Tensor[(2, 6), float32], %w: Tensor[(4, 6), float32])
    -> (Tensor[(2, 4), float32], Tensor[(2, 4), float32]) {
  %0 = nn.dense(%x, %w, units=4);
  (nn.relu(%0), sigmoid(%0))
}
def @pair_sum(%t: (Tensor[(2, 4), float32], Tensor[(2, 4), float32])) -> Tensor[(2, 4), float32] {
  add(%t.0, %t.1)
}
def @main(%x: Tensor[(2, 6), float32], %w: Tensor[(4, 6), float32]) {
  %1 = @heads(%x, %w);
  (%1.1, @pair_sum(%1))
}
"""


def test_global_returning_a_tuple_and_one_taking_a_tuple():
    w = _rand(4, 6)
    model = bmlib_relax.compile(parse(TUPLE_RESULT), {"w": w})
    mod = model.relax_module
    assert _plain_functions(mod) == ["heads", "main", "pair_sum"]
    assert isinstance(mod["heads"].ret_ty, relax.TupleType)
    # A tuple parameter is one tensor parameter per field (partitions take tensors).
    assert [p.name for p in mod["pair_sum"].params] == ["t.0", "t.1"]
    assert _partitions_called_by(mod, "heads") and _partitions_called_by(mod, "pair_sum")
    x = _rand(2, 6)
    dense = x @ w.T
    sig, total = model(x)
    np.testing.assert_allclose(sig, 1 / (1 + np.exp(-dense)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total, _relu(dense) + 1 / (1 + np.exp(-dense)), rtol=1e-5,
                               atol=1e-6)


# --------------------------------------------------------------------- polymorphic globals
POLYMORPHIC = HEADER + """
def @double[A](%x: A) -> A {
  add(%x, %x)
}
def @rows(%x: Tensor[(?, 3), float32]) -> Tensor[(?, 3), float32] {
  nn.relu(%x)
}
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4, 3), float32], %n: int32) {
  (@double(%x), @double(%n), @double(@double(%x)), @rows(%x), @rows(%y))
}
"""


def test_polymorphic_globals_are_specialised_per_call_signature():
    """A global whose parameter types are not fully known is typed at its call: one
    Relax function per signature, the first keeping the Relay name."""
    mod = import_relay(parse(POLYMORPHIC))
    names = sorted(gv.name_hint for gv in mod.functions)
    assert names == ["double", "double__int32", "main", "rows", "rows__float32_4x3"]
    assert [int(d) for d in mod["rows"].params[0].ty.shape.values] == [2, 3]
    model = bmlib_relax.compile(parse(POLYMORPHIC))
    assert _partitions_called_by(model.relax_module, "rows__float32_4x3")
    x, y = _rand(2, 3), _rand(4, 3)
    d, n2, dd, rx, ry = model(x, y, np.array(7, "int32"))
    np.testing.assert_allclose(d, 2 * x, rtol=1e-6)
    assert n2.dtype == np.int32 and int(n2) == 14
    np.testing.assert_allclose(dd, 4 * x, rtol=1e-6)
    np.testing.assert_allclose(rx, _relu(x))
    np.testing.assert_allclose(ry, _relu(y))


def test_inline_attribute_and_function_arguments_inline_the_global():
    text = HEADER + """
def @plus(%a: Tensor[(3), float32], %b: Tensor[(3), float32], Inline=1) -> Tensor[(3), float32] {
  add(%a, %b)
}
def @apply[A, B](%f: fn (A) -> B, %v: A) -> B {
  %f(%v)
}
def @main(%x: Tensor[(3), float32]) {
  @apply(fn (%t: Tensor[(3), float32]) { negative(%t) }, @plus(%x, %x))
}
"""
    mod = import_relay(parse(text))
    assert [gv.name_hint for gv in mod.functions] == ["main"]
    model = bmlib_relax.compile(parse(text))
    x = _rand(3)
    np.testing.assert_allclose(model(x), -(x + x))


# --------------------------------------------------------------------- provenance
PROVENANCE = HEADER + """
def @block(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
           %b: Tensor[(4), float32]) -> Tensor[(1, 4, 4, 4), float32] {
  %0 = nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b, axis=1);
  nn.relu(%1)
}
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %b: Tensor[(4), float32]) {
  @block(%x, %w, %b)
}
"""
LEGACY_NAME = "bmlib.block_conv2d_bias_add_relu"


def test_bindings_inside_a_global_know_their_relay_call():
    params = {"w": _rand(4, 3, 3, 3), "b": _rand(4)}
    mod = import_relay(parse(PROVENANCE), params)
    roots = {}
    for block in mod["block"].body.blocks:
        for binding in block.bindings:
            origin = origin_of(binding.value)
            if origin is not None and origin.root:
                roots[binding.value.op.name] = origin.relay
    bias_add = roots["relax.add"]
    assert bias_add.op.name == "nn.bias_add" and bias_add.attrs.axis == 1
    conv = bias_add.args[0]
    assert conv.op.name == "nn.conv2d" and conv.attrs.strides == (2, 2)
    assert conv.checked_type.shape == (1, 4, 4, 4)
    # Inside @block the weight is @block's parameter, as it was in Relay.
    assert conv.args[1].name == "w" and conv.args[1].checked_type.shape == (4, 3, 3, 3)


def test_legacy_lowering_sees_relay_calls_inside_a_global():
    seen = []

    def lower(call, inputs):
        bias_add = call.args[0]
        conv = bias_add.args[0]
        assert (call.op.name, bias_add.op.name, conv.op.name) == \
            ("nn.relu", "nn.bias_add", "nn.conv2d")
        seen.append((bias_add.attrs.axis, tuple(conv.attrs.strides)))
        data, weight, bias = inputs
        out = topi.nn.conv2d_nchw(data, weight, conv.attrs.strides, conv.attrs.padding,
                                  conv.attrs.dilation, out_dtype="float32")
        shape = [1] * len(out.shape)
        shape[bias_add.attrs.axis] = int(bias.shape[0])
        return topi.nn.relu(topi.add(out, topi.reshape(bias, shape)))

    pattern = is_op("nn.relu")(is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), wildcard()),
                                                     wildcard()))
    params = {"w": _rand(4, 3, 3, 3), "b": _rand(4)}
    checked = []

    def check(call):  # a legacy check function sees the Relay call inside @block too
        checked.append((call.op.name, call.args[0].op.name, call.args[0].attrs.axis))
        return True

    model = bmlib_relax.compile(parse(PROVENANCE), params,
                                patterns=[(LEGACY_NAME, pattern, check)],
                                lowerings={LEGACY_NAME: lower})
    assert _partitions_called_by(model.relax_module, "block"), "nothing offloaded in @block"
    assert seen == [(1, (2, 2))]
    assert checked == [("nn.relu", "nn.bias_add", 1)]
    x = _rand(1, 3, 8, 8)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((1, 4, 4, 4), "float64")
    for i in range(4):
        for j in range(4):
            patch = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            expected[:, :, i, j] = np.tensordot(patch, params["w"], axes=([1, 2, 3], [1, 2, 3]))
    expected = _relu(expected + params["b"][None, :, None, None])
    np.testing.assert_allclose(model(x), expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------- merge with loops
LOOP = HEADER + """
def @main(%n: int32, %x: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) {
  let %loop = fn (%i: int32, %acc: Tensor[(2, 4), float32]) -> Tensor[(2, 4), float32] {
    if (less(%i, %n)) {
      %loop(add(%i, 1), nn.relu(add(nn.dense(%acc, %w, units=4), %x)))
    } else {
      %acc
    }
  };
  nn.relu(%loop(0, %x))
}
"""


def test_merge_inside_a_lifted_recursive_function():
    """merge=True with a Relay loop: TVM's MergeCompositeFunctions alone fails on a
    ``main`` that calls another function; here each function is merged on its own."""
    w = _rand(4, 4, scale=0.4)
    model = bmlib_relax.compile(parse(LOOP), {"w": w}, merge=True)
    loop = [n for n in _plain_functions(model.relax_module) if n != "main"]
    assert len(loop) == 1 and _partitions_called_by(model.relax_module, loop[0])
    # The weight (a free variable of the loop, passed on by every iteration) is a
    # constant inside the loop function; %n and %x stay parameters.
    assert sorted(p.name for p in model.relax_module[loop[0]].params) == ["acc", "i", "n", "x"]
    x = _rand(2, 4)
    for n in (0, 2):
        expected = x
        for _ in range(n):
            expected = _relu(expected @ w.T + x)
        np.testing.assert_allclose(model(np.array(n, "int32"), x), _relu(expected),
                                   rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- errors, fallbacks
def test_global_returning_a_function_value_without_saying_so_is_inlined():
    text = HEADER + """
def @adder(%a: Tensor[(3), float32]) {
  %1 = multiply(%a, 2f);
  fn (%b: Tensor[(3), float32]) { add(%1, %b) }
}
def @main(%x: Tensor[(3), float32]) {
  %0 = @adder(%x);
  %0(%x)
}
"""
    assert [gv.name_hint for gv in import_relay(parse(text)).functions] == ["main"]
    x = _rand(3)
    np.testing.assert_allclose(bmlib_relax.compile(parse(text))(x), 3 * x, rtol=1e-6)


@pytest.mark.parametrize("body,main,pattern", [
    # Relay's type checker refused these; Relax would take the declared type on trust.
    ("-> Tensor[(3, 2), float32] { add(%a, %a) }", "@f(%x)",
     r"g.relay:2:1: global function @f is declared to return R.Tensor\(\(3, 2\).* but its "
     r"body returns R.Tensor\(\(2, 3\)"),
    ("-> Tensor[(2, 3), float32] { add(%a, %a) }", "@f(%x, %x)",
     r"g.relay:3:42: function expects 1 arguments, got 2"),
])
def test_ill_typed_global_calls_are_located_errors(body, main, pattern):
    text = HEADER + f"def @f(%a: Tensor[(2, 3), float32]) {body}\n" \
        f"def @main(%x: Tensor[(2, 3), float32]) {{ {main} }}\n"
    with pytest.raises(bmlib_relax.ConversionError, match=pattern):
        import_relay(parse(text, "g.relay"))


def test_untyped_global_is_typed_at_its_calls():
    text = HEADER + """
def @neg(%v) {
  negative(%v)
}
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4), float32]) {
  (@neg(%x), @neg(@neg(%x)), @neg(%y))
}
"""
    mod = import_relay(parse(text))
    assert sorted(gv.name_hint for gv in mod.functions) == ["main", "neg", "neg__float32_4"]
    x, y = _rand(2, 3), _rand(4)
    a, b, c = bmlib_relax.compile(parse(text))(x, y)
    np.testing.assert_allclose(a, -x)
    np.testing.assert_allclose(b, x)
    np.testing.assert_allclose(c, -y)


def test_symbolic_dims_shared_by_a_calls_arguments_stay_shared():
    """``@f(%x, %y)`` with ``%x``, ``%y: Tensor[(n, 3)]``: inside @f both parameters have
    the same (fresh) dim, so ``add`` has a known shape, as it had inlined."""
    text = HEADER + """
def @f(%a, %b) {
  add(%a, %b)
}
def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(n, 3), float32]) {
  (@f(%x, %y), @f(%y, %y))
}
"""
    mod = import_relay(parse(text))
    assert sorted(gv.name_hint for gv in mod.functions) == ["f", "main"]
    a, b = mod["f"].params
    assert a.ty.shape.values[0].same_as(b.ty.shape.values[0])
    assert not a.ty.shape.values[0].same_as(mod["main"].params[0].ty.shape.values[0])
    x, y = _rand(5, 3), _rand(5, 3)
    first, second = bmlib_relax.compile(parse(text))(x, y)
    np.testing.assert_allclose(first, x + y, rtol=1e-6)
    np.testing.assert_allclose(second, 2 * y, rtol=1e-6)


# --------------------------------------------------------------------- several callees
SEVERAL_CALLEES = HEADER + """
def @layer(%v: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) -> Tensor[(2, 4), float32] {
  nn.relu(nn.dense(%v, %w, units=4))
}
def @count(%i: int32, %acc: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32])
    -> Tensor[(2, 4), float32] {
  if (equal(%i, 0)) { %acc } else { @count(subtract(%i, 1), @layer(%acc, %w), %w) }
}
def @main(%n: int32, %x: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) {
  let %loop = fn (%j: int32, %a: Tensor[(2, 4), float32]) -> Tensor[(2, 4), float32] {
    if (less(%j, 2)) { %loop(add(%j, 1), @layer(%a, %w)) } else { %a }
  };
  add(@count(%n, %x, %w), %loop(0, %x))
}
"""


@pytest.mark.parametrize("merge", [False, True])
def test_recursive_global_and_loop_calling_a_global(merge):
    """@main calls a recursive global and a Relay loop, both call @layer: each call
    keeps its callee through the per-function merge."""
    w = _rand(4, 4, scale=0.5)
    model = bmlib_relax.compile(parse(SEVERAL_CALLEES), {"w": w}, merge=merge)
    mod = model.relax_module
    assert _plain_functions(mod) == ["count", "layer", "loop", "main"]
    assert sorted(_callees(mod["main"])) == ["count", "loop"]
    assert _partitions_called_by(mod, "layer")
    assert model.report.functions["layer"]["runs"] == 2  # once from each caller
    x = _rand(2, 4)

    def layer(v):
        return _relu(v @ w.T)

    for n in (0, 3):
        expected = x
        for _ in range(n):
            expected = layer(expected)
        np.testing.assert_allclose(model(np.array(n, "int32"), x), expected + layer(layer(x)),
                                   rtol=1e-5, atol=1e-5)


def test_host_flops_inside_if_branches_are_counted():
    """A host op in a branch (cumsum has no template) counts in the FLOPs on host, per
    function, as the op counts always did."""
    text = HEADER + """
def @main(%c: bool, %x: Tensor[(2, 8), float32]) {
  if (%c) { nn.relu(%x) } else { cumsum(%x, axis=1) }
}
"""
    model = bmlib_relax.compile(parse(text))
    assert offloaded_partitions(model.relax_module)
    assert dict(model.report.ops_host) == {"relax.cumsum": 1}
    assert model.report.flops_host == 16 == model.report.functions["main"]["flops_host"]
    assert model.report.offloaded_fraction < 1.0


@pytest.mark.parametrize("merge", [False, True])
def test_global_returning_a_nested_tuple(merge):
    """No call_tir placeholder can stand for a nested-tuple result: under merge=True the
    caller gets one partition per composite; the callee is merged as usual."""
    text = HEADER + """
def @f(%x: Tensor[(2, 4), float32])
    -> ((Tensor[(2, 4), float32], Tensor[(2, 4), float32]), Tensor[(2, 4), float32]) {
  ((nn.relu(%x), negative(%x)), exp(%x))
}
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = @f(%x);
  %1 = %0.0;
  add(add(%1.0, %1.1), nn.relu(%0.1))
}
"""
    model = bmlib_relax.compile(parse(text), merge=merge)
    assert _partitions_called_by(model.relax_module, "f")
    assert _partitions_called_by(model.relax_module, "main")
    x = _rand(2, 4)
    np.testing.assert_allclose(model(x), _relu(x) - x + _relu(np.exp(x)), rtol=1e-5)


def test_untyped_tuple_parameter_takes_tuple_literals():
    text = HEADER + """
def @pair(%t) {
  add(%t.0, %t.1)
}
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = (%x, %y);
  (@pair(%0), @pair((%y, (%x, %y).1)))
}
"""
    model = bmlib_relax.compile(parse(text))
    assert _plain_functions(model.relax_module) == ["main", "pair"]
    assert [p.name for p in model.relax_module["pair"].params] == ["t.0", "t.1"]
    x, y = _rand(2, 3), _rand(2, 3)
    first, second = model(x, y)
    np.testing.assert_allclose(first, x + y, rtol=1e-6)
    np.testing.assert_allclose(second, 2 * y, rtol=1e-6)


MUTUAL = HEADER + """def @even(%n: int32, %x: Tensor[(1, 3), float32]) -> Tensor[(1, 3), float32] {
  if (equal(%n, 0)) { %x } else { @odd(subtract(%n, 1), nn.relu(%x)) }
}
def @odd(%n: int32, %x: Tensor[(1, 3), float32]) -> Tensor[(1, 3), float32] {
  if (equal(%n, 0)) { negative(%x) } else { @even(subtract(%n, 1), add(%x, 1f)) }
}
def @main(%x: Tensor[(1, 3), float32], %n: int32) { @even(%n, %x) }
"""


def test_mutually_recursive_globals_of_one_signature_stay_two_functions():
    """@even and @odd have one signature: their placeholders (declared before either body
    exists) were structurally equal, TVM's add_func returned one GlobalVar for both, and
    @even called itself where it called @odd (a wrong answer for every n >= 1)."""
    def even(n, x):
        return x if n == 0 else odd(n - 1, _relu(x))

    def odd(n, x):
        return -x if n == 0 else even(n - 1, x + 1)

    model = bmlib_relax.compile(MUTUAL, {})
    assert offloaded_partitions(model.relax_module)
    assert {"even", "odd"} <= {gv.name_hint for gv in model.relax_module.get_global_vars()}
    x = np.array([[1.0, -2.0, 3.0]], "float32")
    for n in range(5):
        np.testing.assert_array_equal(model(x=x, n=np.array(n, "int32")), even(n, x))


def test_nested_loops_of_one_signature_stay_two_loops():
    """Two let-bound loops over ``(int32, Tensor[(2, 3)])``, one inside the other and
    capturing nothing: the inner loop's calls went to the outer loop (endless recursion,
    a segfault)."""
    text = HEADER + """def @main(%x: Tensor[(2, 3), float32]) {
  let %outer = fn (%i: int32, %acc: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
    if (less(%i, 3)) {
      let %inner = fn (%j: int32, %a: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
        if (less(%j, 2)) { %inner(add(%j, 1), add(%a, 1f)) } else { %a }
      };
      %outer(add(%i, 1), multiply(nn.relu(%inner(0, %acc)), 2f))
    } else { %acc }
  };
  %outer(0, %x)
}
"""
    x = _rand(2, 3)
    want = x.copy()
    for _ in range(3):
        want = _relu(want + 2) * 2
    model = bmlib_relax.compile(text, {})
    assert offloaded_partitions(model.relax_module)
    np.testing.assert_allclose(model(x=x), want, rtol=1e-5)


@pytest.mark.parametrize("body, want_x", [
    ("(@u(%x), %x)", [1.0, 1.0]),
    ("let %z = @u(%x); (%z, add(%x, 1f))", [2.0, 2.0]),
])
def test_a_global_returning_unit_can_be_a_field_of_the_result(body, want_x):
    """TVM 0.27's VM kept a ``()`` call result in its void register and failed reading
    it back into a tuple (InternalError at run time); v0.19's VM returned ``((), x)``."""
    text = ('#[version = "0.0.5"]\n'
            'def @u(%x: Tensor[(2), float32]) -> () { () }\n'
            f'def @main(%x: Tensor[(2), float32]) {{ {body} }}\n')
    unit, x = bmlib_relax.compile(text)(np.ones(2, "float32"))
    assert unit == ()
    np.testing.assert_array_equal(x, want_x)


def test_a_dim_named_in_a_globals_parameters_is_one_value_across_its_arguments():
    """v0.19's type solver bound ``n`` to the first static value and refused another one;
    unchecked, (1, 2) and (3, 2) ran and broadcast into a plausible (3, 2) result."""
    text = '''#[version = "0.0.5"]
def @pair(%x: Tensor[(n, 2), float32], %y: Tensor[(n, 2), float32]) -> Tensor[(n, 2), float32] {
  add(%x, %y)
}
def @main(%a: Tensor[(1, 2), float32], %b: Tensor[(%s, 2), float32]) { @pair(%a, %b) }
'''
    with pytest.raises(bmlib_relax.ConversionError,
                       match=r"the dim n of its parameters two values: 1 \(%x\) and 3 \(%y\)"):
        bmlib_relax.compile(text.replace("%s", "3"))
    model = bmlib_relax.compile(text.replace("%s", "1"))
    np.testing.assert_array_equal(model(np.ones((1, 2), "float32"), np.ones((1, 2), "float32")),
                                  [[2, 2]])
    doubled = ('#[version = "0.0.5"]\n'
               'def @f(%x: Tensor[(n, 2), float32]) -> Tensor[(n, 2), float32] {\n'
               '  concatenate((%x, %x))\n}\n'
               'def @main(%a: Tensor[(3, 2), float32]) { @f(%a) }\n')
    with pytest.raises(bmlib_relax.ConversionError,
                       match=r"the result of @f has 6 entries on axis 0, where its declared "
                             r"type says n, which the arguments make 3"):
        bmlib_relax.compile(doubled)


RECURSIVE_WITHOUT_RETURN_TYPE = {
    # tail recursion: the base case's branch types the body
    "sum_up": ("""def @rec(%i: int32, %acc: Tensor[(2, 3), float32]) {
  if (equal(%i, 0)) { %acc } else { @rec(subtract(%i, 1), nn.relu(add(%acc, 1f))) }
}
def @main(%n: int32, %x: Tensor[(2, 3), float32]) { multiply(@rec(%n, %x), 2f) }
""", lambda n, x: 2 * _relu_repeat(x, n)),
    # the recursive call inside an op: Relay's solver still typed it from the base case
    "factorial": ("""def @rec(%i: int32, %x: Tensor[(2, 3), float32]) {
  if (equal(%i, 0)) { %x } else { add(%x, multiply(@rec(subtract(%i, 1), %x), 0.5f)) }
}
def @main(%n: int32, %x: Tensor[(2, 3), float32]) { @rec(%n, %x) }
""", lambda n, x: x * sum(0.5 ** k for k in range(n + 1))),
}


def _relu_repeat(x, n):
    for _ in range(n):
        x = np.maximum(x + 1, 0)
    return x


@pytest.mark.parametrize("case", sorted(RECURSIVE_WITHOUT_RETURN_TYPE))
def test_a_recursive_global_without_a_return_type_is_typed_from_its_base_case(case):
    # v0.19 unified the recursive calls' result with the body's type; this was
    # "recursive function %rec has no return type; annotate it".
    text, expect = RECURSIVE_WITHOUT_RETURN_TYPE[case]
    mod = relay.transform.InferType()(parse(HEADER + text))
    assert mod["rec"].checked_type.ret_type == relay.TensorType((2, 3))
    model = bmlib_relax.compile(HEADER + text)
    assert offloaded_partitions(model.relax_module)
    x = _rand(2, 3)
    for n in (0, 3):
        np.testing.assert_allclose(model(np.array(n, "int32"), x), expect(n, x),
                                   rtol=1e-6)


def test_a_recursive_global_whose_branches_disagree_is_a_type_error():
    text = HEADER + """def @rec(%n: int32) {
  if (equal(%n, 0)) { 1f } else { multiply(%n, cast(@rec(subtract(%n, 1)), dtype="int32")) }
}
def @main(%n: int32) { @rec(%n) }
"""
    with pytest.raises(RelayTypeError, match=r"3:3: If: the branches have different types: "
                                             r"float32 and int32"):
        bmlib_relax.compile(text)
