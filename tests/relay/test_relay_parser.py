"""Parser tests: the seed model, typed literals, error messages."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from bmlib_relax.errors import ParseError
from bmlib_relax.relay import ast as A
from bmlib_relax.relay.parser import parse, parse_expr

SEED = """\
def @main(%data1: Tensor[(128), float32], %data: Tensor[(1, 128, 12, 40), float32], %weight: Tensor[(128, 128, 1, 1), float32], %gamma: Tensor[(128), float32], %beta: Tensor[(128), float32], %moving_mean: Tensor[(128), float32], %moving_var: Tensor[(128), float32]) {
%0 = reshape(%data1, newshape=[1, 128, 1, 1]);
%1 = nn.conv2d(%data, %weight, padding=[0, 0, 0, 0]);
%2 = add(%0, %1);
%3 = nn.batch_norm(%2, %gamma, %beta, %moving_mean, %moving_var);
%4 = %3.0;
nn.relu(%4)
}
"""

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data"  # vendored golden texts


def _check_seed(mod: A.IRModule) -> None:
    fn = mod["main"]
    assert isinstance(fn, A.Function)
    assert all(isinstance(p, A.Var) for p in fn.params)
    data1, data, weight, gamma, beta, mean, var = fn.params
    body = fn.body
    assert isinstance(body, A.Call) and body.op.name == "nn.relu"
    tgi = body.args[0]
    assert isinstance(tgi, A.TupleGetItem) and tgi.index == 0
    bn = tgi.tuple_value
    assert isinstance(bn, A.Call) and bn.op.name == "nn.batch_norm"
    assert bn.args[1] is gamma and bn.args[4] is var
    add = bn.args[0]
    assert add.op.name == "add"
    reshape, conv = add.args
    assert reshape.args[0] is data1
    assert reshape.attrs["newshape"] == (1, 128, 1, 1)
    assert conv.args == (data, weight)
    assert conv.attrs.padding == (0, 0, 0, 0)
    for node in (fn, body, tgi, bn, add, reshape, conv, data1):
        assert node.span is not None


@pytest.mark.parametrize("header", ["", '#[version = "0.0.5"]\n'])
def test_seed_parses(header):
    _check_seed(parse(header + SEED))


def test_seed_with_type_comments():
    path = GOLDEN / "seed_reshape_conv2d_add_bn_relu" / "model.relay"
    mod = parse(path.read_text(), str(path))
    _check_seed(mod)
    assert mod["main"].ret_type == A.TensorType((1, 128, 12, 40), "float32")


def test_graph_binding_is_shared():
    fn = parse("def @main(%x: float32) { %0 = add(%x, %x); multiply(%0, %0) }")["main"]
    assert fn.body.args[0] is fn.body.args[1]
    assert fn.body.args[0].args[0] is fn.params[0]


def test_meta_constant_without_metadata():
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float32]) {\n'
                '  add(%x, meta[relay.Constant][2] /* ty=Tensor[(3), float32] */)\n}\n')
    const = mod["main"].body.args[1]
    assert isinstance(const, A.Constant)
    assert const.data is None and const.meta_index == 2
    assert const.type_annotation == A.TensorType((3,), "float32")


def test_missing_paren_error():
    text = SEED.replace("padding=[0, 0, 0, 0])", "padding=[0, 0, 0, 0]")
    with pytest.raises(ParseError) as info:
        parse(text, "seed.relay")
    err = info.value
    assert err.message == "expected ')' to close call to nn.conv2d, got ';'"
    assert (err.line, err.column) == (3, 52)
    assert str(err).startswith("seed.relay:3:52: expected ')'")


def test_undefined_variable_error():
    with pytest.raises(ParseError) as info:
        parse("def @main(%x: float32) {\n  add(%x, %y)\n}")
    assert info.value.message == "undefined variable %y"
    assert (info.value.line, info.value.column) == (2, 11)


@pytest.mark.parametrize("text, message, line, column", [
    ("def @main(%x: float32) {\n  add(%x, 1f7)\n}", "invalid literal suffix 'f7'", 2, 11),
    ("def @main(%x: float32) {\n  /* never closed\n  %x\n}", "unterminated comment", 2, 3),
    ("def @main(%x: float32) {\n  add(%x, %x", "unexpected end of input while parsing call "
     "arguments", 2, 13),
    ("def @main(%x: Tensor[(1, 2), float32) { %x }", "expected ']' to close type, got ')'",
     1, 37),
    ("def @main(%x: float32) { %x }\ndef @main(%x: float32) { %x }",
     "duplicate definition of global function @main", 2, 1),
    ('def @main() { f(a="abc) }', "unterminated string literal", 1, 19),
    ("def @main(%x: float32) { let %y = %x }", "expected ';' after let binding, got '}'",
     1, 38),
    ("2147483648i32", "integer literal 2147483648i32 out of range for int32", 1, 1),
    ("meta[type_key][1337]", "unknown metadata kind 'type_key' in meta[type_key][1337]", 1, 6),
    ("(" * 5000, "nesting too deep (more than 1000 levels)", 1, 1001),
], ids=lambda v: v[:24] if isinstance(v, str) else str(v))
def test_error_messages(text, message, line, column):
    with pytest.raises(ParseError) as info:
        parse(text, "case.relay")
    err = info.value
    assert (err.message, err.line, err.column) == (message, line, column)
    assert str(err).splitlines()[0] == f"case.relay:{line}:{column}: {message}"
    assert str(err).splitlines()[-1].strip() == "^"


def test_old_style_fn_and_bare_expression_modules():
    mod = parse("v0.0.4\nfn (%x: int32) -> int32 {\n  let %y = add(%x, 1);\n  %y\n}\n")
    assert isinstance(mod["main"].body, A.Let)
    mod = parse("free_var %x: float32; negative(%x)")
    assert [p.name for p in mod["main"].params] == ["x"]


def test_closures_attrs_and_params_attrs():
    mod = parse('#[version = "0.0.5"]\n'
                'def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(2), float32], '
                'Compiler="x") -> Tensor[(2), float32] {\n'
                '  %0 = fn (%p: Tensor[(2), float32], Primitive=1, Composite="bmlib.relu",) {\n'
                '    nn.relu(%p)\n  };\n  %0(%x)\n}\n')
    fn = mod["main"]
    assert fn.attrs["Compiler"] == "x"
    assert isinstance(fn.params[0].attrs["virtual_device"], A.MetaRef)
    closure = fn.body.op
    assert isinstance(closure, A.Function)
    assert dict(closure.attrs) == {"Primitive": 1, "Composite": "bmlib.relu"}


def test_if_match_refs():
    expr = parse_expr("fn (%c: bool) { let %r = ref(1); let %u = ref_write(%r, 2); "
                      "if (%c) { ref_read(%r) } else { 3 } }")
    assert isinstance(expr.body.value, A.RefCreate)
    assert isinstance(expr.body.body.value, A.RefWrite)
    assert isinstance(expr.body.body.body, A.If)
    with pytest.raises(ParseError, match="undefined variable %x"):
        parse_expr("if (True) { let %x = (); () } else { %x }")


def test_graph_binding_named_in_an_if_branch_is_the_same_node_after_the_if():
    # TVM's printer names a node where it first prints it: a node used in a branch and
    # after the ``if`` comes out defined inside the branch, and Relay's parser (one
    # flat table of %N) resolved the later use to it.
    text = ("def @main(%x: Tensor[(2, 3), float32], %b: bool) {\n"
            "  %1 = if (%b) {\n    %0 = add(%x, 1f);\n    multiply(%0, 2f)\n"
            "  } else {\n    %x\n  };\n  add(%1, %0)\n}\n")
    body = parse(text)["main"].body
    then_add = body.args[0].true_branch.args[0]
    assert body.args[1] is then_add  # shared, not a copy
    # A numbered name from another definition, or a let-bound one, stays unknown.
    with pytest.raises(ParseError, match="undefined variable %0"):
        parse("def @f(%x: float32) { %0 = add(%x, %x); %0 }\n"
              "def @main(%y: float32) { multiply(%y, %0) }")
    with pytest.raises(ParseError, match="undefined variable %v"):
        parse_expr("fn (%b: bool) { %0 = if (%b) { let %v = 1f; %v } else { 2f }; %v }")


# ---------------------------------------------------------------------- no raw exceptions
@pytest.mark.parametrize("text, column", [
    ("extern typeT[ typeA]", 8), ("extern deftype T]\n", 8), ("extern type", 12),
    ('#[version = "0.0.5"]\nextern List[A]\ndef @main() { 1 }', 8),
])
def test_extern_not_followed_by_type_is_a_parse_error_with_location(text, column):
    with pytest.raises(ParseError, match="expected 'type'|end of input") as info:
        parse(text)
    assert info.value.column == column


def test_extern_type_still_declares_an_abstract_type():
    mod = parse('#[version = "0.0.5"]\nextern type Opaque[A]\ndef @main() { 1 }')
    assert "Opaque" in mod.type_definitions
    assert mod.type_definitions["Opaque"].constructors == ()


HUGE_LITERALS = {  # name -> (text, message, column of the bad token within text)
    "integer": ("1" * 5000, "integer literal .* out of range \\(5000 digits\\)", 1),
    "negative_int64": ("-" + "7" * 5000 + "i64", "integer literal .* out of range", 1),
    "attribute_integer": ("nn.pad(%x, pad_value=" + "9" * 5000 + ")",
                          "integer literal .* out of range", 22),
    "tuple_index": ("(1, 2)." + "1" * 5000, "tuple index .* too large \\(5000 digits\\)", 7),
    "metadata_index": ("meta[relay.Constant][" + "9" * 5000 + "]",
                       "metadata index .* too large", 22),
    "float_overflowing_to_inf": ("1" + "0" * 400 + "f", "float literal .* out of range for "
                                 "float32", 1),
    "float64_exponent": ("1e999f64", "float literal .* out of range for float64", 1),
}


@pytest.mark.parametrize("case", sorted(HUGE_LITERALS))
def test_huge_numeric_literals_are_parse_errors_with_location(case):
    text, message, column = HUGE_LITERALS[case]
    source = "fn (%x: (int32, int32)) { " + text + " }"
    with pytest.raises(ParseError, match=message) as info:
        parse_expr(source)
    assert (info.value.line, info.value.column) == (1, 26 + column)
    assert len(str(info.value)) < 1000  # the literal is abbreviated, not echoed


def test_projection_with_thousands_of_digits_after_a_variable_is_a_parse_error():
    with pytest.raises(ParseError, match="tuple index .* too large") as info:
        parse_expr("fn (%x: (int32, int32)) { %x." + "1" * 5000 + " }")
    assert info.value.column == 27


def test_large_but_valid_literals_still_parse():
    assert parse_expr("9223372036854775807i64").data == np.iinfo("int64").max
    assert parse_expr("000000000000000000000000000000000000000000000012").data == 12
    assert parse_expr("(1, 2).000000000000000000000000000001").index == 1
    assert np.isinf(parse_expr("-inff").data)


def test_a_variable_name_that_is_not_ascii_says_what_a_name_is():
    # It was reported as "unexpected character '%'", pointing at the sigil.
    with pytest.raises(ParseError, match=r"1:11: variable name %'é'\.\.\.: a name starts"):
        parse('def @main(%é: Tensor[(2), float32]) { %é }')


def test_dtypes_without_bits_are_32_bit_as_in_relay():
    # TVM v0.19's own tests write ``def @main(%n: int)``: its parser read any type name
    # starting with int/uint/float as a dtype, 32 bits when none are given
    main = parse('#[version = "0.0.5"]\n'
                 'def @main(%n: int, %u: uint, %x: Tensor[(2), float]) -> float { %x }')["main"]
    assert [p.type_annotation for p in main.params] == [
        A.TensorType((), "int32"), A.TensorType((), "uint32"), A.TensorType((2,), "float32")]
    assert main.ret_type == A.TensorType((), "float32")
