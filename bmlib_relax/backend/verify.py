"""The arity verifier: every bmlib PrimFunc must take exactly what its call passes.

Relay's bmlib codegen built a PrimFunc from the inner composite while the
partition was called with different arguments, and the mistake only surfaced at
run time as ``num_args should be 8``.  Here every partition is checked at
compile time, before anything is built: for each call of a ``Codegen="bmlib"``
function, ``len(call.args) + number of outputs`` must equal the PrimFunc's
parameter count.
"""
from __future__ import annotations

from typing import Mapping

import tvm
from tvm import relax

from ..errors import ArityMismatchError
from .codegen import PartitionRecord, is_bmlib_partition


def num_outputs(ty) -> int:
    if isinstance(ty, relax.TupleType):
        return len(ty.fields)
    return 1


def check_record(record: PartitionRecord, expected_args: int, detail: str = "") -> None:
    if record.num_args != expected_args:
        raise ArityMismatchError(record.name, expected_args, record.num_args, detail)


def partition_call_sites(mod: tvm.IRModule) -> list[tuple[str, relax.Call]]:
    """``(partition symbol, call)`` for every call of a bmlib partition in ``mod``."""
    partitions = {}
    for gvar, func in mod.functions.items():
        if is_bmlib_partition(func):
            partitions[gvar.name_hint] = func
    sites: list[tuple[str, relax.Call]] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar):
            name = expr.op.name_hint
            if name in partitions:
                sites.append((name, expr))

    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and gvar.name_hint not in partitions:
            relax.analysis.post_order_visit(func, visit)
    return sites


def verify_partition_arity(mod: tvm.IRModule, records: Mapping[str, PartitionRecord]) -> None:
    """Raise :class:`ArityMismatchError` for any call whose PrimFunc arity differs."""
    for name, call in partition_call_sites(mod):
        record = records.get(name)
        if record is None:
            raise ArityMismatchError(name, len(call.args), -1, "no PrimFunc was built for it")
        expected = len(call.args) + num_outputs(call.ty)
        check_record(record, expected,
                     f"the call passes {len(call.args)} argument(s) and "
                     f"{num_outputs(call.ty)} output buffer(s)")
