"""``partition_for_bmlib``: carve bmlib partitions out of a Relax module."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import tvm
from tvm import relax

from ..errors import BmlibError
from .legacy_patterns import translate
from .patterns import check_tensors, get_bmlib_patterns


def resolve_patterns(patterns: Optional[Sequence[Any]]) -> list:
    """Normalise a pattern list for ``FuseOpsByPattern`` (highest priority first).

    ``None`` means the registered ``bmlib.*`` table.  Entries may be
    ``(name, pattern)``, ``(name, pattern, check)`` or ``(name, pattern,
    annotations, check)``, with ``pattern`` in Relax DPL or legacy Relay syntax.
    """
    if patterns is None:
        return get_bmlib_patterns()
    resolved = []
    for entry in patterns:
        if isinstance(entry, relax.transform.FusionPattern):
            resolved.append(entry)
            continue
        if not isinstance(entry, (tuple, list)) or len(entry) < 2:
            raise BmlibError(f"pattern entry {entry!r} is not (name, pattern[, check])")
        name, pattern = str(entry[0]), translate(entry[1])
        if len(entry) == 2:
            resolved.append((name, pattern, {}, check_tensors))
        elif len(entry) == 3:
            resolved.append((name, pattern, {}, entry[2]))
        else:
            resolved.append((name, pattern, entry[2], entry[3]))
    return resolved


def partition_for_bmlib(mod: tvm.IRModule, patterns: Optional[Sequence[Any]] = None,
                        merge: bool = False) -> tvm.IRModule:
    """Partition ``mod`` for bmlib, TVM-style.

    Weights stay arguments of the partitions (``bind_constants=False``), so a
    partition's parameters are exactly what its call passes.  ``merge=True``
    groups neighbouring composites into one partition.
    """
    fuse = relax.transform.FuseOpsByPattern(resolve_patterns(patterns), bind_constants=False,
                                            annotate_codegen=not merge)
    mod = fuse(mod)
    if merge:
        mod = relax.transform.MergeCompositeFunctions()(mod)
    return mod
