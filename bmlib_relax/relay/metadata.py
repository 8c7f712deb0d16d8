"""Decoder for the ``#[metadata]`` section of Relay text and TVM NDArray blobs.

After ``#[metadata]`` TVM printed its object graph as JSON (``SaveJSON``):
``{"root": i, "nodes": [...], "b64ndarrays": [...], "attrs": {...}}``.  The root
node is a ``Map`` from a type key (``relay.Constant``, ``VirtualDevice``,
``relay.attrs.*``) to an ``Array`` of nodes; ``meta[kind][N]`` in the text is the
N-th element of that array.  A ``relay.Constant`` node's ``data`` attribute is an
index into ``b64ndarrays``, each a base64 TVM NDArray serialisation.

:func:`decode_ndarray` is also the building block for ``.params`` files, which
concatenate the same NDArray records.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import sys
from typing import Any, NamedTuple, Optional

import ml_dtypes
import numpy as np

from ..errors import ParamFormatError

__all__ = ["NDARRAY_MAGIC", "RECORD_HEADER_MAX", "TensorRecord", "scan_ndarray",
           "decode_ndarray", "materialize", "adopt_data", "encode_ndarray", "parse_metadata",
           "dtype_from_dl", "dl_from_dtype", "canonical_dtype_name", "uses_v019_codes"]

#: First 8 bytes (little-endian uint64) of every serialised TVM NDArray.
NDARRAY_MAGIC = 0xDD5E40F096B4A13F

# magic, reserved, device type, device id, ndim, dtype code, dtype bits, dtype lanes
# (TVM ``SaveDLTensor``; the shape (ndim x int64), the data byte count (int64) and
# the data follow).
_HEADER = struct.Struct("<QQiiiBBH")
_INT64 = struct.Struct("<q")
_KDL_CPU = 1

#: Deepest tensor a weights file may declare.  DLPack sets no limit; numpy 1.x
#: stopped at 32 and no model weight comes near it.  Bounding it keeps the shape
#: read (8 bytes per dim) from being a large allocation.
MAX_NDIM = 32

#: DLDataType ``(code, bits)`` -> numpy dtype, for every dtype TVM 0.21+ writes that
#: numpy (with ml_dtypes, a core dependency) can hold.  Codes are DLPack 1.1's: 0 int,
#: 1 uint, 2 float, 4 bfloat, 6 bool, 10 float8_e4m3fn, 12 float8_e5m2.  ``uint1`` is
#: how TVM up to 0.22 saved bool (one byte per element); 0.23 moved it to code 6.
_DL_TO_NUMPY: dict[tuple[int, int], np.dtype] = {
    (0, 8): np.dtype(np.int8), (0, 16): np.dtype(np.int16),
    (0, 32): np.dtype(np.int32), (0, 64): np.dtype(np.int64),
    (1, 8): np.dtype(np.uint8), (1, 16): np.dtype(np.uint16),
    (1, 32): np.dtype(np.uint32), (1, 64): np.dtype(np.uint64),
    (2, 16): np.dtype(np.float16), (2, 32): np.dtype(np.float32),
    (2, 64): np.dtype(np.float64),
    (4, 16): np.dtype(ml_dtypes.bfloat16),
    (1, 1): np.dtype(np.bool_), (6, 8): np.dtype(np.bool_),
    (10, 8): np.dtype(ml_dtypes.float8_e4m3fn), (12, 8): np.dtype(ml_dtypes.float8_e5m2),
}
#: The codes of TVM v0.19 (and v0.13..v0.20): include/tvm/runtime/data_type.h there has
#: ``kE4M3Float = 6U, kE5M2Float = 7U`` and ``is_bool()`` is ``UInt(1)``, so code 6 is
#: float8 e4m3, never bool.  Codes 10/12 stay readable: TVM 0.19 never wrote them, and
#: earlier versions of our printer did.
_DL_TO_NUMPY_V019: dict[tuple[int, int], np.dtype] = {
    **_DL_TO_NUMPY,
    (6, 8): np.dtype(ml_dtypes.float8_e4m3fn), (7, 8): np.dtype(ml_dtypes.float8_e5m2),
}
#: numpy dtype -> DLDataType code/bits written by :func:`encode_ndarray`: TVM v0.19's
#: codes (bool as ``uint1``, float8 as 6/7), since our ``#[metadata]`` claims
#: ``tvm_version`` 0.19.0 and TVM 0.19 (Relay) must read it too.
_NUMPY_TO_DL: dict[np.dtype, tuple[int, int]] = {
    dtype: key for key, dtype in _DL_TO_NUMPY_V019.items() if key not in ((10, 8), (12, 8))}

#: The TVM release that first wrote DLPack 1.1's float8 codes (apache/tvm#17831, "Bump
#: DLPack to v1.1", merged for v0.21.0; v0.20.0 still had ``kFloat8_e4m3fn = 6U``).
_FIRST_DLPACK_11_RELEASE = (0, 21)
_VERSION_RE = re.compile(r"\s*(\d{1,6})\.(\d{1,6})(?:\.(\S*))?")
#: Relay spellings of dtypes that TVM 0.20 renamed (apache/tvm#17712): v0.19 printed
#: ``e4m3_float8``; numpy (ml_dtypes) and TVM 0.27 say ``float8_e4m3fn``.
_V019_DTYPE_NAMES = {"e4m3_float8": "float8_e4m3fn", "e5m2_float8": "float8_e5m2"}


def canonical_dtype_name(name: str) -> str:
    """``name`` as numpy/ml_dtypes spell it (``e4m3_float8`` -> ``float8_e4m3fn``)."""
    return _V019_DTYPE_NAMES.get(name, name)


def uses_v019_codes(tvm_version: str) -> bool:
    """True if TVM ``tvm_version`` wrote float8 with v0.19's codes (6 e4m3, 7 e5m2).

    Everything before v0.21.0 did; a ``0.21.dev`` build may predate #17831 and reads as
    the old codes (its code 6 cannot be bool: that came in v0.23).  Raises
    :class:`ValueError` for a string that is no TVM version.
    """
    m = _VERSION_RE.match(tvm_version)
    if m is None:
        raise ValueError(f"tvm_version {shorten(tvm_version)!r} is not a TVM version "
                         "such as '0.19.0'")
    release = (int(m.group(1)), int(m.group(2)))
    if release == _FIRST_DLPACK_11_RELEASE:
        return "dev" in (m.group(3) or "")
    return release < _FIRST_DLPACK_11_RELEASE


def dtype_from_dl(code: int, bits: int, lanes: int,
                  tvm_version: Optional[str] = None) -> np.dtype:
    """Map a DLDataType written by TVM ``tvm_version`` to a numpy dtype.

    ``None`` (the writer is unknown, as for a ``.params`` file) reads the codes as
    TVM 0.27 writes them.  :class:`ValueError` for a dtype numpy cannot hold.
    """
    if lanes != 1:
        raise ValueError(f"vector dtype (code={code}, bits={bits}, lanes={lanes}) is not "
                         "supported: weights must have lanes == 1")
    old = tvm_version is not None and uses_v019_codes(tvm_version)
    dtype = (_DL_TO_NUMPY_V019 if old else _DL_TO_NUMPY).get((code, bits))
    if dtype is None:
        hint = ""
        legacy = _DL_TO_NUMPY_V019.get((code, bits))
        if tvm_version is None and legacy is not None:
            hint = (f"; TVM 0.20 and earlier wrote {legacy.name} with this code: for a file "
                    "they wrote, give tvm_version (load_params(..., tvm_version='0.19.0'))")
        raise ValueError(f"unsupported DLDataType(code={code}, bits={bits}, lanes={lanes})"
                         + hint)
    return dtype


def dl_from_dtype(dtype: np.dtype) -> tuple[int, int, int]:
    """The DLDataType TVM v0.19 wrote for ``dtype`` (see :data:`_NUMPY_TO_DL`)."""
    key = _NUMPY_TO_DL.get(np.dtype(dtype))
    if key is None:
        raise ValueError(f"unsupported dtype {dtype}")
    return key[0], key[1], 1


def fits_in_memory_model(shape: tuple[int, ...], itemsize: int) -> bool:
    """True if numpy can describe an array of ``shape`` (even an empty one).

    numpy refuses a shape whose non-zero dims multiply (times the itemsize) past
    ``2**63 - 1`` -- also when another dim is 0 -- so such a header is rejected
    here with a message rather than by numpy's ``ValueError``.
    """
    total = max(itemsize, 1)
    for dim in shape:
        if dim:
            total *= dim
    return total <= np.iinfo(np.intp).max


class TensorRecord(NamedTuple):
    """Where one validated NDArray record's data is: nothing allocated yet."""

    dtype: np.dtype
    shape: tuple[int, ...]
    data_offset: int
    nbytes: int
    end: int


#: The most bytes an NDArray record's header can take (fixed part, a shape of
#: :data:`MAX_NDIM` dims, the byte count): a window this long is all
#: :func:`scan_ndarray` reads.
RECORD_HEADER_MAX = _HEADER.size + 8 * MAX_NDIM + 8


def scan_ndarray(buf: Any, offset: int = 0, *, name: Optional[str] = None,
                 source: Optional[str] = None, kind: str = "parameter",
                 tvm_version: Optional[str] = None, base: int = 0,
                 total: Optional[int] = None) -> TensorRecord:
    """Validate the NDArray record at ``offset`` without allocating (or reading) its data.

    ``buf`` holds the bytes from offset ``base`` on: the whole blob, or -- to check a
    file without reading it -- a window of at least :data:`RECORD_HEADER_MAX` bytes at
    the record (fewer only where the file ends) of a file of ``total`` bytes.
    Checks, in the order TVM reads them: header present, magic, reserved word 0,
    CPU device, ``0 <= ndim <= MAX_NDIM``, a dtype numpy can hold with one lane
    (codes as ``tvm_version`` wrote them: :func:`dtype_from_dl`), shape present and
    non-negative, the declared byte size equal to ``prod(shape) * itemsize`` (exact
    integers: no overflow) and no larger than what remains.  Raises
    :class:`ParamFormatError` naming ``name`` and the byte offset of the bad field.
    """
    view = memoryview(buf)

    def fail(message: str, at: int) -> ParamFormatError:
        return ParamFormatError(message, name, at, source, kind)

    end = base + len(view)  # of the bytes at hand
    size = end if total is None else total  # of the whole stream
    if end - offset < _HEADER.size:
        raise fail(f"truncated tensor header: {_HEADER.size} bytes needed, "
                   f"{max(end - offset, 0)} remain", offset)
    magic, reserved, dev_type, dev_id, ndim, code, bits, lanes = \
        _HEADER.unpack_from(view, offset - base)
    if magic != NDARRAY_MAGIC:
        raise fail(f"bad tensor magic 0x{magic:016X} (expected 0x{NDARRAY_MAGIC:016X})",
                   offset)
    if reserved != 0:
        raise fail(f"reserved tensor header word is {reserved}, expected 0", offset + 8)
    if dev_type != _KDL_CPU or dev_id != 0:
        raise fail(f"tensor saved for device ({dev_type}, {dev_id}); weights files hold "
                   f"CPU tensors ({_KDL_CPU}, 0)", offset + 16)
    if not 0 <= ndim <= MAX_NDIM:
        raise fail(f"bad tensor rank {ndim} (0..{MAX_NDIM} allowed)", offset + 24)
    try:
        dtype = dtype_from_dl(code, bits, lanes, tvm_version)
    except ValueError as exc:
        raise fail(str(exc), offset + 28) from None
    pos = offset + _HEADER.size
    if end - pos < 8 * ndim:
        raise fail(f"truncated tensor shape: {ndim} dims need {8 * ndim} bytes, "
                   f"{end - pos} remain", pos)
    shape = struct.unpack_from(f"<{ndim}q", view, pos - base)
    for axis, dim in enumerate(shape):
        if dim < 0:
            raise fail(f"negative dimension {dim} in axis {axis} of shape {shape}",
                       pos + 8 * axis)
    if not fits_in_memory_model(shape, dtype.itemsize):
        raise fail(f"shape {shape} is larger than any array can be", pos)
    pos += 8 * ndim
    if end - pos < 8:
        raise fail(f"truncated tensor byte count: 8 bytes needed, {end - pos} remain", pos)
    (nbytes,) = _INT64.unpack_from(view, pos - base)
    count = 1
    for dim in shape:  # Python ints: a product of 2^40 dims cannot wrap around
        count *= dim
    expected = count * dtype.itemsize
    if nbytes != expected:
        raise fail(f"tensor byte count {nbytes} does not match shape {shape} of "
                   f"{dtype.name} ({expected} bytes)", pos)
    pos += 8
    if size - pos < nbytes:
        raise fail(f"truncated tensor data: {nbytes} bytes declared, {size - pos} remain",
                   pos)
    return TensorRecord(dtype, tuple(shape), pos, nbytes, pos + nbytes)


def materialize(buf: Any, record: TensorRecord) -> np.ndarray:
    """The array of a record validated by :func:`scan_ndarray` (an owned copy)."""
    count = record.nbytes // record.dtype.itemsize if record.dtype.itemsize else 0
    if record.dtype == np.bool_:  # any non-zero byte is True, as in C
        raw = np.frombuffer(buf, np.uint8, count, record.data_offset)
        out = np.empty(record.shape, np.bool_)
        np.not_equal(raw.reshape(record.shape), 0, out=out)
        return out
    arr = np.frombuffer(buf, record.dtype, count, record.data_offset)
    if sys.byteorder == "big" and record.dtype.itemsize > 1:  # files are little-endian
        arr = arr.byteswap()
    return arr.reshape(record.shape).copy()


def adopt_data(raw: np.ndarray, record: TensorRecord) -> np.ndarray:
    """The array of a record from ``raw``, a writable ``uint8`` array of exactly its
    data bytes that the caller gives up: no second copy of the weights is made."""
    if record.dtype == np.bool_:  # any non-zero byte is True, as in C
        return np.not_equal(raw, 0).reshape(record.shape)
    arr = raw.view(record.dtype)
    if sys.byteorder == "big" and record.dtype.itemsize > 1:  # files are little-endian
        arr.byteswap(inplace=True)
    return arr.reshape(record.shape)


def decode_ndarray(buf: Any, offset: int = 0, *, name: Optional[str] = None,
                   source: Optional[str] = None, kind: str = "parameter",
                   tvm_version: Optional[str] = None) -> tuple[np.ndarray, int]:
    """Decode one serialised TVM NDArray at ``buf[offset:]`` (written by TVM
    ``tvm_version``, ``None``: unknown, read as TVM 0.27 writes).

    Returns the array (an owned copy in native byte order) and the offset just
    past it.  Raises :class:`ParamFormatError` (a ``ValueError``) on any
    malformed field; nothing is allocated before the record is validated.
    """
    record = scan_ndarray(buf, offset, name=name, source=source, kind=kind,
                          tvm_version=tvm_version)
    return materialize(buf, record), record.end


def encode_ndarray(arr: np.ndarray) -> bytes:
    """Serialise ``arr`` in TVM's NDArray format (CPU device)."""
    arr = np.asarray(arr, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    code, bits, lanes = dl_from_dtype(arr.dtype)
    header = _HEADER.pack(NDARRAY_MAGIC, 0, _KDL_CPU, 0, arr.ndim, code, bits, lanes)
    shape = struct.pack(f"<{arr.ndim}q", *arr.shape)
    if arr.dtype == np.bool_:
        data = arr.astype(np.uint8).tobytes()
    elif sys.byteorder == "big" and arr.dtype.itemsize > 1:
        data = arr.byteswap().tobytes()
    else:
        data = arr.tobytes()
    return header + shape + _INT64.pack(len(data)) + data


#: Deepest JSON nesting accepted after ``#[metadata]``.  TVM's ``SaveJSON`` output
#: is flat (a list of nodes, each at most two levels deep); a deeper document is not
#: metadata, and refusing it up front keeps ``json.loads`` from recursing.
MAX_JSON_DEPTH = 64
#: Digits allowed in a node/array index written as a JSON string ("12"): more than
#: any real index, few enough for ``int()``.
_MAX_INDEX_DIGITS = 18
_JSON_BRACKETS = re.compile(r"[\[\]{}]")
_INDEX_TEXT = re.compile(r"-?[0-9]{1,%d}\Z" % _MAX_INDEX_DIGITS)
_SOURCE = "#[metadata]"


def _fail(message: str, name: Optional[str] = None, offset: Optional[int] = None,
          kind: str = "entry") -> ParamFormatError:
    return ParamFormatError(message, name, offset, _SOURCE, kind)


def _check_json_depth(text: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` (brackets in strings
    do not count).

    Strings are skipped with ``str.find`` so that the megabytes of base64 in
    ``b64ndarrays`` cost a ``memchr``, not a Python or regex loop per character.
    """
    depth = 0
    pos = 0  # start of the current stretch outside any string
    while True:
        quote = text.find('"', pos)
        for bracket in _JSON_BRACKETS.findall(text, pos, len(text) if quote < 0 else quote):
            if bracket in "[{":
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise _fail(f"JSON nested more than {MAX_JSON_DEPTH} levels deep; TVM "
                                "metadata is a flat node list")
            else:
                depth -= 1
        if quote < 0:
            return
        close = quote
        while True:  # the closing quote is the first one not escaped by a backslash
            close = text.find('"', close + 1)
            if close < 0:
                return  # unterminated string: json.loads reports it
            before = close - 1
            while text[before] == "\\":
                before -= 1
            if (close - 1 - before) % 2 == 0:
                break
        pos = close + 1


class _NodeGraph:
    """Typed, bounds-checked access to TVM's ``SaveJSON`` node list.

    Every accessor names the node index and key it was reading, so a damaged
    document is reported as "node 7: 'data' must be ..." instead of surfacing as
    a ``KeyError``/``TypeError`` from deep inside the decoder.
    """

    def __init__(self, doc: Any):
        if not isinstance(doc, dict):
            raise _fail(f"metadata must be a JSON object, got {_json_kind(doc)}")
        nodes = doc.get("nodes")
        if not isinstance(nodes, list):
            raise _fail(f"metadata 'nodes' must be a list, got {_json_kind(nodes)}")
        self.doc = doc
        self.nodes = nodes

    def index(self, value: Any, where: str) -> int:
        """A node/array index: a JSON int or a decimal string (TVM writes both)."""
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _fail(f"{where} must be an integer, got {_json_kind(value)}")
        if isinstance(value, str):
            if not _INDEX_TEXT.match(value):
                raise _fail(f"{where} must be an integer, got {shorten(value)!r}")
            value = int(value)
        return value

    def node(self, value: Any, where: str) -> tuple[int, dict[str, Any]]:
        index = self.index(value, where)
        if not 0 <= index < len(self.nodes):
            raise _fail(f"{where} refers to node {index}, but there are "
                        f"{len(self.nodes)} nodes")
        node = self.nodes[index]
        if not isinstance(node, dict):
            raise _fail(f"node {index} must be a JSON object, got {_json_kind(node)}")
        return index, node

    def field(self, index: int, node: dict[str, Any], key: str, kind: type,
              default: Any = None) -> Any:
        value = node.get(key, default)
        if not isinstance(value, kind):
            raise _fail(f"node {index}: {key!r} must be a {_JSON_KINDS[kind]}, "
                        f"got {_json_kind(value)}")
        return value

    def index_list(self, index: int, node: dict[str, Any], key: str) -> list[int]:
        items = self.field(index, node, key, list, [])
        return [self.index(item, f"node {index}: {key}[{i}]") for i, item in enumerate(items)]

    def root_map(self) -> dict[str, list[int]]:
        """Decode the root ``Map`` into ``{type_key: [node index, ...]}``."""
        root, node = self.node(self.doc.get("root", 1), "'root'")
        if node.get("type_key") != "Map":
            raise _fail(f"root node {root} is not a Map (type_key "
                        f"{shorten(str(node.get('type_key')))!r})")
        data = self.index_list(root, node, "data")
        if "keys" in node:
            keys = self.field(root, node, "keys", list)
            if len(keys) != len(data):
                raise _fail(f"root node {root}: {len(keys)} keys but {len(data)} values")
            pairs = list(zip(keys, data))
        else:  # older format: data = [key node, value node, ...]
            if len(data) % 2:
                raise _fail(f"root node {root}: odd number of key/value entries")
            pairs = []
            for key_ref, value in zip(data[::2], data[1::2]):
                k, key_node = self.node(key_ref, f"root node {root}: key")
                pairs.append((self.field(k, key_node, "repr_str", str, ""), value))
        out: dict[str, list[int]] = {}
        for key, value_ref in pairs:
            if not isinstance(key, str):
                raise _fail(f"root node {root}: key must be a string, got {_json_kind(key)}")
            a, array = self.node(value_ref, f"root node {root}: entry {shorten(key)!r}")
            if array.get("type_key") != "Array":
                raise _fail(f"metadata entry {shorten(key)!r} (node {a}) is not an Array")
            out[key] = [self.node(i, f"node {a}: data")[0]
                        for i in self.index_list(a, array, "data")]
        return out


_JSON_KINDS = {dict: "JSON object", list: "JSON list", str: "string", int: "integer"}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    for kind, label in _JSON_KINDS.items():
        if isinstance(value, kind):
            return f"a {label}"
    return f"a {type(value).__name__}"


def shorten(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters (``...`` at the end), for messages."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


#: The writer assumed when the JSON records none: Relay text (and its ``#[metadata]``)
#: was only ever written by TVM up to v0.19 -- v0.20 removed Relay -- and by our printer.
_RELAY_TVM_VERSION = "0.19.0"


def metadata_tvm_version(doc: dict[str, Any]) -> str:
    """The ``attrs.tvm_version`` ``SaveJSON`` recorded (v0.19 src/node/serialization.cc:
    ``g.attrs["tvm_version"] = TVM_VERSION``): it decides what DLDataType codes 6 and 7
    mean (:func:`uses_v019_codes`)."""
    attrs = doc.get("attrs", {})
    if not isinstance(attrs, dict):
        raise _fail(f"metadata 'attrs' must be a JSON object, got {_json_kind(attrs)}")
    version = attrs.get("tvm_version", _RELAY_TVM_VERSION)
    if not isinstance(version, str):
        raise _fail(f"metadata 'attrs.tvm_version' must be a string, got {_json_kind(version)}")
    try:
        uses_v019_codes(version)
    except ValueError as exc:
        raise _fail(f"metadata 'attrs.tvm_version': {exc}") from None
    return version


def parse_metadata(text: str) -> dict[str, Any]:
    """Decode the JSON after ``#[metadata]``.

    Returns ``{"constants": [ndarray|None, ...], "counts": {kind: n},
    "objects": {kind: [node dict, ...]}, "tvm_version": str, "json": text}``;
    ``constants[N]`` is the value of ``meta[relay.Constant][N]``, its DLDataType codes
    read as the writer's ``tvm_version`` (:func:`metadata_tvm_version`) wrote them.
    Raises :class:`ParamFormatError`
    (a ``ValueError``) naming the node, key or constant on malformed JSON, node
    graphs or arrays; array sizes are validated before anything is allocated.
    """
    _check_json_depth(text)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"bad JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of 5000 digits
        raise _fail(f"bad JSON: {exc}") from None
    graph = _NodeGraph(doc)
    entries = graph.root_map()
    tvm_version = metadata_tvm_version(doc)
    blobs = doc.get("b64ndarrays", [])
    if not isinstance(blobs, list):
        raise _fail(f"'b64ndarrays' must be a list, got {_json_kind(blobs)}")
    decoded: dict[int, np.ndarray] = {}
    constants: list[Optional[np.ndarray]] = []
    for n, node_index in enumerate(entries.get("relay.Constant", [])):
        const_name = f"meta[relay.Constant][{n}]"
        node = graph.nodes[node_index]
        attrs = graph.field(node_index, node, "attrs", dict, {})
        data_ref = attrs.get("data")
        if data_ref is None:
            constants.append(None)
            continue
        k = graph.index(data_ref, f"{const_name} (node {node_index}): attrs.data")
        if k not in decoded:
            if not 0 <= k < len(blobs):
                raise _fail(f"refers to array {k}, but 'b64ndarrays' has {len(blobs)}",
                            const_name, kind="constant")
            if not isinstance(blobs[k], str):
                raise _fail(f"b64ndarrays[{k}] must be a string, got {_json_kind(blobs[k])}",
                            const_name, kind="constant")
            try:
                raw = base64.b64decode(blobs[k], validate=False)
            except (binascii.Error, ValueError) as exc:
                raise _fail(f"bad base64 in b64ndarrays[{k}]: {exc}", const_name,
                            kind="constant") from None
            array, end = decode_ndarray(raw, name=const_name,
                                        source=f"{_SOURCE} b64ndarrays[{k}]", kind="constant",
                                        tvm_version=tvm_version)
            if end != len(raw):
                raise ParamFormatError(f"{len(raw) - end} bytes of trailing garbage after "
                                       "the tensor", const_name, end,
                                       f"{_SOURCE} b64ndarrays[{k}]", "constant")
            decoded[k] = array
        constants.append(decoded[k])
    return {
        "constants": constants,
        "counts": {kind: len(ix) for kind, ix in entries.items()},
        "objects": {kind: [graph.nodes[i] for i in ix] for kind, ix in entries.items()},
        "tvm_version": tvm_version,
        "json": text,
    }
