"""The arity verifier: every bmlib PrimFunc must take exactly what its call passes.

Relay's bmlib codegen built a PrimFunc from the inner composite while the
partition was called with different arguments, and the mistake only surfaced at
run time as ``num_args should be 8``.  Here every partition is checked at
compile time, before anything is built: for each call of a ``Codegen="bmlib"``
function, ``len(call.args) + number of outputs`` must equal the PrimFunc's
parameter count.

The codegen itself (``relax.ext.bmlib``, reached by a plain ``RunCodegen`` +
``tvm.compile`` without :func:`bmlib_relax.compile`) has no call site at hand,
so :func:`check_prim_signature` compares every PrimFunc with what the partition
function declares instead — its parameters, then its return type's tensors —
count, shapes and dtypes: a lowering that adds an output or changes a shape
fails the build there, naming the partition.
"""
from __future__ import annotations

from typing import Mapping

import tvm
from tvm import relax

from ..errors import ArityMismatchError, SignatureMismatchError
from .codegen import PartitionRecord, is_bmlib_partition


def num_outputs(ty) -> int:
    if isinstance(ty, relax.TupleType):
        return len(ty.fields)
    return 1


def declared_tensors(func: relax.Function) -> list[tuple[str, relax.TensorType]]:
    """``(role, type)`` of every buffer a partition's PrimFunc must take, in order:
    the function's parameters, then the tensors of its declared return type."""
    tensors = [(f"parameter {p.name}", p.ty) for p in func.params]
    ret = func.ret_ty
    outputs = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    tensors += [(f"output {i}", ty) for i, ty in enumerate(outputs)]
    return tensors


def _describe(shape, dtype) -> str:
    dims = tuple(int(d) if hasattr(d, "value") else str(d) for d in shape)
    return f"{dims} {dtype}"


def check_prim_signature(func: relax.Function, prim: tvm.tirx.PrimFunc, symbol: str) -> None:
    """Raise :class:`ArityMismatchError` unless ``prim`` takes exactly the buffers that
    partition ``func`` declares (its parameters, then its outputs), with their shapes
    and dtypes (:class:`SignatureMismatchError` for a shape or dtype)."""
    want = declared_tensors(func)
    num_params = len(func.params)
    if len(prim.params) != len(want):
        raise ArityMismatchError(
            symbol, len(want), len(prim.params),
            f"the partition function declares {num_params} parameter(s) and "
            f"{len(want) - num_params} output(s), the PrimFunc has "
            f"{len(prim.params) - num_params} output buffer(s)")
    for position, ((role, ty), var) in enumerate(zip(want, prim.params)):
        buf = var.ty
        if not isinstance(ty, relax.TensorType) or not hasattr(ty.shape, "values"):
            raise SignatureMismatchError(symbol, len(want), position, role, str(ty),
                                         "a buffer (only static tensors can be passed)")
        expected = _describe(ty.shape.values, ty.dtype)
        actual = _describe(buf.shape, buf.dtype)
        if expected != actual:
            raise SignatureMismatchError(symbol, len(want), position, role, expected, actual)


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
