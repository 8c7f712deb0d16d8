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

Each fold computes what TVM computes for the same op on an input, as v0.19's
``FoldConstant`` built and ran each op (a model gives the same whether a tensor
is a bound weight or an input):

* float ops are folded op by op, each result rounded to its dtype, as TVM
  computes them on the CPU: float16 and bfloat16 in float32 (LLVM promotes
  every float16 operation, TVM legalizes bfloat16 to float32) and rounded back,
  float32 as libm does (correctly rounded ``exp``/``log``/``pow``).  NumPy
  computes in float64, rounds to float32, then to the half type.  So
  ``multiply(w, 3f16)`` of 1025 is 3076, and a ``cast`` after it sees 3076;
  and a float16 ``beta - mean * gamma / sqrt(var + eps)`` rounds every
  intermediate, as v0.19 did (with a mean of 300 the shift is off by a few
  float16 steps from the exact one: the model's, not the folder's doing);
* ``maximum``/``minimum``/``clip``/``sign`` are TVM's selects, which a NaN
  does not pass (NumPy's do);
* an integer ``divide`` is exact and truncates (NumPy's goes through float64).
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..constants import tensor_constant
from ..errors import ConversionError, SuspiciousWeightWarning
from ..importer.provenance import relay_place
from ..registry import Registry
from .rewrite import const_array, rewrite_functions

Folder = Callable[[list, relax.Call], Optional[np.ndarray]]
FOLDERS: Registry[Folder] = Registry("constant folder for Relax op")


def _elementwise(fn: Callable[..., np.ndarray]) -> Folder:
    return lambda args, call: fn(*args)


def _select_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``select(a > b, a, b)``: v0.19's codegen_llvm.cc lowered MaxNode so (TVM 0.27's
    too); a NaN ``a`` gives ``b``, a NaN ``b`` stays NaN (``np.maximum`` keeps both)."""
    return np.where(a > b, a, b)


def _select_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``select(a < b, a, b)``: v0.19's MinNode, with the same NaN behaviour."""
    return np.where(a < b, a, b)


def _select_sign(x: np.ndarray) -> np.ndarray:
    """v0.19's topi ``sign``: ``Select(x < 0, -1, Select(x > 0, 1, 0))`` (NaN -> 0,
    -0.0 -> +0.0; ``np.sign`` keeps both)."""
    positive = (x > 0).astype(x.dtype)
    return positive if x.dtype.kind in "ub" else np.where(x < 0, x.dtype.type(-1), positive)


def _divide(a: np.ndarray, b: np.ndarray, call: relax.Call) -> Optional[np.ndarray]:
    """Floats divide as IEEE does; integers as v0.19's topi ``divide`` (``truncdiv``),
    exactly: ``np.divide`` went through float64 (2**53 + 1 became 2**53)."""
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    if not b.all():
        return None  # a 0 divisor: left to the run check (import refuses a constant 0)
    if a.dtype.kind == "i":
        _refuse_overflowing_quotient(a, b, call)
    # a - fmod(a, b) (C's remainder, exact) is a multiple of b nearer 0 than a: its
    # floor division is the truncated quotient
    return np.floor_divide(a - np.fmod(a, b), b)


def _refuse_overflowing_quotient(a: np.ndarray, b: np.ndarray, call: relax.Call) -> None:
    """The type's minimum divided by -1 has no quotient (x86's division traps): with the
    tensors as inputs the model's run check refuses it (``check_quotient_fits``); of
    weights it is known now, as a constant 0 divisor is at import."""
    lowest = np.iinfo(a.dtype).min
    if not ((a == lowest) & (b == -1)).any():
        return
    raise ConversionError(
        f"integer overflow: {lowest} divided by -1 has no {a.dtype} quotient (the operands "
        "are weights; the division would stop the process with SIGFPE)",
        call.op.name.removeprefix("relax."), relay_place(call))


def _keeps_integers(fn: Callable[[np.ndarray], np.ndarray]
                    ) -> Callable[[np.ndarray], np.ndarray]:
    """A rounding op that leaves integers as they are (TVM's ``floor`` of an int is the
    int; NumPy's may go through float64)."""
    return lambda x: x if x.dtype.kind in "iub" else fn(x)


for _name, _fn in {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.power": np.power, "relax.maximum": _select_max, "relax.minimum": _select_min,
    "relax.negative": np.negative, "relax.sqrt": np.sqrt,
    "relax.exp": np.exp, "relax.log": np.log, "relax.abs": np.abs,
}.items():
    FOLDERS.register(_name)(_elementwise(_fn))
FOLDERS.register("relax.divide")(lambda args, call: _divide(*args, call))


# QNN: a quantized weight is ``astype(clip(round(w / s) + zp))`` (Relay's round, halves
# away from zero, imported as ``trunc(x + sign(x) * 0.49999997)``), its zero-point term a
# ``sum``.  ``relax.round`` (ONNX's) rounds halves to even, as NumPy's round does.
FOLDERS.register("relax.round")(_elementwise(_keeps_integers(np.round)))
FOLDERS.register("relax.floor")(_elementwise(_keeps_integers(np.floor)))
FOLDERS.register("relax.trunc")(_elementwise(_keeps_integers(np.trunc)))
FOLDERS.register("relax.sign")(_elementwise(_select_sign))


@FOLDERS.register("relax.rsqrt")
def _rsqrt(args, call):
    """v0.19's topi ``rsqrt``: ``1 / sqrt(x)`` in x's dtype.  LLVM's float16 rounds the
    square root before dividing (and float32 does); TVM's bfloat16 legalization computes
    the whole expression in float32 and rounds once."""
    root = np.sqrt(args[0])
    dtype = str(call.ty.dtype)
    if dtype in ("float16", "float32"):
        root = _rounded(root, dtype).astype(root.dtype)
    return 1 / root


@FOLDERS.register("relax.clip")
def _clip(args, call):
    """v0.19's topi ``clip``: ``max(min(x, a_max), a_min)`` with the bounds cast to the
    input's dtype (``-1.5`` is ``-1`` for an int, a float16 bound is rounded), as selects
    (a NaN gives ``a_max``)."""
    x = args[0]
    dtype = str(call.ty.dtype)
    low, high = (np.asarray(call.args[i].value).astype(dtype).astype(x.dtype) for i in (1, 2))
    return _select_max(_select_min(x, high), low)


@FOLDERS.register("relax.sum")
def _sum(args, call):
    """``sum`` as TVM's reduction loop computes it: a float sum adds one element at a
    time in order, each partial sum rounded to the dtype (v0.19's FoldConstant ran that
    loop: 4096 float16 ones sum to 2048, bfloat16 ones to 256: the partial sum is the
    result buffer, of the dtype).  NumPy's ``np.sum`` adds pairwise (4096)."""
    data, dtype = args[0], str(call.ty.dtype)
    axes = range(data.ndim) if call.attrs.axis is None else \
        sorted(int(a) % max(data.ndim, 1) for a in call.attrs.axis)
    keepdims = bool(call.attrs.keepdims)
    if not (np.dtype(data.dtype).kind == "f" or dtype == "bfloat16") or data.size == 0:
        return np.sum(data, axis=tuple(axes), keepdims=keepdims, dtype=dtype)
    kept = [a for a in range(data.ndim) if a not in axes]
    rows = np.transpose(data, kept + list(axes)).astype(dtype)
    rows = rows.reshape([data.shape[a] for a in kept] + [-1])
    out = np.add.accumulate(rows, axis=-1, dtype=dtype)[..., -1]
    if keepdims:
        out = out.reshape([1 if a in axes else n for a, n in enumerate(data.shape)])
    return np.asarray(out, dtype)


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
    """A float to ``bool`` is the ordered ``x != 0`` (v0.19's codegen: NaN is False,
    where NumPy's ``astype(bool)`` gives True); a cast to ``bfloat16`` goes through
    float32, as TVM's BF16 legalization casts (v0.19's too): two roundings, so float64
    ``1 + 2**-8 + 2**-30`` is 1.0 (NumPy's direct rounding gave 1.0078125), and an
    int32 ``2**24 + 2**16 + 1`` is ``2**24``; any other cast is NumPy's."""
    value, dtype = args[0], str(call.attrs.dtype)
    if dtype == "bool" and value.dtype.kind == "f":
        return (value != 0) & ~np.isnan(value)
    if dtype == "bfloat16" and str(value.dtype) != "bfloat16":
        return value.astype(np.float32).astype(dtype)
    return value.astype(dtype)


# Ops with results of these dtypes are computed in float64 and rounded (module doc).
ROUNDED_DTYPES = ("float16", "bfloat16", "float32")
# Ops that only move values: computed in their own dtype (no float64 copy of a weight).
_SHAPE_OPS = {"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.permute_dims"}


def _widened(value: np.ndarray) -> np.ndarray:
    """A float operand in float64 (:func:`_rounded` takes results back)."""
    return value.astype(np.float64) if value.dtype.kind == "f" or \
        str(value.dtype) == "bfloat16" else value


def _rounded(value: np.ndarray, dtype: str) -> np.ndarray:
    """An op's float64 result as TVM computes it on the CPU: in float32 (LLVM promotes
    each float16 op, TVM legalizes bfloat16 ops to float32), then rounded to ``dtype``.
    Rounding float64 to float32 gives float32's correctly rounded ``exp``/``log``/``pow``,
    as libm's (NumPy's own float32 ``exp`` is an ulp off for a third of the values); for
    ``+ - * /`` and ``sqrt`` it is the float32 result (53 >= 2 * 24 + 2 bits: no double
    rounding), and so is the rounding from float32 on to a half type."""
    with np.errstate(all="ignore"):  # overflow to inf, as TVM's rounding does
        return value.astype(np.float32).astype(dtype) if value.dtype == np.float64 \
            else value.astype(dtype)


@mutator
class _ConstantFolder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.folded = 0
        # an error of the weights found while folding, raised once the visitor is done
        # (raised inside it, TVM's FFI would turn it into a bare RuntimeError)
        self.error: Optional[ConversionError] = None

    def _value(self, expr: relax.Expr) -> Optional[np.ndarray]:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
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
        wide = dtype in ROUNDED_DTYPES and call.op.name not in _SHAPE_OPS
        if wide:
            values = [_widened(v) for v in values]
        try:
            with np.errstate(all="ignore"):
                result = folder(values, call)
        except ConversionError as error:
            self.error = self.error or error
            return call
        if result is None:  # the folder leaves this one to TVM (and its run checks)
            return call
        result = np.asarray(result)
        want = tuple(int(d) for d in ty.shape.values)
        if result.shape != want:  # broadcasting differs from what Relax inferred: keep it
            return call
        _warn_new_nans(call, values, result)
        self.folded += 1
        return tensor_constant(_rounded(result, dtype) if wide else result, dtype)


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
    """``mod`` with element-wise/shape ops on constants replaced by their values.

    A :class:`~bmlib_relax.errors.ConversionError` names an op whose weights have no
    result (an integer quotient that overflows); a division of weights by 0 is left to
    the model's run check."""
    folder = _ConstantFolder(mod)
    folded = rewrite_functions(folder, mod)
    if folder.error is not None:
        raise folder.error
    return relax.transform.DeadCodeElimination()(folded)
