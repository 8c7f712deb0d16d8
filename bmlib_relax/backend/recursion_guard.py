"""A bound on recursion depth, checked when the model runs, instead of a crash.

The Relax VM nests a native call per call of a Relax function, so a Relay loop (a
private recursive function after import) or a recursive global uses C stack per
iteration.  Recursive models run on a thread with ``deep_stack.RECURSION_STACK_BYTES``
of stack (about 300 000 nested calls of a small loop); past that the process died
with a segmentation fault, where Relay's VM kept its frames on the heap.

Each function on a call cycle, and each private function that reaches one
(:func:`depth_carriers`), gets a trailing ``bmlib_depth`` parameter (a 0-d int64
tensor): calls from the other functions pass 0, calls among them pass the caller's
depth plus one, and the function first checks ``bmlib_depth < MAX_RECURSION_DEPTH`` (a
``RunCheckError`` naming the function and the bound when it fails).  A loop whose
branch was lifted into a function of its own nests two calls per iteration.

Applied to the module ``tvm.compile`` builds, after ``RunCodegen``: the counter's
``less`` / ``add`` stay on the host (three scalar ops per nested call).
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr import _update_type
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..errors import RUN_CHECK_PREFIX
from .call_graph import call_graph, on_cycles, reaching

#: Nested calls of Relax functions a run may reach: a third of what the recursion
#: thread's stack held in a measured loop (300 000 nested calls crashed at 1 GiB).
MAX_RECURSION_DEPTH = 100_000

_DEPTH_TYPE = relax.TensorType((), "int64")


def recursive_functions(mod: tvm.IRModule) -> set:
    """The GlobalVars of the Relax functions that lie on a call cycle."""
    return {mod.get_global_var(name) for name in on_cycles(call_graph(mod))}


@mutator
class _PassDepth(PyExprMutator):
    """Calls of the cycle's functions get the depth to pass as a last argument."""

    def __init__(self, cycle: dict, depth: relax.Expr):
        super().__init__()
        self.cycle = cycle  # old GlobalVar -> new GlobalVar
        self.depth = depth

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if isinstance(call.op, relax.GlobalVar) and call.op in self.cycle:
            return relax.Call(self.cycle[call.op], list(call.args) + [self.depth],
                              call.attrs, call.ty_args, call.span)
        return call


def _is_public(func: relax.Function) -> bool:
    return func.attrs is not None and "global_symbol" in func.attrs


def depth_carriers(mod: tvm.IRModule) -> set:
    """The functions that count the depth: those on a call cycle, and the private ones
    that reach a cycle.  A function off the cycles that starts one (``@w`` calling a
    recursive ``@count``, or a loop's lifted exit branch starting the next loop) must
    pass the depth on: restarting it at 0 let chained loops, each under the bound,
    nest past the stack together (a segmentation fault).  A public entry keeps its
    signature (its callers are outside the model) unless it is on a cycle itself."""
    graph = call_graph(mod)
    cycle = on_cycles(graph)
    carriers = {name for name in reaching(graph, cycle)
                if name in cycle or not _is_public(mod[name])}
    return {mod.get_global_var(name) for name in carriers}


def guard_recursion_depth(mod: tvm.IRModule, limit: int | None = None) -> tvm.IRModule:
    """``mod`` with every chain of nested calls through a call cycle bounded to ``limit``
    (default :data:`MAX_RECURSION_DEPTH`); a module without recursion is returned as it
    is."""
    limit = MAX_RECURSION_DEPTH if limit is None else limit
    cycle = depth_carriers(mod)
    if not cycle:
        return mod
    graph = call_graph(mod)
    carrier_names = {gv.name_hint for gv in cycle}
    # New GlobalVars: a function's type changes with its parameter list.
    renamed = {}
    for gv in cycle:
        func = mod[gv]
        renamed[gv] = relax.GlobalVar(gv.name_hint)
        _update_type(renamed[gv], relax.FuncType(
            [p.ty for p in func.params] + [_DEPTH_TYPE], func.ret_ty, purity=False))
    out = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            out[gv] = func
            continue
        if gv not in cycle:
            out[gv] = _PassDepth(renamed, relax.const(0, "int64")).visit_expr(func) \
                if any(callee in carrier_names for callee in graph[gv.name_hint]) else func
            continue
        depth = relax.Var("bmlib_depth", _DEPTH_TYPE)
        builder = relax.BlockBuilder()
        attrs = {str(k): v for k, v in func.attrs.items()} if func.attrs is not None else {}
        private = "global_symbol" not in attrs
        with builder.function(gv.name_hint, list(func.params) + [depth], attrs,
                              pure=False, private=private):
            holds = builder.emit(relax.op.less(depth, relax.const(limit, "int64")))
            builder.emit(relax.op.assert_op(
                holds, format=f"{RUN_CHECK_PREFIX}@{gv.name_hint}: more than {limit:,} "
                              "nested calls of the model's recursive functions (a Relay "
                              "loop or recursive function this deep would overflow the "
                              "stack the run has)"))
            deeper = builder.emit(relax.op.add(depth, relax.const(1, "int64")))
            body = _PassDepth(renamed, deeper).visit_expr(func.body)
            builder.emit_func_output(body)
        out[renamed[gv]] = builder.get()[gv.name_hint]
    result = tvm.IRModule(out, attrs=mod.attrs)
    return relax.transform.Normalize()(result)
