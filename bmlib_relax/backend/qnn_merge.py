"""Quantized chains merged into one partition by default.

A quantized network is a chain of int8 layers between a ``qnn.quantize`` and a
``qnn.dequantize``.  Partitioned one composite at a time, every layer is its own
VM call with its own int8 intermediate allocated by the VM, and the quantize and
dequantize are calls of their own: at MobileNet-on-32x32 sizes that per-call
cost is what kept the int8 build from beating the float one (issue #18).  Here
the ``bmlib.qnn_*`` composites are matched first and merged
(``MergeCompositeFunctions``, in every function: :mod:`.merge`), so neighbouring
quantized layers become one partition and their int8 activations stay inside
one PrimFunc; the remaining (float) patterns are then partitioned as before, one
composite per partition.
"""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax

from .merge import merge_composites

QNN_PREFIX = "bmlib.qnn_"


def merge_quantized_chains(mod: tvm.IRModule, table: list,
                           claim: Callable[[tvm.IRModule], tvm.IRModule]
                           ) -> tuple[tvm.IRModule, list]:
    """``(module with the quantized composites merged into partitions, the other
    patterns)``; unchanged (and the whole table) when nothing quantized matched."""
    quantized = [p for p in table if p.name.startswith(QNN_PREFIX)]
    rest = [p for p in table if not p.name.startswith(QNN_PREFIX)]
    if not quantized:
        return mod, table
    fused = relax.transform.FuseOpsByPattern(quantized, bind_constants=False,
                                             annotate_codegen=False)(mod)
    if not any(isinstance(f, relax.Function) and f.attrs is not None and
               "Composite" in f.attrs for f in fused.functions.values()):
        return mod, table
    return claim(merge_composites(fused)), rest
