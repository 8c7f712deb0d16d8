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
from typing import Iterator, Optional, Sequence, TextIO

import numpy as np

from .errors import ParamError

# tvmc's grammar (v0.19 python/tvm/driver/tvmc/shape_parser.py): NAME, a colon, maybe
# spaces, then [DIMS]; a name may hold colons, dots and slashes ("input:0", "a/b.c"), never a
# space or a comma (tvmc's findall skipped both between items).
_SHAPE_ITEM = re.compile(r"([^\s,\[\]]+?):\s*\[([^\]\[]*)\]")
_SEPARATOR = re.compile(r"[\s,]*")
_DIM = re.compile(r"\s*(-?\d+)\s*")


def parse_input_shapes(text: str) -> list[tuple[str, tuple[Optional[int], ...]]]:
    """``"data:[1,3,224,224] mask:[1, 8]"`` -> ``[("data", (1, 3, 224, 224)), ...]``.

    tvmc's grammar (v0.19 ``shape_parser.parse_shape_string``): items separated by spaces
    (or commas), spaces allowed after the colon and inside the brackets, and a dim of
    ``-1`` (any dim ``<= 0``) is dynamic, ``None`` here, as tvmc read it as ``relay.Any()``.
    ``name:[]`` is a 0-d input (tvmc had no spelling for it).  Where tvmc's ``findall``
    silently skipped text it could not read (``x:[5,,3]``, ``x=[1]``), the text is refused
    naming the item; an input given twice is refused too (tvmc kept the last).
    """
    items: list[tuple[str, tuple[Optional[int], ...]]] = []
    stripped = text.strip()
    pos = 0
    while pos < len(stripped):
        match = _SHAPE_ITEM.match(stripped, pos)
        if match is None:
            raise ParamError(f"bad --input-shapes {text!r} at character {pos + 1}: expected "
                             "name:[d1,d2,...] items separated by spaces")
        name, dims = match.groups()
        shape = _parse_dims(text, name, dims)
        if any(name == seen for seen, _ in items):
            raise ParamError(f"bad --input-shapes {text!r}: input {name!r} is given twice", name)
        items.append((name, shape))
        pos = _SEPARATOR.match(stripped, match.end()).end()
    return items


def _parse_dims(text: str, name: str, dims: str) -> tuple[Optional[int], ...]:
    """The dims of one ``--input-shapes`` item: integers, ``<= 0`` dynamic (``None``)."""
    if not dims.strip():
        return ()
    shape: list[Optional[int]] = []
    for dim in dims.split(","):
        match = _DIM.fullmatch(dim)
        if match is None:
            what = "an empty dim in" if not dim.strip() else "non-integer dims"
            raise ParamError(f"bad --input-shapes {text!r}: {name!r} has {what} [{dims}] "
                             "(dims are integers, -1 for a dynamic one)", name)
        value = int(match.group(1))
        shape.append(value if value > 0 else None)
    return tuple(shape)


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
