"""Parser edge cases checked against TVM v0.19's Relay parser (src/relay/parser/parser.cc,
tokenizer.h, src/support/scalars.cc) and its printer (src/support/str_escape.h):
names with '/', rebinding a name in one scope, runs of '-', ``\\xHH`` string
escapes, ``{ expr }`` blocks, parenthesised attribute values, float16 rounding and
the messages for an incomplete #[metadata] section."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import tvm
from conftest import offloaded_partitions

import bmlib_relax
from bmlib_relax.errors import ParseError
from bmlib_relax.relay import ast as A
from bmlib_relax.relay.metadata import encode_ndarray
from bmlib_relax.relay.parser import parse, parse_expr

HEADER = '#[version = "0.0.5"]\n'


def _compile_offloaded(text: str, params=None):
    """Compile ``text`` with bmlib offload and assert something was offloaded."""
    model = bmlib_relax.compile(text, params=params)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model


# ---------------------------------------------------------------------- names with '/'
# v0.19 tokenizer.h: IsIdentLetter is '_', '/', ASCII letters; IsIdent adds digits.  The
# printer writes name_hint as is, so ONNX/TF models print %gpu_0/res5_1_branch2a_w_0 and
# %tf_bert_for_sequence_classification/bert/embeddings/Gather/resource.
SLASH_DENSE = HEADER + (
    "def @main(%data: Tensor[(2, 3), float32], %gpu_0/fc_w_0: Tensor[(4, 3), float32]) {\n"
    "  %0 = nn.dense(%data, %gpu_0/fc_w_0, units=4);\n"
    "  nn.relu(%0)\n"
    "}\n")


def test_local_names_may_contain_slashes():
    fn = parse(SLASH_DENSE)["main"]
    data, weight = fn.params
    assert weight.name == "gpu_0/fc_w_0"
    assert fn.body.args[0].args[1] is weight


def test_tf_style_names_in_a_top_level_fn():
    name = "tf_bert_for_sequence_classification/bert/embeddings/Gather/resource"
    mod = parse(HEADER + f"fn (%{name}: Tensor[(2), float32], %bert/x_1: Tensor[(2), float32])"
                f" {{\n  add(%{name}, %bert/x_1)\n}}\n")
    fn = mod["main"]
    assert [p.name for p in fn.params] == [name, "bert/x_1"]
    assert fn.body.args == fn.params


def test_global_names_may_contain_slashes():
    mod = parse(HEADER + "def @enc/block_0(%x: float32) { %x }\n"
                "def @main(%y: float32) { @enc/block_0(%y) }\n")
    assert mod["main"].body.op.name == "enc/block_0"


def test_a_name_cannot_start_with_a_slash():
    # '/' is tested (division or comment) before IsIdentLetter in TokenizeOnce
    with pytest.raises(ParseError):
        parse(HEADER + "def @main(%/x: float32) { %/x }")


def test_slash_inside_a_name_is_not_a_comment_but_spaced_comments_still_are():
    # Inside a name Relay keeps reading IsIdent characters, '/' included, so `%x//c`
    # is the one name "x//c"; after a blank a comment starts as usual.
    with pytest.raises(ParseError, match="undefined variable %x//c .*blank after %x"):
        parse(HEADER + "def @main(%x: float32) {\n  %x//c\n}")
    with pytest.raises(ParseError, match="undefined variable %a/ .*blank after %a"):
        parse(HEADER + "def @main(%a: float32, %b: float32) { %a/%b }")
    fn = parse(HEADER + "def @main(%x: float32) {\n  %x // c\n  /* d */ }")["main"]
    assert fn.body is fn.params[0]
    body = parse(HEADER + "def @main(%a: float32, %b: float32) { %a / %b }")["main"].body
    assert body.op.name == "divide"


def test_slash_names_are_ascii_only():
    with pytest.raises(ParseError):
        parse(HEADER + "def @main(%aé/b: float32) { %aé/b }")


def _dense_relu_reference(data, weight):
    return np.maximum(data @ weight.T, 0)


@pytest.mark.parametrize("form", ["dict", "params_bytes", "npz_bytes"])
def test_weight_named_with_a_slash_binds_by_name(form):
    rng = np.random.default_rng(3)
    data = rng.uniform(-1, 1, (2, 3)).astype("float32")
    weight = rng.uniform(-1, 1, (4, 3)).astype("float32")
    params = {"gpu_0/fc_w_0": weight}
    if form == "params_bytes":
        params = bytes(tvm.runtime.save_param_dict({"gpu_0/fc_w_0": tvm.runtime.tensor(weight)}))
    elif form == "npz_bytes":
        buf = io.BytesIO()
        np.savez(buf, **{"gpu_0/fc_w_0": weight})
        params = buf.getvalue()
    model = _compile_offloaded(SLASH_DENSE, params)
    assert [i["name"] for i in model.report.inputs] == ["data"]
    np.testing.assert_allclose(np.asarray(model(data)), _dense_relu_reference(data, weight),
                               rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- rebinding
# v0.19 ScopeStack::Add, AddFreeVar and AddGraphBinding use unordered_map::insert: a
# second binding of a name in the same scope is dropped and the first one wins.  TVM's
# printer never writes that, so the parser refuses it instead of choosing a meaning.
@pytest.mark.parametrize("text, name, first, second", [
    # ParseFunctionDef binds the params in its scope and parses the body without a new
    # one; ParseBindingExpr binds the first `let` before its PushScope: same scope.
    ("def @main(%x: float32, %y: float32) {\n  let %x = add(%y, 1f);\n  multiply(%x, 2f)\n}",
     "%x", (1, 11), (2, 7)),
    ("def @main(%y: float32, %x: float32) {\n  foo(%y);\n  let %x = %y;\n  %x\n}",
     "%x", (1, 24), (3, 7)),
    ("def @main(%x: float32,\n          %x: float32) {\n  %x\n}", "%x", (1, 11), (2, 11)),
    ("def @main(%x: float32) {\n  %0 = add(%x, %x);\n  %0 = multiply(%0, %0);\n  %0\n}",
     "%0", (2, 3), (3, 3)),
    ("def @main(%x: float32) {\n  %0 = add(%x, %x);\n  %1 = if (True) {\n"
     "    %0 = negative(%x);\n    %0\n  } else { %0 };\n  %1\n}", "%0", (2, 3), (4, 5)),
    ("free_var %x: float32;\nfree_var %x: int32;\n%x", "%x", (1, 10), (2, 10)),
    ("type L { C(float32, float32) }\ndef @main(%l: L) {\n  match (%l) {\n"
     "    C(%a, %a) => %a\n  }\n}", "%a", (4, 7), (4, 11)),
    # ParseMatchArm binds the pattern in the arm's scope, where the first let binds too
    ("type L { C(float32) }\ndef @main(%l: L) {\n"
     "  match (%l) { C(%a) => let %a = negative(%a); %a }\n}", "%a", (3, 18), (3, 29)),
], ids=["let_param", "let_param_after_stmt", "dup_param", "graph", "graph_in_branch",
        "free_var", "pattern", "let_pattern_var"])
def test_second_binding_in_one_scope_is_a_parse_error(text, name, first, second):
    with pytest.raises(ParseError) as info:
        parse(text, "case.relay")
    err = info.value
    assert (err.line, err.column) == second
    assert name in err.message
    assert f"case.relay:{first[0]}:{first[1]}" in err.message


def test_let_shadowing_that_relay_allows_still_works():
    # After a `let` ParseBindingExpr pushes a scope, so later lets shadow freely.
    expr = parse_expr("let %a = 1f; let %b = 2f; let %a = 3f; %a")
    assert expr.body.body.body is expr.body.body.var
    # A param is only in the scope of the *first* let of the body.
    fn = parse(HEADER + "def @main(%x: float32) {\n  let %y = add(%x, 1f);\n"
               "  let %x = multiply(%y, 2f);\n  %x\n}")["main"]
    inner = fn.body.body
    assert inner.var.name == "x" and inner.var is not fn.params[0]
    assert inner.body is inner.var and inner.value.args[0] is fn.body.var
    # Nested fn params, if branches, parentheses, blocks and match arms open scopes.
    fn = parse(HEADER + "def @main(%x: float32, %c: bool) {\n"
               "  %0 = fn (%x: float32) { negative(%x) };\n"
               "  %1 = if (%c) { let %x = 2f; %x } else { %x };\n"
               "  %2 = (let %x = 3f; %x);\n"
               "  %3 = %0(%1);\n"
               "  %4 = add(%3, %2);\n"
               "  { let %x = 4f; add(%x, %4) }\n}")["main"]
    x = fn.params[0]
    assert fn.body.var.name == "x" and fn.body.var is not x
    assert fn.body.body.args[0] is fn.body.var
    call3, paren2 = fn.body.body.args[1].args
    closure, branch = call3.op, call3.args[0]
    assert closure.body.args[0] is closure.params[0] is not x
    assert branch.true_branch.body is branch.true_branch.var is not x
    assert branch.false_branch is x
    assert paren2.body is paren2.var is not x
    # A match arm's scope (ParseMatchArm) holds its pattern variables, which shadow.
    mod = parse("type L { C(float32) }\ndef @main(%a: float32, %l: L) {\n"
                "  match (%l) { C(%a) => negative(%a) }\n}")
    clause = mod["main"].body.clauses[0]
    pattern_var = clause.lhs.patterns[0].var
    assert clause.rhs.args[0] is pattern_var is not mod["main"].params[0]


def test_each_definition_numbers_its_graph_bindings_afresh():
    # TVM's printer numbers once per module, this project's printer once per definition;
    # a number reused by a later def means that def's own node.
    mod = parse("def @f(%x: float32) { %0 = add(%x, %x); %0 }\n"
                "def @main(%y: float32) { %0 = negative(%y); %0 }")
    assert mod["main"].body.args[0] is mod["main"].params[0]


def test_a_free_var_is_looked_up_after_every_scope_as_in_relay():
    # ScopeStack::Lookup searches the scopes first, then free_vars.
    expr = parse_expr("let %x = 1f; free_var %x: int32; %x")
    assert expr.body is expr.var
    mod = parse("free_var %x: float32; negative(%x)")
    assert [p.name for p in mod["main"].params] == ["x"]


def test_p_same_scope_rebind_no_longer_compiles_to_a_different_meaning():
    text = HEADER + ("def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {\n"
                     "  let %x = add(%y, 1f);\n  multiply(%x, 2f)\n}")
    with pytest.raises(ParseError, match="%x"):
        bmlib_relax.compile(text)


# ---------------------------------------------------------------------- runs of '-'
# TokenizeOnce folds a run of '-' before a digit into the literal: an even run is
# positive.  ParseNumber reads the digits with stoll, then ValueToIntImm checks the width.
@pytest.mark.parametrize("text, value, dtype", [
    ("--10", 10, "int32"), ("---10", -10, "int32"),
    ("--2147483648", 2147483648, "int64"), ("-2147483648", -2147483648, "int32"),
    ("--32767i16", 32767, "int16"), ("--1.5f", 1.5, "float32"), ("---2f64", -2.0, "float64"),
    ("--inff", np.inf, "float32"), ("---inff", -np.inf, "float32"),
])
def test_a_run_of_minus_signs_is_part_of_the_literal(text, value, dtype):
    got = parse_expr(text)
    assert isinstance(got, A.Constant)
    assert got.data.dtype == np.dtype(dtype) and got.data == value


@pytest.mark.parametrize("text", ["--9223372036854775808", "--32768i16",
                                  "--2147483648i32", "----128i8"])
def test_a_run_of_minus_signs_overflowing_the_type_is_a_parse_error(text):
    with pytest.raises(ParseError, match="out of range") as info:
        parse_expr(f"add(1, {text})")
    assert info.value.column == 8


@pytest.mark.parametrize("text", ["- -2147483648", "- -9223372036854775808i64", "- 3u8",
                                  "- -128i8", "- - -32768i16"])
def test_a_unary_minus_that_would_wrap_is_a_parse_error(text):
    with pytest.raises(ParseError, match="out of range"):
        parse_expr(text)


def test_a_unary_minus_that_fits_still_folds():
    got = parse_expr("- -2147483647")
    assert got.data.dtype == np.int32 and got.data == 2147483647
    got = parse_expr("- 0u8")
    assert got.data.dtype == np.uint8 and got.data == 0


def test_minus_runs_in_attribute_values():
    call = parse_expr("nn.pad(1f, pad_value=--2, pad_width=[[---1, 1]])")
    assert call.attrs["pad_value"] == 2
    assert call.attrs["pad_width"] == ((-1, 1),)


# ---------------------------------------------------------------------- string escapes
def _str_escape(value: str) -> str:
    """TVM v0.19's support::StrEscape (hex form) over the UTF-8 bytes of ``value``."""
    out = []
    for byte in value.encode("utf-8"):
        char = chr(byte)
        if " " <= char <= "~" and char not in '\\"':
            out.append(char)
        elif char in '"\\':
            out.append("\\" + char)
        elif char in "\t\r\n":
            out.append({"\t": "\\t", "\r": "\\r", "\n": "\\n"}[char])
        else:
            out.append(f"\\x{byte >> 4:X}{byte & 15:X}")
    return "".join(out)


@pytest.mark.parametrize("value", ["café", "a\x01b", "tab\there\nnl\r", 'q"uo\\te',
                                   "日本語/层", "\x7f\x00end", "\\x41 is not A", "€"])
def test_string_attributes_invert_the_printers_escapes(value):
    call = parse_expr(f'foo(1f, name="{_str_escape(value)}")')
    assert call.attrs["name"] == value


def test_hex_escapes_that_are_not_utf8_are_a_parse_error():
    with pytest.raises(ParseError, match="UTF-8") as info:
        parse_expr('foo(1f, name="ab\\xFFc")')
    assert info.value.column == 14


# ---------------------------------------------------------------------- blocks, (v) attrs
def test_a_block_is_an_expression_statement():
    # ParseExpr, case kLCurly: `{` expr `}` in a new scope
    assert parse_expr("{ add(1f, 2f) }").op.name == "add"
    expr = parse_expr("let %a = 1f; { add(%a, 2f) }")
    assert expr.body.args[0] is expr.var
    expr = parse_expr("{ let %z = 1f; %z }; 2f")
    assert isinstance(expr, A.Let) and isinstance(expr.value, A.Let)
    assert float(expr.body.data) == 2.0
    fn = parse(HEADER + "def @main(%x: float32) { { add(%x, 1f) } }")["main"]
    assert fn.body.args[0] is fn.params[0]
    with pytest.raises(ParseError, match="undefined variable %z"):
        parse_expr("{ let %z = 1f; %z }; %z")


def test_parenthesised_attribute_value_is_the_value():
    # ParseAttributeValue, case kOpenParen: Bracket(ParseAttributeValue) -- one value
    call = parse_expr("clip(1f, a_min=(0f), a_max=((1.5f)))")
    assert call.attrs["a_min"] == 0.0 and call.attrs["a_max"] == 1.5
    call = parse_expr("sum(1f, axis=[(1), 2])")
    assert call.attrs["axis"] == (1, 2)


def test_parenthesised_attribute_values_compile_like_plain_ones():
    x = np.array([[-2.0, -1.0, 0.5], [1.0, -3.0, 2.0]], "float32")
    text = HEADER + ("def @main(%x: Tensor[(2, 3), float32]) {\n"
                     "  %0 = nn.relu(%x);\n"
                     "  %1 = clip(%x, a_min=(-1f), a_max=(1f));\n"
                     "  %2 = nn.leaky_relu(%x, alpha=(0.5f));\n"
                     "  (%0, %1, %2)\n}\n")
    out = _compile_offloaded(text)(x)
    np.testing.assert_allclose(out[0], np.maximum(x, 0))
    np.testing.assert_allclose(out[1], np.minimum(np.maximum(x, -1), 1))
    np.testing.assert_allclose(out[2], np.where(x > 0, x, 0.5 * x))


# ---------------------------------------------------------------------- float16
def test_float16_literals_round_through_float32_as_relay_did():
    # FloatImmToNDArray: __gnu_f2h_ieee(static_cast<float>(value)).  2049.0000000001
    # is 2049 exactly in float32 (its ulp there is 2^-12), a tie between the float16
    # neighbours 2048 and 2050 (ulp 2), which rounds to even: 2048.  Rounding the
    # double directly would give 2050.
    assert float(parse_expr("2049.0000000001f16").data) == 2048.0
    # 1 + 2^-11 + ~9e-16: float32 drops the ~9e-16, leaving the tie 1 + 2^-11 -> 1.0
    assert float(parse_expr("1.00048828125000090949f16").data) == 1.0
    assert parse_expr("1.5f16").data.dtype == np.float16


# ---------------------------------------------------------------------- metadata messages
def _metadata_text(nodes, blobs=()) -> str:
    md = json.dumps({"root": 1, "nodes": nodes, "b64ndarrays": list(blobs), "attrs": {}})
    return (HEADER + "def @main(%x: Tensor[(3), float32]) {\n"
            "  add(%x, meta[relay.Constant][0] /* ty=Tensor[(3), float32] */)\n}\n"
            "#[metadata]\n" + md)


def test_metadata_constant_without_data_says_so():
    nodes = [{"type_key": ""}, {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
             {"type_key": "Array", "data": [3]},
             {"type_key": "relay.Constant", "attrs": {"span": "0"}}]
    with pytest.raises(ParseError, match="no 'data'") as info:
        parse(_metadata_text(nodes))
    assert "has no #[metadata] section" not in info.value.message
    assert (info.value.line, info.value.column) == (3, 11)


def test_metadata_without_constants_says_so():
    nodes = [{"type_key": ""}, {"type_key": "Map", "keys": ["VirtualDevice"], "data": [2]},
             {"type_key": "Array", "data": []}]
    with pytest.raises(ParseError, match="no relay.Constant") as info:
        parse(_metadata_text(nodes))
    assert "has no #[metadata] section" not in info.value.message


def test_metadata_constant_with_data_still_parses():
    blob = base64.b64encode(encode_ndarray(np.arange(3, dtype="float32"))).decode()
    nodes = [{"type_key": ""}, {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
             {"type_key": "Array", "data": [3]},
             {"type_key": "relay.Constant", "attrs": {"data": "0", "span": "0"}}]
    const = parse(_metadata_text(nodes, [blob]))["main"].body.args[1]
    np.testing.assert_array_equal(const.data, np.arange(3, dtype="float32"))


@pytest.mark.parametrize("v019, tvm_name", [("e4m3_float8", "float8_e4m3fn"),
                                             ("e5m2_float8", "float8_e5m2")])
def test_v019_float8_dtype_names_compute(v019, tvm_name):
    """v0.19 printed float8 as ``e4m3_float8``/``e5m2_float8`` (TVM 0.20 renamed them,
    apache/tvm#17712): in a tensor type and a cast's dtype they are TVM 0.27's names (they
    were "unknown dtype")."""
    import ml_dtypes

    text = ('#[version = "0.0.5"]\n'
            f'def @main(%x: Tensor[(3), {v019}]) {{ cast(cast(%x, dtype="float32"), '
            f'dtype="{v019}") }}')
    assert parse(text)["main"].params[0].type_annotation.dtype == tvm_name
    x = np.array([0.5, -3, 1.25], getattr(ml_dtypes, tvm_name))
    out = bmlib_relax.compile(text, params={})(x=x)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out.astype("float32"), x.astype("float32"))
