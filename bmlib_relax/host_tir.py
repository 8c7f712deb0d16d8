"""The TIR pipeline of the ops that stay on the host: reductions over a run-time-sized
axis initialised before their loop.

TVM lowers a reduction block's ``init`` into the reduction loop (``if k == 0: C = 0``,
``LowerInitBlock``).  When the loop's extent is 0 in a run -- a ``dense`` or ``conv2d``
whose input-channel dim is only known at run time and is 0 -- the init never runs and
the result is the output buffer's old contents: the previous run's values, a silent
wrong answer on the host and in the plain reference build alike.  Before TVM's own
pipeline, :func:`decompose_symbolic_reductions` moves the init of every reduction
block whose reduction loops have a symbolic extent in front of them
(``decompose_reduction``), so an empty reduction gives its identity (0 for a sum, as
Relay's and numpy's).  Blocks over static extents are left as TVM lowers them.
bmlib's templates initialise before their loops themselves.

``tvm.compile(..., tir_pipeline=HOST_TIR_PIPELINE)`` selects it (:func:`ensure_registered`
registers it with TVM once).
"""
from __future__ import annotations

import tvm
from tvm import s_tir
from tvm.tirx import compilation_pipeline

HOST_TIR_PIPELINE = "bmlib_host"


def decompose_symbolic_reductions(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` with the init of each reduction block over a symbolic extent hoisted in
    front of its reduction loops; ``func`` itself when there is none."""
    if "global_symbol" not in (func.attrs or {}):
        return func
    try:
        sch = s_tir.Schedule(func)
        blocks = _symbolic_reductions(sch)
    except Exception:  # not block-form TIR (a packed function, an opaque body)
        return func
    if not blocks:
        return func
    for block, loop in blocks:
        for place in (loop, sch.get_loops(block)[0]):
            try:
                sch.decompose_reduction(block, place)
                break
            except Exception:  # noqa: BLE001 - a place TVM refuses: the next, or none
                continue
    return sch.mod["main"]


def _symbolic_reductions(sch: s_tir.Schedule) -> list:
    """(block, loop to put its init in front of) of each block with an init and a
    reduction iteration var of symbolic extent.  TVM's legalized computes keep one loop
    per iteration var, spatial ones first: the init goes right before the first
    reduction loop; in any other nest, before the outermost loop (the init then runs
    as a nest of its own, still before every update)."""
    found = []

    def visit(block) -> None:
        for child in sch.get_child_blocks(block):
            visit(child)
        stmt = sch.get(block)
        if stmt.init is None:
            return
        reductions = [iv for iv in stmt.iter_vars if int(iv.iter_type) == 2]
        if not any(not isinstance(iv.dom.extent, tvm.tirx.IntImm) for iv in reductions):
            return
        loops = sch.get_loops(block)
        if not loops:
            return
        kinds = [int(iv.iter_type) for iv in stmt.iter_vars]
        first_reduction = kinds.index(2)
        in_order = len(loops) == len(kinds) and kinds == sorted(kinds)
        found.append((block, loops[first_reduction] if in_order else loops[0]))

    visit(sch.get_sblock("root"))
    return found


def _pipeline_factory():
    """TVM's default TIR pipeline for the CPU, after :func:`decompose_symbolic_reductions`
    on every PrimFunc."""
    base, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("s_tir")

    @tvm.transform.module_pass(opt_level=0, name="bmlib.DecomposeSymbolicReductions")
    def _decompose(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updated = {}
        for gvar, func in mod.functions.items():
            if isinstance(func, tvm.tirx.PrimFunc):
                new = decompose_symbolic_reductions(func)
                if not new.same_as(func):
                    updated[gvar] = new
        if not updated:
            return mod
        mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
        for gvar, func in updated.items():
            mod[gvar] = func
        return mod

    def pipeline(mod: tvm.IRModule) -> tvm.IRModule:
        return base(_decompose(mod))

    return pipeline, finalize_host, finalize_device


def ensure_registered() -> str:
    """Register :data:`HOST_TIR_PIPELINE` with TVM (once) and return its name."""
    if HOST_TIR_PIPELINE not in compilation_pipeline.PIPELINE_MAP:
        compilation_pipeline.register_tir_pipeline(HOST_TIR_PIPELINE, _pipeline_factory)
    return HOST_TIR_PIPELINE
