"""Relay compatibility front door: read and build Relay programs without Relay.

``parse``/``fromtext``/``parse_expr`` read Relay text as TVM printed it,
``load_params`` reads ``.params``/``.npz`` weights, ``bind_params_by_name``
binds them, :mod:`.dataflow_pattern` runs legacy DFPattern tables, and the
builder API (``var``, ``const``, ``Function``, ``nn.conv2d`` ...,
``transform.InferType``, ``analysis.free_vars``) mirrors ``tvm.relay`` so a
model script ports by changing its imports.
"""
from __future__ import annotations

import importlib
from typing import Any as _AnyValue

from ..errors import ParseError
from . import analysis, ast, build_module, dataflow_pattern, loops, op, transform
from .ast import (
    Any, Attrs, Call, Clause, Constant, Constructor, FuncType, Function, GlobalVar, If,
    IncompleteType, IRModule, Let, Match, Op, RefCreate, RefRead, RefWrite, Span, TensorType,
    Tuple, TupleGetItem, TupleType, TypeVar, Var,
)
from .builder import const, scalar_type, var
from .op import *  # noqa: F401,F403  (relay.add, relay.reshape, ...)
from .op import TupleWrapper, image, nn, vision
from .op import qnn  # noqa: F401  (relay.qnn.op.*: the QNN dialect)
from . import expr, expr_functor, testing, ty
from .params import bind_params_by_name, load_params
from .parser import fromtext, parse, parse_expr
from .expr_functor import ExprFunctor, ExprMutator, ExprVisitor
from .scope_builder import ScopeBuilder

__all__ = [
    "ParseError", "ast", "analysis", "transform", "dataflow_pattern", "op", "nn", "image",
    "build_module", "parse", "fromtext", "parse_expr", "load_params", "bind_params_by_name",
    "var", "const", "scalar_type", "TupleWrapper", "IRModule", "Function", "Call", "Var",
    "Constant", "Op", "Tuple", "TupleGetItem", "Let", "If", "Match", "Clause", "GlobalVar",
    "Constructor", "RefCreate", "RefRead", "RefWrite", "TensorType", "TupleType", "FuncType",
    "TypeVar", "IncompleteType", "Attrs", "Span", "Any", "vision", "ty", "expr", "testing",
    "loops", "expr_functor", "ExprFunctor", "ExprVisitor", "ExprMutator", "ScopeBuilder", "build", "create_executor", "graph_executor",
]

# ``relay.build`` / ``relay.create_executor`` compile, so they live with the entry points
# (:mod:`bmlib_relax.graph_executor`); loaded on first use, so importing the front door
# does not import the backend.
_LAZY = {"build": "build", "create_executor": "create_executor", "graph_executor": None}


def __getattr__(name: str) -> _AnyValue:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module("..graph_executor", __name__)
    value = module if _LAZY[name] is None else getattr(module, _LAZY[name])
    globals()[name] = value
    return value
