"""Golden bundles: a Relay build's inputs and outputs, verified on bmlib-relax.

A bundle is a folder written on the old stack by ``scripts/record_relay_golden.py``
(``relay.build`` + graph executor), or by :func:`write_bundle`:

``model.relay``    Relay text (``mod.astext(show_meta_data=True)``), weights as
                   parameters of ``@main``
``model.params``   the weights (``save_param_dict`` bytes)
``inputs.npz``     inputs by name; ``outputs.npz`` the Relay outputs ``out0, out1 ...``
``manifest.json``  ``"format": "bmlib-golden-bundle"``, TVM version and target of the
                   recording, tolerance, signatures and the SHA-256 of every file

:func:`verify_bundle` checks the SHA-256s first (a damaged bundle is a
:class:`~bmlib_relax.errors.BundleError` naming the file), compiles the model
with bmlib, requires that something was offloaded, compares with
``outputs.npz`` and, on a mismatch, names the first intermediate where the bmlib
build and the plain Relax build part (the same localisation as
``convert --check``). ``bmlib-relax verify`` and the pytest plugin
(``pytest --bmlib-golden DIR``) are thin layers over it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from .errors import BundleError

BUNDLE_FORMAT = "bmlib-golden-bundle"
BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
#: A manifest names a few files, inputs and outputs: far below this.  A larger one is
#: refused before it is read (``json`` would hold all of it, several times over).
MAX_MANIFEST_BYTES = 16 << 20
BUNDLE_FILES = ("model.relay", "model.params", "inputs.npz", "outputs.npz")


def sha256_of(path: os.PathLike | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- reading
@dataclass
class GoldenBundle:
    """A bundle whose files were checked against the SHA-256s of its manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.path.name)

    @property
    def tolerance(self) -> tuple[float, float]:
        tol = self.manifest.get("tolerance") or {}
        return float(tol.get("rtol", 1e-4)), float(tol.get("atol", 1e-4))

    def file(self, name: str) -> Path:
        return self.path / name

    def relay_text(self) -> str:
        """The Relay text; bytes that are not UTF-8 (a Latin-1 comment in a re-recorded
        bundle) are a ``ParseError`` at their line, column and byte offset, as for
        ``convert``'s model file, not a bare UnicodeDecodeError."""
        from .preflight import read_model_text

        return read_model_text(self.file("model.relay"))

    def params(self) -> dict[str, np.ndarray]:
        from .relay.params import load_params

        return load_params(self.file("model.params"))

    def inputs(self) -> dict[str, np.ndarray]:
        return _read_npz(self.file("inputs.npz"))

    def outputs(self) -> list[np.ndarray]:
        arrays = _read_npz(self.file("outputs.npz"))
        names = [f"out{i}" for i in range(len(arrays))]
        if sorted(arrays) != sorted(names):
            raise BundleError(f"{self.file('outputs.npz')}: expected arrays out0..out"
                              f"{len(arrays) - 1}, found {', '.join(sorted(arrays))}",
                              str(self.file("outputs.npz")))
        return [arrays[n] for n in names]


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a bundle's ``.npz``, read with the checks of an input file
    (:func:`~bmlib_relax.preflight.guarded_npz`: no declared size beyond the bytes
    there are is allocated, no pickle loaded); damage is a ``BundleError`` naming it."""
    from .errors import ParamError
    from .preflight import guarded_npz

    try:
        return guarded_npz(str(path))
    except ParamError as exc:
        detail = str(exc)
        prefix = f"{path}: "
        message = detail if detail.startswith(prefix) else f"{path}: not a readable .npz " \
            f"({detail})"
        raise BundleError(message, str(path)) from None


def is_bundle(folder: Path) -> bool:
    """A folder whose ``manifest.json`` declares the bundle format (or cannot be read,
    so that the damage is reported rather than the bundle silently skipped)."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return False
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return True  # read_bundle says what is wrong with it
        return json.loads(manifest.read_text()).get("format") == BUNDLE_FORMAT
    except (ValueError, AttributeError, RecursionError, OSError):  # ValueError: also
        return True  # UnicodeDecodeError, and a number too long for int()


def find_bundles(roots: Iterable[os.PathLike | str]) -> list[Path]:
    """Every bundle under ``roots``; a root that is itself a bundle folder (it holds a
    ``manifest.json``) is taken as given, whatever its manifest says."""
    found: list[Path] = []
    for root in map(Path, roots):
        if not root.exists():
            raise BundleError(f"bundle folder not found: {root}", str(root))
        if os.path.lexists(root / MANIFEST):  # read_bundle says what is wrong with it
            found.append(root)
            continue
        for folder, dirs, _ in os.walk(root):
            dirs.sort()
            if is_bundle(Path(folder)):
                found.append(Path(folder))
    return found


def read_bundle(path: os.PathLike | str) -> GoldenBundle:
    """Read a bundle's manifest and check every file against its SHA-256."""
    folder = Path(path)
    manifest_path = folder / MANIFEST
    manifest = _read_manifest(manifest_path)
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{manifest_path}: not a golden bundle manifest (expected "
                          f"\"format\": \"{BUNDLE_FORMAT}\")", str(manifest_path))
    problem = _manifest_problem(manifest)
    if problem:
        raise BundleError(f"{manifest_path}: {problem}", str(manifest_path))
    if manifest.get("format_version", 0) > BUNDLE_VERSION:
        raise BundleError(f"{manifest_path}: bundle format version "
                          f"{manifest.get('format_version')} is newer than this bmlib-relax "
                          f"reads ({BUNDLE_VERSION})", str(manifest_path))
    digests = manifest.get("files")
    if not isinstance(digests, dict):
        raise BundleError(f"{manifest_path}: no \"files\" table of SHA-256s", str(manifest_path))
    for name in BUNDLE_FILES:
        file = folder / name
        want = digests.get(name)
        if want is None:
            raise BundleError(f"{manifest_path}: no SHA-256 for {name}", str(manifest_path))
        got = _file_sha256(file)
        if got != want:
            raise BundleError(f"{file}: damaged: SHA-256 {got[:16]}... differs from the "
                              f"manifest's {str(want)[:16]}... (changed after recording?)",
                              str(file))
    return GoldenBundle(folder, manifest)


def _file_sha256(file: Path) -> str:
    """The SHA-256 of a bundle file; one that is missing, a folder, a link that cannot
    be followed or unreadable is a ``BundleError`` naming it."""
    from .preflight import unresolvable_link

    if not file.is_file():
        link = unresolvable_link(file)
        what = f"is {link}" if link else "is a directory" if file.is_dir() else \
            "missing from the bundle"
        raise BundleError(f"{file}: {what}", str(file))
    try:
        return sha256_of(file)
    except OSError as exc:
        raise BundleError(f"{file}: cannot read: {exc.strerror or exc}", str(file)) from None


def _read_manifest(manifest_path: Path) -> Any:
    """The JSON value of a bundle's manifest; a missing, unreadable or damaged one is a
    ``BundleError`` naming it -- also JSON that Python's decoder cannot hold (nested
    deeper than it recurses, a number of more digits than ``int()`` reads), which used
    to end ``verify`` in an internal error."""
    from .preflight import json_problem, unresolvable_link

    where = str(manifest_path)
    if manifest_path.is_dir():
        raise BundleError(f"{manifest_path} is a directory, expected the bundle's manifest "
                          "file", where)
    if not manifest_path.is_file():
        link = unresolvable_link(manifest_path)
        raise BundleError(f"{manifest_path} is {link}" if link else
                          f"{manifest_path.parent}: no {MANIFEST} (not a golden bundle)", where)
    try:
        size = manifest_path.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise BundleError(f"{manifest_path}: manifest is {size:,} bytes, more than a "
                              f"bundle's manifest can need ({MAX_MANIFEST_BYTES:,})", where)
        return json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BundleError(f"{manifest_path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}",
                          where) from None
    except UnicodeDecodeError as exc:
        raise BundleError(f"{manifest_path}: byte {exc.start}: not UTF-8 text", where) from None
    except OSError as exc:
        raise BundleError(f"{manifest_path}: cannot read: {exc.strerror or exc}", where) \
            from None
    except (ValueError, RecursionError) as exc:
        raise BundleError(f"{manifest_path}: invalid JSON: {json_problem(exc)}", where) \
            from None


def _manifest_problem(manifest: dict[str, Any]) -> Optional[str]:
    """What is wrong with the fields of a manifest that are read as values (a hand-edited
    ``"format_version": "1.0"``, ``"tolerance": {"rtol": "tight"}``, a negative atol),
    naming the field; None when they are as ``write_bundle`` writes them.  They used to
    end ``verify`` in an internal error."""
    version = manifest.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return (f"\"format_version\" is {version!r}; expected a whole number such as "
                f"{BUNDLE_VERSION}")
    tol = manifest.get("tolerance")
    if tol is None:
        return None
    if not isinstance(tol, dict):
        return (f"\"tolerance\" is {tol!r}; expected an object such as "
                "{\"rtol\": 1e-4, \"atol\": 1e-4}")
    for key in ("rtol", "atol"):
        value = tol.get(key, 0.0)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not math.isfinite(value) or value < 0:
            return (f"\"tolerance\".\"{key}\" is {value!r}; expected a number that is "
                    "zero or more")
    return None


# --------------------------------------------------------------------------- writing
def write_bundle(outdir: os.PathLike | str, relay_text: str, params: Mapping[str, np.ndarray],
                 inputs: Mapping[str, np.ndarray], outputs: Sequence[np.ndarray], *,
                 name: Optional[str] = None, rtol: float = 1e-4, atol: float = 1e-4,
                 recorded_with: Optional[Mapping[str, Any]] = None, target: str = "llvm",
                 opt_level: int = 3, extra: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a bundle in the format of ``scripts/record_relay_golden.py``."""
    import tvm

    folder = Path(outdir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.relay").write_text(relay_text, encoding="utf-8")
    blob = tvm.runtime.save_param_dict({k: tvm.runtime.tensor(np.ascontiguousarray(v))
                                        for k, v in params.items()})
    (folder / "model.params").write_bytes(bytes(blob))
    np.savez(folder / "inputs.npz", **inputs)
    np.savez(folder / "outputs.npz", **{f"out{i}": o for i, o in enumerate(outputs)})
    manifest = {
        "format": BUNDLE_FORMAT, "format_version": BUNDLE_VERSION,
        "name": name or folder.name,
        "recorded_with": dict(recorded_with or {}),
        "target": target, "opt_level": opt_level, "byoc": None, "seed": None,
        "tolerance": {"rtol": rtol, "atol": atol},
        "inputs": [_signature(k, v) for k, v in inputs.items()],
        "params": [_signature(k, v) for k, v in params.items()],
        "outputs": [_signature(f"out{i}", o) for i, o in enumerate(outputs)],
        **dict(extra or {}),
        "files": {f: sha256_of(folder / f) for f in BUNDLE_FILES},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return folder


def _signature(name: str, array: np.ndarray) -> dict[str, Any]:
    return {"name": name, "shape": list(np.shape(array)), "dtype": str(np.asarray(array).dtype)}


def bundle_from_golden(golden: os.PathLike | str, outdir: os.PathLike | str) -> Path:
    """Convert a vendored golden (``tests/data/<case>``: ``model.relay``, recipe-v1
    ``manifest.json``, ``expected.npz``) into a bundle with the same values."""
    from .preflight import guarded_npz
    from .recipe import recipe_from_manifest

    folder = Path(golden)
    manifest = _read_manifest(folder / MANIFEST)
    expected = guarded_npz(str(folder / "expected.npz"))
    outputs = [expected[f"out{i}"] for i in range(len(expected))]
    tol = manifest.get("tolerance", {})
    return write_bundle(
        outdir, (folder / "model.relay").read_text(),
        recipe_from_manifest(manifest.get("params", []), "param"),
        recipe_from_manifest(manifest.get("inputs", []), "input"), outputs,
        name=manifest.get("name", folder.name), rtol=tol.get("rtol", 1e-4),
        atol=tol.get("atol", 1e-4),
        recorded_with={"tvm_version": "0.19.0", "source": f"golden {folder.name} (recipe v1)"})


# --------------------------------------------------------------------------- verifying
@dataclass
class BundleResult:
    """What verifying one bundle found (``ok`` only if offloaded *and* equal)."""

    name: str
    path: str
    ok: bool
    rtol: float
    atol: float
    partitions: list[str] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    first_divergence: Optional[dict[str, Any]] = None
    plain_outputs: list[dict[str, Any]] = field(default_factory=list)
    problem: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self) -> str:
        """One line (plus a detail line on failure), as ``bmlib-relax verify`` prints it."""
        worst = max((o["max_abs"] for o in self.outputs), default=0.0)
        if self.ok:
            return (f"PASS {self.name}: {len(self.partitions)} bmlib partition(s), max abs diff "
                    f"{worst:.3g} (rtol {self.rtol:g}, atol {self.atol:g})")
        lines = [f"FAIL {self.name}: {self.problem}"]
        div = self.first_divergence
        if div:
            lines.append(f"  first diverging intermediate: {div['binding']} from "
                         f"{div['producer']} (max abs {div['max_abs']:.3g})")
        elif self.plain_outputs:
            plain = max(o["max_abs"] for o in self.plain_outputs)
            ok = all(o["ok"] for o in self.plain_outputs)
            lines.append("  no intermediate differs between the bmlib and the plain Relax "
                         f"build; the plain build {'matches' if ok else 'differs from'} "
                         f"outputs.npz too (max abs {plain:.3g}): "
                         + ("look at the bmlib output path" if ok else
                            "the difference is in the Relay import or in the recorded outputs"))
        return "\n".join(lines)


def verify_bundle(bundle: GoldenBundle | os.PathLike | str, *, rtol: Optional[float] = None,
                  atol: Optional[float] = None, merge: bool = False,
                  target: Any = None) -> BundleResult:
    """Compile ``bundle`` with bmlib and compare with its recorded outputs."""
    from .backend.target import resolve_target
    from .check import compare, first_divergence, plain_version
    from .compiler import build_offloaded, compile as bmlib_compile, compile_plain
    from .relay import parse
    from .runtime import ModelRunner

    if not isinstance(bundle, GoldenBundle):
        bundle = read_bundle(bundle)
    default_rtol, default_atol = bundle.tolerance
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    target = resolve_target(target)
    module = parse(bundle.relay_text(), source_name=str(bundle.file("model.relay")))
    model = bmlib_compile(module, bundle.params(), target=target, merge=merge)
    result = BundleResult(bundle.name, str(bundle.path), False, rtol, atol,
                          [p.name for p in model.report.partitions])
    if not result.partitions:
        result.problem = "nothing was offloaded to bmlib (no pattern matched)"
        return result
    inputs = bundle.inputs()
    want = bundle.outputs()
    got_list = _flat_outputs(model(**inputs))
    if len(got_list) != len(want):
        result.problem = (f"the model returns {len(got_list)} output(s), outputs.npz holds "
                          f"{len(want)}")
        return result
    diffs = compare(tuple(got_list), tuple(want), rtol, atol)
    result.outputs = [d.to_dict() for d in diffs]
    dtype_problems = [f"out{i}: dtype {g.dtype} != recorded {w.dtype}"
                      for i, (g, w) in enumerate(zip(got_list, want)) if g.dtype != w.dtype]
    bad = [d for d in diffs if not d.ok]
    if not bad and not dtype_problems:
        result.ok = True
        return result
    if dtype_problems:
        result.problem = "; ".join(dtype_problems)
        return result
    result.problem = "; ".join(f"{d.name} differs from the Relay output (max abs "
                               f"{d.max_abs:.3g}, max rel {d.max_rel:.3g})" for d in bad) \
        + f" beyond rtol {rtol:g}, atol {atol:g}"
    arrays = [inputs[n] for n in model.input_names]
    result.first_divergence = first_divergence(model.relax_module, arrays, build_offloaded,
                                               target, rtol, atol)
    if result.first_divergence is None:
        plain = ModelRunner(compile_plain(plain_version(model.relax_module), target),
                            model.input_names, huge_pages=False)  # one call
        plain_out = tuple(_flat_outputs(plain(**inputs)))
        result.plain_outputs = [d.to_dict() for d in compare(plain_out, tuple(want), rtol,
                                                             atol)]
    return result


def _flat_outputs(outputs: Any) -> list[np.ndarray]:
    """A model's outputs as the list ``outputs.npz`` holds: the leaves of nested tuples in
    order, as v0.19's graph executor numbered them (``get_output(i)`` for ``i <
    get_num_outputs()`` in ``record_relay_golden.py``; ``(a, (b, c))`` is ``out0, out1,
    out2``) and as ``run`` / ``convert`` flatten them (:func:`~.runtime.named_outputs`)."""
    from .runtime import named_outputs

    return [array for _, array in named_outputs(outputs)]
