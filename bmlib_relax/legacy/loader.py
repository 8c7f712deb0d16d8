"""Load a legacy Relay-era Python module with its ``tvm.relay`` imports redirected.

Pattern tables and lowerings were written against ``tvm.relay`` (``from
tvm.relay.dataflow_pattern import *``, ``from tvm.relay.op.contrib.register
import register_pattern_table``), which TVM >= 0.20 no longer has.  The module
is executed with its own ``__import__`` that serves those names from
bmlib-relax's compatibility layer.  Nothing is installed into ``sys.modules``
or the real ``tvm`` package, so a real Relay (if one is importable elsewhere)
keeps working, and the redirection lasts exactly as long as that module's code.
"""
from __future__ import annotations

import builtins
import importlib
import os
import traceback
import types
from typing import Any, Callable, Optional

from ..errors import BmlibError
from .lowerings import register_lower_map


class LegacyModuleError(BmlibError):
    """A legacy pattern/lowering module could not be loaded or used (names the file)."""


# ----------------------------------------------------------------- compat namespace
_PATTERN_TABLES: dict[str, Callable[[], list]] = {}


def _register_pattern_table(compiler: str, table: Optional[Callable[[], list]] = None):
    """Stand-in for ``tvm.relay.op.contrib.register.register_pattern_table``."""

    def decorator(fn: Callable[[], list]) -> Callable[[], list]:
        _PATTERN_TABLES[compiler] = fn
        return fn

    return decorator(table) if table is not None else decorator


def _compat_module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _public(module: types.ModuleType) -> dict[str, Any]:
    return {k: v for k, v in vars(module).items() if not k.startswith("__")}


def _compat_modules() -> dict[str, Any]:
    from .. import relay as compat_relay
    from ..relay import analysis, build_module, dataflow_pattern, transform
    from ..relay import op as compat_op

    register = _compat_module("tvm.relay.op.contrib.register",
                              register_pattern_table=_register_pattern_table)
    contrib = _compat_module("tvm.relay.op.contrib", register=register,
                             register_pattern_table=_register_pattern_table)
    op = _compat_module("tvm.relay.op", **_public(compat_op), contrib=contrib)
    relay = _compat_module("tvm.relay", **_public(compat_relay))
    relay.op = op
    return {
        "tvm.relay": relay,
        "tvm.relay.dataflow_pattern": dataflow_pattern,
        "tvm.relay.op": op,
        "tvm.relay.op.nn": compat_op.nn,
        "tvm.relay.nn": compat_op.nn,
        "tvm.relay.image": compat_op.image,
        "tvm.relay.op.contrib": contrib,
        "tvm.relay.op.contrib.register": register,
        "tvm.relay.analysis": analysis,
        "tvm.relay.transform": transform,
        "tvm.relay.build_module": build_module,
    }


class _TvmProxy(types.ModuleType):
    """The real ``tvm`` package seen through a module with ``relay`` redirected.

    ``tvm.IRModule`` is bmlib-relax's Relay module class here, because a legacy
    script calls ``tvm.IRModule.from_expr(relay_function)``.
    """

    def __init__(self, relay_module: types.ModuleType):
        super().__init__("tvm")
        from ..relay.ast import IRModule

        self.__dict__["relay"] = relay_module
        self.__dict__["IRModule"] = IRModule

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("tvm"), name)


def _make_import(compat: dict[str, Any]) -> Callable[..., Any]:
    real_import = builtins.__import__
    proxy = _TvmProxy(compat["tvm.relay"])

    def compat_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "tvm" or name.startswith("tvm.relay")):
            if name in compat and fromlist:
                return compat[name]
            if name.startswith("tvm.relay") and name not in compat:
                raise ModuleNotFoundError(
                    f"No module named {name!r} (bmlib-relax's Relay compatibility layer "
                    f"provides: {', '.join(sorted(compat))})")
            real_import("tvm", globals, locals, (), 0)  # keep real side effects
            return proxy
        return real_import(name, globals, locals, fromlist, level)

    return compat_import


def load_legacy_module(path: str, kind: str = "module") -> types.ModuleType:
    """Execute the Python file at ``path`` with ``tvm.relay`` imports redirected."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise LegacyModuleError(f"{kind} file not found: {path}")
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    name = "bmlib_legacy_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    module = types.ModuleType(name)
    module.__file__ = path
    namespace = dict(vars(builtins))
    namespace["__import__"] = _make_import(_compat_modules())
    module.__dict__["__builtins__"] = namespace
    try:
        code = compile(source, path, "exec")
        exec(code, module.__dict__)  # noqa: S102 - the user's own pipeline code, by request
    except SyntaxError as exc:
        raise LegacyModuleError(f"{path}:{exc.lineno}:{exc.offset or 0}: syntax error in "
                                f"{kind}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - report any failure of user code with its line
        raise LegacyModuleError(f"{_user_frame(exc, path)}: {kind} raised "
                                f"{type(exc).__name__}: {exc}") from exc
    return module


def _user_frame(exc: BaseException, path: str) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return f"{path}:{frames[-1].lineno}" if frames else path


def load_pattern_table(path: str, compiler: str = "bmlib") -> list[tuple]:
    """The ``[(name, pattern[, check])]`` table of a legacy pattern module.

    Looks for ``@register_pattern_table("<compiler>")``, then a ``pattern_table()``
    function, then a ``PATTERNS``/``pattern_table`` list.
    """
    _PATTERN_TABLES.pop(compiler, None)
    module = load_legacy_module(path, "pattern table")
    table_fn = _PATTERN_TABLES.pop(compiler, None) or getattr(module, "pattern_table", None)
    try:
        table = table_fn() if callable(table_fn) else getattr(module, "PATTERNS", table_fn)
    except Exception as exc:  # noqa: BLE001
        raise LegacyModuleError(f"{_user_frame(exc, path)}: pattern_table() raised "
                                f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(table, (list, tuple)) or not table:
        raise LegacyModuleError(f"{path}: no pattern table found (expected a pattern_table() "
                                f"function or @register_pattern_table({compiler!r}))")
    for entry in table:
        if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3) \
                or not isinstance(entry[0], str):
            raise LegacyModuleError(f"{path}: pattern table entry {entry!r} is not "
                                    "(name, pattern[, check])")
    return [tuple(e) for e in table]


def load_lowerings(path: str) -> dict[str, Callable]:
    """Load a module's ``_LOWER_MAP`` and register every lowering in it."""
    module = load_legacy_module(path, "lowerings module")
    lower_map = getattr(module, "_LOWER_MAP", None)
    if not isinstance(lower_map, dict) or not lower_map:
        raise LegacyModuleError(f"{path}: no _LOWER_MAP dict of composite name -> function")
    register_lower_map(lower_map)
    return dict(lower_map)
