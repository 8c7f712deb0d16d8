"""Weights passed to Relax functions become constants inside them.

A Relay global ``@f(%x, %w)`` called from ``@main`` with a weight bound as a
parameter imports as ``f(x, metadata[0])``: inside ``f`` the weight is a
parameter, so the compile-time weight work (folding, conv folding, re-layout for
the templates: :mod:`.fold`, :mod:`.conv_fold`, :mod:`.rewrite`) does not see
it, and a 3x3 convolution there ran ~2.4x slower than the same one in ``main``.

:func:`bind_constant_arguments` moves such a constant into the function when
*every* call of it passes the same constant in that position, directly or through a
caller's parameter that only ever receives that constant (a recursive call passing
the parameter on counts, as does a loop passing it through the ``If`` branch lifted
out of it: Relay loops pass their weights around): the parameter is dropped and each
call loses that argument.  Functions
called with different constants keep the parameter (they stay one function),
and so does a function used as a value.
"""
from __future__ import annotations

from typing import Callable

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


_UNKNOWN = object()  # no call seen yet that decides the parameter
_VARIES = object()   # calls pass different values (or something that is no constant)


def _constant_parameters(mod: tvm.IRModule, entry: str) -> dict[str, dict]:
    """``{function: {param: constant}}`` for every parameter that only ever receives one
    constant: passed by a call directly, or passed on by a caller's parameter that itself
    only receives it.  An optimistic fixed point over the call graph (constant
    propagation's lattice: unknown, one constant, varies), so cycles resolve too: a
    Relay loop passes its weights to itself, and through the ``If`` branch it was lifted
    into (``loop`` -> ``loop_then_branch`` -> ``loop``, see ``importer.branches``)."""
    sites, as_value = _call_sites(mod)
    funcs = {gv.name_hint: f for gv, f in mod.functions.items()
             if _plain(f) and gv.name_hint != entry and gv.name_hint not in as_value and
             gv.name_hint in sites}
    value: dict[tuple[str, int], object] = {}
    for name, func in funcs.items():
        for index, param in enumerate(func.params):
            value[(name, index)] = _UNKNOWN if _static(param.ty) else _VARIES
    param_of = {gv.name_hint: {p: i for i, p in enumerate(f.params)}  # a caller's parameters
                for gv, f in mod.functions.items() if isinstance(f, relax.Function)}

    def incoming(caller: str, arg) -> object:
        if isinstance(arg, _Const):
            return arg
        index = param_of.get(caller, {}).get(arg)
        if index is not None and (caller, index) in value:
            return value[(caller, index)]
        return _VARIES

    changed = True
    while changed:
        changed = False
        for (name, index), current in value.items():
            if current is _VARIES:
                continue
            found = _UNKNOWN
            for caller, call in sites[name]:
                got = incoming(caller, call.args[index])
                if got is _UNKNOWN:
                    continue
                if got is _VARIES or (found is not _UNKNOWN and not got.same_as(found)):
                    found = _VARIES
                    break
                found = got
            if found is not current and not (isinstance(found, _Const) and
                                             isinstance(current, _Const) and
                                             found.same_as(current)):
                value[(name, index)] = found
                changed = True
    bindings: dict[str, dict] = {}
    for (name, index), const in value.items():
        if isinstance(const, _Const):
            bindings.setdefault(name, {})[funcs[name].params[index]] = const
    return bindings


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
    """Bind every parameter all of whose calls pass one constant, directly or through
    callers' parameters (see the module doc and :func:`_constant_parameters`)."""
    bindings = _constant_parameters(mod, entry)
    if not bindings:
        return mod
    return bind_parameters(mod, bindings, rewrite_calls_in=_plain)
