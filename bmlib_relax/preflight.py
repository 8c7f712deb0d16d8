"""Checks of a conversion's inputs and output folder that need no TVM.

``bmlib-relax convert`` runs them before it imports the compiler, so bad input
(a folder given as the model, a non-empty ``-o``, a negative ``--inputs`` dim, an
unreadable ``.npy`` ...) fails in a fraction of a second, with exit code 2, and
nothing has been compiled.  ``convert`` runs them again for library callers.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .errors import ParamError, ParseError

# ``--inputs name=shape``: the check fills such inputs with generated values, so a
# shape is bounded (no accidental multi-GB allocation from a typo).
MAX_INPUT_DIM = 2**31 - 1
MAX_INPUT_ELEMENTS = 2**28


@dataclass
class InputSpec:
    """A model input given on the command line: a shape/dtype or an array."""

    name: str
    shape: Optional[tuple[int, ...]] = None
    dtype: Optional[str] = None
    data: Optional[np.ndarray] = None


def parse_input_spec(text: str) -> InputSpec:
    """``name=1,3,224,224:float32`` (recipe values) or ``name=file.npy`` /
    ``name=file.npz`` (given values; from an archive its member ``name``, or its only
    member, as ``run --input`` reads it)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ParamError(f"bad --inputs spec {text!r}: expected name=shape:dtype or "
                         "name=file.npy")
    if rest.endswith((".npy", ".npz")):
        data = load_input_array(rest, name)
        return InputSpec(name, tuple(data.shape), str(data.dtype), data)
    shape_text, _, dtype = rest.partition(":")
    try:
        shape = tuple(int(d) for d in shape_text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise ParamError(f"bad --inputs spec {text!r}: shape {shape_text!r} is not a "
                         "comma-separated list of integers", name) from None
    bad = [d for d in shape if d < 1 or d > MAX_INPUT_DIM]
    if bad:
        raise ParamError(f"bad --inputs spec {text!r}: dimension {bad[0]} is not in "
                         f"1..{MAX_INPUT_DIM}", name)
    if int(np.prod(shape, dtype=object)) > MAX_INPUT_ELEMENTS:
        raise ParamError(f"bad --inputs spec {text!r}: {int(np.prod(shape, dtype=object)):,} "
                         f"elements is more than {MAX_INPUT_ELEMENTS:,}", name)
    if dtype:
        try:
            np.dtype(dtype)
        except TypeError:
            raise ParamError(f"bad --inputs spec {text!r}: unknown dtype {dtype!r}", name) from None
    return InputSpec(name, shape, dtype or None)


def unique_specs(specs: Any) -> dict:
    """``{name: spec}`` of the ``--inputs`` specs; an input given twice is an error."""
    named: dict = {}
    for spec in specs:
        if spec.name in named:
            raise ParamError(f"--inputs gives input {spec.name!r} twice", spec.name)
        named[spec.name] = spec
    return named


def input_file(path: Any, what: str) -> str:
    """``path`` if it is an existing file, else a ``ParamError`` saying what it should be."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ParamError(f"{what} {path} is a directory, expected a file")
    if not os.path.exists(path):
        raise ParamError(missing_file_message(path, what))
    return path


def unresolvable_link(path: Any) -> Optional[str]:
    """What ``path`` is when it is a symbolic link that cannot be followed -- a loop
    (``ELOOP``, also through a looping folder on the way) or a link to nothing -- else
    None.  ``os.path.exists`` is False for both, which used to be reported as "not
    found" although something *is* there."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop (it cannot be resolved)"
        if os.path.islink(path):
            return f"a dangling symbolic link to {os.readlink(path)}"
    return None


def missing_file_message(path: Any, what: str) -> str:
    """The message for a ``what`` file ``path`` that does not exist: "not found", or the
    symbolic link loop it is (a dangling link stays "not found", saying it is one)."""
    link = unresolvable_link(path)
    if link is not None and "loop" in link:
        return f"{what} {path} is {link}"
    return f"{what} not found: {path}" + (f" ({link})" if link else "")


# The most digits ``int()`` reads from text (CPython's default guard against
# quadratic-time conversions); json.loads raises a bare ValueError beyond it.
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


def json_problem(exc: BaseException) -> Optional[str]:
    """What is wrong with a JSON file whose ``json.loads`` raised ``exc``, in words for
    the user, or None when ``exc`` is no JSON damage: a syntax error at its line and
    column, bytes that are not UTF-8, nesting deeper than Python recurses
    (RecursionError) or a number of more digits than ``int()`` reads (a bare
    ValueError naming ``sys.set_int_max_str_digits``, which a user cannot act on)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return f"byte {exc.start}: not UTF-8 text"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, ValueError) and "digits" in str(exc):
        return f"it holds a number with more than {_INT_DIGITS} digits"
    if isinstance(exc, ValueError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def writable_file(path: Any, what: str) -> str:
    """``path`` if a file can be written there (its folder exists and takes a new file:
    probed with a real temporary file, as permissions alone do not tell for root or
    for ``/proc``), else a ``ParamError`` naming ``what``.  Commands check this before
    they work, so a bad output path costs no run and ends in no traceback."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ParamError(f"{what} {path} is a directory, expected a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ParamError(f"{what} {path}: folder {folder} does not exist")
    try:
        handle, probe = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
    except OSError as exc:
        raise ParamError(f"{what} {path}: cannot write in {folder}: "
                         f"{exc.strerror or exc}") from None
    os.close(handle)
    os.unlink(probe)
    return path


def read_model_text(model_path: Any) -> str:
    """The text of a Relay model file; a directory, a missing file, bytes that are not
    UTF-8 or an empty file are errors naming the file (and the byte offset)."""
    path = input_file(model_path, "model file")
    text = _utf8_text(path, "Relay text as mod.astext() writes it")
    if not text.strip():
        raise ParseError("the model file is empty; expected Relay text with a def @main",
                         1, 1, path)
    return text


def source_file(path: Any, what: str) -> str:
    """``path`` if it is an existing UTF-8 file (a pattern table or lowering module,
    which the legacy loader reads as UTF-8 Python), else an error naming it."""
    path = input_file(path, what)
    _utf8_text(path, f"Python source ({what})")
    return path


def _utf8_text(path: str, expected: str) -> str:
    """The text of ``path``; bytes that are not UTF-8 are a ``ParseError`` at their
    line and column (and byte offset), saying what was ``expected``."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ParamError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ParseError(f"not UTF-8 text (byte offset {exc.start}: {exc.reason}); expected "
                         f"{expected}", line, column, path) from None


def check_output_dir(outdir: str, force: bool) -> None:
    """Refuse an output path that is a file, cannot be created, or is a non-empty folder
    (unless ``force``) — before anything is compiled."""
    if not str(outdir).strip():
        raise ParamError("the output folder name is empty")
    if os.path.islink(outdir):  # the folder is renamed into place: a link would be replaced
        raise ParamError(f"output {outdir} is a symbolic link"
                         + ("" if os.path.exists(outdir) else " to nothing (dangling)")
                         + f"; give the folder itself ({os.path.realpath(outdir)})")
    if os.path.isfile(outdir) or (os.path.exists(outdir) and not os.path.isdir(outdir)):
        raise ParamError(f"output {outdir} exists and is not a folder")
    if os.path.isdir(outdir) and os.listdir(outdir):
        if not force:
            raise ParamError(f"output folder {outdir} is not empty; use --force to replace "
                             "its contents")
        refuse_to_replace(outdir)
    ancestor = os.path.dirname(os.path.abspath(outdir))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ParamError(f"output folder {outdir} cannot be created: {ancestor} is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ParamError(f"output folder {outdir} cannot be created: {ancestor} is not "
                         "writable")


# ``--force`` recognises a previous conversion by what our own writers put in it:
# model.json from ``runtime.export_artifact`` (its "format"; the value is
# runtime.ARTIFACT_FORMAT, not imported because runtime imports TVM) or report.json
# from ``convert`` (its "bmlib_relax_version").  A file merely *called* model.json
# (a Keras project's) is not one.
ARTIFACT_FORMAT = "bmlib-relax-artifact"
CONVERSION_MARKERS = ("model.json", "report.json")
_MAX_MARKER_BYTES = 64 << 20


def refuse_to_replace(outdir: str) -> None:
    """``--force`` replaces a previous conversion's output, never an arbitrary folder
    (``-o ~ --force`` must not wipe a home directory), nor the working directory."""
    here = os.path.realpath(os.getcwd())
    target = os.path.realpath(outdir)
    if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
        raise ParamError(f"output folder {outdir} contains the working directory; --force "
                         "will not replace it")
    if not is_conversion_output(outdir):
        raise ParamError(f"output folder {outdir} does not hold a previous conversion (no "
                         f"{' or '.join(CONVERSION_MARKERS)} written by bmlib-relax); --force "
                         "only replaces those, remove it yourself if it should go")
    folders = sorted(e.name for e in os.scandir(outdir) if e.is_dir(follow_symlinks=False))
    if folders:  # a conversion writes none: these are someone's files
        raise ParamError(f"output folder {outdir} holds folder(s) a conversion never writes "
                         f"({', '.join(folders[:5])}); --force will not replace it, remove "
                         "them yourself if they should go")


def is_conversion_output(folder: str) -> bool:
    """Whether ``folder`` holds the metadata of a bmlib-relax conversion."""
    return (_json_field(os.path.join(folder, "model.json"), "format") == ARTIFACT_FORMAT or
            isinstance(_json_field(os.path.join(folder, "report.json"),
                                   "bmlib_relax_version"), str))


def _json_field(path: str, key: str) -> Any:
    """``key`` of the JSON object in the file ``path``; None when the file is missing,
    too big, unreadable, not JSON or not an object (then it is not ours)."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _MAX_MARKER_BYTES:
            return None
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return data.get(key) if isinstance(data, dict) else None


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a member first; an empty archive


def read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` input file, by name; a file that is no archive (a
    ``.npy``), unreadable, or holds a non-numeric member is a ``ParamError``."""
    if os.path.isdir(path):
        raise ParamError(f"inputs file {path} is a directory, expected a .npz file")
    if not os.path.exists(path):
        raise ParamError(missing_file_message(path, "inputs file"))
    return guarded_npz(path)


def guarded_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file ``path`` (an input file, a bundle's inputs or
    outputs), read by the weights reader (:func:`~bmlib_relax.relay.params.load_params`)
    rather than ``np.load``: it checks every member's declared size against its
    compressed size and every ``.npy`` header against the member's bytes *before*
    allocating (``np.load`` allocated a 10**12-element shape declared by a 144-byte
    member: MemoryError), and never unpickles.  Damage is a ``ParamError`` naming the
    file, and the member when one is to blame."""
    from .relay.params import load_params

    if not os.path.isfile(path):  # a FIFO or a device could be read forever
        raise ParamError(f"{path} is not a regular file, expected a .npz archive")
    try:
        with open(path, "rb") as handle:
            magic = handle.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise ParamError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if magic.startswith(_NPY_MAGIC):
        raise ParamError(f"{path}: a single array (.npy), expected a .npz archive of "
                         f"named arrays; give it as NAME={path}")
    if not magic.startswith(_ZIP_MAGICS):  # load_params would take .params bytes too
        raise ParamError(f"{path}: not a readable .npz (not a zip archive: it starts with "
                         f"{magic.hex(' ') or 'nothing (empty file)'})")
    try:
        return load_params(path)
    except ParamError as exc:
        raise ParamError(_npz_problem(path, exc), _member_name(exc.name)) from None


def _member_name(member: Optional[str]) -> Optional[str]:
    """The array name of an archive member (``x.npy`` holds ``x``)."""
    return member[:-4] if member and member.endswith(".npy") else member


def _npz_problem(path: str, exc: ParamError) -> str:
    """The message for the archive ``path`` the weights reader refused with ``exc``: a
    member holding strings, dates or records says which dtype, as before the reader
    was used (``member 'x' holds <U1 values``); other damage keeps the reader's words."""
    name = _member_name(exc.name)
    dtype = _member_dtype(path, exc.name) if exc.name else None
    if dtype is not None and dtype.kind not in "biuf":
        return (f"{path}: member {name!r} holds {dtype} values, expected a numeric array")
    detail = str(exc)
    source = getattr(exc, "source", None)
    if source and detail.startswith(f"{source}: "):
        detail = detail[len(source) + 2:]
    return f"{path}: not a readable .npz ({detail})"


def _member_dtype(path: str, member: str) -> Optional[np.dtype]:
    """The dtype an archive member's ``.npy`` header declares (None when it cannot be
    read): only its header is read, so a member of any declared size costs nothing."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open(member) as stream:
            version = np.lib.format.read_magic(stream)
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)(stream)
        return header[2]
    except Exception:  # noqa: BLE001 - best effort: the reader's own message stands
        return None


def npz_member(path: str, name: str) -> np.ndarray:
    """Input ``name`` from the archive ``path`` (``--input NAME=FILE.npz``): its member
    ``name``, or its only member."""
    arrays = read_npz(path)
    if name in arrays:
        return arrays[name]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise ParamError(f"input {name!r}: {path} has no member {name!r} (members: "
                     f"{', '.join(arrays) or 'none'})", name)


def load_input_array(path: str, name: str) -> np.ndarray:
    """Input ``name`` from a ``.npy`` file, or from a ``.npz`` archive (its member
    ``name``, or its only member: :func:`npz_member`); a missing, unreadable or
    non-numeric file (pickled objects included) is a ``ParamError`` naming the input
    and the file.  The ``.npy`` is read by the weights reader's
    :func:`~bmlib_relax.relay.params.load_npy`: its header's shape is checked against
    the file's size before anything is allocated (``np.load`` allocated the 3.6 TiB a
    144-byte file declared, a MemoryError)."""
    from .relay.params import load_npy

    if path.endswith(".npz"):
        return npz_member(path, name)
    if os.path.isdir(path):
        raise ParamError(f"input {name!r}: {path} is a directory, expected a .npy file", name)
    if not os.path.exists(path):
        raise ParamError(f"input {name!r}: {missing_file_message(path, 'file')}", name)
    if not os.path.isfile(path):  # a FIFO or a device could be read forever
        raise ParamError(f"input {name!r}: {path} is not a regular file", name)
    try:
        return load_npy(path)
    except ParamError as exc:
        detail = str(exc)
        if detail.startswith(f"{path}: "):
            detail = detail[len(path) + 2:]
        raise ParamError(f"input {name!r}: {path} is not a readable .npy file: {detail}",
                         name) from None


def require_main(module: Any) -> Any:
    """``module`` if it defines ``@main`` (the entry every build starts from), else a
    ``ParseError`` naming the source and the functions it does define."""
    if "main" not in module.functions:
        defined = ", ".join(f"@{n}" for n in module.functions) or "none"
        raise ParseError(f"no def @main in the module (functions defined: {defined})", 1, 1,
                         module.source_name)
    return module
