"""Running Relay-era bmlib code unchanged: pattern tables and TE lowerings."""
from .loader import (LegacyModuleError, load_legacy_module, load_lowerings, load_pattern_table,
                     partition_with_legacy_fn)
from .lowerings import get_legacy_lowering, register_legacy_lowering

__all__ = ["LegacyModuleError", "load_legacy_module", "load_pattern_table", "load_lowerings",
           "register_legacy_lowering", "get_legacy_lowering", "partition_with_legacy_fn"]
