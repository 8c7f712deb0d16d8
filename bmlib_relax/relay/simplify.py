"""Relay-to-Relay rewrites v0.19 scripts ran by hand before a build, on this AST.

``SimplifyInference`` (``batch_norm`` -> ``data * scale + shift``, ``dropout`` ->
identity), ``CanonicalizeOps`` (``bias_add`` -> ``add`` of the bias expanded to its axis)
and ``RemoveUnusedFunctions`` rewrite a module as v0.19's passes did, with the same Relay
ops.  ``relay.transform`` serves them to ported scripts; the legacy layer wraps them for
vendor ``partition_for_<x>`` helpers (recording them in its plan, and making ops its
tables can query: ``make_op``).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..errors import UnsupportedPassError
from . import ast
from .rewrite import substitute

#: Makes the :class:`~.ast.Op` of a name for a rewritten call.
OpFactory = Callable[[str], ast.Op]


def rewrite_function(func: ast.Function,
                     transform: Callable[[ast.Expr], Optional[ast.Expr]]) -> ast.Function:
    """``func`` with ``transform`` applied bottom-up.  These rewrites keep every node's
    type (``bias_add`` -> ``add``, batch-norm simplified, constants folded), so a parent
    rebuilt over a rewritten child keeps the type inference gave the original: a second
    ``bias_add`` above a rewritten first one found its data untyped ("needs types: run
    InferType()", though InferType had just run)."""
    def typed_transform(new: ast.Expr, original: ast.Expr) -> Optional[ast.Expr]:
        checked = original.__dict__.get("_checked_type")
        if new is not original and checked is not None and "_checked_type" not in new.__dict__:
            new.__dict__["_checked_type"] = checked
        return transform(new)

    body = substitute(func.body, {}, typed_transform, with_original=True)
    if body is func.body:
        return func
    return ast.Function(func.params, body, func.ret_type, func.type_params, func.attrs,
                        span=func.span)


def map_functions(mod: ast.IRModule,
                  fn: Callable[[ast.Function], ast.Function]) -> ast.IRModule:
    """``mod`` with each function replaced by ``fn`` of it (in place, as v0.19's
    function passes updated the module they were given)."""
    for name, func in list(mod.functions.items()):
        mod.functions[name] = fn(func)
    return mod


def _typed_module(mod: ast.IRModule) -> ast.IRModule:
    """Relay's pass infrastructure re-ran type inference between passes; so do we."""
    from .transform import InferType

    return InferType()(mod)


def _tensor_type(expr: ast.Expr, pass_name: str) -> ast.TensorType:
    ty = expr.__dict__.get("_checked_type")
    if not isinstance(ty, ast.TensorType):
        raise UnsupportedPassError(f"relay.transform.{pass_name} needs types: run "
                                   "transform.InferType() before it")
    return ty


def _scalar(value: float, dtype: str) -> ast.Constant:
    return ast.Constant(np.array(value, dtype=dtype))


def op_name(expr: Any) -> Optional[str]:
    return getattr(getattr(expr, "op", None), "name", None) if isinstance(expr, ast.Call) \
        else None


def require_module(mod: Any, name: str) -> ast.IRModule:
    if not isinstance(mod, ast.IRModule):
        raise UnsupportedPassError(f"relay.transform.{name} was applied to a "
                                   f"{type(mod).__name__}, expected a Relay IRModule")
    return mod


class _Rewrite:
    """A module pass: ``pass_(mod) -> mod`` (``make_op`` names the ops it writes)."""

    name = "Pass"

    def __init__(self, make_op: OpFactory = ast.Op):
        self.make_op = make_op

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        return self.apply(require_module(mod, self.name))

    def apply(self, mod: ast.IRModule) -> ast.IRModule:
        raise NotImplementedError

    def call(self, op: str, *args: ast.Expr, **attrs: Any) -> ast.Call:
        return ast.Call(self.make_op(op), args, ast.Attrs(attrs))

    def expand_to_axis(self, bias: ast.Expr, ndim: int, axis: int) -> ast.Expr:
        """Relay's ExpandBiasToMatchAxis for a 1-D bias on ``axis`` of an ``ndim`` tensor."""
        pad = ndim - axis - 1
        return self.call("expand_dims", bias, axis=1, num_newaxis=pad) if pad > 0 else bias

    def __repr__(self) -> str:
        return f"relay.transform.{self.name}"


class SimplifyInference(_Rewrite):
    """``batch_norm`` (field 0) -> ``data * scale + shift``, ``dropout`` -> identity,
    written with the same Relay ops as Relay's SimplifyInference."""

    name = "SimplifyInference"

    def apply(self, mod):
        return map_functions(_typed_module(mod),
                             lambda f: rewrite_function(f, self._simplified))

    def _simplified(self, node: ast.Expr) -> Optional[ast.Expr]:
        if not isinstance(node, ast.TupleGetItem) or node.index != 0:
            return None
        call = node.tuple_value
        name = op_name(call)
        if name == "nn.dropout":
            return call.args[0]
        if name != "nn.batch_norm":
            return None
        data, gamma, beta, mean, var = call.args
        ty = _tensor_type(data, self.name)
        attrs = call.attrs
        ndim = len(ty.shape)
        axis = int(attrs.get("axis", 1))
        axis = axis + ndim if axis < 0 else axis
        eps = _scalar(float(attrs.get("epsilon", 1e-5)), ty.dtype)
        scale = self.call("divide", _scalar(1.0, ty.dtype),
                          self.call("sqrt", self.call("add", var, eps)))
        if attrs.get("scale", True):
            scale = self.call("multiply", scale, gamma)
        shift = self.call("multiply", self.call("negative", mean), scale)
        if attrs.get("center", True):
            shift = self.call("add", shift, beta)
        out = self.call("multiply", data, self.expand_to_axis(scale, ndim, axis))
        return self.call("add", out, self.expand_to_axis(shift, ndim, axis))


class CanonicalizeOps(_Rewrite):
    """``nn.bias_add(x, b, axis)`` -> ``add(x, expand_dims(b, ...))`` as in Relay."""

    name = "CanonicalizeOps"

    def apply(self, mod):
        return map_functions(_typed_module(mod),
                             lambda f: rewrite_function(f, self._canonical))

    def _canonical(self, node: ast.Expr) -> Optional[ast.Expr]:
        if op_name(node) != "nn.bias_add":
            return None
        data, bias = node.args
        ndim = len(_tensor_type(data, self.name).shape)
        axis = int(node.attrs.get("axis", 1))
        axis = axis + ndim if axis < 0 else axis
        return self.call("add", data, self.expand_to_axis(bias, ndim, axis))


class RemoveUnusedFunctions(_Rewrite):
    """Drop the global functions no entry function reaches (``main`` by default)."""

    name = "RemoveUnusedFunctions"

    def __init__(self, entry_functions=None, make_op: OpFactory = ast.Op):
        super().__init__(make_op)
        self.entries = list(entry_functions or ["main"])

    def apply(self, mod):
        from .analysis import post_order_list

        keep, pending = set(), [e for e in self.entries if e in mod.functions]
        while pending:
            name = pending.pop()
            if name in keep:
                continue
            keep.add(name)
            pending += [n.name for n in post_order_list(mod.functions[name])
                        if isinstance(n, ast.GlobalVar)]
        for name in list(mod.functions):
            if name not in keep:
                del mod.functions[name]
        return mod
