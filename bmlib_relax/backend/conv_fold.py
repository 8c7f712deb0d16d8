"""Fold neighbours into convolutions: per-channel scales into the weights
(Relay's ``FoldScaleAxis``) and explicit zero padding into the conv's padding
(Relay's ``FoldExplicitPadding``).

Inference dumps made with ``SimplifyInference`` (and every TensorFlow import)
express batch norm as ``conv2d`` → ``multiply`` by a per-output-channel
constant → ``add`` of one.  The multiply is an extra pass over the activation;
``conv2d(x, W) * s == conv2d(x, W * s[:, None, None, None])``, so it is folded
into the (constant) weight here, with NumPy, and the ``add`` that remains is
the bias the ``bmlib.conv2d_bias*`` patterns expect.

TensorFlow's ``SAME`` padding arrives as an ``nn.pad`` of zeros before the
convolution: a whole extra copy of the activation, which the conv template's
own padding makes unnecessary.

Only NCHW/OIHW convolutions whose producer or consumer is used by them alone
are rewritten; anything else is left as it is.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..constants import tensor_constant
from .rewrite import const_array, rewrite_functions


def _use_counts(mod: tvm.IRModule) -> dict:
    counts: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Call):
            for arg in expr.args:
                if isinstance(arg, relax.Var):
                    counts[arg] = counts.get(arg, 0) + 1
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields:
                if isinstance(field, relax.Var):
                    counts[field] = counts.get(field, 0) + 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
            if isinstance(func.body, relax.SeqExpr) and isinstance(func.body.body, relax.Var):
                counts[func.body.body] = counts.get(func.body.body, 0) + 1
    return counts


def channel_scale(array: np.ndarray, channels: int) -> Optional[np.ndarray]:
    """The per-channel vector of a scale that broadcasts along axis 1 of an NCHW
    tensor only (shapes ``()``, ``(1,)``, ``(C, 1, 1)``, ``(1, C, 1, 1)``, …), else None."""
    if array.ndim > 4:
        return None
    shape = (1,) * (4 - array.ndim) + array.shape
    if shape[0] != 1 or shape[2] != 1 or shape[3] != 1 or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)) if shape[1] == 1 else array.reshape(-1)


@mutator
class _ConvFolder(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.uses = _use_counts(mod)
        self.folded = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor hook
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d":
            padded = self._fold_padding(call)
            if padded is not None:
                self.folded += 1
                return padded
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.multiply":
            return call
        for conv_var, scale in (call.args, reversed(call.args)):
            folded = self._fold(conv_var, scale)
            if folded is not None:
                self.folded += 1
                return folded
        return call

    def _fold_padding(self, conv: relax.Call) -> Optional[relax.Expr]:
        data = conv.args[0]
        if not isinstance(data, relax.Var) or self.uses.get(data, 0) != 1 or \
                str(conv.attrs.data_layout) != "NCHW":
            return None
        pad = self.lookup_binding(data)
        if not isinstance(pad, relax.Call) or getattr(pad.op, "name", "") != "relax.nn.pad" or \
                str(pad.attrs.pad_mode) != "constant" or float(pad.attrs.pad_value) != 0.0:
            return None
        widths = [int(v) for v in pad.attrs.pad_width]
        if len(widths) != 8 or any(widths[:4]):
            return None  # pads the batch or channel axis
        top, bottom, left, right = widths[4:]
        p_top, p_left, p_bottom, p_right = [int(v) for v in conv.attrs.padding]
        attrs = conv.attrs
        return relax.op.nn.conv2d(
            pad.args[0], conv.args[1], strides=attrs.strides,
            padding=[p_top + top, p_left + left, p_bottom + bottom, p_right + right],
            dilation=attrs.dilation, groups=int(attrs.groups), data_layout="NCHW",
            kernel_layout=str(attrs.kernel_layout), out_layout=str(attrs.out_layout),
            out_dtype=attrs.out_dtype)

    def _const(self, expr: relax.Expr) -> Optional[np.ndarray]:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return None if expr is None else const_array(expr)

    def _fold(self, conv_var: relax.Expr, scale: relax.Expr) -> Optional[relax.Expr]:
        if not isinstance(conv_var, relax.Var) or self.uses.get(conv_var, 0) != 1:
            return None
        conv = self.lookup_binding(conv_var)
        if not isinstance(conv, relax.Call) or getattr(conv.op, "name", "") != "relax.nn.conv2d":
            return None
        attrs = conv.attrs
        if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
                ("NCHW", "OIHW", "NCHW"):
            return None
        weight, values = self._const(conv.args[1]), self._const(scale)
        if weight is None or values is None or weight.dtype != values.dtype:
            return None
        per_channel = channel_scale(values, weight.shape[0])
        if per_channel is None:
            return None
        # One multiply in the weight's own dtype is correctly rounded: the same bits as
        # the product taken in float64 and rounded back, without two float64 copies.
        scaled = np.multiply(weight, per_channel.astype(weight.dtype)[:, None, None, None])
        return relax.op.nn.conv2d(
            conv.args[0], tensor_constant(scaled), strides=attrs.strides,
            padding=attrs.padding, dilation=attrs.dilation, groups=int(attrs.groups),
            data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
            out_dtype=attrs.out_dtype)


def fold_into_convolutions(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with per-channel multiplies after constant-weight convolutions, and zero
    padding before convolutions, folded into them."""
    folded = rewrite_functions(_ConvFolder(mod), mod)
    return relax.transform.DeadCodeElimination()(folded)
