"""Compile-time folding of computations on weights, with NumPy.

Inference dumps often compute on weights in the graph itself: Relay's
``SimplifyInference`` turned every batch_norm into ``sqrt(var + eps)``,
``divide``, ``multiply`` and ``expand_dims`` chains over constants (ResNet-50
from PyTorch has ~480 such ops).  Partitioning them would run those chains on
every inference; folding them leaves only the ops that touch activations.

TVM's ``FoldConstant`` builds and runs each op (20 s for that ResNet-50); the
ops here are element-wise and shape ops, so NumPy evaluates them directly, with
Relax's broadcasting rules.  Only the built-in pattern table uses this: a
legacy table may match the unfolded form (``reshape(is_constant())``), exactly
as Relay's MergeComposite saw it.

Half-precision chains are folded in float64 and rounded once, at the end:
op by op in float16, ``beta - mean * gamma / sqrt(var + eps)`` would round
every intermediate (with a mean of 300 the shift is off by whole units).  The
folder keeps the float64 value of every half-precision constant it made, so
the next fold in a chain starts from the exact value, not the rounded one.
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..constants import tensor_constant
from ..errors import SuspiciousWeightWarning
from ..importer.provenance import relay_place
from ..registry import Registry
from .rewrite import const_array, rewrite_functions

Folder = Callable[[list, relax.Call], Optional[np.ndarray]]
FOLDERS: Registry[Folder] = Registry("constant folder for Relax op")


def _elementwise(fn: Callable[..., np.ndarray]) -> Folder:
    return lambda args, call: fn(*args)


for _name, _fn in {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide, "relax.power": np.power, "relax.maximum": np.maximum,
    "relax.minimum": np.minimum, "relax.negative": np.negative, "relax.sqrt": np.sqrt,
    "relax.exp": np.exp, "relax.log": np.log, "relax.abs": np.abs,
    "relax.rsqrt": lambda x: 1 / np.sqrt(x),
}.items():
    FOLDERS.register(_name)(_elementwise(_fn))


# QNN: a quantized weight is ``astype(clip(round(w / s) + zp))`` (Relay's round, halves
# away from zero, imported as ``trunc(x + sign(x) * 0.49999997)``), its zero-point term a
# ``sum``.  ``relax.round`` (ONNX's) rounds halves to even, as NumPy's round does.
FOLDERS.register("relax.round")(_elementwise(np.round))
FOLDERS.register("relax.floor")(_elementwise(np.floor))
FOLDERS.register("relax.trunc")(_elementwise(np.trunc))
FOLDERS.register("relax.sign")(_elementwise(np.sign))


@FOLDERS.register("relax.clip")
def _clip(args, call):
    return np.clip(args[0], float(call.args[1].value), float(call.args[2].value))


@FOLDERS.register("relax.sum")
def _sum(args, call):
    axis = call.attrs.axis
    return np.sum(args[0], axis=None if axis is None else tuple(int(a) for a in axis),
                  keepdims=bool(call.attrs.keepdims), dtype=str(call.ty.dtype))


@FOLDERS.register("relax.reshape")
def _reshape(args, call):
    return args[0].reshape([int(v) for v in call.args[1].values])


@FOLDERS.register("relax.expand_dims")
def _expand_dims(args, call):
    return np.expand_dims(args[0], tuple(int(a) for a in call.attrs.axis))


@FOLDERS.register("relax.squeeze")
def _squeeze(args, call):
    axis = call.attrs.axis
    return np.squeeze(args[0], None if axis is None else tuple(int(a) for a in axis))


@FOLDERS.register("relax.permute_dims")
def _permute_dims(args, call):
    axes = call.attrs.axes
    return np.transpose(args[0], None if axes is None else [int(a) for a in axes])


@FOLDERS.register("relax.astype")
def _astype(args, call):
    return args[0].astype(str(call.attrs.dtype))


# Results of these dtypes are folded in float64 and rounded once (see the module doc).
HALF_DTYPES = ("float16", "bfloat16")
# Ops that only move values: folding them exposes no rounding of their own.
_SHAPE_OPS = {"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.permute_dims"}


def _widened(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float64) if value.dtype.kind == "f" or \
        str(value.dtype) == "bfloat16" else value


@mutator
class _ConstantFolder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.folded = 0
        # float64 values of the half-precision constants folded so far (chains continue
        # from them); only kept where rounding happened, so weights are not copied.
        self.exact: dict = {}

    def _value(self, expr: relax.Expr) -> Optional[np.ndarray]:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        if expr is not None and expr in self.exact:
            return self.exact[expr]
        return const_array(expr)

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor hook
        call = super().visit_call_(call)
        folder = FOLDERS.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        ty = call.ty
        if folder is None or not isinstance(ty, relax.TensorType):
            return call
        tensors = [a for a in call.args  # clip's bounds are scalar immediates, not tensors
                   if not isinstance(a, (relax.ShapeExpr, tvm.tirx.IntImm, tvm.tirx.FloatImm))]
        values = [self._value(a) for a in tensors]
        if not values or any(v is None for v in values):
            return call
        dtype = str(ty.dtype)
        wide = dtype in HALF_DTYPES
        if wide:
            values = [_widened(v) for v in values]
        with np.errstate(all="ignore"):
            result = np.asarray(folder(values, call))
        want = tuple(int(d) for d in ty.shape.values)
        if result.shape != want:  # broadcasting differs from what Relax inferred: keep it
            return call
        _warn_new_nans(call, values, result)
        self.folded += 1
        const = tensor_constant(result, dtype)
        keeps_exact = call.op.name not in _SHAPE_OPS or \
            any(self._is_exact(a) for a in tensors)
        if wide and keeps_exact and result.dtype == np.float64:
            self.exact[const] = result
        return const

    def _is_exact(self, expr: relax.Expr) -> bool:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return expr is not None and expr in self.exact


def _warn_new_nans(call: relax.Call, values: list, result: np.ndarray) -> None:
    """A :class:`~bmlib_relax.errors.SuspiciousWeightWarning` when folding makes NaNs of
    weights that had none: ``sqrt(var + eps)`` of a negative variance (the
    ``SimplifyInference`` form of a batch_norm, which ``nn.batch_norm``'s own check
    never sees), ``log`` of a negative.  Relay computed the same NaNs; a relu or clip
    after them makes a plausible 0 or 6.  Named by the Relay call it came from."""
    if not np.issubdtype(result.dtype, np.floating) or not np.isnan(result).any():
        return
    if any(np.issubdtype(v.dtype, np.floating) and np.isnan(v).any() for v in values):
        return  # the NaNs were there before this op
    where = relay_place(call)
    bad = np.isnan(result)
    op = call.op.name.removeprefix("relax.")
    warnings.warn(SuspiciousWeightWarning(
        f"{where + ': ' if where else ''}{op} of constants (weights) gives NaN in "
        f"{int(bad.sum())} of {result.size} entries (first at index "
        f"{int(np.flatnonzero(bad.ravel())[0])}), from inputs without NaN (e.g. the square "
        "root of a negative batch_norm variance): damaged weights, or a parameter bound to "
        "the wrong input?", None, where), stacklevel=2)


def fold_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with element-wise/shape ops on constants replaced by their values."""
    folded = rewrite_functions(_ConstantFolder(mod), mod)
    return relax.transform.DeadCodeElimination()(folded)
