"""Targets: the host CPU by default, and the vector width the templates block for.

``"llvm"`` alone (or ``mcpu=native``, which this TVM silently treats as
``generic``) produces code without AVX; the templates are written for the
host's real vector unit, so the default target names the CPU LLVM detects.

Targets as Relay/tvmc users write them (``"llvm -mcpu=skylake-avx512
-mattr=+avx2,+fma"``) are translated to TVM 0.27's dict form, which refuses
the string form; ``mcpu=native`` becomes the CPU LLVM detects.  Anything TVM
would refuse or silently ignore (an unknown kind or option, a CPU LLVM does not
know) is a :class:`~bmlib_relax.errors.TargetError` that spells the dict to use.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Any, Optional, Union

import tvm

from ..errors import TargetError

TargetLike = Union[str, dict, tvm.target.Target, None]

# Widest vector register (bits) by the LLVM feature that provides it, widest first.
_VECTOR_BITS = (("avx512f", 512), ("avx", 256), ("sse2", 128), ("neon", 128))


def host_target() -> dict:
    """``{"kind": "llvm", "mcpu": <the CPU LLVM detects>}``."""
    return {"kind": "llvm", "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}


# Options whose value is a list in the dict form (comma-separated in the string form).
_LIST_OPTIONS = {"mattr", "libs", "keys"}


def parse_target_string(text: str) -> dict:
    """``"llvm -mcpu=x -mattr=+a,+b -fast-math"`` -> ``{"kind": "llvm", "mcpu": "x",
    "mattr": ["+a", "+b"], "fast-math": True}`` (the tvmc / Relay spelling)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise TargetError(f"target {text!r}: {exc}", text) from None
    if not words or words[0].startswith("-"):
        raise TargetError(f"target {text!r}: expected a target kind first (e.g. llvm)", text)
    config: dict[str, Any] = {"kind": words[0]}
    for word in words[1:]:
        if not word.startswith("-") or word == "-":
            raise TargetError(f"target {text!r}: expected -option=value, got {word!r}", text)
        key, sep, value = word.lstrip("-").partition("=")
        if not sep:
            config[key] = True
        elif key in _LIST_OPTIONS:
            config[key] = [v for v in value.split(",") if v]
        elif value.lstrip("-").isdigit():
            config[key] = int(value)
        else:
            config[key] = value
    return config


def _spelling(config: dict) -> str:
    return json.dumps(config)


def _known_cpu(config: dict) -> None:
    """LLVM ignores an unknown ``mcpu`` (generic code, no AVX): refuse it instead."""
    mcpu = config.get("mcpu")
    if config.get("kind") != "llvm" or not isinstance(mcpu, str):
        return
    triple = config.get("mtriple") or str(tvm.target.codegen.llvm_get_system_triple())
    if not tvm.target.codegen.llvm_is_valid_cpu(mcpu, triple):
        raise TargetError(f"target {_spelling(config)}: LLVM does not know the CPU "
                          f"{mcpu!r} for {triple} (it would silently build generic code); "
                          f"the host CPU is {tvm.target.codegen.llvm_get_system_cpu()!r}",
                          _spelling(config))


def resolve_target(target: TargetLike) -> tvm.target.Target:
    """``None`` means the host CPU; a target string (``"llvm -mcpu=..."``) or dict is
    translated and checked; a ``Target`` is used as given."""
    if isinstance(target, tvm.target.Target):
        return target
    if target is None:
        return tvm.target.Target(host_target())
    original = target
    if isinstance(target, str):
        stripped = target.strip()
        if stripped.startswith("{"):
            try:
                target = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise TargetError(f"target is not valid JSON: {exc}", stripped) from None
        else:
            target = parse_target_string(stripped)
    if isinstance(target, dict):
        target = dict(target)
        if target.get("mcpu") == "native":  # TVM 0.27 treats "native" as generic
            target["mcpu"] = str(tvm.target.codegen.llvm_get_system_cpu())
        kind = target.get("kind")
        if kind not in set(tvm.target.Target.list_kinds()):
            raise TargetError(f"unknown target kind {kind!r} in {original!r}; TVM knows "
                              f"{', '.join(sorted(tvm.target.Target.list_kinds()))}",
                              str(original))
        _known_cpu(target)
    try:
        return tvm.target.Target(target)
    except Exception as exc:  # noqa: BLE001 - TVM reports bad targets as ValueError/TVMError
        reason = str(exc).split(". Target creation")[0].split(" Known options")[0].strip()
    usable = _without_unknown_options(target) if isinstance(target, dict) else None
    hint = f"; write --target '{_spelling(usable)}'" if usable else ""
    raise TargetError(f"target {original!r} is not accepted by TVM 0.27: {reason}{hint}",
                      str(original))


def runnable_target(target: TargetLike, what: str = "target") -> tvm.target.Target:
    """``target`` resolved (:func:`resolve_target`) if this machine can run what is built
    for it, else a ``TargetError`` naming it (``what``: how the user spelt the option).

    Every build here is run here — ``compile`` returns a runnable model, ``convert`` and
    ``verify`` compute its outputs — so a GPU or C-source target, or LLVM for another
    CPU architecture, failed after the whole compile with an internal error (a TIR or an
    architecture mismatch).  Only LLVM for the host's architecture is supported.  The
    kind is checked before TVM resolves it (resolving ``cuda`` prints C++ warnings)."""
    if isinstance(target, tvm.target.Target):
        kind = str(target.kind.name)
    elif isinstance(target, dict):
        kind = target.get("kind")
    else:
        kind = (str(target).split() or [""])[0] if target is not None else "llvm"
    if kind != "llvm" and kind in tvm.target.Target.list_kinds():  # unknown: resolve says so
        raise TargetError(f"{what} {kind}: not supported; bmlib-relax builds for the CPU it "
                          "runs on, with LLVM (kind 'llvm', e.g. 'llvm -mcpu=skylake-avx512')",
                          str(target))
    resolved = resolve_target(target)
    if str(resolved.kind.name) != "llvm":  # a tag naming another kind
        raise TargetError(f"{what} {target}: kind {resolved.kind.name!r} is not supported; "
                          "bmlib-relax builds for the host CPU with LLVM", str(target))
    triple = resolved.attrs.get("mtriple")
    host = str(tvm.target.codegen.llvm_get_system_triple())
    if triple and str(triple).split("-")[0] != host.split("-")[0]:
        raise TargetError(f"{what}: cross-compiling for {triple} is not supported: the "
                          f"model built is run here ({host})", str(target))
    return resolved


def _without_unknown_options(config: dict) -> Optional[dict]:
    """``config`` minus the options TVM names as unknown, if TVM then accepts it."""
    config = dict(config)
    for _ in range(len(config)):
        try:
            tvm.target.Target(config)
            return config
        except Exception as exc:  # noqa: BLE001
            match = re.search(r"Unknown config option '([^']+)'", str(exc))
            if not match or match.group(1) not in config:
                return None
            del config[match.group(1)]
    return None


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


def vector_registers(target: TargetLike) -> int:
    """Architectural vector registers a register tile may use: 32 zmm with AVX-512,
    else 16 (x86 xmm/ymm; the conservative count elsewhere)."""
    return 32 if vector_bits(target) >= 512 else 16


def vector_lanes(target: TargetLike, dtype: str = "float32") -> int:
    """Elements of ``dtype`` in one vector register of ``target``."""
    return max(1, vector_bits(target) // tvm.runtime.DataType(dtype).bits)


def target_key(target: Optional[Any]) -> str:
    return str(resolve_target(target))
