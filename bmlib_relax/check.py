"""Equivalence checking: the bmlib build against the plain Relax build.

``compare`` gives max abs/rel differences per output.  When a model differs,
``first_divergence`` localises it: both builds of the *partitioned* module are
run with every intermediate tensor of ``main`` exposed, and the first binding
whose values differ beyond tolerance is reported with what produced it (a bmlib
partition and its composites, or a host op).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

import numpy as np
import tvm
from tvm import relax

from .backend.codegen import is_bmlib_partition


@dataclass
class Difference:
    name: str
    max_abs: float
    max_rel: float
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def difference(name: str, got: np.ndarray, want: np.ndarray, rtol: float,
               atol: float) -> Difference:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got64.shape != want64.shape:
        return Difference(name, float("inf"), float("inf"), False)
    abs_diff = np.abs(got64 - want64)
    max_abs = float(abs_diff.max()) if abs_diff.size else 0.0
    rel = abs_diff / np.maximum(np.abs(want64), np.finfo(np.float32).tiny)
    max_rel = float(rel.max()) if rel.size else 0.0
    ok = bool(np.all(abs_diff <= atol + rtol * np.abs(want64)))
    return Difference(name, max_abs, max_rel, ok)


def as_list(outputs: Any) -> list[np.ndarray]:
    return list(outputs) if isinstance(outputs, tuple) else [outputs]


def compare(got: Any, want: Any, rtol: float, atol: float) -> list[Difference]:
    return [difference(f"out{i}", g, w, rtol, atol)
            for i, (g, w) in enumerate(zip(as_list(got), as_list(want)))]


def plain_version(partitioned: tvm.IRModule) -> tvm.IRModule:
    """The partitioned module with its partitions compiled by TVM itself."""
    functions = {}
    for gvar, func in partitioned.functions.items():
        if is_bmlib_partition(func):
            func = func.without_attr("Codegen")
        functions[gvar] = func
    return relax.transform.LambdaLift()(tvm.IRModule(functions))


def probe_version(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[tuple[str, str]]]:
    """``mod`` whose ``main`` also returns every intermediate tensor, in binding order.

    Returns the module and, per exposed tensor, ``(binding name, producer)``.
    """
    mod = relax.transform.ToNonDataflow()(mod)
    main = mod["main"]
    exposed: list[relax.Var] = []
    producers: list[tuple[str, str]] = []
    for block in main.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.var.ty, relax.TensorType):
                exposed.append(binding.var)
                producers.append((binding.var.name, _producer(mod, binding.value)))
    results = [main.body.body] + exposed
    body = relax.SeqExpr(main.body.blocks, relax.Tuple(results))
    ret_ty = relax.TupleType([r.ty for r in results])
    probe = relax.Function(main.params, body, ret_ty, main.is_pure, main.attrs)
    functions = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
    functions[mod.get_global_var("main")] = probe
    return relax.transform.Normalize()(tvm.IRModule(functions)), producers


def _producer(mod: tvm.IRModule, value: relax.Expr) -> str:
    if isinstance(value, relax.Call):
        if isinstance(value.op, relax.GlobalVar):
            func = mod[value.op]
            composites = sorted(_composites(func))
            kind = "bmlib partition" if is_bmlib_partition(func) else "function"
            return f"{kind} {value.op.name_hint}" + (f" ({', '.join(composites)})"
                                                     if composites else "")
        if isinstance(value.op, tvm.ir.Op):
            return f"host op {value.op.name}"
    return type(value).__name__


def _composites(func: relax.Function) -> set[str]:
    found: set[str] = set()

    def visit(expr):
        if isinstance(expr, relax.Function) and expr.attrs is not None \
                and "Composite" in expr.attrs:
            found.add(str(expr.attrs["Composite"]))

    relax.analysis.post_order_visit(func, visit)
    return found


def first_divergence(partitioned: tvm.IRModule, inputs: Sequence[np.ndarray], build_offloaded,
                     target: Any, rtol: float, atol: float) -> Optional[dict[str, Any]]:
    """The first intermediate of ``main`` where bmlib and plain builds disagree."""
    probe, producers = probe_version(partitioned)
    offloaded_ex, _ = build_offloaded(probe, target)
    plain_ex = tvm.compile(plain_version(probe), target=tvm.target.Target(target))
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs]
    got = relax.VirtualMachine(offloaded_ex, tvm.cpu())["main"](*tensors)
    want = relax.VirtualMachine(plain_ex, tvm.cpu())["main"](*tensors)
    for index, (name, producer) in enumerate(producers):
        diff = difference(name, got[index + 1].numpy(), want[index + 1].numpy(), rtol, atol)
        if not diff.ok:
            return {"binding": name, "index": index, "producer": producer,
                    "max_abs": diff.max_abs, "max_rel": diff.max_rel}
    return None
