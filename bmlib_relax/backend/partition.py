"""``partition_for_bmlib``: carve bmlib partitions out of a Relax module."""
from __future__ import annotations

import difflib
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax import dpl

from ..errors import BmlibError, CodegenError, UnusedLoweringWarning, UserCodeError
from ..importer.branches import lift_if_branches
from ..legacy.lowerings import (get_legacy_lowering, remember_legacy_pattern,
                               scoped_lowering_names)
from ..switches import switched_on
from . import blocked_layout, conv_fold, fold, layout, rewrite
from .const_args import bind_constant_arguments
from .merge import merge_composites
from .partition_scalars import bind_scalar_arguments
from .qnn_merge import merge_quantized_chains
from .codegen import CODEGEN_NAME
from .legacy_order import UserCheckGate, fuse_in_table_order, mark_legacy_entry
from .legacy_patterns import (PatternTranslationError, expand_alternatives, is_legacy_pattern,
                              take_check_error, translate_entry)
from .patterns import (HOST_VIEWS_SWITCH, PREFIX, STANDALONE_VIEW_ENTRIES, check_tensors,
                       entry_name, get_bmlib_patterns)
from .sink_reshape import sink_reshapes
from .symbolic import inline_shape_arguments
from .templates import get_template


def without_standalone_views(table: Sequence[Any]) -> list:
    """``table`` without the single-op entries of the ops the host runs as views
    (``reshape``, ``squeeze``, ``expand_dims``, ``flatten``): without merging, each
    would be a partition of its own, a copy of the whole tensor where the host copies
    nothing (an LSTM language model's three logits reshapes: 7.1 of 76 ms).
    ``$BMLIB_HOST_VIEWS=0`` offloads them anyway."""
    return [entry for entry in table if entry_name(entry) not in STANDALONE_VIEW_ENTRIES]


def resolve_patterns(patterns: Optional[Sequence[Any]],
                     skipped: Optional[list] = None) -> list:
    """Normalise a pattern list for ``FuseOpsByPattern`` (highest priority first).

    ``None`` means the registered ``bmlib.*`` table.  Entries may be
    ``(name, pattern)``, ``(name, pattern, check)`` or ``(name, pattern,
    annotations, check)``, with ``pattern`` in Relax DPL or legacy Relay syntax.
    A Relax check receives TVM's ``PatternCheckContext``; a legacy check the
    matched root as the Relay call it was imported from (:mod:`.relay_view`).
    Either only narrows :func:`~.patterns.check_tensors`, which always applies.

    Names with the ``bmlib.`` prefix must be fully usable: every op a pattern can
    pull in must have a TIR template (reported here, before anything is
    partitioned).  A legacy table written for another backend (``dnnl.*``,
    ``tensorrt.*``) is offloaded to bmlib under its own names; its entries that
    name ops with no Relax form or no bmlib template are left out (those ops stay
    on the host) and listed in ``skipped`` as ``(name, reason)``.
    """
    if patterns is None:
        return get_bmlib_patterns()
    resolved = []
    for entry in patterns:
        if isinstance(entry, relax.transform.FusionPattern):
            entry = (entry.name, entry.pattern, dict(entry.annotation_patterns), entry.check)
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3, 4):
            raise BmlibError(f"pattern entry {entry!r} is not (name, pattern[, check])")
        name = str(entry[0])
        foreign = not name.startswith(PREFIX + ".")
        if foreign and not is_legacy_pattern(entry[1]):
            raise BmlibError(f"pattern {name!r}: bmlib composite names start with "
                             f"'{PREFIX}.' (the prefix selects the codegen)")
        check = entry[-1] if len(entry) > 2 else None
        if not is_legacy_pattern(entry[1]) and not isinstance(entry[1], relax.dpl.DFPattern):
            raise BmlibError(f"pattern {name!r}: {type(entry[1]).__name__} {entry[1]!r:.60} is "
                             "not a pattern (expected a Relax DPL or Relay DFPattern)")
        try:
            if is_legacy_pattern(entry[1]):
                if len(entry) == 4:
                    raise BmlibError(f"pattern {name!r}: a legacy Relay pattern takes no "
                                     "annotations, give (name, pattern[, check])")
                # The user's check is gated: Relay's grouping order is worked out
                # without it, then it is asked once per group (see legacy_order).
                gate = UserCheckGate(check) if check is not None else None
                items = [translate_entry(name, variant, gate, base_check=check_tensors)
                         for variant in expand_alternatives(entry[1])]
                mark_legacy_entry(items, gate)
                # its lowering takes the composite's inputs in this pattern's order
                remember_legacy_pattern(name, entry[1])
            else:
                annotations = entry[2] if len(entry) == 4 else {}
                # The backend's own predicate (dtypes, static shapes, no leaking
                # intermediates) always applies; a user check can only narrow it.
                # (A built-in QNN check validates integer tensors itself: see qnn_patterns.)
                if check is None or not getattr(check, "validates_tensors", False):
                    check = check_tensors if check is None else \
                        _both(check_tensors, _user_check(name, check))
                items = [(name, entry[1], annotations, check)]
            for item in items:
                check_pattern_templates(name, item[1])
        except (BmlibError, AttributeError, RuntimeError, ValueError) as exc:
            if not foreign or (isinstance(exc, BmlibError) and
                               not isinstance(exc, (CodegenError, PatternTranslationError))):
                raise
            if skipped is not None:
                skipped.append((name, str(exc).strip().splitlines()[-1]))
            continue
        resolved.extend(items)
    return resolved


# A check function runs inside TVM's pattern matcher: registered, a UserCodeError
# raised there comes back out of the FFI as itself, not as a RuntimeError.
tvm_ffi.register_error(UserCodeError)


def _user_check(name: str, check: Callable) -> Callable:
    """``check`` whose failures (an exception, ``sys.exit()``) become a ``BmlibError``
    naming the pattern: raised inside TVM's pattern matcher, they would otherwise
    surface as an opaque ``RuntimeError`` (a ``SystemExit`` as ``RuntimeError: 0``)."""
    def guarded(*args: Any) -> Any:
        try:
            return check(*args)
        except UserCodeError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code
            raise UserCodeError(f"pattern {name!r}: check function "
                             f"{getattr(check, '__name__', check)!s} raised "
                             f"{type(exc).__name__}: {exc}") from None

    return guarded


def claim_foreign_partitions(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every partition made from a foreign table's composites to the bmlib codegen.

    ``FuseOpsByPattern``/``MergeCompositeFunctions`` name the codegen after the
    composite's prefix (``Codegen="dnnl"``); the bmlib templates lower any
    composite, so the partitions are bmlib's while the composites keep the
    table's names (and the report shows them).
    """
    updates = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and func.attrs is not None and \
                "Codegen" in func.attrs and str(func.attrs["Codegen"]) != CODEGEN_NAME:
            updates[gvar] = func.with_attr("Codegen", CODEGEN_NAME)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def _both(first: Callable, second: Callable) -> Callable:
    def check(context) -> bool:
        return bool(first(context)) and bool(second(context))

    return check


def pattern_ops(pattern: dpl.DFPattern) -> Iterator[str]:
    """Names of the Relax ops a DPL pattern can match."""
    stack, seen = [pattern], set()
    alive = []  # keep the Python wrappers alive: a freed one's id() would be reused
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        alive.append(node)
        if isinstance(node, dpl.ExprPattern) and isinstance(node.expr, tvm.ir.Op):
            yield node.expr.name
        for field in ("op", "left", "right", "pattern", "tuple", "reject"):
            child = getattr(node, field, None)
            if isinstance(child, dpl.DFPattern):
                stack.append(child)
        for field in ("args", "fields", "patterns"):
            children = getattr(node, field, None)
            if children is not None and not isinstance(children, dpl.DFPattern):
                stack.extend(c for c in children if isinstance(c, dpl.DFPattern))


def check_pattern_templates(name: str, pattern: dpl.DFPattern) -> None:
    """A pattern that could pull a template-less op into a partition is an error
    (unless the composite has its own legacy lowering, which replaces the templates)."""
    if get_legacy_lowering(name) is not None:
        return
    missing = sorted({op for op in pattern_ops(pattern) if get_template(op) is None})
    if missing:
        raise CodegenError(f"pattern {name!r} matches {', '.join(missing)}, which has no "
                           "bmlib TIR template (add one with bmlib_relax.backend.templates."
                           "register_template)")


def check_partition_templates(mod: tvm.IRModule) -> None:
    """Every op inside a bmlib composite has a template (checked before any build)."""
    for func in _composites(mod):
        composite = str(func.attrs["Composite"])
        if get_legacy_lowering(composite) is not None:
            continue
        for op in _call_ops(func):
            if get_template(op) is None:
                raise CodegenError(f"bmlib composite {composite!r} contains {op}, which has no "
                                   "TIR template")


def _composites(mod: tvm.IRModule) -> Iterator[relax.Function]:
    found: list[relax.Function] = []

    def visit(expr):
        if isinstance(expr, relax.Function) and expr.attrs is not None and \
                "Composite" in expr.attrs:
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            visit(func)
            relax.analysis.post_order_visit(func, visit)
    return iter(found)


def _call_ops(func: relax.Function) -> list[str]:
    ops: list[str] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            ops.append(expr.op.name)

    relax.analysis.post_order_visit(func.body, visit)
    return ops


_blocked = blocked_layout  # the module; the keyword below shadows its name


def _blocked_layout_default() -> bool:
    return _blocked.enabled_by_default()


def _warn_unused_lowerings(table: Sequence[Any]) -> None:
    """Warn about each lowering given to this call that names no composite of the
    table (with the nearest name): the composite it meant runs on the templates."""
    names = sorted({str(entry.name if hasattr(entry, "name") else entry[0])
                    for entry in table})
    for key in scoped_lowering_names():
        if key in names:
            continue
        close = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        warnings.warn(UnusedLoweringWarning(
            f"legacy lowering {key!r} names no composite of the pattern table{hint}; "
            "it is not used", key), stacklevel=3)


def partition_for_bmlib(mod: tvm.IRModule, patterns: Optional[Sequence[Any]] = None,
                        merge: bool = False, target: Any = None,
                        pack_weights: Optional[bool] = None,
                        blocked_layout: Optional[bool] = None) -> tvm.IRModule:
    """Partition ``mod`` for bmlib, TVM-style.

    ``patterns`` defaults to the ``bmlib`` table.  Weights stay arguments of
    the partitions (``bind_constants=False``), so a partition's parameters are
    exactly what its call passes.  ``merge=True`` groups neighbouring
    composites into one partition (``MergeCompositeFunctions``, in every Relax
    function: see :mod:`.merge`).  Partitions are made inside every Relax
    function (Relay globals, lifted loops, ``If`` branches), not only ``main``.
    ``pack_weights`` (default: with the built-in table only) first makes weights
    passed to Relax functions constants inside them (:mod:`.const_args`), runs NHWC
    convolutions in NCHW (:mod:`.layout`), folds computations on constants
    (:mod:`.fold`) and per-channel scales and zero padding into convolutions
    (:mod:`.conv_fold`), and re-lays out constant conv2d/dense weights for
    ``target``'s vectors (:mod:`.rewrite`).  A legacy
    table sees the graph unfolded, as Relay's MergeComposite did.
    ``blocked_layout`` (default: on with weight packing, unless
    ``$BMLIB_BLOCKED_LAYOUT=0``) keeps activations channel-blocked (NCHW{b}c) from
    conv to conv, converting only at the edges (:mod:`.blocked_layout`).
    """
    built_in = pack_weights if pack_weights is not None else patterns is None
    if blocked_layout is None:
        blocked_layout = _blocked_layout_default()
    if built_in:
        mod = bind_constant_arguments(mod)  # weights passed to functions, see const_args
        mod = fold.fold_constants(layout.convert_nhwc_to_nchw(mod))
        mod = sink_reshapes(mod)  # a bias added after a reshape meets its dense
        mod = conv_fold.fold_into_convolutions(mod)
        if blocked_layout:
            mod = _blocked.convert_to_blocked(mod, target)
        mod = rewrite.pack_weights(mod, target)
    table = resolve_patterns(patterns)
    _warn_unused_lowerings(table)
    if built_in and not merge and switched_on(HOST_VIEWS_SWITCH):
        table = without_standalone_views(table)
    take_check_error()
    try:
        if built_in and not merge:  # int8 layers share one partition: see .qnn_merge
            mod, table = merge_quantized_chains(mod, table, claim_foreign_partitions)
        # A legacy entry's groups are the ones Relay's MergeComposite formed: see
        # legacy_order (a table without legacy entries is one FuseOpsByPattern run).
        fused = fuse_in_table_order(mod, table, annotate_codegen=not merge)
    except Exception:
        error = take_check_error()  # a legacy check raised: report it as ours
        if error is not None:
            raise error from None
        raise
    mod = claim_foreign_partitions(fused)
    check_partition_templates(mod)
    if merge:
        mod = claim_foreign_partitions(merge_composites(mod))
    if built_in:
        mod = bind_scalar_arguments(mod)  # requantize scalars as immediates, see the module
    mod = inline_shape_arguments(mod)  # a symbolic reshape target is no PrimFunc argument
    # Partitions, host ops and layout changes side by side in an If branch: TVM 0.27's
    # memory planner would crash the branch that runs second (see importer.branches).
    return lift_if_branches(mod)
