"""``RunCodegen`` for modules whose Relax functions call each other.

TVM's ``relax.transform.RunCodegen`` visits the callee of every call to a Relax
function from inside its caller.  A recursive function -- Relay's loops and
recursive globals, imported as recursive Relax functions -- sends it into
unbounded recursion (the process dies with a segfault), and a partition called
from a private function is never replaced by its external symbol there.

For such modules :func:`run_codegen` does the same job function by function:
hand every ``Codegen``-annotated function to its ``relax.ext.<name>`` codegen,
replace each call of one (in every Relax function) by ``call_dps_packed`` of
its symbol, drop the partition functions and attach the built modules as
``external_mods``.  Modules with a single Relax function besides the partitions
take TVM's own pass unchanged.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


def _codegen_name(func) -> str | None:
    if isinstance(func, relax.Function) and func.attrs is not None and "Codegen" in func.attrs:
        return str(func.attrs["Codegen"])
    return None


def has_several_relax_functions(mod: tvm.IRModule) -> bool:
    """Whether the module has Relax functions besides its entry and its partitions
    (lifted recursive functions, helpers, closures), which TVM's pass mishandles."""
    plain = [gv for gv, f in mod.functions.items()
             if isinstance(f, relax.Function) and _codegen_name(f) is None
             and (f.attrs is None or "Composite" not in f.attrs)]
    return len(plain) > 1


@mutator
class _PartitionCalls(PyExprMutator):
    """Replaces calls of partition functions by ``call_dps_packed`` of their symbol."""

    def __init__(self, mod: tvm.IRModule, symbols: dict):
        super().__init__(mod)
        self.symbols = symbols

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        symbol = self.symbols.get(call.op) if isinstance(call.op, relax.GlobalVar) else None
        if symbol is None:
            return call
        ty = call.ty
        out = list(ty.fields) if isinstance(ty, relax.TupleType) else ty
        return relax.op.call_dps_packed(relax.ExternFunc(symbol), relax.Tuple(list(call.args)),
                                        out)


def run_codegen(mod: tvm.IRModule) -> tvm.IRModule:
    """``RunCodegen`` that also handles recursive and mutually calling functions."""
    if not has_several_relax_functions(mod):
        return relax.transform.RunCodegen()(mod)
    by_target: dict[str, list] = {}
    symbols = {}
    for gv, func in mod.functions.items():
        name = _codegen_name(func)
        if name is not None:
            by_target.setdefault(name, []).append(func)
            symbols[gv] = str(func.attrs["global_symbol"])
    ext_mods = list(mod.attrs["external_mods"]) if mod.attrs is not None and \
        "external_mods" in mod.attrs else []
    for name, funcs in sorted(by_target.items()):
        codegen = tvm.get_global_func(f"relax.ext.{name}")
        ext_mods.extend(codegen(funcs, {}, {}))
    rewriter = _PartitionCalls(mod, symbols)
    functions = {}
    for gv, func in mod.functions.items():
        if gv in symbols:
            continue
        if isinstance(func, relax.Function):
            func = rewriter.visit_expr(func)
        functions[gv] = func
    out = tvm.IRModule(functions, attrs=mod.attrs)
    return out.with_attr("external_mods", ext_mods) if ext_mods else out
