"""Relay type inference (``relay.transform.InferType``) over bmlib-relax's AST.

Rather than keeping a second copy of Relay's ~200 type relations, the type of
an op call is obtained from Relax: the call is converted, alone, by the
importer's converter for that op (on Relax variables of the argument types)
and Relax's own inference gives the result.  Ops Relax has no counterpart for
register a Python relation in :data:`TYPE_RELATIONS` (next to their builder).

What Relay did beyond forward inference, and this pass does too:

* **Symbolic and ``?`` dims** (``te.var("n")``, ``relay.Any()``) are carried
  into Relax as int64 shape vars and mapped back, so ``concatenate`` of two
  ``(n, t, 100)`` tensors on axis 1 is ``(n, t + t, 100)`` in the user's vars.
* **Un-annotated variables** get their type from their use where Relay's
  relations determine it (the weight of ``nn.conv2d`` from ``channels`` and
  ``kernel_size``, ``nn.bias_add``'s bias, ``nn.dense``'s weight from
  ``units``...): :data:`ARG_TYPE_RULES`.
* **Annotations are unified** with the inferred types (:func:`unify`, v0.19's
  ``TypeSolver::Unifier``): a ``let`` variable's with its value's, a function's
  return type with its body's, an ``if``'s branches with each other and its
  condition with ``Tensor[(), bool]``, a callee's parameters with the arguments.
* **Type errors** are :class:`~bmlib_relax.errors.RelayTypeError` naming the
  call (op and source location) — never a raw TVM error.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from ..constants import tensor_constant
from ..errors import BmlibError, RelayTypeError
from . import ast as A
from .analysis import post_order_list
from .symbolic import DimMap

#: op name -> fn(arg_types, attrs, call) -> result type, for ops without a Relax converter.
TYPE_RELATIONS: dict[str, Callable[..., A.Type]] = {}

#: op name -> fn(arg_types, attrs) -> {argument index: type} for un-annotated arguments.
ARG_TYPE_RULES: dict[str, Callable[..., dict]] = {}


def register_type_relation(*op_names: str):
    """Register a Python type relation for ops Relax cannot infer."""
    def wrap(fn):
        for name in op_names:
            TYPE_RELATIONS[name] = fn
        return fn
    return wrap


# What a type rule written in Python raises on inputs it was not written for (a tuple
# where a tensor goes, groups=0, an infinite scale): each becomes a type error naming
# the call, as Relay's C++ relations reported theirs.
RULE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError)


def register_arg_type_rule(*op_names: str):
    """Register how an op determines the type of un-annotated arguments."""
    def wrap(fn):
        for name in op_names:
            ARG_TYPE_RULES[name] = fn
        return fn
    return wrap


def _where(node: object) -> Optional[str]:
    span = getattr(node, "span", None)
    return str(span) if span is not None else None


def _op_name(call: A.Call) -> str:
    op = call.op
    return op.name if isinstance(op, (A.Op, A.GlobalVar)) else type(op).__name__


def type_error(call: A.Expr, message: str) -> RelayTypeError:
    op = _op_name(call) if isinstance(call, A.Call) else type(call).__name__
    return RelayTypeError(message, op=op, location=_where(call))


# ---------------------------------------------------------------------- unification
class TypeMismatch(ValueError):
    """Two types that do not unify; the message says where they differ."""


#: Relay's bare scalar type names (``fn (%n: int) -> int``), read as 32-bit dtypes.
_BARE_SCALARS = {"int": "int32", "uint": "uint32", "float": "float32"}


def unify(lhs: Optional[A.Type], rhs: Optional[A.Type]) -> A.Type:
    """The type both ``lhs`` and ``rhs`` are, as v0.19's ``TypeSolver::Unifier``
    (src/relay/analysis/type_solver.cc) computed it, else :class:`TypeMismatch`.

    ``_`` (or no type) takes the other side; tensors need the same dtype and rank and
    dims that unify (:func:`unify_dim`); tuples the same arity, function types the same
    number of parameters, field by field.  A type variable matches anything: this
    inference does not instantiate type parameters (v0.19 did, then unified)."""
    lhs, rhs = _bare_scalar(lhs), _bare_scalar(rhs)
    if lhs is None or isinstance(lhs, A.IncompleteType):
        return rhs if rhs is not None else A.IncompleteType()
    if rhs is None or isinstance(rhs, A.IncompleteType) or isinstance(lhs, A.TypeVar):
        return lhs
    if isinstance(rhs, A.TypeVar):
        return rhs
    if isinstance(lhs, A.TensorType) and isinstance(rhs, A.TensorType):
        return _unify_tensors(lhs, rhs)
    if isinstance(lhs, A.TupleType) and isinstance(rhs, A.TupleType):
        if len(lhs.fields) != len(rhs.fields):
            raise TypeMismatch(f"a tuple of {len(lhs.fields)} field(s) does not match one "
                               f"of {len(rhs.fields)}")
        return A.TupleType(tuple(_unify_part(a, b, f"field {i}")
                                 for i, (a, b) in enumerate(zip(lhs.fields, rhs.fields))))
    if isinstance(lhs, A.FuncType) and isinstance(rhs, A.FuncType):
        return _unify_functions(lhs, rhs)
    if type(lhs) is type(rhs) and lhs == rhs:
        return lhs
    raise TypeMismatch(f"{lhs} does not match {rhs}")


def _bare_scalar(ty: Optional[A.Type]) -> Optional[A.Type]:
    if isinstance(ty, A.TypeCall) and not ty.args and ty.name in _BARE_SCALARS:
        return A.TensorType((), _BARE_SCALARS[ty.name])
    return ty


def _unify_part(lhs: A.Type, rhs: A.Type, what: str) -> A.Type:
    """:func:`unify` of a component, its mismatch prefixed with which component."""
    try:
        return unify(lhs, rhs)
    except TypeMismatch as exc:
        raise TypeMismatch(f"{what}: {exc}") from None


def _unify_tensors(lhs: A.TensorType, rhs: A.TensorType) -> A.TensorType:
    """As the Unifier's ``VisitType_(TensorTypeNode)``: dtype, rank, then each dim."""
    if lhs.dtype != rhs.dtype:
        raise TypeMismatch(f"dtype {lhs.dtype} does not match {rhs.dtype}")
    if len(lhs.shape) != len(rhs.shape):
        raise TypeMismatch(f"tensor type `{lhs}` has {len(lhs.shape)} dimensions, while "
                           f"`{rhs}` has {len(rhs.shape)} dimensions")
    dims, conflicts = [], []
    for i, (a, b) in enumerate(zip(lhs.shape, rhs.shape)):
        try:
            dims.append(unify_dim(a, b))
        except TypeMismatch:
            conflicts.append(f"dimension {i} conflicts: {_dim_text(a)} does not match "
                             f"{_dim_text(b)}")
    if conflicts:
        raise TypeMismatch("; ".join(conflicts))
    return A.TensorType(tuple(dims), lhs.dtype)


def unify_dim(lhs: Any, rhs: Any) -> Any:
    """As v0.19's ``Unifier::UnifyDim``: equal dims are that dim; ``?`` with anything is
    ``?``; a shape variable (a name or a TIR var) with a static dim is the static dim;
    anything else (two static dims, two different variables, an expression) conflicts.
    (v0.19 also substituted the bound variable elsewhere; that is not modelled here.)"""
    if A._dims_equal((lhs,), (rhs,)):
        return lhs
    if lhs is None or rhs is None:
        return None
    if _is_static(rhs) and _is_shape_var(lhs):
        return rhs
    if _is_static(lhs) and _is_shape_var(rhs):
        return lhs
    raise TypeMismatch(f"{_dim_text(lhs)} does not match {_dim_text(rhs)}")


def _is_static(dim: Any) -> bool:
    return isinstance(dim, int) and not isinstance(dim, bool)


def _is_shape_var(dim: Any) -> bool:
    return isinstance(dim, str) or type(dim).__name__ in ("Var", "SizeVar")


def _dim_text(dim: Any) -> str:
    return "?" if dim is None else str(dim)


def _unify_functions(lhs: A.FuncType, rhs: A.FuncType) -> A.FuncType:
    """As the Unifier's ``VisitType_(FuncTypeNode)``: the same number of parameters,
    each unified, and the return types."""
    if len(lhs.params) != len(rhs.params):
        raise TypeMismatch(f"a function of {len(lhs.params)} parameter(s) does not match "
                           f"one of {len(rhs.params)}")
    params = tuple(_unify_part(a, b, f"parameter {i}")
                   for i, (a, b) in enumerate(zip(lhs.params, rhs.params)))
    ret = _unify_part(lhs.ret, rhs.ret, "return type")
    return A.FuncType(params, ret, lhs.type_params or rhs.type_params)


class TypeInferencer:
    """Infers and records ``checked_type`` for every node of a module's functions."""

    def __init__(self, module: A.IRModule):
        self.module = module
        self.dims = DimMap()
        self.types: dict[int, A.Type] = {}
        self._globals_done: dict[str, A.FuncType] = {}
        self._globals_active: set[str] = set()
        self._function_names: dict[int, str] = {}  # id(global function) -> "@name"
        # recursive globals without a return type: called before their body was typed,
        # and the type a first pass found for them
        self._open_returns: set[str] = set()
        self._return_guesses: dict[str, A.Type] = {}

    # ------------------------------------------------------------------ entry points
    def run(self) -> None:
        for name in list(self.module.functions):
            self.infer_global(name)

    def infer_global(self, name: str) -> A.FuncType:
        if name in self._globals_done:
            return self._globals_done[name]
        func = self.module[name]
        if name in self._globals_active:
            if any(p.type_annotation is None for p in func.params):
                raise RelayTypeError(f"recursive function @{name} needs annotated types")
            ret = func.ret_type
            if ret is None:  # a recursive call before the body's type is known
                self._open_returns.add(name)
                ret = self._return_guesses.get(name, A.IncompleteType())
            return A.FuncType(tuple(p.type_annotation for p in func.params), ret)
        self._globals_active.add(name)
        self._function_names[id(func)] = f"@{name}"
        try:
            ty = self._infer_recursive_global(name, func)
        finally:
            self._globals_active.discard(name)
        self._globals_done[name] = ty
        return ty

    def _infer_recursive_global(self, name: str, func: A.Function) -> A.FuncType:
        """Infer ``@name``; a recursive one without a return type twice, as v0.19's solver
        unified it: first with its recursive calls' results unknown (the base case's
        branch gives the body a type, ``if`` unifying ``_`` with it), then again with that
        type as the calls' result, so that what uses them is typed and checked."""
        self._open_returns.discard(name)
        try:
            ty = self.infer(func)
            guess = ty.ret
        except RelayTypeError as exc:
            if name not in self._open_returns:
                raise
            # ``multiply(%n, @fact(...))``: the base case's branch was typed before the
            # failing use of the recursive call
            guess = self._typed_tail(func.body)
            if guess is None:
                raise RelayTypeError(
                    f"recursive function @{name} needs a return type: the type of its "
                    f"body depends on its recursive calls ({exc})",
                    location=_where(func)) from None
        if name not in self._open_returns or has_incomplete(guess):
            return ty
        self._return_guesses[name] = guess
        for node in post_order_list(func):
            self.types.pop(id(node), None)
        ty = self.infer(func)
        self._unify_at(func, guess, ty.ret, f"@{name}'s recursive calls are typed "
                                            f"{guess} but its body is {ty.ret}")
        return ty

    def _typed_tail(self, body: A.Expr) -> Optional[A.Type]:
        """The first fully typed expression in a result position of ``body`` (through
        ``let`` bodies and ``if`` branches), or None."""
        pending = [body]
        while pending:
            node = pending.pop(0)
            if isinstance(node, A.Let):
                pending.append(node.body)
            elif isinstance(node, A.If):
                pending.extend((node.true_branch, node.false_branch))
            else:
                ty = self.types.get(id(node))
                if ty is not None and not has_incomplete(ty):
                    return ty
        return None

    def infer(self, root: A.Expr) -> A.Type:
        """Infer the types of every node of ``root`` (recorded on the nodes)."""
        self._resolve_untyped_vars(root)
        nodes = post_order_list(root)
        # ``let %x = value; body``: %x has value's type (unified with its annotation).
        # The walk meets %x before value (Relay's visiting order), so %x is typed the
        # moment value is, before any use of it in body.
        bound_by_value: dict[int, list[A.Let]] = {}
        for node in nodes:
            if isinstance(node, A.Let):
                bound_by_value.setdefault(id(node.value), []).append(node)
        for node in nodes:
            known = self.types.get(id(node))
            if known is None or isinstance(known, A.IncompleteType):
                known = self._node_type(node)
                if known is not None:
                    self.types[id(node)] = known
                    node._set_checked_type(known)
            if known is not None and not isinstance(known, A.IncompleteType):
                for let in bound_by_value.get(id(node), ()):
                    self._bind_let_var(let, known)
        return self.types[id(root)]

    def _bind_let_var(self, let: A.Let, value_ty: A.Type) -> None:
        """Type ``let``'s variable from its value: the value's type, unified with the
        annotation if it has one, as v0.19's ``VisitExpr_(LetNode)`` (type_infer.cc)
        did — a value of another type is a type error at the ``let``."""
        var = let.var
        annotation = _annotation(var)
        if annotation is None:
            if not isinstance(self.types.get(id(var), A.IncompleteType()), A.IncompleteType):
                return
            ty = value_ty
        else:
            ty = self._unify_at(let, annotation, value_ty,
                                f"let %{var.name} is declared {annotation} but its value is "
                                f"{value_ty}")
        self.types[id(var)] = ty
        var._set_checked_type(ty)

    @staticmethod
    def _unify_at(node: A.Expr, lhs: A.Type, rhs: A.Type, message: str,
                  location: Optional[A.Expr] = None) -> A.Type:
        """:func:`unify`, a mismatch raised as a type error at ``node`` (``message``,
        then where the types differ)."""
        try:
            return unify(lhs, rhs)
        except TypeMismatch as exc:
            where = _where(location) if location is not None else None
            op = _op_name(node) if isinstance(node, A.Call) else type(node).__name__
            raise RelayTypeError(f"{message}: {exc}", op=op,
                                 location=where or _where(node)) from None

    # ------------------------------------------------------------------ un-annotated vars
    def _resolve_untyped_vars(self, root: A.Expr) -> None:
        """Give un-annotated variables the type their uses determine (Relay's unification)."""
        nodes = post_order_list(root)
        let_bound = {id(n.var) for n in nodes if isinstance(n, A.Let)}
        untyped = {id(n) for n in nodes if isinstance(n, A.Var) and _annotation(n) is None
                   and id(n) not in self.types and id(n) not in let_bound}
        if not untyped:
            return
        self._type_params_from_calls(nodes, untyped)
        self._type_from_fixed_uses(nodes, untyped)
        for node in nodes:
            if not (isinstance(node, A.Call) and isinstance(node.op, A.Op)):
                continue
            missing = [i for i, a in enumerate(node.args) if id(a) in untyped]
            rule = ARG_TYPE_RULES.get(node.op.name)
            if not missing or rule is None:
                continue
            known = []
            for i, arg in enumerate(node.args):
                if i in missing:
                    known.append(None)
                    continue
                known.append(self._type_of_subexpr(arg))
            try:
                found = rule(known, node.attrs)
            except BmlibError:
                raise
            except RULE_ERRORS as exc:
                raise type_error(node, "cannot infer the type of an argument: "
                                       f"{exc or type(exc).__name__}") from None
            for index, ty in (found or {}).items():
                arg = node.args[index]
                if index in missing and ty is not None and id(arg) in untyped:
                    self.types[id(arg)] = ty
                    arg._set_checked_type(ty)
                    untyped.discard(id(arg))

    def _type_params_from_calls(self, nodes: list, untyped: set) -> None:
        """A local function called in place (``%10 = fn (%a, %b) {...}; %10(%x, %y)``, as
        ``partition`` builds it) or through the variable a ``let`` binds it to takes its
        un-annotated parameters' types from the call's arguments, as Relay's unification
        did."""
        let_functions = {id(n.var): n.value for n in nodes
                         if isinstance(n, A.Let) and isinstance(n.value, A.Function)}
        for node in nodes:
            if not isinstance(node, A.Call):
                continue
            # ``let %f = fn (%x, %y) {...}; %f(%a, %b)`` too
            func = let_functions.get(id(node.op), node.op)
            if not isinstance(func, A.Function) or len(func.params) != len(node.args):
                continue
            for param, arg in zip(func.params, node.args):
                if id(param) not in untyped:
                    continue
                ty = self._type_of_subexpr(arg)
                if ty is not None and not isinstance(ty, A.IncompleteType):
                    self.types[id(param)] = ty
                    param._set_checked_type(ty)
                    untyped.discard(id(param))

    def _type_from_fixed_uses(self, nodes: list, untyped: set) -> None:
        """Uses that fix a variable's whole type, as Relay's unification did: an ``if``
        condition is ``Tensor[(), bool]`` (v0.19's ``VisitExpr_(IfNode)``; its
        ``test_vm.py::test_multiple_ifs`` relies on it), and an argument of a call to a
        global takes the type the global annotates its parameter with."""
        def settle(var: A.Expr, ty: Optional[A.Type]) -> None:
            # a type parameter (``def @id[A](%x: A)``) fixes nothing
            if id(var) in untyped and ty is not None and not has_incomplete(ty) and \
                    not _has_type_var(ty):
                self.types[id(var)] = ty
                var._set_checked_type(ty)
                untyped.discard(id(var))

        for node in nodes:
            if isinstance(node, A.If):
                settle(node.cond, A.TensorType((), "bool"))
            elif isinstance(node, A.Call) and isinstance(node.op, A.GlobalVar):
                callee = self.module.functions.get(node.op.name)
                if callee is None or len(callee.params) != len(node.args):
                    continue
                for param, arg in zip(callee.params, node.args):
                    settle(arg, _annotation(param))

    def _type_of_subexpr(self, expr: A.Expr) -> Optional[A.Type]:
        """The type of an argument expression (inferring its sub-graph), or None if unknown."""
        if id(expr) in self.types:
            return self.types[id(expr)]
        if isinstance(expr, A.Var) and _annotation(expr) is None:
            return None
        try:
            return self.infer(expr)
        except BmlibError:
            return None

    # ------------------------------------------------------------------ per node
    def _node_type(self, node: A.Expr) -> Optional[A.Type]:
        get = self.types.get
        if isinstance(node, A.Var):
            ty = get(id(node)) or _annotation(node)
            return ty if ty is not None else A.IncompleteType()
        if isinstance(node, A.Constant):
            if node.data is not None:
                return A.TensorType(tuple(node.data.shape), str(node.data.dtype))
            return node.type_annotation or A.IncompleteType()
        if isinstance(node, A.Tuple):
            return A.TupleType(tuple(self._known(f, node) for f in node.fields))
        if isinstance(node, A.TupleGetItem):
            ty = self._known(node.tuple_value, node)
            if not isinstance(ty, A.TupleType):
                raise type_error(node, f"tuple projection .{node.index} of a non-tuple {ty}")
            if not -len(ty.fields) <= node.index < len(ty.fields):
                raise type_error(node, f"tuple index {node.index} out of range for "
                                       f"{len(ty.fields)} fields")
            return ty.fields[node.index]
        if isinstance(node, A.Let):
            value_ty = self._known(node.value, node)
            if id(node.var) not in self.types or isinstance(get(id(node.var)), A.IncompleteType):
                self.types[id(node.var)] = value_ty
                node.var._set_checked_type(value_ty)
            return self._known(node.body, node)
        if isinstance(node, A.Function):
            return self._function_type(node)
        if isinstance(node, A.If):
            return self._if_type(node)
        if isinstance(node, A.GlobalVar):
            if node.name in self.module.functions:
                return self.infer_global(node.name)
            raise type_error(node, f"undefined global @{node.name}")
        if isinstance(node, A.Call):
            return self._call_type(node)
        if isinstance(node, (A.Op, A.MetaRef, A.Constructor)):
            return None
        return None

    def _function_type(self, func: A.Function) -> A.FuncType:
        """The parameters' types and the body's, unified with the declared return type
        (v0.19's ``VisitExpr_(FunctionNode)``: ``Unify(f->ret_type, body type)``)."""
        params = tuple(self._known(p, func) for p in func.params)
        ret = self._known(func.body, func)
        if func.ret_type is not None:
            name = self._function_names.get(id(func), "the function")
            ret = self._unify_at(func, func.ret_type, ret,
                                 f"{name} is declared to return {func.ret_type} but its "
                                 f"body is {ret}")
        return A.FuncType(params, ret, func.type_params)

    def _if_type(self, node: A.If) -> A.Type:
        """As v0.19's ``VisitExpr_(IfNode)``: the condition unifies with a rank-0 bool
        tensor, the result is the two branches' types unified."""
        cond = self._known(node.cond, node)
        self._unify_at(node, A.TensorType((), "bool"), cond,
                       f"the condition must be Tensor[(), bool], got {cond}",
                       location=node.cond)
        then_ty = self.types.get(id(node.true_branch)) or A.IncompleteType()
        else_ty = self.types.get(id(node.false_branch)) or A.IncompleteType()
        ty = self._unify_at(node, then_ty, else_ty, f"the branches have different "
                                                    f"types: {then_ty} and {else_ty}")
        if isinstance(ty, A.IncompleteType):
            return self._known(node.true_branch, node)  # neither branch typed: the error
        return ty

    def _known(self, expr: A.Expr, user: A.Expr) -> A.Type:
        ty = self.types.get(id(expr))
        if ty is None or isinstance(ty, A.IncompleteType):
            what = f"%{expr.name}" if isinstance(expr, A.Var) else type(expr).__name__
            raise type_error(user, f"the type of {what} cannot be inferred: annotate it")
        return ty

    def _call_type(self, call: A.Call) -> A.Type:
        op = call.op
        if isinstance(op, A.Op):
            arg_types = [self._known(a, call) if not isinstance(a, A.MetaRef) else None
                         for a in call.args]
            if not call.type_args and all(t is not None for t in arg_types):
                # Relay's inference records the argument types on an op call.
                object.__setattr__(call, "type_args", tuple(arg_types))
            relation = TYPE_RELATIONS.get(op.name)
            if relation is not None:
                try:
                    ty = relation(arg_types, call.attrs, call)
                except BmlibError:
                    raise
                except RULE_ERRORS as exc:
                    raise type_error(call, str(exc) or type(exc).__name__) from None
            else:
                ty = self._relax_call_type(call, arg_types)
            _check_inferred_dims(call, ty)
            return ty
        callee = self._known(op, call)
        if not isinstance(callee, A.FuncType):
            raise type_error(call, f"call of a value of type {callee} (not a function)")
        if len(callee.params) != len(call.args):
            raise type_error(call, f"function expects {len(callee.params)} arguments, "
                                   f"got {len(call.args)}")
        for i, (want, arg) in enumerate(zip(callee.params, call.args)):
            got = self._known(arg, call)  # unified as v0.19's GeneralCall: `?` takes 2
            self._unify_at(call, want, got, f"argument {i} has type {got}, expected {want}")
        return callee.ret

    # ------------------------------------------------------------------ Relax-backed relations
    def relax_type(self, ty: A.Type) -> Any:
        """Relax type of a Relay type (symbolic dims as int64 vars, ``?`` as fresh vars)."""
        from tvm import relax

        if isinstance(ty, A.TensorType):
            static = [d for d in ty.shape if isinstance(d, int) and not isinstance(d, bool)]
            elements = math.prod(static)
            if len(static) == len(ty.shape) and elements >= 2**63:
                # Relax computes shapes in int64: a reshape of it would wrap to 0 elements
                raise RelayTypeError(f"a tensor of shape {tuple(ty.shape)} has "
                                     f"{elements:,} elements, past int64")
            dims = []
            for i, dim in enumerate(ty.shape):
                if dim is None:
                    dims.append(self.dims.fresh(f"any{i}"))
                elif isinstance(dim, int):
                    dims.append(dim)
                else:
                    dims.append(self._relax_dim(dim))
            return relax.TensorType(dims, ty.dtype)
        if isinstance(ty, A.TupleType):
            return relax.TupleType([self.relax_type(f) for f in ty.fields])
        raise RelayTypeError(f"type {ty} has no Relax equivalent")

    def _relax_dim(self, dim: Any) -> Any:
        if isinstance(dim, str):
            key = ("name", dim)
            if key not in self.dims._to_relax:
                import tvm

                var = tvm.tirx.Var(dim, "int64")
                self.dims._to_relax[key] = var
                self.dims._from_relax[var] = dim
            return self.dims._to_relax[key]
        try:
            return self.dims.to_relax(dim)
        except (TypeError, KeyError, ValueError, AttributeError):
            import tvm

            var = tvm.tirx.Var("dim", "int64")  # an expression Relax cannot take: opaque
            self.dims._from_relax[var] = dim
            return var

    def relay_type(self, ty: Any) -> A.Type:
        """Relay type of a Relax type (dims mapped back to the user's)."""
        from tvm import relax

        if isinstance(ty, relax.TupleType):
            return A.TupleType(tuple(self.relay_type(f) for f in ty.fields))
        if isinstance(ty, relax.TensorType):
            shape = ty.shape
            if shape is not None and hasattr(shape, "values"):
                dims = tuple(self.dims.from_relax(d) for d in shape.values)
            else:
                ndim = int(ty.ndim)
                dims = (None,) * ndim if ndim >= 0 else ()
            return A.TensorType(dims, str(ty.dtype))
        return A.IncompleteType()

    def _relax_operand(self, arg: A.Expr, ty: Optional[A.Type], index: int) -> tuple:
        """(Relax value for the converter, params to declare)."""
        from tvm import relax

        if isinstance(arg, A.Constant) and arg.data is not None:
            return tensor_constant(arg.data), []
        if isinstance(arg, A.Tuple) and isinstance(ty, A.TupleType):
            fields, params = [], []
            for j, (field, fty) in enumerate(zip(arg.fields, ty.fields)):
                value, more = self._relax_operand(field, fty, index * 100 + j)
                fields.append(value)
                params += more
            return relax.Tuple(fields), params
        var = relax.Var(f"arg{index}", self.relax_type(ty))
        return var, [var]

    def _relax_call_type(self, call: A.Call, arg_types: list) -> A.Type:
        from tvm import relax

        from ..errors import ConversionError, UnsupportedOpError
        from ..importer.converter import RelayImporter
        from ..importer.registry import get_converter

        if get_converter(call.op.name) is None:
            raise RelayTypeError(f"no type relation for Relay op {call.op.name!r} "
                                 "(bmlib-relax builds it but cannot infer its type)",
                                 op=call.op.name, location=_where(call))
        importer = RelayImporter(self.module)
        bb = importer.bb
        inputs, params = [], []
        operands = importer._operands(call)
        try:
            for i, arg in enumerate(operands):  # an unknown dtype, a dim past int64
                value, more = self._relax_operand(arg, arg_types[i], i)
                inputs.append(value)
                params += more
            with bb.function("infer", params):
                with bb.dataflow():
                    out = importer._call(call, inputs, {})
                    out = bb.normalize(out) if not isinstance(out, relax.Var) else out
                    result_ty = out.ty
                    gv = bb.emit_output(out)
                bb.emit_func_output(gv)
        except UnsupportedOpError:
            raise
        except ConversionError as exc:
            message = str(exc)
            prefix = f"{exc.location}: " if exc.location else ""
            message = message[len(prefix):] if message.startswith(prefix) else message
            op_prefix = f"{exc.op}: " if exc.op else ""
            message = message[len(op_prefix):] if message.startswith(op_prefix) else message
            raise RelayTypeError(message, op=call.op.name, location=_where(call)) from None
        except BmlibError:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM's own checks, named by the call
            lines = str(exc).strip().splitlines()
            raise RelayTypeError(lines[-1] if lines else type(exc).__name__,
                                 op=call.op.name, location=_where(call)) from None
        finally:
            _close_blocks(bb)
        return self.relay_type(result_ty)


def _close_blocks(bb) -> None:
    """End the blocks a failed conversion left open in ``bb``, so that dropping it does
    not print TVM's "BlockBuilder destroyed with remaining blocks!" on stderr."""
    for _ in range(64):  # nested scopes of one call: a few at most
        try:
            bb._end_block()
        except Exception:  # noqa: BLE001 - no block left open
            return


def _check_inferred_dims(call: A.Call, ty: A.Type) -> None:
    """A static dim an op's type comes out with is a non-negative integer.  Relay's
    relations refused what would make one negative or fractional (an empty ``arange``,
    negative ``pad`` widths or ``repeats``, a window past its input); a rule that let
    one through must not hand a wrong shape to the rest of the model."""
    if isinstance(ty, A.TupleType):
        for field in ty.fields:
            _check_inferred_dims(call, field)
        return
    if not isinstance(ty, A.TensorType):
        return
    for dim in ty.shape:
        if isinstance(dim, (bool, float)):
            problem = "a non-integer"
        elif isinstance(dim, int) and dim < 0:
            problem = "a negative"
        else:
            continue
        raise type_error(call, f"the inferred shape {tuple(ty.shape)} has {problem} dim "
                               f"{dim!r}: the op's attributes do not fit its input")


def _annotation(var: A.Var) -> Optional[A.Type]:
    ty = var.type_annotation
    return None if isinstance(ty, A.IncompleteType) else ty


def has_incomplete(ty: A.Type) -> bool:
    """Whether ``ty`` is, or holds, a type still to be inferred (``_``)."""
    if isinstance(ty, A.IncompleteType):
        return True
    if isinstance(ty, A.TupleType):
        return any(has_incomplete(f) for f in ty.fields)
    return False


def _has_type_var(ty: A.Type) -> bool:
    if isinstance(ty, A.TypeVar):
        return True
    if isinstance(ty, A.TupleType):
        return any(_has_type_var(f) for f in ty.fields)
    if isinstance(ty, A.FuncType):
        return any(_has_type_var(t) for t in (*ty.params, ty.ret))
    return False


def infer_module(module: A.IRModule) -> A.IRModule:
    """Annotate every expression of every function of ``module`` with its type."""
    TypeInferencer(module).run()
    return module


# ---------------------------------------------------------------------- arg-type rules
def _tensor(ty: Optional[A.Type]) -> A.TensorType:
    if not isinstance(ty, A.TensorType):
        raise TypeError("the data operand's type is not known")
    return ty


def _channel_rule(data_index: int = 0):
    """Per-channel operands (bias, gamma, alpha...) are vectors of the data's ``axis`` dim."""
    def rule(types: list, attrs: A.Attrs) -> dict:
        data = _tensor(types[data_index])
        axis = int(attrs.get("axis", 1 if len(data.shape) > 1 else 0))
        if not -len(data.shape) <= axis < len(data.shape):
            raise ValueError(f"axis {axis} is out of range for a {len(data.shape)}-d input")
        vec = A.TensorType((data.shape[axis],), data.dtype)
        return {i: vec for i in range(len(types)) if i != data_index}
    return rule


register_arg_type_rule("nn.bias_add", "nn.prelu", "nn.batch_norm", "nn.instance_norm",
                       "nn.group_norm")(_channel_rule())


@register_arg_type_rule("nn.layer_norm")
def _layer_norm_rule(types: list, attrs: A.Attrs) -> dict:
    data = _tensor(types[0])
    axis = int(attrs.get("axis", -1))
    vec = A.TensorType((data.shape[axis],), data.dtype)
    return {1: vec, 2: vec}


_CONV_DEFAULT_LAYOUTS = {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW"), 3: ("NCDHW", "OIDHW")}


def _conv_weight_rule(ndim: int, transpose: bool = False):
    def rule(types: list, attrs: A.Attrs) -> dict:
        data = _tensor(types[0])
        layout, kernel = _CONV_DEFAULT_LAYOUTS[ndim]
        layout = attrs.get("data_layout") or layout
        kernel = attrs.get("kernel_layout") or (kernel.replace("OI", "IO") if transpose
                                                 else kernel)
        channels = attrs.get("channels")
        ksize = attrs.get("kernel_size")
        if channels is None or ksize is None:
            raise ValueError("the weight's type follows only from channels and kernel_size")
        ksize = (ksize,) * ndim if isinstance(ksize, int) else tuple(ksize)
        groups = int(attrs.get("groups", 1))
        in_channels = _primal_dim(data.shape, layout, "C")
        dims = {}
        spatial = [c for c in kernel if c.isupper() and c not in "OI"]
        for c, k in zip(spatial, ksize):
            dims[c] = k
        if transpose:
            dims["I"], dims["O"] = in_channels, _div(channels, groups)
        else:
            dims["O"], dims["I"] = channels, _div(in_channels, groups)
        return {1: A.TensorType(_packed_shape(dims, kernel), data.dtype)}
    return rule


def _layout_factors(layout: str) -> dict:
    """``"NCHW4n4c"`` -> ``{"N": 4, "C": 4}``: the split factor of each packed axis."""
    factors, digits = {}, ""
    for ch in layout:
        if ch.isdigit():
            digits += ch
        elif ch.islower():
            factors[ch.upper()] = int(digits)
            digits = ""
    return factors


def _primal_dim(shape: tuple, layout: str, axis: str) -> Any:
    """The full extent of primal ``axis`` in a (possibly packed) layout, as Relay's layouts."""
    axes = [c for c in layout if not c.isdigit()]
    dim = shape[axes.index(axis)]
    factor = _layout_factors(layout).get(axis)
    return dim * factor if factor else dim


def _packed_shape(primal: dict, layout: str) -> tuple:
    """Shape in ``layout`` (``"OIHW4o4i"``) of primal extents ``{"O": 16, "I": 32, ...}``."""
    factors = _layout_factors(layout)
    shape = []
    for ch in layout:
        if ch.isdigit():
            continue
        if ch.islower():
            shape.append(factors[ch.upper()])
        else:
            shape.append(_div(primal[ch], factors[ch]) if ch in factors else primal[ch])
    return tuple(shape)


def _div(value: Any, groups: int) -> Any:
    if isinstance(value, int):
        return value // groups
    return value if groups == 1 else value // groups


for _nd in (1, 2, 3):
    register_arg_type_rule(f"nn.conv{_nd}d")(_conv_weight_rule(_nd))
    register_arg_type_rule(f"nn.conv{_nd}d_transpose")(_conv_weight_rule(_nd, transpose=True))


def _deformable_conv2d_shapes(data: A.TensorType, attrs: A.Attrs) -> tuple:
    """(offset type, output type) of Relay's DeformableConv2DRel, in the data layout."""
    layout = attrs.get("data_layout") or "NCHW"
    ksize = attrs.get("kernel_size")
    if ksize is None or attrs.get("channels") is None:
        raise ValueError("deformable_conv2d needs channels and kernel_size")
    kh, kw = (ksize,) * 2 if isinstance(ksize, int) else tuple(ksize)
    pad = [int(p) for p in (attrs.get("padding") or (0, 0))]
    pad = pad * 2 if len(pad) == 1 else pad
    pad_h, pad_w = (pad[0] * 2, pad[1] * 2) if len(pad) == 2 else (pad[0] + pad[2],
                                                                  pad[1] + pad[3])
    sh, sw = [int(v) for v in (attrs.get("strides") or (1, 1))]
    dh, dw = [int(v) for v in (attrs.get("dilation") or (1, 1))]
    dims = {"N": data.shape[layout.index("N")],
            "H": (data.shape[layout.index("H")] + pad_h - (kh - 1) * dh - 1) // sh + 1,
            "W": (data.shape[layout.index("W")] + pad_w - (kw - 1) * dw - 1) // sw + 1}
    offset = dict(dims, C=2 * kh * kw * int(attrs.get("deformable_groups", 1)))
    out = dict(dims, C=attrs["channels"])
    dtype = attrs.get("out_dtype") or data.dtype
    return (A.TensorType(tuple(offset[c] for c in layout), data.dtype),
            A.TensorType(tuple(out[c] for c in layout), dtype))


@register_arg_type_rule("nn.deformable_conv2d")
def _deformable_conv2d_rule(types: list, attrs: A.Attrs) -> dict:
    """The weight from channels/kernel_size (as conv2d's), the offset from the output."""
    found = _conv_weight_rule(2)([types[0], types[2]], attrs)
    return {1: _deformable_conv2d_shapes(_tensor(types[0]), attrs)[0], 2: found[1]}


@register_type_relation("nn.deformable_conv2d")
def _deformable_conv2d_relation(types: list, attrs: A.Attrs, call: A.Call) -> A.Type:
    # A Python relation: TOPI's compute (the converter) takes groups == 1 only, Relay's
    # relation any groups.
    data = _tensor(types[0])
    offset, out = _deformable_conv2d_shapes(data, attrs)
    weight = _conv_weight_rule(2)([data, types[2]], attrs)[1]
    for what, want, got in (("offset", offset, types[1]), ("weight", weight, types[2])):
        if isinstance(got, A.TensorType) and (len(got.shape) != len(want.shape) or any(
                isinstance(w, int) and isinstance(g, int) and w != g
                for w, g in zip(want.shape, got.shape))):
            raise ValueError(f"the {what} has type {got}, expected {want}")
    return out


@register_arg_type_rule("nn.dense")
def _dense_weight_rule(types: list, attrs: A.Attrs) -> dict:
    data = _tensor(types[0])
    units = attrs.get("units")
    if units is None:
        raise ValueError("the weight's type follows only from units")
    return {1: A.TensorType((units, data.shape[-1]), data.dtype)}


@register_arg_type_rule("nn.matmul")
def _matmul_weight_rule(types: list, attrs: A.Attrs) -> dict:
    data = _tensor(types[0])
    units = attrs.get("units")
    if units is None:
        raise ValueError("the weight's type follows only from units")
    k = data.shape[-2] if attrs.get("transpose_a") else data.shape[-1]
    shape = (units, k) if attrs.get("transpose_b") else (k, units)
    return {1: A.TensorType(shape, data.dtype)}


_ELEMWISE_SAME = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")


@register_arg_type_rule(*_ELEMWISE_SAME)
def _same_as_other_rule(types: list, attrs: A.Attrs) -> dict:
    known = [t for t in types if isinstance(t, A.TensorType)]
    if not known:
        return {}
    return {i: known[0] for i, t in enumerate(types) if t is None}
