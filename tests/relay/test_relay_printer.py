"""Printer and analysis tests: literals, metadata round trip, deep programs."""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax.relay import ast as A
from bmlib_relax.relay.analysis import free_vars, post_order, structural_equal
from bmlib_relax.relay.metadata import decode_ndarray, encode_ndarray, parse_metadata
from bmlib_relax.relay.parser import parse, parse_expr
from bmlib_relax.relay.printer import astext, print_type


def _roundtrip_expr(text: str) -> A.Expr:
    expr = parse_expr(text)
    again = parse_expr(astext(expr))
    assert structural_equal(expr, again), astext(expr)
    return again


@pytest.mark.parametrize("literal, dtype, value", [
    ("1", "int32", 1), ("-100", "int32", -100), ("2147483648", "int64", 2**31),
    ("-42i16", "int16", -42), ("7i64", "int64", 7), ("3u8", "uint8", 3),
    ("1.5", "float32", 1.5), ("1f", "float32", 1.0), ("1e-05f", "float32", 1e-05),
    ("3f16", "float16", 3.0), ("0.5f64", "float64", 0.5), ("True", "bool", True),
    ("False", "bool", False), ("--10", "int32", 10), ("---10", "int32", -10),
])
def test_literals(literal, dtype, value):
    const = _roundtrip_expr(literal)
    assert isinstance(const, A.Constant) and const.data.ndim == 0
    assert str(const.data.dtype) == dtype
    assert const.data.item() == pytest.approx(value)


@pytest.mark.parametrize("literal, check", [
    ("inff", np.isposinf), ("-inff", np.isneginf), ("nanf", np.isnan)])
def test_special_float_literals(literal, check):
    const = _roundtrip_expr(literal)
    assert const.data.dtype == np.float32 and check(const.data)


def test_projection_and_dotted_names():
    fn = parse_expr("fn (%input.1: (float32, float32), %t: (float32, (float32, float32))) "
                    "{ (%input.1.0, %t.1.0, (%t).1, %input.1) }")
    a, b, c, d = fn.body.fields
    assert isinstance(a, A.TupleGetItem) and a.tuple_value is fn.params[0] and a.index == 0
    assert b.tuple_value.tuple_value is fn.params[1] and (b.index, b.tuple_value.index) == (0, 1)
    assert c.tuple_value is fn.params[1]
    assert d is fn.params[0]
    _roundtrip_expr("fn (%input.1: (float32, float32)) { %input.1.0 }")


def test_attrs_values():
    call = parse_expr('free_var %x: float32; f(%x, a=1, b=-2.5, c="s\\"q", d=[1, [2, 3]], '
                      'e=True, f=None, g=meta[VirtualDevice][0], h=[], i=1e-05, j=float32,)')
    attrs = call.attrs
    assert attrs["a"] == 1 and attrs["b"] == -2.5 and attrs["c"] == 's"q'
    assert attrs["d"] == (1, (2, 3)) and attrs["e"] is True and attrs["f"] is None
    assert isinstance(attrs["g"], A.MetaRef) and attrs["g"].kind == "VirtualDevice"
    assert attrs["h"] == () and attrs["i"] == 1e-05 and attrs["j"] == "float32"
    _roundtrip_expr('free_var %x: float32; f(%x, a=1, b=-2.5, c="s\\"q", d=[1, [2, 3]], '
                    'e=True, f=None, g=meta[VirtualDevice][0], h=[], i=1e-05)')


def test_types_print_and_parse():
    for text in ["Tensor[(1, 3, ?, 224), float32]", "Tensor[(), int64]", "float32",
                 "(float32, Tensor[(2), int8])", "(float32,)", "()", "fn (float32) -> bool",
                 "List[Tensor[(?), float32]]", "Ref[int32]", "_"]:
        from bmlib_relax.relay.parser import parse_type
        ty = parse_type(text)
        assert parse_type(print_type(ty)) == ty


def test_adt_module_roundtrip():
    text = """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}
def @length[A](%l: List[A]) -> int32 {
  match (%l) {
    Cons(_, %rest) => add(1, @length(%rest)),
    Nil => 0,
  }
}
def @main() { @length(Cons(1f, Cons(2f, Nil))) }
"""
    mod = parse(text)
    assert set(mod.type_definitions) == {"List"}
    again = parse(astext(mod))
    assert structural_equal(mod, again)


def test_metadata_constants_roundtrip():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([True, False])
    x = A.Var("x", A.TensorType((2, 3), "float32"))
    body = A.Call(A.Op("where"), (A.Constant(b), A.Call(A.Op("add"), (x, A.Constant(w))), x))
    mod = A.IRModule({"main": A.Function((x,), body)})
    text = astext(mod)
    assert "meta[relay.Constant][1] /* ty=Tensor[(2), bool] */" in text
    assert "#[metadata]" in text
    again = parse(text)
    assert structural_equal(mod, again)
    assert not structural_equal(
        mod, parse(text.replace("#[metadata]", "").split("\n{")[0]))
    consts = [n for n in post_order(again["main"]) if isinstance(n, A.Constant)]
    np.testing.assert_array_equal(consts[0].data, b)
    no_meta = astext(mod, show_meta_data=False)
    assert "#[metadata]" not in no_meta and "meta[relay.Constant][0]" in no_meta


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32",
                                   "int64", "uint8", "bool"])
def test_ndarray_codec(dtype):
    arr = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    blob = b"xx" + encode_ndarray(arr) + b"tail"
    out, end = decode_ndarray(blob, 2)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)
    assert blob[end:] == b"tail"
    with pytest.raises(ValueError):
        decode_ndarray(blob[:20], 2)


def test_parse_metadata_rejects_garbage():
    with pytest.raises(ValueError):
        parse_metadata("{not json")
    with pytest.raises(ValueError):
        parse_metadata('{"root": 1, "nodes": [{}, {"type_key": "Array"}]}')


def test_deep_let_chain_is_iterative():
    n = 25000
    lines = ["fn (%x0: float32) {"]
    for i in range(1, n):
        lines.append(f"  let %x{i}: float32 = add(%x{i - 1}, 1f);")
    lines.append(f"  %x{n - 1}\n}}")
    fn = parse_expr("\n".join(lines))
    assert isinstance(fn.body, A.Let)
    assert free_vars(fn.body) == [fn.params[0]]
    assert len(list(post_order(fn))) > 2 * n
    again = parse_expr(astext(fn))
    assert structural_equal(fn, again)


def test_deep_graph_chain_is_iterative():
    n = 25000
    lines = ["def @main(%a: float32) {", "  %0 = negative(%a);"]
    for i in range(1, n):
        lines.append(f"  %{i} = add(%{i - 1}, %a);")
    lines.append(f"  %{n - 1}\n}}")
    mod = parse("\n".join(lines))
    again = parse(astext(mod))
    assert structural_equal(mod, again)


def test_structural_equal_distinguishes():
    same = parse_expr("fn (%a: float32, %b: float32) { add(%a, %b) }")
    assert structural_equal(same, parse_expr("fn (%x: float32, %y: float32) { add(%x, %y) }"))
    assert not structural_equal(same, parse_expr("fn (%a: float32, %b: float32) { add(%b, %a) }"))
    assert not structural_equal(same, parse_expr("fn (%a: float32, %b: int32) { add(%a, %b) }"))
    assert not structural_equal(parse_expr("1f"), parse_expr("1"))
    assert not structural_equal(parse_expr("f(1, a=[1])"), parse_expr("f(1, a=[1.0])"))


def test_free_vars_order_and_from_expr():
    expr = parse_expr("free_var %b: float32; free_var %a: float32; "
                      "let %c = add(%b, %a); multiply(%c, %b)")
    assert [v.name for v in free_vars(expr)] == ["b", "a"]
    mod = A.IRModule.from_expr(expr)
    assert [p.name for p in mod["main"].params] == ["b", "a"]
    assert structural_equal(mod, parse(astext(mod)))


def test_var_name_clashes_are_renamed():
    x1, x2 = A.Var("x", A.TensorType((), "float32")), A.Var("x", A.TensorType((), "float32"))
    one = A.Var("0", A.TensorType((), "float32"))
    body = A.Call(A.Op("add"), (A.Call(A.Op("add"), (x1, x2)), one))
    fn = A.Function((x1, x2, one), body)
    text = astext(fn)
    assert structural_equal(fn, parse_expr(text)), text


@pytest.mark.parametrize("dtype, v019_name, code", [("float8_e4m3fn", "e4m3_float8", 6),
                                                     ("float8_e5m2", "e5m2_float8", 7)])
def test_float8_is_printed_with_v019s_name_and_code(dtype, v019_name, code):
    # v0.19's DLDataType2String wrote e4m3_float8 / e5m2_float8, and its parser knew no
    # other spelling; the metadata says tvm_version 0.19.0, so its codes are v0.19's.
    import json
    import struct

    import ml_dtypes

    data = np.array([0.5, -1.25, 2.0, 0.0], dtype=getattr(ml_dtypes, dtype))
    text = astext(_float8_module(dtype, data))
    program = text.split("#[metadata]")[0]
    assert f"Tensor[(4), {v019_name}]" in program and f'dtype="{v019_name}"' in program
    assert dtype not in program
    meta = json.loads(text.split("#[metadata]", 1)[1])
    assert meta["attrs"]["tvm_version"] == "0.19.0"
    blob = __import__("base64").b64decode(meta["b64ndarrays"][0])
    # header: magic u64, reserved u64, device (2 x i32), ndim i32, then DLDataType code u8
    assert struct.unpack_from("<B", blob, 8 + 8 + 8 + 4)[0] == code
    back = parse(text)
    assert back["main"].params[0].type_annotation.dtype == dtype
    np.testing.assert_array_equal(
        next(n for n in post_order(back["main"]) if isinstance(n, A.Constant)).data
        .astype("float32"), data.astype("float32"))


def _float8_module(dtype: str, data: np.ndarray):
    from bmlib_relax import relay

    x = relay.var("x", shape=(4,), dtype=dtype)
    body = relay.add(relay.cast(x, "float32"), relay.cast(relay.const(data), "float32"))
    return relay.IRModule.from_expr(relay.Function([x], relay.cast(body, dtype)))
