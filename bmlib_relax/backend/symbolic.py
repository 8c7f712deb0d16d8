"""Symbolic target shapes inside bmlib partitions.

``reshape(x, newshape=[0, -1])`` on a tensor with a free dim imports as
``R.reshape(x, R.shape([n, 24]))``.  ``FuseOpsByPattern`` lifts a ``ShapeExpr``
that holds symbolic dims into a parameter of the partition (so the function
defines every var it uses), but a PrimFunc takes buffers only: that parameter
would break the arity rule (partition parameters + outputs = PrimFunc
parameters).  :func:`inline_shape_arguments` puts such a shape back into the
partition, written in the partition's own symbolic dims (bound by its tensor
parameters), and drops the argument from every call site.  A shape whose dims
the tensor parameters do not determine stays a parameter, and the pattern check
keeps such calls on the host in the first place.
"""
from __future__ import annotations

from typing import Optional

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym.analyzer import Analyzer

from .codegen import is_bmlib_partition
from .verify import bound_shape_vars, partition_call_sites


def _as_int64(expr):
    return expr if str(expr.ty) == "int64" else expr.astype("int64")


def _in_partition_dims(shape: relax.ShapeExpr, func: relax.Function,
                       call: relax.Call) -> Optional[list]:
    """``shape`` (written in the caller's dims) in the dims of ``func``'s tensor
    parameters, or None when one of its vars is not such a dim."""
    analyzer = Analyzer()
    bound = []
    for param, arg in zip(func.params, call.args):
        mine, given = getattr(param.ty, "shape", None), getattr(arg.ty, "shape", None)
        if not isinstance(param.ty, relax.TensorType) or not hasattr(mine, "values") or \
                not hasattr(given, "values"):
            continue
        for dim, value in zip(mine.values, given.values):
            if isinstance(dim, tvm.tirx.Var) and isinstance(value, tvm.tirx.Var) and \
                    not any(value.same_as(v) for v in bound):
                analyzer.bind(value, dim)
                bound.append(value)
    own = bound_shape_vars(func)
    values = []
    for value in shape.values:
        value = analyzer.simplify(_as_int64(value))
        for var in tvm.tirx.analysis.undefined_vars(value):
            if not any(var.same_as(v) for v in own):
                return None
        values.append(value)
    return values


def _same_values(a: list, b: list) -> bool:
    analyzer = Analyzer()
    return len(a) == len(b) and all(x.same_as(y) or analyzer.can_prove_equal(x, y)
                                    for x, y in zip(a, b))


@mutator
class _DropArguments(PyExprMutator):
    """Calls of the rewritten partitions lose the arguments now inside them."""

    def __init__(self, mod: tvm.IRModule, keep: dict[str, list[int]],
                 new_vars: dict[str, relax.GlobalVar]):
        super().__init__(mod)
        self.keep = keep
        self.new_vars = new_vars

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor hook
        call = super().visit_call_(call)
        if isinstance(call.op, relax.GlobalVar) and call.op.name_hint in self.keep:
            args = [call.args[i] for i in self.keep[call.op.name_hint]]
            return relax.Call(self.new_vars[call.op.name_hint], args, call.attrs,
                              call.ty_args, call.span)
        return call


def inline_shape_arguments(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every symbolic ``ShapeExpr`` argument of a bmlib partition moved
    into the partition (see the module doc); other modules come back unchanged."""
    sites: dict[str, list[relax.Call]] = {}
    for name, call in partition_call_sites(mod):
        sites.setdefault(name, []).append(call)
    rewritten: dict[str, relax.Function] = {}
    keep: dict[str, list[int]] = {}
    for gvar, func in mod.functions.items():
        if not is_bmlib_partition(func) or gvar.name_hint not in sites:
            continue
        shape_params = [i for i, p in enumerate(func.params)
                        if isinstance(p.ty, relax.ShapeType)]
        if not shape_params:
            continue
        binding = {}
        for index in shape_params:
            found = None
            for call in sites[gvar.name_hint]:
                arg = call.args[index]
                values = _in_partition_dims(arg, func, call) \
                    if isinstance(arg, relax.ShapeExpr) else None
                if values is None or (found is not None and not _same_values(found, values)):
                    found = None
                    break
                found = values
            if found is not None:
                binding[func.params[index]] = relax.ShapeExpr(found)
        if not binding:
            continue
        rewritten[gvar.name_hint] = func.bind_params(binding)
        keep[gvar.name_hint] = [i for i, p in enumerate(func.params) if p not in binding]
    if not rewritten:
        return mod
    # A GlobalVar carries its function's signature: the rewritten functions are added
    # anew (same names), under GlobalVars the builder types.
    kept = {g: f for g, f in mod.functions.items() if g.name_hint not in rewritten}
    new_vars: dict[str, relax.GlobalVar] = {}
    dropper = _DropArguments(tvm.IRModule(kept, attrs=mod.attrs), keep, new_vars)
    for name, func in rewritten.items():
        new_vars[name] = dropper.builder_.add_func(func, name)
    for gvar, func in kept.items():
        if isinstance(func, relax.Function) and not is_bmlib_partition(func) and \
                (func.attrs is None or "Composite" not in func.attrs):
            dropper.builder_.update_func(gvar, dropper.visit_expr(func))
    return dropper.builder_.get()
