"""Relax constants from numpy arrays without the copies ``relax.const`` makes.

``relax.const(array, dtype)`` calls ``array.astype(dtype)`` — a full copy even when the
dtype already matches — and then copies the result again into a ``tvm.runtime.Tensor``.
Every weight goes through a few constants on its way (import, batch-norm folding,
blocked packing, Winograd), so on ResNet-50 those redundant copies were ~0.8 s of its
compile.  ``relax.const`` also quietly narrows float64 to float32 and int64 to int32 when
no dtype is given; :func:`tensor_constant` never changes a dtype it was not asked to.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np


def tensor_constant(value: Any, dtype: Optional[str] = None):
    """A ``relax.Constant`` holding ``value`` as ``dtype`` (default: its own dtype),
    copied once (none when ``value`` is already a C-contiguous array of that dtype
    — then into the tensor only)."""
    import tvm
    from tvm import relax

    array = np.asarray(value, dtype=dtype)
    if not array.flags.c_contiguous:  # never true of a 0-d array, which this keeps 0-d
        array = np.ascontiguousarray(array)  # (it would turn a 0-d one into shape (1,))
    return relax.const(tvm.runtime.tensor(array))


def constant_view(expr: Any) -> Optional[np.ndarray]:
    """The value of a Relax constant as a read-only numpy view of its tensor (no
    copy), else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.GenericConst):
        return None
    try:
        array = np.from_dlpack(expr.value)
    except (TypeError, BufferError, RuntimeError):  # a dtype numpy cannot view
        return expr.value.numpy()
    array.flags.writeable = False
    return array
