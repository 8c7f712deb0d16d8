"""The checks of Relay's type checker that the import itself must make.

Relay refused a program whose values disagree with its type annotations (``@main``'s
return type, a ``let`` variable's type, a closure's parameter types), an ``if`` whose
condition is not a ``Tensor[(), bool]`` or whose branches have different types.  Relax
would compile most of these and return a value of another type, or pick a branch from
a tensor's first element: the importer checks each such place against the Relax types
of the converted values, with these helpers.  A ``?`` or symbolic dim (on either side)
unifies with any dim, as in Relay; annotations that are not tensors or tuples (type
variables, function types, ``_``) are not checked.
"""
from __future__ import annotations

from typing import Any, Optional

import tvm
from tvm import relax

from ..relay import ast
from ..relay.printer import print_type

# Bare scalar type names Relay's parser read as dtypes (TVM's ``String2DLDataType``
# gives them 32 bits): ``fn (%n: int) -> int``.
BARE_SCALAR_TYPES = {"int": "int32", "uint": "uint32", "float": "float32"}


def value_type(value: Any) -> Optional[relax.Type]:
    """The Relax type of a converted value (a literal ``relax.Tuple`` from its fields);
    ``None`` for a function value or an untyped expression."""
    if isinstance(value, relax.Tuple):
        fields = [value_type(f) for f in value.fields]
        return None if any(f is None for f in fields) else relax.TupleType(fields)
    ty = getattr(value, "ty", None)
    return ty if isinstance(ty, (relax.TensorType, relax.TupleType)) else None


def _dims(ty: relax.TensorType) -> Optional[list]:
    """Static dims as ints, symbolic ones as None; ``None`` when the shape is unknown."""
    if ty.shape is None:
        return None
    return [int(d.value) if isinstance(d, tvm.tirx.IntImm) else None for d in ty.shape.values]


def type_text(ty: Optional[relax.Type]) -> str:
    """A Relax type as Relay writes it (``Tensor[(2, 3), float32]``), for messages."""
    if isinstance(ty, relax.TensorType):
        dims = _dims(ty)
        if dims is None:
            return f"Tensor[rank {ty.ndim}, {ty.dtype}]" if ty.ndim >= 0 else \
                f"Tensor[{ty.dtype}]"
        text = ", ".join("?" if d is None else str(d) for d in dims)
        return f"Tensor[({text}), {ty.dtype}]"
    if isinstance(ty, relax.TupleType):
        return "(" + ", ".join(type_text(f) for f in ty.fields) + ")"
    return str(ty)


def _tensor_disagrees(ty: relax.TensorType, shape: tuple, dtype: str) -> bool:
    if str(ty.dtype) != dtype or (ty.ndim >= 0 and ty.ndim != len(shape)):
        return True
    dims = _dims(ty)
    return dims is not None and any(isinstance(want, int) and got is not None and got != want
                                    for got, want in zip(dims, shape))


def disagrees(ty: Optional[relax.Type], declared: Optional[ast.Type]) -> bool:
    """Whether a value of Relax type ``ty`` cannot have the Relay type ``declared``."""
    if ty is None or declared is None:
        return False
    if isinstance(declared, ast.TypeCall) and not declared.args and \
            declared.name in BARE_SCALAR_TYPES:
        declared = ast.TensorType((), BARE_SCALAR_TYPES[declared.name])
    if isinstance(declared, ast.TensorType):
        return not isinstance(ty, relax.TensorType) or \
            _tensor_disagrees(ty, tuple(declared.shape), str(declared.dtype))
    if isinstance(declared, ast.TupleType):
        return not isinstance(ty, relax.TupleType) or len(ty.fields) != len(declared.fields) \
            or any(disagrees(f, d) for f, d in zip(ty.fields, declared.fields))
    return False


def _is_unit(value: Any) -> bool:
    """The empty tuple ``()``: TVM's own parser tests bind it to any annotation
    (``let %_: int8 = (); ()``); it holds no data, so no wrong value can follow."""
    return isinstance(value, relax.Tuple) and not value.fields


def annotation_error(value: Any, declared: Optional[ast.Type], what: str) -> Optional[str]:
    """The message for a value that does not have its declared type, else None."""
    ty = value_type(value)
    if _is_unit(value) or not disagrees(ty, declared):
        return None
    return f"{what} is declared {print_type(declared)} but is {type_text(ty)}"


def _same(a: Optional[relax.Type], b: Optional[relax.Type]) -> bool:
    """Whether two Relax types can be the same type (unknown or symbolic dims unify)."""
    if a is None or b is None:
        return True
    if isinstance(a, relax.TensorType) and isinstance(b, relax.TensorType):
        if str(a.dtype) != str(b.dtype) or (a.ndim >= 0 and b.ndim >= 0 and a.ndim != b.ndim):
            return False
        da, db = _dims(a), _dims(b)
        return da is None or db is None or all(x is None or y is None or x == y
                                               for x, y in zip(da, db))
    if isinstance(a, relax.TupleType) and isinstance(b, relax.TupleType):
        return len(a.fields) == len(b.fields) and all(_same(x, y)
                                                      for x, y in zip(a.fields, b.fields))
    return type(a) is type(b)


def branch_error(then_value: Any, else_value: Any) -> Optional[str]:
    """The message for ``if`` branches of different types, else None."""
    then_ty, else_ty = value_type(then_value), value_type(else_value)
    if _same(then_ty, else_ty):
        return None
    return (f"if: the branches have different types: {type_text(then_ty)} and "
            f"{type_text(else_ty)}")


def condition_error(cond: Any) -> Optional[str]:
    """The message for an ``if`` condition that is not a ``Tensor[(), bool]``, else None."""
    ty = value_type(cond)
    if ty is None:
        return None
    if isinstance(ty, relax.TensorType) and str(ty.dtype) == "bool" and ty.ndim == 0:
        return None
    return f"if: the condition must be Tensor[(), bool], got {type_text(ty)}"
