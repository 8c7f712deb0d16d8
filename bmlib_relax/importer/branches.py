"""``If`` branches as functions of their own: a workaround for TVM 0.27's memory planner.

TVM 0.27's ``StaticPlanBlockMemory`` plans the storage of a function as one pool across
the branches of an ``If``: a storage block is allocated where the *first* branch first
needs it, and the other branch reuses it without ever allocating it.  The branch that
is not the first one then runs ``alloc_tensor`` on an unset storage object, and the
process dies with a segmentation fault (``StorageObj::AllocTensor``) as soon as that
branch holds two calls or more: ``if (%c) { relu(conv2d(..)) } else { negative(conv2d(..)) }``
crashes whenever ``%c`` is false, with or without bmlib (the plain ``tvm.compile`` of
the import crashes alike: ``tests/importer/test_control_flow.py``).

Each branch that binds two values or more becomes a call to a private function of its
own (the branch's free variables as parameters): the planner then plans every such
branch as a separate function, and the branch itself allocates at most its result, which
no later allocation reuses.  A branch of one binding (``if (%c) { relu(%x) } ...``) is
safe as it is and stays inline.  The importer lifts what the Relay program has; the
backend lifts again after its own rewrites (a layout change adds transposes, partitions
and host ops sit side by side), so :func:`~bmlib_relax.partition_for_bmlib` never returns
an ``If`` that TVM would plan wrong.  Partitioning treats the new functions like any
other Relax function: their ops are still offloaded.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


# The attribute a lifted branch function carries: the name of the function whose If it
# came from (reports and tests may count the branch with its owner).
BRANCH_OF_ATTR = "bmlib.branch_of"


@mutator
class _BranchLifter(PyExprMutator):
    """Rewrites the ``If`` nodes of one function at a time (see :func:`lift_if_branches`)."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.owner = "f"

    def visit_if_(self, node: relax.If) -> relax.Expr:  # noqa: D401 - visitor hook
        node = super().visit_if_(node)  # inner Ifs first
        then_branch = self._lift(node.true_branch, "then")
        else_branch = self._lift(node.false_branch, "else")
        if then_branch.same_as(node.true_branch) and else_branch.same_as(node.false_branch):
            return node
        return relax.If(node.cond, then_branch, else_branch, node.span)

    def _lift(self, branch: relax.Expr, which: str) -> relax.Expr:
        if not isinstance(branch, relax.SeqExpr) or \
                sum(len(block.bindings) for block in branch.blocks) < 2:
            return branch
        params = list(relax.analysis.free_vars(branch))
        defined = {str(v) for p in params for v in relax.analysis.defined_symbolic_vars(p)}
        if any(str(v) not in defined for v in relax.analysis.free_symbolic_vars(branch)):
            return branch  # a dim only the branch's shape expressions name: keep it inline
        # The return type is the branch's without the dims only its own bindings define
        # (a ``match_cast`` to the unified type of an inner ``if``, a loop's result):
        # TVM derives it so, and the caller's result is that type in the caller's dims.
        func = relax.Function(params, branch, None,
                              is_pure=not relax.analysis.contains_impure_call(branch))
        func = relax.utils.copy_with_new_vars(func)  # the new function's own variables
        func = func.with_attr(BRANCH_OF_ATTR, self.owner)
        gvar = self.builder_.add_func(func, f"{self.owner}_{which}_branch")
        call = self.builder_.normalize(relax.Call(gvar, params))
        result = relax.Var("branch_result", call.ty)
        return relax.SeqExpr([relax.BindingBlock([relax.VarBinding(result, call)])], result)


def lift_if_branches(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the body of every ``If`` branch of two bindings or more moved into a
    private function called from the branch (see the module docstring)."""
    with_ifs = [(gvar, func) for gvar, func in mod.functions.items()
                if isinstance(func, relax.Function) and _has_if(func)]
    if not with_ifs:
        return mod
    lifter = _BranchLifter(mod)
    for gvar, func in with_ifs:
        lifter.owner = gvar.name_hint
        lifter.builder_.update_func(gvar, lifter.visit_expr(func))
    return lifter.builder_.get()


def _has_if(func: relax.Function) -> bool:
    found = []
    relax.analysis.post_order_visit(
        func.body, lambda e: found.append(e) if isinstance(e, relax.If) else None)
    return bool(found)
