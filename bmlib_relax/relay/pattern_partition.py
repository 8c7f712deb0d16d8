"""Partitioning and rewriting Relay expressions with DFPatterns, as Relay v0.19 did.

Both start by *grouping* the matches (:class:`PatternGrouper`): nodes are tried
from the outputs backwards, and a match becomes a group unless

* one of its interior nodes (not an input, op, function or constant) already
  belongs to an earlier group (overlapping matches), or
* an interior node feeds a node outside the match that the match's root does
  not dominate (fusing it would create a cycle).

A group's inputs are the nodes matched by the pattern's leaves (in pattern
order, each once; constants matched by ``is_constant()``/``is_expr(const)`` are
embedded instead, and nodes matched inside a function pattern or on a
dominator's fuzzy path are not inputs).  Its function's ``PartitionedFromPattern``
name lists the matched nodes in post order (``nn.conv2d_nn.bias_add_``).

``partition`` replaces each group root by a call of its function; ``rewrite``
calls a user callback at each root and repeats until nothing changes (at most
100 passes, as Relay).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Mapping, Optional

from ..errors import BmlibError
from . import ast as A
from . import dataflow_pattern as P
from .analysis import children, free_vars, post_order_list, structural_equal
from .pattern_graph import IndexedGraph, expr_graph, pattern_graph
from .pattern_matcher import DFPatternMatcher, PatternMatchError
from .rewrite import rebuild

PARTITIONED_FROM_PATTERN = "PartitionedFromPattern"
MAX_REWRITE_PASSES = 100


class PatternRewriteError(BmlibError, RuntimeError):
    """A rewrite did not settle or a callback returned something that is not an expression."""


@dataclasses.dataclass
class Group:
    """One accepted match: its root, node map, inputs and extracted function."""

    gid: int
    root: A.Expr
    matched: dict  # pattern -> [matched pre-rewrite nodes]
    args: list  # input expressions (pre-rewrite), in parameter order
    function: A.Function
    name: str


def _name_part(e: A.Expr) -> str:
    """This node's contribution to ``PartitionedFromPattern`` (Relay's MatchExtractor)."""
    if isinstance(e, A.Call):
        return e.op.name + "_" if isinstance(e.op, A.Op) else "Call_"
    if isinstance(e, A.Tuple):
        return "Tuple_"
    if isinstance(e, A.Function):
        return "Function"
    if isinstance(e, A.Let):
        return "Let_"
    if isinstance(e, A.If):
        return "If_"
    if isinstance(e, A.TupleGetItem):
        return f"TupleGetItem{e.index}_"
    if isinstance(e, A.Match):
        return "Match_"
    return ""


def _extract(root: A.Expr, inputs: Mapping[int, A.Var]) -> tuple[A.Expr, str, dict[int, Any]]:
    """``root`` with its inputs replaced by parameters, its ``PartitionedFromPattern`` name,
    and ``id(pre node) -> new node`` for every node of the match (inputs excluded).

    Nodes are visited in Relay's ExprMutator order (callee before arguments), so
    names list the matched ops as Relay spelled them.
    """
    order: list[A.Expr] = []
    seen: set[int] = set()
    stack: list[tuple[A.Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen or id(node) in inputs:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for kid in reversed(children(node)):
            if id(kid) not in seen and id(kid) not in inputs:
                stack.append((kid, False))
    memo: dict[int, Any] = {}

    def mapped(child: A.Expr) -> A.Expr:
        var = inputs.get(id(child))
        return var if var is not None else memo.get(id(child), child)

    name: list[str] = []
    for node in order:
        if id(node) not in memo:
            memo[id(node)] = rebuild(node, mapped)
            name.append(_name_part(node))
    return mapped(root), "".join(name), memo


class PatternGrouper:
    """Finds the non-overlapping, valid matches of one pattern in one expression."""

    def __init__(self) -> None:
        self.groups: dict[int, Group] = {}
        self.gid_of: dict[int, int] = {}  # id(pre node) -> group id
        self.gid = 0
        self.graph_number = 0

    def group_matches(self, pattern: P.DFPattern, pre: A.Expr) -> dict[int, Group]:
        self.pattern = pattern
        self.pattern_graph = pattern_graph(pattern)
        self.graph: IndexedGraph = expr_graph(pre)
        self.matcher = DFPatternMatcher(pre, self.graph)
        pre_partitioned: set[int] = set()
        for node in reversed(self.graph.nodes):
            current = node.ref
            if id(current) in self.gid_of:
                continue
            if isinstance(current, A.Function) and PARTITIONED_FROM_PATTERN in current.attrs:
                pre_partitioned.add(id(current))
                pre_partitioned.update(id(n) for n in post_order_list(current.body))
            if id(current) not in pre_partitioned and self.matcher.match(pattern, current):
                self._create_group(current)
        return self.groups

    def _fuzzy_matches(self, node_map: dict) -> set[int]:
        """Nodes matched on a dominator's parent/path or inside a function pattern."""
        fuzzy: set[int] = set()
        for pnode in self.pattern_graph.nodes:
            p = pnode.ref
            if isinstance(p, P.DominatorPattern):
                for sub in (p.parent, p.path):
                    fuzzy.update(id(m) for m in node_map.get(sub, ()))
            if isinstance(p, P.FunctionPattern):
                for func in node_map.get(p, ()):
                    fuzzy.update(id(n) for n in post_order_list(func.body))
        return fuzzy

    def _embed_const(self, e: Any, p: P.DFPattern) -> bool:
        if not isinstance(e, A.Constant):
            return False
        if isinstance(p, P.ConstantPattern):
            return True
        if isinstance(p, P.ExprPattern):
            return isinstance(p.expr, A.Constant)
        if isinstance(p, P.AltPattern):
            branch = p.left if self.matcher.match(p.left, e) else p.right
            return self._embed_const(e, branch)
        return False

    def _create_group(self, root: A.Expr) -> None:
        node_map = {p: list(v) for p, v in self.matcher.memo.items()}
        fuzzy = self._fuzzy_matches(node_map)
        inputs: dict[int, A.Var] = {}
        args: list[A.Expr] = []
        params: list[A.Var] = []

        def make_input(e: Any, p: P.DFPattern) -> None:
            if id(e) in fuzzy or isinstance(e, (A.Op, A.Function)) or id(e) in inputs:
                return
            if self._embed_const(e, p):
                return
            var = A.Var(f"FunctionVar_{self.graph_number}_{len(params)}")
            inputs[id(e)] = var
            args.append(e)
            params.append(var)

        for pnode in self.pattern_graph.nodes:
            p = pnode.ref
            matches = node_map.get(p, ())
            if isinstance(p, P.TuplePattern) and p.fields is None:
                for m in matches:
                    for f in m.fields:
                        make_input(f, p)
            elif isinstance(p, P.CallPattern) and p.args is None:
                for m in matches:
                    for a in m.args:
                        make_input(a, p)
            elif not pnode.inputs:
                for m in matches:
                    make_input(m, p)
        self.graph_number += 1

        body, name, memo = _extract(root, inputs)
        function = A.Function(tuple(params), body)
        root_node = self.graph.node(root)
        for key in memo:
            node = self.graph.get_by_id(key)
            e = node.ref
            if isinstance(e, (A.Op, A.Function, A.Constant)):
                continue
            if id(e) in self.gid_of:
                return  # overlaps an earlier match
            if e is root:
                continue
            for out in node.outputs:
                if id(out.ref) not in memo and not root_node.dominates(out):
                    return  # an intermediate escapes the match: fusing would make a cycle
        self.gid += 1
        for key in memo:
            self.gid_of[key] = self.gid
        self.groups[self.gid] = Group(self.gid, root, node_map, args, function, name)


def _check_expr(where: str, expr: Any) -> None:
    if not isinstance(expr, A.Expr):
        hint = " (use .astuple() for a tuple result)" if hasattr(expr, "astuple") else ""
        raise PatternMatchError(f"{where}: expected a Relay expression, got "
                                f"{type(expr).__name__}{hint}")


def _mutate(pre: A.Expr, at_root: Callable[[A.Expr, A.Expr, dict], Optional[A.Expr]]) -> A.Expr:
    """Post-order rebuild of ``pre``; ``at_root(pre_node, post_node, memo)`` may replace."""
    memo: dict[int, Any] = {}
    for node in post_order_list(pre):
        post = rebuild(node, lambda c: memo.get(id(c), c))
        replaced = at_root(node, post, memo)
        memo[id(node)] = post if replaced is None else replaced
    return memo[id(pre)]


def partition_pattern(pattern: P.DFPattern, expr: A.Expr,
                      attrs: Optional[Mapping[str, Any]] = None,
                      check: Optional[Callable[[A.Expr], bool]] = None) -> A.Expr:
    """See :func:`bmlib_relax.relay.dataflow_pattern.partition`."""
    if not isinstance(pattern, P.DFPattern):
        raise PatternMatchError(f"partition: expected a DFPattern, got {type(pattern).__name__}")
    _check_expr("partition", expr)
    if isinstance(pattern, P.FunctionPattern):
        warnings.warn("partitioning a function that is not called does not make sense; "
                      "the expression is returned unchanged", stacklevel=3)
        return expr
    grouper = PatternGrouper()
    groups = grouper.group_matches(pattern, expr)
    extra = dict(attrs or {})

    def at_root(pre: A.Expr, post: A.Expr, memo: dict) -> Optional[A.Expr]:
        gid = grouper.gid_of.get(id(pre))
        if gid is None or groups[gid].root is not pre:
            return None
        if check is not None and not check(pre):
            return None
        group = groups[gid]
        func = dataclasses.replace(
            group.function,
            attrs=A.Attrs({**group.function.attrs, PARTITIONED_FROM_PATTERN: group.name, **extra}))
        return A.Call(func, tuple(memo.get(id(a), a) for a in group.args))

    return _mutate(expr, at_root)


def _infer_with_module(expr: A.Expr, mod: Optional[A.IRModule]) -> None:
    """Type-check ``expr`` in place next to ``mod``'s functions (Relay's require_type)."""
    from .transform import InferType

    functions = dict(mod.functions) if mod is not None else {}
    name, index = "_tmp", 0
    while name in functions:
        index += 1
        name = f"_tmp{index}"
    func = expr if isinstance(expr, A.Function) else A.Function(tuple(free_vars(expr)), expr)
    functions[name] = func
    InferType()(A.IRModule(functions, mod.type_definitions if mod is not None else None))


def rewrite_patterns(callbacks: list, expr: A.Expr, mod: Optional[A.IRModule] = None) -> A.Expr:
    """See :func:`bmlib_relax.relay.dataflow_pattern.rewrite`."""
    _check_expr("rewrite", expr)
    for cb in callbacks:
        if not isinstance(getattr(cb, "pattern", None), P.DFPattern):
            raise PatternRewriteError(f"rewrite: {type(cb).__name__}.pattern is not a DFPattern "
                                      f"(set self.pattern in __init__)")
    post = expr
    count = 0
    done: set[int] = set()
    while True:
        last = post
        for cb in callbacks:
            if id(cb) in done:
                continue
            before = post
            if cb.require_type:
                _infer_with_module(post, mod)
            grouper = PatternGrouper()
            groups = grouper.group_matches(cb.pattern, post)
            post = _mutate(post, _callback_at_root(cb, grouper, groups))
            count += 1
            if cb.rewrite_once and not structural_equal(before, post, map_free_vars=False):
                done.add(id(cb))
        if structural_equal(last, post, map_free_vars=False) or count >= MAX_REWRITE_PASSES:
            break
    if count >= MAX_REWRITE_PASSES:
        raise PatternRewriteError(f"observed {MAX_REWRITE_PASSES} rewrite passes without a "
                                  "fixed point: do the callbacks undo each other?")
    return post


def _callback_at_root(cb: Any, grouper: PatternGrouper, groups: dict) -> Callable:
    def at_root(pre: A.Expr, post: A.Expr, memo: dict) -> Optional[A.Expr]:
        gid = grouper.gid_of.get(id(pre))
        if gid is None or groups[gid].root is not pre:
            return None
        node_map = {p: [memo.get(id(m), m) for m in ms] for p, ms in groups[gid].matched.items()}
        out = cb.callback(pre, post, node_map)
        if isinstance(out, P.DFPattern) or not isinstance(out, A.Expr):
            from .op._make import TupleWrapper

            if isinstance(out, TupleWrapper):
                return out.astuple()
            raise PatternRewriteError(f"{type(cb).__name__}.callback returned "
                                      f"{type(out).__name__}, not a Relay expression")
        return out
    return at_root
