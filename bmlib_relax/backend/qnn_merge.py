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
composite per partition.  Only for join-free quantized graphs (see :data:`JOINS`).
"""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax

from .merge import merge_composites

QNN_PREFIX = "bmlib.qnn_"


# A module whose quantized graph has joins (residual adds, products,
# concatenations) is partitioned one composite at a time, as before: merged, a
# convolution whose requantized result feeds a join inside the same PrimFunc
# loses its tiled schedule (its epilogue is no longer the block's last consumer;
# an int8 ResNet-18 ran ~15% slower), and leaving the joins out of the merge
# would let ``qnn_requantize`` take their operands before ``qnn_add`` matches.
JOINS = ("bmlib.qnn_add", "bmlib.qnn_mul", "bmlib.qnn_concatenate")


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
    composites = [str(f.attrs["Composite"]) for f in fused.functions.values()
                  if isinstance(f, relax.Function) and f.attrs is not None and
                  "Composite" in f.attrs]
    if not composites or any(name in JOINS for name in composites):
        return mod, table  # nothing quantized, or a graph with joins: one per composite
    return claim(merge_composites(fused)), rest
