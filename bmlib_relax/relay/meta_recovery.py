"""Recover boxed attribute values from printed types when ``#[metadata]`` was omitted.

TVM v0.19's Relay printer writes an attribute value it has no literal syntax for
as a metadata reference.  ``split``'s ``indices_or_sections`` is the one Relay attr
held in boxed runtime scalars (``Variant<runtime::Int, Array<runtime::Int>>``):
``split(%x, 3)`` prints ``indices_or_sections=meta[runtime.BoxInt][0]`` and
``split(%x, [2, 5])`` prints ``[meta[runtime.BoxInt][0], meta[runtime.BoxInt][1]]``
(``runtime.BoxFloat`` / ``runtime.BoxBool`` would print alike).  Printed with
``show_meta_data=False`` (``print(mod)``, ``mod.astext(show_meta_data=False)``)
the values are gone -- but the call's ``/* ty=... */`` comment often still
determines them: a split's output tuple gives the number of sections and the part
sizes along the axis.

A *recoverer* per op (registered with :func:`recovers`) gets the call's attributes
and its printed type and returns the attributes it could determine, or raises
:class:`NotDetermined` saying why not.  Only values the type determines uniquely
are recovered; everything else stays a :class:`~bmlib_relax.relay.ast.MetaRef`,
which the importer rejects by name and location, as it always did.  Tensors
(``meta[relay.Constant][N]``) are never recovered: a type gives no values.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Any, Callable, Mapping, NamedTuple, Optional

from . import ast as A

__all__ = ["BOX_KIND_PREFIX", "NotDetermined", "Recovery", "box_refs", "recovers",
           "recover_attrs", "recoverable_ops"]

#: Type keys of TVM's boxed runtime scalars (``runtime.BoxInt``, ``runtime.BoxFloat``,
#: ``runtime.BoxBool``): the metadata kinds a printed type can stand in for.
BOX_KIND_PREFIX = "runtime.Box"


class NotDetermined(Exception):
    """The printed type does not determine the value; the message says why."""


class Recovery(NamedTuple):
    """One attribute value recovered from a printed type."""

    location: str  # file:line:column of the call
    op: str
    attr: str
    printed: str   # what the text had, e.g. ``meta[runtime.BoxInt][0]``
    value: Any

    def __str__(self) -> str:
        return (f"{self.location}: {self.op} {self.attr}={_show(self.value)} "
                f"(printed {self.printed})")


Recoverer = Callable[[Mapping[str, Any], A.Type], dict[str, Any]]
_RECOVERERS: dict[str, Recoverer] = {}


def recovers(*op_names: str) -> Callable[[Recoverer], Recoverer]:
    """Register ``fn(attrs, printed_type) -> {attr: value}`` for ``op_names``.

    ``attrs`` are the call's attributes as parsed (boxed values still
    :class:`~bmlib_relax.relay.ast.MetaRef`); the result holds only the attributes
    whose value the type determines.  Raise :class:`NotDetermined` otherwise.
    """
    def register(fn: Recoverer) -> Recoverer:
        for name in op_names:
            _RECOVERERS[name] = fn
        return fn
    return register


def recoverable_ops() -> list[str]:
    """Ops whose boxed attributes can be recovered from their printed type."""
    return sorted(_RECOVERERS)


def box_refs(value: Any) -> list[A.MetaRef]:
    """The ``meta[runtime.Box*][N]`` references in an attribute value (lists included)."""
    if isinstance(value, A.MetaRef):
        return [value] if value.kind.startswith(BOX_KIND_PREFIX) else []
    if isinstance(value, (tuple, list)):
        return [ref for item in value for ref in box_refs(item)]
    return []


def printed_ref(value: Any) -> str:
    """An attribute value as the text had it (``[meta[runtime.BoxInt][0], 4]``)."""
    if isinstance(value, A.MetaRef):
        return f"meta[{value.kind}][{value.index}]"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(printed_ref(v) for v in value) + "]"
    return repr(value)


def recover_attrs(op_name: str, attrs: Mapping[str, Any], printed_type: Optional[A.Type],
                  location: str) -> tuple[dict[str, Any], list[Recovery], Optional[str]]:
    """Fill the boxed attribute values of one call from its printed type.

    Returns ``(attrs, recoveries, reason)``: the attributes with every determined
    value filled in, what was filled in, and -- when some boxed value stays --
    why the type does not determine it.
    """
    boxed = [key for key, value in attrs.items() if box_refs(value)]
    if not boxed:
        return dict(attrs), [], None
    recoverer = _RECOVERERS.get(op_name)
    try:
        if recoverer is None:
            raise NotDetermined(f"no rule recovers {op_name} attributes from a printed type")
        if printed_type is None:
            raise NotDetermined("the call has no readable /* ty=... */ comment")
        found = recoverer(attrs, printed_type)
    except NotDetermined as exc:
        return dict(attrs), [], str(exc)
    out = dict(attrs)
    recoveries = []
    for key in boxed:
        if key in found:
            out[key] = found[key]
            recoveries.append(Recovery(location, op_name, key, printed_ref(attrs[key]),
                                       found[key]))
    left = [key for key in boxed if key not in found]
    reason = f"the printed type does not determine {', '.join(left)}" if left else None
    return out, recoveries, reason


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _tensor_fields(ty: A.Type) -> tuple[A.TensorType, ...]:
    if not isinstance(ty, A.TupleType) or not all(isinstance(f, A.TensorType)
                                                  for f in ty.fields):
        raise NotDetermined("the printed type is not a tuple of tensors")
    return ty.fields  # type: ignore[return-value]


def _int_attr(attrs: Mapping[str, Any], key: str, default: int) -> int:
    value = attrs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotDetermined(f"{key}={printed_ref(value)} is not an integer")
    return value


@recovers("split")
def _split(attrs: Mapping[str, Any], ty: A.Type) -> dict[str, Any]:
    """Sections = number of parts; indices = running sum of the part sizes.

    A single boxed value is a number of sections (Relay's ``Variant<Int,
    Array<Int>>``): the parts must then be equal wherever their size is printed.
    A list has one index per part but the last; every part but the last needs a
    static size along the axis, and literal entries must agree with the sizes.
    """
    value = attrs.get("indices_or_sections")
    other = {ref.kind for ref in box_refs(value)} - {"runtime.BoxInt"}
    if other:  # Relay boxes split's indices and sections as runtime::Int only
        raise NotDetermined(f"indices_or_sections holds {', '.join(sorted(other))}, "
                            "not the runtime.BoxInt Relay printed")
    fields = _tensor_fields(ty)
    if not fields:
        raise NotDetermined("the printed type has no parts")
    rank = len(fields[0].shape)
    if any(len(f.shape) != rank for f in fields):
        raise NotDetermined("the printed parts differ in rank")
    axis = _int_attr(attrs, "axis", 0)
    if not -rank <= axis < rank:
        raise NotDetermined(f"axis {axis} is out of range for rank {rank}")
    sizes = [f.shape[axis % rank] for f in fields]
    shown = "[" + ", ".join(str(s) if isinstance(s, int) else "?" for s in sizes) + "]"
    if isinstance(value, A.MetaRef):
        known = {s for s in sizes if isinstance(s, int)}
        if len(known) > 1:
            raise NotDetermined(f"one value means equal sections, but the printed "
                                f"parts have sizes {shown} along axis {axis}")
        return {"indices_or_sections": len(fields)}
    if not isinstance(value, tuple):
        raise NotDetermined(f"indices_or_sections={printed_ref(value)} is neither "
                            "a number nor a list")
    if len(value) != len(fields) - 1:
        raise NotDetermined(f"{len(value)} indices but the printed type has "
                            f"{len(fields)} parts")
    if not all(isinstance(s, int) for s in sizes[:-1]):
        raise NotDetermined(f"the printed part sizes {shown} along axis {axis} are "
                            "not all static")
    indices = tuple(accumulate(sizes[:-1]))
    for given, derived in zip(value, indices):
        if not isinstance(given, A.MetaRef) and given != derived:
            raise NotDetermined(f"index {printed_ref(given)} contradicts the printed part "
                                f"sizes {shown} (indices {list(indices)})")
    return {"indices_or_sections": indices}
