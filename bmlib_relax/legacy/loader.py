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
import os
import traceback
import types
from typing import Any, Callable, Optional

from ..errors import BmlibError
from .compat import (compat_modules, forget_table, register_pattern_table,
                     registered_table)
from .lowerings import register_lower_map


class LegacyModuleError(BmlibError):
    """A legacy pattern/lowering module could not be loaded or used (names the file)."""


# ----------------------------------------------------------------- compat namespace
#: Where a legacy table file is taken to live, for its relative imports
#: (``from .register import register_pattern_table``, ``from ... import _ffi_api``).
LEGACY_PACKAGE = "tvm.relay.op.contrib"


def _resolve_relative(name: str, globals_: Optional[dict], level: int) -> str:
    package = (globals_ or {}).get("__package__") or LEGACY_PACKAGE
    parts = package.split(".")
    if level > len(parts):
        raise ImportError(f"attempted relative import beyond {package!r}")
    base = ".".join(parts[:len(parts) - level + 1])
    return f"{base}.{name}" if name else base


def _make_import(compat: dict[str, Any]) -> Callable[..., Any]:
    real_import = builtins.__import__
    root = compat["tvm"]

    def compat_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level > 0:
            name, level = _resolve_relative(name, globals, level), 0
        if name == "tvm" or name.startswith("tvm."):
            if name in compat:
                return compat[name] if fromlist else root
            if name.startswith("tvm.relay"):
                raise ModuleNotFoundError(
                    f"No module named {name!r} (bmlib-relax's Relay compatibility layer "
                    f"provides: {', '.join(sorted(compat))})")
            module = real_import(name, globals, locals, fromlist, 0)  # e.g. tvm.contrib
            return module if fromlist else root
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
    module.__package__ = LEGACY_PACKAGE
    namespace = dict(vars(builtins))
    namespace["__import__"] = _make_import(compat_modules())
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
    before = {c: registered_table(c) for c in (compiler,)}
    forget_table(compiler)
    module, registered = _load_registering(path)
    if compiler in registered:
        table_fn = registered[compiler]
    elif len(registered) == 1:  # a vendor table: @register_pattern_table("dnnl")
        table_fn = next(iter(registered.values()))
    else:
        table_fn = getattr(module, "pattern_table", None)
    if before[compiler] is not None and compiler not in registered:
        register_pattern_table(compiler, before[compiler])
    try:
        table = table_fn() if callable(table_fn) else getattr(module, "PATTERNS", table_fn)
    except Exception as exc:  # noqa: BLE001
        raise LegacyModuleError(f"{_user_frame(exc, path)}: pattern_table() raised "
                                f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(table, (list, tuple)) or not table:
        raise LegacyModuleError(f"{path}: no pattern table found (expected a pattern_table() "
                                f"function or @register_pattern_table({compiler!r}))")
    table = [entry for entry in table if entry not in ((), [], None)]
    for entry in table:
        if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3) \
                or not isinstance(entry[0], str):
            raise LegacyModuleError(f"{path}: pattern table entry {entry!r} is not "
                                    "(name, pattern[, check])")
    return [tuple(e) for e in table]


def _load_registering(path: str) -> tuple[types.ModuleType, dict[str, Callable]]:
    """Load a table module; also return the tables it registered while loading."""
    from . import compat

    seen = dict(compat._PATTERN_TABLES)
    module = load_legacy_module(path, "pattern table")
    registered = {c: fn for c, fn in compat._PATTERN_TABLES.items() if seen.get(c) is not fn}
    return module, registered


def load_partition_fn(path: str, name: str) -> Callable:
    """A ``partition_for_<x>(mod, params)`` function defined in a legacy module."""
    module = load_legacy_module(path, "partition function module")
    fn = getattr(module, name, None)
    if not callable(fn):
        available = sorted(n for n, v in vars(module).items()
                           if n.startswith("partition") and callable(v))
        raise LegacyModuleError(f"{path}: no function {name!r} (partition functions: "
                                f"{', '.join(available) or 'none'})")
    return fn


def load_lowerings(path: str) -> dict[str, Callable]:
    """Load a module's ``_LOWER_MAP`` and register every lowering in it."""
    module = load_legacy_module(path, "lowerings module")
    lower_map = getattr(module, "_LOWER_MAP", None)
    if not isinstance(lower_map, dict) or not lower_map:
        raise LegacyModuleError(f"{path}: no _LOWER_MAP dict of composite name -> function")
    register_lower_map(lower_map)
    return dict(lower_map)


def partition_with_legacy_fn(path: str, name: str, module: Any, weights: dict
                             ) -> tuple[Any, list, bool, dict]:
    """Run ``name(mod, params)`` from the legacy module at ``path`` on a Relay module.

    Returns the rewritten Relay module, the pattern list its ``MergeComposite`` /
    ``AnnotateTarget`` calls asked for, whether it merged compiler regions, and the
    weights it left unbound (see :mod:`.passes`).  Errors name the file and line.
    """
    from .passes import UnsupportedPassError, run_partition_fn

    from ..relay.ast import IRModule

    fn = load_partition_fn(path, name)
    # The helper rewrites ``mod["main"]`` in place, as Relay helpers did: give it a copy.
    module = IRModule(dict(module.functions), module.type_definitions, module.metadata,
                      module.source_name)
    try:
        result, patterns, merge = run_partition_fn(fn, module, dict(weights),
                                                   where=f"{path}: {name}()")
    except UnsupportedPassError as exc:
        raise LegacyModuleError(f"{_user_frame(exc, path)}: {name}() {exc}") from exc
    except BmlibError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: name the line
        raise LegacyModuleError(f"{_user_frame(exc, path)}: {name}() raised "
                                f"{type(exc).__name__}: {exc}") from exc
    inputs = {v.name for v in result["main"].params}
    return result, patterns, merge, {k: v for k, v in weights.items() if k in inputs}
