"""``relay.transform``: the passes legacy scripts call on a module.

``InferType`` fills every expression's ``checked_type`` (Relax's inference per
call, see :mod:`.type_infer`).
"""
from __future__ import annotations

from typing import Any, Callable

from . import ast


class InferType:
    """Annotate every expression of each function with its type (see :mod:`.type_infer`)."""

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        from .type_infer import infer_module

        return infer_module(mod)


# A constant computation whose result is larger is left as it is (it computes the same
# values when the model runs): folding ``zeros(shape=[65536, 65536])`` would allocate
# 16 GiB while transforming the module, and store it in the module.
FOLD_MAX_BYTES = 256 << 20


class FoldConstant:
    """Replace every op call whose operands are all constants by its value (Relay's
    ``FoldConstant``): the call is imported alone and run once on the CPU.  A result
    of more than ``FOLD_MAX_BYTES`` is not folded (Relay's folded it, allocating it
    whole while transforming): the call stays, and computes it at run time.

    As v0.19's pass: QNN ops are folded only with ``fold_qnn=True`` (they were left for
    QNN canonicalization), an ``if`` on a constant condition becomes its branch,
    ``shape_of`` / ``ndarray_size`` of a statically shaped tensor become constants, and
    the module's types are inferred again afterwards (a function pass ended with
    ``InferType``)."""

    def __init__(self, fold_qnn: bool = False):
        self.fold_qnn = fold_qnn

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        from .type_infer import infer_module

        infer_module(mod)  # shape_of folds by its operand's type
        for name, func in list(mod.functions.items()):
            mod.functions[name] = fold_constants(func, self.fold_qnn)
        return infer_module(mod)


def fold_constants(expr: ast.Expr, fold_qnn: bool = True) -> ast.Expr:
    """``expr`` with its constant sub-computations evaluated (QNN ops too unless
    ``fold_qnn`` is False); where the original nodes carry inferred types, ``shape_of``
    and ``ndarray_size`` of static shapes are folded as well."""
    from .analysis import post_order_list
    from .rewrite import rebuild

    new: dict[int, ast.Expr] = {}
    for node in post_order_list(expr):
        value = rebuild(node, lambda child: new.get(id(child), child))
        if isinstance(value, ast.TupleGetItem) and isinstance(value.tuple_value, ast.Tuple) \
                and all(_is_constant(f) for f in value.tuple_value.fields):
            value = value.tuple_value.fields[value.index]
        elif isinstance(value, ast.If) and _is_constant(value.cond) and \
                value.cond.data.size == 1:
            value = value.true_branch if bool(value.cond.data.reshape(())) \
                else value.false_branch
        elif _static_shape_query(node) is not None:
            value = _static_shape_query(node)
        elif _foldable(value) and (fold_qnn or not value.op.name.startswith("qnn.")):
            value = _evaluate(value)
        new[id(node)] = value
    return new[id(expr)]


def _static_shape_query(node: ast.Expr):
    """``shape_of`` / ``ndarray_size`` of an operand whose inferred type is static, as
    the constant v0.19's FoldConstant made of it; None otherwise."""
    import numpy as np

    if not (isinstance(node, ast.Call) and isinstance(node.op, ast.Op) and
            node.op.name in ("shape_of", "ndarray_size") and node.args):
        return None
    ty = node.args[0].__dict__.get("_checked_type")
    if not isinstance(ty, ast.TensorType) or \
            not all(isinstance(d, int) and d >= 0 for d in ty.shape):
        return None
    dtype = str(node.attrs.get("dtype") or "int32")
    if node.op.name == "shape_of":
        return ast.Constant(np.array([int(d) for d in ty.shape], dtype))
    return ast.Constant(np.array(int(np.prod([int(d) for d in ty.shape])), dtype))


def _is_constant(node: ast.Expr) -> bool:
    return isinstance(node, ast.Constant) and node.data is not None


def _foldable(node: ast.Expr) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.op, ast.Op)):
        return False
    from ..importer.registry import get_converter

    if get_converter(node.op.name) is None or node.op.name.startswith("nn.dropout"):
        return False
    return all(_is_constant(a) or (isinstance(a, ast.Tuple) and all(_is_constant(f)
                                                                   for f in a.fields))
               for a in node.args)


def _evaluate(call: ast.Call) -> ast.Expr:
    import tvm
    from tvm import relax

    from ..host_legalize import legalize_for_host
    from ..importer.converter import RelayImporter

    relax_mod = RelayImporter(ast.IRModule({"main": ast.Function((), call)})).run("main")
    if _result_bytes(relax_mod["main"].ret_ty) > FOLD_MAX_BYTES:
        return call
    # divide(%c, 0f) folds to Relay's IEEE infinities, not TVM's "Divide by zero" error
    relax_mod = legalize_for_host(relax_mod)
    vm = relax.VirtualMachine(tvm.compile(relax_mod, target="llvm"), tvm.cpu())
    result = vm["main"]()

    def to_expr(value: Any) -> ast.Expr:
        if hasattr(value, "numpy"):
            return ast.Constant(value.numpy())
        return ast.Tuple(tuple(to_expr(v) for v in value))

    return to_expr(result)


def _result_bytes(ty: Any) -> int:
    """Bytes of a Relax result type's tensors (a symbolic dim counts as 1: its extent
    is only known once computed)."""
    import tvm

    from ..memory import tensor_type_bytes

    if isinstance(ty, tvm.relax.TupleType):
        return sum(_result_bytes(field) for field in ty.fields)
    return tensor_type_bytes(ty, symbolic_dim=1) or 0


class Sequential:
    """``relay.transform.Sequential([...])`` of the passes above."""

    def __init__(self, passes: list[Callable[[ast.IRModule], ast.IRModule]]):
        self.passes = list(passes)

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        for p in self.passes:
            mod = p(mod)
        return mod


#: Graph rewrites a ported script may run before ``relay.build`` (:mod:`.simplify`: they
#: rewrite this AST as v0.19's passes did).  Loaded on first use (it imports this module).
_REWRITE_PASSES = ("SimplifyInference", "CanonicalizeOps", "RemoveUnusedFunctions")


def __getattr__(name: str) -> Any:
    if name in _REWRITE_PASSES:
        from . import simplify

        return getattr(simplify, name)
    raise AttributeError(f"relay.transform.{name} is not available in bmlib-relax (Relay "
                         f"passes here: InferType, FoldConstant, Sequential, "
                         f"{', '.join(_REWRITE_PASSES)}; bmlib_relax.compile runs what "
                         "relay.build's pipeline did)")
