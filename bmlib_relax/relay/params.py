"""Weights for Relay programs: loading ``.params``/``.npz`` files and binding.

Relay pipelines kept weights beside the model: a dict of arrays, an ``.npz``, or
the byte format of ``relay.save_param_dict`` (still readable by
``tvm.runtime.load_param_dict``).  Everything here normalises them to
``dict[str, numpy.ndarray]`` and checks them against the function signature so
that a wrong weight is reported by name instead of producing wrong numbers.
"""
from __future__ import annotations

import io
import os
from typing import Any, Mapping, Union

import numpy as np

from ..errors import ParamError
from . import ast
from .rewrite import substitute

ParamsLike = Union[Mapping[str, Any], str, os.PathLike, bytes, bytearray, None]

_PARAMS_MAGIC = 0xF7E58D4F05049CB7  # first uint64 of a save_param_dict blob


def to_numpy(value: Any, name: str = "?") -> np.ndarray:
    """Convert a numpy array, TVM tensor or array-like to a numpy array."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):
        return value.numpy()
    try:
        return np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - report any conversion failure by name
        raise ParamError(f"parameter {name!r}: cannot convert {type(value).__name__} to an array",
                         name) from exc


def load_params(source: ParamsLike) -> dict[str, np.ndarray]:
    """Load weights from a dict, an ``.npz``/``.params`` path, or ``.params`` bytes.

    ``.params`` is the format written by ``relay.save_param_dict`` /
    ``tvm.runtime.save_param_dict``; a file is recognised by its magic number,
    not its suffix.
    """
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return {str(k): to_numpy(v, str(k)) for k, v in source.items()}
    if isinstance(source, (bytes, bytearray)):
        return _load_param_bytes(bytes(source), "<bytes>")
    path = os.fspath(source)
    if not os.path.exists(path):
        raise ParamError(f"params file not found: {path}")
    with open(path, "rb") as handle:
        blob = handle.read()
    if blob[:2] == b"PK":  # zip container: numpy .npz
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    return _load_param_bytes(blob, path)


def _load_param_bytes(blob: bytes, where: str) -> dict[str, np.ndarray]:
    if len(blob) < 8 or int.from_bytes(blob[:8], "little") != _PARAMS_MAGIC:
        raise ParamError(f"{where}: not a .params (save_param_dict) or .npz file")
    import tvm  # deferred: only this format needs TVM's reader

    try:
        loaded = tvm.runtime.load_param_dict(blob)
    except Exception as exc:  # noqa: BLE001 - TVM raises its own error types
        raise ParamError(f"{where}: corrupt .params file ({exc})") from None
    return {str(k): v.numpy() for k, v in loaded.items()}


def check_param(name: str, value: np.ndarray, expected: ast.Type | None) -> None:
    """Raise :class:`ParamError` if ``value`` does not fit the declared type."""
    if not isinstance(expected, ast.TensorType):
        return
    shape = tuple(value.shape)
    want = expected.shape
    shape_ok = len(shape) == len(want) and all(
        w is None or isinstance(w, str) or int(w) == s for w, s in zip(want, shape))
    dtype_ok = str(value.dtype) == expected.dtype
    if not (shape_ok and dtype_ok):
        dims = ["?" if w is None else str(w) for w in want]
        want_text = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        raise ParamError(
            f"parameter {name!r}: expected shape {want_text} dtype {expected.dtype}, "
            f"got shape {shape} dtype {value.dtype}", name)


def bind_params_by_name(func: ast.Function, params: Mapping[str, Any],
                        *, allow_extra: bool = False) -> ast.Function:
    """Return ``func`` with the named parameters replaced by constants.

    Like Relay's function of the same name, but strict: a name that is not a
    parameter of ``func`` is an error (unless ``allow_extra``), and each value
    must match the parameter's declared shape and dtype.
    """
    by_name: dict[str, ast.Var] = {}
    for var in func.params:
        if var.name in by_name:
            raise ParamError(f"function has two parameters named {var.name!r}", var.name)
        by_name[var.name] = var
    mapping: dict[ast.Var, ast.Expr] = {}
    for name, value in params.items():
        var = by_name.get(name)
        if var is None:
            if allow_extra:
                continue
            raise ParamError(
                f"parameter {name!r} is not an input of the function "
                f"(inputs: {', '.join(by_name) or 'none'})", name)
        array = to_numpy(value, name)
        check_param(name, array, var.type_annotation)
        mapping[var] = ast.Constant(array, span=var.span)
    if not mapping:
        return func
    new_params = tuple(v for v in func.params if v not in mapping)
    body = substitute(func.body, mapping)
    return ast.Function(new_params, body, func.ret_type, func.type_params, func.attrs,
                        span=func.span)
