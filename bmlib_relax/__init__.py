"""bmlib-relax: move Relay models and bmlib BYOC pipelines onto TVM Relax.

Attributes are loaded on first use (PEP 562), so ``bmlib_relax.load`` — running
a shipped artifact — imports only the runtime (TVM and numpy), not the Relay
front door, the importer or the backend.

Importing the package registers the ``relax.ext.bmlib`` codegen, so TVM's own
BYOC flow (``partition_for_bmlib`` → ``relax.transform.RunCodegen()`` →
``tvm.compile``) finds it: at once if TVM is already imported, else as soon as
it is (TVM takes seconds to import; ``import bmlib_relax`` alone, e.g. by the
pytest plugin, does not pay that).  The registered function is a trampoline
that imports the backend on its first call.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
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
    "RunCheckError": ("errors", "RunCheckError"),
    "RunMemoryError": ("errors", "RunMemoryError"),
    "ArityMismatchError": ("errors", "ArityMismatchError"),
    "RecoveredMetadataWarning": ("errors", "RecoveredMetadataWarning"),
    "UnusedLoweringWarning": ("errors", "UnusedLoweringWarning"),
}

__all__ = sorted(_EXPORTS)


def _register_codegen() -> None:
    import tvm

    if tvm.get_global_func("relax.ext.bmlib", allow_missing=True) is not None:
        return  # the backend (or an earlier call) registered it

    @tvm.register_global_func("relax.ext.bmlib")
    def _bmlib_codegen(funcs, options, constant_names):
        from .backend.codegen import bmlib_codegen  # re-registers the real function

        return bmlib_codegen(funcs, options, constant_names)


class _AfterTVMImport(importlib.abc.MetaPathFinder):
    """Runs :func:`_register_codegen` once the ``tvm`` package has been executed."""

    _busy = False

    def find_spec(self, name, path, target=None):
        if name != "tvm" or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec("tvm")  # the real finders
        finally:
            self._busy = False
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module, _run=run):
                _run(module)
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                _register_codegen()

            spec.loader.exec_module = exec_module
        return spec


if "tvm" in sys.modules:
    _register_codegen()
elif not any(isinstance(f, _AfterTVMImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _AfterTVMImport())


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
