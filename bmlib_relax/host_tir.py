"""The TIR pipeline of the ops that stay on the host: reductions over a run-time-sized
axis initialised before their loop.

TVM lowers a reduction block's ``init`` into the reduction loop (``if k == 0: C = 0``,
``LowerInitBlock``).  When the loop's extent is 0 in a run -- a ``dense`` or ``conv2d``
whose input-channel dim is only known at run time and is 0 -- the init never runs and
the result is the output buffer's old contents: the previous run's values, a silent
wrong answer on the host and in the plain reference build alike.  Before TVM's own
pipeline, ``backend.schedule.decompose_symbolic_reductions`` (which bmlib's partitions
go through too) moves the init of every reduction block whose reduction loops have a
symbolic extent in front of them (``decompose_reduction``), so an empty reduction gives
its identity (0 for a sum, as Relay's and numpy's).  Blocks over static extents are
left as TVM lowers them.

``tvm.compile(..., tir_pipeline=HOST_TIR_PIPELINE)`` selects it (:func:`ensure_registered`
registers it with TVM once).
"""
from __future__ import annotations

import tvm
from tvm.tirx import compilation_pipeline

from .backend.schedule import decompose_symbolic_reductions

HOST_TIR_PIPELINE = "bmlib_host"


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
