"""The Relay → Relax import driver.

Walks a Relay function (a DAG, iteratively: dumps can be tens of thousands of
nodes deep) and emits one high-level ``relax.op.*`` call per Relay op into a
dataflow block, so that bmlib's DPL patterns can match the result.  Ops are
looked up in the converter registry; the driver itself knows only the
structural node kinds (variables, constants, tuples, projections, ``let``,
closures that are called, calls to other global functions).

Before converting anything, the whole reachable program is scanned and every
unsupported op or construct is reported in one :class:`UnsupportedOpError`,
never a partial import.

Attributes printed into the ``#[metadata]`` section are resolved here, for
every op alike: a call whose last argument is ``meta[relay.attrs.*][N]`` gets
that node's attributes, and an attribute value ``meta[runtime.BoxInt][N]`` (or
another boxed scalar, also inside a list) gets its value.  Without a metadata
section the parser recovers the boxed values a printed type determines
(:mod:`bmlib_relax.relay.meta_recovery`); one still missing is a
:class:`ConversionError` naming the op, attribute, location and why.

Import forms (the contract with the bmlib pattern table; each converter's
module documents its own):

* ``nn.dense(x, w)`` -> ``matmul(x, permute_dims(w, [1, 0]), out_dtype)``
* ``nn.batch_matmul(a, b)`` -> ``matmul(a', b')``, ``permute_dims(.., [0, 2, 1])``
  on each operand Relay transposes (C++ defaults: neither)
* ``nn.bias_add(x, b, axis)`` -> ``add(x, b)`` on the last axis, else
  ``add(x, reshape(b, [C, 1, ..., 1]))``
* ``transpose`` -> ``permute_dims``; ``nn.batch_flatten`` -> ``reshape(x, [N, prod(rest)])``
* ``nn.softmax``/``nn.layer_norm``/``nn.relu``/``nn.conv2d``/``nn.conv2d_transpose``
  -> the ``relax.op.nn`` op of the same name; ``nn.leaky_relu`` -> ``nn.leakyrelu``
* pools -> ``nn.max_pool2d``/``nn.avg_pool2d``/``nn.adaptive_avg_pool2d``;
  ``nn.global_avg_pool2d`` -> ``nn.adaptive_avg_pool2d(x, (1, 1))`` (layout kept)
* ``nn.batch_norm`` -> ``nn.batch_norm(..., training=False)``; ``clip`` -> ``clip``;
  ``cast`` -> ``astype``; ``concatenate`` -> ``concat``; ``split`` -> ``split``
* scalar literals (``multiply(%x, 0.25f)``) -> 0-d ``relax.const(value, dtype)``
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional

import numpy as np
import tvm
from tvm import relax
from tvm.sym.analyzer import Analyzer, ConstIntBound

from ..constants import tensor_constant
from ..dims import dim_or_text, static_dim
from ..errors import BmlibError, ConversionError, ParamError, RelayTypeError, UnsupportedOpError
from ..relay import ast
from ..relay.params import check_param
from ..relay.analysis import free_vars, post_order_list
from ..relay.meta_recovery import box_refs, printed_ref
from ..relay.op_schema import check_call, op_schema, with_text_defaults
from ..relay.printer import print_type
from . import provenance
from .branches import lift_if_branches
from .registry import get_converter
from .run_checks import BROADCAST_REASON, emit_run_check, known_dims, unify_dims
from .typecheck import BARE_SCALAR_TYPES as _BARE_SCALAR_TYPES
from .typecheck import annotation_error, branch_error, condition_error, type_text, value_type

# Constructs that parse but have no Relax dataflow equivalent.
_UNSUPPORTED_CONSTRUCTS = {
    ast.Match: "match (ADT pattern matching)",
    ast.RefCreate: "ref",
    ast.RefRead: "ref_read",
    ast.RefWrite: "ref_write",
    ast.Constructor: "ADT constructor",
}


@dataclass(frozen=True)
class _Closure:
    """A Relay function value: inlined where it is called, unless it is recursive.

    ``self_var`` is the ``let`` variable a recursive local function calls itself
    through (Relay's loops); such a function is lifted to a private Relax global
    function whose extra parameters are its free variables.  ``declared`` is the
    function type of the ``let`` variable it is bound to (``let %f: fn (A) -> R =
    fn ...``): its calls' arguments and results are checked against it.
    """

    func: ast.Function
    env: Mapping[ast.Var, Any]
    self_var: Optional[ast.Var] = None
    declared: Optional[ast.FuncType] = None


@dataclass(frozen=True)
class _GlobalRef:
    """A global function used as a value (``@f`` not in call position, eta-expanded);
    ``declared`` as :class:`_Closure`'s."""

    gvar: ast.GlobalVar
    declared: Optional[ast.FuncType] = None


@dataclass(frozen=True)
class _CondClosure:
    """``if (c) { %f } else { %g }``: calling it emits ``if (c) { f(x) } else { g(x) }``."""

    cond: relax.Expr
    then_fn: Any
    else_fn: Any


@dataclass(frozen=True)
class _FunctionTuple:
    """A tuple holding function values: kept static, projected at import time."""

    fields: tuple


_FUNCTION_VALUES = (_Closure, _GlobalRef, _CondClosure, _FunctionTuple)


def _attrs_meta_arg(call: ast.Call) -> Optional[ast.MetaRef]:
    """The trailing ``meta[relay.attrs.*][N]`` argument holding a call's attributes."""
    last = call.args[-1] if call.args else None
    if isinstance(last, ast.MetaRef) and last.kind.startswith("relay.attrs."):
        return last
    return None


def _decode_meta_attr(text: Any) -> Any:
    """A scalar attribute from metadata JSON (stored as a string): int, float, None or str."""
    if not isinstance(text, str):
        return text
    if text == "":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _resolve_meta_values(value: Any, objects: Mapping[str, list]) -> Any:
    """An attribute value with each ``meta[kind][N]`` scalar (``runtime.BoxInt``...)
    the metadata section holds replaced by its value, inside lists too."""
    if isinstance(value, tuple):
        return tuple(_resolve_meta_values(v, objects) for v in value)
    if isinstance(value, ast.MetaRef):
        entries = objects.get(value.kind, [])
        if value.index < len(entries) and "value" in entries[value.index].get("attrs", {}):
            return _decode_meta_attr(entries[value.index]["attrs"]["value"])
    return value


def _where(node: object) -> Optional[str]:
    span = getattr(node, "span", None)
    return str(span) if span is not None else None


def _concrete_type(ty: Optional[ast.Type]) -> bool:
    """Whether a Relay type is fully known: tensors of static shape (tuples of them)."""
    if isinstance(ty, ast.TypeCall):
        return not ty.args and ty.name in _BARE_SCALAR_TYPES
    if isinstance(ty, ast.TensorType):
        return all(isinstance(d, int) for d in ty.shape)
    if isinstance(ty, ast.TupleType):
        return all(_concrete_type(f) for f in ty.fields)
    return False


def _type_key(ty: Any, symbols: Optional[dict] = None) -> tuple:
    """A hashable key of a Relax parameter type.  A symbolic dim is ``?<k>``, ``k``
    numbering the distinct symbolic dims in order of appearance (``symbols``, shared
    by the parameters of one signature, tells which dims are the same)."""
    symbols = {} if symbols is None else symbols

    def dim(d: Any) -> Any:
        if isinstance(d, tvm.tirx.IntImm):
            return int(d.value)
        for known, index in symbols.items():
            if known.same_as(d):
                return f"?{index}"
        symbols[d] = len(symbols)
        return f"?{symbols[d]}"

    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        dims = None if shape is None else tuple(dim(d) for d in shape.values)
        return ("tensor", str(ty.dtype), ty.ndim if dims is None else dims)
    if isinstance(ty, relax.TupleType):
        return ("tuple",) + tuple(_type_key(f, symbols) for f in ty.fields)
    return ("other", str(ty))


def _static_key(key: tuple) -> bool:
    """Whether a :func:`_type_key` describes fully static tensors."""
    if key[0] == "tensor":
        return not isinstance(key[2], int) and all(isinstance(d, int) for d in key[2])
    if key[0] == "tuple":
        return all(_static_key(k) for k in key[1:])
    return False


def _mangle(signature: tuple) -> str:
    """``id__int32_5x7``: the parameter types of a specialisation, for its name."""
    def one(key: tuple) -> str:
        if key[0] == "tensor":
            dims = key[2]
            if isinstance(dims, int):
                return f"{key[1]}_rank{dims}"
            return key[1] + ("_" + "x".join(str(d).replace("?", "n") for d in dims)
                             if dims else "")
        if key[0] == "tuple":
            return "tup_" + "_".join(one(k) for k in key[1:]) + "_end"
        return "other"

    return "__".join(one(k) for k in signature) or "void"


def _flat_param(name: str, ty: Any, params: list) -> relax.Expr:
    """A parameter of type ``ty``: a Var, or for a tuple a Tuple of per-field Vars
    (``name.0``, ``name.1.0``...); every Var is appended to ``params``."""
    if isinstance(ty, relax.TupleType):
        return relax.Tuple([_flat_param(f"{name}.{i}", f, params)
                            for i, f in enumerate(ty.fields)])
    var = relax.Var(name, ty)
    params.append(var)
    return var


def _fresh_dims(ty: Any, fresh: list) -> Any:
    """``ty`` with every symbolic dim a new var of the same name: a parameter of another
    function must not reuse the caller's symbolic vars.  ``fresh`` ((old, new) pairs,
    shared by the parameters of one signature) keeps equal dims equal."""
    if isinstance(ty, relax.TensorType) and ty.shape is not None:
        dims = []
        for d in ty.shape.values:
            if isinstance(d, tvm.tirx.IntImm):
                dims.append(d)
                continue
            match = next((new for old, new in fresh if old.same_as(d)), None)
            if match is None:
                match = tvm.tirx.Var(getattr(d, "name", "d"), "int64")
                fresh.append((d, match))
            dims.append(match)
        return relax.TensorType(dims, ty.dtype)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_fresh_dims(f, fresh) for f in ty.fields])
    return ty


def _renamed_dims(ty: Any, base: str) -> Any:
    """``ty`` with each symbolic dim a new var named ``<base>_d<k>`` (equal dims stay
    equal, as in :func:`_fresh_dims`): the dims a call's result takes in the caller,
    named apart from the caller's inputs' (``d0``), by which signatures are read."""
    fresh: list = []  # (old, new) pairs

    def dim(d: Any) -> Any:
        if isinstance(d, tvm.tirx.IntImm):
            return d
        match = next((new for old, new in fresh if old.same_as(d)), None)
        if match is None:
            match = tvm.tirx.Var(f"{base}_d{len(fresh)}", "int64")
            fresh.append((d, match))
        return match

    def rename(t: Any) -> Any:
        dims = _shape_dims(t)
        if dims is not None:
            return relax.TensorType([dim(d) for d in dims], t.dtype)
        if isinstance(t, relax.TupleType):
            return relax.TupleType([rename(f) for f in t.fields])
        return t

    return rename(ty)


def _final_state_type(ty: Any) -> Any:
    """The type of a loop variable's final value: its parameter's, but a shape with a
    symbolic dim is left to run time (the variable may grow from call to call; the
    parameter's own var would be checked against the first call's length)."""
    if isinstance(ty, relax.TensorType) and ty.shape is not None and any(
            not isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return relax.TensorType(None, ty.dtype, ndim=len(ty.shape.values))
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_final_state_type(f) for f in ty.fields])
    return ty


def _run_time_where_annotated(ty: Any, annotation: Optional[ast.Type], name: str) -> Any:
    """``ty`` (a parameter typed by its first argument) with a var of its own wherever
    the annotation says ``?``: a loop variable declared ``Tensor[(?, 1)]`` that starts as
    ``(1, 1)`` grows (Relay typed it ``?``), and typing it ``(1, 1)`` would refuse the
    loop's next call; one that starts as a run-time-sized input it also captures
    (``concatenate((%acc, %x))``, ``%x: Tensor[(?, 3)]``) must not share ``%x``'s dim
    either, or the second call is refused."""
    if isinstance(ty, relax.TensorType) and isinstance(annotation, ast.TensorType) \
            and ty.shape is not None and len(annotation.shape) == len(ty.shape.values):
        dims = [tvm.tirx.Var(f"{name}_d{i}", "int64")
                if a is None or isinstance(a, ast.Any) else d
                for i, (d, a) in enumerate(zip(ty.shape.values, annotation.shape))]
        return relax.TensorType(dims, ty.dtype)
    if isinstance(ty, relax.TupleType) and isinstance(annotation, ast.TupleType) and \
            len(ty.fields) == len(annotation.fields):
        return relax.TupleType([_run_time_where_annotated(f, a, f"{name}_{i}")
                                for i, (f, a) in enumerate(zip(ty.fields, annotation.fields))])
    return ty


def _shape_dims(ty: Any) -> Optional[list]:
    """The dims of a tensor type of known shape, else None."""
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or shape is None or not hasattr(shape, "values"):
        return None
    return list(shape.values)


def _independent_dims(ty: Any, base: str) -> Any:
    """``ty`` with every dim that is not static a new var of its own: Relay's ``?``, the
    type of a loop's final state (its variables may grow apart from call to call, so two
    that start with one dim must not be tied)."""
    dims = _shape_dims(ty)
    if dims is not None:
        return relax.TensorType([d if isinstance(d, tvm.tirx.IntImm)
                                 else tvm.tirx.Var(f"{base}_d{i}", "int64")
                                 for i, d in enumerate(dims)], ty.dtype)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_independent_dims(f, f"{base}_{i}")
                                for i, f in enumerate(ty.fields)])
    return ty


def _unify_branch_dim(lhs: Any, rhs: Any, name: str) -> Any:
    """As v0.19's ``Unifier::UnifyDim`` (src/relay/analysis/type_solver.cc) on an ``if``'s
    branches: equal dims stay that dim; any other pair (a ``?`` on either side: every
    run-time dim is one here) is ``?``, a new var.  Two different static dims never get
    here (:func:`~.typecheck.branch_error` refused them); a named dim against a static
    one, which v0.19 bound to the static dim, is a new var too (it accepts every run
    that did)."""
    if lhs.same_as(rhs) or Analyzer().can_prove_equal(lhs, rhs):
        return lhs
    return tvm.tirx.Var(name, "int64")


def _unified_branch_type(lhs: Any, rhs: Any, base: str = "if") -> Any:
    """The type of ``if (c) { a } else { b }`` from the branches' result types, as v0.19's
    ``VisitExpr_(IfNode)`` unified them (type_infer.cc): dim by dim, field by field.
    Where one side's shape is unknown each dim is ``?``; parts that do not unify (a
    rank or an arity apart: refused before) are ``lhs``'s."""
    if isinstance(lhs, relax.TensorType) and isinstance(rhs, relax.TensorType):
        left, right = _shape_dims(lhs), _shape_dims(rhs)
        if left is not None and right is not None and len(left) == len(right):
            return relax.TensorType([_unify_branch_dim(a, b, f"{base}_d{i}")
                                     for i, (a, b) in enumerate(zip(left, right))], lhs.dtype)
        known = left if left is not None else right
        if known is not None and min(lhs.ndim, rhs.ndim) in (-1, len(known)):
            return _independent_dims(relax.TensorType(known, lhs.dtype), base)
        return lhs
    if isinstance(lhs, relax.TupleType) and isinstance(rhs, relax.TupleType) and \
            len(lhs.fields) == len(rhs.fields):
        return relax.TupleType([_unified_branch_type(a, b, f"{base}_{i}")
                                for i, (a, b) in enumerate(zip(lhs.fields, rhs.fields))])
    return lhs


def _refined_type(current: Any, precise: Any) -> Any:
    """``current`` (a value's Relax type) with each tensor whose shape Relax lost (only
    its rank left) taken from ``precise``, where that has the same dtype and rank;
    ``current`` itself when nothing is taken."""
    if isinstance(current, relax.TensorType):
        dims = _shape_dims(precise)
        if _shape_dims(current) is None and dims is not None and \
                str(current.dtype) == str(precise.dtype) and current.ndim in (-1, len(dims)):
            return precise
        return current
    if isinstance(current, relax.TupleType) and isinstance(precise, relax.TupleType) and \
            len(current.fields) == len(precise.fields):
        fields = [_refined_type(c, p) for c, p in zip(current.fields, precise.fields)]
        if any(not f.same_as(c) for f, c in zip(fields, current.fields)):
            return relax.TupleType(fields)
    return current


class ConvertContext:
    """What a converter may use besides its inputs and attributes."""

    def __init__(self, importer: "RelayImporter", call: ast.Call):
        self._importer = importer
        self.call = call

    @property
    def op_name(self) -> str:
        return self.call.op.name  # type: ignore[attr-defined]

    @property
    def location(self) -> Optional[str]:
        return _where(self.call)

    @property
    def bb(self) -> relax.BlockBuilder:
        return self._importer.bb

    def emit(self, expr: relax.Expr) -> relax.Expr:
        """Emit an intermediate Relax expression, naming the op on failure.

        Its calls are marked as *parts* of this Relay call (see :mod:`.provenance`).
        """
        part = getattr(self, "part_span", None)
        if part is not None:
            expr = provenance.with_spans(expr, part, part, self._emit_part)
        return self._importer.emit(expr, self.call)

    def _emit_part(self, expr: relax.Expr) -> relax.Expr:
        return self._importer.emit(expr, self.call)

    def error(self, message: str) -> ConversionError:
        return ConversionError(message, op=self.op_name, location=self.location)

    def unsupported_attr(self, name: str, value: Any) -> ConversionError:
        return self.error(f'"{name}={value}" is not supported')


# Annotations that pass a function value through unchanged (``on_device(%f, ...)``).
_FUNCTION_PASSTHROUGH_OPS = {"on_device"}


def _fresh_dim(base: str, dim_vars: Optional[dict]) -> tvm.tirx.Var:
    """A fresh var for a ``?`` dim, named ``base`` (``d<axis>``) unless that name is taken
    by another dim of the signature: then ``d0_1``, ``d0_2``... Independent ``?`` dims of
    different inputs are different vars *and* names, so nothing that reads a signature by
    names (input specs, the runtime's shared-dim check, FLOP formulas) ties them."""
    if dim_vars is None:
        return tvm.tirx.Var(base, "int64")
    taken = {str(v.name) for v in dim_vars.values()} | {k for k in dim_vars if isinstance(k, str)}
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    var = tvm.tirx.Var(name, "int64")
    dim_vars[("?", name)] = var  # not a name key: a named dim "d0" stays a dim of its own
    return var


# The largest element count of a tensor: byte sizes and strides are int64 in TVM.
_MAX_ELEMENTS = 2 ** 63 - 1
# The largest static dim: TVM 0.27 lowers static dims to int32 immediates (any op, on
# bmlib or the host, fails to build past it with "exceeds range of int32").
_MAX_DIM = 2 ** 31 - 1


def _check_tensor_type(ty: ast.TensorType, where: Optional[str]) -> None:
    """Refuse a tensor type no tensor can have, before TVM fails on it deep inside (or at
    run time): a negative dim, a dim past int32, more elements than int64 counts, a
    ``handle``/``void`` dtype, a vector dtype (``float32x4``: lanes the VM cannot pass
    in or out)."""
    static = [d for d in ty.shape if isinstance(d, int)]
    if any(d < 0 for d in static):
        raise ConversionError(f"Tensor[{tuple(ty.shape)}, {ty.dtype}]: a dim is negative",
                              location=where)
    if any(d > _MAX_DIM for d in static):
        raise ConversionError(f"Tensor[{tuple(ty.shape)}, {ty.dtype}]: a dim of 2**31 or "
                              "more (TVM builds static dims as int32 immediates)",
                              location=where)
    size = 1
    for d in static:
        size *= d
    if size > _MAX_ELEMENTS:
        raise ConversionError(f"Tensor[{tuple(ty.shape)}, {ty.dtype}]: more than 2**63 - 1 "
                              "elements", location=where)
    try:
        dtype = tvm.DataType(str(ty.dtype))
    except Exception:  # noqa: BLE001 - TVM's own dtype parser names no place
        raise ConversionError(f"unknown dtype {ty.dtype!r}", location=where) from None
    if dtype.type_code == _HANDLE_TYPE_CODE or not str(ty.dtype):
        raise ConversionError(f"dtype {str(ty.dtype) or 'void'!r} is not a tensor element "
                              "type", location=where)
    if dtype.lanes != 1:
        raise ConversionError(f"vector dtype {str(ty.dtype)!r} is not supported (use a "
                              "tensor with one more dim)", location=where)
    _check_computable_dtype(str(ty.dtype), where)


_HANDLE_TYPE_CODE = 3  # DLDataTypeCode kDLOpaqueHandle: "handle" and "void"

#: Element dtypes TVM 0.27's LLVM code generator and runtime compute with: whole bytes.
#: TVM parses more (``int7``, ``float33``, ``int128``, ``float4_e2m1fn``) and fails on them
#: deep in the build or only at run time ("dtype.bits % 8 == 0"); v0.19 failed in codegen.
_COMPUTABLE_DTYPES = frozenset(
    [f"{kind}{bits}" for kind in ("int", "uint") for bits in (8, 16, 32, 64)]
    + ["float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool"])


def _check_computable_dtype(dtype: str, where: Optional[str], op: Optional[str] = None) -> None:
    """Refuse a tensor of a dtype TVM names but cannot compute with, naming the place."""
    if dtype in _COMPUTABLE_DTYPES:
        return
    hint = " (Relay's bool was uint1: write bool)" if dtype == "uint1" else ""
    raise ConversionError(f"dtype {dtype!r}: TVM cannot compute with tensors of it{hint}; "
                          f"the element dtypes it computes: {', '.join(sorted(_COMPUTABLE_DTYPES))}",
                          op=op, location=where)


def _named_static_dims(annotation: Any, ty: Any):
    """``(name, static value)`` of each dim ``annotation`` (a Relay tensor type) names
    where the Relax type ``ty`` has a static dim."""
    if not isinstance(annotation, ast.TensorType) or not isinstance(ty, relax.TensorType) \
            or not isinstance(ty.shape, relax.ShapeExpr):
        return
    for axis, (dim, got) in enumerate(zip(annotation.shape, ty.shape.values)):
        name = dim if isinstance(dim, str) else getattr(dim, "name", None)
        value = static_dim(got)
        if not isinstance(dim, int) and name and value is not None:
            yield axis, str(name), value


def _check_named_dims(func: ast.Function, args: list) -> dict:
    """A dim named in ``func``'s parameter annotations (``%x: Tensor[(n, 2)]``) is one
    value across its arguments: v0.19's type solver (UnifyDim) bound it to the first
    static value it met and refused another one.  Left unchecked, two arguments of 1
    and 3 rows ran, broadcasting into a plausible result.  The values bound."""
    seen: dict[str, tuple[int, str]] = {}
    for var, arg in zip(func.params, args):
        for _, name, value in _named_static_dims(var.type_annotation, getattr(arg, "ty", None)):
            first = seen.setdefault(name, (value, var.name))
            if first[0] != value:
                raise ConversionError(
                    f"the arguments give the dim {name} of its parameters two values: "
                    f"{first[0]} (%{first[1]}) and {value} (%{var.name}); Relay's type "
                    "checker refused it", location=_where(var))
    return {name: value for name, (value, _) in seen.items()}


def _check_named_result(func: ast.Function, bound: dict, result_ty: Any, what: str) -> None:
    """The result against the dims its declared type names, as the arguments bound them
    (``@f(%x: Tensor[(n, 2)]) -> Tensor[(n, 2)]`` returning twice the rows of ``%x``):
    v0.19's type solver refused the program."""
    for axis, name, value in _named_static_dims(func.ret_type, result_ty):
        if name in bound and bound[name] != value:
            raise ConversionError(
                f"{what} has {value} entries on axis {axis}, where its declared type says "
                f"{name}, which the arguments make {bound[name]}; Relay's type checker "
                "refused it", location=_where(func))


def tensor_type(ty: ast.Type, where: Optional[str] = None,
                dim_vars: Optional[dict] = None) -> relax.Type:
    """Relax type of a Relay type; ``?`` dims become fresh symbolic int64 vars, named or
    symbolic dims (``te.var("n")``) one int64 var per name (shared through ``dim_vars``,
    e.g. by the parameters of one function, so that equal names are equal dims)."""
    if isinstance(ty, ast.TypeCall) and not ty.args and ty.name in _BARE_SCALAR_TYPES:
        ty = ast.TensorType((), _BARE_SCALAR_TYPES[ty.name])
    if isinstance(ty, ast.TensorType):
        _check_tensor_type(ty, where)
        dims = []
        for i, dim in enumerate(ty.shape):
            if isinstance(dim, int):
                dims.append(int(dim))
            elif dim is None:
                dims.append(_fresh_dim(f"d{i}", dim_vars))
            else:
                name = dim if isinstance(dim, str) else getattr(dim, "name", None)
                if not name:  # an unnamed symbolic dim is a ``?`` of its own
                    dims.append(_fresh_dim(f"d{i}", dim_vars))
                    continue
                cache = dim_vars if dim_vars is not None else {}
                dims.append(cache.setdefault(name, tvm.tirx.Var(str(name), "int64")))
        return relax.TensorType(dims, ty.dtype)
    if isinstance(ty, ast.TupleType):
        return relax.TupleType([tensor_type(f, where, dim_vars) for f in ty.fields])
    raise ConversionError(f"parameter type {type(ty).__name__} has no Relax equivalent",
                          location=where)


def signature_type(ty: ast.Type, where: Optional[str] = None) -> relax.Type:
    """Relax type of a Relay return type in a function signature: ``?`` dims are
    not bound by anything there, so a tensor with one keeps only its rank."""
    if isinstance(ty, ast.TypeCall) and not ty.args and ty.name in _BARE_SCALAR_TYPES:
        ty = ast.TensorType((), _BARE_SCALAR_TYPES[ty.name])
    if isinstance(ty, ast.TensorType):
        if any(d is None or isinstance(d, str) for d in ty.shape):
            return relax.TensorType(ndim=len(ty.shape), dtype=ty.dtype)
        return tensor_type(ty, where)
    if isinstance(ty, ast.TupleType):
        return relax.TupleType([signature_type(f, where) for f in ty.fields])
    return tensor_type(ty, where)


def _known_shape(expr: Any) -> Optional[bool]:
    """True/False for a tensor whose shape is (not) known; None for anything else."""
    ty = getattr(expr, "ty", None)
    if isinstance(ty, relax.TensorType):
        return ty.shape is not None
    return None


# Ops whose tensor operands broadcast against each other by NumPy's rules (Relay's
# BroadcastRel), so run-time dims on one axis must be unified.  Listed here rather than
# read off TOpPattern: v0.19 also marked broadcast_to(_like), expand_dims, tile, repeat
# and the axis-following nn.bias_add / nn.prelu as kBroadcast.
_MUTUALLY_BROADCAST = frozenset(
    "add subtract multiply divide floor_divide floor_mod mod trunc_divide trunc_mod power "
    "maximum minimum equal not_equal less less_equal greater greater_equal logical_and "
    "logical_or logical_xor bitwise_and bitwise_or bitwise_xor left_shift right_shift where "
    "qnn.add qnn.subtract qnn.mul".split())


#: Ops that take a value of any type, a tuple too (they annotate it, or move it).
_ANY_VALUE_OPS = frozenset({"on_device", "device_copy", "annotation.stop_fusion",
                            "annotation.checkpoint", "annotation.compiler_begin",
                            "annotation.compiler_end"})


def _check_tensor_operands(node: ast.Call, inputs: list) -> None:
    """Refuse a tuple given where the op takes a tensor, as Relay's type relations did
    (``unravel_index(%i, (3, 4))`` ended in a converter's "'TupleType' object has no
    attribute 'shape'")."""
    schema = op_schema(node.op.name)
    if schema is None or node.op.name in _ANY_VALUE_OPS:
        return
    problem = schema.tuple_given_for_tensor(
        [isinstance(getattr(v, "ty", None), relax.TupleType) for v in inputs])
    if problem is not None:
        raise ConversionError(problem, op=node.op.name, location=_where(node))


# Ops whose output dims over a run-time-sized input may come out negative, and why:
# ``(input + padding - window) // stride + 1``, or an axis ``nn.pad`` cuts.
_SHRINKING_OPS = (
    (re.compile(r"(qnn\.)?nn\.(conv[123]d|(max|avg|l2)_pool[123]d)"),
     "the window is larger than the (padded) input"),
    (re.compile(r"(dyn\.)?nn\.pad"), "its negative pad widths cut more than the axis has"),
)


def _shrink_reason(op_name: str) -> Optional[str]:
    return next((why for ops, why in _SHRINKING_OPS if ops.fullmatch(op_name)), None)


def _check_output_fits(dims: Optional[list], why: str, ctx) -> None:
    """A check compiled in that each of a conv's, pool's or pad's output ``dims`` (None:
    not known) over a run-time-sized input is not negative in the run: with a window
    larger than the (padded) input, TVM computed a negative extent and every op after
    it looped over nothing -- a sum after a 5x5 max pool of a 3x3 image returned zeros;
    a pad of negative widths allocated the negative size (``std::bad_alloc``, reported
    as out of memory).  Checked before the op runs (its output would be allocated with
    that extent)."""
    analyzer = Analyzer()
    for axis, dim in enumerate(dims or ()):
        if isinstance(dim, (tvm.tirx.IntImm, tvm.tirx.Var)):
            continue  # static (checked at import), or an input's own dim
        for var in tvm.tirx.analysis.undefined_vars(dim):  # dims are never negative
            analyzer.update(var, ConstIntBound(0, ConstIntBound.POS_INF), override=True)
        zero = tvm.tirx.const(0, str(dim.ty))
        if analyzer.can_prove(dim >= zero):
            continue
        emit_run_check(ctx.bb, dim >= zero, ctx.location, ctx.op_name,
                       f"its output has {{}} entries on axis {axis} in this run: {why}", dim)


def _check_result_dims(ty: Any, node: ast.Call) -> None:
    """Refuse an op whose result no tensor can be, as its attributes make it (a
    ``tile``/``nn.pad`` to a negative dim, an ``arange`` of 10**12 elements, a ``cast``
    to ``int7``): TVM
    would build it into a negative or wrapped allocation, or fold it into a numpy
    array of terabytes while building.  The limits are those of a parameter type."""
    for field in (ty.fields if isinstance(ty, relax.TupleType) else [ty]):
        if isinstance(field, relax.TensorType):
            _check_result_dtype(str(field.dtype), node)
        shape = getattr(field, "shape", None)
        if not isinstance(field, relax.TensorType) or shape is None \
                or not hasattr(shape, "values"):
            continue
        dims = [int(d) for d in shape.values if isinstance(d, tvm.tirx.IntImm)]
        problem = (f"a negative dim {min(dims)}" if any(d < 0 for d in dims) else
                   "a dim of 2**31 or more (TVM builds static dims as int32 immediates)"
                   if any(d > _MAX_DIM for d in dims) else None)
        if problem:
            shown = [dim_or_text(d) for d in shape.values]
            raise ConversionError(f"the result would be Tensor[{tuple(shown)}, "
                                  f"{field.dtype}]: {problem}; check the op's attributes",
                                  op=node.op.name, location=_where(node))


def _missing_attribute(exc: Exception, op_name: str, attrs: Mapping[str, Any]) -> Optional[str]:
    """The attribute a converter's ``KeyError`` asked for, when it is one of the op's
    attributes that the call does not carry (else None: some other lookup failed)."""
    key = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
    schema = op_schema(op_name)
    if isinstance(key, str) and key not in attrs and schema is not None and key in schema.fields:
        return key
    return None


def _check_result_dtype(dtype: str, node: ast.Call) -> None:
    """A result dtype TVM cannot compute with (``cast`` to ``int7``) is refused; so is an
    unknown one ("") that an op's own ``dtype="void"`` / ``""`` made (TVM failed later,
    in its build, with "PrimType cannot represent an opaque pointer")."""
    if dtype:
        _check_computable_dtype(dtype, _where(node), node.op.name)
        return
    given = node.attrs.get("dtype") if node.attrs is not None else None
    if isinstance(given, str) and given in ("", "void", "handle"):
        raise ConversionError(f"dtype={given!r} is not a tensor element type",
                              op=node.op.name, location=_where(node))


def _check_result_shape(value: Any, inputs: list, node: ast.Call) -> None:
    """Refuse an op whose result shape Relax cannot derive from known input shapes.

    ``add(%a: Tensor[(?, ?)], %b: Tensor[(?, ?)])``: Relay broadcast ``?`` dims at run
    time, but Relax cannot prove the two sets of dims compatible, keeps the result
    shape unknown and cannot legalize the op -- the build would die inside TVM
    (``CodeGenVM cannot emit R.add``).  Say so here, with the place.
    """
    if _known_shape(value) is not False:
        return
    known = [_known_shape(v) for v in inputs]
    if not any(k is not None for k in known) or False in known:
        return
    if not any(not isinstance(d, tvm.tirx.IntImm) for v, k in zip(inputs, known) if k
               for d in v.ty.shape.values):
        return  # static inputs: a data-dependent result shape is the op's own business
    shapes = ", ".join(str(list(v.ty.shape.values)) for v, k in zip(inputs, known) if k)
    raise ConversionError(
        f"Relax cannot infer the result shape from the input shapes {shapes} (each `?` "
        "is an independent dim); give the inputs static shapes (e.g. convert --inputs "
        "name=2,3:float32) or named dims (Tensor[(n, m), float32])",
        op=node.op.name, location=_where(node))


_OP_NODE = re.compile(r'ir\.Op\([^"]*name="([\w.]+)".*?support_level=\d+\)')


def _zeros_like_empty(ty: Any) -> Optional[relax.Expr]:
    """``zeros`` of a statically shaped tensor type with a dim of 0, a tuple of those for
    a tuple type of only such tensors; else None."""
    if isinstance(ty, relax.TupleType):
        fields = [_zeros_like_empty(f) for f in ty.fields]
        return relax.Tuple(fields) if fields and all(f is not None for f in fields) else None
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = ty.shape.values
    if not all(isinstance(d, tvm.tirx.IntImm) for d in dims) or \
            not any(int(d) == 0 for d in dims):
        return None
    return relax.op.zeros(ty.shape, ty.dtype)


def _inferred_global_return(module: ast.IRModule, func: ast.Function) -> Optional[ast.Type]:
    """The return type Relay's inference gives the global ``func`` (None if it is no
    global of ``module`` or the inference cannot type it); a type error it finds is
    raised."""
    from ..relay.type_infer import TypeInferencer, has_incomplete

    name = next((n for n, f in module.functions.items() if f is func), None)
    if name is None:
        return None
    try:
        ret = TypeInferencer(module).infer_global(name).ret
    except RelayTypeError as exc:
        if _INFERENCE_LIMITS.search(_without_place(exc)):
            return None
        raise  # ill-typed as Relay would have said (branches of two types)
    except BmlibError:
        return None
    return None if has_incomplete(ret) else ret


def _inferred_param_type(module: ast.IRModule, func: ast.Function, var: ast.Var) -> ast.Type:
    """The type Relay's inference gives an un-annotated input (from its uses), else an error."""
    from ..relay.type_infer import TypeInferencer

    ty = var.__dict__.get("_checked_type")
    if ty is None or isinstance(ty, ast.IncompleteType):
        try:
            TypeInferencer(module).infer(func)
        except BmlibError:
            pass
        ty = var.__dict__.get("_checked_type")
    if ty is None or isinstance(ty, ast.IncompleteType):
        raise ConversionError(f"input %{var.name} has no type annotation; "
                              "give its type in the text", location=_where(var))
    return ty


# RelayTypeError messages that say this project's type inference cannot type something
# (it lacks ADT match, references, higher-order and some relations), not that Relay
# would have refused it.
_INFERENCE_LIMITS = re.compile(r"cannot be inferred|cannot infer|no type relation|"
                               r"needs annotated types|has no Relax equivalent|not supported")


def _without_place(exc: ConversionError) -> str:
    """The message of ``exc`` without the ``location: op: `` prefix it was given."""
    message = str(exc)
    for prefix in (f"{exc.location}: " if exc.location else "", f"{exc.op}: " if exc.op else ""):
        if prefix and message.startswith(prefix):
            message = message[len(prefix):]
    return message


def _reachable_globals(module: ast.IRModule, entry: str) -> set[str]:
    """The globals ``@entry`` calls or names, directly or through others (itself too)."""
    seen, pending = {entry}, [entry]
    while pending:
        for node in post_order_list(module.functions[pending.pop()]):
            if isinstance(node, ast.GlobalVar) and node.name in module.functions and \
                    node.name not in seen:
                seen.add(node.name)
                pending.append(node.name)
    return seen


class RelayImporter:
    """Converts one Relay module's entry function into a Relax ``IRModule``."""

    def __init__(self, module: ast.IRModule, params: Optional[Mapping[str, np.ndarray]] = None,
                 observer: Optional[Callable[[ast.Expr, Any], None]] = None,
                 flatten_tuple_inputs: bool = False):
        self.module = module
        # A tuple-typed input of @main becomes one tensor parameter per field
        # (``%t`` -> ``t.0``, ``t.1.0``, ...), for runtimes that pass tensors only.
        self.flatten_tuple_inputs = flatten_tuple_inputs
        self.params = dict(params or {})
        self.bb = relax.BlockBuilder()
        self._active_globals: list[str] = []
        # Functions with control flow are built from plain binding blocks (a Relax
        # ``If`` may not sit in a dataflow block); ConvertToDataflow restores
        # dataflow blocks around the straight-line parts afterwards.
        self._structured = False
        self._emptied = False  # a result without elements was replaced by zeros
        # Parameters of the functions being built, innermost last: an ``If`` branch's scope
        # takes those of its function, so the symbolic dims they define (``?`` -> ``d0``)
        # stay defined in the branch (without them a branch's ``(d0, 6)`` was erased to
        # ``ndim=2`` and the ``If`` imported ill-formed).
        self._function_params: list[list] = []
        self._recursive_globals: dict[str, bool] = {}
        # Relay function (by id) -> (GlobalVar, free Relay vars) of its lifted Relax function.
        self._lifted: dict[int, tuple[relax.GlobalVar, list[ast.Var]]] = {}
        # Non-recursive global (by id) -> {call signature -> its Relax global function}.
        self._specialised: dict[int, dict[tuple, relax.GlobalVar]] = {}
        # Relax function name -> the type a call of it has in Relay's terms, where Relax
        # keeps only a rank (see _emit_call).
        self._result_types: dict[str, relax.Type] = {}
        # Names given to Relax functions so far; Relay globals' names are reserved for them.
        self._function_names: set[str] = set()
        self._reserved_names: set[str] = set(module.functions)
        # Called with (relay node, relax value) for every converted node; type
        # inference (relay.transform.InferType) reads Relax's types through it.
        self.observer = observer
        # The Relay view of every converted node, addressed by the spans of the
        # Relax calls (legacy checks and lowerings receive these).
        self.provenance = provenance.new_table()
        self.views = provenance.ViewBuilder(self.provenance)

    # ------------------------------------------------------------------ entry
    def run(self, entry: str = "main") -> tvm.IRModule:
        try:
            return self._run(entry)
        except BaseException:
            self._close_open_blocks()
            raise

    def _close_open_blocks(self) -> None:
        """End the blocks an import that failed midway left open: the builder's C++
        destructor would otherwise log "BlockBuilder destroyed with remaining blocks!"
        on stderr after the error (a line ``-q`` cannot silence, and no help)."""
        while True:
            try:
                self.bb._end_block()
            except Exception:  # noqa: BLE001 - TVM's "no block is being built": all closed
                return

    def _run(self, entry: str) -> tvm.IRModule:
        func = self.module[entry]
        self._function_names.add(entry)
        self.check_supported(func)
        relax_params, env = self._bind_params(func)
        if isinstance(func.ret_type, ast.FuncType):
            self._structured = True  # a local Relax function is not built in a dataflow block
        self._function_params.append(list(relax_params))
        with self.bb.function(entry, relax_params):
            if self._structured:
                result = self._convert(func.body, env)
                self._check_annotation(result, func.ret_type, f"the result of @{entry}", func)
                if isinstance(result, _FUNCTION_VALUES):
                    result = self._function_value(result, func)
                self.bb.emit_func_output(result)
            else:
                with self.bb.dataflow():
                    result = self._convert(func.body, env)
                    self._check_not_function(result, func)
                    self._check_annotation(result, func.ret_type, f"the result of @{entry}",
                                           func)
                    output = self.bb.emit_output(result)
                self.bb.emit_func_output(output)
        self._function_params.pop()
        self._check_unused_globals(entry)
        mod = self.bb.get()
        if isinstance(func.ret_type, ast.FuncType):
            # TVM's build expects local functions lifted (closures: make_closure).
            mod = relax.transform.LambdaLift()(mod)
        if self._structured:
            mod = lift_if_branches(mod)  # TVM 0.27's memory planner and If: see .branches
        if self._structured or self._lifted or self._specialised:
            mod = relax.transform.ConvertToDataflow(min_size=1)(mod)
        if self._emptied:
            # what the converters emitted for results replaced by zeros is dead: TVM's
            # build would still lower it (see _call)
            mod = relax.transform.DeadCodeElimination(
                [gv.name_hint for gv in mod.functions])(mod)
        return mod

    def _check_annotation(self, value: Any, declared: Optional[ast.Type], what: str,
                          where: ast.Expr) -> None:
        """Refuse a value that does not have its declared Relay type, as Relay's type
        checker did (see :mod:`.typecheck`)."""
        self._check(annotation_error(value, declared, what), where)

    def _let_value(self, value: Any, var: ast.Var) -> Any:
        """``value`` bound to ``let`` variable ``var``, checked against its annotation as
        v0.19's ``VisitExpr_(LetNode)`` unified them (type_infer.cc): a tensor or tuple by
        its Relax type; a function value against a function type by the annotations of
        its parameters and return type now, and at each call by its arguments and result
        (the value then carries the declared type)."""
        declared = var.type_annotation
        what = f"let %{var.name}"
        if not isinstance(declared, ast.FuncType):
            if isinstance(value, _FUNCTION_VALUES) and isinstance(
                    declared, (ast.TensorType, ast.TupleType)):
                raise ConversionError(f"{what} is declared {print_type(declared)} but is a "
                                      "function", location=_where(var))
            self._check_annotation(value, declared, what, var)
            return value
        if not isinstance(value, _FUNCTION_VALUES):
            if value_type(value) is not None:
                raise ConversionError(f"{what} is declared {print_type(declared)} but is "
                                      f"{type_text(value_type(value))}", location=_where(var))
            return value
        func = self._function_of(value)
        if func is None:
            return value  # an if choosing between functions, a tuple of them: not checked
        self._check_function_type(func, declared, what, var)
        return replace(value, declared=declared)

    def _function_of(self, value: Any) -> Optional[ast.Function]:
        """The Relay function a closure or global reference stands for."""
        if isinstance(value, _Closure):
            return value.func
        if isinstance(value, _GlobalRef):
            return self.module.functions.get(value.gvar.name)
        return None

    @staticmethod
    def _check_function_type(func: ast.Function, declared: ast.FuncType, what: str,
                             where: ast.Expr) -> None:
        """Refuse a function whose annotated signature does not unify with ``declared``
        (v0.19's unifier, :func:`~bmlib_relax.relay.type_infer.unify`)."""
        from ..relay.type_infer import TypeMismatch, unify

        own = ast.FuncType(tuple(p.type_annotation or ast.IncompleteType()
                                 for p in func.params),
                           func.ret_type or ast.IncompleteType())
        try:
            unify(declared, own)
        except TypeMismatch as exc:
            raise ConversionError(f"{what} is declared {print_type(declared)} but is "
                                  f"{print_type(own)}: {exc}", location=_where(where)) from None

    def _check_arguments(self, func: ast.Function, args: list) -> None:
        """Refuse arguments that do not have the types of ``func``'s annotated parameters."""
        for var, arg in zip(func.params, args):
            self._check_annotation(arg, var.type_annotation, f"parameter %{var.name}", var)
        _check_named_dims(func, args)

    @staticmethod
    def _check_not_function(result: Any, func: ast.Function) -> None:
        if isinstance(result, _FUNCTION_VALUES):
            raise ConversionError("the entry function returns a function value",
                                  location=_where(func))

    # ------------------------------------------------------------------ checks
    def check_supported(self, func: ast.Function) -> None:
        """Raise one error listing every unsupported op/construct reachable from ``func``."""
        missing_ops: list[tuple[str, Optional[str]]] = []
        constructs: list[tuple[str, Optional[str]]] = []
        seen_globals: set[str] = set()
        pending = [func]
        while pending:
            for node in post_order_list(pending.pop()):
                kind = _UNSUPPORTED_CONSTRUCTS.get(type(node))
                if isinstance(node, ast.If):
                    self._structured = True
                if kind is not None:
                    constructs.append((kind, _where(node)))
                elif isinstance(node, ast.Call) and isinstance(node.op, ast.Op):
                    if get_converter(node.op.name) is None:
                        missing_ops.append((node.op.name, _where(node)))
                elif isinstance(node, ast.GlobalVar) and node.name not in seen_globals:
                    seen_globals.add(node.name)
                    if node.name not in self.module.functions:
                        constructs.append((f"reference to undefined global @{node.name}",
                                           _where(node)))
                    else:
                        pending.append(self.module.functions[node.name])
        if missing_ops:
            raise UnsupportedOpError(missing_ops + constructs, what="op")
        if constructs:
            raise UnsupportedOpError(
                [(f"{k} (not supported by the importer)", w) for k, w in constructs],
                what="construct")

    def _check_unused_globals(self, entry: str) -> None:
        """Type-check the globals ``entry`` never calls, as v0.19's parser did
        (src/relay/parser/parser.cc ``ParseModule`` ends with ``infer_type(mod)``, over
        every global): an undefined global or an op Relay never had is refused, and so is
        a type error (:mod:`~bmlib_relax.relay.type_infer`).  What that inference cannot
        type (ADT ``match``, references, an op without a relation) is no error: v0.19
        typed it.  They are not imported (Relay's build ignored them too)."""
        reached = _reachable_globals(self.module, entry)
        unused = [name for name in self.module.functions if name not in reached]
        for name in unused:
            self._check_unknown_names(name)
        for name in unused:
            self._type_check_unused(name, entry)

    def _check_unknown_names(self, name: str) -> None:
        """Refuse ``@name`` if it names a global the module lacks or an op v0.19 never
        registered (:func:`~bmlib_relax.relay.pattern_op_attrs.is_relay_op`): its parser
        failed on both (an unbound global, ``Op::Get`` of an unregistered name)."""
        from ..relay.pattern_op_attrs import is_relay_op
        from ..relay.type_infer import TYPE_RELATIONS

        ops, constructs = [], []
        for node in post_order_list(self.module.functions[name]):
            if isinstance(node, ast.GlobalVar) and node.name not in self.module.functions:
                constructs.append((f"reference to undefined global @{node.name} in @{name}",
                                   _where(node)))
            elif isinstance(node, ast.Call) and isinstance(node.op, ast.Op) and \
                    not is_relay_op(node.op.name) and node.op.name not in TYPE_RELATIONS:
                ops.append((f"{node.op.name} in @{name}", _where(node)))
        if ops:
            raise UnsupportedOpError(ops + constructs, what="op")
        if constructs:
            raise UnsupportedOpError(constructs, what="construct")

    def _type_check_unused(self, name: str, entry: str) -> None:
        """Refuse ``@name`` if Relay's type inference finds it definitely ill-typed; its
        limitations (see :data:`_INFERENCE_LIMITS`) and failures are let through."""
        from ..relay.type_infer import TypeInferencer

        try:
            TypeInferencer(self.module).infer_global(name)
        except RelayTypeError as exc:
            message = _without_place(exc)
            if _INFERENCE_LIMITS.search(message):
                return
            raise RelayTypeError(f"in @{name} (a global @{entry} never calls, type-checked "
                                 f"as v0.19's parser did): {message}", op=exc.op,
                                 location=exc.location or _where(self.module[name])) from None
        except Exception:  # noqa: BLE001 - what the inference cannot type is no error
            return

    def _bind_params(self, func: ast.Function):
        env: dict[ast.Var, Any] = {}
        relax_params = []
        dim_vars: dict[str, Any] = {}  # one symbolic var per named dim, shared by the inputs
        names = {v.name for v in func.params}
        extra = sorted(set(self.params) - names)
        if extra:
            raise ParamError(
                f"parameter {extra[0]!r} is not an input of @main "
                f"(inputs: {', '.join(v.name for v in func.params)})", extra[0])
        for var in func.params:
            if var.name in self.params:
                value = self.params[var.name]
                check_param(var.name, value, var.type_annotation)
                env[var] = tensor_constant(value)
                self.views.bound_param(var, env[var], value)
                continue
            var_type = var.type_annotation
            if var_type is None or isinstance(var_type, ast.IncompleteType):
                var_type = _inferred_param_type(self.module, func, var)
            if self.flatten_tuple_inputs and isinstance(var_type, ast.TupleType):
                env[var] = self._flat_tuple_input(var.name, var_type, relax_params,
                                                  _where(var), dim_vars)
                continue
            rvar = relax.Var(var.name, tensor_type(var_type, _where(var), dim_vars))
            env[var] = rvar
            relax_params.append(rvar)
            self.views.leaf(var, rvar)
        return relax_params, env

    def _flat_tuple_input(self, name: str, ty: ast.Type, relax_params: list,
                          where: Optional[str], dim_vars: dict) -> relax.Expr:
        if isinstance(ty, ast.TupleType):
            return relax.Tuple([self._flat_tuple_input(f"{name}.{i}", f, relax_params, where,
                                                       dim_vars)
                                for i, f in enumerate(ty.fields)])
        rvar = relax.Var(name, tensor_type(ty, where, dim_vars))
        relax_params.append(rvar)
        return rvar

    # ------------------------------------------------------------------ emission
    def emit(self, expr: relax.Expr, node: object) -> relax.Expr:
        if isinstance(expr, (relax.Var, relax.Tuple, relax.ShapeExpr)) or \
                isinstance(expr, tvm.ir.expr.GenericConst):
            return expr
        try:
            return self.bb.emit(expr)
        except BmlibError:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM type inference errors
            op = getattr(getattr(node, "op", None), "name", type(node).__name__)
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            # TVM writes the op as its whole node: ir.Op(span=None, ..., name="relax.log", ...)
            first = _OP_NODE.sub(r"\1", first)
            raise ConversionError(f"Relax rejected the converted op: {first}", op=op,
                                  location=_where(node)) from None

    # ------------------------------------------------------------------ traversal
    def _operands(self, node: ast.Expr) -> tuple:
        if isinstance(node, ast.Call):
            if isinstance(node.op, ast.Op):
                return node.args[:-1] if _attrs_meta_arg(node) is not None else node.args
            if isinstance(node.op, ast.GlobalVar):
                return node.args
            return (node.op,) + node.args
        if isinstance(node, ast.Tuple):
            return node.fields
        if isinstance(node, ast.TupleGetItem):
            return (node.tuple_value,)
        return ()

    def _convert(self, root: ast.Expr, env: dict) -> Any:
        """Convert ``root`` under ``env`` (Relay var → Relax expr or closure)."""
        memo: dict[int, Any] = {}
        observer = self.observer

        def done(node: ast.Expr, value: Any) -> None:
            memo[id(node)] = value
            if observer is not None:
                observer(node, value)

        stack: list[tuple[ast.Expr, int]] = [(root, 0)]
        while stack:
            node, stage = stack.pop()
            if stage == 0 and id(node) in memo:
                continue
            if isinstance(node, ast.Var):
                done(node, self._lookup(node, env))
            elif isinstance(node, ast.Let):
                if stage == 0:
                    stack += [(node, 1), (node.value, 0)]
                elif stage == 1:
                    value = self._let_value(memo[id(node.value)], node.var)
                    if isinstance(value, _Closure) and value.func is node.value and \
                            any(v is node.var for v in free_vars(node.value)):
                        value = replace(value, self_var=node.var)
                    env[node.var] = value
                    stack += [(node, 2), (node.body, 0)]
                else:
                    done(node, memo[id(node.body)])
            elif isinstance(node, ast.Function):
                done(node, _Closure(node, env))
            elif isinstance(node, ast.If):
                if stage == 0:
                    stack += [(node, 1), (node.cond, 0)]
                else:
                    done(node, self._if(node, memo[id(node.cond)], env))
            elif isinstance(node, ast.GlobalVar):
                if node.name not in self.module.functions:
                    raise UnsupportedOpError([(f"reference to undefined global @{node.name}",
                                               _where(node))], what="construct")
                done(node, _GlobalRef(node))
            elif stage == 0:
                stack.append((node, 1))
                stack.extend((c, 0) for c in reversed(self._operands(node))
                             if id(c) not in memo)
            else:
                inputs = [memo[id(c)] for c in self._operands(node)]
                done(node, self._visit(node, inputs, env))
        return memo[id(root)]

    def _lookup(self, var: ast.Var, env: Mapping) -> Any:
        try:
            return env[var]
        except KeyError:
            raise ConversionError(f"free variable %{var.name} is not bound",
                                  location=_where(var)) from None

    def _visit(self, node: ast.Expr, inputs: list, env: dict) -> Any:
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.Tuple):
            if any(isinstance(v, _FUNCTION_VALUES) for v in inputs):
                return _FunctionTuple(tuple(inputs))
            value = relax.Tuple(inputs)
            self.views.tuple(node, inputs, value)
            return value
        if isinstance(node, ast.TupleGetItem):
            value = inputs[0]
            if isinstance(value, (relax.Tuple, _FunctionTuple)):
                self._check_index(node, len(value.fields))
                return value.fields[node.index]
            if isinstance(getattr(value, "ty", None), relax.TupleType):
                self._check_index(node, len(value.ty.fields))
            item = self.emit(relax.TupleGetItem(value, node.index), node)
            self.views.tuple_get_item(node, value, item)
            return item
        if isinstance(node, ast.Call):
            return self._call(node, inputs, env)
        if isinstance(node, ast.MetaRef):
            raise ConversionError(f"meta[{node.kind}][{node.index}] cannot be used as a value",
                                  location=_where(node))
        raise UnsupportedOpError([(type(node).__name__, _where(node))], what="construct")

    @staticmethod
    def _check_index(node: ast.TupleGetItem, size: int) -> None:
        """Refuse ``%t.5`` on a tuple of fewer fields (Relay's type checker did)."""
        if not 0 <= node.index < size:
            raise ConversionError(f"tuple index {node.index} is out of range for a tuple of "
                                  f"{size} field(s)", location=_where(node))

    def _constant(self, node: ast.Constant) -> relax.Expr:
        if node.data is None:
            raise ConversionError(
                f"meta[relay.Constant][{node.meta_index}] has no value: the text has no "
                "#[metadata] section; print the module with show_meta_data=True or pass the "
                "weights as parameters", op="constant", location=_where(node))
        data = node.data
        value = tensor_constant(data)
        self.views.leaf(node, value)
        return value

    def _call(self, node: ast.Call, inputs: list, env: dict) -> Any:
        op = node.op
        if isinstance(op, ast.Op):
            converter = get_converter(op.name)
            if converter is None:  # check_supported normally catches this first
                raise UnsupportedOpError([(op.name, _where(node))])
            if any(isinstance(v, _FUNCTION_VALUES) for v in inputs):
                if op.name in _FUNCTION_PASSTHROUGH_OPS:
                    return inputs[0]
                raise ConversionError("a function value is passed to an op",
                                      op=op.name, location=_where(node))
            ctx = ConvertContext(self, node)
            attrs = self._call_attrs(node)
            self._check_call(node, attrs, len(inputs))
            _check_tensor_operands(node, inputs)
            if op.name in _MUTUALLY_BROADCAST:
                inputs = self._unify_run_time_dims(inputs, node)
            view = self.views.call(node, attrs, inputs, self._operands(node))
            key = self.provenance.add(view)
            root_span = self.provenance.span(key, True, node.span)
            ctx.part_span = self.provenance.span(key, False, node.span)
            try:
                result = converter(inputs, attrs, ctx)
                why = _shrink_reason(op.name)
                if why is not None:
                    _check_output_fits(known_dims(ctx.bb.normalize(result)), why, ctx)
            except BmlibError:
                raise
            except Exception as exc:  # noqa: BLE001 - name the op for any converter failure
                missing = _missing_attribute(exc, op.name, attrs)
                if missing:  # ``clip`` without ``a_max``: KeyError's text was "'a_max'"
                    raise ConversionError(f"missing attribute {missing!r} (Relay required "
                                          "it)", op=op.name, location=_where(node)) from exc
                detail = str(exc).strip().splitlines()
                raise ConversionError(detail[-1] if detail else type(exc).__name__,
                                      op=op.name, location=_where(node)) from exc
            value = self.emit(provenance.with_spans(result, root_span, ctx.part_span,
                                                    ctx._emit_part), node)
            _check_result_dims(getattr(value, "ty", None), node)
            zeros = _zeros_like_empty(getattr(value, "ty", None))
            if zeros is not None:
                # A result without elements (a static dim of 0) is zeros of its shape:
                # nothing to compute, and TVM's lowering of several ops fails on such
                # tensors (split, cumsum, upsampling: "Divide by zero"; a transpose
                # through a reshape it cannot verify).  What the converter emitted is
                # dead, removed at the end of the import.
                value = self.emit(provenance.with_spans(zeros, root_span, ctx.part_span,
                                                        ctx._emit_part), node)
                self._emptied = True
            self.views.finish_call(view, value)
            _check_result_shape(value, inputs, node)
            return value
        if isinstance(op, ast.GlobalVar):
            return self._call_global(op, inputs, node)
        return self._apply(inputs[0], inputs[1:], node)

    def _unify_run_time_dims(self, inputs: list, node: ast.Call) -> list:
        """Operands of a broadcasting op whose dims on one axis are different
        run-time-sized dims (``add(%a: Tensor[(?, 8)], %b: Tensor[(?, 8)])``: each ``?``
        a var of its own) or a run-time-sized dim and a static one other than 1, made to
        share the static dim, else the first operand's var.

        Relay broadcast such dims when the op ran; Relax must know the result shape
        when it builds, and cannot relate two unknowns.  Each later operand is checked
        to be equal on that axis when the model runs (an ``assert_op`` naming the op
        and its place: a run that broadcasts a 1 against a longer run-time dim is
        refused there, not computed), then cast to the shared var."""
        shapes = [known_dims(v) for v in inputs]
        ranks = [len(s) for s in shapes if s is not None]
        if len(ranks) < 2 or all(isinstance(d, tvm.tirx.IntImm)
                                 for s in shapes if s is not None for d in s):
            return inputs
        groups = [[(k, len(s) - axis) for k, s in enumerate(shapes)
                   if s is not None and len(s) >= axis]
                  for axis in range(1, max(ranks) + 1)]  # right-aligned, as broadcasting is
        return unify_dims(self.bb, inputs, groups, _where(node), node.op.name,
                          BROADCAST_REASON, broadcast=True)

    @staticmethod
    def _check_call(node: ast.Call, attrs: ast.Attrs, num_args: int) -> None:
        """Refuse a call Relay's parser refused: an attribute its op does not have, a value
        of the wrong kind, a wrong argument count (see :mod:`~bmlib_relax.relay.op_schema`).
        Only the attributes written in the call are checked: those read from a
        ``meta[relay.attrs.*]`` node are every field TVM itself stored."""
        written = {key: attrs[key] for key in node.attrs}
        problem = check_call(node.op.name, written, num_args)
        if problem is not None:
            raise ConversionError(problem, op=node.op.name, location=_where(node))

    def _call_attrs(self, node: ast.Call) -> ast.Attrs:
        """The call's attributes with ``#[metadata]`` references resolved, and the C++
        defaults v0.19's printer left out filled in (``op_schema.TEXT_DEFAULTS``)."""
        return with_text_defaults(node.op.name, self._resolved_attrs(node))

    def _resolved_attrs(self, node: ast.Call) -> ast.Attrs:
        meta_arg = _attrs_meta_arg(node)
        has_meta_values = any(isinstance(v, ast.MetaRef) or box_refs(v)
                              for v in node.attrs.values())
        if meta_arg is None and not has_meta_values:
            return node.attrs
        objects = self.module.metadata.get("objects", {})
        values = dict(node.attrs)
        if meta_arg is not None:
            entries = objects.get(meta_arg.kind, [])
            if meta_arg.index >= len(entries):
                raise ConversionError(
                    f"meta[{meta_arg.kind}][{meta_arg.index}] has no value: the text has no "
                    "#[metadata] section", op=node.op.name, location=_where(node))
            raw = entries[meta_arg.index].get("attrs", {})
            values.update({k: _decode_meta_attr(v) for k, v in raw.items()})
        for key, value in node.attrs.items():
            resolved = _resolve_meta_values(value, objects)
            missing = box_refs(resolved)
            if missing:
                why = self.module.metadata.get("unrecovered_boxes", {}).get(_where(node))
                raise ConversionError(
                    f"{key}={printed_ref(value)} has no value: the text has no #[metadata] "
                    f"section" + (f" and the printed type does not give it: {why}" if why else ""),
                    op=node.op.name, location=_where(node))
            values[key] = resolved
        return ast.Attrs(values)

    def _inline(self, func: ast.Function, args: list, env: dict, node: ast.Call,
                name: str = "the function") -> Any:
        """``func``'s body on ``args``; its result checked against the declared return
        type, as v0.19's ``VisitExpr_(FunctionNode)`` unified the two (type_infer.cc)."""
        if len(args) != len(func.params):
            raise ConversionError(f"function expects {len(func.params)} arguments, "
                                  f"got {len(args)}", location=_where(node))
        self._check_arguments(func, args)
        env.update(zip(func.params, args))
        result = self._convert(func.body, env)
        self._check_annotation(result, func.ret_type, f"the result of {name}", func)
        _check_named_result(func, _check_named_dims(func, args), getattr(result, "ty", None),
                            f"the result of {name}")
        return result

    # ------------------------------------------------------------------ functions
    def _function_value(self, fn: Any, where: ast.Expr) -> relax.Expr:
        """A Relay function value returned by the entry function, as a Relax value the
        VM returns as a closure: a global function's GlobalVar (eta-expanded ``@f``),
        or a local Relax function capturing its free variables (lifted by TVM)."""
        if isinstance(fn, _GlobalRef):
            return self._global_function(fn.gvar.name, where)
        if isinstance(fn, _Closure) and fn.self_var is None:
            func = fn.func
            params = [relax.Var(p.name, self._annotated(p)) for p in func.params]
            env = dict(fn.env)
            env.update(zip(func.params, params))
            seq, result = self._scoped(lambda: self._convert(func.body, env), params)
            if seq is None:
                raise ConversionError("a function returning a function value is not supported",
                                      location=_where(func))
            ret = signature_type(func.ret_type, _where(func)) if func.ret_type is not None \
                else None
            return self.emit(relax.Function(params, seq, ret, is_pure=True), func)
        raise ConversionError("the entry function returns a function value that has no Relax "
                              "counterpart (a recursive or conditionally chosen function)",
                              location=_where(where))

    @staticmethod
    def _annotated(var: ast.Var) -> relax.Type:
        if var.type_annotation is None:
            raise ConversionError(f"parameter %{var.name} of a returned function has no type "
                                  "annotation; give its type", location=_where(var))
        return tensor_type(var.type_annotation, _where(var))

    def _global_function(self, name: str, where: ast.Expr) -> relax.GlobalVar:
        """``@name`` used as a value: its Relax global function (typed by its annotations)."""
        func = self.module[name]
        if self._is_recursive_global(name):
            params = [relax.Var(p.name, self._annotated(p)) for p in func.params]
            key = id(func)
            if key not in self._lifted:
                gv = self._declare(name, params, func, where)
                self._lifted[key] = (gv, [])
                env = dict(zip(func.params, params))
                self._define(gv, params, lambda: self._convert(func.body, env), func)
            return self._lifted[key][0]
        params = [relax.Var(p.name, self._annotated(p)) for p in func.params]
        gv = self._specialisation(name, func, params, where)
        if gv is None:
            raise ConversionError(f"@{name} returns a function value: used as a value it "
                                  "has no Relax counterpart", location=_where(where))
        return gv

    def _apply(self, fn: Any, args: list, node: ast.Call) -> Any:
        """Call a function value: inline it, or call its lifted Relax function."""
        if isinstance(fn, _GlobalRef):
            if fn.declared is not None:
                return self._call_declared(fn, args, node)
            return self._call_global(fn.gvar, args, node)
        if isinstance(fn, _CondClosure):
            then = self._scoped(lambda: self._apply(fn.then_fn, args, node))
            other = self._scoped(lambda: self._apply(fn.else_fn, args, node))
            return self._emit_if(fn.cond, then, other, node)
        if not isinstance(fn, _Closure):
            raise ConversionError("call of a value that is not a function",
                                  location=_where(node))
        if fn.declared is not None:
            return self._call_declared(fn, args, node)
        if fn.self_var is not None:
            return self._call_lifted(fn, args, node)
        return self._inline(fn.func, args, dict(fn.env), node)

    def _call_declared(self, fn: Any, args: list, node: ast.Call) -> Any:
        """Call a function value bound to a ``let`` variable of a function type: its
        arguments and result must have the declared types (v0.19 unified the variable's
        type with the function's, so an un-annotated parameter or return type took the
        declared one)."""
        declared = fn.declared
        name = f"%{node.op.name}" if isinstance(node.op, ast.Var) else "the function"
        if len(args) != len(declared.params):
            raise ConversionError(f"{name} expects {len(declared.params)} arguments, got "
                                  f"{len(args)}", location=_where(node))
        for i, (arg, ty) in enumerate(zip(args, declared.params)):
            self._check_annotation(arg, ty, f"argument {i} of {name}", node)
        if isinstance(fn, _GlobalRef):
            result = self._call_global(fn.gvar, args, node)
        elif fn.self_var is not None:
            result = self._call_lifted(fn, args, node)
        else:
            result = self._inline(fn.func, args, dict(fn.env), node)
        self._check_annotation(result, declared.ret, f"the result of {name}", node)
        return result

    def _call_global(self, gvar: ast.GlobalVar, args: list, node: ast.Call) -> Any:
        """A call of a global function: a call of its Relax global function (of the same
        name; one per call signature when its parameters are not fully typed).

        Inlined instead, as Relay's own passes would: a global marked ``Inline=1``, and
        one that takes or returns a function value (the function is static here; Relax
        global functions take tensors).
        """
        func = self.module[gvar.name]
        if self._inlines(func, args):
            return self._inline_global(gvar, args, node)
        if not self._is_recursive_global(gvar.name):
            params = self._signature_params(func, args, node, specialise=True)
            gv = self._specialisation(gvar.name, func, params, node)
            if gv is None:
                return self._inline_global(gvar, args, node)
            flat_args: list = []
            for arg in args:
                self._flatten_value(arg, flat_args, node)
            return self._emit_call(gv, flat_args, node)
        key = id(func)
        if key not in self._lifted:
            params = self._signature_params(func, args, node)
            gv = self._declare(gvar.name, params, func, node)
            self._lifted[key] = (gv, [])
            env = dict(zip(func.params, params))
            self._define(gv, params, lambda: self._convert(func.body, env), func)
        return self._emit_call(self._lifted[key][0], args, node)

    @staticmethod
    def _inlines(func: ast.Function, args: list) -> bool:
        """Whether a call of the global ``func`` with ``args`` is inlined (see _call_global)."""
        inline = func.attrs.get("Inline") if func.attrs else None
        if getattr(inline, "value", inline) in (1, True, "1"):
            return True
        if isinstance(func.ret_type, ast.FuncType):
            return True
        return any(isinstance(a, _FUNCTION_VALUES) for a in args)

    def _specialisation(self, name: str, func: ast.Function, params: list,
                        where: ast.Expr) -> Optional[relax.GlobalVar]:
        """The Relax global function of the non-recursive global ``@name`` for the
        parameter types of ``params``, built on first use.

        The first signature keeps the Relay name; a polymorphic or partially typed
        global called with other argument types gets one more function per
        signature, named ``<name>__<signature>`` (``id__int32_5x7``).  ``None`` for a
        global whose body turns out to return a function value (it is inlined then).
        """
        symbols: dict = {}
        signature = tuple(_type_key(p.ty, symbols) for p in params)
        versions = self._specialised.setdefault(id(func), {})
        if signature in versions:
            return versions[signature]
        fname = name if not versions else f"{name}__{_mangle(signature)}"
        env: dict[ast.Var, Any] = {}
        flat_params: list = []
        for var, param in zip(func.params, params):
            # A tuple parameter is one tensor parameter per field (``t.0``, ``t.1``...):
            # partitions inside the function then take tensors, as they did inlined.
            env[var] = _flat_param(param.name, param.ty, flat_params)
            self.views.leaf(var, env[var])
        self._active_globals.append(name)
        try:
            seq, result = self._scoped(lambda: self._convert(func.body, env), flat_params,
                                       discard_function_result=True)
        finally:
            self._active_globals.pop()
        if seq is None:
            return None  # it returns a function value (no return type said so): inline it
        _check_named_result(func, _check_named_dims(func, params), seq.ty,
                            f"the result of @{name}")
        ret = None
        if _concrete_type(func.ret_type):
            ret = signature_type(func.ret_type, _where(func))
            if not _static_key(_type_key(seq.ty)):
                ret = None  # the body's type is less precise: keep it (as inlined)
            elif _type_key(ret) != _type_key(seq.ty):
                raise ConversionError(
                    f"global function @{name} is declared to return {ret} but its body "
                    f"returns {seq.ty}", location=_where(func))
        try:
            relax_func = relax.Function(flat_params, seq, ret, is_pure=True)
            gv = self.bb.add_func(relax_func, self._function_name(fname, own=True))
        except Exception as exc:  # noqa: BLE001 - TVM's type check of the return type
            raise ConversionError(f"global function @{name}: Relax rejected its body: "
                                  f"{str(exc).strip().splitlines()[-1]}",
                                  location=_where(func)) from None
        versions[signature] = gv
        if value_type(result) is not None:
            self._result_types[gv.name_hint] = value_type(result)
        return gv

    def _flatten_value(self, value: Any, out: list, node: ast.Expr) -> None:
        """The tensors of ``value`` in field order (projections emitted as needed), as
        :func:`_flat_param` made the parameters."""
        if isinstance(value, relax.Tuple):
            for item in value.fields:
                self._flatten_value(item, out, node)
            return
        ty = getattr(value, "ty", None)
        if not isinstance(ty, relax.TupleType):
            out.append(value)
            return
        for index in range(len(ty.fields)):
            item = value.fields[index] if isinstance(value, relax.Tuple) else \
                self.emit(relax.TupleGetItem(value, index), node)
            self._flatten_value(item, out, node)

    def _function_name(self, name: str, own: bool = False) -> str:
        """A name no other Relax function has: the Relay globals' names are kept for
        their own functions (``own``), lifted local functions get another."""
        candidate, index = name, 0
        while candidate in self._function_names or \
                (not own and candidate in self._reserved_names):
            index += 1
            candidate = f"{name}_{index}"
        self._function_names.add(candidate)
        return candidate

    def _is_recursive_global(self, name: str) -> bool:
        """Whether ``@name`` can reach a call of itself through other globals."""
        known = self._recursive_globals.get(name)
        if known is not None:
            return known
        seen: set[str] = set()
        pending = [name]
        found = False
        while pending and not found:
            current = pending.pop()
            for n in post_order_list(self.module[current]):
                if isinstance(n, ast.GlobalVar) and n.name in self.module.functions:
                    if n.name == name:
                        found = True
                        break
                    if n.name not in seen:
                        seen.add(n.name)
                        pending.append(n.name)
        self._recursive_globals[name] = found
        return found

    def _call_lifted(self, closure: _Closure, args: list, node: ast.Call) -> Any:
        """Call a let-bound recursive function, lifted to a private Relax global whose
        trailing parameters are its free variables (the same at every call)."""
        func = closure.func
        key = id(func)
        if key not in self._lifted:
            free = [v for v in free_vars(func) if v is not closure.self_var]
            free_values = [self._lookup(v, closure.env) for v in free]
            for var, value in zip(free, free_values):
                if isinstance(value, _FUNCTION_VALUES):
                    raise UnsupportedOpError(
                        [(f"recursive function capturing the function %{var.name}",
                          _where(func))], what="construct")
            # Typed by the first call where the annotation leaves dims free (a loop's
            # state of a free batch): its dims and the captured values' are then the same
            # function-own vars, as Relay's type inference unified them (`add(%acc, %x)`
            # of two "independent" batch dims could not be typed otherwise).
            fresh: list = []
            params = self._signature_params(func, args, node, specialise=True, fresh=fresh,
                                            run_time_dims=True)
            params += [relax.Var(v.name, _fresh_dims(self._type_of(value, v), fresh))
                       for v, value in zip(free, free_values)]
            name = closure.self_var.name if closure.self_var is not None else "lifted"
            # a return type the function lacks, its let variable's annotation may give
            declared_ret = closure.declared.ret if closure.declared is not None else None
            gv = self._declare(name, params, func, node, declared_ret)
            self._lifted[key] = (gv, free)
            env = dict(closure.env)
            env.update(zip(list(func.params) + free, params))
            env[closure.self_var] = _Closure(func, env, closure.self_var)
            self._define(gv, params, lambda: self._convert(func.body, env), func, declared_ret)
        gv, free = self._lifted[key]
        return self._emit_call(gv, list(args) + [self._lookup(v, closure.env) for v in free],
                               node)

    def _signature_params(self, func: ast.Function, args: list, node: ast.Call,
                          specialise: bool = False, fresh: Optional[list] = None,
                          run_time_dims: bool = False) -> list:
        """Relax parameters for a call of ``func`` with ``args``: typed by the annotation,
        else by the argument.  With ``specialise``, a parameter whose annotation is not
        fully known (a type variable, ``?`` dims) takes the argument's type too, so that
        the function is specialised to its call (fresh symbolic dims, never the caller's);
        with ``run_time_dims`` (a loop, whose later calls may pass other lengths) a ``?``
        of the annotation stays a dim of its own even where the first argument's is
        static."""
        if len(args) != len(func.params):
            raise ConversionError(f"function expects {len(func.params)} arguments, "
                                  f"got {len(args)}", location=_where(node))
        self._check_arguments(func, args)
        params = []
        fresh = [] if fresh is None else fresh  # the caller's symbolic dims -> this function's
        named: dict = {}  # a named dim is one var across the signature, as in @main's
        for var, arg in zip(func.params, args):
            annotation = var.type_annotation
            if annotation is not None and not isinstance(annotation, ast.IncompleteType) and \
                    (not specialise or _concrete_type(annotation)):
                ty = tensor_type(annotation, _where(var), named)
            elif specialise:
                ty = _fresh_dims(self._type_of(arg, var), fresh)
                if run_time_dims:
                    ty = _run_time_where_annotated(ty, annotation, var.name)
            else:
                ty = self._type_of(arg, var)
            params.append(relax.Var(var.name, ty))
        return params

    @staticmethod
    def _type_of(value: Any, var: ast.Var) -> relax.Type:
        if isinstance(value, _FUNCTION_VALUES):
            raise ConversionError(f"%{var.name} takes a function value: a loop or recursive "
                                  "function here takes tensors and tuples only (call the "
                                  "function inside it instead)", location=_where(var))
        if getattr(value, "ty", None) is None:
            raise ConversionError(f"%{var.name} has no Relax type here; annotate its type",
                                  location=_where(var))
        return value.ty

    def _declare(self, name: str, params: list, func: ast.Function,
                 node: ast.Expr, declared_ret: Optional[ast.Type] = None) -> relax.GlobalVar:
        """Add an empty private function with the signature, so that calls (also the
        recursive ones inside its own body) can be emitted before its body exists."""
        ret = self._return_type(name, params, func, declared_ret)
        # The name attribute keeps two placeholders of one signature apart: add_func reuses
        # a structurally equal function, so mutually recursive @even/@odd (or two nested
        # loops) got one GlobalVar, and one body overwrote the other.
        empty = relax.Function.create_empty(params, ret).with_attr("bmlib.declared", name)
        own = name in self._reserved_names and self.module.functions.get(name) is func
        gv = self.bb.add_func(empty, self._function_name(name, own=own))
        self._result_types[gv.name_hint] = self._return_type(name, params, func,
                                                             declared_ret, precise=True)
        return gv

    def _return_type(self, name: str, params: list, func: ast.Function,
                     declared_ret: Optional[ast.Type] = None,
                     precise: bool = False) -> relax.Type:
        """The Relax return type of a recursive function: its annotation, else the one its
        ``let`` variable's function type declares (``declared_ret``; v0.19 unified the
        two); without either, a loop's as ``relay.loops.while_loop`` builds it (``if (c)
        { %loop(...) } else { (its parameters) }``, never annotated): the tuple of its
        parameters' types; else, for a global, the return type Relay's inference gives it
        (``if (equal(%n, 0)) { 1 } else { multiply(%n, @fact(...)) }``: its base case's).
        With ``precise``, the type of a call of it as Relay had it: a ``?`` dim a var (of
        its own), not a rank only."""
        module = self.module
        def declared(ty: ast.Type) -> relax.Type:
            return tensor_type(ty, _where(func), {}) if precise else \
                signature_type(ty, _where(func))

        if func.ret_type is not None:
            return declared(func.ret_type)
        if declared_ret is not None and not isinstance(declared_ret, ast.IncompleteType):
            return declared(declared_ret)
        body = func.body
        while isinstance(body, ast.Let):
            body = body.body
        if isinstance(body, ast.If):
            own = list(func.params)
            for branch in (body.false_branch, body.true_branch):
                if isinstance(branch, ast.Tuple) and len(branch.fields) == len(own) and \
                        all(f is p for f, p in zip(branch.fields, own)):
                    return relax.TupleType([
                        _independent_dims(p.ty, p.name) if precise
                        else _final_state_type(p.ty) for p in params[:len(own)]])
        inferred = _inferred_global_return(module, func)
        if inferred is not None:
            return declared(inferred)
        raise ConversionError(
            f"recursive function %{name} has no return type; annotate it "
            "(fn (...) -> T { ... })", location=_where(func))

    def _define(self, gv: relax.GlobalVar, params: list, build: Callable[[], Any],
                func: ast.Function, declared_ret: Optional[ast.Type] = None) -> None:
        seq, result = self._scoped(build, params)
        if isinstance(result, _FUNCTION_VALUES):
            raise ConversionError("a recursive function returning a function value is not "
                                  "supported", location=_where(func))
        ret = self._return_type(gv.name_hint, params, func, declared_ret)
        self.bb.update_func(gv, relax.Function(params, seq, ret, is_pure=True))

    def _emit_call(self, gv: relax.GlobalVar, args: list, node: ast.Call) -> Any:
        for arg in args:
            if isinstance(arg, _FUNCTION_VALUES):
                raise ConversionError("a function value passed to a recursive function "
                                      "is not supported", location=_where(node))
        call = self.emit(relax.Call(gv, args), node)
        if isinstance(call.ty, relax.TupleType) and not call.ty.fields:
            # ``()`` itself: TVM 0.27's VM keeps a unit result in its void register, and
            # reading it back (into a tuple of results) failed with an InternalError
            return relax.Tuple([])
        precise = self._result_types.get(gv.name_hint)
        if precise is None:
            return call
        # A function's Relax return type keeps only the rank of a tensor whose dims are
        # not its parameters' (a loop's ``-> Tensor[(?, 3)]``, an ``if`` of run-time
        # rows it returns); v0.19 typed the call as the function was typed, static dims
        # and all.  Each call takes new vars for the others.
        return self._refine(call, _renamed_dims(precise, gv.name_hint), node)

    def _scoped(self, build: Callable[[], Any], params: Optional[list] = None,
                discard_function_result: bool = False):
        """Run ``build`` in a fresh binding block; its bindings and result as a SeqExpr.

        A function-valued result gives ``(None, result)``; with bindings that is an
        error, unless ``discard_function_result`` (the bindings are then dropped)."""
        function_scope = params is not None
        if function_scope:
            self._function_params.append(list(params))
        elif self._function_params:
            params = self._function_params[-1]
        self.bb.begin_scope(params)
        self.bb._begin_binding_block()
        ended = False
        try:
            result = build()
            block = self.bb._end_block()
            ended = True
            if isinstance(result, _FUNCTION_VALUES):
                if block.bindings and not discard_function_result:
                    raise ConversionError("a branch that computes values and returns a "
                                          "function is not supported")
                return None, result
            seq = self.bb.normalize(relax.SeqExpr([block], result))
            return seq, result
        finally:
            if not ended:
                self.bb._end_block()
            self.bb.end_scope()
            if function_scope:
                self._function_params.pop()

    def _if(self, node: ast.If, cond: Any, env: dict) -> Any:
        """``if (c) {..} else {..}`` -> ``relax.If`` with SeqExpr branches."""
        if isinstance(cond, _FUNCTION_VALUES):
            raise ConversionError("if condition is a function", location=_where(node))
        self._check(condition_error(cond), node.cond)
        then_seq, then_value = self._scoped(lambda: self._convert(node.true_branch, dict(env)))
        else_seq, else_value = self._scoped(lambda: self._convert(node.false_branch, dict(env)))
        if then_seq is None or else_seq is None:
            if then_seq is None and else_seq is None:
                return _CondClosure(cond, then_value, else_value)
            raise ConversionError("if/else: one branch is a function, the other a value",
                                  location=_where(node))
        self._check(branch_error(then_seq, else_seq), node)
        return self._emit_if(cond, (then_seq, then_value), (else_seq, else_value), node)

    def _emit_if(self, cond: relax.Expr, then: tuple, other: tuple, node: ast.Expr) -> Any:
        """Emit ``If(cond, then, other)`` (each a ``(SeqExpr, result)`` pair), typed as
        v0.19 typed the ``if``: its branches' types unified (``VisitExpr_(IfNode)``,
        type_infer.cc).  Relax keeps only the rank of a tensor whose dims differ between
        the branches (``(d0, 3)`` and ``(d0 * 2, 3)``); Relay's ``Tensor[(?, 3)]`` kept
        the 3, and the ops after the ``if`` need it (else TVM cannot lower them).  The
        result is cast to the unified type: a new var for each ``?``."""
        value = self.emit(relax.If(cond, then[0], other[0]), node)
        then_ty, other_ty = value_type(then[1]), value_type(other[1])
        if then_ty is None or other_ty is None:
            return value
        return self._refine(value, _unified_branch_type(then_ty, other_ty), node)

    def _refine(self, value: Any, precise: Any, node: ast.Expr) -> Any:
        """``value`` cast (``match_cast``) to ``precise`` where its Relax type lost a
        tensor's shape (see :func:`_refined_type`); ``value`` itself otherwise.  The vars
        of ``precise``'s unknown dims must be new: the cast defines them."""
        current = getattr(value, "ty", None)
        if current is None or precise is None:
            return value
        refined = _refined_type(current, precise)
        if refined.same_as(current):
            return value
        try:
            return self.bb.match_cast(value, refined)
        except Exception as exc:  # noqa: BLE001 - TVM's check of the cast, named by the node
            detail = str(exc).strip().splitlines()
            raise ConversionError("Relax rejected the type of the result: "
                                  f"{detail[-1] if detail else type(exc).__name__}",
                                  location=_where(node)) from None

    @staticmethod
    def _check(message: Optional[str], node: ast.Expr) -> None:
        """Raise ``message`` (a failed type check) as a ConversionError at ``node``."""
        if message is not None:
            raise ConversionError(message, location=_where(node))

    def _inline_global(self, gvar: ast.GlobalVar, args: list, node: ast.Call) -> Any:
        if gvar.name in self._active_globals:
            raise UnsupportedOpError([(f"recursive call to @{gvar.name}", _where(node))],
                                     what="construct")
        self._active_globals.append(gvar.name)
        try:
            return self._inline(self.module[gvar.name], args, {}, node, f"@{gvar.name}")
        finally:
            self._active_globals.pop()
