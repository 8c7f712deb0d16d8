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
        known = {p.name for p in mod["main"].params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ParamError(f"params {', '.join(map(repr, unknown))} are no parameter of "
                             f"main (it takes {', '.join(sorted(known))})", unknown[0])
        mod = relax.transform.BindParams(
            "main", {k: tvm.runtime.tensor(np.ascontiguousarray(v)) for k, v in params.items()})(mod)
    mod = relax.transform.ConvertToDataflow()(mod)
    return relax.transform.Normalize()(mod)
