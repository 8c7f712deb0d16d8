"""Shipped artifacts: one metadata file per library, SHA-256 verified before TVM opens it.

A damaged ``.so`` used to be found only by its symptoms (SIGBUS when cut short, a
silently different output after one flipped bit); a second ``export_library`` into
the same folder used to overwrite the first one's signature.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import ArtifactError, BmlibError

from conftest import ROOT, cli, offloaded_partitions


def _dense_relu(units: int, seed: int):
    """A tiny offloadable model: relu(dense(x, W)) with W bound as a weight."""
    x = relay.var("x", shape=(1, 8), dtype="float32")
    w = relay.var("w", shape=(units, 8), dtype="float32")
    func = relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w)))
    weight = np.random.default_rng(seed).standard_normal((units, 8)).astype("float32")
    return func, {"w": weight}


@pytest.fixture(scope="module")
def two_models():
    models = []
    for units, seed in ((4, 0), (6, 1)):
        func, params = _dense_relu(units, seed)
        model = bmlib_relax.compile(func, params)
        assert offloaded_partitions(model.relax_module), "nothing was offloaded"
        models.append(model)
    return models


@pytest.fixture(scope="module")
def x():
    return np.linspace(-1, 1, 8, dtype="float32").reshape(1, 8)


@pytest.fixture(scope="module")
def artifact_dir(two_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("artifacts")
    two_models[0].export_library(folder / "a.so")
    two_models[1].export_library(folder / "b.so")
    return folder


@pytest.fixture
def fresh_copy(artifact_dir, tmp_path):
    """A private copy of artifact ``a`` to damage."""
    for name in ("a.so", "a.json"):
        shutil.copy(artifact_dir / name, tmp_path / name)
    return tmp_path / "a.so"


def test_each_artifact_keeps_its_own_metadata(two_models, artifact_dir, x):
    assert (artifact_dir / "a.json").is_file() and (artifact_dir / "b.json").is_file()
    assert not (artifact_dir / "model.json").exists()
    a, b = bmlib_relax.load(artifact_dir / "a.so"), bmlib_relax.load(artifact_dir / "b.so")
    assert a.input_specs == two_models[0].input_specs
    assert b.input_specs == two_models[1].input_specs
    np.testing.assert_allclose(a(x=x), two_models[0](x), rtol=1e-6)
    np.testing.assert_allclose(b(x=x), two_models[1](x), rtol=1e-6)
    assert a(x=x).shape == (1, 4) and b(x=x).shape == (1, 6)


def test_metadata_records_sha256_and_size_of_the_library(artifact_dir):
    import hashlib

    meta = json.loads((artifact_dir / "a.json").read_text())
    data = (artifact_dir / "a.so").read_bytes()
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert meta["size"] == len(data)
    assert meta["library"] == "a.so"
    # The signature both ways: what the model takes and what it returns.
    assert meta["inputs"] == [{"name": "x", "shape": [1, 8], "dtype": "float32"}]
    assert meta["outputs"] == [{"name": "out0", "shape": [1, 4], "dtype": "float32"}]


def test_export_writes_atomically_leaving_no_temporary_files(artifact_dir):
    assert sorted(os.listdir(artifact_dir)) == ["a.json", "a.so", "b.json", "b.so"]


def test_flipped_bit_is_detected_before_loading(fresh_copy):
    data = bytearray(fresh_copy.read_bytes())
    data[len(data) // 2] ^= 0x01
    fresh_copy.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="SHA-256") as info:
        bmlib_relax.load(fresh_copy)
    assert str(fresh_copy) in str(info.value)


def test_truncated_library_is_an_error_not_a_sigbus(fresh_copy):
    with open(fresh_copy, "r+b") as handle:
        handle.truncate(os.path.getsize(fresh_copy) // 3)
    script = textwrap.dedent(f"""
        import bmlib_relax
        try:
            bmlib_relax.load({str(fresh_copy)!r})
        except bmlib_relax.ArtifactError as exc:
            print("ArtifactError:", exc)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # a SIGBUS would be -7
    assert "ArtifactError:" in proc.stdout and "truncated" in proc.stdout


def test_run_refuses_a_damaged_library_with_exit_2(fresh_copy):
    data = bytearray(fresh_copy.read_bytes())
    data[-100] ^= 0x80
    fresh_copy.write_bytes(bytes(data))
    proc = cli("run", fresh_copy)
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {fresh_copy}: SHA-256"), first


@pytest.mark.parametrize("content, problem", [
    (None, "metadata file .* is missing"),
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"format": "something-else"}', "'format'"),
    (b'{"format": "bmlib-relax-artifact", "size": 1, "inputs": []}', "'sha256'"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply|not valid JSON"),
], ids=["missing", "not-json", "not-utf8", "not-object", "other-format", "no-sha",
        "deep-nesting"])  # short ids: pytest exports the id (PYTEST_CURRENT_TEST) to g++
def test_bad_metadata_is_an_artifact_error_naming_the_file(fresh_copy, content, problem):
    meta = fresh_copy.with_suffix(".json")
    if content is None:
        meta.unlink()
    else:
        meta.write_bytes(content)
    with pytest.raises(ArtifactError, match=problem) as info:
        bmlib_relax.load(fresh_copy)
    assert str(meta) in str(info.value)


@pytest.mark.parametrize("mutate", [
    lambda m: m.update(inputs={"x": 1}),
    lambda m: m.update(inputs=[{"name": "x", "shape": "1,8", "dtype": "float32"}]),
    lambda m: m.update(inputs=[{"name": "x", "shape": [1, 8], "dtype": "floot32"}]),
    lambda m: m.update(size="12"),
    lambda m: m.pop("sha256"),
    lambda m: m.update(largest_tensor={"bytes": "1", "shape": [], "dtype": "float32",
                                       "what": "x"}),
], ids=["inputs-not-list", "shape-not-list", "unknown-dtype", "size-not-int", "no-sha",
        "largest-tensor"])
def test_malformed_metadata_fields_are_artifact_errors(fresh_copy, mutate):
    meta_path = fresh_copy.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    mutate(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="bad artifact metadata") as info:
        bmlib_relax.load(fresh_copy)
    assert str(meta_path) in str(info.value)


def test_artifact_error_is_exported_and_a_bmlib_error():
    assert issubclass(bmlib_relax.ArtifactError, BmlibError)
    assert "ArtifactError" in bmlib_relax.__all__


def test_load_imports_only_tvm_and_numpy(artifact_dir, x):
    np.save(artifact_dir.parent / "x_in.npy", x)
    script = textwrap.dedent(f"""
        import sys, numpy as np, bmlib_relax
        model = bmlib_relax.load({str(artifact_dir / "a.so")!r})
        model(x=np.load({str(artifact_dir.parent / "x_in.npy")!r}))
        ours = sorted(m for m in sys.modules if m.startswith("bmlib_relax."))
        print(ours)
        # threads: the model's thread count (a few lines of os / cgroup reading);
        # interrupts: the Ctrl-C record atomic writes ask (a threading.Event);
        # hugepages: placing the weights after the first call (ctypes, madvise);
        # switches: reading its BMLIB_HUGE_PAGES off switch; memory: the memory this
        # process may use (a few lines of /proc and cgroup reading, getrlimit); dims: the
        # one static-dim test (isinstance IntImm) the metadata's shapes are written with;
        # deep_stack: the thread a recursive model's calls run on (threading only)
        assert ours == ["bmlib_relax.deep_stack", "bmlib_relax.dims", "bmlib_relax.errors",
                        "bmlib_relax.hugepages",
                        "bmlib_relax.interrupts", "bmlib_relax.memory", "bmlib_relax.runtime",
                        "bmlib_relax.switches", "bmlib_relax.threads"], ours
        # tvm_ffi imports torch itself whenever torch is installed (a work-around of
        # its own): only what bmlib_relax adds on top of `import tvm` counts
        heavy = [m for m in ("torch", "scipy", "jsonschema") if m in sys.modules]
        import subprocess
        by_tvm = subprocess.run([sys.executable, "-c", "import sys, tvm; print(sorted(sys.modules))"],
                                capture_output=True, text=True, check=True).stdout
        heavy = [m for m in heavy if repr(m) not in by_tvm]
        assert not heavy, heavy
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_library_that_tvm_cannot_load_is_an_artifact_error(tmp_path):
    """Metadata that matches a file which is not a shared library at all."""
    from bmlib_relax.runtime import export_artifact

    class TextWriter:
        def export_library(self, path):
            with open(path, "w") as handle:
                handle.write("not an ELF file")

    export_artifact(TextWriter(), tmp_path / "t.so", [])
    with pytest.raises(ArtifactError, match="TVM cannot load the library"):
        bmlib_relax.load(tmp_path / "t.so")


def test_loading_an_artifact_again_reuses_its_library(artifact_dir, tmp_path, x):
    """TVM keeps whatever load_module reads alive for good (each load of a ResNet-18
    artifact grew the process by ~56 MB): the same library bytes, loaded again -- from
    any path -- share the first load's module, each model with a VM of its own."""
    first = bmlib_relax.load(artifact_dir / "a.so")
    for name in ("a.so", "a.json"):
        shutil.copy(artifact_dir / name, tmp_path / name)
    again = bmlib_relax.load(tmp_path / "a.so")
    other = bmlib_relax.load(artifact_dir / "b.so")
    assert again.executable.same_as(first.executable)
    assert not other.executable.same_as(first.executable)
    assert again._vm is not first._vm
    np.testing.assert_array_equal(again(x=x), first(x=x))
    # A damaged copy is still refused before anything is reused.
    data = bytearray((tmp_path / "a.so").read_bytes())
    data[len(data) // 3] ^= 0x10
    (tmp_path / "a.so").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="SHA-256"):
        bmlib_relax.load(tmp_path / "a.so")


def test_export_paths_that_would_destroy_a_file_are_refused(two_models, tmp_path):
    model = two_models[0]
    (tmp_path / "d").mkdir()
    for path, problem in [(tmp_path / "d" / "model.json", "named like its own metadata"),
                          (tmp_path / "d", "is a directory"),
                          (tmp_path / "missing" / "m.so", "does not exist"),
                          ("", "no library file name")]:
        with pytest.raises(ArtifactError, match=problem):
            model.export_library(path)
    assert sorted(os.listdir(tmp_path / "d")) == []
    model.export_library(tmp_path / "d" / "a.so")
    model.export_library(tmp_path / "d" / "a.so")  # the same artifact again: fine
    with pytest.raises(ArtifactError, match="describes another artifact"):
        model.export_library(tmp_path / "d" / "a.tar")  # d/a.json is a.so's metadata
    (tmp_path / "d" / "keras.json").write_text('{"class_name": "Sequential"}')
    with pytest.raises(ArtifactError, match="not a bmlib-relax artifact"):
        model.export_library(tmp_path / "d" / "keras.so")
    assert (tmp_path / "d" / "keras.json").read_text() == '{"class_name": "Sequential"}'
    bmlib_relax.load(tmp_path / "d" / "a.so")  # untouched by the refused exports


def test_damaged_side_file_is_a_warning_naming_it(two_models, tmp_path, x):
    """The files recorded beside the library (the Relax source, its weights, reports)
    are checked on load: a changed one is a DamagedSideFileWarning naming it (the
    library, verified on its own, still loads and runs); an absent one is no damage."""
    from bmlib_relax.errors import DamagedSideFileWarning

    source, notes = tmp_path / "model_relax.py", tmp_path / "notes.txt"
    source.write_text("# the partitioned module\n")
    notes.write_text("recorded too\n")
    two_models[0].export_library(tmp_path / "m.so", files=[source, notes])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = bmlib_relax.load(tmp_path / "m.so")(x)  # intact: no warning
    notes.unlink()
    source.write_text("# edited after export\n")
    with pytest.warns(DamagedSideFileWarning) as caught:
        got = bmlib_relax.load(tmp_path / "m.so")(x)
    assert [str(w.message.path) for w in caught] == [str(source)]
    np.testing.assert_array_equal(got, want)


def test_side_file_record_outside_the_folder_is_an_artifact_error(fresh_copy):
    meta = fresh_copy.with_suffix(".json")
    data = json.loads(meta.read_text())
    data["files"] = {"../elsewhere.py": "0" * 64}
    data["metadata_sha256"] = bmlib_relax.runtime.metadata_digest(data)
    meta.write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="elsewhere"):
        bmlib_relax.load(fresh_copy)
