"""bmlib-relax: move Relay models and bmlib BYOC pipelines onto TVM Relax."""
from __future__ import annotations

from .backend.partition import partition_for_bmlib
from .compiler import CompiledModel, compile, compile_plain
from .errors import (
    ArityMismatchError, BmlibError, CodegenError, ConversionError, ParamError, ParseError,
    UnsupportedOpError,
)
from .importer import import_relay
from .report import OffloadReport

__version__ = "0.1.0"

__all__ = [
    "compile", "compile_plain", "CompiledModel", "import_relay", "partition_for_bmlib",
    "OffloadReport", "BmlibError", "ParseError", "UnsupportedOpError", "ConversionError",
    "ParamError", "CodegenError", "ArityMismatchError",
]
