"""Graph analyses over the Relay AST: traversal, free variables, structural equality.

All functions here are *iterative* (explicit stacks): parsed models are DAGs with
24k-deep ``let`` chains or dataflow chains, far beyond Python's recursion limit.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional, Union

import numpy as np

from . import ast as A

__all__ = ["children", "post_order", "post_order_list", "free_vars", "bound_vars", "structural_equal"]


def _match_children(expr: A.Match) -> tuple[A.Expr, ...]:
    out: list[A.Expr] = [expr.data]
    for clause in expr.clauses:
        out.extend(pattern_vars(clause.lhs))
        out.append(clause.rhs)
    return tuple(out)


def _no_children(expr: A.Expr) -> tuple[A.Expr, ...]:
    return ()


#: Node class -> its direct sub-expressions (dispatch table: traversals of
#: 10^5-node graphs call this once per node).
_CHILDREN = {
    A.Call: lambda e: (e.op,) + e.args,
    A.TupleGetItem: lambda e: (e.tuple_value,),
    A.Tuple: lambda e: e.fields,
    A.Let: lambda e: (e.var, e.value, e.body),
    A.Function: lambda e: e.params + (e.body,),
    A.If: lambda e: (e.cond, e.true_branch, e.false_branch),
    A.Match: _match_children,
    A.RefCreate: lambda e: (e.value,),
    A.RefRead: lambda e: (e.ref,),
    A.RefWrite: lambda e: (e.ref, e.value),
    A.Var: _no_children, A.GlobalVar: _no_children, A.Op: _no_children,
    A.Constant: _no_children, A.MetaRef: _no_children, A.Constructor: _no_children,
}


def children(expr: A.Expr) -> tuple[A.Expr, ...]:
    """Direct sub-expressions of ``expr`` in evaluation (left-to-right) order.

    Binders (function params, let vars, pattern vars) are included, before the
    expressions they scope over.
    """
    fn = _CHILDREN.get(type(expr))
    if fn is None:
        for cls, fn in _CHILDREN.items():  # subclasses of node classes
            if isinstance(expr, cls):
                return fn(expr)
        return ()
    return fn(expr)


def pattern_vars(pattern: A.Pattern) -> list[A.Var]:
    """Variables bound by a match pattern, left to right."""
    out: list[A.Var] = []
    stack = [pattern]
    while stack:
        p = stack.pop()
        if isinstance(p, A.PatternVar):
            out.append(p.var)
        elif isinstance(p, (A.PatternConstructor, A.PatternTuple)):
            stack.extend(reversed(p.patterns))
    return out


def post_order(expr: A.Expr) -> Iterator[A.Expr]:
    """Iterate over every distinct node reachable from ``expr`` once, children first.

    Nodes are visited left to right, so for a dataflow graph the order is a valid
    evaluation (topological) order.  The order is computed eagerly (one list),
    which is faster than a generator for the 10^5-node graphs of model dumps.
    """
    return iter(post_order_list(expr))


def post_order_list(expr: A.Expr) -> list[A.Expr]:
    """:func:`post_order` as a list."""
    out: list[A.Expr] = []
    emit = out.append
    done: set[int] = set()
    expanded: set[int] = set()
    stack: list[A.Expr] = [expr]
    push = stack.append
    pop = stack.pop
    get = _CHILDREN.get
    while stack:
        node = pop()
        key = id(node)
        if key in done:
            continue
        if key in expanded:
            done.add(key)
            emit(node)
            continue
        fn = get(type(node))
        kids = fn(node) if fn is not None else children(node)
        if not kids:
            done.add(key)
            emit(node)
            continue
        expanded.add(key)
        push(node)
        for i in range(len(kids) - 1, -1, -1):
            child = kids[i]
            if id(child) not in done:
                push(child)
    return out


def nesting_depth(expr: A.Expr) -> int:
    """How deep ``if`` branches, function bodies, match arms and let-bound values nest
    in ``expr`` (a let chain's body does not nest: the importer walks it in a loop).
    Computed without recursion, for a program too deep to walk recursively."""
    depth: dict[int, int] = {}
    for node in post_order_list(expr):
        inner = [depth.get(id(c), 0) for c in children(node)]
        if isinstance(node, A.If):
            value = max(depth.get(id(node.cond), 0), depth.get(id(node.true_branch), 0) + 1,
                        depth.get(id(node.false_branch), 0) + 1)
        elif isinstance(node, A.Let):
            value = max(depth.get(id(node.value), 0) + 1, depth.get(id(node.body), 0))
        elif isinstance(node, (A.Function, A.Match)):
            value = max(inner, default=0) + 1
        else:
            value = max(inner, default=0)
        depth[id(node)] = value
    return depth.get(id(expr), 0)


def _binders(node: A.Expr) -> tuple[A.Var, ...]:
    if isinstance(node, A.Function):
        return node.params
    if isinstance(node, A.Let):
        return (node.var,)
    if isinstance(node, A.Match):
        return tuple(v for clause in node.clauses for v in pattern_vars(clause.lhs))
    return ()


def bound_vars(expr: A.Expr) -> list[A.Var]:
    """Variables bound inside ``expr`` (params, let binders, pattern vars)."""
    out: list[A.Var] = []
    for node in post_order_list(expr):
        if isinstance(node, (A.Function, A.Let, A.Match)):
            out.extend(_binders(node))
    return out


def free_vars(expr: A.Expr) -> list[A.Var]:
    """Variables used in ``expr`` but not bound in it, in order of first occurrence
    (left to right; the post-order walk meets leaves in textual order)."""
    return free_vars_of_nodes(post_order_list(expr))


def free_vars_of_nodes(nodes: list[A.Expr]) -> list[A.Var]:
    """:func:`free_vars` of the graph whose :func:`post_order_list` is ``nodes``."""
    bound: set[int] = set()
    for node in nodes:
        if isinstance(node, (A.Function, A.Let, A.Match)):
            bound.update(id(v) for v in _binders(node))
    out: list[A.Var] = []
    for node in nodes:
        if isinstance(node, A.Var) and id(node) not in bound:
            bound.add(id(node))
            out.append(node)
    return out


# ---------------------------------------------------------------------- equality
def _attr_equal(a: Any, b: Any) -> bool:
    """Attribute values equal (nested tuples compared with a stack, not recursion)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, A.MetaRef) or isinstance(y, A.MetaRef):
            if not (isinstance(x, A.MetaRef) and isinstance(y, A.MetaRef)
                    and x.kind == y.kind and x.index == y.index):
                return False
        elif isinstance(x, tuple) or isinstance(y, tuple):
            if not (isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y)):
                return False
            stack.extend(zip(x, y))
        elif isinstance(x, float) and isinstance(y, float) and x != x and y != y:
            continue  # NaN
        elif isinstance(x, float) and isinstance(y, float) and abs(x - y) < 1e-9:
            continue  # TVM's structural equality compares float attributes with atol 1e-9
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _attrs_equal(a: A.Attrs, b: A.Attrs) -> bool:
    if set(a) != set(b):
        return False
    return all(_attr_equal(a[k], b[k]) for k in a)


def _array_equal(a: Optional[np.ndarray], b: Optional[np.ndarray]) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.ndim == 0:  # literals: skip the array_equal machinery
        x, y = a.item(), b.item()
        return x == y or (x != x and y != y)
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


class _Equal:
    """Worklist comparison of two graphs with a positional variable mapping."""

    def __init__(self, map_free_vars: bool = True) -> None:
        self.map_free_vars = map_free_vars
        self.var_map: dict[int, A.Var] = {}
        self.rev_map: dict[int, A.Var] = {}
        self.done: set[tuple[int, int]] = set()
        self.work: list[tuple[Any, Any]] = []

    def map_var(self, a: A.Var, b: A.Var) -> bool:
        got = self.var_map.get(id(a))
        if got is not None:
            return got is b
        if id(b) in self.rev_map:
            return False
        if a.type_annotation != b.type_annotation or not _attrs_equal(a.attrs, b.attrs):
            return False
        self.var_map[id(a)] = b
        self.rev_map[id(b)] = a
        return True

    def map_pattern(self, a: A.Pattern, b: A.Pattern) -> bool:
        stack = [(a, b)]
        while stack:
            x, y = stack.pop()
            if type(x) is not type(y):
                return False
            if isinstance(x, A.PatternVar):
                if not self.map_var(x.var, y.var):
                    return False
            elif isinstance(x, A.PatternConstructor):
                if x.constructor.name != y.constructor.name or len(x.patterns) != len(y.patterns):
                    return False
                stack.extend(zip(x.patterns, y.patterns))
            elif isinstance(x, A.PatternTuple):
                if len(x.patterns) != len(y.patterns):
                    return False
                stack.extend(zip(x.patterns, y.patterns))
        return True

    def push(self, a: Any, b: Any) -> None:
        self.work.append((a, b))

    def run(self, a: A.Expr, b: A.Expr) -> bool:
        self.push(a, b)
        work = self.work
        while work:
            x, y = work.pop()
            if x is y and not isinstance(x, A.Var):
                # Shared sub-graphs still need their binders mapped; only skip leaves.
                if not children(x):
                    continue
            key = (id(x), id(y))
            if key in self.done:
                continue
            self.done.add(key)
            if not self.node_equal(x, y):
                return False
        return True

    def node_equal(self, x: A.Expr, y: A.Expr) -> bool:
        """Compare the local fields of ``x``/``y`` and queue their children."""
        if type(x) is not type(y):
            return False
        push = self.push
        if isinstance(x, A.Var):
            if not self.map_free_vars and id(x) not in self.var_map:
                return x is y  # a free variable (binders are mapped before their uses)
            return self.map_var(x, y)
        if isinstance(x, A.Call):
            # type_args of an op call are derived by InferType (Relay's parser ran it, ours
            # does not): they differ only when both sides carry them.
            if len(x.args) != len(y.args) or not _attrs_equal(x.attrs, y.attrs) or \
                    (x.type_args and y.type_args and x.type_args != y.type_args):
                return False
            for p, q in zip(reversed(x.args), reversed(y.args)):
                push(p, q)
            push(x.op, y.op)
            return True
        if isinstance(x, A.TupleGetItem):
            if x.index != y.index:
                return False
            push(x.tuple_value, y.tuple_value)
            return True
        if isinstance(x, A.Tuple):
            if len(x.fields) != len(y.fields):
                return False
            for p, q in zip(reversed(x.fields), reversed(y.fields)):
                push(p, q)
            return True
        if isinstance(x, (A.Op, A.GlobalVar, A.Constructor)):
            return x.name == y.name
        if isinstance(x, A.Constant):
            if x.data is None and y.data is None:
                return x.meta_index == y.meta_index and x.type_annotation == y.type_annotation
            return _array_equal(x.data, y.data)
        if isinstance(x, A.MetaRef):
            return x.kind == y.kind and x.index == y.index
        if isinstance(x, A.Let):
            if not self.map_var(x.var, y.var):
                return False
            push(x.body, y.body)
            push(x.value, y.value)
            return True
        if isinstance(x, A.Function):
            if len(x.params) != len(y.params) or x.ret_type != y.ret_type \
                    or x.type_params != y.type_params or not _attrs_equal(x.attrs, y.attrs):
                return False
            for p, q in zip(x.params, y.params):
                if not self.map_var(p, q):
                    return False
            push(x.body, y.body)
            return True
        if isinstance(x, A.If):
            push(x.false_branch, y.false_branch)
            push(x.true_branch, y.true_branch)
            push(x.cond, y.cond)
            return True
        if isinstance(x, A.Match):
            if x.complete != y.complete or len(x.clauses) != len(y.clauses):
                return False
            for c, d in zip(x.clauses, y.clauses):
                if not self.map_pattern(c.lhs, d.lhs):
                    return False
            for c, d in zip(reversed(x.clauses), reversed(y.clauses)):
                push(c.rhs, d.rhs)
            push(x.data, y.data)
            return True
        if isinstance(x, A.RefCreate):
            push(x.value, y.value)
            return True
        if isinstance(x, A.RefRead):
            push(x.ref, y.ref)
            return True
        if isinstance(x, A.RefWrite):
            push(x.value, y.value)
            push(x.ref, y.ref)
            return True
        raise TypeError(f"structural_equal: unsupported node {type(x).__name__}")


def _type_data_equal(a: A.TypeData, b: A.TypeData) -> bool:
    return (a.name == b.name and a.type_params == b.type_params
            and len(a.constructors) == len(b.constructors)
            and all(c.name == d.name and c.inputs == d.inputs
                    for c, d in zip(a.constructors, b.constructors)))


def structural_equal(a: Union[A.Expr, A.IRModule, A.Type],
                     b: Union[A.Expr, A.IRModule, A.Type], map_free_vars: bool = True) -> bool:
    """Graph-aware structural equality ignoring spans and variable names.

    Variables are matched positionally at their binders (free variables on first
    encounter, or only to themselves with ``map_free_vars=False`` as Relay's
    ``StructuralEqual`` default does); constants compare by dtype, shape and value;
    modules compare their function and type definitions by name; lists/tuples compare
    element by element.
    """
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        # Arrays of nodes or dims (a pattern's shape, call arguments): element by element.
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and \
            len(a) == len(b) and all(structural_equal(x, y, map_free_vars) for x, y in zip(a, b))
    if not isinstance(a, (A.Expr, A.IRModule, A.Type)) and \
            not isinstance(b, (A.Expr, A.IRModule, A.Type)):
        return _attr_equal(getattr(a, "value", a), getattr(b, "value", b))  # ints, IntImm dims
    if isinstance(a, A.IRModule) or isinstance(b, A.IRModule):
        if not (isinstance(a, A.IRModule) and isinstance(b, A.IRModule)):
            return False
        if set(a.functions) != set(b.functions) or \
                set(a.type_definitions) != set(b.type_definitions):
            return False
        if not all(_type_data_equal(a.type_definitions[k], b.type_definitions[k])
                   for k in a.type_definitions):
            return False
        return all(_Equal().run(a.functions[k], b.functions[k]) for k in a.functions)
    if isinstance(a, A.Type) or isinstance(b, A.Type):
        return a == b
    return _Equal(map_free_vars).run(a, b)


def _without_gc(func):
    """Pause the cyclic GC around ``func``: these walks allocate ~10^6 short-lived
    tuples, which otherwise trigger many useless generational collections."""
    import functools
    import gc

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()
    return wrapper


structural_equal = _without_gc(structural_equal)
post_order_list = _without_gc(post_order_list)
free_vars = _without_gc(free_vars)
bound_vars = _without_gc(bound_vars)
