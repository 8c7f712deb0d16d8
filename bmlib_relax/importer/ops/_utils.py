"""Small helpers shared by converters: shapes, dtypes, attribute decoding."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tvm
from tvm import relax


def shape_of(expr: relax.Expr) -> list:
    """Static dims as ints, symbolic dims as TIR expressions."""
    shape = expr.ty.shape
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape.values]


def static_shape(expr: relax.Expr, ctx, what: str = "input") -> list[int]:
    dims = shape_of(expr)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.error(f"{what} needs a static shape, got {dims}")
    return dims


def dtype_of(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


def ints(value: Any) -> list[int]:
    """An int or a (nested) sequence of ints as a flat list."""
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def const_value(expr: relax.Expr) -> np.ndarray | None:
    """The numpy value of a Relax constant, else ``None``."""
    if isinstance(expr, tvm.ir.expr.GenericConst):
        return expr.value.numpy()
    return None


def expand_padding(padding: Sequence[int] | int, ndim: int) -> list[int]:
    """Relay padding (1, ndim or 2*ndim values) as [before..., after...]."""
    pad = ints(padding)
    if len(pad) == 1:
        return pad * (2 * ndim)
    if len(pad) == ndim:
        return pad + pad
    if len(pad) == 2 * ndim:
        return pad
    raise ValueError(f"padding {tuple(pad)} has {len(pad)} values; expected 1, {ndim} or {2 * ndim}")
