"""A library cut short is refused before ``dlopen`` maps it, even when its metadata was
rewritten to match.

The size and SHA-256 checks catch a library damaged after export, but not one whose
metadata was recomputed for the damaged file (a "repair" script, a copy tool that
rewrote both).  ``dlopen`` then mapped segments past the end of the file and the
process died with SIGBUS (exit 135) on the first touch.  Every cut below ran through
``bmlib_relax.load`` in a subprocess: the process must survive and print the error.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import ArtifactError
from bmlib_relax.runtime import check_elf_extent, metadata_digest


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    x = relay.var("x", shape=(2, 8))
    w = relay.var("w", shape=(8, 8))
    mod = relay.IRModule.from_expr(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))))
    model = bmlib_relax.compile(mod, {"w": np.ones((8, 8), "float32")})
    path = tmp_path_factory.mktemp("artifact") / "model.so"
    model.export_library(str(path))
    return path


def _cut_and_resign(exported: Path, folder: Path, keep: int) -> Path:
    """A copy of the artifact whose library keeps ``keep`` bytes (negative: all but), its
    metadata rewritten to the damaged library's size and digests."""
    shutil.copytree(exported.parent, folder)
    library = folder / exported.name
    data = library.read_bytes()
    data = data[:keep]
    library.write_bytes(data)
    meta_path = library.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["size"] = len(data)
    meta["sha256"] = hashlib.sha256(data).hexdigest()
    meta["metadata_sha256"] = metadata_digest(meta)
    meta_path.write_text(json.dumps(meta))
    return library


def test_the_exported_library_passes(exported):
    check_elf_extent(str(exported))
    out = bmlib_relax.load(str(exported))(x=np.ones((2, 8), "float32"))
    np.testing.assert_array_equal(out, np.full((2, 8), 8, "float32"))


@pytest.mark.parametrize("fraction", [0.1, 0.4, 0.6, 0.9, 0.995])
def test_cut_library_with_rewritten_metadata_is_refused(exported, tmp_path, fraction):
    keep = int(exported.stat().st_size * fraction)
    library = _cut_and_resign(exported, tmp_path / "cut", keep)
    with pytest.raises(ArtifactError, match=r"damaged library: .* past the end of the file"):
        check_elf_extent(str(library))


def test_loading_cut_libraries_is_an_error_not_a_crash(exported, tmp_path):
    # 0.4 cuts into a segment (SIGBUS before the check), 0.995 only the section headers.
    size = exported.stat().st_size
    libraries = [_cut_and_resign(exported, tmp_path / f"cut{i}", int(size * fraction))
                 for i, fraction in enumerate((0.4, 0.995))]
    code = ("import sys, numpy as np, bmlib_relax\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        bmlib_relax.load(path)(x=np.ones((2, 8), 'float32'))\n"
            "    except bmlib_relax.errors.ArtifactError as e:\n"
            "        print('refused:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code, *map(str, libraries)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    assert [line.startswith(f"refused: {lib}: damaged library") for lib, line
            in zip(libraries, lines)] == [True, True], proc.stdout


def test_cut_inside_the_elf_header_is_refused(exported, tmp_path):
    library = _cut_and_resign(exported, tmp_path / "cut", 40)
    with pytest.raises(ArtifactError, match="ELF header cut short"):
        check_elf_extent(str(library))


def test_a_file_that_is_no_elf_is_left_to_the_loader(tmp_path):
    other = tmp_path / "model.dylib"
    other.write_bytes(b"\xcf\xfa\xed\xfe" + bytes(60))
    check_elf_extent(str(other))
