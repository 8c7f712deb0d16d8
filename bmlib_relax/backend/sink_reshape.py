"""A broadcast element-wise op after a reshape that keeps its trailing dims runs first.

PyTorch's exports compute a linear layer over a sequence as ``reshape(dense(reshape(x,
[-1, K]), W), [T, B, N]) + bias``: the bias is added after the reshape back, so the
dense (+ bias) composite cannot take the bias into its epilogue, and a partition of its
own reads the dense's whole result back to add it (an LSTM language model's decoder,
350 x 33278: 4.6 of 71 ms).  When the other operand broadcasts over trailing dims the
reshape leaves as they are, ``op(reshape(x), c)`` is ``reshape(op(x, c))``; rewritten
so, the op meets its producer and the reshape, alone, is a view on the host.

Only static shapes; the new calls keep the spans of the calls they replace, so the
Relay call each came from is still known (:mod:`..importer.provenance`).
"""
from __future__ import annotations

from typing import Optional

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .patterns import static_shape
from .rewrite import rewrite_functions

# The element-wise ops moved before a reshape (the reshaped operand on either side).
_BROADCAST_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _static_shape(expr: relax.Expr) -> Optional[list[int]]:
    return static_shape(getattr(expr, "ty", None))


def keeps_trailing_dims(before: list[int], after: list[int], count: int) -> bool:
    """A reshape from ``before`` to ``after`` leaves the last ``count`` dims as they
    are: element ``[..., j]`` of the result is element ``[..., j]`` of its input's
    row-major order with the same trailing index."""
    return count <= min(len(before), len(after)) and \
        (count == 0 or before[-count:] == after[-count:])


@mutator
class _SinkReshape(PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in _BROADCAST_OPS and
                len(call.args) == 2):
            return call
        for side in (0, 1):
            moved = self._moved(call, side)
            if moved is not None:
                return moved
        return call

    def _moved(self, call: relax.Call, side: int) -> Optional[relax.Expr]:
        """``reshape(op(x, other))`` for ``op(reshape(x), other)`` (reshape on ``side``)."""
        reshaped, other = call.args[side], call.args[1 - side]
        if not isinstance(reshaped, relax.Var):
            return None
        reshape = self.lookup_binding(reshaped)
        if not (isinstance(reshape, relax.Call) and isinstance(reshape.op, tvm.ir.Op) and
                reshape.op.name == "relax.reshape"):
            return None
        source = reshape.args[0]
        before, after = _static_shape(source), _static_shape(reshaped)
        operand, result = _static_shape(other), _static_shape(call)
        if None in (before, after, operand, result) or result != after or \
                str(source.ty.dtype) != str(reshaped.ty.dtype):
            return None
        # The operand's leading 1s broadcast over anything; its other dims must meet
        # dims the reshape left as they were.
        reached = len(operand)
        while reached and operand[len(operand) - reached] == 1:
            reached -= 1
        if len(operand) > len(before) or not keeps_trailing_dims(before, after, reached):
            return None
        args = [source, other] if side == 0 else [other, source]
        inner = self.builder_.emit(relax.Call(call.op, args, call.attrs, span=call.span))
        if _static_shape(inner) != before:
            return None  # the operand broadcast the input further: not the same op
        return relax.Call(reshape.op, [inner, reshape.args[1]], reshape.attrs,
                          span=reshape.span)


def sink_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every broadcast element-wise op after a trailing-dims-keeping
    reshape moved in front of it, and reshapes nothing reads any more dropped."""
    mod = rewrite_functions(_SinkReshape(mod), mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and (func.attrs is None or
                                                 "Codegen" not in func.attrs):
            mod[gvar] = relax.analysis.remove_all_unused(func)
    return mod
