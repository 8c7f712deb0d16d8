"""Relay's MergeComposite order for legacy pattern tables.

TVM v0.19's ``MergeComposite`` (src/relay/transforms/merge_composite.cc) applies a
table's entries one after another, each over the whole graph.  For one entry,
``PatternGrouper::VisitExprs`` (src/relay/ir/dataflow_matcher.cc) walks the graph
from the outputs back and, at each node not yet grouped, matches the whole pattern
(an ``AltPattern`` tries its left branch, then its right, at that root); the
partitioner then calls the entry's check once per group, on its root, in post order.

``FuseOpsByPattern`` walks bindings forward instead, and a legacy entry reaches it as
one pattern per choice of its alternatives (:func:`.legacy_patterns.expand_alternatives`),
each applied over the whole graph: ``conv2d.optional(relu)`` would give every conv2d
to the bare-conv2d choice before the relu choice is tried, and of two overlapping
matches the first one forward would win.  So, per legacy entry, the groups are chosen
here the way Relay chose them, and ``FuseOpsByPattern`` is only allowed to form those:

1. probe: each choice's pattern is run through ``FuseOpsByPattern`` with a check that
   records where it matches (the very contexts the real run gives) and accepts nothing;
2. from the last binding back, the first choice whose match passes the entry's own
   predicates (bmlib's tensor check, the Relay op names, the attributes: the user's
   check is held back) and overlaps no group taken so far takes the root;
3. the user's check runs on the chosen roots in post order; one it rejects frees its
   nodes and the walk is redone without it (README: a rejected match frees its nodes);
4. ``FuseOpsByPattern`` runs the choices with a check that accepts exactly the chosen
   roots (the user's verdicts are cached, never asked twice).
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import tvm
from tvm import relax
from tvm.relax.dpl import wildcard


class UserCheckGate:
    """The user's check inside a legacy entry's combined check, held back while
    :func:`fuse_in_table_order` only asks whether a pattern matches."""

    def __init__(self, check: Callable) -> None:
        self.check = check
        self.holding = False

    def __call__(self, view: Any) -> Any:
        return True if self.holding else self.check(view)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.holding, before = True, self.holding
        try:
            yield
        finally:
            self.holding = before


@dataclass(eq=False)
class _Entry:
    """One legacy table entry: its choices' ``FuseOpsByPattern`` items, left first."""
    items: list = field(default_factory=list)
    gate: Optional[UserCheckGate] = None


# combined check of a choice -> (its entry, its index): how partition_for_bmlib's flat
# table tells which items are the choices of one legacy entry.
_CHOICES: "weakref.WeakKeyDictionary[Callable, tuple[_Entry, int]]" = \
    weakref.WeakKeyDictionary()


def mark_legacy_entry(items: Sequence[tuple], gate: Optional[UserCheckGate]) -> None:
    """Record that ``items`` (``(name, pattern, annotations, check)``) are the choices of
    one legacy entry, in Relay's left-first order."""
    entry = _Entry(list(items), gate)
    for index, item in enumerate(items):
        _CHOICES[item[3]] = (entry, index)


def _choice_of(item: Any) -> Optional[tuple[_Entry, int]]:
    check = item[3] if isinstance(item, (tuple, list)) and len(item) == 4 else None
    try:
        return _CHOICES.get(check) if check is not None else None
    except TypeError:  # an unhashable check
        return None


def _fuse(mod: tvm.IRModule, items: Sequence[tuple], annotate_codegen: bool) -> tvm.IRModule:
    return relax.transform.FuseOpsByPattern(list(items), bind_constants=False,
                                            annotate_codegen=annotate_codegen)(mod)


def fuse_in_table_order(mod: tvm.IRModule, table: Sequence[Any],
                        annotate_codegen: bool) -> tvm.IRModule:
    """``FuseOpsByPattern(table)``, with each legacy entry's groups chosen as Relay's
    MergeComposite chose them.  A table without legacy entries is one plain run."""
    if not any(_choice_of(item) for item in table):
        return _fuse(mod, table, annotate_codegen)
    for legacy, items in _chunks(table):
        mod = _fuse_entry(mod, legacy) if legacy is not None else _fuse(mod, items, False)
    # FuseOpsByPattern wraps composites for their codegen after all its patterns ran.
    return _fuse(mod, [], True) if annotate_codegen else mod


def _chunks(table: Sequence[Any]) -> Iterator[tuple[Optional[_Entry], list]]:
    """Runs of other items, and each legacy entry, in table order."""
    plain: list = []
    done: set = set()
    for item in table:
        choice = _choice_of(item)
        if choice is None:
            plain.append(item)
            continue
        if id(choice[0]) in done:
            continue
        if plain:
            yield None, plain
            plain = []
        done.add(id(choice[0]))
        yield choice[0], choice[0].items
    if plain:
        yield None, plain


def _fuse_entry(mod: tvm.IRModule, entry: _Entry) -> tvm.IRModule:
    chosen = _choose_groups(mod, entry)

    def only_chosen(index: int) -> Callable:
        def check(context) -> bool:
            return chosen.get(_root_var(context)) == index
        return check

    items = [(name, pattern, annotated, only_chosen(index))
             for index, (name, pattern, annotated, _) in enumerate(entry.items)]
    return _fuse(mod, items, False)


def _root_var(context) -> relax.Var:
    return context.value_to_bound_var[context.matched_expr]


def _choose_groups(mod: tvm.IRModule, entry: _Entry) -> dict:
    """Root binding var -> index of the choice that groups there, as Relay grouped."""
    order = _binding_order(mod)
    matches = _probe_matches(mod, entry)
    verdicts: dict = {}  # (index, root var) -> the user's check, asked once
    while True:
        chosen = _walk_back(matches, order, len(entry.items), verdicts)
        pending = sorted((root for root, index in chosen.items()
                          if (index, root) not in verdicts), key=order.__getitem__)
        if not pending:
            return chosen
        for root in pending:  # post order, as v0.19's PatternPartitioner asked
            index = chosen[root]
            verdicts[(index, root)] = bool(entry.items[index][3](matches[(index, root)]))


def _walk_back(matches: dict, order: dict, count: int, verdicts: dict) -> dict:
    """From the last binding back, the first choice (left first) matching at a root that
    overlaps no group taken so far and that the user's check did not reject."""
    roots = sorted({root for _, root in matches}, key=order.__getitem__, reverse=True)
    claimed: set = set()
    chosen: dict = {}
    for root in roots:
        if root in claimed:
            continue
        for index in range(count):
            context = matches.get((index, root))
            if context is None or verdicts.get((index, root)) is False:
                continue
            members = {root, *context.matched_bindings.keys()}
            if members & claimed:
                continue
            chosen[root] = index
            claimed |= members
            break
    return chosen


def _binding_order(mod: tvm.IRModule) -> dict:
    """Every call binding's var -> its place in ``FuseOpsByPattern``'s forward walk."""
    order: dict = {}

    def record(context) -> bool:
        order.setdefault(_root_var(context), len(order))
        return False

    _fuse(mod, [("order_probe", wildcard(), {}, record)], False)
    return order


def _probe_matches(mod: tvm.IRModule, entry: _Entry) -> dict:
    """(choice index, root var) -> the check context ``FuseOpsByPattern`` gives there, for
    the matches that pass the entry's predicates other than the user's check."""
    matches: dict = {}
    for index, (name, pattern, annotated, check) in enumerate(entry.items):
        def probe(context, index=index, check=check) -> bool:
            with entry.gate.held() if entry.gate is not None else contextlib.nullcontext():
                if check(context):
                    matches[(index, _root_var(context))] = context
            return False

        _fuse(mod, [(name, pattern, annotated, probe)], False)
    return matches
