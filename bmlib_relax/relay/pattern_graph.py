"""Indexed dataflow graphs with a post-dominator tree, for the DFPattern machinery.

Relay's pattern matcher reasons about an expression (and a pattern) as a DAG:
every node gets a post-DFS index, its dataflow inputs and outputs, and its
*dominator parent* -- the nearest node through which every path from it to the
result passes.  Dominator patterns, and the partitioner's "does an intermediate
escape the match?" rule, are answered on this tree.

Dataflow edges follow Relay: a call's callee and arguments flow into the call, a
let-bound value flows into its variable (so a use of the variable depends on the
value) and the let body into the let, a function's body into the function (its
parameters have no producer), a match's data into its pattern variables.
All walks are iterative (model graphs are deeper than Python's recursion limit).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from . import ast as A
from .analysis import pattern_vars


class GraphNode:
    """One node of an :class:`IndexedGraph` (``ref`` is the expression or pattern)."""

    __slots__ = ("ref", "index", "inputs", "outputs", "is_external", "depth",
                 "dominator_parent", "dominator_children")

    def __init__(self, ref: Any, index: int):
        self.ref = ref
        self.index = index
        self.inputs: list[GraphNode] = []
        self.outputs: list[GraphNode] = []
        self.is_external = False
        self.depth = 0
        self.dominator_parent: Optional[GraphNode] = None
        self.dominator_children: list[GraphNode] = []

    def dominates(self, other: "GraphNode") -> bool:
        """True if every dataflow path from ``other`` to the result passes through self
        (``other`` is a strict descendant of self in the dominator tree)."""
        stack = [self]
        seen: set[int] = set()
        while stack:
            current = stack.pop()
            for node in current.dominator_children:
                if id(node) in seen:
                    continue
                if node is other:
                    return True
                seen.add(id(node))
                stack.append(node)
        return False

    def __repr__(self) -> str:
        return f"<GraphNode {self.index} {type(self.ref).__name__}>"


class IndexedGraph:
    """Nodes in post-DFS (topological) order, their edges and dominator tree."""

    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []
        self._by_id: dict[int, GraphNode] = {}

    def add(self, ref: Any) -> GraphNode:
        node = GraphNode(ref, len(self.nodes))
        self.nodes.append(node)
        self._by_id[id(ref)] = node
        return node

    def node(self, ref: Any) -> GraphNode:
        return self._by_id[id(ref)]

    def get(self, ref: Any) -> Optional[GraphNode]:
        return self._by_id.get(id(ref))

    def get_by_id(self, key: int) -> GraphNode:
        """The node of the expression whose ``id()`` is ``key``."""
        return self._by_id[key]

    def __contains__(self, ref: Any) -> bool:
        return id(ref) in self._by_id

    def __len__(self) -> int:
        return len(self.nodes)

    def connect(self, producer: Any, consumer: GraphNode) -> None:
        node = self._by_id.get(id(producer))
        if node is not None:
            node.outputs.append(consumer)
            consumer.inputs.append(node)

    def post_dominators(self) -> None:
        """Fill depth / dominator parent / children, from the outputs backwards."""
        for current in reversed(self.nodes):
            if current.is_external:
                current.depth = 1
                current.dominator_parent = None
                continue
            parent = _common_ancestor(current.outputs)
            current.depth = parent.depth + 1 if parent is not None else 1
            current.dominator_parent = parent
            if parent is not None:
                parent.dominator_children.append(current)


def _common_ancestor(outputs: list[GraphNode]) -> Optional[GraphNode]:
    if not outputs:
        return None
    parent: Optional[GraphNode] = outputs[0]
    for other in outputs[1:]:
        lhs, rhs = parent, other
        while lhs is not rhs:
            if lhs is None or rhs is None:
                lhs = None
                break
            if lhs.depth < rhs.depth:
                rhs = rhs.dominator_parent
            elif lhs.depth > rhs.depth:
                lhs = lhs.dominator_parent
            else:
                lhs, rhs = lhs.dominator_parent, rhs.dominator_parent
        parent = lhs
        if parent is None:
            return None
    return parent


def _post_dfs(root: Any, visit_order: Callable[[Any], Iterable[Any]]) -> list[Any]:
    """Distinct nodes reachable from ``root``, each after the nodes ``visit_order``
    lists for it (a node met again while in progress -- a cycle -- is skipped)."""
    out: list[Any] = []
    state: dict[int, bool] = {}  # False: in progress, True: done
    stack: list[tuple[Any, Optional[list]]] = [(root, None)]
    while stack:
        node, kids = stack.pop()
        if kids is None:
            if id(node) in state:
                continue
            state[id(node)] = False
            kids = [k for k in visit_order(node) if k is not None]
            kids.reverse()
        if kids:
            child = kids.pop()
            stack.append((node, kids))
            if id(child) not in state:
                stack.append((child, None))
            continue
        state[id(node)] = True
        out.append(node)
    return out


# --------------------------------------------------------------------------- expressions
def _expr_visit_order(e: A.Expr) -> tuple:
    """Children in Relay's visiting order (let values before their variable)."""
    if isinstance(e, A.Call):
        return (e.op,) + e.args
    if isinstance(e, A.Tuple):
        return e.fields
    if isinstance(e, A.TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, A.Let):
        return (e.value, e.var, e.body)
    if isinstance(e, A.Function):
        return e.params + (e.body,)
    if isinstance(e, A.If):
        return (e.cond, e.true_branch, e.false_branch)
    if isinstance(e, A.Match):
        out: list = [e.data]
        for clause in e.clauses:
            out.extend(pattern_vars(clause.lhs))
            out.append(clause.rhs)
        return tuple(out)
    if isinstance(e, A.RefCreate):
        return (e.value,)
    if isinstance(e, A.RefRead):
        return (e.ref,)
    if isinstance(e, A.RefWrite):
        return (e.ref, e.value)
    return ()


def _expr_edges(graph: IndexedGraph, e: A.Expr, node: GraphNode) -> None:
    connect = graph.connect
    if isinstance(e, A.Call):
        connect(e.op, node)
        for arg in e.args:
            connect(arg, node)
    elif isinstance(e, A.Tuple):
        for f in e.fields:
            connect(f, node)
    elif isinstance(e, A.TupleGetItem):
        connect(e.tuple_value, node)
    elif isinstance(e, A.Let):
        connect(e.value, graph.node(e.var))
        connect(e.body, node)
    elif isinstance(e, A.Function):
        connect(e.body, node)
    elif isinstance(e, A.If):
        for part in (e.cond, e.true_branch, e.false_branch):
            connect(part, node)
    elif isinstance(e, A.Match):
        for clause in e.clauses:
            for var in pattern_vars(clause.lhs):
                connect(e.data, graph.node(var))
            connect(clause.rhs, node)
    elif isinstance(e, A.RefCreate):
        connect(e.value, node)
    elif isinstance(e, A.RefRead):
        connect(e.ref, node)
    elif isinstance(e, A.RefWrite):
        connect(e.ref, node)
        connect(e.value, node)


def expr_graph(root: A.Expr) -> IndexedGraph:
    """The indexed dataflow graph of ``root`` (``root`` is the external output)."""
    graph = IndexedGraph()
    for e in _post_dfs(root, _expr_visit_order):
        graph.add(e)
    for node in graph.nodes:
        _expr_edges(graph, node.ref, node)
    graph.node(root).is_external = True
    graph.post_dominators()
    return graph


# --------------------------------------------------------------------------- patterns
def _pattern_inputs(p: Any) -> tuple:
    from . import dataflow_pattern as P

    if isinstance(p, P.CallPattern):
        return (p.op,) + (p.args or ())
    if isinstance(p, P.AltPattern):
        return (p.left, p.right)
    if isinstance(p, (P.AttrPattern, P.TypePattern, P.ShapePattern, P.DataTypePattern)):
        return (p.pattern,)
    if isinstance(p, P.DominatorPattern):
        return (p.parent, p.path, p.child)
    if isinstance(p, P.FunctionPattern):
        return (p.params or ()) + (p.body,)
    if isinstance(p, P.TupleGetItemPattern):
        return (p.tuple_value,)
    if isinstance(p, P.TuplePattern):
        return p.fields or ()
    if isinstance(p, P.IfPattern):
        return (p.cond, p.true_branch, p.false_branch)
    if isinstance(p, P.LetPattern):
        return (p.var, p.value, p.body)
    if isinstance(p, P.WildcardPattern) and p.pattern is not None:
        return (p.pattern,)
    return ()


def pattern_graph(root: Any) -> IndexedGraph:
    """The indexed graph of a DFPattern (cycles through ``redirect_to`` allowed)."""
    graph = IndexedGraph()
    for p in _post_dfs(root, _pattern_inputs):
        graph.add(p)
    for node in graph.nodes:
        for child in _pattern_inputs(node.ref):
            graph.connect(child, node)
    graph.node(root).is_external = True
    graph.post_dominators()
    return graph
