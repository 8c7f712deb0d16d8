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

from typing import Any, Mapping, Optional

import tvm
from tvm import relax
from tvm.sym.analyzer import Analyzer, ConstIntBound

from ..dims import dim_or_text, is_static_dim
from ..errors import ArityMismatchError, SignatureMismatchError, UnboundShapeVarError
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
    dims = tuple(dim_or_text(d) for d in shape)
    return f"{dims} {dtype}"


def _shape_of(ty) -> list:
    return list(ty.shape.values) if isinstance(ty, relax.TensorType) and \
        hasattr(ty.shape, "values") else []


def bound_shape_vars(func: relax.Function) -> list:
    """The symbolic dims a partition's PrimFunc can bind: the ``tir.Var`` s that are a
    whole dim of some parameter's shape (``match_buffer`` binds them at the call)."""
    bound: list = []
    for param in func.params:
        for dim in _shape_of(param.ty):
            if isinstance(dim, tvm.tirx.Var) and not any(dim.same_as(b) for b in bound):
                bound.append(dim)
    return bound


def check_shape_vars(func: relax.Function, symbol: str) -> None:
    """Raise :class:`UnboundShapeVarError` when a parameter or output shape of ``func``
    uses a symbolic var that no parameter holds as a whole dim (an output-only dim, or
    one known only through ``2 * n``): the PrimFunc could not know its value."""
    bound = bound_shape_vars(func)
    for role, ty in declared_tensors(func):
        shape = _shape_of(ty)
        for dim in shape:
            if is_static_dim(dim):
                continue
            for var in tvm.tirx.analysis.undefined_vars(dim):
                if not any(var.same_as(b) for b in bound):
                    raise UnboundShapeVarError(symbol, role, _describe(shape, ty.dtype),
                                               str(var))


class _DimMatcher:
    """Compares declared (Relax) dims with PrimFunc buffer dims structurally: static
    dims equal, a symbolic var always maps to the same PrimFunc var and back (``n`` and
    ``m`` never meet in one var, whatever their names), expressions equal under that
    mapping."""

    def __init__(self):
        self.forward: list[tuple[Any, Any]] = []  # (declared var, PrimFunc var)
        self.analyzer = Analyzer()
        self.sizes: list[Any] = []  # declared vars known to be >= 0

    def _sizes(self, expr) -> None:
        """Every var of a declared shape is a size: ``min(0, n)`` is 0."""
        for var in tvm.tirx.analysis.undefined_vars(expr):
            if not any(var.same_as(v) for v in self.sizes):
                self.sizes.append(var)
                self.analyzer.update(var, ConstIntBound(0, ConstIntBound.POS_INF), override=True)

    def _mapped(self, var, side: int) -> Optional[Any]:
        for pair in self.forward:
            if pair[side].same_as(var):
                return pair[1 - side]
        return None

    def bind(self, want, got) -> bool:
        """Record ``want`` (a declared var) ↔ ``got``; False if either is taken."""
        if not isinstance(got, tvm.tirx.Var):
            return False
        have, back = self._mapped(want, 0), self._mapped(got, 1)
        if have is None and back is None:
            self.forward.append((want, got))
            self.analyzer.bind(got, want)
            return True
        return have is not None and have.same_as(got) and back is not None and \
            back.same_as(want)

    def equal(self, want, got) -> bool:
        if is_static_dim(want) or is_static_dim(got):
            return is_static_dim(want) and is_static_dim(got) and int(want) == int(got)
        if isinstance(want, tvm.tirx.Var):
            return self.bind(want, got)
        self._sizes(want)
        want, got = (d if str(d.ty) == "int64" else d.astype("int64") for d in (want, got))
        return bool(self.analyzer.can_prove_equal(want, got))


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
    matcher = _DimMatcher()
    # Whole-var dims first, in order: they fix the mapping the expressions are checked under.
    for pass_ in ("vars", "all"):
        for position, ((role, ty), var) in enumerate(zip(want, prim.params)):
            buf = var.ty
            if not isinstance(ty, relax.TensorType) or not hasattr(ty.shape, "values"):
                raise SignatureMismatchError(symbol, len(want), position, role, str(ty),
                                             "a buffer (only tensors of known rank can be "
                                             "passed)")
            expected = _describe(ty.shape.values, ty.dtype)
            actual = _describe(buf.shape, buf.dtype)
            declared = list(ty.shape.values)
            pairs = list(zip(declared, buf.shape))
            if pass_ == "vars":
                pairs = [(w, g) for w, g in pairs if isinstance(w, tvm.tirx.Var)]
            same = str(ty.dtype) == str(buf.dtype) and len(declared) == len(buf.shape) and \
                all(matcher.equal(w, g) for w, g in pairs)
            if not same:
                raise SignatureMismatchError(symbol, len(want), position, role, expected,
                                             actual)


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
