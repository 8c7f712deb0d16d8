"""``relay.transform``: the passes legacy scripts call on a module.

``InferType`` fills every expression's ``checked_type``.  Rather than keeping
a second copy of Relay's type relations, it imports the function into Relax,
whose operators infer shapes and dtypes, and maps each Relax type back onto
the Relay node it came from.  (Where Relax cannot express a construct, the
import error says so.)
"""
from __future__ import annotations

from typing import Any, Callable

from . import ast


def _relay_type(ty: Any) -> ast.Type:
    from tvm import relax

    if isinstance(ty, relax.TupleType):
        return ast.TupleType(tuple(_relay_type(f) for f in ty.fields))
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        dims = tuple(int(d.value) if hasattr(d, "value") else None for d in shape.values) \
            if shape is not None and hasattr(shape, "values") else ()
        return ast.TensorType(dims, str(ty.dtype))
    return ast.IncompleteType()


class InferType:
    """Annotate every expression of each convertible function with its type."""

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        from ..importer.converter import RelayImporter, _Closure

        def record(node: ast.Expr, value: Any) -> None:
            if isinstance(value, _Closure):
                return
            ty = getattr(value, "ty", None)
            if ty is not None:
                node._set_checked_type(_relay_type(ty))

        for name, func in mod.functions.items():
            RelayImporter(mod, observer=record).run(name)
            for param in func.params:  # a parameter the body never uses keeps its annotation
                if "_checked_type" not in param.__dict__ and param.type_annotation is not None:
                    param._set_checked_type(param.type_annotation)
            func._set_checked_type(ast.FuncType(tuple(p.checked_type for p in func.params),
                                                func.body.checked_type))
        return mod


class Sequential:
    """``relay.transform.Sequential([...])`` of the passes above."""

    def __init__(self, passes: list[Callable[[ast.IRModule], ast.IRModule]]):
        self.passes = list(passes)

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        for p in self.passes:
            mod = p(mod)
        return mod
