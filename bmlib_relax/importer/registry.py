"""The converter registry: one function per Relay op.

A converter has the uniform signature ``(inputs, attrs, ctx) -> relax.Expr``:
``inputs`` are the already converted arguments (Relax expressions, in Relay's
argument order), ``attrs`` the Relay call's read-only attribute mapping, and
``ctx`` a :class:`~bmlib_relax.importer.converter.ConvertContext` giving access
to the block builder and the Relay call (for locations and types).  The driver
never special-cases an op; adding an op means adding one decorated function in
the module of its family under :mod:`bmlib_relax.importer.ops`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..registry import Registry

Converter = Callable[..., Any]


def _load_families() -> None:
    from . import ops  # noqa: F401  (importing the package registers every family)


CONVERTERS: Registry[Converter] = Registry("converter for Relay op", _load_families)


def register_converter(*op_names: str) -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of each Relay op in ``op_names`` (no duplicates)."""
    return CONVERTERS.register(*op_names)


def get_converter(op_name: str) -> Converter | None:
    return CONVERTERS.get(op_name)


def supported_ops() -> Sequence[str]:
    """Sorted names of every Relay op the importer converts (from the registry)."""
    return CONVERTERS.names()
