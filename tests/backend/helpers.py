"""Helpers for backend tests: one-op Relax modules and the plain reference build."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tvm
from tvm import relax

from bmlib_relax.backend.patterns import bmlib_patterns
from bmlib_relax.compiler import build_offloaded
from bmlib_relax.recipe import recipe_tensor


def pattern_entry(name: str) -> tuple:
    """The built-in table's entry ``bmlib.<name>``."""
    (entry,) = [e for e in bmlib_patterns() if e[0] == f"bmlib.{name}"]
    return entry


def make_module(build: Callable, inputs: Sequence[tuple], weights: Sequence[tuple] = (),
                dtype: str = "float32") -> tuple[tvm.IRModule, list[np.ndarray]]:
    """``main(*inputs)`` whose body is ``build(*input_vars, *weight_constants)``.

    Weights are Relax constants (as the importer binds params); inputs get
    recipe values.  Returns the module and the input arrays.
    """
    params = [relax.Var(f"x{i}", relax.TensorType(shape, dtype)) for i, shape in
              enumerate(inputs)]
    consts = [relax.const(recipe_tensor(f"w{i}", shape, dtype)) for i, shape in
              enumerate(weights)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(*params, *consts))
        bb.emit_func_output(out)
    arrays = [recipe_tensor(f"x{i}", shape, dtype, role="input") for i, shape in
              enumerate(inputs)]
    return bb.get(), arrays


def run(executable, arrays: Sequence[np.ndarray]):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [o.numpy() for o in out]


def run_plain(mod: tvm.IRModule, arrays: Sequence[np.ndarray]):
    return run(tvm.compile(mod, target="llvm"), arrays)


def run_offloaded(partitioned: tvm.IRModule, arrays: Sequence[np.ndarray]):
    executable, records = build_offloaded(partitioned)
    return run(executable, arrays), records


def composite_names(mod: tvm.IRModule) -> list[str]:
    """The ``Composite`` names of the functions inside ``mod``'s functions (one per
    matched pattern instance, so a name may repeat)."""
    names = []

    def visit(expr):
        if isinstance(expr, relax.Function) and expr.attrs is not None and \
                "Composite" in expr.attrs:
            names.append(str(expr.attrs["Composite"]))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
            if func.attrs is not None and "Composite" in func.attrs:
                names.append(str(func.attrs["Composite"]))
    return names
