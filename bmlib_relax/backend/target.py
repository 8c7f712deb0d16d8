"""Targets: the host CPU by default, and the vector width the templates block for.

``"llvm"`` alone (or ``mcpu=native``, which this TVM silently treats as
``generic``) produces code without AVX; the templates are written for the
host's real vector unit, so the default target names the CPU LLVM detects.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import tvm

TargetLike = Union[str, dict, tvm.target.Target, None]

# Widest vector register (bits) by the LLVM feature that provides it, widest first.
_VECTOR_BITS = (("avx512f", 512), ("avx", 256), ("sse2", 128), ("neon", 128))


def host_target() -> dict:
    """``{"kind": "llvm", "mcpu": <the CPU LLVM detects>}``."""
    return {"kind": "llvm", "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}


def resolve_target(target: TargetLike) -> tvm.target.Target:
    """``None`` means the host CPU; anything else is passed to ``tvm.target.Target``."""
    if isinstance(target, tvm.target.Target):
        return target
    return tvm.target.Target(host_target() if target is None else target)


def vector_bits(target: TargetLike) -> int:
    """Width of the target's vector registers in bits (128 when nothing wider is known)."""
    resolved = resolve_target(target)
    if str(resolved.kind.name) != "llvm":
        return 128
    for feature, bits in _VECTOR_BITS:
        try:
            if tvm.target.codegen.target_has_features(feature, resolved):
                return bits
        except Exception:  # noqa: BLE001 - a feature unknown to this LLVM backend
            continue
    return 128


def vector_lanes(target: TargetLike, dtype: str = "float32") -> int:
    """Elements of ``dtype`` in one vector register of ``target``."""
    return max(1, vector_bits(target) // tvm.runtime.DataType(dtype).bits)


def target_key(target: Optional[Any]) -> str:
    return str(resolve_target(target))
