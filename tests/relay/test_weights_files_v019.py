"""Weights written by TVM v0.19 keep their meaning, and hostile weights files stay cheap.

* DLDataType codes: TVM v0.19 (include/tvm/runtime/data_type.h) wrote float8 e4m3 as
  code 6 (``kE4M3Float``) and e5m2 as code 7 (``kE5M2Float``), bool as ``UInt(1)``;
  TVM 0.21+ follows DLPack 1.1 (10 = float8_e4m3fn, 12 = float8_e5m2) and 0.23+ writes
  bool as code 6.  A ``#[metadata]`` section records its writer's ``tvm_version``; a
  ``.params`` file does not, so its code 6 stays ambiguous.
* A ``/* ty=... */`` printed beside ``meta[relay.Constant][N]`` must agree with the array.
* A ``.npz`` whose members share bytes (a zip bomb of overlapping entries) is refused.
* A weights file is not read whole before its magic and sizes are checked.
"""
from __future__ import annotations

import base64
import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import ml_dtypes
import numpy as np
import pytest
from conftest import offloaded_partitions

import bmlib_relax
from bmlib_relax.errors import ParamError, ParamFormatError, ParseError
from bmlib_relax.relay import ast as A
from bmlib_relax.relay import load_params, parse
from bmlib_relax.relay.params import bind_params_by_name, check_param
from bmlib_relax.relay.printer import astext

NDARRAY_MAGIC = 0xDD5E40F096B4A13F  # TVM's kTVMNDArrayMagic
PARAMS_MAGIC = 0xF7E58D4F05049CB7  # TVM's kTVMNDArrayListMagic
V019_E4M3, V019_E5M2 = 6, 7  # v0.19 data_type.h: kE4M3Float = 6U, kE5M2Float = 7U

E4M3 = np.array([0.5, -1.25, 2.0, 0.0], dtype=ml_dtypes.float8_e4m3fn)
E5M2 = np.array([0.5, -1.5, 3.0, 0.0], dtype=ml_dtypes.float8_e5m2)


def ndarray_record(arr: np.ndarray, code: int, bits: int | None = None) -> bytes:
    """TVM ``SaveDLTensor``: magic, reserved, device (cpu, 0), ndim, dtype, shape, nbytes, data."""
    data = arr.tobytes()
    bits = 8 * arr.itemsize if bits is None else bits
    return (struct.pack("<QQiiiBBH", NDARRAY_MAGIC, 0, 1, 0, arr.ndim, code, bits, 1)
            + struct.pack(f"<{arr.ndim}q", *arr.shape) + struct.pack("<q", len(data)) + data)


def params_blob(named: dict[str, tuple]) -> bytes:
    """TVM ``SaveParams``: magic, reserved, names, then one record per name."""
    out = struct.pack("<QQQ", PARAMS_MAGIC, 0, len(named))
    for name in named:
        out += struct.pack("<Q", len(name)) + name.encode()
    out += struct.pack("<Q", len(named))
    for record in named.values():
        out += ndarray_record(*record)
    return out


def metadata_text(record: bytes, ty: str, version: str | None = "0.19.0") -> str:
    """``@main(%x) = %x + cast(meta[relay.Constant][0], float32)`` as v0.19 printed it."""
    doc = {"root": 1,
           "nodes": [{"type_key": ""},
                     {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
                     {"type_key": "Array", "data": [3]},
                     {"type_key": "relay.Constant",
                      "attrs": {"data": "0", "span": "0", "virtual_device_": "0"}}],
           "b64ndarrays": [base64.b64encode(record).decode()]}
    if version is not None:
        doc["attrs"] = {"tvm_version": version}
    return ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {\n'
            f'  %0 = cast(meta[relay.Constant][0] /* ty={ty} */, dtype="float32")'
            ' /* ty=Tensor[(4), float32] */;\n'
            '  add(%x, %0) /* ty=Tensor[(4), float32] */\n}\n#[metadata]\n' + json.dumps(doc))


def meta_constant(text: str) -> np.ndarray:
    return np.asarray(parse(text).metadata["constants"][0])


# ---------------------------------------------------------------------- #[metadata]
@pytest.mark.parametrize("version", ["0.19.0", "0.18.dev0", "0.20.0", None])
def test_metadata_of_v019_reads_code_6_as_float8_e4m3(version):
    meta = meta_constant(metadata_text(ndarray_record(E4M3, V019_E4M3),
                                       "Tensor[(4), e4m3_float8]", version))
    assert meta.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(meta.astype("float32"), [0.5, -1.25, 2.0, 0.0])


def test_metadata_of_v019_reads_code_7_as_float8_e5m2():
    meta = meta_constant(metadata_text(ndarray_record(E5M2, V019_E5M2),
                                       "Tensor[(4), e5m2_float8]"))
    assert meta.dtype == ml_dtypes.float8_e5m2
    np.testing.assert_array_equal(meta.astype("float32"), [0.5, -1.5, 3.0, 0.0])


def test_metadata_of_tvm_0_23_reads_code_6_as_bool():
    mask = np.array([1, 0, 1, 1], dtype=np.uint8)
    meta = meta_constant(metadata_text(ndarray_record(mask, 6), "Tensor[(4), bool]", "0.23.0"))
    assert meta.dtype == np.bool_
    np.testing.assert_array_equal(meta, [True, False, True, True])


def test_model_with_v019_float8_constant_computes_its_values():
    """The probe's program: x + cast(e4m3 constant) is x + [0.5, -1.25, 2, 0]."""
    text = metadata_text(ndarray_record(E4M3, V019_E4M3), "Tensor[(4), e4m3_float8]")
    model = bmlib_relax.compile(parse(text, "v019.relay"), {})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype="float32")
    np.testing.assert_array_equal(model(x=x), x + np.array([0.5, -1.25, 2.0, 0.0], "float32"))


def test_meta_constant_dtype_disagreeing_with_its_printed_type_is_a_located_error():
    # tvm_version 0.23: code 6 is bool there, but the printed type says e4m3_float8
    text = metadata_text(ndarray_record(E4M3, V019_E4M3), "Tensor[(4), e4m3_float8]", "0.23.0")
    # (the parser reads v0.19's e4m3_float8 as TVM 0.27's float8_e4m3fn)
    with pytest.raises(ParseError, match=r"meta\[relay.Constant\]\[0\].*bool.*float8_e4m3fn") \
            as info:
        parse(text, "m.relay")
    assert (info.value.line, info.value.column) == (3, 13)


def test_meta_constant_shape_disagreeing_with_its_printed_type_is_a_located_error():
    text = metadata_text(ndarray_record(E4M3, V019_E4M3), "Tensor[(2, 2), e4m3_float8]")
    with pytest.raises(ParseError, match=r"meta\[relay.Constant\]\[0\].*\(4,\).*\(2, 2\)"):
        parse(text, "m.relay")


def test_meta_constant_type_with_symbolic_dim_or_no_comment_is_not_checked():
    record = ndarray_record(E4M3, V019_E4M3)
    assert meta_constant(metadata_text(record, "Tensor[(?), float8_e4m3fn]")).shape == (4,)
    text = metadata_text(record, "Tensor[(4), e4m3_float8]").replace(
        " /* ty=Tensor[(4), e4m3_float8] */", "")
    assert meta_constant(text).dtype == ml_dtypes.float8_e4m3fn


def test_printed_float8_constant_round_trips_with_v019_codes():
    """Our printer claims tvm_version 0.19.0, so it writes float8 as v0.19 did (code 6)."""
    x = A.Var("x", A.TensorType((4,), "float32"))
    body = A.Call(A.Op("add"), (x, A.Call(A.Op("cast"), (A.Constant(E4M3),),
                                          {"dtype": "float32"})))
    text = astext(A.IRModule({"main": A.Function((x,), body)}))
    doc = json.loads(text.split("#[metadata]")[1])
    record = base64.b64decode(doc["b64ndarrays"][0])
    assert record[28] == V019_E4M3  # the dtype code byte of SaveDLTensor's header
    back = meta_constant(text)
    assert back.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(back.view(np.uint8), E4M3.view(np.uint8))


# ---------------------------------------------------------------------- .params
def test_params_code_6_reads_as_bool_by_default_and_as_e4m3_for_tvm_0_19():
    blob = params_blob({"w": (E4M3, V019_E4M3)})
    assert load_params(blob)["w"].dtype == np.bool_  # TVM 0.23+ (the default reading)
    old = load_params(blob, tvm_version="0.19.0")["w"]
    assert old.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(old.view(np.uint8), E4M3.view(np.uint8))


def test_params_code_7_names_the_old_e5m2_meaning_and_reads_for_tvm_0_19():
    blob = params_blob({"w": (E5M2, V019_E5M2)})
    with pytest.raises(ParamFormatError, match=r"code=7.*e5m2.*tvm_version") as info:
        load_params(blob)
    assert info.value.name == "w"
    old = load_params(blob, tvm_version="0.19.0")["w"]
    assert old.dtype == ml_dtypes.float8_e5m2
    np.testing.assert_array_equal(old.astype("float32"), [0.5, -1.5, 3.0, 0.0])


@pytest.mark.parametrize("declared", ["e4m3_float8", "float8_e4m3fn"])
def test_bool_bound_to_float8_parameter_is_refused_naming_the_ambiguity(declared):
    weights = load_params(params_blob({"w": (E4M3, V019_E4M3)}))
    w = A.Var("w", A.TensorType((4,), declared))
    with pytest.raises(ParamError, match=r"'w'.*code 6.*tvm_version"):
        bind_params_by_name(A.Function((w,), w), weights)
    text = ('#[version = "0.0.5"]\n'
            f'def @main(%x: Tensor[(4), float32], %w: Tensor[(4), {declared}]) {{\n'
            '  add(%x, cast(%w, dtype="float32"))\n}\n')
    with pytest.raises(ParamError, match=r"'w'.*code 6.*tvm_version"):
        bmlib_relax.compile(parse(text), weights)


def test_float8_array_fits_a_parameter_declared_with_the_v019_spelling():
    check_param("w", E4M3, A.TensorType((4,), "e4m3_float8"))
    check_param("w", E5M2, A.TensorType((4,), "e5m2_float8"))
    with pytest.raises(ParamError, match="dtype e5m2_float8"):
        check_param("w", E4M3, A.TensorType((4,), "e5m2_float8"))


# ---------------------------------------------------------------------- .npz bombs
def overlapping_npz(members: int, floats: int = 1 << 20) -> bytes:
    """``members`` central-directory entries whose local headers all skip (by their
    extra field) to one deflated ``.npy`` of ``floats`` zeros."""
    buf = io.BytesIO()
    np.save(buf, np.zeros(floats, "float32"))
    raw = buf.getvalue()
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    kernel = co.compress(raw) + co.flush()
    names = [f"w{i:04d}.npy".encode() for i in range(members)]
    start = sum(30 + len(n) for n in names) + 4
    out, offsets = bytearray(), []
    for n in names:
        offsets.append(len(out))
        extra = start - (len(out) + 30 + len(n))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, zlib.crc32(raw),
                           len(kernel), len(raw), len(n), extra) + n
    out += b"\0" * (start - len(out)) + kernel
    cd_start = len(out)
    for n, off in zip(names, offsets):
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21,
                           zlib.crc32(raw), len(kernel), len(raw), len(n), 0, 0, 0, 0, 0,
                           off) + n
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, members, members, len(out) - cd_start,
                       cd_start, 0)
    return bytes(out)


def test_npz_members_sharing_their_data_are_refused_before_decompressing(tmp_path):
    blob = overlapping_npz(3)
    tracemalloc.start()
    try:
        with pytest.raises(ParamFormatError, match=r"overlap") as info:
            load_params(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.name == "w0001.npy"  # the first member that reuses bytes
    assert info.value.offset is not None
    assert peak < 2 * len(blob) + (1 << 20)  # not one 4 MiB member decompressed
    path = tmp_path / "bomb.npz"
    path.write_bytes(blob)
    with pytest.raises(ParamFormatError, match="overlap"):
        load_params(path)


def test_npz_input_file_of_overlapping_members_is_refused_by_preflight(tmp_path):
    from bmlib_relax.preflight import read_npz

    path = tmp_path / "inputs.npz"
    path.write_bytes(overlapping_npz(2))
    with pytest.raises(ParamError, match="overlap"):
        read_npz(str(path))


def test_genuine_npz_still_loads(tmp_path):
    path = tmp_path / "w.npz"
    np.savez_compressed(path, a=np.arange(6, dtype="float32").reshape(2, 3),
                        b=np.array([True, False]))
    np.savez(tmp_path / "s.npz", c=np.arange(3, dtype="int8"))
    loaded = load_params(path)
    np.testing.assert_array_equal(loaded["a"], np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(loaded["b"], [True, False])
    np.testing.assert_array_equal(load_params(tmp_path / "s.npz")["c"], [0, 1, 2])


# ---------------------------------------------------------------------- reading files
def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("prefix", [b"", struct.pack("<QQQ", PARAMS_MAGIC, 0, 0)
                                    + struct.pack("<Q", 0)],
                         ids=["not_weights", "params_with_sparse_tail"])
def test_large_file_is_refused_without_reading_it(tmp_path, prefix):
    path = tmp_path / "big.bin"
    path.write_bytes(prefix)
    os.truncate(path, 256 << 20)  # sparse: costs no disk

    def attempt():
        with pytest.raises(ParamFormatError, match="not a .params|trailing"):
            load_params(path)
    assert _peak_while(attempt) < 1 << 20


def test_params_tensor_larger_than_the_file_is_refused_from_its_header(tmp_path):
    blob = params_blob({"w": (np.zeros(4, "float32"), 2)})
    blob = blob.replace(struct.pack("<q", 4) + struct.pack("<q", 16),
                        struct.pack("<q", 1 << 28) + struct.pack("<q", 1 << 30))
    path = tmp_path / "w.params"
    path.write_bytes(blob)
    with pytest.raises(ParamFormatError, match="truncated tensor data") as info:
        load_params(path)
    assert info.value.name == "w"


def test_params_file_loads_the_same_as_its_bytes(tmp_path):
    arrays = {"a": (np.arange(12, dtype="float32").reshape(3, 4), 2),
              "m": (np.array([1, 0, 1], dtype=np.uint8), 1, 1)}  # v0.19's bool: UInt(1)
    blob = params_blob(arrays)
    path = tmp_path / "w.params"
    path.write_bytes(blob)
    from_file, from_bytes = load_params(path), load_params(blob)
    assert from_file.keys() == from_bytes.keys() == {"a", "m"}
    np.testing.assert_array_equal(from_file["a"], arrays["a"][0])
    assert from_file["m"].dtype == np.bool_
    np.testing.assert_array_equal(from_file["m"], [True, False, True])
    for key in from_file:
        np.testing.assert_array_equal(from_file[key], from_bytes[key])
        assert from_file[key].flags.writeable and from_file[key].flags.c_contiguous


def test_huge_sparse_file_under_an_address_space_limit_is_a_project_error(tmp_path):
    """3 GiB of zeros under a 2 GiB RLIMIT_AS: was a raw MemoryError."""
    script = textwrap.dedent(f"""
        import os, resource
        from bmlib_relax.relay import load_params
        from bmlib_relax.errors import ParamFormatError
        path = {str(tmp_path / "big.bin")!r}
        open(path, "wb").close()
        os.truncate(path, 3 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        try:
            load_params(path)
        except ParamFormatError as exc:
            print("OK", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.startswith("OK"), proc.stdout + proc.stderr
    assert "not a .params" in proc.stdout
