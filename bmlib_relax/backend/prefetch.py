"""Software prefetch of streamed weights, inserted after scheduling.

A model's weights are read once per run, and most no longer fit the caches between
runs (ResNet-18 has 46 MB of them; on this project's VM a stream from memory runs at
12-15 GB/s on one core, against 20 from L3).  A template that walks a large weight a
block at a time waits on memory at the start of every block the hardware prefetcher
has not guessed.  While it computes one block of a weight, the kernel can fetch the
next one, spread over the work of the current block, so the fetch overlaps the FMAs.

TIR has the ``tirx.prefetch`` intrinsic but no schedule primitive that inserts it.
A schedule rule therefore *marks* a loop (``PREFETCH_ATTR``: ``[kind, weight name,
...]``) and, where the handler needs them, the loops around it (``ROLE_ATTR``);
:func:`insert_prefetches` flattens the scheduled function (the first steps of TVM's
own pipeline, which then finds nothing left to do for them) and asks the handler
registered for ``kind`` (:func:`register_prefetch`) for the statement to put at the
start of the marked loop's body.  The prefetches stay outside the innermost FMA loops:
one inside stops LLVM from keeping the accumulators in registers (measured 2x slower).
A register tile's outermost reduction loop is a good place (a few lines before each of
its steps): the fetch is spread over the tile's work instead of issued in one burst.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import tvm
from tvm import tirx

from .. import interrupts

PREFETCH_ATTR = "bmlib_prefetch"
ROLE_ATTR = "bmlib_prefetch_role"
CACHE_LINE_BYTES = 64
PREFETCH_LOCALITY = 2  # x86 prefetcht1: into L2 (the blocks are larger than L1)


@dataclass
class PrefetchSite:
    """What a handler sees of a marked loop: the loop (flattened), its mark, the
    enclosing loops (outermost first), and the function's flat parameter buffers by
    name."""
    loop: tirx.For
    mark: list
    enclosing: list = field(default_factory=list)
    buffers: dict = field(default_factory=dict)

    @property
    def parallel(self) -> Optional[tirx.For]:
        """The innermost enclosing parallel loop, if any."""
        for loop in reversed(self.enclosing):
            if int(loop.kind) == int(tirx.ForKind.PARALLEL):
                return loop
        return None

    def role(self, name: str) -> Optional[tirx.For]:
        """The enclosing loop a schedule rule annotated with ``ROLE_ATTR = name``."""
        for loop in reversed(self.enclosing):
            if str(loop.annotations.get(ROLE_ATTR, "")) == name:
                return loop
        return None


Handler = Callable[[PrefetchSite], Optional[tirx.Stmt]]
HANDLERS: dict[str, Handler] = {}


def register_prefetch(kind: str) -> Callable[[Handler], Handler]:
    """Register the handler that builds the prefetch statement for loops marked ``kind``."""
    def decorate(handler: Handler) -> Handler:
        HANDLERS[kind] = handler
        return handler

    return decorate


def mark(sch, loop, kind: str, *values) -> None:
    """Mark ``loop`` of the schedule for a ``kind`` prefetch (values: the handler's)."""
    sch.annotate(loop, PREFETCH_ATTR, [kind, *values])


def prelower_passes() -> list:
    """Block lowering and buffer flattening: the first passes of TVM's own pipeline
    (``s_tir`` in ``tvm.tirx.compilation_pipeline``), in its order, without the
    GPU-only ones."""
    from tvm import s_tir

    return [s_tir.transform.LowerInitBlock(),
            s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
            s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
            s_tir.transform.LowerMatchBuffer(), s_tir.transform.StmtSimplify(),
            s_tir.transform.LowerOpaqueBlock(),
            tirx.transform.FlattenBuffer()]


def flatten(prim: tirx.PrimFunc) -> tirx.PrimFunc:
    return tvm.transform.Sequential(prelower_passes())(tvm.IRModule({"main": prim}))["main"]


def line_prefetch(buffer: tirx.Buffer, element) -> tirx.Stmt:
    """Prefetch (into L2) the cache line holding ``buffer[element]`` of a flat buffer."""
    address = tirx.call_intrin("handle", "tirx.address_of", tirx.BufferLoad(buffer, [element]))
    return tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, 0,
                                          PREFETCH_LOCALITY, 1))


def spread_prefetch(weight: tirx.Buffer, start, lines: int, tiles: int, tile,
                    limit: Optional[int] = None) -> tirx.For:
    """The prefetch loop of one of ``tiles`` pieces of work (``tile``, an index
    expression) that together fetch ``lines`` cache lines from element ``start`` of
    the flat ``weight``: piece ``t`` fetches lines ``[t * per, (t + 1) * per)``, the
    line index clamped to the last line and, with ``limit``, the element to
    ``limit - 1``."""
    per_line = elements_per_line(weight)
    per_tile = -(-lines // tiles)
    l = tirx.Var("pf", "int32")
    element = start + tirx.min(tile * per_tile + l, lines - 1) * per_line
    if limit is not None:
        element = tirx.min(element, limit - 1)
    return tirx.For(l, 0, per_tile, tirx.ForKind.SERIAL, line_prefetch(weight, element))


def elements_per_line(buffer: tirx.Buffer) -> int:
    return max(1, CACHE_LINE_BYTES // max(1, tvm.runtime.DataType(str(buffer.dtype)).bits // 8))


def _marked(stmt) -> bool:
    if isinstance(stmt, tirx.For):
        return PREFETCH_ATTR in stmt.annotations or _marked(stmt.body)
    return any(_marked(child) for child in _children(stmt))


def _children(stmt) -> list:
    """The statements directly inside ``stmt``."""
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    return [getattr(stmt, attr) for attr in ("body", "block", "then_case", "else_case", "init")
            if isinstance(getattr(stmt, attr, None), tirx.Stmt)]


def insert_prefetches(prim: tirx.PrimFunc, symbol: str = "") -> tirx.PrimFunc:
    """``prim`` flattened, with each marked loop's prefetch at the start of its body;
    ``prim`` unchanged when nothing is marked, or when flattening fails (the function
    then runs as scheduled, without prefetches: correct, a bit slower)."""
    if not _marked(prim.body):
        return prim
    try:
        flat = flatten(prim)
    except (RuntimeError, ValueError) as exc:  # TVM raises InternalError (a RuntimeError)
        # Without the StmtSimplify TVM's own pipeline runs before LowerOpaqueBlock,
        # FlattenBuffer divided by zero on every Winograd partition: their prefetches
        # were dropped with a debug log only, and nobody noticed.  Whatever else fails
        # here is a warning: the function runs without prefetches (correct, slower).
        from .schedule import UnscheduledBlockWarning  # schedule -> templates -> here

        interrupts.raise_if_requested()  # a Ctrl-C that came back as an error: no warning
        where = f"bmlib partition {symbol!r}: " if symbol else ""
        warnings.warn(f"{where}software prefetches not inserted (flattening failed: "
                      f"{exc}); it runs without them (correct, but slower)",
                      UnscheduledBlockWarning, stacklevel=2)
        return prim
    top = list(flat.body.seq) if isinstance(flat.body, tirx.SeqStmt) else [flat.body]
    buffers = {str(s.buffer.name): s.buffer for s in top if isinstance(s, tirx.DeclBuffer)}
    return flat.with_body(_add(flat.body, [], buffers))


def _add(stmt, enclosing: list, buffers: dict):
    """``stmt`` with a prefetch at the start of every marked loop's body; the marks are
    dropped (they are no loop annotations TVM knows)."""
    if isinstance(stmt, tirx.For):
        body = _add(stmt.body, enclosing + [stmt], buffers)
        annotations = dict(stmt.annotations)
        annotations.pop(ROLE_ATTR, None)
        mark_value = annotations.pop(PREFETCH_ATTR, None)
        if mark_value is not None:
            kind = str(mark_value[0])
            handler = HANDLERS.get(kind)
            fetch = None if handler is None else handler(
                PrefetchSite(stmt, list(mark_value[1:]), enclosing, buffers))
            if fetch is not None:
                body = tirx.SeqStmt([fetch, body])
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                        stmt.thread_binding, annotations)
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_add(s, enclosing, buffers) for s in stmt.seq])
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, _add(stmt.then_case, enclosing, buffers),
                               None if stmt.else_case is None else
                               _add(stmt.else_case, enclosing, buffers))
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value,
                             _add(stmt.body, enclosing, buffers))
    return stmt  # anything else (buffer declarations, stores) holds no marked loop
