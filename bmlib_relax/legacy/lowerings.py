"""Registry of hand-written Relay-era TE lowerings, one per composite.

Relay-era bmlib code kept a ``_LOWER_MAP`` of ``composite_name -> fn(call,
inputs) -> te.Tensor`` (the style of TVM's old ``te_target.py``): ``call`` is
the composite's root Relay call and ``inputs`` TE tensors in the composite's
parameter order.  Registered here, such a function replaces the op-by-op
templates for its composite; the codegen hands it a Relay-style view of the
matched call and tensors bound to the partition's real arguments, and the arity
verifier still checks the PrimFunc it ends up in.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

LegacyLowering = Callable[[Any, list], Any]

_LOWERINGS: dict[str, LegacyLowering] = {}


def register_legacy_lowering(name: str, fn: Optional[LegacyLowering] = None, *,
                             override: bool = False):
    """Register ``fn`` as the lowering of composite ``name`` (usable as a decorator)."""

    def decorator(func: LegacyLowering) -> LegacyLowering:
        if not callable(func):
            raise TypeError(f"legacy lowering for {name!r} is not callable")
        if name in _LOWERINGS and not override:
            raise ValueError(f"composite {name!r} already has a legacy lowering")
        _LOWERINGS[name] = func
        return func

    return decorator(fn) if fn is not None else decorator


def register_lower_map(lower_map: Mapping[str, LegacyLowering], *, override: bool = True) -> None:
    """Register every entry of a legacy ``_LOWER_MAP`` dict."""
    for name, fn in lower_map.items():
        register_legacy_lowering(str(name), fn, override=override)


def unregister_legacy_lowering(name: str) -> None:
    _LOWERINGS.pop(name, None)


def get_legacy_lowering(name: str) -> Optional[LegacyLowering]:
    return _LOWERINGS.get(name)
