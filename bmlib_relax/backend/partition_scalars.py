"""Scalar constants a bmlib partition is called with become constants inside it.

``FuseOpsByPattern(bind_constants=False)`` makes every constant of a match a
parameter of its partition.  For a quantized layer that is a handful of 0-d
tensors (requantize multiplier, rounding term, shift, zero points), each one
more argument to check and unpack per call, and an opaque value to the
compiled code: the int64 fixed-point multiply and the shift read them from
memory instead of being compiled against immediates.  Here a 0-d constant that
every call of a partition passes in one position is bound into the partition
(the codegen lowers a scalar constant to a TIR constant), and the calls lose
that argument.  Weights (ndim > 0) stay arguments.
"""
from __future__ import annotations

import tvm
from tvm import relax

from .codegen import is_bmlib_partition
from .const_args import _call_sites, bind_parameters

_Const = tvm.ir.expr.GenericConst


def _scalar(arg) -> bool:
    return isinstance(arg, _Const) and arg.value.numpy().ndim == 0


def bind_scalar_arguments(mod: tvm.IRModule) -> tvm.IRModule:
    """Bind the 0-d constant arguments of bmlib partitions into them."""
    sites, as_value = _call_sites(mod)
    bindings: dict[str, dict] = {}
    for gv, func in mod.functions.items():
        name = gv.name_hint
        if not is_bmlib_partition(func) or name in as_value or name not in sites:
            continue
        mapping = {}
        for index, param in enumerate(func.params):
            args = [call.args[index] for _, call in sites[name]]
            if all(_scalar(a) for a in args) and all(a.same_as(args[0]) for a in args):
                mapping[param] = args[0]
        if not mapping or len(mapping) == len(func.params):
            continue  # a partition keeps at least one argument
        bindings[name] = mapping
    if not bindings:
        return mod
    return bind_parameters(mod, bindings,
                           rewrite_calls_in=lambda func: isinstance(func, relax.Function)
                           and not is_bmlib_partition(func))
