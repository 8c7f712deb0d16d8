"""``relay.expr_functor``: ``ExprFunctor``/``ExprVisitor``/``ExprMutator`` over the Relay AST.

As in v0.19, a functor memoises by node (a shared sub-expression is visited once) and an
``ExprMutator`` rebuilds a node only when one of its children changed, so an unchanged
graph comes back as the same objects.  Legacy pattern tables and ported scripts subclass
these (``tvm.relay.expr_functor`` in a loaded table is this module's classes).
"""
from __future__ import annotations

from typing import Any

from ..errors import LegacyApiError
from . import ast


class ExprFunctor:
    """``tvm.relay.expr_functor.ExprFunctor`` over bmlib-relax's Relay AST (memoised)."""

    def __init__(self):
        # Keyed by the node itself (expressions hash by identity), as v0.19 keyed it: the
        # dict keeps every visited node alive, so a functor reused over freshly built
        # expressions never finds a freed node's result under a recycled id().
        self.memo_map: dict[Any, Any] = {}

    def visit(self, expr: Any) -> Any:
        if expr in self.memo_map:
            return self.memo_map[expr]
        method = _VISIT_METHODS.get(type(expr))
        if method is None:
            for cls, name in _VISIT_BY_CLASS:
                if isinstance(expr, cls):
                    method = name
                    break
        if method is None:
            raise LegacyApiError(f"ExprFunctor cannot visit {type(expr).__name__}")
        result = getattr(self, method)(expr)
        self.memo_map[expr] = result
        return result

    def visit_function(self, fn): raise NotImplementedError()  # noqa: E704
    def visit_let(self, let): raise NotImplementedError()  # noqa: E704
    def visit_call(self, call): raise NotImplementedError()  # noqa: E704
    def visit_var(self, var): raise NotImplementedError()  # noqa: E704
    def visit_type(self, typ): return typ  # noqa: E704
    def visit_if(self, ite): raise NotImplementedError()  # noqa: E704
    def visit_tuple(self, tup): raise NotImplementedError()  # noqa: E704
    def visit_tuple_getitem(self, op): raise NotImplementedError()  # noqa: E704
    def visit_global_var(self, gvar): raise NotImplementedError()  # noqa: E704
    def visit_op(self, op): raise NotImplementedError()  # noqa: E704
    def visit_constant(self, const): raise NotImplementedError()  # noqa: E704
    def visit_constructor(self, con): raise NotImplementedError()  # noqa: E704
    def visit_match(self, m): raise NotImplementedError()  # noqa: E704
    def visit_ref_create(self, ref): raise NotImplementedError()  # noqa: E704
    def visit_ref_write(self, ref): raise NotImplementedError()  # noqa: E704
    def visit_ref_read(self, ref): raise NotImplementedError()  # noqa: E704


_VISIT_METHODS = {
    ast.Function: "visit_function", ast.Let: "visit_let", ast.Call: "visit_call",
    ast.Var: "visit_var", ast.If: "visit_if", ast.Tuple: "visit_tuple",
    ast.TupleGetItem: "visit_tuple_getitem", ast.GlobalVar: "visit_global_var",
    ast.Op: "visit_op", ast.Constant: "visit_constant", ast.Constructor: "visit_constructor",
    ast.Match: "visit_match", ast.RefCreate: "visit_ref_create",
    ast.RefWrite: "visit_ref_write", ast.RefRead: "visit_ref_read",
}
_VISIT_BY_CLASS = list(_VISIT_METHODS.items())


class ExprVisitor(ExprFunctor):
    """``tvm.relay.expr_functor.ExprVisitor``: visits every sub-expression once."""

    def visit_tuple(self, tup):
        for field in tup.fields:
            self.visit(field)

    def visit_call(self, call):
        self.visit(call.op)
        for arg in call.args:
            self.visit(arg)

    def visit_var(self, var):
        pass

    def visit_let(self, let):
        self.visit(let.var)
        self.visit(let.value)
        self.visit(let.body)

    def visit_function(self, fn):
        for param in fn.params:
            self.visit(param)
        self.visit(fn.body)

    def visit_if(self, ite):
        self.visit(ite.cond)
        self.visit(ite.true_branch)
        self.visit(ite.false_branch)

    def visit_global_var(self, gvar):
        pass

    def visit_constructor(self, con):
        pass

    def visit_op(self, op):
        pass

    def visit_constant(self, const):
        pass

    def visit_ref_create(self, ref):
        self.visit(ref.value)

    def visit_ref_read(self, ref):
        self.visit(ref.ref)

    def visit_ref_write(self, ref):
        self.visit(ref.ref)
        self.visit(ref.value)

    def visit_tuple_getitem(self, op):
        self.visit(op.tuple_value)

    def visit_match(self, m):
        self.visit(m.data)
        for clause in m.clauses:
            self.visit(clause.rhs)


class ExprMutator(ExprFunctor):
    """``tvm.relay.expr_functor.ExprMutator``: rebuilds a node only when a child changed."""

    def visit_function(self, fn):
        params = tuple(self.visit(p) for p in fn.params)
        body = self.visit(fn.body)
        if body is fn.body and all(a is b for a, b in zip(params, fn.params)):
            return fn
        return ast.Function(params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def visit_let(self, let):
        var, value, body = self.visit(let.var), self.visit(let.value), self.visit(let.body)
        if var is let.var and value is let.value and body is let.body:
            return let
        return ast.Let(var, value, body, span=let.span)

    def visit_call(self, call):
        op = self.visit(call.op)
        args = tuple(self.visit(a) for a in call.args)
        if op is call.op and all(a is b for a, b in zip(args, call.args)):
            return call
        return ast.Call(op, args, call.attrs, call.type_args, span=call.span)

    def visit_var(self, var):
        return var

    def visit_global_var(self, gvar):
        return gvar

    def visit_op(self, op):
        return op

    def visit_constant(self, const):
        return const

    def visit_constructor(self, con):
        return con

    def visit_tuple(self, tup):
        fields = tuple(self.visit(f) for f in tup.fields)
        if all(a is b for a, b in zip(fields, tup.fields)):
            return tup
        return ast.Tuple(fields, span=tup.span)

    def visit_tuple_getitem(self, op):
        value = self.visit(op.tuple_value)
        if value is op.tuple_value:
            return op
        return ast.TupleGetItem(value, op.index, span=op.span)

    def visit_if(self, ite):
        parts = (self.visit(ite.cond), self.visit(ite.true_branch), self.visit(ite.false_branch))
        if all(a is b for a, b in zip(parts, (ite.cond, ite.true_branch, ite.false_branch))):
            return ite
        return ast.If(*parts, span=ite.span)

    def visit_ref_create(self, ref):
        return ast.RefCreate(self.visit(ref.value), span=ref.span)

    def visit_ref_read(self, ref):
        return ast.RefRead(self.visit(ref.ref), span=ref.span)

    def visit_ref_write(self, ref):
        return ast.RefWrite(self.visit(ref.ref), self.visit(ref.value), span=ref.span)

    def visit_match(self, m):
        clauses = tuple(ast.Clause(c.lhs, self.visit(c.rhs), span=c.span) for c in m.clauses)
        return ast.Match(self.visit(m.data), clauses, m.complete, span=m.span)


__all__ = ["ExprFunctor", "ExprVisitor", "ExprMutator"]
