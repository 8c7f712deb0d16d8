"""``tvm.relay``'s graph-building functions over bmlib-relax's Relay AST.

``var``, ``const``, ``scalar_type`` and ``op.get`` behave as in Relay; the
node classes themselves (``Function``, ``Call``, ``Tuple``, ...) accept the
same arguments as Relay's (lists and dicts included).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..errors import ConversionError
from . import ast
from .metadata import shorten
from .pattern_op_attrs import check_relay_op

# Relay's default dtypes for Python scalars in relay.const.
_PY_DTYPES = {bool: "bool", int: "int32", float: "float32"}


def var(name_hint: str, type_annotation: Any = None, shape: Optional[Sequence[int]] = None,
        dtype: str = "float32") -> ast.Var:
    """A variable; ``type_annotation`` may be a type, or a dtype string with ``shape``."""
    if isinstance(type_annotation, str):
        # Relay: a dtype string alone is a scalar type.
        dtype, type_annotation = type_annotation, (None if shape is not None
                                                   else ast.TensorType((), type_annotation))
    if type_annotation is None and shape is not None:
        # Dims may be ints, relay.Any() or symbolic (te.var("n")); TensorType normalises them.
        type_annotation = ast.TensorType(tuple(shape), dtype)
    return ast.Var(name_hint, type_annotation)


def const(value: Any, dtype: Optional[str] = None) -> ast.Constant:
    """A constant tensor from a Python scalar, list or numpy array (Relay's dtype rules).

    The constant holds a copy, as v0.19's ``_nd.array(value)`` did: a script that
    refills one buffer for several layers gets one constant per state of it.  A TVM
    tensor keeps its dtype, as in v0.19 (its narrowing table is keyed by numpy dtypes,
    which a tensor's string dtype never matched, and ``dtype`` was applied to numpy
    values only)."""
    if isinstance(value, ast.Constant):
        return value
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return ast.Constant(np.array(value.numpy(), copy=True))
    given = dtype
    if type(value) in _PY_DTYPES and dtype is None:  # numpy scalars: narrowed below
        dtype = _PY_DTYPES[type(value)]
        if dtype == "int32" and not -2**31 <= value < 2**31:
            raise _past_int32(value)
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        # an unknown dtype ("bogus", "handle"), a value the dtype cannot hold (2**40 as
        # int32, NaN as an integer): numpy's bare error named neither the call nor value
        raise ConversionError(f"relay.const({_value_text(value)}, dtype={dtype!r}): {exc}",
                              op="const") from None
    # Relay narrows float64 to float32 and int64 to int32 when no dtype is given:
    # Python numbers and numpy arrays alike (relay.const(np.arange(3)) is int32)
    if given is None and array.dtype == np.float64:
        array = array.astype("float32")
    elif given is None and array.dtype == np.int64:
        narrowed = array.astype("int32")
        if not np.array_equal(narrowed, array):  # Relay's astype wrapped them silently
            raise _past_int32(value)
        array = narrowed
    if isinstance(value, np.ndarray) and np.may_share_memory(array, value):
        array = array.copy()
    return ast.Constant(array)


def _past_int32(value: Any) -> ConversionError:
    return ConversionError(f"relay.const({_value_text(value)}): a value past int32, the dtype "
                           "Relay gives integers without one (Relay wrapped it silently; "
                           "pass dtype='int64')", op="const")


def _value_text(value: Any) -> str:
    return shorten(repr(value), 60)


def scalar_type(dtype: str) -> ast.TensorType:
    return ast.TensorType((), dtype)


def get(op_name: str, caller: Optional[str] = None) -> ast.Op:
    """``relay.op.get(name)``: the op node to pass to ``Call``.

    A name Relay v0.19 never registered is an :class:`UnknownOpError`, as ``Op::Get``
    raised: ``relay.op.get("nn.conv2D")`` must not build a call nothing can run."""
    check_relay_op(op_name, caller or f"relay.op.get({op_name!r})")
    return ast.Op(op_name)
