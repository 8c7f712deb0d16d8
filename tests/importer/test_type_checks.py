"""Programs Relay's type checker refused are refused at import with a located
ConversionError (annotations, if conditions and branches, tuple indices, tensor types),
never compiled to return a value of another type; and compile() takes a file path."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.errors import ConversionError

from .helpers import check, import_text, relay_fn

X = "%x: Tensor[(2, 3), float32]"


@pytest.mark.parametrize("params, body, message", [
    (X, None, r"the result of @main is declared Tensor\[\(6\), int8\] but is "
              r"Tensor\[\(2, 3\), float32\]"),
    (X, "let %y: Tensor[(2, 3), int32] = negative(%x); %y",
     r"let %y is declared Tensor\[\(2, 3\), int32\] but is Tensor\[\(2, 3\), float32\]"),
    (X, "%0 = fn (%a: Tensor[(5, 5), int8]) { negative(%a) }; %0(%x)",
     r"parameter %a is declared Tensor\[\(5, 5\), int8\]"),
    ("%c: bool, " + X, "if (%c) { %x } else { sum(%x) }",
     r"if: the branches have different types: Tensor\[\(2, 3\), float32\] and "
     r"Tensor\[\(\), float32\]"),
    ("%c: bool, " + X, "if (%c) { (%x, %x) } else { %x }", r"branches have different types"),
    ("%m: Tensor[(2, 3), bool], " + X, "if (%m) { %x } else { negative(%x) }",
     r"condition must be Tensor\[\(\), bool\], got Tensor\[\(2, 3\), bool\]"),
    ("%c: int32, " + X, "if (%c) { %x } else { negative(%x) }",
     r"condition must be Tensor\[\(\), bool\], got Tensor\[\(\), int32\]"),
    ("%c: float32, " + X, "if (%c) { %x } else { negative(%x) }",
     r"condition must be Tensor\[\(\), bool\], got Tensor\[\(\), float32\]"),
    (X, "%0 = (%x, %x); %0.5", r"tuple index 5 is out of range for a tuple of 2 field"),
    ("%t: (Tensor[(2), float32], Tensor[(2), float32])", "%t.7", r"tuple index 7"),
    ("%x: Tensor[(2147483647, 2147483647, 3), float32]", "negative(%x)", r"more than 2\*\*63"),
    ("%x: Tensor[(1, 2147483648), float32]", "negative(%x)", r"a dim of 2\*\*31 or more"),
    ("%x: Tensor[(-1, 3), float32]", "negative(%x)", r"a dim is negative"),
    ("%x: Tensor[(2), handle]", "%x", r"dtype 'handle' is not a tensor element type"),
    ("%x: Tensor[(2), void]", "%x", r"dtype 'void' is not a tensor element type"),
    ("%x: Tensor[(2), float32x4]", "negative(%x)", r"vector dtype 'float32x4'"),
])
def test_ill_typed_program_is_refused_with_place(params, body, message):
    if body is None:
        text = f"def @main({params}) -> Tensor[(6), int8] {{\n  negative(%x)\n}}\n"
    else:
        text = relay_fn(params, body)
    with pytest.raises(ConversionError, match=message) as info:
        import_text(text)
    assert info.value.location.startswith("snippet.relay:")


def test_well_typed_annotations_and_branches_still_run():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    text = relay_fn("%c: bool, %x: Tensor[(?, 3), float32]",
                    "let %y: Tensor[(?, 3), float32] = negative(%x);\n"
                    "  %f = fn (%a: Tensor[(2, 3), float32]) { nn.relu(%a) };\n"
                    "  if (%c) { %f(%y) } else { add(%y, 1f) }")
    check(text, [np.array(False), x], -x + 1)
    check(text, [np.array(True), x], np.maximum(-x, 0))


def test_unit_let_of_tvm_parser_tests_still_imports():
    import_text('#[version = "0.0.5"]\ndef @main() { let %_ : int8 = (); () }\n')


def test_compile_accepts_a_path(tmp_path):
    path = tmp_path / "model.relay"
    path.write_text(relay_fn(X, "negative(%x)"))
    model = bmlib_relax.compile(pathlib.Path(path), {})
    np.testing.assert_allclose(model(x=np.ones((2, 3), "float32")), -np.ones((2, 3)))
    path.write_text(relay_fn(X, "sum(%x, axes=[1])"))
    with pytest.raises(ConversionError, match=r"model.relay:3:3: sum: unknown attribute"):
        bmlib_relax.compile(pathlib.Path(path), {})


def _nested_ifs(depth: int) -> str:
    return "#[version = \"0.0.5\"]\ndef @main(%c: bool, %x: Tensor[(2), float32]) {\n" + \
        "if (%c) {\n" * depth + "%x" + "\n} else {\n%x\n}" * depth + "\n}\n"


@pytest.fixture
def low_recursion_limit():
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(350)
    yield
    sys.setrecursionlimit(previous)


def test_the_import_nests_on_its_own_deep_stack(low_recursion_limit):
    """The importer recurses a few frames per if/let level through TVM's FFI: it runs on
    a thread with a 1 GiB stack and its own recursion limit, so the caller's limit does
    not bound it — and a limit raised by the caller no longer lets it overflow the main
    thread's stack (400 nested ifs crashed the process once the limit allowed them)."""
    from bmlib_relax import import_relay
    from bmlib_relax.relay import parse

    mod = import_relay(parse(_nested_ifs(150)))
    assert "main" in [gv.name_hint for gv in mod.functions]


def test_a_compile_nests_past_the_callers_recursion_limit(low_recursion_limit):
    """The passes after the import (branch lifting, partitioning, the report) recurse
    through TVM's FFI too: the whole compile runs on the deep stack, with its limit."""
    model = bmlib_relax.compile(_nested_ifs(150))
    x = np.array([1.5, -2.0], "float32")
    np.testing.assert_array_equal(model(c=np.array(True), x=x), x)
    assert sys.getrecursionlimit() == 350  # the caller's limit, restored


def test_nesting_past_what_the_compile_takes_is_a_conversion_error(monkeypatch,
                                                                    low_recursion_limit):
    import bmlib_relax.importer as importer

    monkeypatch.setattr(importer, "IMPORT_RECURSION_LIMIT", 400)
    with pytest.raises(ConversionError, match="nests too deeply to import"):
        importer.import_relay(bmlib_relax.relay.parse(_nested_ifs(300)))


def test_a_path_that_cannot_be_read_is_a_param_error(tmp_path):
    with pytest.raises(bmlib_relax.ParamError, match="cannot read the Relay file"):
        bmlib_relax.compile(tmp_path / "missing.relay")
    (tmp_path / "latin1.relay").write_bytes(b"def @main() { 1f } \xe9")
    with pytest.raises(bmlib_relax.ParamError, match="cannot read the Relay file"):
        bmlib_relax.compile(tmp_path / "latin1.relay")


@pytest.mark.parametrize("call", [
    "nn.conv2d(%d, %w, padding=[0, 0, 0, 0]{out})",
    "nn.dense(reshape(%d, newshape=[25, 4]), reshape(%w, newshape=[4, 4]){out})",
])
@pytest.mark.parametrize("data, weight, refused", [
    ("bool", "float32", True), ("float16", "float32", True), ("int32", "float32", True),
    ("uint8", "int8", False),
])
def test_product_operands_of_mixed_dtypes(call, data, weight, refused):
    # a mix TVM cannot multiply failed deep in LLVM at build; uint8 x int8 is QNN's
    text = relay_fn(f"%d: Tensor[(1, 4, 5, 5), {data}], %w: Tensor[(4, 4, 1, 1), {weight}]",
                    call.format(out="" if refused else ', out_dtype="int32"'))
    if refused:
        with pytest.raises(ConversionError, match=f"operand data types {data} and {weight}"):
            import_text(text)
    else:
        import_text(text)


@pytest.mark.parametrize("params, call, message", [
    ("%d: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(4, 4, 3, 0), float32]",
     "nn.conv2d(%d, %w, padding=[1, 1, 1, 1])", r"kernel window \(weight shape \(4, 4, 3, 0\)\)"),
    ("%d: Tensor[(1, 5, 5, 4), float32], %w: Tensor[(0, 3, 4, 4), float32]",
     'nn.conv2d(%d, %w, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="HWIO")',
     r"kernel window \(weight shape \(0, 3, 4, 4\)\)"),
    ("%d: Tensor[(3, 0), float32], %w: Tensor[(4, 0), float32]", "nn.dense(%d, %w)",
     r"reduction \(K = 0\)"),
])
def test_a_product_over_an_empty_reduction_is_named(params, call, message):
    # every output would be 0 and TVM cannot vectorize the templates' empty loops
    with pytest.raises(ConversionError, match=message + " is empty"):
        import_text(relay_fn(params, call))


def test_a_conv_with_no_output_channels_still_imports():
    import_text(relay_fn("%d: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(0, 4, 3, 3), float32]",
                         "nn.conv2d(%d, %w, padding=[1, 1, 1, 1])"))


@pytest.mark.parametrize("call, message", [
    ("nn.max_pool2d(%x, pool_size=[9, 2], strides=[2, 2], padding=[0, 0, 0, 0])",
     r"window \[9, 2\] \(dilated: 9 in spatial dim 0\) is larger than the padded input \(6\)"),
    ("nn.avg_pool2d(%x, pool_size=[2, 2], strides=[0, 2])", r"strides=\[0, 2\] must be positive"),
    ("nn.conv2d(%x, %w, strides=[1, -1], padding=[1, 1, 1, 1])",
     r"strides=\[1, -1\] must be positive"),
    ("nn.conv2d(%x, %w, padding=[-2, 0, 0, 0])", r"padding=\[-2, 0, 0, 0\] must not be negative"),
    ("nn.conv2d(%x, %w, dilation=[4, 1])", r"dilated: 9 in spatial dim 0\) is larger"),
])
def test_a_window_past_its_input_is_named(call, message):
    # Relax computed a negative output extent, which the build turned into bad_alloc
    params = "%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(8, 4, 3, 3), float32]"
    with pytest.raises(ConversionError, match=message):
        import_text(relay_fn(params, call))


def test_an_op_relax_refuses_is_named_by_its_name_not_its_node():
    with pytest.raises(ConversionError, match=r"relax\.log requires the input tensor to have "
                                              r"float dtype") as info:
        import_text(relay_fn("%x: Tensor[(2), int32]", "log(%x)"))
    assert "ir.Op(" not in str(info.value)


@pytest.mark.parametrize("params, body, message", [
    # TVM parses these dtypes but computes only with whole bytes: it failed deep in the
    # build ("do not support T.float33") or at run time ("dtype.bits % 8 == 0")
    ("%x: Tensor[(2), float32]", 'cast(%x, dtype="int7")', r"cast: dtype 'int7': TVM cannot"),
    ("%x: Tensor[(2), float32]", 'cast(%x, dtype="float33")', r"cast: dtype 'float33'"),
    ("%x: Tensor[(2), float32]", 'cast(%x, dtype="int128")', r"cast: dtype 'int128'"),
    ("%x: Tensor[(2), float32]", 'zeros(shape=[2], dtype="float8")', r"zeros: dtype 'float8'"),
    ("%x: Tensor[(2), float32]", 'full(1, shape=[2], dtype="int4")', r"full: dtype 'int4'"),
    ("%x: Tensor[(2), float32]", 'cast(%x, dtype="void")', r"cast: dtype='void' is not a "
                                                            r"tensor element type"),
    ("%x: Tensor[(2), float32]", 'cast(%x, dtype="")', r"cast: dtype='' is not a tensor"),
    ("%x: Tensor[(2), int7]", "%x", r"2:\d+: expected a dtype like float32, got 'int7'"),
    ("%x: Tensor[(2), uint1]", "%x", r"dtype 'uint1'.*Relay's bool was uint1: write bool"),
])
def test_a_dtype_tvm_cannot_compute_is_named(params, body, message):
    from bmlib_relax.errors import BmlibError

    with pytest.raises(BmlibError, match=message):
        bmlib_relax.compile(relay_fn(params, body), params={})


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "uint16"])
def test_the_byte_sized_dtypes_still_compute(dtype):
    import ml_dtypes

    np_dtype = getattr(ml_dtypes, dtype) if dtype[0] in "bf" else dtype
    x = np.array([0.5, -3.0], "float32") if dtype != "uint16" else np.array([1, 7], "float32")
    text = relay_fn("%x: Tensor[(2), float32]",
                    f'cast(cast(%x, dtype="{dtype}"), dtype="float32")')
    check(text, [x], x.astype(np_dtype).astype("float32"))


@pytest.mark.parametrize("body, message", [
    ("clip(%x, a_min=0f)", r"clip: missing attribute 'a_max' \(Relay required it\)"),
    ("nn.max_pool2d(%x)", r"nn.max_pool2d: missing attribute 'pool_size'")])
def test_a_required_attribute_left_out_is_named(body, message):
    """A converter's KeyError for an attribute the call lacks read "clip: 'a_max'"."""
    with pytest.raises(ConversionError, match=message):
        bmlib_relax.compile(relay_fn("%x: Tensor[(1, 1, 2, 3), float32]", body), params={})


def test_a_type_error_in_infer_type_leaves_no_open_blocks(capfd):
    """InferType converts each call to read its Relax type; a refused one left the
    BlockBuilder's blocks open, and TVM printed "BlockBuilder destroyed with remaining
    blocks!" on stderr when it was dropped."""
    import gc

    from bmlib_relax import relay
    from bmlib_relax.errors import RelayTypeError
    from bmlib_relax.relay import parse

    text = relay_fn("%x: Tensor[(2, 3), float32], %w: Tensor[(4, 5), float32]",
                    "nn.dense(%x, %w)")
    with pytest.raises(RelayTypeError, match="nn.dense"):
        relay.transform.InferType()(parse(text))
    gc.collect()
    assert "remaining blocks" not in capfd.readouterr().err
