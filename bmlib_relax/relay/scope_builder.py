"""``relay.ScopeBuilder``: nested ``let`` / ``if`` expressions written as statements.

v0.19 scripts (and its executors' ``evaluate(binds=...)``) built ``let`` chains and
branches with it::

    sb = relay.ScopeBuilder()
    t = sb.let("t", relay.add(x, one))
    with sb.if_scope(cond):
        sb.ret(t)
    with sb.else_scope():
        sb.ret(y)
    expr = sb.get()

Misuse (no ``ret``, two ``ret`` in one scope, an ``if`` without ``else``, an ``else``
with no ``if`` before it) is a ``ScopeBuilderError`` saying which, as v0.19's
``RuntimeError`` messages did.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from ..errors import BmlibError
from . import ast
from .builder import var as make_var


class ScopeBuilderError(BmlibError, RuntimeError):
    """A ``ScopeBuilder`` used out of order (names what was missing or repeated)."""


@dataclass
class _PendingIf:
    """An ``if_scope`` that has ended and waits for its ``else_scope``."""

    cond: ast.Expr
    true_branch: ast.Expr


@dataclass
class _Scope:
    bindings: list = field(default_factory=list)
    result: Union[ast.Expr, _PendingIf, None] = None


def _nest(scope: _Scope) -> ast.Expr:
    """The scope's bindings as ``let``s around its result."""
    if scope.result is None:
        raise ScopeBuilderError("ret is not called in this scope")
    if isinstance(scope.result, _PendingIf):
        raise ScopeBuilderError("an if scope without its else scope")
    expr = scope.result
    for var, value in reversed(scope.bindings):
        expr = ast.Let(var, value, expr)
    return expr


class ScopeBuilder:
    """Builds ``let %v = value; ...`` chains and ``if`` expressions scope by scope."""

    def __init__(self) -> None:
        self._scopes: list[_Scope] = [_Scope()]

    def let(self, var: Union[str, tuple, list, ast.Var], value: ast.Expr) -> ast.Var:
        """Bind ``value`` to ``var`` (a ``Var``, a name, or ``(name, type)``) in the current
        scope; returns the variable."""
        if isinstance(var, (tuple, list)):
            if not 1 <= len(var) <= 2:
                raise ScopeBuilderError("let: a variable is a Var, a name or (name, type)")
            var = make_var(*var)
        elif isinstance(var, str):
            var = make_var(var)
        self._scopes[-1].bindings.append((var, value))
        return var

    @contextmanager
    def if_scope(self, cond: ast.Expr) -> Iterator[None]:
        """The true branch of ``if (cond)``; an ``else_scope`` must follow."""
        if self._scopes[-1].result is not None:
            raise ScopeBuilderError("result already returned before if scope")
        self._scopes.append(_Scope())
        yield
        branch = _nest(self._scopes.pop())
        self._scopes[-1].result = _PendingIf(cond, branch)

    @contextmanager
    def else_scope(self) -> Iterator[None]:
        """The false branch of the ``if_scope`` just closed."""
        pending = self._scopes[-1].result
        if not isinstance(pending, _PendingIf):
            raise ScopeBuilderError("else scope must follow an if scope")
        self._scopes.append(_Scope())
        yield
        branch = _nest(self._scopes.pop())
        self._scopes[-1].result = ast.If(pending.cond, pending.true_branch, branch)

    def type_of(self, expr: ast.Expr) -> Optional[ast.Type]:
        """A variable's annotation; another expression is bound to a fresh ``%unify`` and
        its (not yet inferred) type returned, as in v0.19."""
        if isinstance(expr, ast.Var):
            return expr.type_annotation
        incomplete = ast.IncompleteType()
        self.let(ast.Var("unify", incomplete), expr)
        return incomplete

    def ret(self, value: ast.Expr) -> None:
        """Set the current scope's result."""
        if self._scopes[-1].result is not None:
            raise ScopeBuilderError("ret value is already set in this scope")
        self._scopes[-1].result = value

    def get(self) -> ast.Expr:
        """The expression built (call once every scope has been closed)."""
        if len(self._scopes) != 1:
            raise ScopeBuilderError("get() called inside an if/else scope")
        return _nest(self._scopes[0])


__all__ = ["ScopeBuilder", "ScopeBuilderError"]
