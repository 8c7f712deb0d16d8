"""Host-side ops TVM 0.27 legalizes wrongly: division by a constant zero, which it folds,
and a resize's ``out_dtype``, which it drops.

TVM's default legalization passes a scalar constant operand of a binary op into the
TE compute as an immediate (``_try_convert_to_scalar_const``), and TVM's constant
folder then raises on ``x / 0.0`` while the compute is being built
(``InternalError: Check failed: fb->value != 0 : Divide by zero``), killing the whole
build.  Relay computed such a division per element: IEEE ``±inf`` / ``NaN``
(``divide(%x, 0f)``; ``floor_divide`` the floor of that; ``floor_mod`` ``NaN``).
(``relax.mod``, float ``mod``'s import, is TVM's ``truncmod``, which folds nothing.)  bmlib's templates keep that (``schedule._zero_divisor``); what stays on the
host -- a float64 division, or every op of the plain Relax reference build -- is
legalized here first, the zero divisor passed to the PrimFunc as a 0-d tensor
argument, which nothing folds.  Integer division by a constant zero never gets here:
the importer refuses it (``check_integer_divisor``).

The same pass gives ``image.resize2d`` / ``resize3d`` their ``out_dtype`` on the host:
TVM 0.27's legalization of them does not pass it to TOPI, so a ``uint8`` image resized
to ``float32`` came back ``uint8`` (its fractions truncated) while the model declared
``float32``, where v0.19's ``_cast_output`` cast the interpolated value to ``out_dtype``.
"""
from __future__ import annotations

from typing import Callable, Optional

import tvm
from tvm import relax, topi
from tvm.ir import GenericConst
from tvm.relax.expr_functor import PyExprMutator, mutator

# The Relax ops whose scalar-constant divisor TVM inlines and folds, and the TE
# compute each legalizes to.
_DIVISIONS = {
    "relax.divide": topi.divide,
    "relax.floor_divide": topi.floor_divide,
    "relax.floor_mod": topi.floor_mod,
}


def _zero_division(expr) -> Optional[Callable]:
    """The TE compute of ``expr`` when it is a division op by a constant scalar zero."""
    if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)):
        return None
    compute = _DIVISIONS.get(expr.op.name)
    if compute is None or len(expr.args) != 2 or not _is_zero_scalar(expr.args[1]):
        return None
    return compute


def _is_zero_scalar(expr: relax.Expr) -> bool:
    """A 0-d float constant equal to zero (either sign)."""
    if not (isinstance(expr, GenericConst) and isinstance(expr.value, tvm.runtime.Tensor)):
        return False
    value = expr.value.numpy()
    return value.ndim == 0 and value.dtype.kind == "f" and bool(value == 0)


_RESIZES = {"relax.image.resize2d": topi.image.resize2d,
            "relax.image.resize3d": topi.image.resize3d}


def _resize_out_dtype(expr) -> Optional[str]:
    """The ``out_dtype`` of a resize whose result dtype differs from its input's."""
    if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and
            expr.op.name in _RESIZES):
        return None
    out_dtype = str(expr.attrs.out_dtype or "")
    in_dtype = getattr(expr.args[0].ty, "dtype", None)
    return out_dtype if out_dtype and in_dtype is not None and out_dtype != str(in_dtype) \
        else None


def _resize_call_te(builder: relax.BlockBuilder, call: relax.Call, out_dtype: str):
    """TVM 0.27's legalization of the resize, with ``out_dtype`` passed to TOPI."""
    attrs = call.attrs
    return builder.call_te(
        _RESIZES[call.op.name], call.args[0], roi=attrs.roi, size=call.args[1],
        layout=attrs.layout, method=attrs.method,
        coordinate_transformation_mode=attrs.coordinate_transformation_mode,
        rounding_method=attrs.rounding_method, bicubic_alpha=attrs.cubic_alpha,
        bicubic_exclude=attrs.cubic_exclude, extrapolation_value=attrs.extrapolation_value,
        out_dtype=out_dtype, primfunc_name_hint=call.op.name.split(".")[-1])


def _needs_host_legalization(expr) -> bool:
    return _zero_division(expr) is not None or _resize_out_dtype(expr) is not None


@mutator
class _HostLegalizer(PyExprMutator):
    """Each host call of a division op whose divisor is a constant scalar zero becomes
    a ``call_tir`` that takes the divisor as a tensor argument; each resize with an
    ``out_dtype`` of its own, a ``call_tir`` that computes in it."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor
        call = super().visit_call_(call)
        out_dtype = _resize_out_dtype(call)
        if out_dtype is not None:
            return _resize_call_te(self.builder_, call, out_dtype)
        compute = _zero_division(call)
        if compute is None:
            return call
        return self.builder_.call_te(compute, call.args[0], call.args[1],
                                     primfunc_name_hint=call.op.name.split(".")[-1])


def legalize_for_host(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with what TVM 0.27's own legalization of its host functions gets wrong
    done here first (see the module docstring); ``mod`` itself when it has none."""
    hosts = [(gvar, func) for gvar, func in mod.functions.items()
             if _runs_on_host(func) and _has_host_rewrites(func)]
    if not hosts:
        return mod
    legalizer = _HostLegalizer(mod)
    for gvar, func in hosts:
        legalizer.builder_.update_func(gvar, legalizer.visit_expr(func))
    return legalizer.builder_.get()


def _runs_on_host(func) -> bool:
    """A Relax function TVM legalizes: not an external codegen's partition (bmlib's
    templates lower those, zero divisors included)."""
    return isinstance(func, relax.Function) and \
        (func.attrs is None or "Codegen" not in func.attrs)


def _has_host_rewrites(func: relax.Function) -> bool:
    found = []

    def visit(expr):
        if _needs_host_legalization(expr):
            found.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return bool(found)
