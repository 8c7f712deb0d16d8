"""Registry of hand-written Relay-era TE lowerings, one per composite.

Relay-era bmlib code kept a ``_LOWER_MAP`` of ``composite_name -> fn(call,
inputs) -> te.Tensor`` (the style of TVM's old ``te_target.py``): ``call`` is
the composite's root Relay call and ``inputs`` TE tensors in the composite's
parameter order.  Registered here, such a function replaces the op-by-op
templates for its composite; the codegen hands it a Relay-style view of the
matched call and tensors bound to the partition's real arguments, and the arity
verifier still checks the PrimFunc it ends up in.

Two lifetimes.  ``register_legacy_lowering`` is the explicit, process-wide
registry.  Lowerings *supplied to one call* — ``bmlib_relax.compile(...,
lowerings={...})``, ``convert``'s ``--lowerings`` file — live in a
:func:`lowering_scope` for that call only: a later ``compile()`` in the same
process must not silently lower with them.  Inside a scope,
``register_lower_map`` (what loading a ``_LOWER_MAP`` module does) registers
into the scope; scoped lowerings win over global ones of the same name.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator, Mapping, Optional, TypeVar

from ..errors import ParamError
from ..registry import Registry

LegacyLowering = Callable[[Any, list], Any]
F = TypeVar("F", bound=Callable[..., Any])

LOWERINGS: Registry[LegacyLowering] = Registry("legacy lowering for composite")

_SCOPE: contextvars.ContextVar[Optional[dict[str, LegacyLowering]]] = contextvars.ContextVar(
    "bmlib_legacy_lowering_scope", default=None)


def register_legacy_lowering(name: str, fn: Optional[LegacyLowering] = None, *,
                             override: bool = False):
    """Register ``fn`` as the lowering of composite ``name`` for the whole process
    (usable as a decorator)."""
    decorator = LOWERINGS.register(name, override=override)
    return decorator(fn) if fn is not None else decorator


def _checked(lower_map: Mapping[str, LegacyLowering]) -> dict[str, LegacyLowering]:
    if not isinstance(lower_map, Mapping):
        raise ParamError(f"lowerings must map composite names to functions, got "
                         f"{type(lower_map).__name__}", "lowerings")
    for name, fn in lower_map.items():
        if not callable(fn):
            raise ParamError(f"legacy lowering for composite {name!r} is not callable "
                             f"({type(fn).__name__})", str(name))
    return {str(name): fn for name, fn in lower_map.items()}


def register_lower_map(lower_map: Mapping[str, LegacyLowering], *, override: bool = True) -> None:
    """Register every entry of a legacy ``_LOWER_MAP`` dict: into the active
    :func:`lowering_scope` when there is one, else for the whole process."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.update(_checked(lower_map))
        return
    for name, fn in lower_map.items():
        register_legacy_lowering(str(name), fn, override=override)


@contextlib.contextmanager
def lowering_scope(lowerings: Optional[Mapping[str, LegacyLowering]] = None
                   ) -> Iterator[dict[str, LegacyLowering]]:
    """Make ``lowerings`` (and whatever ``register_lower_map`` adds inside the block)
    visible only inside the block; an enclosing scope's lowerings stay visible."""
    scope = dict(_SCOPE.get() or {})
    scope.update(_checked(lowerings or {}))
    token = _SCOPE.set(scope)
    patterns = _PATTERNS.set(dict(_PATTERNS.get() or {}))
    try:
        yield scope
    finally:
        _PATTERNS.reset(patterns)
        _SCOPE.reset(token)


def scoped_lowerings(fn: F) -> F:
    """Run every call of ``fn`` in its own :func:`lowering_scope` (for entry points such
    as ``convert`` that load a ``_LOWER_MAP`` module for one conversion)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lowering_scope():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def unregister_legacy_lowering(name: str) -> None:
    LOWERINGS.unregister(name)


def scoped_lowering_names() -> list[str]:
    """Names of the lowerings given to this call (the active scope's), sorted."""
    return sorted(_SCOPE.get() or {})


def get_legacy_lowering(name: str) -> Optional[LegacyLowering]:
    """The lowering of composite ``name``: the active scope's, else the global one."""
    scope = _SCOPE.get()
    if scope is not None and name in scope:
        return scope[name]
    return LOWERINGS.get(name)


# The legacy Relay pattern each composite was matched with, for the codegen: a
# lowering's inputs follow the pattern's order (v0.19 ``CreateGroup`` visited the
# pattern post-DFS, so ``add(abs(_), exp(_))`` matched on ``add(exp(b), abs(a))``
# gave ``(a, b)``).  Scoped like the lowerings; the last pattern given a name wins.
_PATTERNS: contextvars.ContextVar[Optional[dict[str, Any]]] = contextvars.ContextVar(
    "bmlib_legacy_patterns", default=None)
_GLOBAL_PATTERNS: dict[str, Any] = {}


def remember_legacy_pattern(name: str, pattern: Any) -> None:
    """Record the legacy Relay pattern of composite ``name`` (called where a legacy
    table is resolved); kept in the active :func:`lowering_scope`, else process-wide."""
    scope = _PATTERNS.get()
    (scope if scope is not None else _GLOBAL_PATTERNS)[str(name)] = pattern


def legacy_pattern_of(name: str) -> Any:
    """The legacy Relay pattern composite ``name`` was matched with (``None``: unknown)."""
    scope = _PATTERNS.get()
    if scope is not None and name in scope:
        return scope[name]
    return _GLOBAL_PATTERNS.get(name)
