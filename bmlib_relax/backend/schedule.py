"""Scheduling a lowered partition: the rules of its blocks, applied with ``tvm.s_tir``.

After ``te.create_prim_func`` a partition is one PrimFunc whose blocks are the
TE computes of its templates.  :func:`apply_schedules` walks those blocks: a
block a template tagged with ``SCHEDULE_ATTR`` (a block annotation) gets the
rule registered under that tag (``register_schedule``); an untagged block gets
a generic rule (:func:`schedule_spatial` for element-wise / data-movement
blocks, :func:`schedule_reduction` for reductions).  Rules only transform
loops, so an unscheduled block is still correct: when a rule raises, the
schedule is rolled back to its state before that rule and the block is left
as default lowering made it.  Correct but slow (single-threaded, scalar), so
such a block is never silent: :attr:`ScheduleContext.unscheduled` lists it
(the codegen warns with :class:`UnscheduledBlockWarning` and the report counts
``unscheduled_blocks`` per partition).  Only the optional inlining step may
fail quietly: a block it could not inline is still scheduled by its own rule.
"""
from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Optional

import tvm
import tvm_ffi
from tvm import s_tir

from .. import interrupts
from .target import resolve_target, vector_lanes
from .templates import SCHEDULE_ATTR, get_schedule_rule

_LOG = logging.getLogger(__name__)

# A note on register tiles: why they are not given the "local" scope: TVM 0.27 lowers every
# allocation that is not "global" (and every one of 1 KiB or more) to a
# TVMBackendAllocWorkspace / TVMBackendFreeWorkspace call pair
# (tirx.transform.LowerTVMBuiltin).  A tile computed at a loop inside the
# parallel loop would pay that pair on every tile, and LLVM could not keep it
# in registers.  A small "global" buffer becomes a stack alloca, which LLVM
# promotes to vector registers (measured: up to 1.1x on 1x1 convolutions).

# Below this many scalar operations a parallel loop costs more than it saves.
PARALLEL_MIN_WORK = 1 << 14
# Outer loops are fused until the parallel loop has at least this many iterations.
PARALLEL_MIN_ITERS = 64
# The names of the blocks a rule has already scheduled (its own block and the
# epilogue it took: ``ScheduleContext.done``) while :func:`apply_schedules` runs.
# Another rule's :func:`inline_epilogue` stops before such a block.  A context
# variable rather than a block annotation: looking blocks up by name in a merged
# partition's PrimFunc (hundreds of blocks) costs milliseconds each.
_SCHEDULED: ContextVar[frozenset | set] = ContextVar("bmlib_scheduled_blocks",
                                                     default=frozenset())


class UnscheduledBlockWarning(UserWarning):
    """A block's schedule rule failed and was rolled back: correct, but slow."""


@dataclass(frozen=True)
class UnscheduledBlock:
    """A block left as default lowering made it, and why."""

    block: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"block {self.block!r} (rule {self.rule}: {self.reason})"


@dataclass
class ScheduleContext:
    """What a schedule rule may read: the target, and blocks already taken care of.

    ``failures`` holds ``(block, rule, reason)`` of every rule that raised (the
    optional inlining included); ``unscheduled`` the blocks whose own rule failed.
    """

    target: Any
    done: set = field(default_factory=set)
    failures: list = field(default_factory=list)
    unscheduled: list[UnscheduledBlock] = field(default_factory=list)

    def lanes(self, dtype: str) -> int:
        return vector_lanes(self.target, dtype)


# --------------------------------------------------------------------------- helpers
def block_name(sch: s_tir.Schedule, block) -> str:
    return str(sch.get(block).name_hint)


def block_rule(sch: s_tir.Schedule, block) -> Optional[str]:
    value = sch.get(block).annotations.get(SCHEDULE_ATTR)
    return None if value is None else str(value)


def is_spatial(sch: s_tir.Schedule, block) -> bool:
    """Every iteration variable of the block is data-parallel (no reduction)."""
    return all(int(iv.iter_type) == 0 for iv in sch.get(block).iter_vars)


def is_scheduled(sch: s_tir.Schedule, block) -> bool:
    """A rule of the running :func:`apply_schedules` has already scheduled the block."""
    return block_name(sch, block) in _SCHEDULED.get()


def static_extent(extent) -> Optional[int]:
    """The value of a static loop extent or buffer dim, None for a symbolic one."""
    return int(extent) if isinstance(extent, tvm.tirx.IntImm) else None


def loop_extents(sch: s_tir.Schedule, loops) -> list[int]:
    """Loop extents, a symbolic one (a free batch) counted as 1: the work of one sample."""
    return [static_extent(sch.get(loop).extent) or 1 for loop in loops]


def same_shape(a, b) -> bool:
    """Two buffer shapes are equal (symbolic dims: the same expression object)."""
    return len(a) == len(b) and all(
        x.same_as(y) if static_extent(x) is None or static_extent(y) is None
        else int(x) == int(y) for x, y in zip(a, b))


def write_buffer(sch: s_tir.Schedule, block):
    return sch.get(block).writes[0].source


def divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is <= ``limit``."""
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def parallelize(sch: s_tir.Schedule, loops, work: int) -> None:
    """Fuse leading ``loops`` until there are enough iterations, and run them in parallel.

    ``work`` counts a symbolic extent as 1; a block with a symbolic outer loop (a free
    batch or sequence length: rows of a layer_norm, an element-wise pass) is taken to
    be worth a parallel loop whatever its per-row work."""
    if not loops or (work < PARALLEL_MIN_WORK and
                     all(static_extent(sch.get(loop).extent) is not None for loop in loops)):
        return
    if len(loops) > 1 and static_extent(sch.get(loops[-1]).extent) is None:
        loops = loops[:-1]  # a symbolic last loop (never vectorized) stays a serial row
    extents = loop_extents(sch, loops)
    count, total = 0, 1
    symbolic = False
    for loop, ext in zip(loops, extents):
        count += 1
        total *= ext
        symbolic |= static_extent(sch.get(loop).extent) is None
        if total >= PARALLEL_MIN_ITERS:
            break
    if total < 2 and not symbolic:
        return
    fused = sch.fuse(*loops[:count]) if count > 1 else loops[0]
    sch.parallel(fused)


def vectorize_innermost(sch: s_tir.Schedule, block, lanes: int) -> list:
    """Vectorize the innermost loop by ``lanes`` (split off when it divides); returns
    the remaining outer loops."""
    loops = list(sch.get_loops(block))
    if not loops or static_extent(sch.get(loops[-1]).extent) is None:
        return loops  # vectorized axes are static ones only
    ext = int(sch.get(loops[-1]).extent)
    if ext % lanes == 0 and ext > lanes:
        outer, inner = sch.split(loops[-1], [None, lanes])
        sch.vectorize(inner)
        return loops[:-1] + [outer]
    if 1 < ext <= lanes or (ext < 4 * lanes and ext % lanes == 0):
        sch.vectorize(loops[-1])
        return loops[:-1]
    return loops


def inline_epilogue(sch: s_tir.Schedule, producer) -> Optional[Any]:
    """Fold the chain of element-wise blocks after ``producer`` into its last block.

    Follows single consumers that are untagged, spatial and of the same shape
    (an unpack, bias add, batch_norm scale/shift, activation ...), inlines all
    but the last and returns the last (to be computed at the producer's tile),
    or None when ``producer`` has no such consumer.

    The chain stops before a block another rule has already scheduled
    (``ScheduleContext.done``): in a merged partition the add of a residual block
    reads two convolutions (``conv(x) + shortcut(x)``), and the first one's rule
    has already tiled the add as its epilogue.  The second then keeps its own
    unpack as its epilogue: that NCHW tensor is materialised (computed per tile of
    this conv) and read by the add, instead of the rule failing on loops it did not
    expect and being rolled back.
    """
    consumers = sch.get_consumers(producer)
    if len(consumers) != 1:
        return None
    chain = [consumers[0]]
    if block_rule(sch, chain[0]) is not None or not is_spatial(sch, chain[0]) or \
            is_scheduled(sch, chain[0]):
        return None
    outputs = {block_name(sch, b) for b in sch.get_output_blocks(sch.get_sblock("root"))}
    while block_name(sch, chain[-1]) not in outputs:
        nxt = sch.get_consumers(chain[-1])
        if len(nxt) != 1 or block_rule(sch, nxt[0]) is not None or \
                not is_spatial(sch, nxt[0]) or len(sch.get(nxt[0]).writes) != 1 or \
                is_scheduled(sch, nxt[0]):
            break
        if not same_shape(write_buffer(sch, nxt[0]).shape, write_buffer(sch, chain[-1]).shape):
            break
        chain.append(nxt[0])
    for block in chain[:-1]:
        sch.compute_inline(block)
    return chain[-1]


# --------------------------------------------------------------------------- generic rules
def schedule_spatial(sch: s_tir.Schedule, block, ctx: ScheduleContext) -> None:
    """Element-wise / data movement: vectorize the innermost loop, parallel outer loops."""
    loops = sch.get_loops(block)
    if not loops:
        return
    work = 1
    for ext in loop_extents(sch, loops):
        work *= ext
    dtype = str(write_buffer(sch, block).dtype)
    outer = vectorize_innermost(sch, block, ctx.lanes(dtype))
    parallelize(sch, outer, work)


def schedule_reduction(sch: s_tir.Schedule, block, ctx: ScheduleContext) -> None:
    """Reductions (softmax/layer_norm statistics, pooling windows, sums): parallel
    over the output (the leading spatial loops, as TE orders them)."""
    loops = sch.get_loops(block)
    iter_vars = sch.get(block).iter_vars
    if len(loops) != len(iter_vars):
        return
    n_spatial = 0
    for iv in iter_vars:
        if int(iv.iter_type) != 0:
            break
        n_spatial += 1
    work = 1
    for ext in loop_extents(sch, loops):
        work *= ext
    parallelize(sch, loops[:n_spatial], work)


def inline_into_elementwise(sch: s_tir.Schedule, block, ctx: ScheduleContext) -> None:
    """Inline an untagged element-wise intermediate into its consumers when they are
    element-wise blocks of the same shape: chains (batch_norm then relu, ...) become
    one pass."""
    if block_rule(sch, block) is not None or not is_spatial(sch, block):
        return
    outputs = {block_name(sch, b) for b in sch.get_output_blocks(sch.get_sblock("root"))}
    if block_name(sch, block) in outputs:
        return
    shape = write_buffer(sch, block).shape
    consumers = sch.get_consumers(block)
    if not consumers:
        return
    for consumer in consumers:
        if block_rule(sch, consumer) is not None or not is_spatial(sch, consumer) or \
                not same_shape(write_buffer(sch, consumer).shape, shape) or \
                block_name(sch, consumer) in ctx.done:
            return
    sch.compute_inline(block)


def _generic_rule(sch: s_tir.Schedule, block):
    return schedule_spatial if is_spatial(sch, block) else schedule_reduction


# --------------------------------------------------------------------------- driver
def _apply(sch: s_tir.Schedule, rule, block_name_: str, ctx: ScheduleContext,
           rule_name: Optional[str] = None, optional: bool = False):
    """Apply ``rule`` to the block, or roll the schedule back when it raises (an
    ``optional`` rule's failure leaves the block to its own rule, so it is not
    counted as unscheduled)."""
    snapshot, done = sch.mod, set(ctx.done)
    rule_name = rule_name or getattr(rule, "__name__", str(rule))
    try:
        rule(sch, sch.get_sblock(block_name_), ctx)
        return sch
    except Exception as exc:  # noqa: BLE001 - a rule that does not fit leaves the block as is
        interrupts.raise_if_requested()  # a Ctrl-C that came back as an error
        # The epilogue a rolled-back rule claimed is unscheduled again: the generic
        # rules (or another conv's rule) may take it.
        ctx.done.intersection_update(done)
        _LOG.debug("bmlib schedule rule %s failed on block %s: %s", rule_name, block_name_, exc)
        first = _first_line(exc)
        # (a ScheduleError's short message names its type already)
        reason = first if first.startswith(f"{type(exc).__name__}:") else \
            f"{type(exc).__name__}: {first}"
        ctx.failures.append((block_name_, rule_name, str(exc)))
        if not optional:
            ctx.unscheduled.append(UnscheduledBlock(block_name_, rule_name, reason))
        return new_schedule(snapshot)


def new_schedule(mod) -> s_tir.Schedule:
    """A schedule whose errors are not rendered with the IR: rendering prints the
    module, and TVM's printer folds what it prints — a float divided by a literal 0
    (Relay's ``divide(%x, 0f)``, an inlined scalar 0) fails that fold inside the error's
    construction, which aborts the process instead of raising.  Rule failures are
    caught and kept as reasons either way; the short message names the primitive."""
    return s_tir.Schedule(mod, error_render_level="fast")


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _exists(sch: s_tir.Schedule, name: str) -> bool:
    try:
        sch.get_sblock(name)
        return True
    except Exception:  # noqa: BLE001 - inlined by an earlier rule
        return False


def inline_scalar_constants(sch: s_tir.Schedule, names: list) -> None:
    """Inline the codegen's 0-d constant blocks (``scalar``: a requantize multiplier,
    shift or zero point bound into the partition) into their readers first, so the
    compiled code sees immediates rather than loads of a stack buffer."""
    for name in names:
        if not name.startswith("scalar") or not _exists(sch, name):
            continue
        block = sch.get_sblock(name)
        if sch.get(block).reads or len(sch.get(block).writes[0].source.shape) != 0:
            continue
        if _zero_divisor(sch, block):
            continue
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 - e.g. the partition's output: keep the block
            continue


_DIVISIONS = (tvm.tirx.Div, tvm.tirx.FloorDiv, tvm.tirx.Mod, tvm.tirx.FloorMod)


def _zero_divisor(sch: s_tir.Schedule, block) -> bool:
    """Whether the scalar constant ``block`` stores is 0 and a reader divides by it.

    Inlined, it would put a literal ``x / 0`` into the TIR, which TVM's constant
    folder refuses at build time (``Divide by zero``) even for floats, where Relay's
    ``divide(%x, 0f)`` computed IEEE infinities; left as a load, it computes the same."""
    store = sch.get(block).body
    value = getattr(store, "value", None)
    if not isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) or value.value != 0:
        return False
    buffer = sch.get(block).writes[0].source

    def divides_by_it(node) -> bool:
        # a load of the buffer (TVM 0.27's BufferLoad is a factory, not a class)
        source = getattr(node.b, "source", None) if isinstance(node, _DIVISIONS) else None
        return source is not None and source.same_as(buffer)

    return any(any_node(sch.get(consumer).body, divides_by_it)
               for consumer in sch.get_consumers(block))


# The fields through which a TIR statement or expression holds its children (TVM 0.27's
# Python API has no TIR visitor).
_CHILD_FIELDS = ("seq", "body", "block", "init", "then_case", "else_case", "value", "a", "b",
                 "args", "condition", "true_value", "false_value", "indices")


def any_node(node, predicate) -> bool:
    """Whether ``predicate`` holds for ``node`` or any TIR node under it."""
    if predicate(node):
        return True
    for name in _CHILD_FIELDS:
        child = getattr(node, name, None)
        if child is None or isinstance(child, (int, float, str)):
            continue
        children = child if isinstance(child, (list, tuple, tvm_ffi.Array)) else [child]
        if any(isinstance(c, (tvm.tirx.Stmt, tvm.ir.expr.Expr)) and any_node(c, predicate)
               for c in children):
            return True
    return False


def _apply_tagged_rules(sch: s_tir.Schedule, names: list,
                        ctx: ScheduleContext) -> s_tir.Schedule:
    for name in names:
        if name in ctx.done or not _exists(sch, name):
            continue  # (done: another rule scheduled it with its own, e.g. a fused conv pair)
        rule_name = block_rule(sch, sch.get_sblock(name))
        if rule_name is None:
            continue
        rule = get_schedule_rule(rule_name)
        if rule is None:
            ctx.failures.append((name, rule_name, "no schedule rule registered"))
            ctx.unscheduled.append(UnscheduledBlock(name, rule_name,
                                                    "no schedule rule registered"))
            continue
        sch = _apply(sch, rule, name, ctx, rule_name)
        ctx.done.add(name)
    return sch


def apply_schedules(prim: tvm.tirx.PrimFunc, target: Any = None,
                    ctx: Optional[ScheduleContext] = None) -> tvm.tirx.PrimFunc:
    """Schedule every block of ``prim``: tagged blocks by their registered rule first
    (they may fold their epilogues in), then the rest by the generic rules."""
    ctx = ctx or ScheduleContext(resolve_target(target))
    attrs = prim.attrs
    sch = new_schedule(prim.without_attr("global_symbol") if attrs is not None and
                       "global_symbol" in attrs else prim)
    root = _root_block(sch)
    if root is None:
        return prim  # no block to schedule (a legacy ``te.extern`` lowering): built as is
    names = [block_name(sch, b) for b in sch.get_child_blocks(root)]
    inline_scalar_constants(sch, names)
    token = _SCHEDULED.set(ctx.done)
    try:
        sch = _apply_tagged_rules(sch, names, ctx)
    finally:
        _SCHEDULED.reset(token)
    for name in names:
        if name not in ctx.done and _exists(sch, name):
            sch = _apply(sch, inline_into_elementwise, name, ctx, optional=True)
    for name in names:
        if name in ctx.done or not _exists(sch, name):
            continue
        block = sch.get_sblock(name)
        if block_rule(sch, block) is not None:
            continue
        sch = _apply(sch, _generic_rule(sch, block), name, ctx)
        ctx.done.add(name)
    func = sch.mod["main"]
    if attrs is not None and "global_symbol" in attrs:
        func = func.with_attr("global_symbol", attrs["global_symbol"])
    return func


def _root_block(sch: Any) -> Any:
    """The ``root`` block of ``sch``'s function, or ``None`` for a PrimFunc without one
    (``te.create_prim_func`` of a ``te.extern`` that calls a packed function — what a
    v0.19 ``_LOWER_MAP`` lowering calling a vendor library builds; plain TVM builds it
    unscheduled)."""
    try:
        return sch.get_sblock("root")
    except Exception:  # noqa: BLE001 - ScheduleError: no such block
        return None


# --------------------------------------------------------------------------- empty runs
def decompose_symbolic_reductions(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` with the init of each reduction block over a symbolic extent hoisted in
    front of its reduction loops; ``func`` itself when there is none.

    TVM lowers a block's ``init`` into its reduction loop (``if k == 0``): over an axis
    that is empty in a run the init never runs and the result is the buffer's old
    contents (the previous run's).  Hoisted, an empty reduction is its identity (0 for
    a sum).  Used on bmlib's scheduled partitions and on the host's PrimFuncs
    (``host_tir``).  A function whose parameters are all buffers of static shape has
    no symbolic extent to look for: it is returned without building a schedule."""
    if _static_params(func):
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


def _static_params(func: tvm.tirx.PrimFunc) -> bool:
    """Every parameter is a buffer and every buffer dim a constant."""
    types = [getattr(param, "ty", None) for param in func.params]
    return all(isinstance(ty, tvm.tirx.buffer.BufferType) and
               all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape) for ty in types)


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
