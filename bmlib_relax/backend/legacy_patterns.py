"""Translate legacy Relay DFPatterns into Relax DPL.

A Relay pattern names Relay ops with Relay arities (``is_op("reshape")(x)``);
the importer emits Relax ops, sometimes with extra non-tensor operands
(``relax.reshape(x, shape)``) or under other names (``transpose`` →
``relax.permute_dims``).  The tables here state, per Relay op, the Relax form
the importer produces, so a pattern written against Relay matches exactly the
calls the importer emitted for the same Relay ops.  Ops whose import is not a
single Relax call get a translator function registered with
:func:`register_pattern_translator`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from tvm.relax import dpl

from ..errors import BmlibError
from ..relay import dataflow_pattern as rp


class PatternTranslationError(BmlibError, ValueError):
    """A legacy pattern uses something with no Relax equivalent (names it)."""


# Relay op -> Relax op name, where it is not just "relax." + the Relay name.
RELAX_OP_NAME = {
    "transpose": "relax.permute_dims",
    "nn.batch_flatten": "relax.reshape",
    "copy": "relax.add",  # never matched in practice; kept explicit for clarity
}

# Relay op -> number of trailing non-tensor operands the Relax op adds.
EXTRA_OPERANDS = {
    "reshape": 1,
    "nn.batch_flatten": 1,
}

CallTranslator = Callable[[Sequence[dpl.DFPattern], rp.CallPattern], dpl.DFPattern]
_CALL_TRANSLATORS: dict[str, CallTranslator] = {}


def register_pattern_translator(relay_op: str) -> Callable[[CallTranslator], CallTranslator]:
    """Register how a Relay op's call pattern becomes Relax DPL."""

    def decorator(fn: CallTranslator) -> CallTranslator:
        if relay_op in _CALL_TRANSLATORS:
            raise ValueError(f"Relay op {relay_op!r} already has a pattern translator")
        _CALL_TRANSLATORS[relay_op] = fn
        return fn

    return decorator


def relax_op_name(relay_op: str) -> str:
    return RELAX_OP_NAME.get(relay_op, "relax." + relay_op)


def _translate_call(pattern: rp.CallPattern, memo: dict) -> dpl.DFPattern:
    if not isinstance(pattern.op, rp.OpPattern):
        raise PatternTranslationError("only is_op(...) calls can be translated, got a call of "
                                      f"{type(pattern.op).__name__}")
    name = pattern.op.name
    args = [translate(a, memo) for a in (pattern.args or ())]
    custom = _CALL_TRANSLATORS.get(name)
    if custom is not None:
        return custom(args, pattern)
    args += [dpl.wildcard() for _ in range(EXTRA_OPERANDS.get(name, 0))]
    if pattern.args is None:
        return dpl.is_op(relax_op_name(name))(varg_default_wildcard=True)
    return dpl.is_op(relax_op_name(name))(*args)


def translate(pattern: Any, memo: dict | None = None) -> dpl.DFPattern:
    """Relax DPL equivalent of a legacy Relay pattern (Relax patterns pass through).

    Shared sub-patterns stay shared (memoised by identity), as DPL requires for
    patterns that use one wildcard twice.
    """
    if isinstance(pattern, dpl.DFPattern):
        return pattern
    if not isinstance(pattern, rp.DFPattern):
        raise PatternTranslationError(f"not a pattern: {type(pattern).__name__}")
    memo = {} if memo is None else memo
    if id(pattern) in memo:
        return memo[id(pattern)]
    result = _translate_node(pattern, memo)
    memo[id(pattern)] = result
    return result


def _translate_node(p: rp.DFPattern, memo: dict) -> dpl.DFPattern:
    if isinstance(p, rp.WildcardPattern):
        return dpl.wildcard()
    if isinstance(p, rp.ConstantPattern):
        return dpl.is_const()
    if isinstance(p, rp.VarPattern):
        return dpl.is_var(p.name_hint) if p.name_hint else dpl.is_var()
    if isinstance(p, rp.CallPattern):
        return _translate_call(p, memo)
    if isinstance(p, rp.OpPattern):
        raise PatternTranslationError(f"is_op({p.name!r}) must be called with its arguments")
    if isinstance(p, rp.TupleGetItemPattern):
        index = -1 if p.index is None else p.index
        return dpl.is_tuple_get_item(translate(p.tuple_value, memo), index)
    if isinstance(p, rp.TuplePattern):
        if p.fields is None:
            return dpl.wildcard()
        return dpl.is_tuple([translate(f, memo) for f in p.fields])
    if isinstance(p, rp.AltPattern):
        return translate(p.left, memo) | translate(p.right, memo)
    if isinstance(p, rp.AttrPattern):
        return translate(p.pattern, memo).has_attr(p.attrs)
    if isinstance(p, rp.DataTypePattern):
        return translate(p.pattern, memo).has_dtype(p.dtype)
    if isinstance(p, rp.ShapePattern):
        return translate(p.pattern, memo).has_shape(list(p.shape))
    raise PatternTranslationError(f"{type(p).__name__} has no Relax DPL translation yet")


def is_legacy_pattern(pattern: Any) -> bool:
    return isinstance(pattern, rp.DFPattern)
