"""Parser tests: the seed model, typed literals, error messages."""
from __future__ import annotations

import os
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

GOLDEN = pathlib.Path(__file__).resolve().parents[3] / "shared" / "relay_golden"


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
    if not path.exists():
        pytest.skip("golden models not available")
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
