"""Relay compatibility front door: read and build Relay programs without Relay.

``parse``/``fromtext``/``parse_expr`` read Relay text as TVM printed it,
``load_params`` reads ``.params``/``.npz`` weights, ``bind_params_by_name``
binds them, :mod:`.dataflow_pattern` runs legacy DFPattern tables, and the
builder API (``var``, ``const``, ``Function``, ``nn.conv2d`` ...,
``transform.InferType``, ``analysis.free_vars``) mirrors ``tvm.relay`` so a
model script ports by changing its imports.
"""
from __future__ import annotations

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
from . import expr, testing, ty
from .params import bind_params_by_name, load_params
from .parser import fromtext, parse, parse_expr

__all__ = [
    "ParseError", "ast", "analysis", "transform", "dataflow_pattern", "op", "nn", "image",
    "build_module", "parse", "fromtext", "parse_expr", "load_params", "bind_params_by_name",
    "var", "const", "scalar_type", "TupleWrapper", "IRModule", "Function", "Call", "Var",
    "Constant", "Op", "Tuple", "TupleGetItem", "Let", "If", "Match", "Clause", "GlobalVar",
    "Constructor", "RefCreate", "RefRead", "RefWrite", "TensorType", "TupleType", "FuncType",
    "TypeVar", "IncompleteType", "Attrs", "Span", "Any", "vision", "ty", "expr", "testing",
    "loops",
]
