"""Bounded fuzzing of every untrusted input the front door reads.

Targets: Relay text (parser), ``.params`` bytes, ``.npz`` bytes and
``#[metadata]`` payloads.  Every mutated input must end in a result or a
:class:`~bmlib_relax.errors.BmlibError` -- never another exception.

Each target runs a seeded random loop for ``BMLIB_FUZZ_SECONDS`` (default 1.5 s)
and at least ``MIN_CASES`` cases, so the default run stays short and a long run is
``BMLIB_FUZZ_SECONDS=600 pytest tests/relay/test_fuzz_inputs.py``.  Change the
seed with ``BMLIB_FUZZ_SEED``; a failure prints the seed, case number and input.
"""
from __future__ import annotations

import base64
import copy
import io
import json
import os
import random
import re
import struct
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest
import tvm

from bmlib_relax.errors import BmlibError
from bmlib_relax.relay import ast as A
from bmlib_relax.relay.metadata import parse_metadata
from bmlib_relax.relay.params import load_npy, load_params
from bmlib_relax.relay.parser import parse, parse_expr
from bmlib_relax.relay.printer import astext

FUZZ_SECONDS = float(os.environ.get("BMLIB_FUZZ_SECONDS", "1.5"))
SEED = int(os.environ.get("BMLIB_FUZZ_SEED", "20261201"))
MIN_CASES = 150
DATA = Path(__file__).resolve().parents[1] / "data"


def fuzz(target_name: str, seeds: list, mutate: Callable[[Any, random.Random, list], Any],
         run: Callable[[Any], Any], show: Callable[[Any], str] = repr) -> int:
    """Run ``run(mutate(seed))`` until the time budget and MIN_CASES are both spent."""
    rng = random.Random(f"{SEED}:{target_name}")
    deadline = time.monotonic() + FUZZ_SECONDS
    cases = 0
    while cases < MIN_CASES or time.monotonic() < deadline:
        case = mutate(rng.choice(seeds), rng, seeds)
        try:
            run(case)
        except BmlibError:
            pass
        except Exception as exc:  # report a reproducer, not just the exception
            text = show(case)
            raise AssertionError(
                f"{target_name}: case {cases} (BMLIB_FUZZ_SEED={SEED}) raised "
                f"{type(exc).__name__}: {str(exc)[:500]}\n--- input ---\n{text[:3000]}") from exc
        cases += 1
    return cases


# ---------------------------------------------------------------------- byte mutations
INTERESTING = [0, 1, 2, 7, 8, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
               2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def mutate_bytes(blob: bytes, rng: random.Random, pool: list) -> bytes:
    data = bytearray(blob)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(8)
        at = rng.randrange(len(data) + 1)
        if op == 0:  # truncate
            del data[at:]
        elif op == 1 and data:  # flip bits
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 2:  # overwrite a field with a boundary value
            width = rng.choice([1, 2, 4, 8])
            value = rng.choice(INTERESTING) % (1 << (8 * width))
            data[at:at + width] = value.to_bytes(width, "little")
        elif op == 3:  # insert random bytes
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 4:  # delete a run
            del data[at:at + rng.randint(1, 32)]
        elif op == 5:  # duplicate a run
            data[at:at] = data[at:at + rng.randint(1, 64)]
        elif op == 6 and pool:  # splice with another seed
            other = rng.choice(pool)
            if isinstance(other, (bytes, bytearray)):
                j = rng.randrange(len(other) + 1)
                data = data[:at] + bytearray(other[j:])
        else:  # trailing garbage
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(data)


def _arrays_for_seeds() -> list[dict[str, np.ndarray]]:
    return [
        {"w": np.arange(12, dtype="float32").reshape(3, 4), "b": np.ones(4, "float32")},
        {"scalar": np.array(2.5, "float32"), "i8": np.array([-1, 2], "int8"),
         "mask": np.array([True, False, True])},
        {"h": np.linspace(0, 1, 5).astype("float16"), "empty": np.zeros((0, 2), "int32"),
         "i64": np.array([2**40], "int64"), "u8": np.arange(3, dtype="uint8")},
        {"": np.zeros(1, "float64"), "bf": np.ones(2, ml_dtypes.bfloat16)},
        {},
    ]


def test_fuzz_params_bytes_end_in_weights_or_param_error():
    seeds = [bytes(tvm.runtime.save_param_dict({k: tvm.runtime.tensor(v) for k, v in d.items()}))
             for d in _arrays_for_seeds()]

    def run(blob: bytes):
        loaded = load_params(blob)
        # Anything that loads is made of real bytes: no array is bigger than the file.
        assert sum(a.nbytes for a in loaded.values()) <= len(blob)

    assert fuzz("params", seeds, mutate_bytes, run) >= MIN_CASES


# ---------------------------------------------------------------------- .npz
def _npz(arrays: dict[str, np.ndarray], compressed: bool) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


_NPY_NOISE = ["(", ")", ",", "'", "{", "}", "True", "False", "'<f4'", "'|O'", "'<U3'",
              "-1", "99999999999999999999", "(2, 3)", "'shape'", "'descr'", "[", "]", "\x00",
              "9" * 5000, "(" * 300]


def mutate_npy(data: bytes, rng: random.Random, pool: list) -> bytes:
    """Header-text edits (valid length field) or byte damage of a lone ``.npy``."""
    end = data.find(b"\n") + 1 or len(data)
    if rng.random() < 0.5 and end > 10:
        header = data[10:end].decode("latin-1")
        at = rng.randrange(len(header) + 1)
        header = header[:at] + rng.choice(_NPY_NOISE) + header[at + rng.randint(0, 6):]
        raw = header.encode("latin-1", "replace")
        return data[:8] + struct.pack("<H", min(len(raw), 0xFFFF)) + raw + data[end:]
    return mutate_bytes(data, rng, pool)


def mutate_npz(blob_or_members, rng: random.Random, pool: list) -> bytes:
    """Either damage the archive bytes, or damage one member's .npy bytes and re-zip
    (valid CRC) so that the .npy validation itself is exercised."""
    if isinstance(blob_or_members, bytes):
        return mutate_bytes(blob_or_members, rng, pool)
    members = dict(blob_or_members)
    name = rng.choice(sorted(members))
    data = members[name] = mutate_npy(members[name], rng, [])
    if rng.random() < 0.2:
        members[rng.choice(["x.txt", "dir/", "y.npy", ".npy"])] = rng.choice([b"", data])
    buf = io.BytesIO()
    method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    with zipfile.ZipFile(buf, "w", method) as archive:
        for member, content in members.items():
            archive.writestr(member, content)
    return buf.getvalue()


def test_fuzz_npz_bytes_end_in_weights_or_param_error():
    arrays = [{k: v for k, v in d.items() if v.dtype != ml_dtypes.bfloat16 and k}
              for d in _arrays_for_seeds()]
    seeds: list = [_npz(d, c) for d in arrays for c in (False, True)]
    seeds += [{f"{k}.npy": _npy(v) for k, v in d.items()} for d in arrays if d]
    seeds.append({"o.npy": _npy(np.array([None, 1], dtype=object))})

    def run(blob: bytes):
        loaded = load_params(blob)
        for name, value in loaded.items():
            assert isinstance(value, np.ndarray) and value.dtype.kind in "biuf", name

    assert fuzz("npz", seeds, mutate_npz, run) >= MIN_CASES


def test_fuzz_single_npy_bytes_end_in_array_or_param_error():
    seeds = [_npy(v) for d in _arrays_for_seeds() for k, v in d.items()
             if v.dtype != ml_dtypes.bfloat16]
    seeds.append(_npy(np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3))))

    def run(data: bytes):
        array = load_npy(data, name="x")
        assert array.dtype.kind in "biuf" and array.nbytes <= len(data)

    assert fuzz("npy", seeds, mutate_npy, run) >= MIN_CASES


# ---------------------------------------------------------------------- #[metadata]
def _metadata_module() -> str:
    x = A.Var("x", A.TensorType((2, 3), "float32"))
    w = A.Constant(np.arange(6, dtype="float32").reshape(2, 3))
    m = A.Constant(np.array([True, False]))
    s = A.Constant(np.array(3, "int8"))
    body = A.Call(A.Op("where"), (m, A.Call(A.Op("add"), (x, w)), A.Call(A.Op("cast"), (s,))))
    return astext(A.IRModule({"main": A.Function((x,), body)}))


_META_MODULE = _metadata_module()
_META_PROGRAM, _META_JSON = _META_MODULE.split("#[metadata]")

JSON_VALUES = [None, True, 0, -1, 1, 3, 10**12, 2**63, "0", "1", "-5", "x", "9" * 30, 1.5, [],
               {}, [0], ["3"], {"type_key": "Array"}, {"type_key": "Map", "data": [2]},
               [[[[[1]]]]], "P6G0lvBAXt0A", "relay.Constant"]


def _containers(value, out: list) -> list:
    if isinstance(value, (dict, list)):
        out.append(value)
        for child in (value.values() if isinstance(value, dict) else value):
            _containers(child, out)
    return out


def mutate_metadata(text: str, rng: random.Random, pool: list) -> str:
    op = rng.randrange(4)
    if op == 0:  # byte-level damage to the JSON text
        return mutate_bytes(text.encode(), rng, []).decode("utf-8", "replace")
    doc = json.loads(text)
    target = rng.choice(_containers(doc, []))
    if op == 1 and target:  # replace one value by a value of another JSON type
        key = rng.choice(list(target)) if isinstance(target, dict) else rng.randrange(len(target))
        target[key] = copy.deepcopy(rng.choice(JSON_VALUES))
    elif op == 2 and target:  # delete one key / item
        key = rng.choice(list(target)) if isinstance(target, dict) else rng.randrange(len(target))
        del target[key]
    elif doc.get("b64ndarrays"):  # damage one serialised array (valid base64)
        blobs = doc["b64ndarrays"]
        k = rng.randrange(len(blobs))
        raw = base64.b64decode(blobs[k]) if isinstance(blobs[k], str) else b""
        blobs[k] = base64.b64encode(mutate_bytes(raw, rng, [])).decode()
    return json.dumps(doc)


def test_fuzz_metadata_payloads_end_in_constants_or_bmlib_error():
    seeds = [_META_JSON]
    for path in [DATA / "seed_reshape_conv2d_add_bn_relu" / "model_bound.relay"]:
        if path.exists():
            seeds.append(path.read_text().split("#[metadata]", 1)[1])

    def run(text: str):
        if len(text) % 4 == 0:  # now and then through the parser, as a user meets it
            parse(_META_PROGRAM + "#[metadata]" + text)
        else:
            parse_metadata(text)

    assert fuzz("metadata", seeds, mutate_metadata, run) >= MIN_CASES


# ---------------------------------------------------------------------- parser
PARSER_SNIPPETS = [
    'def @main(%x: Tensor[(1, 4), float32]) { %0 = nn.relu(%x); %1 = (%0, %x); %1.0 }',
    'type List[A] { Cons(A, List[A]), Nil }\n'
    'def @len[A](%l: List[A]) -> int32 { match (%l) { Cons(_, %r) => add(1, @len(%r)), '
    'Nil => 0 } }\ndef @main() { @len(Cons(1f, Nil)) }',
    'extern type Opaque[A]\ndef @main(%c: bool) { if (%c) { ref_read(ref(1i64)) } '
    'else { -2i64 } }',
    'fn (%x: float16, %y) { let %z = multiply(%x, 0.5f16); nn.pad(%z, pad_width=[[0, 1]], '
    'pad_value=-inff) }',
    'def @main(%a {virtual_device=meta[VirtualDevice][0]}: Tensor[(?, 2), int8]) '
    '-> Tensor[(?, 2), int8] { %a }',
    _META_MODULE,
]
_PIECES = re.compile(r"\s+|%?[\w.]+|/\*|\*/|->|=>|.", re.S)
_PARSER_NOISE = ["(", ")", "[", "]", "{", "}", ",", ";", "=", "%", "@", "meta", "fn", "let",
                 "if", "else", "match", "type", "extern", "def", "/*", "*/", "//", '"', "#[",
                 "-", ".0", "1e", "inff", "?", "_", "\x00", "\u00e9", "\u00b2", "\n",
                 "Tensor[", "%0", "1.5i8", "9" * 5000, "." + "1" * 5000, "1" + "0" * 400 + "f",
                 "#[metadata]", "#[metadata]\n{}", "#[metadata]\n[" * 3, "%x.\u0663"]


def mutate_text(text: str, rng: random.Random, pool: list) -> str:
    pieces = _PIECES.findall(text)
    for _ in range(rng.randint(1, 3)):
        if not pieces:
            return text
        op = rng.randrange(7)
        i = rng.randrange(len(pieces))
        if op == 0:
            del pieces[i:i + rng.randint(1, 4)]
        elif op == 1:
            pieces.insert(i, pieces[i])
        elif op == 2:
            j = rng.randrange(len(pieces))
            pieces[i], pieces[j] = pieces[j], pieces[i]
        elif op == 3:
            pieces = pieces[:i]
        elif op == 4:
            pieces.insert(i, rng.choice(_PARSER_NOISE))
        elif op == 5:
            pieces.insert(i, "".join(chr(rng.randrange(1, 0x3000))
                                     for _ in range(rng.randint(1, 6))))
        else:
            opener = rng.choice(["(", "[", "{", "f(", "fn () {", "if (", "(1, ", "-"])
            pieces.insert(i, opener * rng.choice([10, 1100, 5000]))
    return "".join(pieces)


def _parser_seeds() -> list[str]:
    texts = [p.read_text() for p in sorted(DATA.glob("*/model.relay"))
             if p.stat().st_size <= 16_000]
    corpus = os.environ.get("BMLIB_RELAY_CORPUS")
    if corpus and FUZZ_SECONDS > 10:  # long runs also mutate the shared corpus
        texts += [p.read_text() for p in sorted(Path(corpus).rglob("*.relay"))
                  if p.stat().st_size <= 16_000]
    return texts + PARSER_SNIPPETS


def test_fuzz_parser_text_ends_in_module_or_parse_error():
    def run(text: str):
        for entry in (parse, parse_expr):
            try:
                entry(text, "<fuzz>")
            except BmlibError:
                pass

    assert fuzz("parser", _parser_seeds(), mutate_text, run) >= MIN_CASES


def test_fuzz_harness_reports_foreign_exceptions():
    """The loop above can fail: a target raising anything but BmlibError is reported."""
    def run(blob: bytes):
        raise KeyError("boom")

    with pytest.raises(AssertionError, match="KeyError"):
        fuzz("self-test", [b"x"], mutate_bytes, run)

