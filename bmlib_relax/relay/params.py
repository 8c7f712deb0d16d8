"""Weights for Relay programs: loading ``.params``/``.npz`` files and binding.

Relay pipelines kept weights beside the model: a dict of arrays, an ``.npz``, or
the byte format of ``relay.save_param_dict`` (``tvm.runtime.save_param_dict``).
Everything here normalises them to ``dict[str, numpy.ndarray]`` and checks them
against the function signature so that a wrong weight is reported by name
instead of producing wrong numbers.

Both file formats are read by this module, not by TVM or ``np.load``: a weights
file is untrusted input.  TVM's ``load_param_dict`` accepts a file cut inside
tensor data (the rest is stale heap memory) and allocates whatever a header
declares; ``np.load`` returns raw bytes for a member that is not ``.npy`` and
allocates a declared shape before reading it.  Here the whole structure is
validated first, every size against the bytes that remain, and any damage is a
:class:`ParamFormatError` naming the parameter (or member) and the byte offset.
"""
from __future__ import annotations

import ast as python_ast
import io
import os
import re
import struct
import warnings
import zipfile
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

import numpy as np

from ..errors import ParamError, ParamFormatError
from . import ast
from .metadata import (RECORD_HEADER_MAX, TensorRecord, adopt_data, canonical_dtype_name,
                       fits_in_memory_model, materialize, scan_ndarray, uses_v019_codes)
from .rewrite import substitute

ParamsLike = Union[Mapping[str, Any], str, os.PathLike, bytes, bytearray, memoryview, None]

_PARAMS_MAGIC = 0xF7E58D4F05049CB7  # first uint64 of a save_param_dict blob
_U64 = struct.Struct("<Q")


def to_numpy(value: Any, name: str = "?") -> np.ndarray:
    """Convert a numpy array, TVM tensor or array-like to a numpy array."""
    if isinstance(value, np.ndarray):
        return value
    try:
        if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
            # a model's weights require grad: numpy() of them raised torch's RuntimeError
            return value.detach().cpu().resolve_conj().resolve_neg().numpy()
        if hasattr(value, "numpy"):
            return value.numpy()
        return np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - report any conversion failure by name
        raise ParamError(f"parameter {name!r}: cannot convert {type(value).__name__} to an array",
                         name) from exc


# ---------------------------------------------------------------------- formats
class _Bytes:
    """Random access to a weights blob or file, so that a file is checked (magic,
    structure, every declared size against its length) before its data is read: a
    1.5 GiB file that is no weights costs one ``read(8)``, not 1.5 GiB of memory."""

    def __init__(self, size: int, blob: Optional[bytes] = None, handle: Any = None):
        self.size = size
        self.blob = blob
        self.handle = handle

    def read(self, at: int, n: int) -> bytes:
        """Up to ``n`` bytes from offset ``at`` (fewer where the data ends)."""
        n = max(min(n, self.size - at), 0)
        if self.blob is not None:
            return self.blob[at:at + n]
        self.handle.seek(at)
        return self.handle.read(n)

    def stream(self) -> Any:
        """A seekable binary file object over all the bytes (for ``zipfile``)."""
        return io.BytesIO(self.blob) if self.blob is not None else self.handle

    def array(self, record: TensorRecord) -> np.ndarray:
        """The array of a validated record: a file's data is read straight into it."""
        if self.blob is not None:
            return materialize(self.blob, record)
        raw = np.empty(record.nbytes, np.uint8)
        self.handle.seek(record.data_offset)
        filled = 0
        while filled < record.nbytes:  # readinto may return less than asked
            got = self.handle.readinto(memoryview(raw)[filled:])
            if not got:
                raise OSError(f"file shrank while being read ({filled} of {record.nbytes} "
                              f"bytes at {record.data_offset})")
            filled += got
        return adopt_data(raw, record)


#: Leading bytes -> reader of a weights blob or file (``data, source, tvm_version``).
_FORMATS: dict[bytes, Callable[[_Bytes, str, Optional[str]], dict[str, np.ndarray]]] = {}
_MAGIC_LEN = 8  # the longest magic: the .params uint64


def _weights_format(*magics: bytes):
    """Register a reader for weights starting with one of ``magics``."""
    def register(reader):
        for magic in magics:
            _FORMATS[magic] = reader
        return reader
    return register


def load_params(source: ParamsLike, *,
                tvm_version: Optional[str] = None) -> dict[str, np.ndarray]:
    """Load weights from a dict, an ``.npz``/``.params`` path, or their bytes.

    ``.params`` is the format written by ``relay.save_param_dict`` /
    ``tvm.runtime.save_param_dict``; ``.npz`` is ``np.savez``'s zip.  A file is
    recognised by its magic number, not its suffix, so bytes of either load too.

    A ``.params`` file does not record the TVM that wrote it, and TVM changed what
    DLDataType code 6 means: float8 e4m3 up to v0.20 (code 7: e5m2), bool since v0.23.
    Its codes are read as TVM 0.27 writes them unless ``tvm_version`` names the
    writer (``"0.19.0"``: code 6 is ``float8_e4m3fn``, 7 ``float8_e5m2``).
    """
    if tvm_version is not None:
        try:
            uses_v019_codes(tvm_version)
        except ValueError as exc:
            raise ParamError(str(exc)) from None
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return {str(k): _numeric(to_numpy(v, str(k)), str(k)) for k, v in source.items()}
    if isinstance(source, (bytes, bytearray, memoryview)):
        blob = bytes(source)
        return _load(_Bytes(len(blob), blob=blob), "<bytes>", tvm_version)
    try:
        path = os.fspath(source)
    except TypeError:
        raise ParamError(f"weights must be a dict, a path or bytes, not "
                         f"{type(source).__name__}") from None
    if os.path.isdir(path):
        raise ParamError(f"params path is a directory, not a file: {path}")
    if not os.path.exists(path):
        raise ParamError(f"params file not found: {path}")
    if not os.path.isfile(path):  # a FIFO or device could be read forever
        raise ParamError(f"params path is not a regular file: {path}")
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            return _load(_Bytes(size, handle=handle), path, tvm_version)
    except OSError as exc:
        raise ParamError(f"cannot read params file {path}: {exc.strerror or exc}") from None


def _numeric(array: np.ndarray, name: str) -> np.ndarray:
    """Refuse object/string/date arrays in a weights dict: they are no tensor."""
    if array.dtype.hasobject or array.dtype.kind in "USMm":
        raise ParamError(f"parameter {name!r}: dtype {array.dtype} is not a tensor dtype "
                         "(weights must be bool, int, uint or float)", name)
    return array


def _load(data: _Bytes, source: str, tvm_version: Optional[str]) -> dict[str, np.ndarray]:
    """Dispatch on the magic; weights that validate but exceed the memory available are
    a :class:`ParamError` too (a raw ``MemoryError`` was the CLI's "internal error")."""
    head = data.read(0, _MAGIC_LEN)
    for magic, reader in _FORMATS.items():
        if head.startswith(magic):
            try:
                return reader(data, source, tvm_version)
            except MemoryError:
                raise ParamError(f"{source}: not enough memory to load its weights "
                                 f"({data.size} bytes)") from None
    raise ParamFormatError(
        "not a .params (save_param_dict) or .npz file: it starts with "
        f"{head.hex(' ') or 'nothing (empty file)'}", offset=0, source=source)


@_weights_format(_U64.pack(_PARAMS_MAGIC))
def _load_param_blob(data: _Bytes, source: str,
                     tvm_version: Optional[str] = None) -> dict[str, np.ndarray]:
    """Read a ``save_param_dict`` blob: validate all of it, then copy the arrays.

    Layout (TVM ``SaveParams``): magic u64, reserved u64, name count u64, each name
    as length u64 + bytes, tensor count u64 (equal to the name count), each tensor
    as an NDArray record (:func:`~bmlib_relax.relay.metadata.scan_ndarray`, codes as
    ``tvm_version`` wrote them).  Nothing may follow the last tensor.  Only headers
    and names are read until everything has been checked against the size.
    """
    size = data.size

    def fail(message: str, at: int, name: Optional[str] = None) -> ParamFormatError:
        return ParamFormatError(message, name, at, source)

    def read_u64(at: int, what: str, name: Optional[str] = None) -> int:
        if size - at < 8:
            raise fail(f"truncated {what}: 8 bytes needed, {max(size - at, 0)} remain", at,
                       name)
        return _U64.unpack(data.read(at, 8))[0]

    read_u64(0, "header")  # the magic, already matched by _load
    reserved = read_u64(8, "header")
    if reserved != 0:
        raise fail(f"reserved header word is {reserved}, expected 0", 8)
    count = read_u64(16, "name count")
    pos = 24
    if count > (size - pos) // 8:  # every name takes at least its 8-byte length
        raise fail(f"header declares {count} names, more than the {size - pos} remaining "
                   "bytes can hold", 16)
    names: list[str] = []
    seen: set[str] = set()
    for i in range(count):
        length = read_u64(pos, f"length of name #{i}")
        if length > size - pos - 8:
            raise fail(f"name #{i} declares {length} bytes, only {size - pos - 8} remain", pos)
        raw = data.read(pos + 8, length)
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(f"name #{i} is not UTF-8 text: {raw[:40]!r}", pos + 8) from None
        if name in seen:
            raise fail("appears twice in the file", pos, name)
        seen.add(name)
        names.append(name)
        pos += 8 + length
    tensors = read_u64(pos, "tensor count")
    if tensors != count:
        raise fail(f"file names {count} parameters but declares {tensors} tensors", pos)
    pos += 8
    records: list[TensorRecord] = []
    for name in names:
        window = data.read(pos, RECORD_HEADER_MAX)
        record = scan_ndarray(window, pos, name=name, source=source, base=pos, total=size,
                              tvm_version=tvm_version)
        records.append(record)
        pos = record.end
    if pos != size:
        raise fail(f"{size - pos} bytes of trailing garbage after the last tensor", pos)
    return {name: data.array(record) for name, record in zip(names, records)}


# ---------------------------------------------------------------------- .npz
#: The largest expansion deflate can achieve (~1032:1) plus slack: a member that
#: declares more uncompressed bytes than this cannot be genuine.
_MAX_DEFLATE_RATIO = 1100
_NPY_SUFFIX = ".npy"
_ZIP_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # signature ... name length, extra length
_ZIP_LOCAL_MAGIC = 0x04034B50


@_weights_format(b"PK\x03\x04", b"PK\x05\x06")
def _load_npz_blob(data: _Bytes, source: str,
                   tvm_version: Optional[str] = None) -> dict[str, np.ndarray]:
    """Read an ``np.savez`` archive: every member must be a numeric ``.npy`` array.

    The archive and each member's declared sizes are checked before anything is
    decompressed -- including that no two members share bytes
    (:func:`_check_member_extents`) -- and each ``.npy`` header is then validated like
    a ``.params`` tensor before its data is read (:func:`_read_npy_member`).  Pickles
    are never loaded: an object array is an error.  (``tvm_version`` is for
    ``.params``: a ``.npy`` names its dtype.)
    """
    try:
        archive = zipfile.ZipFile(data.stream())
        infos = archive.infolist()
    except Exception as exc:  # noqa: BLE001 - zipfile's errors on bad input are undocumented
        raise ParamFormatError(f"not a valid .npz (zip) archive: {exc}", source=source) \
            from None
    _check_member_extents(data, infos, source)
    out: dict[str, np.ndarray] = {}
    for info in infos:
        member = info.filename

        def fail(message: str, at: Optional[int] = None) -> ParamFormatError:
            return ParamFormatError(message, member, at, source, kind="member")

        if not member.endswith(_NPY_SUFFIX) or member == _NPY_SUFFIX:  # also directories
            raise fail("is not a '<name>.npy' array (np.savez writes one per weight)")
        name = member[:-len(_NPY_SUFFIX)]
        if name in out:
            raise fail("appears twice in the archive")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise fail(f"uses zip compression method {info.compress_type}; numpy writes "
                       "only stored or deflated members")
        if info.compress_size > data.size or info.file_size > (
                info.compress_size if info.compress_type == zipfile.ZIP_STORED
                else info.compress_size * _MAX_DEFLATE_RATIO + 1024):
            raise fail(f"declares {info.file_size} bytes from {info.compress_size} "
                       f"compressed bytes in a {data.size}-byte archive",
                       info.header_offset)
        out[name] = _read_npy_member(archive, info, fail)
    return out


def _check_member_extents(data: _Bytes, infos: list[zipfile.ZipInfo], source: str) -> None:
    """Refuse members whose bytes (local header + compressed data) overlap or pass the
    end of the archive.

    ``np.savez`` writes each member once, one after the other.  Central-directory
    entries that point into one shared deflated stream each pass the per-member
    ratio check, yet decompress it once each: 40 entries over one 97 KB member
    declared 4 GB.  Disjoint extents bound the total output by the file's size times
    the deflate ratio.
    """
    extents: list[tuple[int, int, str]] = []
    for info in infos:
        start = info.header_offset
        header = data.read(start, _ZIP_LOCAL_HEADER.size)
        if len(header) < _ZIP_LOCAL_HEADER.size or \
                _ZIP_LOCAL_HEADER.unpack(header)[0] != _ZIP_LOCAL_MAGIC:
            raise ParamFormatError("has no local file header where the archive's directory "
                                   "puts it", info.filename, start, source, kind="member")
        name_len, extra_len = _ZIP_LOCAL_HEADER.unpack(header)[-2:]
        end = start + _ZIP_LOCAL_HEADER.size + name_len + extra_len + info.compress_size
        if end > data.size:
            raise ParamFormatError(f"its {info.compress_size} compressed bytes end at byte "
                                   f"{end}, past the end of the {data.size}-byte archive",
                                   info.filename, start, source, kind="member")
        extents.append((start, end, info.filename))
    extents.sort()
    for (_, prev_end, prev_name), (start, _, name) in zip(extents, extents[1:]):
        if start < prev_end:
            raise ParamFormatError(f"overlaps member {prev_name!r} (bytes up to {prev_end}): "
                                   "archive members sharing data are a zip bomb, not an "
                                   "np.savez file", name, start, source, kind="member")


def _read_npy_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
                     fail: Callable[..., ParamFormatError]) -> np.ndarray:
    """One archive member through :func:`_read_npy_stream`; zip damage (CRC,
    truncated or undecodable data, encryption) is reported against the member."""
    try:
        with archive.open(info) as stream:
            return _read_npy_stream(stream, info.file_size, fail)
    except ParamFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile's errors on bad input are undocumented
        raise fail(f"cannot be read from the archive: {exc}", info.header_offset) from None


def _read_npy_stream(stream: Any, total: int,
                     fail: Callable[..., ParamFormatError]) -> np.ndarray:
    """Read a ``.npy`` of ``total`` (declared) bytes: the header first, validated
    against ``total``, then the data straight into the array -- one copy of the
    weights, and nothing allocated beyond what ``total`` allows."""
    prefix = stream.read(min(total, _NPY_PREFIX_MAX))
    header = _npy_header(prefix, total, fail)
    raw = np.empty(header.nbytes, np.uint8)
    have = prefix[header.data_offset:header.data_offset + header.nbytes]
    raw[:len(have)] = np.frombuffer(have, np.uint8)
    filled = len(have)
    while filled < header.nbytes:
        chunk = stream.read(min(_CHUNK, header.nbytes - filled))
        if not chunk:
            raise fail(f"array data ends after {filled} of {header.nbytes} bytes",
                       header.data_offset + filled)
        raw[filled:filled + len(chunk)] = np.frombuffer(chunk, np.uint8)
        filled += len(chunk)
    if len(prefix) > header.data_offset + header.nbytes or stream.read(1):
        raise fail("has bytes after the array data", header.data_offset + header.nbytes)
    return _npy_array(raw, header)


def load_npy(source: Union[str, os.PathLike, bytes, bytearray, memoryview],
             name: Optional[str] = None) -> np.ndarray:
    """Read one ``.npy`` array (a path or its bytes) with the checks of ``.npz`` members.

    For inputs given as files (``--input x=x.npy``): a plain bool/int/uint/float
    array or a :class:`ParamFormatError` naming ``name`` (default: the file) and the
    byte offset -- never a pickle, never an allocation larger than the file.
    """
    where = "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) \
        else os.fspath(source)

    def fail(message: str, at: Optional[int] = None) -> ParamFormatError:
        return ParamFormatError(message, name, at, where, kind="array")

    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _read_npy_stream(io.BytesIO(data), len(data), fail)
    if not os.path.isfile(where):
        raise ParamError(f"array file not found or not a regular file: {where}", name)
    try:
        with open(where, "rb") as handle:
            return _read_npy_stream(handle, os.fstat(handle.fileno()).st_size, fail)
    except OSError as exc:
        raise ParamError(f"cannot read array file {where}: {exc.strerror or exc}",
                         name) from None


_NPY_MAGIC = b"\x93NUMPY"
#: Header length field width per .npy format version (1.0 writes uint16).
_NPY_HEADER_LEN = {1: struct.Struct("<H"), 2: struct.Struct("<I"), 3: struct.Struct("<I")}
_NPY_MAX_HEADER = 10_000  # numpy's own default limit for a header
_NPY_PREFIX_MAX = 12 + _NPY_MAX_HEADER  # magic, version, length field, header
_CHUNK = 1 << 20  # bytes read from a member at a time
#: The ``descr`` numpy writes for a plain numeric array ('<f4', '|b1', '>i8', ...).
#: Matching it before ``np.dtype`` keeps odd descr strings away from numpy's
#: dtype parser (which evaluates comma strings).
_NPY_NUMERIC_DESCR = re.compile(r"[<>|=]?(?:b1|[iu][1248]|f[248])\Z")


class _NpyHeader(NamedTuple):
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    data_offset: int
    nbytes: int


def _npy_header(prefix: bytes, total: int,
                fail: Callable[..., ParamFormatError]) -> _NpyHeader:
    """Validate a ``.npy`` header from the first bytes of an array of ``total`` bytes.

    The header is a Python dict literal; it is read with ``ast.literal_eval`` after
    a length bound (as numpy does), and must hold exactly ``descr`` (a numeric
    dtype: bool, int, uint, float), ``fortran_order`` and ``shape`` (non-negative
    ints).  The data must be exactly ``prod(shape) * itemsize`` bytes: ``total``
    minus the header.  Offsets in errors are within the array file / member.
    """
    if not prefix.startswith(_NPY_MAGIC) or len(prefix) < 8:
        raise fail(f"is not a .npy array (starts with {prefix[:8]!r})", 0)
    major = prefix[6]
    length_field = _NPY_HEADER_LEN.get(major)
    if length_field is None:
        raise fail(f"unknown .npy format version {major}.{prefix[7]}", 6)
    if len(prefix) < 8 + length_field.size:
        raise fail("truncated .npy header", 8)
    (header_len,) = length_field.unpack_from(prefix, 8)
    start = 8 + length_field.size
    if header_len > _NPY_MAX_HEADER or header_len > len(prefix) - start:
        raise fail(f".npy header declares {header_len} bytes, {len(prefix) - start} remain "
                   f"(at most {_NPY_MAX_HEADER} allowed)", 8)
    encoding = "utf-8" if major == 3 else "latin-1"
    try:
        with warnings.catch_warnings():  # e.g. "invalid escape sequence": still an error below
            warnings.simplefilter("ignore")
            header = python_ast.literal_eval(prefix[start:start + header_len].decode(encoding))
    except (ValueError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError,
            TypeError):
        raise fail(".npy header is not a Python dict literal", start) from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise fail(f".npy header must have exactly descr, fortran_order and shape, got "
                   f"{header!r:.80}", start)
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(descr, str):
        raise fail(f"holds a structured or object array (descr {descr!r:.60}); weights "
                   "must be plain numeric arrays", start)
    if descr.lstrip("<>|=").startswith("O"):
        raise fail("holds a pickled object array; pickles are never loaded "
                   "(allow_pickle=False)", start)
    if not _NPY_NUMERIC_DESCR.match(descr):
        raise fail(f"has dtype {descr!r:.40}; weights must be bool, int, uint or float", start)
    dtype = np.dtype(descr)
    if not isinstance(fortran, bool):
        raise fail(f"fortran_order must be True or False, got {fortran!r:.40}", start)
    if not isinstance(shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape) \
            or len(shape) > 32:
        raise fail(f"bad shape {shape!r:.80}", start)
    if not fits_in_memory_model(shape, dtype.itemsize):
        raise fail(f"shape {shape!r:.80} is larger than any array can be", start)
    count = 1
    for dim in shape:  # exact Python ints: no overflow
        count *= dim
    offset = start + header_len
    expected = count * dtype.itemsize
    if total - offset != expected:
        raise fail(f"shape {shape} of {dtype} needs {expected} data bytes, found "
                   f"{total - offset}", offset)
    return _NpyHeader(dtype, shape, fortran, offset, expected)


def _npy_array(raw: Any, header: _NpyHeader) -> np.ndarray:
    """The array of validated ``.npy`` data ``raw`` (exactly ``header.nbytes``):
    native byte order, C order, writable, not sharing memory with a ``bytes``."""
    count = header.nbytes // header.dtype.itemsize
    if header.dtype.kind == "b":  # any non-zero byte is True (np.load would keep the byte)
        array = np.frombuffer(raw, np.uint8, count) != 0
    else:
        array = np.frombuffer(raw, header.dtype, count)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    array = array.reshape(header.shape, order="F" if header.fortran else "C")
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = array.copy(order="C")
    return array


def check_param(name: str, value: np.ndarray, expected: ast.Type | None) -> None:
    """Raise :class:`ParamError` if ``value`` does not fit the declared type.

    v0.19's dtype spellings (``e4m3_float8``) name the same dtypes as numpy's
    (``float8_e4m3fn``).  A bool array for a float8 e4m3 parameter is refused with
    the likely cause: a ``.params`` of TVM <= 0.20 whose code 6 (e4m3 then, bool now)
    was read as bool -- its bytes are not reinterpreted behind the user's back.
    """
    if not isinstance(expected, ast.TensorType):
        return
    shape = tuple(value.shape)
    want = expected.shape
    shape_ok = len(shape) == len(want) and all(
        w is None or isinstance(w, str) or int(w) == s for w, s in zip(want, shape))
    want_dtype = canonical_dtype_name(expected.dtype)
    dtype_ok = str(value.dtype) == want_dtype
    if not (shape_ok and dtype_ok):
        dims = ["?" if w is None else str(w) for w in want]
        want_text = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        hint = ""
        if value.dtype == np.bool_ and want_dtype == "float8_e4m3fn":
            hint = ("; DLDataType code 6 is ambiguous in a .params file: TVM 0.20 and "
                    "earlier wrote float8 e4m3 with it, TVM 0.23+ writes bool (how it is "
                    "read by default) -- if TVM 0.19 wrote these weights, load them with "
                    "load_params(path, tvm_version='0.19.0')")
        raise ParamError(
            f"parameter {name!r}: expected shape {want_text} dtype {expected.dtype}, "
            f"got shape {shape} dtype {value.dtype}{hint}", name)


def bind_params_by_name(func: ast.Function, params: Mapping[str, Any],
                        *, allow_extra: bool = False) -> ast.Function:
    """Return ``func`` with the named parameters replaced by constants.

    Like Relay's function of the same name, but strict: a name that is not a
    parameter of ``func`` is an error (unless ``allow_extra``), and each value
    must match the parameter's declared shape and dtype.
    """
    by_name: dict[str, ast.Var] = {}
    for var in func.params:
        if var.name in by_name:
            raise ParamError(f"function has two parameters named {var.name!r}", var.name)
        by_name[var.name] = var
    mapping: dict[ast.Var, ast.Expr] = {}
    for name, value in params.items():
        var = by_name.get(name)
        if var is None:
            if allow_extra:
                continue
            raise ParamError(
                f"parameter {name!r} is not an input of the function "
                f"(inputs: {', '.join(by_name) or 'none'})", name)
        array = to_numpy(value, name)
        check_param(name, array, var.type_annotation)
        if isinstance(value, np.ndarray) and np.may_share_memory(array, value):
            array = array.copy()  # the caller may refill its buffer (Relay copied too)
        mapping[var] = ast.Constant(array, span=var.span)
    if not mapping:
        return func
    new_params = tuple(v for v in func.params if v not in mapping)
    body = substitute(func.body, mapping)
    return ast.Function(new_params, body, func.ret_type, func.type_params, func.attrs,
                        span=func.span)
