"""The call graph of a module's Relax functions, read once for every question about it.

Two places ask about it: the recursion guard (which functions lie on a call cycle, and
which reach one, see :mod:`.recursion_guard`) and the report (how often each function
runs per call of ``main``, whether a call can recurse, see :mod:`..report`).  Both walk
the same edges: a ``relax.Call`` whose op is a ``GlobalVar`` of another Relax function.
Functions are named by their ``name_hint`` (unique in a module); the counts are call
sites, so two calls of ``@f`` in ``@g``'s body are two edges' worth of runs.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Optional

import tvm
from tvm import relax

#: ``{function: Counter(callee: call sites)}``
CallGraph = dict[str, Counter]


def call_graph(mod: tvm.IRModule,
               skip: Optional[Callable[[relax.Function], bool]] = None) -> CallGraph:
    """The call sites of every Relax function of ``mod`` (but those ``skip`` names):
    only calls of functions that are in the graph themselves count."""
    functions = {gv.name_hint: func for gv, func in mod.functions.items()
                 if isinstance(func, relax.Function) and not (skip and skip(func))}
    graph: CallGraph = {}
    for name, func in functions.items():
        sites: Counter = Counter()

        def visit(expr, sites=sites):
            if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and \
                    expr.op.name_hint in functions:
                sites[expr.op.name_hint] += 1

        relax.analysis.post_order_visit(func, visit)
        graph[name] = sites
    return graph


def on_cycles(graph: CallGraph) -> set[str]:
    """The functions that lie on a call cycle (call themselves, directly or not)."""
    found = set()
    for start in graph:
        seen, stack = set(), list(graph[start])
        while stack:
            name = stack.pop()
            if name == start:
                found.add(start)
                break
            if name not in seen:
                seen.add(name)
                stack.extend(graph[name])
    return found


def reaching(graph: CallGraph, targets: set[str]) -> set[str]:
    """``targets`` and every function that calls one of them, directly or not."""
    found = set(targets)
    changed = True
    while changed:
        changed = False
        for name, sites in graph.items():
            if name not in found and any(callee in found for callee in sites):
                found.add(name)
                changed = True
    return found


def callees_first(graph: CallGraph, entry: str) -> tuple[list[str], set[tuple[str, str]]]:
    """The functions ``entry`` reaches, callees before callers, and the call edges that
    close a cycle (``(caller, callee)``: recursion).  Iterative: a chain of calls as
    deep as the model's functions are many needs no Python stack."""
    order: list[str] = []
    back_edges: set[tuple[str, str]] = set()
    if entry not in graph:
        return order, back_edges
    state = {entry: 1}  # 1: on the current path, 2: done
    stack = [(entry, iter(graph[entry]))]
    while stack:
        name, callees = stack[-1]
        callee = next(callees, None)
        if callee is None:
            stack.pop()
            state[name] = 2
            order.append(name)
        elif state.get(callee) == 1:
            back_edges.add((name, callee))
        elif callee not in state:
            state[callee] = 1
            stack.append((callee, iter(graph[callee])))
    return order, back_edges
