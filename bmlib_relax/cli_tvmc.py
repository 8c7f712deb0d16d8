"""tvmc-style command-line pieces: input files and shapes, filled inputs, timing,
and keeping TVM's own C++ log lines off a quiet run.

``--input-shapes "data:[1,3,224,224] mask:[1,8]"`` is tvmc's spelling; ``.npz``
files are accepted wherever inputs are (every array of the file, by name).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Any, Iterator, Optional, Sequence, TextIO

import numpy as np

from .errors import ParamError

_SHAPE_ITEM = re.compile(r"(\S+?):\[([^\]]*)\]")


def parse_input_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """``"data:[1,3,224,224] mask:[1,8]"`` -> ``[("data", (1, 3, 224, 224)), ...]``."""
    items = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _SHAPE_ITEM.match(text, pos)
        if match is None:
            raise ParamError(f"bad --input-shapes {text!r} at character {pos + 1}: expected "
                             "name:[d1,d2,...] items separated by spaces")
        name, dims = match.groups()
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise ParamError(f"bad --input-shapes {text!r}: {name!r} has non-integer dims "
                             f"[{dims}]", name) from None
        if any(d < 0 for d in shape):
            raise ParamError(f"bad --input-shapes {text!r}: {name!r} has a negative dim", name)
        items.append((name, shape))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return items


def read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` input file, by name; a file that is no archive (a
    ``.npy``), unreadable, or holds a non-numeric member is a ``ParamError``."""
    if os.path.isdir(path):
        raise ParamError(f"inputs file {path} is a directory, expected a .npz file")
    if not os.path.exists(path):
        raise ParamError(f"inputs file not found: {path}")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ParamError(f"{path}: a single array (.npy), expected a .npz archive of "
                             f"named arrays; give it as NAME={path}")
        with loaded as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ParamError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile/numpy raise many types
        raise ParamError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from None
    for name, array in arrays.items():
        if array.dtype.kind not in "biuf":
            raise ParamError(f"{path}: member {name!r} holds {array.dtype} values, expected "
                             "a numeric array", name)
    return arrays


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


def is_input_spec(text: str) -> bool:
    """An ``--inputs`` value (``name=...`` or ``file.npz``) rather than a model path."""
    return "=" in text or text.endswith(".npz")


def split_model_from_inputs(model: Optional[str], inputs: Optional[Sequence[str]]):
    """argparse lets ``--inputs a=.. b=..`` swallow a following positional model path:
    hand such a value back as the model."""
    inputs = list(inputs or [])
    stray = [s for s in inputs if not is_input_spec(s)]
    if stray and model is None and len(stray) == 1 and inputs[-1] == stray[0]:
        return stray[0], inputs[:-1]
    if stray:
        raise ParamError(f"bad --inputs spec {stray[0]!r}: expected name=shape:dtype, "
                         "name=file.npy or file.npz")
    if model is None:
        raise ParamError("no model file given")
    return model, inputs


def named_outputs(outputs: Any) -> list[tuple[str, np.ndarray]]:
    """A model's outputs as ``[(name, array)]``: ``out0``, ``out1`` ... and, for an output
    that is itself a tuple (an LSTM's ``(y, (h, c))``), ``out1.0``, ``out1.1`` ...

    Every place that lists, saves or compares outputs uses these names, so a nested
    result is never handed to code that expects an array.
    """
    if not isinstance(outputs, (tuple, list)):
        return [("out0", np.asarray(outputs))]
    return [item for i, v in enumerate(outputs) for item in _flatten(v, f"out{i}")]


def _flatten(value: Any, name: str) -> list[tuple[str, np.ndarray]]:
    if not isinstance(value, (tuple, list)):
        return [(name, np.asarray(value))]
    return [item for i, v in enumerate(value) for item in _flatten(v, f"{name}.{i}")]


def fill_input(spec: dict, mode: str, rng: np.random.Generator) -> np.ndarray:
    """An input of the signature ``spec`` filled as tvmc's ``--fill-mode`` does."""
    shape = spec.get("shape", [])
    if not all(isinstance(d, int) for d in shape):
        raise ParamError(f"input {spec['name']!r} has dynamic shape {shape}: give it with "
                         "-i/--inputs", spec["name"])
    dtype = np.dtype(spec["dtype"])
    if mode == "zeros":
        return np.zeros(shape, dtype)
    if mode == "ones":
        return np.ones(shape, dtype)
    if dtype.kind in "iub":
        return rng.integers(0, 2 if dtype.kind == "b" else 10, size=shape).astype(dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


@contextlib.contextmanager
def native_stderr_silenced(enabled: bool = True) -> Iterator[TextIO]:
    """Point file descriptor 2 at /dev/null: TVM's and LLVM's C++ log lines (which
    bypass Python's ``sys.stderr``) are dropped while the block runs.

    Yields a stream on the real stderr, for what must still be seen (``--progress``).
    """
    if not enabled:
        yield sys.stderr
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    kept = os.fdopen(os.dup(saved), "w", buffering=1)
    try:
        os.dup2(devnull, 2)
        yield kept
    finally:
        sys.stderr.flush()
        kept.close()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
