"""``relay.ty``: Relay's type classes under the module name legacy scripts used
(``relay.ty.TensorType``, ``relay.ty.TupleType``, ...)."""
from __future__ import annotations

from .ast import (  # noqa: F401
    Any, FuncType, IncompleteType, RefType, TensorType, TupleType, Type, TypeCall, TypeVar,
)
from .builder import scalar_type  # noqa: F401


def is_dynamic(tensor_type: Type) -> bool:
    """Whether a tensor type has a ``?`` (``relay.Any()``) or symbolic dim."""
    return any(not isinstance(d, int) for d in getattr(tensor_type, "shape", ()))


def ShapeVar(name: str):  # noqa: N802 - Relay's name
    """A symbolic int32 dim named ``name`` (``tvm.te.var``)."""
    from tvm import te

    return te.var(name, "int32")


__all__ = ["Any", "FuncType", "IncompleteType", "RefType", "TensorType", "TupleType", "Type",
           "TypeCall", "TypeVar", "scalar_type", "is_dynamic", "ShapeVar"]
