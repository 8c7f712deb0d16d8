"""``relay.expr``: Relay's expression classes and helpers under the module name legacy
scripts imported them from (``relay.expr.const``, ``relay.expr.TupleWrapper``)."""
from __future__ import annotations

from .ast import (  # noqa: F401
    Call, Constant, Expr, Function, GlobalVar, If, Let, RefCreate, RefRead, RefWrite, Tuple,
    TupleGetItem, Var,
)
from .builder import const, var  # noqa: F401
from .op._make import TupleWrapper  # noqa: F401

__all__ = ["Call", "Constant", "Expr", "Function", "GlobalVar", "If", "Let", "RefCreate",
           "RefRead", "RefWrite", "Tuple", "TupleGetItem", "Var", "const", "var", "TupleWrapper"]
