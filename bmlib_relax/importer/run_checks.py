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

from typing import Any, Optional, Sequence

import tvm
from tvm import relax
from tvm.sym.analyzer import Analyzer

from ..errors import RUN_CHECK_PREFIX


def emit_run_check(bb: relax.BlockBuilder, holds: Any, where: Optional[str], op: str,
                   message: str, *values: Any) -> None:
    """Emit a check that ``holds`` (a TIR condition over symbolic dims) when the model
    runs; ``message`` is formatted with ``values`` (TIR expressions: ``{}`` each)."""
    _emit_assert(bb, relax.prim_value(holds), [relax.prim_value(v) for v in values], where,
                 op, message)


def _emit_assert(bb: relax.BlockBuilder, holds: relax.Expr, values: list,
                 where: Optional[str], op: str, message: str) -> None:
    """The ``assert_op`` of a run-time check: its message starts with ``RUN_CHECK_PREFIX``
    (the runtime's cue for :class:`~bmlib_relax.errors.RunCheckError`), then the place
    and the op."""
    place = f"{where}: " if where else ""
    bb.emit(relax.op.assert_op(holds, values,
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


BROADCAST_REASON = ("Relay broadcast a run-time-sized dim against another dim, bmlib-relax "
                    "needs them equal (or give the inputs static shapes)")


def known_dims(value: Any) -> Optional[list]:
    """The dims of a tensor value of known shape, else None."""
    ty = getattr(value, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None \
            or not hasattr(ty.shape, "values"):
        return None
    return list(ty.shape.values)


def unify_dims(bb: relax.BlockBuilder, values: Sequence[relax.Expr],
               groups: Sequence[Sequence[tuple[int, int]]], where: Optional[str], op: str,
               reason: str, broadcast: bool = False, prefer_static: bool = True) -> list:
    """``values`` with the dims of each group (``[(value index, axis), ...]``: dims
    that must be equal) made one: every run-time-sized dim is checked, when the model
    runs, to equal the group's static dim or else its first run-time one, and the
    values are cast to it (one ``match_cast`` per value changed).  With ``broadcast``
    a static 1 broadcasts and takes no part; without ``prefer_static`` the first
    run-time dim is the one kept (the static ones are checked against it all the same).
    A group with two different static dims, or none run-time-sized, is left alone
    (Relax's own inference names a mismatch)."""
    shapes = [known_dims(v) for v in values]
    out = list(values)
    changed: set[int] = set()
    analyzer = Analyzer()
    for group in groups:
        dims = [(k, axis, shapes[k][axis]) for k, axis in group if shapes[k] is not None]
        static = [(k, a, d) for k, a, d in dims if isinstance(d, tvm.tirx.IntImm)
                  and not (broadcast and int(d) == 1)]
        symbolic = [(k, a, d) for k, a, d in dims if not isinstance(d, tvm.tirx.IntImm)]
        if len({int(d) for _, _, d in static}) > 1 or not symbolic:
            continue
        ref_k, ref_axis, ref = static[0] if static and prefer_static else symbolic[0]
        others = symbolic if prefer_static or not static else symbolic + static
        for k, axis, dim in others:
            if dim.same_as(ref) or analyzer.can_prove_equal(dim, ref):
                continue
            emit_run_check(bb, equal(dim, ref), where, op,
                           f"operand {k} has {{}} entries on axis {axis} and operand {ref_k} "
                           f"{{}} on axis {ref_axis}; {reason}", dim, ref)
            shapes[k][axis] = ref
            changed.add(k)
    for k in sorted(changed):
        out[k] = cast_dims(bb, out[k], shapes[k])
    return out


def none_hold(holds: relax.Expr) -> relax.Expr:
    """A boolean scalar: no entry of the boolean tensor ``holds`` is true.  Counted, so
    that a tensor without entries passes (a ``max`` over nothing has no value)."""
    return relax.op.equal(relax.op.sum(relax.op.astype(holds, "int64")),
                          relax.const(0, "int64"))


def emit_tensor_check(ctx: Any, holds: relax.Expr, message: str) -> None:
    """Emit a check that the boolean scalar tensor ``holds`` (computed from run-time
    values, not shapes) is true when the model runs; ``ctx`` names the op and place."""
    _emit_assert(ctx.bb, ctx.emit(holds), [], ctx.location, ctx.op_name, message)


# The largest byte count a run-time shape may describe: TVM multiplies dims (and the
# element size) in int64, so a larger count wraps to a small allocation that the op
# then writes past.  2**62 bytes is far past any memory, and far from the wrap.
MAX_TENSOR_BYTES = 2 ** 62


def emit_element_count_check(ctx: Any, dims: relax.Expr, dtype: Optional[str]) -> None:
    """Emit a check that the shape ``dims`` (a 1-D int64 tensor of dims, read when the
    model runs) describes fewer than ``MAX_TENSOR_BYTES`` of ``dtype`` (``None``: a
    shape only counted, never allocated, e.g. a sparse tensor's dense shape: fewer than
    ``MAX_TENSOR_BYTES`` elements), counted in float64 so that the count itself cannot
    wrap."""
    itemsize = max(1, tvm.DataType(dtype).bits // 8) if dtype else 1
    count = relax.op.prod(relax.op.astype(dims, "float64"))
    emit_tensor_check(ctx, relax.op.less(count, relax.const(MAX_TENSOR_BYTES / itemsize,
                                                            "float64")),
                      f"the shape describes {MAX_TENSOR_BYTES // itemsize} or more "
                      f"{dtype + ' ' if dtype else ''}elements: TVM's int64 size arithmetic "
                      "would wrap (and the tensor could not be held anyway)")
