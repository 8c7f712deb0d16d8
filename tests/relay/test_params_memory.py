"""A ~1 KB malformed weights payload may not cost more than a few MB.

Headers that declare 2^40 elements, a 2^32-byte name, a member of 2^31 bytes or
a tensor inside ``#[metadata]`` must be refused from the header alone.  Measured
two ways: ``tracemalloc`` peak in-process (numpy reports its buffers to it) and
the peak virtual size of a child process, which also sees C allocations that
tracemalloc cannot.
"""
from __future__ import annotations

import base64
import io
import json
import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bmlib_relax.errors import ParamFormatError
from bmlib_relax.relay.metadata import NDARRAY_MAGIC, parse_metadata
from bmlib_relax.relay.params import load_params
from bmlib_relax.relay.parser import parse

PARAMS_MAGIC = 0xF7E58D4F05049CB7
BUDGET = 4 << 20  # "a few MB"
ROOT = Path(__file__).resolve().parents[2]


def tensor_header(dims: tuple[int, ...], nbytes: int, code: int = 2, bits: int = 32) -> bytes:
    return (struct.pack("<QQiiiBBH", NDARRAY_MAGIC, 0, 1, 0, len(dims), code, bits, 1)
            + struct.pack(f"<{len(dims)}q", *dims) + struct.pack("<q", nbytes))


def pad_to_1kb(blob: bytes) -> bytes:
    return blob + bytes(1024 - len(blob))


def params_with_2_pow_40_elements() -> bytes:
    return pad_to_1kb(struct.pack("<QQQQ", PARAMS_MAGIC, 0, 1, 1) + b"w"
                      + struct.pack("<Q", 1) + tensor_header((2**20, 2**20), 4 * 2**40))


def params_with_2_pow_32_byte_name() -> bytes:
    return pad_to_1kb(struct.pack("<QQQQ", PARAMS_MAGIC, 0, 1, 2**32))


def params_with_2_pow_40_names() -> bytes:
    return pad_to_1kb(struct.pack("<QQQ", PARAMS_MAGIC, 0, 2**40))


def npz_member_with_2_pow_40_elements() -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("w.npy", buf.getvalue() + bytes(800))
    return archive.getvalue()


def npz_member_declaring_2_pow_31_bytes() -> bytes:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("w.npy", bytes(900))
    blob = bytearray(archive.getvalue())
    central = blob.rindex(b"PK\x01\x02")
    struct.pack_into("<I", blob, central + 24, 2**31)  # uncompressed size
    return bytes(blob)


def npz_deflate_bomb_member() -> bytes:
    """1 MB of zeros deflates to ~1 KB; the header claims 2^40 floats."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.npy", buf.getvalue() + bytes(1 << 20))
    return archive.getvalue()


def metadata_with_2_pow_40_element_tensor() -> str:
    raw = tensor_header((2**20, 2**20), 4 * 2**40) + bytes(256)
    doc = {"root": 1, "nodes": [{"type_key": ""},
                                {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
                                {"type_key": "Array", "data": [3]},
                                {"type_key": "relay.Constant", "attrs": {"data": "0"}}],
           "b64ndarrays": [base64.b64encode(raw).decode()]}
    return json.dumps(doc)


def metadata_nested_1kb() -> str:
    return "[" * 1024


def metadata_referencing_node_10_pow_12() -> str:
    return json.dumps({"root": 1, "nodes": [{}, {"type_key": "Map", "keys": ["k"],
                                                "data": [10**12]}]})


CASES = {
    "params_2_pow_40_elements": lambda: load_params(params_with_2_pow_40_elements()),
    "params_2_pow_32_byte_name": lambda: load_params(params_with_2_pow_32_byte_name()),
    "params_2_pow_40_names": lambda: load_params(params_with_2_pow_40_names()),
    "npz_member_2_pow_40_elements": lambda: load_params(npz_member_with_2_pow_40_elements()),
    "npz_member_declaring_2_pow_31_bytes":
        lambda: load_params(npz_member_declaring_2_pow_31_bytes()),
    "npz_deflate_bomb_member": lambda: load_params(npz_deflate_bomb_member()),
    "metadata_2_pow_40_element_tensor":
        lambda: parse_metadata(metadata_with_2_pow_40_element_tensor()),
    "metadata_nested_1kb": lambda: parse_metadata(metadata_nested_1kb()),
    "metadata_node_10_pow_12": lambda: parse_metadata(metadata_referencing_node_10_pow_12()),
    "relay_text_with_bad_metadata":
        lambda: parse("def @main() { meta[relay.Constant][0] }\n#[metadata]\n"
                      + metadata_with_2_pow_40_element_tensor()),
}


def traced_peak(action) -> tuple[int, BaseException]:
    """Peak bytes traced while ``action`` runs, and the exception it raised."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        with pytest.raises(Exception) as info:
            action()
        return tracemalloc.get_traced_memory()[1] - before, info.value
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_1kb_payload_costs_at_most_a_few_mb(case):
    peak, error = traced_peak(CASES[case])
    assert isinstance(error, ParamFormatError) or type(error).__name__ == "ParseError", error
    assert peak < BUDGET, f"{case}: peak {peak / 2**20:.1f} MB"


def test_memory_probe_sees_numpy_allocations():
    """The measurement can fail: a 64 MB numpy buffer shows up in the traced peak."""
    def allocate_then_fail():
        np.ones(16 << 20, dtype=np.float32)
        raise ParamFormatError("probe")

    peak, _ = traced_peak(allocate_then_fail)
    assert peak >= 60 << 20


CHILD = r"""
import sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
import test_params_memory as cases

def vm_peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmPeak:"):
            return int(line.split()[1])

before = vm_peak_kb()
for name in sorted(cases.CASES):
    try:
        cases.CASES[name]()
    except cases.ParamFormatError:
        pass
    except Exception as exc:
        if type(exc).__name__ != "ParseError":
            raise
print(vm_peak_kb() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_malformed_payloads_do_not_grow_virtual_memory_of_a_child_process():
    """Also catches allocations outside tracemalloc (C++/TVM, untouched mmap)."""
    code = CHILD.format(root=str(ROOT), tests=str(Path(__file__).parent))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    growth_kb = int(out.stdout.strip().splitlines()[-1])
    assert growth_kb * 1024 < 32 << 20, f"VmPeak grew by {growth_kb} kB"
