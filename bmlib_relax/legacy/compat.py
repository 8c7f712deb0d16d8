"""The Relay surface that real BYOC pattern tables use, served while they load.

TVM's own contrib tables (``dnnl.py``, ``tensorrt.py``, ``arm_compute_lib.py``,
...) import far more than ``dataflow_pattern``: ``tvm.relay.expr`` node classes
for ``isinstance`` checks, ``expr_functor`` visitors, ``tvm.ir.register_op_attr``
and ``Op.get(...).get_attr(...)``, ``tvm._ffi.register_func``, the
``strategy.generic`` helpers, relative imports as if the file lived in
``tvm/relay/op/contrib/``, and ``relay.transform`` passes for their
``partition_for_<x>`` helpers.  :func:`compat_modules` builds that namespace
over bmlib-relax's Relay AST (the classes are the AST's, so ``isinstance`` holds
on the Relay calls that checks receive, see :mod:`bmlib_relax.importer.provenance`).

Nothing here is installed into ``sys.modules`` or the real ``tvm``: the loader
hands these module objects to the table's own ``__import__``.
"""
from __future__ import annotations

import importlib
import types
from typing import Any, Callable, Optional

import numpy as np

from ..errors import LegacyApiError
from ..importer import provenance
from ..relay import ast
from ..relay.expr_functor import ExprFunctor, ExprMutator, ExprVisitor


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _public(module: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(module).items() if not k.startswith("__")}


# --------------------------------------------------------------------------- registries
_PATTERN_TABLES: dict[str, Callable[[], list]] = {}
_GLOBAL_FUNCS: dict[str, Callable] = {}


def register_pattern_table(compiler: str, table: Optional[Callable[[], list]] = None):
    """``tvm.relay.op.contrib.register.register_pattern_table``."""

    def decorator(fn: Callable[[], list]) -> Callable[[], list]:
        _PATTERN_TABLES[compiler] = fn
        return fn

    return decorator(table) if table is not None else decorator


def get_pattern_table(compiler: str) -> Optional[list]:
    """``tvm.relay.op.contrib.get_pattern_table``: the table registered for ``compiler``."""
    table = _PATTERN_TABLES.get(compiler)
    return table() if table is not None else None


def registered_table(compiler: str) -> Optional[Callable[[], list]]:
    return _PATTERN_TABLES.get(compiler)


def forget_table(compiler: str) -> Optional[Callable[[], list]]:
    return _PATTERN_TABLES.pop(compiler, None)


def register_func(func_name: Any, f: Optional[Callable] = None, override: bool = False):
    """``tvm.register_func`` / ``tvm._ffi.register_func``: recorded here, never in TVM's
    global registry (a table registering ``relay.ext.dnnl`` must not clash with the
    real TVM), and visible to the table through ``get_global_func``."""
    if callable(func_name) and f is None:
        _GLOBAL_FUNCS[func_name.__name__] = func_name
        return func_name

    def register(fn: Callable) -> Callable:
        _GLOBAL_FUNCS[str(func_name)] = fn
        return fn

    return register(f) if f is not None else register


def get_global_func(name: str, allow_missing: bool = False) -> Optional[Callable]:
    """Functions the table registered, then TVM's; Relay-only ones are missing."""
    if name in _GLOBAL_FUNCS:
        return _GLOBAL_FUNCS[name]
    if not name.startswith("relay."):
        import tvm

        func = tvm.get_global_func(name, allow_missing=True)
        if func is not None:
            return func
    if allow_missing:
        return None
    raise LegacyApiError(f"global function {name!r} is not available (no Relay in TVM >= 0.20)")


class _FfiApi(types.ModuleType):
    """``_ffi_api`` of a Relay package: C++ entry points that do not exist any more.
    Importing it works (tables do it at load time); calling one names it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args: Any, **kwargs: Any) -> Any:
            raise LegacyApiError(f"{self.__name__}.{name}() is a Relay C++ function; "
                                 "bmlib-relax has no equivalent")

        missing.__name__ = name
        return missing


# --------------------------------------------------------------------------- analysis
def post_order_visit(expr: Any, fvisit: Callable[[Any], None]) -> None:
    """``relay.analysis.post_order_visit``: ``fvisit`` on every node, children first."""
    from ..relay.analysis import post_order_list

    for node in post_order_list(expr):
        fvisit(node)


def _conv2d_in_channels(shape, layout: str) -> int:
    if layout in ("NCHW", "NHWC"):
        return int(shape[layout.index("C")])
    if len(layout) == 5 and layout.startswith("NCHW") and layout[4].islower():
        return int(shape[1]) * int(shape[4])
    raise LegacyApiError(f"is_depthwise_conv2d: unknown data layout {layout!r}")


def _conv2d_out_channels(shape, layout: str) -> int:
    if layout in ("OIHW", "HWIO", "IOHW"):
        return int(shape[layout.index("O")])
    if layout == "HWOI":
        return int(shape[2]) * int(shape[3])
    if len(layout) == 6 and layout.startswith("OIHW"):
        return int(shape[0]) * int(shape[5])
    raise LegacyApiError(f"is_depthwise_conv2d: unknown kernel layout {layout!r}")


def is_depthwise_conv2d(data_shape, data_layout, kernel_shape, kernel_layout, groups) -> bool:
    """``relay.op.strategy.generic.is_depthwise_conv2d``: in = out channels = groups."""
    in_channels = _conv2d_in_channels(data_shape, str(data_layout))
    out_channels = _conv2d_out_channels(kernel_shape, str(kernel_layout))
    return in_channels == out_channels == int(groups)


# --------------------------------------------------------------------------- tvm.* shims
class _AnyDim:
    """``tvm.tir.expr.Any``: our dynamic dims are ``None``; nothing is an instance."""


class Target:
    """``tvm.target.Target`` for BYOC kinds that only existed with Relay (``tensorrt``):
    ``Target("tensorrt")`` gives its documented default attributes; other kinds are
    TVM's real targets.  ``with target:`` makes it ``Target.current()``."""

    _DEFAULT_ATTRS = {
        "tensorrt": {"tensorrt_version": (), "use_implicit_batch": True,
                     "max_workspace_size": 1 << 30, "remove_no_mac_subgraphs": False,
                     "use_fp16": False, "use_uint8": False},
    }
    _stack: list = []

    def __new__(cls, target: Any = None, host: Any = None):
        kind = target.get("kind") if isinstance(target, dict) else str(target).split()[0]
        if kind not in cls._DEFAULT_ATTRS:
            import tvm

            return tvm.target.Target(target, host) if host is not None else \
                tvm.target.Target(target)
        self = object.__new__(cls)
        self.kind = types.SimpleNamespace(name=kind)
        attrs = dict(cls._DEFAULT_ATTRS[kind])
        if isinstance(target, dict):
            attrs.update({k: v for k, v in target.items() if k != "kind"})
        self.attrs = attrs
        return self

    def __enter__(self):
        Target._stack.append(self)
        return self

    def __exit__(self, *exc):
        Target._stack.pop()

    @staticmethod
    def current(allow_none: bool = True):
        return Target._stack[-1] if Target._stack else None


class _Proxy(types.ModuleType):
    """A compat module that falls back to a real TVM module for other names."""

    def __init__(self, name: str, real: str, **attrs: Any):
        super().__init__(name)
        self.__dict__["_real_name"] = real
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(self.__dict__["_real_name"]), name)


def _fallback_dfpattern(name: str):
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise LegacyApiError(f"tvm.relay.dataflow_pattern.{name} is not available in this "
                             "bmlib-relax build")

    missing.__name__ = name
    return missing


class _FallbackCallback:
    """``DFPatternCallback`` where this build's dataflow_pattern has none: tables subclass
    it at load time; running a rewrite with it names what is missing."""

    def __init__(self, require_type: bool = False, rewrite_once: bool = False):
        self.require_type = require_type
        self.rewrite_once = rewrite_once

    def rewrite(self, expr: Any) -> Any:
        return _fallback_dfpattern("rewrite")(self, expr)


def _is_relay_object(obj: Any) -> bool:
    return isinstance(obj, (ast.Expr, ast.IRModule, ast.Type))


def structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> bool:
    """``tvm.ir.structural_equal``: Relay nodes compare with bmlib-relax's Relay
    ``structural_equal``; anything else with TVM's (0.27 keeps it in ``tvm_ffi``)."""
    if _is_relay_object(lhs) or _is_relay_object(rhs):
        from ..relay import analysis

        return analysis.structural_equal(lhs, rhs, map_free_vars=map_free_vars)
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(lhs, rhs, map_free_vars))


def assert_structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> None:
    """``tvm.ir.assert_structural_equal`` over Relay nodes (``ValueError`` as TVM raises)."""
    if _is_relay_object(lhs) or _is_relay_object(rhs):
        if not structural_equal(lhs, rhs, map_free_vars):
            raise ValueError(f"StructuralEqual check failed:\n{lhs}\n--- vs ---\n{rhs}")
        return
    import tvm

    tvm.ir.assert_structural_equal(lhs, rhs, map_free_vars)


def compat_modules() -> dict[str, types.ModuleType]:
    """Fresh compat modules: ``{"tvm": ..., "tvm.relay": ..., ...}``."""
    from .. import relay as compat_relay
    from ..relay import analysis, build_module, dataflow_pattern
    from ..relay import op as compat_op
    from . import passes

    # tvm.relay.dataflow_pattern (rewrite/DFPatternCallback where this build has them)
    dfp = _module("tvm.relay.dataflow_pattern", **_public(dataflow_pattern))
    for name in ("rewrite", "partition"):
        if not hasattr(dfp, name):
            setattr(dfp, name, _fallback_dfpattern(name))
    if not hasattr(dfp, "DFPatternCallback"):
        dfp.DFPatternCallback = _FallbackCallback

    expr = _module(
        "tvm.relay.expr", Expr=ast.Expr, RelayExpr=ast.Expr, Call=ast.Call,
        Constant=ast.Constant, Var=ast.Var, Tuple=ast.Tuple, TupleGetItem=ast.TupleGetItem,
        GlobalVar=ast.GlobalVar, Let=ast.Let, If=ast.If, Function=ast.Function,
        RefCreate=ast.RefCreate, RefRead=ast.RefRead, RefWrite=ast.RefWrite,
        const=compat_relay.const, var=compat_relay.var, TupleWrapper=compat_op.TupleWrapper)
    function = _module("tvm.relay.function", Function=ast.Function)
    expr_functor = _module("tvm.relay.expr_functor", ExprFunctor=ExprFunctor,
                           ExprVisitor=ExprVisitor, ExprMutator=ExprMutator)
    analysis_mod = _module("tvm.relay.analysis", **_public(analysis),
                           post_order_visit=post_order_visit)
    analysis_mod.analysis = analysis_mod  # ``from tvm.relay.analysis import analysis``
    generic = _module("tvm.relay.op.strategy.generic", is_depthwise_conv2d=is_depthwise_conv2d)
    strategy = _module("tvm.relay.op.strategy", generic=generic)
    register = _module("tvm.relay.op.contrib.register",
                       register_pattern_table=register_pattern_table,
                       get_pattern_table=get_pattern_table)
    contrib = _module("tvm.relay.op.contrib", register=register,
                      register_pattern_table=register_pattern_table,
                      get_pattern_table=get_pattern_table,
                      _ffi_api=_FfiApi("tvm.relay.op.contrib._ffi_api"))
    op = _module("tvm.relay.op", **{**_public(compat_op), "contrib": contrib,
                                     "strategy": strategy, "get": provenance.op_ref,
                                     "register_pattern_table": register_pattern_table,
                                     "_ffi_api": _FfiApi("tvm.relay.op._ffi_api")})
    transform = passes.relay_transform_module()
    relay_ffi = _FfiApi("tvm.relay._ffi_api")
    relay = _module("tvm.relay", **_public(compat_relay))
    relay.const = compat_relay.const
    relay.__dict__.update(
        expr=expr, function=function, expr_functor=expr_functor, analysis=analysis_mod,
        op=op, transform=transform, dataflow_pattern=dfp, build_module=build_module,
        _ffi_api=relay_ffi, Expr=ast.Expr, bind=passes.bind,
        TensorType=ast.TensorType, TupleType=ast.TupleType)

    ffi = _module("tvm._ffi", register_func=register_func, get_global_func=get_global_func,
                  _init_api=lambda namespace, target_module_name=None: None,
                  register_object=lambda *a, **k: (a[0] if a and callable(a[0])
                                                   else (lambda cls: cls)))
    tensor_type = _module("tvm.ir.tensor_type", TensorType=ast.TensorType)
    container = _module("tvm.ir.container", Array=tuple, Map=dict)
    tvm_transform = passes.tvm_transform_module()
    ir = _Proxy("tvm.ir", "tvm.ir", register_op_attr=provenance.register_op_attr,
                Op=provenance.OpClass, TensorType=ast.TensorType, TupleType=ast.TupleType,
                tensor_type=tensor_type, container=container, IRModule=ast.IRModule,
                transform=tvm_transform, structural_equal=structural_equal,
                assert_structural_equal=assert_structural_equal)
    tir_expr = _Proxy("tvm.tir.expr", "tvm.tirx", Any=_AnyDim)
    tir_op = _module("tvm.tir.op", Op=provenance.OpClass)
    tir = _Proxy("tvm.tir", "tvm.tirx", expr=tir_expr, op=tir_op, Any=_AnyDim)
    target = _Proxy("tvm.target", "tvm.target", Target=Target)
    nd = _Proxy("tvm.nd", "tvm.runtime", NDArray=object, array=np.asarray)
    tvm_mod = _Proxy("tvm", "tvm", relay=relay, IRModule=ast.IRModule, ir=ir, tir=tir,
                     _ffi=ffi, register_func=register_func, get_global_func=get_global_func,
                     transform=tvm_transform, target=target, nd=nd)

    modules = {
        "tvm": tvm_mod, "tvm.ir": ir, "tvm.ir.tensor_type": tensor_type,
        "tvm.ir.container": container, "tvm.ir.transform": tvm_transform,
        "tvm.tir": tir, "tvm.tir.expr": tir_expr, "tvm.tir.op": tir_op,
        "tvm._ffi": ffi, "tvm.transform": tvm_transform, "tvm.target": target, "tvm.nd": nd,
        "tvm.relay": relay, "tvm.relay.expr": expr, "tvm.relay.function": function,
        "tvm.relay.expr_functor": expr_functor, "tvm.relay.analysis": analysis_mod,
        "tvm.relay.analysis.analysis": analysis_mod,
        "tvm.relay.dataflow_pattern": dfp, "tvm.relay.op": op,
        "tvm.relay.op.nn": compat_op.nn, "tvm.relay.nn": compat_op.nn,
        "tvm.relay.image": compat_op.image, "tvm.relay.op.image": compat_op.image,
        "tvm.relay.op.contrib": contrib, "tvm.relay.op.contrib.register": register,
        "tvm.relay.op.contrib._ffi_api": contrib._ffi_api,
        "tvm.relay.op.strategy": strategy, "tvm.relay.op.strategy.generic": generic,
        "tvm.relay.op._ffi_api": op._ffi_api, "tvm.relay._ffi_api": relay_ffi,
        "tvm.relay.transform": transform, "tvm.relay.build_module": build_module,
    }
    return modules
