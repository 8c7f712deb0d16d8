"""The generic driver: structure (tuples, let, closures, globals), metadata attrs, errors."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from bmlib_relax import ConversionError, UnsupportedOpError, import_relay
from bmlib_relax.importer import supported_ops
from bmlib_relax.relay import ast, parse
from bmlib_relax.relay.analysis import post_order_list

from conftest import DATA
from .helpers import HEADER, check, import_text, rand, relay_fn

CORPUS_TOP_OPS = [
    "add", "multiply", "sigmoid", "concatenate", "tanh", "nn.dense", "split", "nn.conv2d",
    "reshape", "nn.relu", "squeeze", "transpose", "nn.batch_norm", "expand_dims", "divide",
    "sqrt", "nn.bias_add", "negative", "nn.leaky_relu", "subtract", "mean", "on_device",
    "nn.batch_matmul", "power", "strided_slice", "nn.dropout", "maximum", "minimum",
    "nn.softmax", "device_copy", "nn.layer_norm", "nn.pad", "cast", "nn.conv1d", "erf",
    "nn.conv3d", "abs", "nn.max_pool2d", "layout_transform", "zeros_like",
    "nn.global_avg_pool2d", "collapse_sum_like", "nn.batch_flatten", "copy", "take", "stack",
    "less", "nn.conv3d_transpose", "nn.upsampling", "full", "nn.avg_pool2d", "nn.log_softmax",
    "arange", "where", "ones_like", "log",
]  # the corpus top-60 minus accelerator_call, memory.kill/alloc_storage, call_lowered


def test_registry_covers_goldens_and_corpus_top_ops():
    ops = set(supported_ops())
    golden_ops = set()
    for case in DATA.iterdir():
        if (case / "model.relay").exists():
            for node in post_order_list(parse((case / "model.relay").read_text())["main"]):
                if isinstance(node, ast.Call) and isinstance(node.op, ast.Op):
                    golden_ops.add(node.op.name)
    assert golden_ops <= ops
    assert set(CORPUS_TOP_OPS) <= ops


def test_tuple_output_and_multiple_outputs():
    x = rand(2, 3)
    text = relay_fn("%x: Tensor[(2, 3), float32]",
                    "%0 = add(%x, 1f);\n  %1 = (%0, %x);\n  (%1, multiply(%0, 2f))")
    ex = tvm.compile(import_text(text), target="llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    np.testing.assert_allclose(out[0][0].numpy(), x + 1)
    np.testing.assert_allclose(out[0][1].numpy(), x)
    np.testing.assert_allclose(out[1].numpy(), (x + 1) * 2)


def test_let_chain_closure_is_inlined_and_global_call_is_a_relax_function():
    text = HEADER + """\
def @double(%a: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  add(%a, %a)
}
def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  let %f = fn (%p: Tensor[(2, 3), float32], Primitive=1) { nn.relu(%p) };
  let %y = %f(%x);
  let %z: Tensor[(2, 3), float32] = @double(%y);
  %z
}
"""
    x = rand(2, 3)
    check(text, [x], 2 * np.maximum(x, 0))
    # The let-bound closure is inlined; @double stays a Relax global function of that
    # name, called from main through its GlobalVar.
    mod = import_text(text)
    assert sorted(gv.name_hint for gv in mod.functions) == ["double", "main"]
    assert " = double(" in mod["main"].script()
    assert "relu" in mod["main"].script() and "relu" not in mod["double"].script()


def test_dynamic_dims_become_symbolic_vars():
    text = relay_fn("%x: Tensor[(?, 4), float32], %w: Tensor[(3, 4), float32]",
                    "nn.dense(%x, %w, units=None)")
    script = import_text(text)["main"].script()
    assert "R.Tensor((d0, 4)" in script and "R.Tensor((d0, 3)" in script
    x, w = rand(5, 4), rand(3, 4, seed=1)
    check(text, [x, w], x @ w.T)


def test_attrs_from_the_metadata_section():
    """``nn.batch_matmul(%a, %b, meta[relay.attrs.BatchMatmulAttrs][0])`` (transformer dump)."""
    text = HEADER + """\
def @main(%a: Tensor[(2, 3, 4), float32], %b: Tensor[(2, 5, 4), float32]) {
  nn.batch_matmul(%a, %b, meta[relay.attrs.BatchMatmulAttrs][0])
}

#[metadata]
{"root": 1, "nodes": [{"type_key": ""},
  {"type_key": "Map", "keys": ["relay.attrs.BatchMatmulAttrs"], "data": [2]},
  {"type_key": "Array", "data": [3]},
  {"type_key": "relay.attrs.BatchMatmulAttrs",
   "attrs": {"out_dtype": "", "transpose_a": "0", "transpose_b": "1"}}],
 "b64ndarrays": [], "attrs": {"tvm_version": "0.8.dev0"}}
"""
    a, b = rand(2, 3, 4), rand(2, 5, 4, seed=1)
    check(text, [a, b], a @ b.transpose(0, 2, 1))
    without = text.split("#[metadata]")[0]
    with pytest.raises(ConversionError, match=r"meta\[relay.attrs.BatchMatmulAttrs\]\[0\] has "
                                              r"no value"):
        import_text(without)


def test_two_unsupported_ops_in_one_error_with_locations():
    text = HEADER + """\
def @main(%x: Tensor[(1, 4, 8, 8), float32]) {
  %0 = nn.fifo_buffer(%x, %x, axis=2);
  %1 = nn.relu(%0);
  %2 = dft(%1, %1, inverse=False);
  %3 = %2.0;
  nn.fifo_buffer(%3, %3, axis=2)
}
"""
    with pytest.raises(UnsupportedOpError) as info:
        import_relay_text(text)
    message = str(info.value)
    assert message.startswith("2 unsupported Relay op(s): dft, nn.fifo_buffer")
    assert "model.relay:3:8: nn.fifo_buffer" in message
    assert "model.relay:5:8: dft" in message
    assert "model.relay:7:3: nn.fifo_buffer" in message
    assert [name for name, _ in info.value.ops] == ["nn.fifo_buffer", "dft", "nn.fifo_buffer"]


def import_relay_text(text):
    return import_relay(parse(text, "model.relay"))


@pytest.mark.parametrize("body,construct", [
    ("let %r = ref(%x);\n  ref_read(%r)", "ref"),
])
def test_unsupported_constructs_are_named_with_location(body, construct):
    text = relay_fn("%c: bool, %x: Tensor[(2), float32]", body)
    with pytest.raises(UnsupportedOpError) as info:
        import_relay_text(text)
    assert f"{construct} (not supported by the importer)" in str(info.value)
    assert "model.relay:" in str(info.value)


def test_recursive_global_becomes_a_relax_function():
    text = HEADER + """\
def @loop(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  @loop(%x)
}
def @main(%x: Tensor[(2), float32]) {
  @loop(%x)
}
"""
    # A recursive global is a recursive Relax function (tests/importer/test_control_flow.py
    # runs terminating ones), called from main through its GlobalVar.
    mod = import_relay_text(text)
    loop = [gv for gv in mod.functions if gv.name_hint.startswith("loop")]
    assert len(loop) == 1
    assert f"{loop[0].name_hint}(" in mod["main"].script()


def test_adt_match_is_named():
    text = HEADER + """\
type Opt { Some(Tensor[(2), float32]), Nil }
def @main(%x: Tensor[(2), float32]) {
  match (Some(%x)) {
    Some(%y) => %y,
    Nil => %x,
  }
}
"""
    with pytest.raises(UnsupportedOpError) as info:
        import_relay_text(text)
    assert "match (ADT pattern matching)" in str(info.value)
    assert "ADT constructor" in str(info.value)
