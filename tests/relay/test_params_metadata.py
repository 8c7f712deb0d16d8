"""The ``#[metadata]`` decoder gets the same guards as weights files: wrong JSON
types, dangling node indices, damaged or huge arrays and deep nesting are the
project's own errors naming the node / key / constant -- never AttributeError,
KeyError, TypeError, RecursionError or a large allocation.
"""
from __future__ import annotations

import base64
import copy
import json
import struct

import numpy as np
import pytest

from bmlib_relax.errors import ParamFormatError, ParseError
from bmlib_relax.relay import ast as A
from bmlib_relax.relay.metadata import NDARRAY_MAGIC, encode_ndarray, parse_metadata
from bmlib_relax.relay.parser import parse
from bmlib_relax.relay.printer import astext

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)
MASK = np.array([True, False])


def module_text() -> str:
    x = A.Var("x", A.TensorType((2, 3), "float32"))
    body = A.Call(A.Op("where"), (A.Constant(MASK), A.Call(A.Op("add"), (x, A.Constant(WEIGHT))),
                                  x))
    return astext(A.IRModule({"main": A.Function((x,), body)}))


TEXT = module_text()
PROGRAM, METADATA = TEXT.split("#[metadata]")
DOC = json.loads(METADATA)
CONST_NODE = DOC["nodes"][DOC["nodes"][DOC["nodes"][DOC["root"]]["data"][0]]["data"][0]]
CONST_INDEX = DOC["nodes"].index(CONST_NODE)


def with_doc(edit) -> str:
    doc = copy.deepcopy(DOC)
    edit(doc)
    return json.dumps(doc)


def test_valid_metadata_decodes_constants():
    meta = parse_metadata(METADATA)
    np.testing.assert_array_equal(meta["constants"][0], WEIGHT)
    np.testing.assert_array_equal(meta["constants"][1], MASK)
    assert meta["counts"] == {"relay.Constant": 2}


def _set(path, value):
    def edit(doc):
        target = doc
        for key in path[:-1]:
            target = target[key] if not callable(key) else key(doc)
        target[path[-1]] = value
    return edit


def root(doc):
    return doc["nodes"][doc["root"]]


def array(doc):
    return doc["nodes"][root(doc)["data"][0]]


def const(doc):
    return doc["nodes"][array(doc)["data"][0]]


# name -> (edit of the JSON document, text the error must contain)
WRONG_TYPES = {
    "nodes_is_null": (lambda doc: doc.clear() or doc.update({"nodes": None}),
                      "'nodes' must be a list"),
    "nodes_is_an_object": (_set(["nodes"], {"a": 1}), "'nodes' must be a list"),
    "root_is_a_list": (_set(["root"], [1]), "'root' must be an integer"),
    "root_is_a_float": (_set(["root"], 1.5), "'root' must be an integer"),
    "root_out_of_range": (_set(["root"], 10**6), "refers to node 1000000"),
    "root_is_negative": (_set(["root"], -1), "refers to node -1"),
    "root_is_huge_digit_string": (_set(["root"], "9" * 5000), "'root' must be an integer"),
    "root_node_is_a_list": (lambda doc: doc["nodes"].__setitem__(doc["root"], [1, 2]),
                            "node 1 must be a JSON object"),
    "root_node_not_a_map": (lambda doc: root(doc).__setitem__("type_key", "Array"),
                            "is not a Map"),
    "map_data_is_an_object": (lambda doc: root(doc).__setitem__("data", {"x": 1}),
                              "node 1: 'data' must be a JSON list"),
    "map_keys_is_a_string": (lambda doc: root(doc).__setitem__("keys", "relay.Constant"),
                             "node 1: 'keys' must be a JSON list"),
    "map_keys_and_values_differ": (lambda doc: root(doc).__setitem__("keys", ["a", "b"]),
                                   "2 keys but 1 values"),
    "map_key_is_a_number": (lambda doc: root(doc).__setitem__("keys", [5]),
                            "key must be a string"),
    "map_value_not_an_array": (lambda doc: array(doc).__setitem__("type_key", "Map"),
                               "is not an Array"),
    "array_item_is_a_word": (lambda doc: array(doc).__setitem__("data", ["three"]),
                             "node 2: data[0] must be an integer"),
    "array_item_is_null": (lambda doc: array(doc).__setitem__("data", [None]),
                           "node 2: data[0] must be an integer, got null"),
    "array_item_dangles": (lambda doc: array(doc).__setitem__("data", [99]),
                           "refers to node 99"),
    "constant_node_is_a_string": (
        lambda doc: doc["nodes"].__setitem__(array(doc)["data"][0], "relay.Constant"),
        "must be a JSON object"),
    "constant_attrs_is_a_list": (lambda doc: const(doc).__setitem__("attrs", [0]),
                                 "'attrs' must be a JSON object"),
    "constant_data_is_a_word": (lambda doc: const(doc)["attrs"].__setitem__("data", "zero"),
                                "attrs.data must be an integer"),
    "constant_data_out_of_range": (lambda doc: const(doc)["attrs"].__setitem__("data", "7"),
                                   "refers to array 7"),
    "b64ndarrays_is_a_string": (_set(["b64ndarrays"], "AAAA"),
                                "'b64ndarrays' must be a list"),
    "b64ndarray_entry_is_a_number": (lambda doc: doc["b64ndarrays"].__setitem__(0, 12),
                                     "b64ndarrays[0] must be a string"),
    "old_format_key_node_dangles": (
        lambda doc: root(doc).pop("keys") and root(doc).__setitem__("data", [50, 2]),
        "refers to node 50"),
    "old_format_odd_entries": (
        lambda doc: root(doc).pop("keys") and root(doc).__setitem__("data", [2]),
        "odd number"),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_metadata_wrong_json_types_raise_param_format_error_naming_node(case):
    edit, message = WRONG_TYPES[case]
    with pytest.raises(ParamFormatError) as info:
        parse_metadata(with_doc(edit))
    assert message in str(info.value)
    assert str(info.value).startswith("#[metadata]")


@pytest.mark.parametrize("text", ["[1, 2]", '"text"', "12", "null", "{}",
                                  '{"nodes": [], "root": 0}'])
def test_metadata_that_is_not_a_node_graph_is_rejected(text):
    with pytest.raises(ParamFormatError):
        parse_metadata(text)


@pytest.mark.parametrize("opener", ["[", '{"a":'], ids=["lists", "objects"])
def test_deeply_nested_metadata_json_is_an_error_not_recursion_error(opener):
    text = opener * 100_000 + "1" + ("]" if opener == "[" else "}") * 100_000
    with pytest.raises(ParamFormatError, match="nested more than"):
        parse_metadata(text)


def test_brackets_inside_metadata_strings_do_not_count_as_nesting():
    doc = copy.deepcopy(DOC)
    doc["attrs"]["note"] = "[" * 500 + '\\"{' * 100
    meta = parse_metadata(json.dumps(doc))
    np.testing.assert_array_equal(meta["constants"][0], WEIGHT)


def test_metadata_integer_of_thousands_of_digits_is_an_error():
    with pytest.raises(ParamFormatError, match="bad JSON"):
        parse_metadata('{"root": ' + "9" * 5000 + ', "nodes": []}')


def _with_blob(raw: bytes) -> str:
    return with_doc(lambda doc: doc["b64ndarrays"].__setitem__(
        0, base64.b64encode(raw).decode()))


def test_truncated_metadata_array_names_constant_and_offset():
    raw = encode_ndarray(WEIGHT)
    with pytest.raises(ParamFormatError, match="truncated tensor data") as info:
        parse_metadata(_with_blob(raw[:-4]))
    assert info.value.name == "meta[relay.Constant][0]"
    assert info.value.offset == len(raw) - WEIGHT.nbytes
    assert "b64ndarrays[0]" in str(info.value)


def test_metadata_array_with_trailing_bytes_is_rejected():
    raw = encode_ndarray(WEIGHT)
    with pytest.raises(ParamFormatError, match="trailing") as info:
        parse_metadata(_with_blob(raw + b"\0\0"))
    assert info.value.offset == len(raw)


def test_metadata_array_declaring_2_pow_40_elements_is_rejected_without_allocating():
    raw = struct.pack("<QQiiiBBH", NDARRAY_MAGIC, 0, 1, 0, 2, 2, 32, 1)
    raw += struct.pack("<qqq", 2**20, 2**20, 4 * 2**40) + bytes(16)
    with pytest.raises(ParamFormatError, match="truncated tensor data") as info:
        parse_metadata(_with_blob(raw))
    assert info.value.name == "meta[relay.Constant][0]"


def test_metadata_array_with_vector_lanes_is_rejected():
    raw = bytearray(encode_ndarray(WEIGHT))
    struct.pack_into("<H", raw, 30, 4)  # lanes of the DLDataType
    with pytest.raises(ParamFormatError, match="lanes"):
        parse_metadata(_with_blob(bytes(raw)))


def test_metadata_error_through_parse_is_a_parse_error_at_the_metadata_line():
    text = PROGRAM + "#[metadata]" + with_doc(
        lambda doc: array(doc).__setitem__("data", ["three"]))
    with pytest.raises(ParseError) as info:
        parse(text, "model.relay")
    line = PROGRAM.count("\n") + 1
    assert info.value.line == line and info.value.source_name == "model.relay"
    assert "invalid #[metadata] section" in str(info.value)
    assert "node 2: data[0] must be an integer" in str(info.value)


def test_deep_metadata_through_parse_is_a_parse_error():
    with pytest.raises(ParseError, match="nested more than"):
        parse(PROGRAM + "#[metadata]" + "[" * 200_000)
