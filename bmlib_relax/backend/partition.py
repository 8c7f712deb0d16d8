"""``partition_for_bmlib``: carve bmlib partitions out of a Relax module."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import tvm
from tvm import relax
from tvm.relax import dpl

from ..errors import BmlibError, CodegenError
from ..legacy.lowerings import get_legacy_lowering
from . import fold, rewrite
from .legacy_patterns import is_legacy_pattern, translate_entry
from .patterns import PREFIX, check_tensors, get_bmlib_patterns
from .templates import get_template


def resolve_patterns(patterns: Optional[Sequence[Any]]) -> list:
    """Normalise a pattern list for ``FuseOpsByPattern`` (highest priority first).

    ``None`` means the registered ``bmlib.*`` table.  Entries may be
    ``(name, pattern)``, ``(name, pattern, check)`` or ``(name, pattern,
    annotations, check)``, with ``pattern`` in Relax DPL or legacy Relay syntax.
    A Relax check receives TVM's ``PatternCheckContext``; a legacy check the
    matched root as a Relay-style view (:mod:`.relay_view`).  Either only
    narrows :func:`~.patterns.check_tensors`, which always applies.  Every name must
    carry the ``bmlib.`` prefix, and every op a pattern can pull in must have a
    TIR template: both are reported here, before anything is partitioned.
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
        if not name.startswith(PREFIX + "."):
            raise BmlibError(f"pattern {name!r}: bmlib composite names start with "
                             f"'{PREFIX}.' (the prefix selects the codegen)")
        check = entry[-1] if len(entry) > 2 else None
        if is_legacy_pattern(entry[1]):
            if len(entry) == 4:
                raise BmlibError(f"pattern {name!r}: a legacy Relay pattern takes no "
                                 "annotations, give (name, pattern[, check])")
            resolved.append(translate_entry(name, entry[1], check, base_check=check_tensors))
        else:
            annotations = entry[2] if len(entry) == 4 else {}
            # The backend's own predicate (dtypes, static shapes, no leaking
            # intermediates) always applies; a user check can only narrow it.
            # (A built-in QNN check validates integer tensors itself: see qnn_patterns.)
            if check is None or not getattr(check, "validates_tensors", False):
                check = check_tensors if check is None else _both(check_tensors, check)
            resolved.append((name, entry[1], annotations, check))
        check_pattern_templates(name, resolved[-1][1])
    return resolved


def _both(first: Callable, second: Callable) -> Callable:
    def check(context) -> bool:
        return bool(first(context)) and bool(second(context))

    return check


def pattern_ops(pattern: dpl.DFPattern) -> Iterator[str]:
    """Names of the Relax ops a DPL pattern can match."""
    stack, seen = [pattern], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
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
                str(expr.attrs.get("Composite", "")).startswith(PREFIX + "."):
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


def partition_for_bmlib(mod: tvm.IRModule, patterns: Optional[Sequence[Any]] = None,
                        merge: bool = False, target: Any = None,
                        pack_weights: Optional[bool] = None) -> tvm.IRModule:
    """Partition ``mod`` for bmlib, TVM-style.

    ``patterns`` defaults to the ``bmlib`` table.  Weights stay arguments of
    the partitions (``bind_constants=False``), so a partition's parameters are
    exactly what its call passes.  ``merge=True`` groups neighbouring
    composites into one partition (``MergeCompositeFunctions``).
    ``pack_weights`` (default: with the built-in table only) first folds
    computations on constants (:mod:`.fold`) and re-lays out constant
    conv2d/dense weights for ``target``'s vectors (:mod:`.rewrite`).  A legacy
    table sees the graph unfolded, as Relay's MergeComposite did.
    """
    if pack_weights if pack_weights is not None else patterns is None:
        mod = rewrite.pack_weights(fold.fold_constants(mod), target)
    fuse = relax.transform.FuseOpsByPattern(resolve_patterns(patterns), bind_constants=False,
                                            annotate_codegen=not merge)
    mod = fuse(mod)
    check_partition_templates(mod)
    return relax.transform.MergeCompositeFunctions()(mod) if merge else mod
