"""Relay text printed without its ``#[metadata]`` section (``print(mod)``).

TVM v0.19 printed split's ``indices_or_sections`` (boxed runtime ints) as
``meta[runtime.BoxInt][N]``.  Where the call's ``/* ty=... */`` type determines the
value the parser fills it in and says so in a :class:`RecoveredMetadataWarning`;
otherwise the import fails naming the op, attribute, location and why.
``meta[relay.Constant][N]`` tensors are never recovered.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bmlib_relax import ConversionError, RecoveredMetadataWarning, import_relay
from bmlib_relax.relay import ast as A
from bmlib_relax.relay import parse
from bmlib_relax.relay.analysis import post_order_list
from bmlib_relax.relay.parser import parse_expr
from bmlib_relax.relay.printer import astext

from conftest import DATA, Golden, run_plain

HEADER = '#[version = "0.0.5"]\n'
SOURCE = "snippet.relay"
BOX = "meta[runtime.BoxInt]"


def _t(*shape: int | str) -> str:
    dims = ", ".join(str(d) for d in shape)
    return f"Tensor[({dims}{',' if len(shape) == 1 else ''}), float32]"


def _split_text(value: str, parts: list[tuple], axis: int = 1, x_shape=(2, 7)) -> str:
    """``@main`` returning every part of one split printed with ``value`` and the
    ``/* ty= */`` type of ``parts`` (part shapes); the split is at line 3, column 8."""
    ty = "(" + ", ".join(_t(*p) for p in parts) + ")"
    fields = ", ".join(f"%0.{i}" for i in range(len(parts)))
    return (f"{HEADER}def @main(%x: {_t(*x_shape)}) {{\n"
            f"  %0 = split(%x, indices_or_sections={value}, axis={axis}) /* ty={ty} */;\n"
            f"  ({fields},)\n}}\n")


def _parse_recording(text: str, source: str = SOURCE):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = parse(text, source)
    recovered = [w for w in caught if issubclass(w.category, RecoveredMetadataWarning)]
    return module, recovered


def _split_attr(module: A.IRModule):
    (call,) = [n for n in post_order_list(module["main"])
               if isinstance(n, A.Call) and isinstance(n.op, A.Op) and n.op.name == "split"]
    return call.attrs["indices_or_sections"]


def _run(module: A.IRModule, *inputs: np.ndarray):
    out = run_plain(import_relay(module), list(inputs))
    return out if isinstance(out, list) else [out]


def test_split_indices_recovered_from_printed_part_sizes():
    text = _split_text(f"[{BOX}[0], {BOX}[1]]", [(2, 2), (2, 3), (2, 2)])
    with pytest.warns(RecoveredMetadataWarning) as record:
        module = parse(text, SOURCE)
    assert len(record) == 1
    warning = record[0]
    assert warning.filename == __file__  # points at the caller of parse
    message = str(warning.message)
    assert f"{SOURCE}:3:8: split indices_or_sections=[2, 5]" in message
    assert f"[{BOX}[0], {BOX}[1]]" in message
    (rec,) = warning.message.recoveries
    assert (rec.location, rec.op, rec.attr, rec.value) == (
        f"{SOURCE}:3:8", "split", "indices_or_sections", (2, 5))
    assert _split_attr(module) == (2, 5)
    assert "indices_or_sections=[2, 5]" in astext(module, False)
    x = np.arange(14, dtype="float32").reshape(2, 7)
    for got, want in zip(_run(module, x), np.split(x, [2, 5], axis=1), strict=True):
        np.testing.assert_array_equal(got, want)


def test_split_sections_recovered_from_number_of_parts():
    text = _split_text(f"{BOX}[0]", [(2, 2, 4)] * 3, axis=-2, x_shape=(2, 6, 4))
    module, record = _parse_recording(text)
    assert len(record) == 1 and f"{SOURCE}:3:8: split indices_or_sections=3" in \
        str(record[0].message)
    assert _split_attr(module) == 3
    x = np.arange(48, dtype="float32").reshape(2, 6, 4)
    for got, want in zip(_run(module, x), np.split(x, 3, axis=1), strict=True):
        np.testing.assert_array_equal(got, want)


def test_sections_need_only_the_number_of_parts():
    # A dynamic axis still gives the number of sections; a literal in a list is kept.
    module, record = _parse_recording(_split_text(f"{BOX}[0]", [(2, "?")] * 2))
    assert len(record) == 1 and _split_attr(module) == 2
    module, record = _parse_recording(_split_text(f"[2, {BOX}[3]]", [(2, 2), (2, 3), (2, 2)]))
    assert len(record) == 1 and _split_attr(module) == (2, 5)


def test_one_warning_per_parse_lists_every_recovery():
    body = "".join(f"  %{i} = split(%x, indices_or_sections={BOX}[{i}], axis=1) "
                   f"/* ty=({_t(2, 3)}, {_t(2, 3)}) */;\n" for i in range(25))
    text = (f"{HEADER}def @main(%x: {_t(2, 6)}) {{\n{body}"
            f"  ({', '.join(f'%{i}.0' for i in range(25))})\n}}\n")
    module, record = _parse_recording(text)
    assert len(record) == 1
    assert [r.location for r in record[0].message.recoveries] == \
        [f"{SOURCE}:{3 + i}:{8 if i < 10 else 9}" for i in range(25)]
    assert "... and 5 more" in str(record[0].message)


def test_parse_expr_recovers_too():
    text = (f"free_var %x: {_t(4)};\n"
            f"%0 = split(%x, indices_or_sections={BOX}[0]) /* ty=({_t(2)}, {_t(2)}) */;\n%0.1")
    with pytest.warns(RecoveredMetadataWarning, match=r"<string>:2:6: split "
                                                      r"indices_or_sections=2"):
        expr = parse_expr(text)
    assert expr.tuple_value.attrs["indices_or_sections"] == 2


@pytest.mark.parametrize("value,parts,why", [
    # one value means equal sections; the printed parts differ
    (f"{BOX}[0]", [(2, 2), (2, 5)], r"one value means equal sections, but the printed parts "
                                    r"have sizes \[2, 5\] along axis 1"),
    # indices need the sizes of all parts but the last
    (f"[{BOX}[0], {BOX}[1]]", [(2, "?"), (2, 3), (2, 2)],
     r"part sizes \[\?, 3, 2\] along axis 1 are not all static"),
    (f"[{BOX}[0]]", [(2, 2), (2, 3), (2, 2)], r"1 indices but the printed type has 3 parts"),
    (f"[3, {BOX}[0]]", [(2, 2), (2, 3), (2, 2)], r"index 3 contradicts the printed part sizes"),
    # split's values are boxed ints; another box kind is not what Relay printed
    ("meta[runtime.BoxFloat][0]", [(2, 2), (2, 5)], r"holds runtime.BoxFloat"),
])
def test_value_the_type_does_not_determine_stays_an_error(value, parts, why):
    module, record = _parse_recording(_split_text(value, parts))
    assert record == []
    with pytest.raises(ConversionError, match=rf"^{SOURCE}:3:8: split: indices_or_sections="
                                              rf"\S.* has no value: the text has no "
                                              rf"#\[metadata\] section and the printed type "
                                              rf"does not give it: .*{why}") as info:
        import_relay(module)
    assert info.value.op == "split" and info.value.location == f"{SOURCE}:3:8"


def test_call_without_printed_type_stays_an_error():
    text = (f"{HEADER}def @main(%x: {_t(2, 6)}) {{\n"
            f"  %0 = split(%x, indices_or_sections={BOX}[0], axis=1);\n  %0.0\n}}\n")
    module, record = _parse_recording(text)
    assert record == []
    with pytest.raises(ConversionError, match=rf"{SOURCE}:3:8: split: indices_or_sections="
                                              rf"meta\[runtime.BoxInt\]\[0\] has no value: .*"
                                              r"the call has no readable "
                                              r"/\* ty=\.\.\. \*/ comment"):
        import_relay(module)


def test_meta_constant_without_metadata_stays_an_error():
    text = (f"{HEADER}def @main(%x: {_t(4, 5)}) {{\n"
            f"  take(%x, meta[relay.Constant][0] /* ty=Tensor[(3), int32] */, axis=0)"
            f" /* ty={_t(3, 5)} */\n}}\n")
    module, record = _parse_recording(text)
    assert record == []
    with pytest.raises(ConversionError, match=rf"{SOURCE}:3:12: constant: "
                                              r"meta\[relay.Constant\]\[0\] has no value"):
        import_relay(module)


def test_boxed_values_in_a_metadata_section_are_read_not_recovered():
    nodes = [{"type_key": ""},
             {"type_key": "Map", "keys": ["runtime.BoxInt"], "data": [2]},
             {"type_key": "Array", "data": [3, 4]},
             {"type_key": "runtime.BoxInt", "attrs": {"value": "1"}},
             {"type_key": "runtime.BoxInt", "attrs": {"value": "4"}}]
    meta = json.dumps({"root": 1, "nodes": nodes, "b64ndarrays": [],
                       "attrs": {"tvm_version": "0.19.0"}})
    # The printed type says [2, 5]; the metadata section's values win.
    text = _split_text(f"[{BOX}[0], {BOX}[1]]", [(2, 1), (2, 3), (2, 3)]) + \
        f"#[metadata]\n{meta}\n"
    module, record = _parse_recording(text)
    assert record == []
    assert [(r.kind, r.index) for r in _split_attr(module)] == [("runtime.BoxInt", 0),
                                                                ("runtime.BoxInt", 1)]
    x = np.arange(14, dtype="float32").reshape(2, 7)
    for got, want in zip(_run(module, x), np.split(x, [1, 4], axis=1), strict=True):
        np.testing.assert_array_equal(got, want)


def test_op_split_golden_loads_from_its_text_as_printed():
    golden = Golden(DATA / "op_split")
    module, record = _parse_recording(golden.text, "op_split/model.relay")
    assert len(record) == 1
    assert [(r.location, r.printed, r.value) for r in record[0].message.recoveries] == [
        ("op_split/model.relay:3:8", f"{BOX}[0]", 3), ("op_split/model.relay:4:8", f"{BOX}[1]", 3)]
    (x,) = golden.inputs().values()
    outs = _run(module, x)
    for got, want in zip(outs, golden.expected(), strict=True):
        np.testing.assert_allclose(got, want, **golden.tolerance)


def test_op_take_golden_parses_but_its_constant_is_not_recovered():
    golden = Golden(DATA / "op_take")
    module, record = _parse_recording(golden.text, "op_take/model.relay")
    assert record == []
    with pytest.raises(ConversionError, match=r"op_take/model.relay:3:13: constant: "
                                              r"meta\[relay.Constant\]\[0\] has no value"):
        import_relay(module)
