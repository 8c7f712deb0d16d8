"""Weights passed to Relax functions become constants inside them.

A Relay global ``@f(%x, %w)`` called from ``@main`` with a weight bound as a
parameter imports as ``f(x, metadata[0])``: inside ``f`` the weight is a
parameter, so the compile-time weight work (folding, conv folding, re-layout for
the templates: :mod:`.fold`, :mod:`.conv_fold`, :mod:`.rewrite`) does not see
it, and a 3x3 convolution there ran ~2.4x slower than the same one in ``main``.

:func:`bind_constant_arguments` moves such a constant into the function when
*every* call of it passes the same constant in that position (a recursive call
passing the parameter on unchanged also counts: Relay loops pass their weights
around): the parameter is dropped and each call loses that argument.  Functions
called with different constants keep the parameter (they stay one function),
and so does a function used as a value.
"""
from __future__ import annotations

from typing import Callable, Optional

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

_Const = tvm.ir.expr.GenericConst


def _plain(func) -> bool:
    return isinstance(func, relax.Function) and (
        func.attrs is None or ("Codegen" not in func.attrs and "Composite" not in func.attrs))


def _static(ty) -> bool:
    shape = getattr(ty, "shape", None)
    return isinstance(ty, relax.TensorType) and shape is not None and \
        all(isinstance(d, tvm.tirx.IntImm) for d in shape.values)


def _call_sites(mod: tvm.IRModule) -> tuple[dict, set]:
    """``{callee name: [(caller name, call)]}`` and the functions used as values."""
    sites: dict[str, list] = {}
    as_value: set[str] = set()
    for gv, func in mod.functions.items():
        if not _plain(func):
            continue
        callees: list = []
        refs: list = []

        def visit(expr, callees=callees, refs=refs):
            if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar):
                callees.append(expr)
            elif isinstance(expr, relax.GlobalVar):
                refs.append(expr.name_hint)

        relax.analysis.post_order_visit(func, visit)
        called = [c.op.name_hint for c in callees]
        for call in callees:
            sites.setdefault(call.op.name_hint, []).append((gv.name_hint, call))
        for name in set(refs):
            if refs.count(name) > called.count(name):
                as_value.add(name)
    return sites, as_value


def _bound_constant(func: relax.Function, name: str, index: int,
                    sites: list) -> Optional[_Const]:
    """The constant every call passes as parameter ``index`` (or None)."""
    param = func.params[index]
    if not _static(param.ty):
        return None
    found = None
    for caller, call in sites:
        arg = call.args[index]
        if caller == name and arg.same_as(param):
            continue  # a recursive call passing the parameter on
        if not isinstance(arg, _Const) or (found is not None and not arg.same_as(found)):
            return None
        found = arg
    return found


@mutator
class _Substitute(PyExprMutator):
    def __init__(self, mapping: dict):
        super().__init__()
        self.mapping = mapping

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.mapping.get(var, var)


@mutator
class _DropArguments(PyExprMutator):
    """Calls of functions whose parameters were bound lose those arguments."""

    def __init__(self, dropped: dict, new_vars: dict):
        super().__init__()
        self.dropped = dropped
        self.new_vars = new_vars

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if not isinstance(call.op, relax.GlobalVar) or call.op.name_hint not in self.dropped:
            return call
        drop = self.dropped[call.op.name_hint]
        args = [a for i, a in enumerate(call.args) if i not in drop]
        return relax.Call(self.new_vars[call.op.name_hint], args, call.attrs, call.ty_args,
                          call.span)


def bind_parameters(mod: tvm.IRModule, bindings: dict[str, dict],
                    rewrite_calls_in: Callable[[relax.Function], bool]) -> tvm.IRModule:
    """Substitute ``bindings[name]`` (``{param: constant}``) into each named function,
    drop those parameters, and drop the matching arguments from every call in the
    functions ``rewrite_calls_in`` accepts (the callers)."""
    dropped: dict[str, set] = {}
    rebuilt: dict[str, relax.Function] = {}
    for name, mapping in bindings.items():
        func = mod[name]
        dropped[name] = {i for i, p in enumerate(func.params) if p in mapping}
        body = _Substitute(mapping).visit_expr(func.body)
        params = [p for p in func.params if p not in mapping]
        rebuilt[name] = relax.Function(params, body, func.ret_ty, func.is_pure, func.attrs,
                                       func.span)
    builder = relax.BlockBuilder()
    new_vars = {name: builder.add_func(func, name) for name, func in rebuilt.items()}
    rewrite = _DropArguments(dropped, new_vars)
    functions = {}
    for gv, func in mod.functions.items():
        target = new_vars.get(gv.name_hint, gv)
        func = rebuilt.get(gv.name_hint, func)
        functions[target] = rewrite.visit_expr(func) if rewrite_calls_in(func) else func
    return relax.transform.Normalize()(tvm.IRModule(functions, attrs=mod.attrs))


def bind_constant_arguments(mod: tvm.IRModule, entry: str = "main") -> tvm.IRModule:
    """Bind every parameter all of whose calls pass one constant (see the module doc),
    repeated until nothing changes (``main`` passes a weight to ``f``, ``f`` to ``g``)."""
    for _ in range(len(mod.functions)):
        sites, as_value = _call_sites(mod)
        bindings: dict[str, dict] = {}
        for gv, func in mod.functions.items():
            name = gv.name_hint
            if name == entry or not _plain(func) or name in as_value or name not in sites:
                continue
            mapping = {}
            for index, param in enumerate(func.params):
                const = _bound_constant(func, name, index, sites[name])
                if const is not None:
                    mapping[param] = const
            if not mapping:
                continue
            bindings[name] = mapping
        if not bindings:
            return mod
        mod = bind_parameters(mod, bindings, rewrite_calls_in=_plain)
    return mod
