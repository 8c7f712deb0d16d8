"""Writing what a conversion produces: TVMScript, library, reports, signature.

``model_relax.py`` is the partitioned Relax module as TVMScript.  Weights are
lifted out of ``main`` into parameters (``weights.npz`` holds their values,
keyed by parameter name) because TVMScript text cannot carry large constants;
``tvm.script.from_source`` reads the file back, and
``relax.transform.BindParams("main", weights)`` restores the bound module.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


def _fingerprint(array: np.ndarray) -> tuple:
    return (array.shape, str(array.dtype), hashlib.sha1(np.ascontiguousarray(array)).hexdigest())


@mutator
class _ConstantLifter(PyExprMutator):
    """Replaces every non-scalar constant by a fresh parameter."""

    def __init__(self, names: Mapping[tuple, str], mod=None):
        super().__init__(mod)
        self.names = dict(names)
        self.lifted: list[tuple[relax.Var, np.ndarray]] = []
        self.used: set[str] = set()

    def visit_generic_const_(self, op):
        value = op.value.numpy()
        if value.ndim == 0:
            return op
        name = self.names.get(_fingerprint(value)) or f"const{len(self.lifted)}"
        base, k = name, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        var = relax.Var(name, relax.TensorType(list(value.shape), str(value.dtype)))
        self.lifted.append((var, value))
        return var


def lift_constants(mod: tvm.IRModule, weights: Mapping[str, np.ndarray]
                   ) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """``main`` with its tensor constants turned into trailing parameters."""
    names = {_fingerprint(np.asarray(v)): k for k, v in weights.items()}
    lifter = _ConstantLifter(names, mod)
    main = mod["main"]
    body = lifter.visit_expr(main.body)
    params = list(main.params) + [var for var, _ in lifter.lifted]
    new_main = relax.Function(params, body, None, main.is_pure, main.attrs)
    functions = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
    functions[mod.get_global_var("main")] = new_main
    lifted = {var.name: value for var, value in lifter.lifted}
    return relax.transform.Normalize()(tvm.IRModule(functions)), lifted


def write_tvmscript(path: str, mod: tvm.IRModule, weights: Mapping[str, np.ndarray]) -> dict:
    """Write ``mod`` as TVMScript (weights lifted to ``weights.npz`` beside it)."""
    lifted_mod, lifted = lift_constants(mod, weights)
    # Comments only: tvm.script.from_source parses every statement of the file.
    header = (
        "# bmlib-relax: the partitioned Relax module of a converted Relay model.\n"
        "# Load it with tvm.script.from_source(open(path).read()). The weights are\n"
        "# parameters of main after the model inputs; their values are in weights.npz:\n"
        "#     relax.transform.BindParams('main', dict(np.load('weights.npz')))(mod)\n")
    with open(path, "w") as handle:
        handle.write(header + lifted_mod.script())
    np.savez(os.path.join(os.path.dirname(path), "weights.npz"), **lifted)
    return lifted


def write_json(path: str, data: Any) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=False)
        handle.write("\n")
