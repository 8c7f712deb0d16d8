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

from ..registry import Registry

LegacyLowering = Callable[[Any, list], Any]

LOWERINGS: Registry[LegacyLowering] = Registry("legacy lowering for composite")


def register_legacy_lowering(name: str, fn: Optional[LegacyLowering] = None, *,
                             override: bool = False):
    """Register ``fn`` as the lowering of composite ``name`` (usable as a decorator)."""
    decorator = LOWERINGS.register(name, override=override)
    return decorator(fn) if fn is not None else decorator


def register_lower_map(lower_map: Mapping[str, LegacyLowering], *, override: bool = True) -> None:
    """Register every entry of a legacy ``_LOWER_MAP`` dict."""
    for name, fn in lower_map.items():
        register_legacy_lowering(str(name), fn, override=override)


def unregister_legacy_lowering(name: str) -> None:
    LOWERINGS.unregister(name)


def get_legacy_lowering(name: str) -> Optional[LegacyLowering]:
    return LOWERINGS.get(name)
