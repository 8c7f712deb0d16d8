"""Recipe v1: deterministic inputs and weights from a tensor's name.

The Relay goldens were produced with tensors that are a pure function of their
name, shape, dtype and role, so the same values can be rebuilt anywhere without
storing weights.  The demo, the tests and the benchmarks all use this.
"""
from __future__ import annotations

import math
import zlib
from typing import Iterable, Mapping, Sequence

import numpy as np

_VAR_SUFFIXES = ("moving_var", "running_var", "_var", "gamma")
_MEAN_SUFFIXES = ("moving_mean", "running_mean", "_mean", "beta", "bias")


def recipe_tensor(name: str, shape: Sequence[int], dtype: str = "float32",
                  role: str = "param", int_high: int = 10) -> np.ndarray:
    """The tensor recipe v1 assigns to ``name`` (role ``"input"`` or ``"param"``)."""
    shape = tuple(int(s) for s in shape)
    count = int(np.prod(shape)) if shape else 1
    seed = zlib.crc32(name.encode("utf-8"))
    u = np.random.Generator(np.random.PCG64(seed)).random(count)
    lowered = name.lower()
    if np.issubdtype(np.dtype(dtype), np.integer):
        values = np.floor(u * int_high)
    elif role == "input":
        values = u * 2 - 1
    elif lowered.endswith(_VAR_SUFFIXES):
        values = 0.5 + u
    elif lowered.endswith(_MEAN_SUFFIXES):
        values = (u * 2 - 1) * 0.1
    else:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else (shape[0] if shape else 1)
        values = (u * 2 - 1) * math.sqrt(3 / max(fan_in, 1))
    return values.astype(dtype).reshape(shape)


def recipe_from_manifest(entries: Iterable[Mapping], role: str) -> dict[str, np.ndarray]:
    """Tensors for manifest entries (``name``, ``shape``, ``dtype``, ``int_high``)."""
    return {e["name"]: recipe_tensor(e["name"], e["shape"], e.get("dtype", "float32"), role,
                                     int(e.get("int_high", 10)))
            for e in entries}


def positive_variances(func, params: dict) -> dict:
    """``params`` with every batch_norm variance of ``func`` (a Relay ``@main``) made
    positive, as a trained model's are (``abs + 0.5``).  The recipe knows a variance by
    its name only (``moving_var``, ``running_var``...); a TF dump calls it
    ``..._FusedBatchNormV3_ReadVariableOp_1_0`` or ``..._moving_variance``.  Found here
    by use: the fifth operand of ``nn.batch_norm``, and the parameter under
    ``sqrt(add(%var, eps))`` (batch_norm's SimplifyInference form).  A negative one makes
    its channels NaN, which a relu hides as a plausible 0: benchmarks and tests would
    time and compare NaNs."""
    from .relay import ast
    from .relay.analysis import post_order_list

    out = dict(params)
    for node in post_order_list(func):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.op, "name", None)
        var = node.args[4] if name == "nn.batch_norm" and len(node.args) > 4 else \
            node.args[0] if name == "sqrt" and node.args else None
        if isinstance(var, ast.Call) and getattr(var.op, "name", None) == "add" and var.args:
            var = var.args[0]
        if isinstance(var, ast.Var) and var.name_hint in out:
            out[var.name_hint] = (np.abs(out[var.name_hint]) + 0.5).astype(
                out[var.name_hint].dtype)
    return out
