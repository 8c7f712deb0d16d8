"""Calls Relay's parser refused (unknown attribute, value of the wrong kind, wrong argument
count) are refused at import with a located ConversionError naming the op and attribute,
for every op alike (bmlib_relax.relay.op_schema), never run with a wrong meaning."""
from __future__ import annotations

import pytest

from bmlib_relax import import_relay
from bmlib_relax.errors import ConversionError
from bmlib_relax.relay import parse
from bmlib_relax.relay.op_schema import op_schema

X = "%x: Tensor[(2, 3), float32]"
CONV = "%x: Tensor[(1, 1, 4, 4), float32], %w: Tensor[(1, 1, 1, 1), float32]"


def _import(params: str, body: str):
    return import_relay(parse(f"def @main({params}) {{\n  {body}\n}}\n", "m.relay"))


@pytest.mark.parametrize("params, body, message", [
    (X, "sum(%x, axes=[1])", r"m.relay:2:3: sum: unknown attribute 'axes'"),
    (CONV, "nn.conv2d(%x, %w, stride=[2, 2])", r"nn.conv2d: unknown attribute 'stride'"),
    (X, "nn.relu(%x, bogus=1)", r"nn.relu: unknown attribute 'bogus' .*attributes: none"),
    (X, 'sum(%x, axis=[1], keepdims="False")', r'keepdims="False": expected a bool, got a str'),
    (X, "sum(%x, axis=[1.5])", r"axis=\[1.5\]: expected an integer or a list of integers"),
    (X, "nn.softmax(%x, axis=0.9f)", r"nn.softmax: attribute axis=0.9: expected an integer"),
    (X, 'sum(%x, axis="hello")', r'axis="hello": expected an integer or a list of integers, '
                                 r"got a string"),
    (X, "add(%x, %x, %x)", r"add: expects 2 argument\(s\) \(lhs, rhs\), got 3"),
    (X, "add(%x)", r"add: expects 2 argument\(s\) \(lhs, rhs\), got 1"),
    (X, "nn.relu(%x, %x)", r"nn.relu: expects 1 argument\(s\)"),
])
def test_bad_call_is_refused_with_place_op_and_attr(params, body, message):
    with pytest.raises(ConversionError, match=message) as info:
        _import(params, body)
    assert info.value.location.startswith("m.relay:2:")


@pytest.mark.parametrize("params, body", [
    # What TVM's printer emits must stay accepted: "" dtypes, layouts, C++-only fields.
    (CONV, 'nn.conv2d(%x, %w, padding=[0, 0, 0, 0], channels=1, kernel_size=[1, 1], '
           'data_layout="NCHW", kernel_layout="OIHW", out_layout="", out_dtype="")'),
    (X, "sum(%x, axis=[1], keepdims=True, exclude=False)"),
    (X, "sum(%x, axis=[1], keepdims=1)"),
    ("%x: Tensor[(1, 1, 2, 2), float32]", "nn.upsampling(%x, scale_h=2f, scale_w=2f)"),
    ("%x: Tensor[(1, 1, 2, 2), float32]", "nn.upsampling(%x, scale_h=2, scale_w=2)"),
    (X, "clip(%x, a_min=0, a_max=6f)"),
    (X, "device_copy(%x, src_virtual_device=None, dst_virtual_device=None)"),
])
def test_printed_attributes_stay_accepted(params, body):
    _import(params, body)


def test_every_converted_op_has_a_schema():
    from bmlib_relax.importer import supported_ops

    missing = [op for op in supported_ops() if op_schema(op) is None]
    assert missing == []
