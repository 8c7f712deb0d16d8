"""Checks compiled into a model, for what Relay decided when an op ran.

Relay typed a run-time-sized dim (``?``) as ``Any`` and left the rest to the op when
it ran: two ``?`` dims broadcast against each other, a slice whose length depends on
the run.  Relax must know every result shape when it builds.  Where the importer
assumes something of such a dim (two dims are equal, a dim is the block factor of a
layout), it says so here: an ``assert_op`` that fails the call with
:class:`~bmlib_relax.errors.RunCheckError` naming the op and its ``file:line:column``
(the runtime turns the message into that error), instead of a wrong result or a crash.
"""
from __future__ import annotations

from typing import Any, Optional

import tvm
from tvm import relax

from ..errors import RUN_CHECK_PREFIX


def emit_run_check(bb: relax.BlockBuilder, holds: Any, where: Optional[str], op: str,
                   message: str, *values: Any) -> None:
    """Emit a check that ``holds`` (a TIR condition over symbolic dims) when the model
    runs; ``message`` is formatted with ``values`` (TIR expressions: ``{}`` each)."""
    place = f"{where}: " if where else ""
    bb.emit(relax.op.assert_op(relax.prim_value(holds),
                               [relax.prim_value(v) for v in values],
                               format=f"{RUN_CHECK_PREFIX}{place}{op}: {message}"))


def cast_dims(bb: relax.BlockBuilder, value: relax.Expr, dims: list) -> relax.Expr:
    """``value`` cast to a tensor of ``dims`` (after the checks that make it true)."""
    return bb.match_cast(value, relax.TensorType(list(dims), value.ty.dtype))


def equal(a: Any, b: Any) -> Any:
    """TIR ``a == b`` (an int taking the other side's dtype: shape dims are int64)."""
    if isinstance(b, int):
        b = tvm.tirx.const(b, str(a.ty))
    elif isinstance(a, int):
        a = tvm.tirx.const(a, str(b.ty))
    return tvm.tirx.EQ(a, b)
