"""Weights files are untrusted input: ``.params`` and ``.npz`` are validated
byte by byte, and every kind of damage is a ParamFormatError naming the
parameter (or archive member) and the byte offset -- never stale memory, a
wrong shape, a huge allocation or a raw exception.
"""
from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tvm
from conftest import DATA, cli

from bmlib_relax.errors import BmlibError, ParamError, ParamFormatError
from bmlib_relax.relay.metadata import NDARRAY_MAGIC, encode_ndarray
from bmlib_relax.relay.params import load_npy, load_params

PARAMS_MAGIC = 0xF7E58D4F05049CB7


def save_params(arrays: dict[str, np.ndarray]) -> bytes:
    """The reference writer: TVM's own ``save_param_dict``."""
    return bytes(tvm.runtime.save_param_dict({k: tvm.runtime.tensor(v)
                                              for k, v in arrays.items()}))


def tensor_offsets(blob: bytes) -> list[int]:
    """Byte offset of every NDArray record in a ``.params`` blob."""
    magic = struct.pack("<Q", NDARRAY_MAGIC)
    out, at = [], blob.find(magic)
    while at >= 0:
        out.append(at)
        at = blob.find(magic, at + 1)
    return out


def patch(blob: bytes, offset: int, fmt: str, value) -> bytes:
    raw = bytearray(blob)
    struct.pack_into(fmt, raw, offset, value)
    return bytes(raw)


def one_tensor_params(name: str = "w", ndim: int = 1, dims=(4,), code: int = 2,
                      bits: int = 32, lanes: int = 1, nbytes: int | None = None,
                      data: bytes = b"", trailer: bytes = b"") -> bytes:
    """A hand-built ``.params`` blob with one tensor (fields freely chosen)."""
    if nbytes is None:
        nbytes = int(np.prod(dims)) * ((bits + 7) // 8) if dims else (bits + 7) // 8
    encoded = name.encode()
    return (struct.pack("<QQQ", PARAMS_MAGIC, 0, 1) + struct.pack("<Q", len(encoded)) + encoded
            + struct.pack("<Q", 1)
            + struct.pack("<QQiiiBBH", NDARRAY_MAGIC, 0, 1, 0, ndim, code, bits, lanes)
            + struct.pack(f"<{len(dims)}q", *dims) + struct.pack("<q", nbytes) + data + trailer)


# ---------------------------------------------------------------------- round trips
ROUND_TRIP_ARRAYS = {
    "float32": np.linspace(-2, 2, 12, dtype="float32").reshape(3, 4),
    "float16": np.linspace(-2, 2, 6, dtype="float16"),
    "float64": np.linspace(-2, 2, 6),
    "int8": np.array([-128, -1, 0, 1, 127], dtype="int8"),
    "uint8": np.array([0, 1, 200, 255], dtype="uint8"),
    "int16": np.array([-300, 7], dtype="int16"),
    "int32": np.arange(-3, 3, dtype="int32").reshape(2, 3, 1),
    "int64": np.array([-(2**40), 2**40], dtype="int64"),
    "uint32": np.array([0, 2**32 - 1], dtype="uint32"),
    "bool": np.array([[True, False], [False, True]]),
    "bfloat16": np.array([0.5, -3, 1e30], dtype=ml_dtypes.bfloat16),
    "float8_e4m3fn": np.array([0.5, -3], dtype=ml_dtypes.float8_e4m3fn),
    "scalar_float32": np.array(3.5, dtype="float32"),
    "scalar_int8": np.array(-7, dtype="int8"),
    "scalar_bool": np.array(True),
    "empty_int8": np.zeros((0, 3), dtype="int8"),
}


@pytest.mark.parametrize("key", sorted(ROUND_TRIP_ARRAYS))
def test_params_saved_by_tvm_load_with_same_dtype_shape_and_values(key):
    array = ROUND_TRIP_ARRAYS[key]
    blob = save_params({"w": array, "other": np.ones(2, "float32")})
    loaded = load_params(blob)
    reference = {k: v.numpy() for k, v in tvm.runtime.load_param_dict(blob).items()}
    assert sorted(loaded) == ["other", "w"]
    for name in loaded:
        assert loaded[name].dtype == reference[name].dtype, name
        assert loaded[name].shape == reference[name].shape, name
        np.testing.assert_array_equal(loaded[name], reference[name])
    assert loaded["w"].dtype == array.dtype and loaded["w"].shape == array.shape
    np.testing.assert_array_equal(loaded["w"], array)
    assert loaded["w"].flags.writeable and loaded["w"].flags.owndata


def test_params_with_many_tensors_load_in_file_order():
    arrays = {f"layer{i}.weight": np.full((i + 1,), i, dtype="float32") for i in range(20)}
    loaded = load_params(save_params(arrays))
    assert set(loaded) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(loaded[name], array)


def test_params_with_no_tensors_load_as_empty_dict():
    assert load_params(save_params({})) == {}


def test_golden_params_files_load_like_tvm():
    root = os.environ.get("BMLIB_RELAY_GOLDEN")
    files = sorted(Path(root).glob("*/model.params")) if root else []
    files += sorted(DATA.glob("*/model.params"))
    if not files:
        pytest.skip("no golden .params files")
    for path in files:
        blob = path.read_bytes()
        loaded = load_params(path)
        reference = {k: v.numpy() for k, v in tvm.runtime.load_param_dict(blob).items()}
        assert sorted(loaded) == sorted(reference), path
        for name, value in reference.items():
            assert loaded[name].dtype == value.dtype and loaded[name].shape == value.shape
            np.testing.assert_array_equal(loaded[name], value, err_msg=f"{path}: {name}")


# ---------------------------------------------------------------------- truncation
def test_truncated_params_inside_tensor_data_names_param_and_offset():
    blob = save_params({"conv.weight": np.arange(64, dtype="float32"),
                        "conv.bias": np.arange(8, dtype="float32")})
    loaded_order = list(tvm.runtime.load_param_dict(blob))
    last = loaded_order[-1]
    data_size = 4 * (64 if last == "conv.weight" else 8)
    data_start = len(blob) - data_size
    with pytest.raises(ParamFormatError) as info:
        load_params(blob[:-5])
    err = info.value
    assert err.name == last and err.offset == data_start
    assert f"parameter {last!r}" in str(err) and f"at byte {data_start}" in str(err)
    assert f"{data_size} bytes declared, {data_size - 5} remain" in str(err)


def test_every_truncation_of_a_params_file_is_an_error():
    blob = save_params({"a": np.arange(3, dtype="int8"), "bb": np.array(1.5, "float32")})
    for cut in range(len(blob)):
        with pytest.raises(ParamError):
            load_params(blob[:cut])


def test_params_trailing_garbage_is_an_error_at_its_offset():
    blob = save_params({"w": np.arange(3, dtype="int32")})
    with pytest.raises(ParamFormatError, match="1 bytes of trailing garbage") as info:
        load_params(blob + b"\0")
    assert info.value.offset == len(blob)


# ---------------------------------------------------------------------- header fields
def test_params_vector_dtype_with_lanes_is_rejected_naming_param():
    blob = one_tensor_params("vec", dims=(2,), lanes=4, data=bytes(32))
    with pytest.raises(ParamFormatError, match="lanes") as info:
        load_params(blob)
    assert info.value.name == "vec"
    assert info.value.offset == tensor_offsets(blob)[0] + 28  # the DLDataType field


@pytest.mark.parametrize("code,bits", [(5, 64), (0, 4), (2, 8), (3, 64), (200, 32), (2, 0)],
                         ids=["complex64", "int4", "float8_code2", "handle", "code200", "bits0"])
def test_params_dtype_without_numpy_equivalent_is_rejected(code, bits):
    blob = one_tensor_params("odd", dims=(2,), code=code, bits=bits, data=bytes(16))
    with pytest.raises(ParamFormatError, match="unsupported DLDataType") as info:
        load_params(blob)
    assert info.value.name == "odd"


def test_params_header_declaring_2_pow_40_elements_fails_before_allocating():
    blob = one_tensor_params("huge", dims=(2**20, 2**20), ndim=2, data=bytes(64))
    assert len(blob) < 200
    with pytest.raises(ParamFormatError, match="truncated tensor data") as info:
        load_params(blob)
    assert info.value.name == "huge"
    assert str(2**40 * 4) in str(info.value)


def test_params_name_declaring_2_pow_32_bytes_fails_before_allocating():
    blob = struct.pack("<QQQQ", PARAMS_MAGIC, 0, 1, 2**32) + b"w" * 64
    with pytest.raises(ParamFormatError, match=f"name #0 declares {2**32} bytes") as info:
        load_params(blob)
    assert info.value.offset == 24


@pytest.mark.parametrize("dims", [(2**62, 2**62), (0, 2**62, 2**62)],
                         ids=["wraps_to_zero", "empty_but_too_large"])
def test_params_element_count_overflowing_int64_is_rejected(dims):
    # 2^62 * 2^62 elements wraps to 0 in 64-bit arithmetic; a byte count of 0 must not match.
    blob = one_tensor_params("wrap", ndim=len(dims), dims=dims, code=0, bits=8, nbytes=0)
    with pytest.raises(ParamFormatError, match="larger than any array can be") as info:
        load_params(blob)
    assert info.value.name == "wrap"
    assert info.value.offset == tensor_offsets(blob)[0] + 32  # the shape


def _header_corruptions():
    good = one_tensor_params("w", dims=(2,), data=bytes(8))
    t = tensor_offsets(good)[0]
    return {
        "reserved_header_word_nonzero": (patch(good, 8, "<Q", 7), None, 8, "reserved"),
        "name_count_larger_than_file": (patch(good, 16, "<Q", 2**40), None, 16, "names"),
        "tensor_count_differs_from_name_count": (patch(good, t - 8, "<Q", 2), None, t - 8,
                                                 "declares 2 tensors"),
        "tensor_magic_wrong": (patch(good, t, "<Q", 1234), "w", t, "bad tensor magic"),
        "tensor_reserved_nonzero": (patch(good, t + 8, "<Q", 1), "w", t + 8, "reserved"),
        "tensor_on_gpu_device": (patch(good, t + 16, "<i", 2), "w", t + 16, "device"),
        "tensor_rank_negative": (patch(good, t + 24, "<i", -1), "w", t + 24, "rank"),
        "tensor_rank_huge": (patch(good, t + 24, "<i", 2**30), "w", t + 24, "rank"),
        "tensor_dim_negative": (patch(good, t + 32, "<q", -2), "w", t + 32, "negative"),
        "tensor_byte_count_mismatch": (patch(good, t + 40, "<q", 9), "w", t + 40,
                                       "does not match shape"),
        "name_not_utf8": (good.replace(b"\x01\x00\x00\x00\x00\x00\x00\x00w",
                                       b"\x01\x00\x00\x00\x00\x00\x00\x00\xff", 1),
                          None, 32, "not UTF-8"),
    }


@pytest.mark.parametrize("case", sorted(_header_corruptions()))
def test_params_corrupted_header_field_names_param_and_offset(case):
    blob, name, offset, message = _header_corruptions()[case]
    with pytest.raises(ParamFormatError, match=message) as info:
        load_params(blob)
    assert info.value.name == name
    assert info.value.offset == offset
    assert f"at byte {offset}" in str(info.value)


def test_params_duplicate_names_are_rejected():
    record = encode_ndarray(np.zeros(1, "float32"))
    blob = (struct.pack("<QQQ", PARAMS_MAGIC, 0, 2) + struct.pack("<Q", 1) + b"w"
            + struct.pack("<Q", 1) + b"w" + struct.pack("<Q", 2) + record + record)
    with pytest.raises(ParamFormatError, match="appears twice") as info:
        load_params(blob)
    assert info.value.name == "w"


def test_params_bool_bytes_other_than_one_read_as_true():
    blob = one_tensor_params("mask", dims=(3,), code=6, bits=8, data=b"\x00\x01\x07")
    np.testing.assert_array_equal(load_params(blob)["mask"], [False, True, True])


# ---------------------------------------------------------------------- files and sniffing
@pytest.mark.parametrize("blob", [b"", b"hello world", b"\x93NUMPY", bytes(64)],
                         ids=["empty", "text", "bare_npy", "zeros"])
def test_bytes_that_are_neither_params_nor_npz_are_rejected(blob):
    with pytest.raises(ParamFormatError, match="not a .params"):
        load_params(blob)


def test_params_path_that_is_a_directory_is_a_param_error(tmp_path):
    with pytest.raises(ParamError, match="directory"):
        load_params(tmp_path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_params_path_that_is_a_device_is_refused_without_reading_it():
    with pytest.raises(ParamError, match="not a regular file"):
        load_params("/dev/zero")


def test_params_path_that_does_not_exist_is_a_param_error(tmp_path):
    with pytest.raises(ParamError, match="not found"):
        load_params(tmp_path / "missing.params")


@pytest.mark.parametrize("value", [np.array([{"a": 1}], dtype=object), ["a", "b"],
                                   [[1, 2], [3]]], ids=["objects", "strings", "ragged"])
def test_weights_dict_with_non_tensor_values_is_a_param_error_naming_it(value):
    with pytest.raises(ParamError) as info:
        load_params({"w": np.ones(2, "float32"), "bad": value})
    assert info.value.name == "bad"


def test_params_source_of_wrong_type_is_a_param_error():
    with pytest.raises(ParamError, match="dict, a path or bytes"):
        load_params(42)


def test_weights_files_are_recognised_by_magic_not_suffix(tmp_path):
    arrays = {"w": np.arange(4, dtype="float32")}
    npz = io.BytesIO()
    np.savez(npz, **arrays)
    (tmp_path / "really_npz.params").write_bytes(npz.getvalue())
    (tmp_path / "really_params.npz").write_bytes(save_params(arrays))
    for name in ("really_npz.params", "really_params.npz"):
        loaded = load_params(tmp_path / name)
        np.testing.assert_array_equal(loaded["w"], arrays["w"])
    with pytest.raises(ParamFormatError) as info:
        load_params(save_params(arrays)[:-1])
    assert info.value.source == "<bytes>"
    (tmp_path / "cut.params").write_bytes(save_params(arrays)[:-1])
    with pytest.raises(ParamFormatError, match="cut.params") as info:
        load_params(tmp_path / "cut.params")


# ---------------------------------------------------------------------- .npz
def npz_bytes(compressed: bool = False, **arrays) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def zip_bytes(members: dict[str, bytes], method=zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_valid_npz_given_as_bytes_loads(compressed):
    arrays = {"w": np.arange(6, dtype="float32").reshape(2, 3), "b": np.array(2, "int64"),
              "m": np.array([True, False]), "e": np.zeros((0, 2), "int8")}
    loaded = load_params(npz_bytes(compressed, **arrays))
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        np.testing.assert_array_equal(loaded[name], array)


def test_npz_fortran_order_and_big_endian_arrays_load_with_right_values():
    fortran = np.asfortranarray(np.arange(6, dtype="float32").reshape(2, 3))
    big = np.arange(4, dtype=">i4")
    loaded = load_params(npz_bytes(f=fortran, big=big))
    np.testing.assert_array_equal(loaded["f"], fortran)
    np.testing.assert_array_equal(loaded["big"], big)
    assert loaded["big"].dtype == np.dtype("int32") and loaded["big"].dtype.isnative


@pytest.mark.parametrize("blob", [b"PK\x03\x04" + bytes(40), b"PK\x03\x04garbage" * 10,
                                  npz_bytes(w=np.ones(4))[:60]],
                         ids=["zeros", "garbage", "truncated"])
def test_corrupt_zip_is_a_param_error(blob):
    with pytest.raises(ParamFormatError, match="not a valid .npz|cannot be read"):
        load_params(blob)


def test_npz_member_that_is_not_npy_names_member():
    blob = zip_bytes({"w.npy": npy_bytes(np.ones(2)), "README.txt": b"hello"})
    with pytest.raises(ParamFormatError, match="not a '<name>.npy'") as info:
        load_params(blob)
    assert info.value.name == "README.txt"


def test_npz_member_with_npy_name_but_other_content_names_member():
    blob = zip_bytes({"w.npy": b"this is not an array"})
    with pytest.raises(ParamFormatError, match="is not a .npy array") as info:
        load_params(blob)
    assert info.value.name == "w.npy"


def test_npz_pickled_object_array_is_rejected_naming_member():
    blob = npz_bytes(ok=np.ones(2), obj=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(ParamFormatError, match="pickled object array") as info:
        load_params(blob)
    assert info.value.name == "obj.npy"


@pytest.mark.parametrize("array", [np.array(["a", "b"]), np.zeros(2, "complex64"),
                                   np.zeros(2, [("x", "f4"), ("y", "i4")])],
                         ids=["strings", "complex", "structured"])
def test_npz_member_with_non_numeric_dtype_is_rejected(array):
    with pytest.raises(ParamFormatError, match="numeric|bool, int") as info:
        load_params(npz_bytes(x=array))
    assert info.value.name == "x.npy"


def test_npz_duplicate_member_names_are_rejected():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("w.npy", npy_bytes(np.ones(2)))
        with pytest.warns(UserWarning):
            archive.writestr("w.npy", npy_bytes(np.zeros(2)))
    with pytest.raises(ParamFormatError, match="appears twice") as info:
        load_params(buf.getvalue())
    assert info.value.name == "w.npy"


def test_npz_member_with_truncated_array_data_names_member_and_offset():
    full = npy_bytes(np.arange(8, dtype="float32"))
    with pytest.raises(ParamFormatError, match="needs 32 data bytes, found 28") as info:
        load_params(zip_bytes({"w.npy": full[:-4]}))
    assert info.value.name == "w.npy" and info.value.offset == len(full) - 32


def test_npz_member_declaring_2_pow_40_elements_fails_before_allocating():
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    header = buf.getvalue() + bytes(16)
    message = "needs 4398046511104 data bytes, found 16"
    with pytest.raises(ParamFormatError, match=message) as info:
        load_params(zip_bytes({"w.npy": header}))
    assert info.value.name == "w.npy"


def test_npz_member_with_damaged_data_fails_its_checksum():
    blob = bytearray(npz_bytes(w=np.arange(16, dtype="float32")))
    blob[blob.index(b"\x93NUMPY") + 140] ^= 0xFF  # inside the array data
    with pytest.raises(ParamFormatError, match="cannot be read") as info:
        load_params(bytes(blob))
    assert info.value.name == "w.npy"


def test_npz_member_declaring_impossible_uncompressed_size_is_rejected():
    blob = bytearray(zip_bytes({"w.npy": npy_bytes(np.ones(4))}))
    central = blob.rindex(b"PK\x01\x02")  # central directory entry: file_size at +24
    struct.pack_into("<I", blob, central + 24, 2**31)
    with pytest.raises(ParamFormatError, match="declares 2147483648 bytes") as info:
        load_params(bytes(blob))
    assert info.value.name == "w.npy"


def test_param_format_error_is_a_bmlib_error():
    assert issubclass(ParamFormatError, ParamError) and issubclass(ParamFormatError, BmlibError)


def test_single_npy_file_loads_with_the_same_checks(tmp_path):
    array = np.arange(6, dtype="int16").reshape(3, 2)
    np.save(tmp_path / "x.npy", array)
    np.testing.assert_array_equal(load_npy(tmp_path / "x.npy"), array)
    np.testing.assert_array_equal(load_npy(npy_bytes(array)), array)
    with pytest.raises(ParamFormatError, match="pickled object array") as info:
        load_npy(npy_bytes(np.array([None], dtype=object)), name="x")
    assert info.value.name == "x"
    with pytest.raises(ParamFormatError, match="needs 12 data bytes, found 11"):
        load_npy(npy_bytes(array)[:-1])
    with pytest.raises(ParamError, match="not a regular file"):
        load_npy(tmp_path)


def test_cli_convert_with_truncated_params_exits_2_naming_param_and_offset(tmp_path):
    case = DATA / "seed_reshape_conv2d_add_bn_relu"
    blob = (case / "model.params").read_bytes()
    (tmp_path / "cut.params").write_bytes(blob[:len(blob) // 2])
    out = cli("convert", case / "model.relay", "--params", tmp_path / "cut.params",
              "-o", tmp_path / "out")
    assert out.returncode == 2, out.stderr
    first = out.stderr.strip().splitlines()[0]
    assert "cut.params: parameter '" in first and "truncated tensor data" in first
    assert "(at byte " in first
