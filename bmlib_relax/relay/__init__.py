"""Relay compatibility front door: read and build Relay programs without Relay.

``parse``/``fromtext``/``parse_expr`` read Relay text as TVM printed it,
``load_params`` reads ``.params``/``.npz`` weights, ``bind_params_by_name``
binds them, and :mod:`.dataflow_pattern` runs legacy DFPattern tables.
"""
from __future__ import annotations

from ..errors import ParseError
from . import ast
from .ast import (
    Attrs, Call, Constant, Function, GlobalVar, IRModule, Let, Op, Span, TensorType,
    Tuple, TupleGetItem, TupleType, Var,
)
from .parser import fromtext, parse, parse_expr
from .params import bind_params_by_name, load_params

__all__ = [
    "ParseError", "ast", "parse", "fromtext", "parse_expr", "load_params",
    "bind_params_by_name", "IRModule", "Function", "Call", "Var", "Constant", "Op",
    "Tuple", "TupleGetItem", "Let", "GlobalVar", "TensorType", "TupleType", "Attrs", "Span",
]
