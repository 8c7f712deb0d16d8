"""Damaged artifact metadata, bundle files and input arrays: the project's error naming
the file (exit 2), never a raw exception ("internal error", exit 3).

Each case here used to escape as a Python exception: a ``model.json`` or
``manifest.json`` with a number of more digits than ``int()`` reads (ValueError) or
nested deeper than the recursion limit (RecursionError), a bundle's ``model.relay``
that is not UTF-8 (UnicodeDecodeError), and a 144-byte ``.npy`` whose header claims
10**12 float32 elements (MemoryError: numpy allocates the declared shape before it
reads).  The input arrays now go through the weights reader's checks
(:mod:`bmlib_relax.relay.params`): every declared size against the bytes there are.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.errors import ArtifactError, BundleError, ParamError, ParseError
from bmlib_relax.preflight import input_file, load_input_array, parse_input_spec, read_npz
from bmlib_relax.verify_bundle import is_bundle, read_bundle, write_bundle

from conftest import cli

LONG_NUMBER = "9" * 5000  # json.loads -> int(): "Exceeds the limit (4300 digits)"
DEEP_JSON = "[" * 100000 + "]" * 100000
RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32]) -> Tensor[(2, 3), float32] {
  nn.relu(nn.dense(%x, %w, units=3))
}
"""


def first_line(proc) -> str:
    return (proc.stderr.strip().splitlines() or [""])[0]


def npy_claiming(elements: int, data: bytes = bytes(16)) -> bytes:
    """A ``.npy`` whose header declares ``elements`` float32 values, followed by only
    ``data`` (the probe's 144-byte file for 10**12 elements)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f4", "fortran_order": False, "shape": (elements,)})
    return buf.getvalue() + data


def npz_with_member(name: str, payload: bytes) -> bytes:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(name, payload)
    return archive.getvalue()


def npz_declaring_uncompressed(size: int) -> bytes:
    """A stored member of 136 bytes whose central directory declares ``size`` bytes."""
    buf = io.BytesIO()
    np.save(buf, np.ones(2, "float32"))
    blob = bytearray(npz_with_member("x.npy", buf.getvalue()))
    central = blob.rindex(b"PK\x01\x02")  # central directory entry: file_size at +24
    struct.pack_into("<I", blob, central + 24, size)
    return bytes(blob)


# --------------------------------------------------------------------------- artifacts
@pytest.fixture
def fake_artifact(tmp_path) -> Path:
    """A library file whose metadata is read (and refused) before the library is."""
    library = tmp_path / "model.so"
    library.write_bytes(b"\x7fELF" + bytes(60))
    return library


@pytest.mark.parametrize("content, problem", [
    ('{"format": "bmlib-relax-artifact", "format_version": %s}' % LONG_NUMBER,
     "number with more than 4300 digits"),
    (DEEP_JSON, "nested too deeply"),
], ids=["long-number", "deep-nesting"])
def test_metadata_that_json_cannot_hold_is_an_artifact_error(fake_artifact, content, problem):
    meta = fake_artifact.with_suffix(".json")
    meta.write_text(content)
    with pytest.raises(ArtifactError, match=problem) as info:
        bmlib_relax.load(fake_artifact)
    assert str(info.value).startswith(f"{meta}: metadata is not valid JSON")
    assert info.value.path == str(meta)


def test_metadata_that_is_a_directory_says_so(fake_artifact):
    meta = fake_artifact.with_suffix(".json")
    meta.mkdir()
    with pytest.raises(ArtifactError, match="is a directory") as info:
        bmlib_relax.load(fake_artifact)
    assert str(meta) in str(info.value) and "missing" not in str(info.value)


def test_metadata_symlink_loop_says_so(fake_artifact):
    meta = fake_artifact.with_suffix(".json")
    os.symlink(meta.name, meta)
    with pytest.raises(ArtifactError, match="symbolic link loop") as info:
        bmlib_relax.load(fake_artifact)
    assert str(meta) in str(info.value)


def test_library_symlink_loop_is_not_reported_as_not_found(tmp_path):
    library = tmp_path / "model.so"
    os.symlink(library.name, library)
    with pytest.raises(ArtifactError, match="symbolic link loop") as info:
        bmlib_relax.load(library)
    assert str(library) in str(info.value) and "not found" not in str(info.value)


def test_dangling_library_link_is_still_not_found(tmp_path):
    library = tmp_path / "model.so"
    os.symlink("nothing_here.so", library)
    with pytest.raises(ArtifactError, match="not found.*dangling symbolic link to nothing_here.so"):
        bmlib_relax.load(library)


def test_params_symlink_loop_is_not_reported_as_not_found(tmp_path):
    params = tmp_path / "w.params"
    os.symlink(params.name, params)
    with pytest.raises(ParamError, match="symbolic link loop") as info:
        input_file(params, "params file")
    assert str(info.value).startswith(f"params file {params}")
    assert "not found" not in str(info.value)


def test_run_with_damaged_metadata_exits_2_naming_it(fake_artifact):
    meta = fake_artifact.with_suffix(".json")
    meta.write_text('{"format_version": %s}' % LONG_NUMBER)
    proc = cli("run", fake_artifact, "--fill-mode", "ones", "-q")
    assert proc.returncode == 2, proc.stderr
    assert first_line(proc).startswith(f"error: {meta}: metadata is not valid JSON")
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- bundles
@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory) -> Path:
    w = (np.arange(12, dtype="float32") / 10).reshape(3, 4)
    x = np.ones((2, 4), "float32")
    return write_bundle(tmp_path_factory.mktemp("bundle") / "good", RELAY, {"w": w},
                        {"x": x}, [np.maximum(x @ w.T, 0)])


def copy_bundle(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def resign(bundle: Path) -> None:
    """Record the SHA-256s of the bundle's files again, as a re-recording would."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name in manifest["files"]:
        manifest["files"][name] = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, problem", [
    (lambda t: t.replace('"format_version": 1', f'"format_version": {LONG_NUMBER}'),
     "number with more than 4300 digits"),
    (lambda t: DEEP_JSON, "nested too deeply"),
], ids=["long-number", "deep-nesting"])
def test_manifest_that_json_cannot_hold_is_a_bundle_error(good_bundle, tmp_path, damage,
                                                          problem):
    bundle = copy_bundle(good_bundle, tmp_path / "b")
    manifest = bundle / "manifest.json"
    manifest.write_text(damage(manifest.read_text()))
    assert is_bundle(bundle)  # reported as a damaged bundle, not skipped nor raised
    with pytest.raises(BundleError, match=problem) as info:
        read_bundle(bundle)
    assert str(info.value).startswith(f"{manifest}: invalid JSON")


def test_manifest_that_is_a_directory_says_so(good_bundle, tmp_path):
    bundle = copy_bundle(good_bundle, tmp_path / "b")
    (bundle / "manifest.json").unlink()
    (bundle / "manifest.json").mkdir()
    with pytest.raises(BundleError, match="manifest.json is a directory"):
        read_bundle(bundle)


def test_oversized_manifest_is_refused_before_it_is_read(good_bundle, tmp_path, monkeypatch):
    from bmlib_relax import verify_bundle

    bundle = copy_bundle(good_bundle, tmp_path / "big")
    manifest = bundle / "manifest.json"
    size = manifest.stat().st_size
    monkeypatch.setattr(verify_bundle, "MAX_MANIFEST_BYTES", size - 1)
    read = []
    monkeypatch.setattr(verify_bundle.json, "loads", lambda *a, **k: read.append(a))
    assert is_bundle(bundle)  # reported as a damaged bundle, not skipped
    with pytest.raises(BundleError, match=rf"manifest is {size:,} bytes, more than"):
        read_bundle(bundle)
    assert not read


def test_bundle_from_a_golden_with_a_damaged_expected_npz_names_it(tmp_path):
    from bmlib_relax.verify_bundle import bundle_from_golden

    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "model.relay").write_text(RELAY)
    (golden / "manifest.json").write_text(json.dumps({"name": "g", "params": [],
                                                      "inputs": []}))
    (golden / "expected.npz").write_bytes(npz_with_member("out0.npy", npy_claiming(10**12)))
    with pytest.raises(ParamError, match="expected.npz"):
        bundle_from_golden(golden, tmp_path / "out")


def test_relay_text_that_is_not_utf8_is_a_parse_error_at_its_byte(good_bundle, tmp_path):
    bundle = copy_bundle(good_bundle, tmp_path / "b")
    with open(bundle / "model.relay", "ab") as handle:
        handle.write(b"// caf\xe9\n")
    resign(bundle)
    lines = RELAY.count("\n")
    with pytest.raises(ParseError, match=r"not UTF-8 text \(byte offset") as info:
        read_bundle(bundle).relay_text()
    assert (info.value.source_name, info.value.line, info.value.column) == (
        str(bundle / "model.relay"), lines + 1, 7)


@pytest.mark.parametrize("blob, problem", [
    (npz_with_member("x.npy", npy_claiming(10**12)), "needs 4000000000000 data bytes"),
    (npz_declaring_uncompressed(2**31), "declares 2147483648 bytes"),
], ids=["npy-header-claims-4TB", "zip-declares-2GB"])
def test_bundle_npz_declaring_more_than_it_holds_is_a_bundle_error(good_bundle, tmp_path,
                                                                   blob, problem):
    bundle = copy_bundle(good_bundle, tmp_path / "b")
    (bundle / "inputs.npz").write_bytes(blob)
    resign(bundle)
    with pytest.raises(BundleError, match=problem) as info:
        read_bundle(bundle).inputs()
    assert str(info.value).startswith(f"{bundle / 'inputs.npz'}: not a readable .npz")
    assert info.value.path == str(bundle / "inputs.npz")


def test_bundle_npz_values_are_read_as_recorded(good_bundle):
    bundle = read_bundle(good_bundle)
    with np.load(good_bundle / "outputs.npz") as npz:
        want = npz["out0"]
    (got,) = bundle.outputs()
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype and bundle.inputs()["x"].shape == (2, 4)


def test_verify_reports_each_damaged_bundle_and_exits_2(good_bundle, tmp_path):
    long_number = copy_bundle(good_bundle, tmp_path / "long_number")
    text = (long_number / "manifest.json").read_text()
    (long_number / "manifest.json").write_text(
        text.replace('"format_version": 1', f'"format_version": {LONG_NUMBER}'))
    deep = copy_bundle(good_bundle, tmp_path / "deep")
    (deep / "manifest.json").write_text(DEEP_JSON)
    latin1 = copy_bundle(good_bundle, tmp_path / "latin1")
    with open(latin1 / "model.relay", "ab") as handle:
        handle.write(b"// caf\xe9\n")
    resign(latin1)
    proc = cli("verify", long_number, deep, latin1, "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 3, proc.stderr
    assert errors[0].startswith(f"error: {long_number / 'manifest.json'}: invalid JSON")
    assert errors[1].startswith(f"error: {deep / 'manifest.json'}: invalid JSON")
    line = RELAY.count("\n") + 1
    assert errors[2].startswith(f"error: {latin1 / 'model.relay'}:{line}:7: not UTF-8 text")


# --------------------------------------------------------------------------- input arrays
def test_npy_claiming_a_terabyte_is_refused_before_allocating(tmp_path):
    claim = tmp_path / "claim.npy"
    claim.write_bytes(npy_claiming(10**12))
    assert claim.stat().st_size == 144
    with pytest.raises(ParamError, match="needs 4000000000000 data bytes, found 16") as info:
        load_input_array(str(claim), "x")
    assert str(info.value).startswith(f"input 'x': {claim} is not a readable .npy file")
    assert info.value.name == "x"
    with pytest.raises(ParamError, match="needs 4000000000000 data bytes"):
        parse_input_spec(f"x={claim}")


def test_npy_input_values_and_dtypes_are_kept(tmp_path):
    for array in (np.arange(6, dtype=">f4").reshape(2, 3),
                  np.asfortranarray(np.arange(6, dtype="int64").reshape(2, 3)),
                  np.array([True, False]), np.float16(1.5) * np.ones(3, "float16")):
        np.save(tmp_path / "a.npy", array)
        got = load_input_array(str(tmp_path / "a.npy"), "a")
        np.testing.assert_array_equal(got, array)
        assert got.dtype == array.dtype.newbyteorder("=") and got.shape == array.shape


@pytest.mark.parametrize("blob, problem", [
    (npz_with_member("x.npy", npy_claiming(10**12)), "needs 4000000000000 data bytes"),
    (npz_declaring_uncompressed(2**31), "declares 2147483648 bytes"),
], ids=["npy-header-claims-4TB", "zip-declares-2GB"])
def test_npz_input_declaring_more_than_it_holds_is_refused(tmp_path, blob, problem):
    path = tmp_path / "in.npz"
    path.write_bytes(blob)
    with pytest.raises(ParamError, match=problem) as info:
        read_npz(str(path))
    assert str(info.value).startswith(f"{path}: not a readable .npz")
    with pytest.raises(ParamError, match=problem):
        load_input_array(str(path), "x")


def test_npz_input_messages_of_before_are_kept(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.array(["a", "b"]))
    with pytest.raises(ParamError, match="member 'x' holds <U1 values"):
        read_npz(str(tmp_path / "s.npz"))
    np.save(tmp_path / "x.npy", np.ones(2, "float32"))
    with pytest.raises(ParamError, match=r"a single array \(\.npy\), expected a \.npz"):
        read_npz(str(tmp_path / "x.npy"))
    (tmp_path / "p.npz").write_bytes(struct.pack("<QQQQ", 0xF7E58D4F05049CB7, 0, 0, 0))
    with pytest.raises(ParamError, match="not a readable .npz"):  # .params bytes: no archive
        read_npz(str(tmp_path / "p.npz"))


def test_npz_input_values_are_read(tmp_path):
    arrays = {"x": np.arange(8, dtype="float32").reshape(2, 4), "n": np.array(3, "int8"),
              "b": np.arange(3, dtype=">i8")}
    np.savez_compressed(tmp_path / "in.npz", **arrays)
    got = read_npz(str(tmp_path / "in.npz"))
    assert sorted(got) == sorted(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(got[name], array)
        assert got[name].shape == array.shape


def test_convert_with_a_claiming_npy_input_exits_2(tmp_path):
    (tmp_path / "m.relay").write_text(RELAY)
    claim = tmp_path / "claim.npy"
    claim.write_bytes(npy_claiming(10**12))
    proc = cli("convert", tmp_path / "m.relay", "--inputs", f"x={claim}", "-o", tmp_path / "o")
    assert proc.returncode == 2, proc.stderr
    assert first_line(proc).startswith(f"error: input 'x': {claim} is not a readable .npy")
    assert "MemoryError" not in proc.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize("target, problem", [
    ('{"kind": "llvm", "a": %s}' % LONG_NUMBER, "number with more than 4300 digits"),
    ('{"kind": "llvm", "a": %s}' % ("[" * 50000 + "]" * 50000), "nested too deeply"),
], ids=["long-number", "deep-nesting"])
def test_target_json_that_json_cannot_hold_is_a_usage_error(tmp_path, capsys, target,
                                                            problem):
    from bmlib_relax.cli import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["convert", str(tmp_path / "m.relay"), "-o",
                                   str(tmp_path / "o"), "--target", target])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("bmlib-relax convert: error: argument --target: --target is not "
                          "valid JSON: ") and problem in err
