"""Rebuilding a function with layout *twins*: what the NHWC → NCHW pass
(:mod:`.layout`) and the blocked-layout pass (:mod:`.blocked_layout`) share.

Both walk a dataflow function binding by binding.  An op the pass has a rule for
computes on the *twins* of its operands (their values in the layout the pass wants)
and records the twin of its result; every other op reads values in their original
layout, which are materialised from a twin once, on first use
(:meth:`TwinRebuilder.original`).  Conversions therefore happen only where a value
crosses from ops that have rules to ops that do not.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


@mutator
class Substitute(PyExprMutator):
    """Replace old variables by their values in the function being rebuilt."""

    def __init__(self, lookup: Callable[[relax.Var], relax.Expr]):
        super().__init__()
        self.lookup = lookup

    def visit_var_(self, var: relax.Var) -> relax.Expr:  # noqa: D401 - visitor hook
        return self.lookup(var)

    def visit_dataflow_var_(self, var: relax.Var) -> relax.Expr:  # noqa: D401
        return self.lookup(var)


class TwinRebuilder:
    """One function, rebuilt binding by binding (see the module docstring).

    Subclasses say how a twin becomes the original value again
    (:meth:`materialise`) and how one binding is rebuilt (:meth:`rebuild_binding`,
    which sets ``converted`` when a rule applied); they may look at all bindings
    first (:meth:`prepare`) and clean the result up (:meth:`finish`).
    """

    def __init__(self, func: relax.Function):
        self.func = func
        self.bb = relax.BlockBuilder()
        self.plain: dict[Any, relax.Expr] = {}  # old var -> value in its original layout
        self.twin: dict[Any, Any] = {}          # old var -> its twin (the pass's form)
        self.converted = 0
        self._substitute: Optional[Substitute] = None

    # -- hooks ----------------------------------------------------------------
    def materialise(self, var: relax.Var) -> relax.Expr:
        """Emit ``var``'s value in its original layout, made from its twin."""
        raise NotImplementedError

    def rebuild_binding(self, var: relax.Var, value: relax.Expr) -> None:
        raise NotImplementedError

    def prepare(self, bindings: list, result: relax.Expr) -> None:
        """Look at every binding (and the function's result) before rebuilding."""

    def finish(self, func: relax.Function) -> relax.Function:
        return func

    # -- values ---------------------------------------------------------------
    def original(self, var: relax.Var) -> relax.Expr:
        """The value of ``var`` in its original layout (materialised on first use)."""
        if var not in self.plain:
            if var not in self.twin:
                return var  # a parameter
            self.plain[var] = self.materialise(var)
        return self.plain[var]

    def substitute(self, expr: relax.Expr) -> relax.Expr:
        """``expr`` reading the rebuilt values, in their original layout."""
        if self._substitute is None:
            self._substitute = Substitute(self.original)
        return self._substitute.visit_expr(expr)

    # -- rebuilding -----------------------------------------------------------
    def run(self) -> Optional[relax.Function]:
        """The rebuilt function, or None when it is not one dataflow body or no rule
        applied (the caller keeps the function as it is)."""
        body = self.func.body
        if not isinstance(body, relax.SeqExpr) or \
                not all(isinstance(b, relax.DataflowBlock) for b in body.blocks) or \
                any(not isinstance(x, relax.VarBinding) for b in body.blocks for x in b.bindings):
            return None
        bindings = [b for block in body.blocks for b in block.bindings]
        self.prepare(bindings, body.body)
        attrs = dict(self.func.attrs) if self.func.attrs is not None else {}
        # The rebuilt function keeps its global symbol, or its privacy: a private function
        # (a Relay global, a lifted If branch) built as a public "main" clashed with the
        # module's own main ("duplicate global symbol").
        symbol = attrs.get("global_symbol")
        try:
            with self.bb.function(str(symbol) if symbol is not None else "rebuilt",
                                  list(self.func.params), attrs=attrs,
                                  pure=bool(self.func.is_pure), private=symbol is None):
                with self.bb.dataflow():
                    for binding in bindings:
                        self.rebuild_binding(binding.var, binding.value)
                    result = self.bb.emit_output(self.substitute(body.body))
                self.bb.emit_func_output(result)
        finally:
            # The Substitute mutator reads self.original: a cycle through a TVM object,
            # which Python's garbage collector cannot see into.  Left in place, it kept
            # this rebuilder -- its BlockBuilder and every constant it made -- alive for
            # the life of the process (ResNet-18: ~100 MB per compile).
            self._substitute = None
        if not self.converted:
            return None
        (rebuilt,) = self.bb.get().functions.values()
        return self.finish(rebuilt)


def rebuild_functions(mod, applies: Callable[[relax.Function], bool],
                      rebuilder: Callable[[relax.Function], TwinRebuilder]):
    """``mod`` with every Relax function ``applies`` accepts rebuilt by its
    ``rebuilder`` (partitions and composites are left alone)."""
    updates = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function) or \
                (func.attrs is not None and ("Codegen" in func.attrs or
                                             "Composite" in func.attrs)):
            continue
        if not applies(func):
            continue
        converted = rebuilder(func).run()
        if converted is not None:
            updates[gvar] = converted
    if not updates:
        return mod
    mod = mod.clone() if hasattr(mod, "clone") else tvm.IRModule(dict(mod.functions))
    for gvar, func in updates.items():
        mod[gvar] = func
    return relax.transform.Normalize()(mod)
