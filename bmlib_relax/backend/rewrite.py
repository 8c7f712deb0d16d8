"""Compile-time weight re-layout: Relax rewrites that fold into new constants.

The bmlib templates read weights in blocked layouts.  Weights are Relax
constants in ``main`` (the importer binds params), so they are re-laid out
once, here, before partitioning, and the partitions receive the packed
constant as an ordinary argument (the PrimFunc still takes only arguments,
and its arity is unchanged):

* ``conv2d(x, W)`` with ``W`` OIHW becomes ``conv2d(x, pack(W),
  kernel_layout="OIHW{ib}i{ob}o")``: ``W`` reshaped to ``[O/ob, ob, I/ib, ib,
  KH, KW]`` and permuted to ``[O/ob, I/ib, KH, KW, ib, ob]`` — the Relax
  ``layout_transform`` of the weight, folded here with NumPy instead of by
  building and running it through ``FoldConstant``.
* ``permute_dims(W, [1, 0])`` of a dense weight becomes the constant ``W.T``,
  so the matmul template streams ``[K, N]`` rows along its vectorized ``N``.
* a float32 ``matmul(x, W)`` with a constant ``[K, N]`` weight (the dense form
  above) reads ``reshape(permute_dims(P, [1, 0, 2]), [K, N])`` of ``P = W`` cut
  into ``[N / nr, K, nr]`` column panels, ``nr`` the register tile's width: the
  view is inlined by the matmul schedule, so each thread streams contiguous
  panels (instead of copying a strided ``K x nr`` panel out of ``W`` on every
  call).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..constants import constant_view, tensor_constant
from ..dims import all_static, is_static_dim
from ..importer.provenance import same_origin
from .dot_product import conv2d_dot_layout, conv2d_packs_own_weight, pack_dot_weight
from .patterns import fits_template_indexing, has_no_elements
from .qnn_patterns import accepts_qnn_conv2d
from .schedule import divisor_at_most
from .target import vector_lanes
from .templates.linalg import packed_panel_width
from .templates.tiles import output_block

PACKABLE_DTYPES = ("float32", "float16")
# Quantized (QNN) weights: packed too, blocked by the vectors of their int32 accumulator.
QUANTIZED_DTYPES = ("int8", "uint8")


def _conv_dtypes_packable(data: str, weight: str, out: str) -> bool:
    """Whether a conv's dtypes are ones a bmlib template computes, so that its packed
    weight layout will be read by a template: a conv left on the host (an ``int8``
    result, a ``float64`` ``out_dtype``, ...) keeps OIHW, which TVM's own lowering reads
    (it cannot lower ``OIHW{ib}i{ob}o``)."""
    if weight in PACKABLE_DTYPES:
        return data == weight and out in PACKABLE_DTYPES
    return weight in QUANTIZED_DTYPES and data in QUANTIZED_DTYPES and out == "int32"


def conv2d_blocking(in_channels: int, out_channels: int, lanes: int) -> tuple[int, int]:
    """``(ib, ob)``: input/output channel blocks for a conv on ``lanes``-wide vectors.

    The output block is the vectorized axis (:func:`.templates.tiles.output_block`:
    two vectors when the channels allow).  The input block is the inner reduction
    loop; the vector width keeps it small.
    """
    return divisor_at_most(in_channels, lanes), output_block(out_channels, lanes)


def depthwise_blocking(channels: int, lanes: int) -> int:
    return divisor_at_most(channels, lanes)



def pack_conv2d_weight(weight: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """OIHW → ``[O/ob, I/ib, KH, KW, ib, ob]`` (kernel layout ``OIHW{ib}i{ob}o``)."""
    o, i, kh, kw = weight.shape
    blocked = weight.reshape(o // ob, ob, i // ib, ib, kh, kw)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 3, 1))


def pack_dense_weight(weight: np.ndarray, width: int) -> np.ndarray:
    """``[K, N]`` → ``[N / width, K, width]`` column panels."""
    k, n = weight.shape
    return np.ascontiguousarray(weight.reshape(k, n // width, width).transpose(1, 0, 2))


def const_array(expr) -> Any:
    """The NumPy value of a Relax constant, else ``None``."""
    return constant_view(expr)


def _static(ty, from_axis: int = 0) -> bool:
    """Every dim of ``ty`` from ``from_axis`` on is static."""
    return isinstance(ty, relax.TensorType) and ty.shape is not None and \
        hasattr(ty.shape, "values") and \
        all_static(ty.shape.values[from_axis:])


def _batch_binds(ty) -> bool:
    """The batch of ``ty`` is static or a symbolic var of its own: what a partition can
    take (a PrimFunc binds its symbolic dims from its input buffers, see
    ``patterns._symbolic_dims_bound``).  A batch such as ``n // 72`` (a reshape of a
    flat run-time input) keeps the conv on the host, where TVM's lowering knows only
    OIHW: a weight packed for a template there could not be built ("CodeGenVM cannot
    emit this Relax operator")."""
    batch = ty.shape.values[0]
    return is_static_dim(batch) or isinstance(batch, tvm.tirx.Var)


def within_template_bounds(*exprs) -> bool:
    """Whether every static tensor among ``exprs`` has some elements and no more than
    ``MAX_TEMPLATE_ELEMENTS``.  Any other stays on the host (the pattern table refuses
    it), and TVM's own lowering there knows only the plain layouts: a conv whose weight
    was packed for a template (``OIHW8i32o``, Winograd's, ``NCHW32c`` data) could not be
    built at all ("CodeGenVM cannot emit this Relax operator")."""
    return all(fits_template_indexing(e.ty) and not has_no_elements(e.ty) for e in exprs
               if isinstance(getattr(e, "ty", None), relax.TensorType))


@mutator
class _WeightPacker(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, target: Any):
        super().__init__(mod)
        self.target = target
        self.packed = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor hook
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        if call.op.name == "relax.nn.conv2d":
            return self._conv2d(call)
        if call.op.name == "relax.nn.conv2d_transpose":
            return self._conv2d_transpose(call)
        if call.op.name == "relax.permute_dims":
            return self._transpose(call)
        if call.op.name == "relax.matmul":
            return self._matmul(call)
        return call

    def _matmul(self, call: relax.Call) -> relax.Expr:
        """A constant ``[K, N]`` float32 weight as a view of its column panels."""
        lhs, weight = call.args
        array = const_array(weight)
        if array is None and isinstance(weight, relax.Var):  # a folded weight: `lv = const`
            array = const_array(self.lookup_binding(weight))
        if array is None or array.ndim != 2 or str(array.dtype) != "float32" or \
                str(call.attrs.out_dtype) not in ("None", "", "void", "float32") or \
                not isinstance(lhs.ty, relax.TensorType) or lhs.ty.ndim < 1 or \
                not _static(lhs.ty, lhs.ty.ndim - 1):
            return call
        k, n = array.shape
        rows = None
        if lhs.ty.ndim >= 2 and _static(lhs.ty, lhs.ty.ndim - 2):
            rows = int(lhs.ty.shape.values[-2])
        elif lhs.ty.ndim == 1:
            rows = 1
        width = packed_panel_width(rows, n, vector_lanes(self.target, "float32"))
        if width is None:
            return call
        panels = tensor_constant(pack_dense_weight(array, width))
        view = self.builder_.emit(relax.op.reshape(
            self.builder_.emit(relax.op.permute_dims(panels, [1, 0, 2])), (k, n)))
        self.packed += 1
        return relax.op.matmul(lhs, view, out_dtype=call.attrs.out_dtype)

    def _conv2d(self, call: relax.Call) -> relax.Expr:
        attrs = call.attrs
        data, weight = call.args
        array = const_array(weight)
        if array is None and isinstance(weight, relax.Var):  # a folded weight: `lv = const`
            array = const_array(self.lookup_binding(weight))
        if array is None or array.ndim != 4 or \
                not _conv_dtypes_packable(str(data.ty.dtype), str(array.dtype),
                                          str(call.ty.dtype)):
            return call
        if str(array.dtype) in QUANTIZED_DTYPES and not accepts_qnn_conv2d(call):
            return call  # no QNN composite will read it (a free batch): TVM's OIHW
        if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
                ("NCHW", "OIHW", "NCHW") or not _static(data.ty, 1) or not _static(call.ty, 1) \
                or not _batch_binds(data.ty) or not within_template_bounds(data, call):
            return call  # the blocking depends on channels only; the batch may be free
        groups = int(attrs.groups)
        in_channels = int(data.ty.shape.values[1])
        out_channels = array.shape[0]
        lanes = vector_lanes(self.target, str(call.ty.dtype) if str(array.dtype) in
                             QUANTIZED_DTYPES else str(array.dtype))
        winograd = _winograd(call, array, lanes)
        if winograd is not None:  # 3x3 stride 1 fp32 (templates/conv_winograd.py)
            self.packed += 1
            return same_origin(winograd, call)
        dot = conv2d_dot_layout(self.target, str(data.ty.dtype), array, groups)
        if conv2d_packs_own_weight(self.target, str(data.ty.dtype), array, groups):
            return call
        if dot is not None:  # int8 for a dot-product instruction (see .dot_product)
            packed, layout = pack_dot_weight(array, *dot), "OIHW{}o{}i".format(*dot)
        elif groups == 1:
            ib, ob = conv2d_blocking(in_channels, out_channels, lanes)
        elif groups == in_channels == out_channels and array.shape[1] == 1:
            ib, ob = 1, depthwise_blocking(out_channels, lanes)  # depthwise, multiplier 1
        elif groups < in_channels and in_channels % groups == 0 and out_channels % groups == 0:
            # grouped: blocked inside a group (templates/conv_grouped.py)
            ib, ob = conv2d_blocking(in_channels // groups, out_channels // groups, lanes)
        else:
            return call  # depthwise with a multiplier: the template reads OIHW
        if dot is None:
            packed, layout = pack_conv2d_weight(array, ib, ob), f"OIHW{ib}i{ob}o"
        self.packed += 1
        return same_origin(relax.op.nn.conv2d(
            data, tensor_constant(packed), strides=attrs.strides, padding=attrs.padding,
            dilation=attrs.dilation, groups=groups, data_layout="NCHW",
            kernel_layout=layout, out_layout="NCHW",
            out_dtype=attrs.out_dtype), call)

    def _conv2d_transpose(self, call: relax.Call) -> relax.Expr:
        """IOHW → ``IOHW{ib}i{ob}o`` for templates/conv_transpose.py (blocked in a group)."""
        attrs = call.attrs
        data, weight = call.args
        array = const_array(weight)
        if array is None or array.ndim != 4 or str(array.dtype) not in PACKABLE_DTYPES or \
                not _conv_dtypes_packable(str(data.ty.dtype), str(array.dtype),
                                          str(call.ty.dtype)) or \
                (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
                ("NCHW", "IOHW", "NCHW") or not _static(data.ty) or not _static(call.ty) or \
                not within_template_bounds(data, call):
            return call
        groups = int(attrs.groups)
        lanes = vector_lanes(self.target, str(array.dtype))
        ib, ob = conv2d_blocking(array.shape[0] // groups, array.shape[1], lanes)
        i, o, kh, kw = array.shape
        packed = array.reshape(i // ib, ib, o // ob, ob, kh, kw).transpose(0, 2, 4, 5, 1, 3)
        self.packed += 1
        return same_origin(relax.op.nn.conv2d_transpose(
            data, tensor_constant(packed), strides=attrs.strides,
            padding=attrs.padding, output_padding=attrs.output_padding,
            dilation=attrs.dilation, groups=groups, data_layout="NCHW",
            kernel_layout=f"IOHW{ib}i{ob}o", out_layout="NCHW", out_dtype=attrs.out_dtype), call)

    def _transpose(self, call: relax.Call) -> relax.Expr:
        array = const_array(call.args[0])
        if array is None or array.ndim != 2 or \
                str(array.dtype) not in PACKABLE_DTYPES + QUANTIZED_DTYPES:
            return call
        axes = call.attrs.axes
        if axes is not None and [int(a) for a in axes] != [1, 0]:
            return call
        self.packed += 1
        return tensor_constant(array.T)

def _winograd(call: relax.Call, array: np.ndarray, lanes: int):
    from .templates.conv_winograd import rewrite_conv2d  # lazy: templates import this module
    return rewrite_conv2d(call, array, lanes)


def rewrite_functions(mutator: PyExprMutator, mod: tvm.IRModule) -> tvm.IRModule:
    """Apply ``mutator`` to every Relax function of ``mod`` except external (Codegen) ones."""
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and (func.attrs is None or
                                                 "Codegen" not in func.attrs):
            mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    return mutator.builder_.get()


def pack_weights(mod: tvm.IRModule, target: Any = None) -> tvm.IRModule:
    """Re-lay out the constant conv2d / dense weights of ``mod`` for the bmlib templates."""
    from .templates.conv_winograd import winograd_mode
    winograd_mode()  # a bad $BMLIB_WINOGRAD is a ParamError here, not inside the FFI visitor
    return rewrite_functions(_WeightPacker(mod, target), mod)
