"""Relay's annotation ops: markers for passes, the identity when a model runs.

In v0.19 (src/relay/op/annotation/annotation.cc) ``annotation.stop_fusion``,
``annotation.checkpoint``, ``annotation.cast_hint``, ``annotation.compiler_begin`` and
``annotation.compiler_end`` all have ``IdentityRel`` and an ``FTVMCompute`` of
``topi::identity``: ``relay.build`` kept them (nothing removed them unless a pass that
reads them ran: FuseOps stopped a fused group at ``stop_fusion``, ``PartitionGraph``
replaced a ``compiler_begin``/``compiler_end`` region by an external function, the
gradient pass recomputed at a ``checkpoint``, VTA's quantizer read ``cast_hint``) and
each ran as a copy of its operand.  They import as that operand itself, so no op is
emitted: the ops on either side stay adjacent in the Relax graph and bmlib's patterns
fuse and offload them as if the annotation were not there (which is what the marker
asked of Relay's own fuser for ``stop_fusion`` only; a fusion boundary changes no
value, so the results are the same).

``debug`` is refused: it called a Python callback (``relay.debug``: ``pdb``) from the
interpreter; a build did not lower it (``LowerTensorExpr`` skips debug primitives).
"""
from __future__ import annotations

from typing import Any, Mapping

import tvm
from tvm import relax

from ..registry import register_converter
from ..typecheck import value_type

# The attribute each op's v0.19 attrs node has (CastHintAttrs, CompilerAttrs; the
# others have none).  v0.19's ops declare no attrs type, so its printer put these in
# the #[metadata] section (``meta[relay.attrs.CastHintAttrs][0]``); written inline
# (``dtype="int8"``, as printed without metadata) they are read the same.
_FIELDS = {
    "annotation.stop_fusion": (),
    "annotation.checkpoint": (),
    "annotation.cast_hint": ("dtype",),
    "annotation.compiler_begin": ("compiler",),
    "annotation.compiler_end": ("compiler",),
}


def _check_attrs(attrs: Mapping[str, Any], ctx) -> None:
    """Refuse an attribute the op's v0.19 attrs node does not have, a ``compiler`` that is
    not a string and a ``dtype`` TVM does not know (``CreateObject`` refused them)."""
    fields = _FIELDS[ctx.op_name]
    for name in attrs:
        if name not in fields:
            have = f"only {', '.join(fields)}" if fields else "no attributes"
            raise ctx.error(f"unknown attribute {name!r}: the op has {have}")
    compiler = attrs.get("compiler")
    if "compiler" in attrs and not isinstance(compiler, str):
        raise ctx.error(f"compiler={compiler!r} must be a string (the external compiler's "
                        "name)")
    dtype = attrs.get("dtype")
    if "dtype" in attrs:
        try:
            tvm.DataType(str(dtype))
        except Exception:  # noqa: BLE001 - TVM's dtype parser names no place
            raise ctx.error(f"dtype={dtype!r} is not a dtype") from None


def _is_tuple(value: Any) -> bool:
    return isinstance(value_type(value), relax.TupleType) or isinstance(value, relax.Tuple)


@register_converter("annotation.stop_fusion", "annotation.cast_hint",
                    "annotation.compiler_begin", "annotation.compiler_end")
def _tensor_annotation(inputs, attrs, ctx):
    """The operand itself: v0.19's compute was ``topi::identity(inputs[0])``.  A tuple
    operand passed ``IdentityRel`` but the compute returned its first field only, a
    tensor where the type said tuple: refused rather than guessed."""
    _check_attrs(attrs, ctx)
    data = inputs[0]
    if _is_tuple(data):
        raise ctx.error("the operand is a tuple: v0.19's compute (topi::identity of the "
                        "first input) returned one tensor for it; annotate each field")
    return data


@register_converter("annotation.checkpoint")
def _checkpoint(inputs, attrs, ctx):
    """The operand itself, a tuple included: v0.19's compute returned ``topi::identity``
    of every (flattened) input; in a forward run a checkpoint only marks where the
    gradient pass may recompute.  A tuple holding tuples is refused: its flattened
    tensors outnumbered the fields (LowerToTECompute's check failed)."""
    _check_attrs(attrs, ctx)
    data = inputs[0]
    ty = value_type(data)
    if isinstance(ty, relax.TupleType) and \
            any(isinstance(f, relax.TupleType) for f in ty.fields):
        raise ctx.error("the operand is a tuple holding tuples: v0.19's compute returned "
                        "one tensor per flattened field, more than the tuple's fields")
    return data


@register_converter("debug")
def _debug(inputs, attrs, ctx):
    """Refused: not implementable.  v0.19's ``debug`` entered the interpreter's debugger
    (its ``debug_func``, by default ``relay.debug``: ``pdb.set_trace``), a Python callback
    named by an ``EnvFunc`` the text cannot carry; ``relay.build`` did not compile it
    (``LowerTensorExpr`` leaves a debug primitive unlowered)."""
    raise ctx.error("debug calls a Python callback from Relay's interpreter (by default "
                    "the relay.debug debugger); v0.19's relay.build did not compile it and "
                    "a compiled model cannot call back into Python: remove the debug call "
                    "(it returns its operand)")
