"""Relax modules as input: models that never were Relay (ONNX, PyTorch, TVMScript).

``bmlib_relax.compile`` takes a Relax ``IRModule`` as well as Relay: e.g. the
output of ``tvm.relax.frontend.onnx.from_onnx`` or
``tvm.relax.frontend.torch.from_exported_program``.  This module brings such a
module into the form the bmlib partitioner expects from the Relay importer: a
``main`` function, weights bound as constants (``params`` given here, or the
``"params"`` a frontend attached with ``keep_params_in_input=True``), bindings
inside dataflow blocks (``FuseOpsByPattern`` only looks there), normalized.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import tvm
from tvm import relax

from .errors import ConversionError, ParamError
from .runtime import input_specs


def is_relax_module(value: object) -> bool:
    return isinstance(value, tvm.IRModule) and any(
        isinstance(f, relax.Function) for f in value.functions.values())


def prepare_relax_module(mod: tvm.IRModule, params: Optional[Mapping[str, np.ndarray]] = None,
                         input_shapes: Optional[Mapping[str, Sequence[int]]] = None
                         ) -> tvm.IRModule:
    """``mod`` with its weights bound and its bindings in dataflow blocks."""
    names = [gv.name_hint for gv in mod.functions]
    if "main" not in names:
        raise ConversionError(f"the Relax module has no 'main' function (it has "
                              f"{', '.join(sorted(names)) or 'none'})")
    if input_shapes:
        raise ParamError("input_shapes applies to Relay input; give a Relax module static "
                         "shapes when importing it (e.g. from_onnx(model, shape_dict=...))")
    main = mod["main"]
    if main.attrs is not None and "params" in main.attrs:  # keep_params_in_input=True
        mod, attached = relax.frontend.detach_params(mod)
        bound = {p.name: t for p, t in zip(mod["main"].params[-len(attached["main"]):],
                                           attached["main"])} if attached.get("main") else {}
        params = {**{k: v.numpy() for k, v in bound.items()}, **dict(params or {})}
    if params:
        by_name = {p.name: p for p in mod["main"].params}
        unknown = sorted(set(params) - set(by_name))
        if unknown:
            raise ParamError(f"params {', '.join(map(repr, unknown))} are no parameter of "
                             f"main (it takes {', '.join(sorted(by_name))})", unknown[0])
        # np.require, not ascontiguousarray: that one makes a 0-d weight shape (1,)
        arrays = {k: np.require(v, requirements="C") for k, v in params.items()}
        for name, array in arrays.items():
            check_relax_param(name, array, by_name[name])
        mod = relax.transform.BindParams(
            "main", {k: tvm.runtime.tensor(v) for k, v in arrays.items()})(mod)
    input_specs(mod["main"])  # every remaining parameter is a tensor input (or an error)
    mod = relax.transform.ConvertToDataflow()(mod)
    return relax.transform.Normalize()(mod)


def check_relax_param(name: str, value: np.ndarray, param: relax.Var) -> None:
    """A ``ParamError`` when ``value`` does not fit ``main``'s parameter ``param``, in the
    words the Relay path uses (``relay.params.check_param``): its shape (a symbolic dim
    takes any size) and exactly its dtype (a big-endian ``>f4`` array is no ``float32``
    one there either).  ``BindParams`` gave TVM's raw errors, or bound it and failed
    later in an op's type check."""
    spec = input_specs(relax.Function([param], param))[0]
    want = spec["shape"]
    shape_ok = value.ndim == len(want) and all(
        not isinstance(w, int) or w == s for w, s in zip(want, value.shape))
    if not (shape_ok and str(value.dtype) == spec["dtype"]):
        dims = [str(w) for w in want]
        want_text = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        raise ParamError(f"parameter {name!r}: expected shape {want_text} dtype "
                         f"{spec['dtype']}, got shape {tuple(value.shape)} dtype {value.dtype}",
                         name)
