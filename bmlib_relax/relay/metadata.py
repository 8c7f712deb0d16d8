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
import struct
from typing import Any, Optional

import numpy as np

__all__ = ["NDARRAY_MAGIC", "decode_ndarray", "encode_ndarray", "parse_metadata",
           "dtype_from_dl", "dl_from_dtype"]

#: First 8 bytes (little-endian uint64) of every serialised TVM NDArray.
NDARRAY_MAGIC = 0xDD5E40F096B4A13F

_HEADER = struct.Struct("<QQiiiBBH")  # magic, reserved, dev type, dev id, ndim, dtype
_INT64 = struct.Struct("<q")

# DLDataTypeCode values: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool (newer DLPack).
_DL_CODES = {0: "int", 1: "uint", 2: "float"}


def dtype_from_dl(code: int, bits: int, lanes: int) -> np.dtype:
    """Map a DLDataType to a numpy dtype (bool is ``uint1``/``bool8``)."""
    if lanes != 1:
        raise ValueError(f"vector dtype with {lanes} lanes is not supported")
    if (code == 1 and bits == 1) or (code == 6 and bits == 8):
        return np.dtype(np.bool_)
    if code == 4 and bits == 16:
        raise ValueError("bfloat16 arrays are not supported by numpy")
    base = _DL_CODES.get(code)
    if base is None or bits not in (8, 16, 32, 64) or (base == "float" and bits == 8):
        raise ValueError(f"unsupported DLDataType(code={code}, bits={bits})")
    return np.dtype(f"{base}{bits}").newbyteorder("<")


def dl_from_dtype(dtype: np.dtype) -> tuple[int, int, int]:
    """Inverse of :func:`dtype_from_dl`."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return 1, 1, 1
    code = {"i": 0, "u": 1, "f": 2}.get(dtype.kind)
    if code is None:
        raise ValueError(f"unsupported dtype {dtype}")
    return code, dtype.itemsize * 8, 1


def decode_ndarray(buf: bytes, offset: int = 0) -> tuple[np.ndarray, int]:
    """Decode one serialised TVM NDArray at ``buf[offset:]``.

    Returns the array (a copy, little-endian, native layout) and the offset just
    past it.  Raises :class:`ValueError` on a bad magic, truncated data or a size
    that does not match the shape.
    """
    view = memoryview(buf)
    if len(view) - offset < _HEADER.size:
        raise ValueError("truncated NDArray header")
    magic, _reserved, _dev_type, _dev_id, ndim, code, bits, lanes = \
        _HEADER.unpack_from(view, offset)
    if magic != NDARRAY_MAGIC:
        raise ValueError(f"bad NDArray magic 0x{magic:016X}")
    if not 0 <= ndim <= 64:
        raise ValueError(f"bad NDArray ndim {ndim}")
    pos = offset + _HEADER.size
    if len(view) - pos < 8 * ndim + 8:
        raise ValueError("truncated NDArray shape")
    shape = struct.unpack_from(f"<{ndim}q", view, pos)
    pos += 8 * ndim
    if any(d < 0 for d in shape):
        raise ValueError(f"bad NDArray shape {shape}")
    (nbytes,) = _INT64.unpack_from(view, pos)
    pos += 8
    dtype = dtype_from_dl(code, bits, lanes)
    count = int(np.prod(shape, dtype=np.int64)) if ndim else 1
    if nbytes != count * dtype.itemsize:
        raise ValueError(f"NDArray data size {nbytes} does not match shape {shape} "
                         f"of {dtype}")
    if len(view) - pos < nbytes:
        raise ValueError("truncated NDArray data")
    raw = bytes(view[pos:pos + nbytes])
    if dtype == np.bool_:
        arr = np.frombuffer(raw, dtype=np.uint8).astype(np.bool_)
    else:
        arr = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))
    return arr.reshape(shape), pos + nbytes


def encode_ndarray(arr: np.ndarray) -> bytes:
    """Serialise ``arr`` in TVM's NDArray format (CPU device)."""
    arr = np.ascontiguousarray(arr)
    code, bits, lanes = dl_from_dtype(arr.dtype)
    header = _HEADER.pack(NDARRAY_MAGIC, 0, 1, 0, arr.ndim, code, bits, lanes)
    shape = struct.pack(f"<{arr.ndim}q", *arr.shape)
    if arr.dtype == np.bool_:
        data = arr.astype(np.uint8).tobytes()
    else:
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
    return header + shape + _INT64.pack(len(data)) + data


def _root_map(nodes: list[dict[str, Any]], root: int) -> dict[str, list[int]]:
    """Decode the root ``Map`` into ``{type_key: [node index, ...]}``."""
    node = nodes[root]
    if node.get("type_key") != "Map":
        raise ValueError("metadata root is not a Map")
    data = [int(x) for x in node.get("data", [])]
    if "keys" in node:
        pairs = zip(node["keys"], data)
    else:  # older format: data = [key node, value node, ...]
        pairs = ((nodes[k].get("repr_str", ""), v) for k, v in zip(data[::2], data[1::2]))
    out: dict[str, list[int]] = {}
    for key, value_index in pairs:
        array = nodes[value_index]
        if array.get("type_key") != "Array":
            raise ValueError(f"metadata entry {key!r} is not an Array")
        out[str(key)] = [int(x) for x in array.get("data", [])]
    return out


def parse_metadata(text: str) -> dict[str, Any]:
    """Decode the JSON after ``#[metadata]``.

    Returns ``{"constants": [ndarray|None, ...], "counts": {kind: n},
    "objects": {kind: [node dict, ...]}, "json": text}``; ``constants[N]`` is
    the value of ``meta[relay.Constant][N]``.  Raises :class:`ValueError` on
    malformed JSON or arrays.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") \
            from None
    if not isinstance(doc, dict) or "nodes" not in doc:
        raise ValueError("metadata JSON has no 'nodes'")
    nodes = doc["nodes"]
    try:
        entries = _root_map(nodes, int(doc.get("root", 1)))
    except (IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"bad metadata node graph ({exc})") from None
    blobs: list[str] = doc.get("b64ndarrays", [])
    decoded: dict[int, np.ndarray] = {}
    constants: list[Optional[np.ndarray]] = []
    for node_index in entries.get("relay.Constant", []):
        data_ref = nodes[node_index].get("attrs", {}).get("data")
        if data_ref is None:
            constants.append(None)
            continue
        k = int(data_ref)
        if k not in decoded:
            if not 0 <= k < len(blobs):
                raise ValueError(f"relay.Constant refers to missing array {k}")
            try:
                raw = base64.b64decode(blobs[k], validate=False)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"bad base64 in array {k}: {exc}") from None
            decoded[k] = decode_ndarray(raw)[0]
        constants.append(decoded[k])
    return {
        "constants": constants,
        "counts": {kind: len(ix) for kind, ix in entries.items()},
        "objects": {kind: [nodes[i] for i in ix] for kind, ix in entries.items()},
        "json": text,
    }
