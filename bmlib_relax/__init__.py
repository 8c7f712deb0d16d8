"""bmlib-relax: move Relay models and bmlib BYOC pipelines onto TVM Relax.

Attributes are loaded on first use (PEP 562), so ``bmlib_relax.load`` — running
a shipped artifact — imports only the runtime (TVM and numpy), not the Relay
front door, the importer or the backend.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (submodule, attribute)
_EXPORTS = {
    "compile": ("compiler", "compile"),
    "compile_plain": ("compiler", "compile_plain"),
    "CompiledModel": ("compiler", "CompiledModel"),
    "import_relay": ("importer", "import_relay"),
    "partition_for_bmlib": ("backend.partition", "partition_for_bmlib"),
    "register_legacy_lowering": ("legacy.lowerings", "register_legacy_lowering"),
    "load": ("runtime", "load"),
    "OffloadReport": ("report", "OffloadReport"),
    "BmlibError": ("errors", "BmlibError"),
    "ParseError": ("errors", "ParseError"),
    "UnsupportedOpError": ("errors", "UnsupportedOpError"),
    "ConversionError": ("errors", "ConversionError"),
    "ParamError": ("errors", "ParamError"),
    "CodegenError": ("errors", "CodegenError"),
    "ArtifactError": ("errors", "ArtifactError"),
    "ArityMismatchError": ("errors", "ArityMismatchError"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'bmlib_relax' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module_name}", __name__), attr)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))
