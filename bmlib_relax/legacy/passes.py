"""``relay.transform`` for legacy ``partition_for_<x>(mod, params)`` helpers.

A vendor's partition helper runs a fixed Relay pass list, e.g.::

    mod["main"] = bind_params_by_name(mod["main"], params)
    seq = tvm.transform.Sequential([transform.CanonicalizeOps(), transform.InferType(),
        transform.SimplifyInference(), transform.FoldConstant(),
        transform.MergeComposite(pattern_table()), transform.AnnotateTarget("dnnl"),
        transform.MergeCompilerRegions(), transform.PartitionGraph()])
    with tvm.transform.PassContext(opt_level=3):
        mod = seq(mod)

Here it runs on bmlib-relax's Relay AST.  Graph-rewriting passes with Relay
semantics that matter to the patterns are real rewrites of that AST
(``InferType``, ``SimplifyInference``, ``CanonicalizeOps``, ``FoldConstant``,
``RemoveUnusedFunctions``, ``ConvertLayout`` where nothing needs converting,
``bind_params_by_name``, user ``function_pass`` es over ``ExprMutator``).  The
partitioning passes are *recorded* on the module (:class:`PartitionPlan`) and
realised by bmlib's own partitioning afterwards: ``MergeComposite(table)`` uses
that table, ``AnnotateTarget(c)`` offloads the single ops whose ``target.c``
attribute accepts them, ``MergeCompilerRegions`` merges neighbouring
partitions, ``PartitionGraph`` partitions.  Any other pass is a
:class:`UnsupportedPassError` naming it, raised where the helper creates it.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..errors import UnsupportedPassError
from ..relay import ast, simplify
from ..relay.rewrite import substitute
from ..relay.simplify import map_functions, rewrite_function

PLAN_ATTR = "_bmlib_partition_plan"

__all__ = ["UnsupportedPassError", "PartitionPlan", "plan_of", "Pass"]


@dataclass
class PartitionPlan:
    """What a partition helper asked for, to be realised by ``partition_for_bmlib``."""

    patterns: list = field(default_factory=list)
    annotate: list[str] = field(default_factory=list)
    merge_regions: bool = False
    partitioned: bool = False
    passes: list[str] = field(default_factory=list)


def plan_of(mod: ast.IRModule) -> PartitionPlan:
    plan = getattr(mod, PLAN_ATTR, None)
    if plan is None:
        plan = PartitionPlan()
        setattr(mod, PLAN_ATTR, plan)
    return plan


class Pass:
    """A pass object: ``pass_(mod) -> mod``; records its name in the module's plan."""

    name = "Pass"

    def __call__(self, mod: ast.IRModule) -> ast.IRModule:
        mod = simplify.require_module(mod, self.name)
        plan_of(mod).passes.append(self.name)
        return self.apply(mod)

    def apply(self, mod: ast.IRModule) -> ast.IRModule:
        return mod

    def __repr__(self) -> str:
        return f"relay.transform.{self.name}"


# --------------------------------------------------------------------------- real passes
class InferType(Pass):
    name = "InferType"

    def apply(self, mod):
        from ..relay.transform import InferType as RelayInferType

        return RelayInferType()(mod)


class SimplifyInference(Pass):
    """:class:`bmlib_relax.relay.simplify.SimplifyInference`, its ops those tables query."""

    name = "SimplifyInference"

    def apply(self, mod):
        return simplify.SimplifyInference(_op_ref).apply(mod)


class CanonicalizeOps(Pass):
    """:class:`bmlib_relax.relay.simplify.CanonicalizeOps`, its ops those tables query."""

    name = "CanonicalizeOps"

    def apply(self, mod):
        return simplify.CanonicalizeOps(_op_ref).apply(mod)


def _op_ref(name: str) -> ast.Op:
    """The op a legacy table sees (``call.op == relay.op.get(name)``, ``get_attr``)."""
    from ..importer.provenance import op_ref

    return op_ref(name)


def _reshape(x: np.ndarray, newshape) -> np.ndarray:
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(newshape)]
    return x.reshape(shape)


def _expand_dims(x: np.ndarray, axis: int = 0, num_newaxis: int = 1) -> np.ndarray:
    axis = axis + x.ndim + 1 if axis < 0 else axis
    return x.reshape(x.shape[:axis] + (1,) * num_newaxis + x.shape[axis:])


#: Relay op -> NumPy evaluation (attrs as keyword arguments) for FoldConstant.
CONSTANT_FOLDERS: dict[str, Callable[..., np.ndarray]] = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b, "divide": lambda a, b: a / b,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "negative": np.negative, "sqrt": np.sqrt, "rsqrt": lambda a: 1 / np.sqrt(a),
    "exp": np.exp, "log": np.log, "abs": np.abs,
    "expand_dims": lambda a, axis=0, num_newaxis=1: _expand_dims(a, int(axis), int(num_newaxis)),
    "reshape": lambda a, newshape=None, **_: _reshape(a, newshape),
    "squeeze": lambda a, axis=None: np.squeeze(a, axis=None if axis is None else tuple(axis)),
    "transpose": lambda a, axes=None: np.transpose(a, axes),
    "cast": lambda a, dtype="float32": a.astype(dtype),
    "copy": np.copy,
}


class FoldConstant(Pass):
    """Evaluate calls whose arguments are all constants (NumPy; Relay's dtype rule: the
    result keeps the operands' dtype).  An op it cannot evaluate is an error, not a
    silently unfolded graph."""

    name = "FoldConstant"

    def __init__(self, fold_qnn: bool = False):
        self.fold_qnn = fold_qnn

    def apply(self, mod):
        def transform(node):
            if not isinstance(node, ast.Call) or not isinstance(node.op, ast.Op) or \
                    not node.args or \
                    not all(isinstance(a, ast.Constant) and a.data is not None
                            for a in node.args):
                return None
            name = node.op.name
            folder = CONSTANT_FOLDERS.get(name)
            if folder is None:
                raise UnsupportedPassError(
                    f"relay.transform.FoldConstant: cannot fold {name} on constants"
                    + (f" at {node.span}" if node.span is not None else ""))
            args = [a.data for a in node.args]
            value = np.asarray(folder(*args, **dict(node.attrs)))
            if name != "cast":
                value = value.astype(args[0].dtype)
            return ast.Constant(value, span=node.span)

        return map_functions(mod, lambda f: rewrite_function(f, transform))


class RemoveUnusedFunctions(Pass):
    name = "RemoveUnusedFunctions"

    def __init__(self, entry_functions=None):
        self.entries = list(entry_functions or ["main"])

    def apply(self, mod):
        return simplify.RemoveUnusedFunctions(self.entries).apply(mod)


class ConvertLayout(Pass):
    """Only where nothing needs converting (every listed op already in the desired
    layout); a real layout change is an error naming the op."""

    name = "ConvertLayout"

    _LAYOUT_ATTRS = {"data_layout", "layout"}

    def __init__(self, desired_layouts: dict):
        self.desired = dict(desired_layouts)

    def apply(self, mod):
        from ..importer.provenance import relay_attr_defaults
        from ..relay.analysis import post_order_list

        for func in mod.functions.values():
            for node in post_order_list(func):
                name = simplify.op_name(node)
                if name not in self.desired:
                    continue
                wanted = list(self.desired[name])
                attrs = {**relay_attr_defaults(name), **dict(node.attrs)}
                have = attrs.get("data_layout", attrs.get("layout"))
                kernel = attrs.get("kernel_layout")
                if have != wanted[0] or (len(wanted) > 1 and wanted[1] != "default"
                                         and kernel != wanted[1]):
                    raise UnsupportedPassError(
                        f"relay.transform.ConvertLayout: {name} in layout {have}/{kernel} "
                        f"would need converting to {wanted} (not supported)"
                        + (f" at {node.span}" if node.span is not None else ""))
        return mod


# --------------------------------------------------------------------------- recorded passes
class MergeComposite(Pass):
    name = "MergeComposite"

    def __init__(self, pattern_table):
        self.table = list(pattern_table or [])

    def apply(self, mod):
        plan_of(mod).patterns.extend(tuple(e) for e in self.table if e)
        return mod


class AnnotateTarget(Pass):
    name = "AnnotateTarget"

    def __init__(self, targets, include_non_call_ops: bool = True):
        self.targets = [targets] if isinstance(targets, str) else [str(t) for t in targets]

    def apply(self, mod):
        plan_of(mod).annotate.extend(t for t in self.targets if t not in plan_of(mod).annotate)
        return mod


class MergeCompilerRegions(Pass):
    name = "MergeCompilerRegions"

    def apply(self, mod):
        plan_of(mod).merge_regions = True
        return mod


class PartitionGraph(Pass):
    name = "PartitionGraph"

    def __init__(self, mod_name: str = "default", bind_constants: bool = True):
        pass

    def apply(self, mod):
        plan_of(mod).partitioned = True
        return mod


# --------------------------------------------------------------------------- composition
class Sequential(Pass):
    """``tvm.transform.Sequential`` / ``relay.transform.Sequential``."""

    name = "Sequential"

    def __init__(self, passes=None, opt_level: int = 0, name: str = "sequential",
                 required=None, traceable: bool = False):
        self.passes = list(passes or [])

    def __call__(self, mod):
        for p in self.passes:
            mod = p(mod)
        return mod


class PassContext:
    """``tvm.transform.PassContext``: options are accepted and ignored (the passes
    here have no opt-level dependent behaviour)."""

    _stack: list = []

    def __init__(self, opt_level: int = 2, required_pass=None, disabled_pass=None,
                 instruments=None, config=None, trace=None):
        self.opt_level = opt_level
        self.config = dict(config or {})
        self.disabled_pass = list(disabled_pass or [])

    def __enter__(self):
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc):
        PassContext._stack.pop()

    @staticmethod
    def current():
        return PassContext._stack[-1] if PassContext._stack else PassContext()


def _pass_decorator(kind: str):
    """``function_pass`` / ``module_pass``: a user pass over the Relay AST."""

    def decorator(pass_func=None, opt_level=None, name=None, required=None, **_):
        def make(target):
            pass_name = name or getattr(target, "__name__", kind)
            if isinstance(target, type):
                def create(*args, **kwargs):
                    return _UserPass(pass_name, kind, target(*args, **kwargs))

                create.__name__ = pass_name
                return create
            return _UserPass(pass_name, kind, target)

        return make(pass_func) if pass_func is not None else make

    return decorator


class _UserPass(Pass):
    def __init__(self, name: str, kind: str, impl: Any):
        self.name = name
        self.kind = kind
        self.impl = impl

    def apply(self, mod):
        ctx = PassContext.current()
        if self.kind == "module_pass":
            fn = getattr(self.impl, "transform_module", self.impl)
            return fn(mod, ctx)
        fn = getattr(self.impl, "transform_function", self.impl)
        return map_functions(mod, lambda f: fn(f, mod, ctx))


def bind(expr: ast.Expr, binds: dict) -> ast.Expr:
    """``relay.bind``: substitute variables (by identity) in ``expr``."""
    if isinstance(expr, ast.Function):
        params = tuple(p for p in expr.params if p not in binds)
        body = substitute(expr.body, binds)
        return ast.Function(params, body, expr.ret_type, expr.type_params, expr.attrs,
                            span=expr.span)
    return substitute(expr, binds)


_REAL_PASSES = {c.name: c for c in (InferType, SimplifyInference, CanonicalizeOps, FoldConstant,
                                    RemoveUnusedFunctions, ConvertLayout, MergeComposite,
                                    AnnotateTarget, MergeCompilerRegions, PartitionGraph,
                                    Sequential)}


class _TransformModule(types.ModuleType):
    """``tvm.relay.transform``: the passes above; any other pass name is an error that
    names it (raised where the helper creates the pass)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not name[:1].isupper():
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

        def unsupported(*args: Any, **kwargs: Any) -> Any:
            raise UnsupportedPassError(
                f"relay.transform.{name} has no faithful equivalent in bmlib-relax "
                f"(supported: {', '.join(sorted(_REAL_PASSES))}, bind_params_by_name)")

        unsupported.__name__ = name
        return unsupported


def relay_transform_module() -> types.ModuleType:
    from ..relay import transform as relay_transform
    from ..relay.params import bind_params_by_name

    module = _TransformModule("tvm.relay.transform")
    module.__dict__.update({k: v for k, v in vars(relay_transform).items()
                            if not k.startswith("_")})
    module.__dict__.update(_REAL_PASSES)
    module.__dict__.update(PassContext=PassContext, function_pass=_pass_decorator("function_pass"),
                           module_pass=_pass_decorator("module_pass"),
                           bind_params_by_name=bind_params_by_name,
                           InferTypeLocal=_infer_type_local)
    return module


def _infer_type_local(expr: ast.Expr) -> ast.Type:
    from ..relay.transform import InferType as RelayInferType

    RelayInferType()(ast.IRModule.from_expr(expr))
    return expr.checked_type


def tvm_transform_module() -> types.ModuleType:
    module = types.ModuleType("tvm.transform")
    module.__dict__.update(Sequential=Sequential, PassContext=PassContext, Pass=Pass,
                           module_pass=_pass_decorator("module_pass"),
                           function_pass=_pass_decorator("function_pass"))
    return module


# --------------------------------------------------------------------------- driver
def annotated_patterns(compilers: list[str]) -> list[tuple]:
    """``AnnotateTarget(c)`` as single-op patterns: every op whose ``target.c`` attribute
    (``tvm.ir.register_op_attr``) accepts the Relay call."""
    from ..importer.provenance import OP_ATTRS
    from ..relay.dataflow_pattern import CallPattern, OpPattern

    entries = []
    for compiler in compilers:
        key = f"target.{compiler}"
        for (op_name, attr), support in sorted(OP_ATTRS.items(), key=lambda kv: kv[0]):
            if attr != key:
                continue
            check = (lambda call, f=support: bool(f(call))) if callable(support) \
                else (lambda call, v=support: bool(v))
            entries.append((f"{compiler}.annotated.{op_name}",
                            CallPattern(OpPattern(op_name), None), check))
    return entries


def _positional_arity(fn: Callable) -> Optional[int]:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])


def run_partition_fn(fn: Callable, module: ast.IRModule, params: dict,
                     where: str = "partition function") -> tuple[ast.IRModule, list, bool]:
    """Run a legacy ``partition_for_<x>(mod, params)``; returns the rewritten Relay
    module, the patterns to partition with and whether to merge regions."""
    from .compat import Target

    Target._stack.clear()
    PassContext._stack.clear()
    if hasattr(module, PLAN_ATTR):
        delattr(module, PLAN_ATTR)
    if _positional_arity(fn) == 1:
        # partition_for_cutlass(mod): its users bound the weights first.
        if params:
            from ..relay.params import bind_params_by_name

            module["main"] = bind_params_by_name(module["main"], params)
        result = fn(module)
    else:
        result = fn(module, params)
    if not isinstance(result, ast.IRModule):
        raise UnsupportedPassError(f"{where} returned {type(result).__name__}, "
                                   "expected the partitioned Relay module")
    plan = plan_of(result)
    patterns = list(plan.patterns) + annotated_patterns(plan.annotate)
    if not patterns:
        raise UnsupportedPassError(f"{where} ran no MergeComposite/AnnotateTarget: nothing "
                                   f"to offload (passes run: {', '.join(plan.passes) or 'none'})")
    if not plan.partitioned:
        raise UnsupportedPassError(f"{where} ran no PartitionGraph: on Relay nothing would have "
                                   f"been offloaded (passes run: {', '.join(plan.passes)})")
    return result, patterns, plan.merge_regions
