"""int8 conv2d and matmul on the target's dot-product instruction (issue #18).

The quantized composites (:mod:`..qnn_patterns`) hold a ``conv2d`` or
``matmul`` of int8/uint8 operands with an int32 accumulator.  When the target
has an int8 dot-product instruction (:mod:`..dot_product`: ``vpdpbusd`` on
AVX-512 VNNI, ``vpmaddwd`` on AVX-512BW/AVX2), these templates replace the
generic ones for such calls:

* the data is padded and packed to ``[N, ceil(C/g), H, W, g]`` (``g`` values
  of the reduction contiguous: one broadcast operand), int8 data shifted to
  uint8 for ``vpdpbusd``;
* the weight is ``[O/ob, ceil(I/g), KH, KW, ob, g]`` (``OIHW{ob}o{g}i``,
  packed at compile time by :mod:`..rewrite`, or here for a non-constant or
  channel-padded one): ``lanes x g`` weights are one vector;
* the blocked int32 result is computed a register tile at a time whose
  innermost ``lanes x g`` step is the instruction (an LLVM intrinsic call:
  ``vpdpbusd`` / ``vpmaddwd``, see :func:`lower_dot_products`);
* the unpack back to NCHW subtracts the shift's compensation
  (``128 * sum(w)`` per output channel, a small reduction over the weights)
  and carries the requantize epilogue, fused per tile as in :mod:`.conv`.

Everything is integer arithmetic, so the results are bit-exact with the
generic path.  Calls the instruction cannot take (uint8 weights on VNNI,
output channels that are not whole vectors, grouped convolutions, a target
without the instruction) go to the generic templates, unchanged.
"""
from __future__ import annotations

import functools
import warnings
from typing import Optional

import tvm
from tvm import te, tirx

from ...dims import all_static
from ..dot_product import DotProduct, dot_kernel_layout, dot_product_for, output_block
from ..prefetch import flatten
from ..schedule import (UnscheduledBlockWarning, any_node, divisor_at_most, inline_epilogue,
                        loop_extents, parallelize)
from ._utils import attr_ints, out_dtype
from .registry import SCHEDULE_ATTR, TEMPLATES, register_schedule

# int32 accumulator vectors of a register tile (pixels x vectors): most of the
# 32 zmm registers of AVX-512 (16 ymm of AVX2), and under 1 KiB so the tile stays
# a stack buffer LLVM keeps in registers (see ..schedule).
TILE_VECTORS = {16: 15, 8: 12}  # by int32 lanes per vector
SHIFT = 128  # int8 -> uint8


# --------------------------------------------------------------------------- instructions
# TVM's ``sch.tensorize`` cannot be used with this wheel: it deep-copies the
# intrinsic through ``save_json``, which crashes (SIGSEGV) for any TIR node.  The
# schedule therefore marks the loop of one instruction (``lanes`` accumulators x
# ``group`` products, a plain multiply-add loop nest: correct as it is), and
# :func:`lower_dot_products` replaces that loop by the instruction once the
# PrimFunc is flattened, after checking the accesses are the contiguous ones the
# instruction reads.
DOT_ANNOTATION = "bmlib_dot_product"


def _vnni(acc, unsigned, signed, lanes: int):
    """``vpdpbusd``: acc[i] += sum_k unsigned[i, k] (uint8) * signed[i, k] (int8), k < 4.

    (LLVM 22 declares the operands ``<64 x i8>``; older LLVMs took ``<16 x i32>``.)"""
    return tirx.call_llvm_pure_intrin(
        f"int32x{lanes}", "llvm.x86.avx512.vpdpbusd.512", acc,
        tirx.reinterpret(f"int8x{4 * lanes}", unsigned),
        tirx.reinterpret(f"int8x{4 * lanes}", signed))


def _madd(llvm_name: str):
    def emit(acc, first, second, lanes: int):
        """``vpmaddwd`` on int16-extended operands: acc[i] += sum_k first[i, k] * second[i, k]."""
        product = tirx.call_llvm_pure_intrin(
            f"int32x{lanes}", llvm_name, tirx.Cast(f"int16x{2 * lanes}", first),
            tirx.Cast(f"int16x{2 * lanes}", second))
        return acc + product

    return emit


INSTRUCTIONS = {
    "vnni": _vnni,
    "avx512_madd": _madd("llvm.x86.avx512.pmaddw.d.512"),
    "avx2_madd": _madd("llvm.x86.avx2.pmadd.wd"),
}

def _has_dot_loop(stmt) -> bool:
    return any_node(stmt, lambda node: isinstance(node, tirx.For) and
                    DOT_ANNOTATION in node.annotations)


def _linear(expr, variables) -> list:
    coefficients = tvm.sym.detect_linear_equation(expr, variables)
    if len(coefficients) != len(variables) + 1:
        raise ValueError(f"index {expr} is not linear in {variables}")
    return list(coefficients)


def _is_const(expr, value: int) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr.value) == value


def _instruction(loop: tirx.For) -> tirx.Stmt:
    """The instruction replacing a marked ``for lane: for k: C[c] += A[a] * B[b]`` nest."""
    emit = INSTRUCTIONS[str(loop.annotations[DOT_ANNOTATION])]
    inner = loop.body
    if not isinstance(inner, tirx.For) or not isinstance(inner.body, tirx.BufferStore):
        raise ValueError("the marked loop is not one multiply-add nest")
    lanes, group = int(loop.extent), int(inner.extent)
    store = inner.body
    value = store.value
    if not isinstance(value, tirx.Add) or not isinstance(value.b, tirx.Mul):
        raise ValueError(f"not a multiply-add: {value}")
    loads = []
    for operand in (value.b.a, value.b.b):
        operand = operand.value if isinstance(operand, tirx.Cast) else operand
        if not isinstance(operand, tvm.ir.TensorLoad):
            raise ValueError(f"operand {operand} is not a load")
        loads.append(operand)
    lane, k = loop.loop_var, inner.loop_var
    c = _linear(store.indices[0], [lane, k])
    if not (_is_const(c[0], 1) and _is_const(c[1], 0)) or len(store.indices) != 1 or \
            not value.a.source.same_as(store.buffer):
        raise ValueError("the accumulator is not one contiguous vector")
    operands = []
    for load in loads:
        # One operand is a vector (lanes x group contiguous values), the other one
        # group of values broadcast to every lane.
        a = _linear(load.indices[0], [lane, k])
        if not _is_const(a[1], 1) or not (_is_const(a[0], 0) or _is_const(a[0], group)):
            raise ValueError(f"operand {load} is neither a vector nor a broadcast group")
        values = tirx.BufferLoad(load.source, [tirx.Ramp(a[2], 1, group)])
        if _is_const(a[0], 0):
            word = tirx.reinterpret(f"int{8 * group}", values) if group == 4 else \
                tirx.reinterpret("int32", tirx.Cast("int16x2", values))
            values = tirx.reinterpret(f"{load.source.dtype}x{lanes * group}" if group == 4 else
                                      f"int16x{lanes * group}", tirx.Broadcast(word, lanes))
        else:
            values = tirx.BufferLoad(load.source, [tirx.Ramp(a[2], 1, lanes * group)])
        operands.append((str(load.source.dtype), values))
    if group == 4:  # vpdpbusd: the uint8 operand first
        operands.sort(key=lambda item: item[0] != "uint8")
    acc = tirx.BufferLoad(store.buffer, [tirx.Ramp(c[2], 1, lanes)])
    result = emit(acc, operands[0][1], operands[1][1], lanes)
    return tirx.BufferStore(store.buffer, result, [tirx.Ramp(c[2], 1, lanes)])


def _replace(stmt):
    if isinstance(stmt, tirx.For) and DOT_ANNOTATION in stmt.annotations:
        return _instruction(stmt)
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_replace(s) for s in stmt.seq])
    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, _replace(stmt.body),
                        stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, _replace(stmt.then_case),
                               None if stmt.else_case is None else _replace(stmt.else_case))
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, _replace(stmt.body))
    return stmt


def lower_dot_products(prim: tirx.PrimFunc) -> tirx.PrimFunc:
    """Emit the int8 dot-product instructions of a scheduled PrimFunc (unchanged when
    it marks none).  The function is flattened first (block lowering and buffer
    flattening, the first steps of TVM's own pipeline, which then finds nothing
    left to do for them)."""
    if not _has_dot_loop(prim.body):
        return prim
    flat = flatten(prim)
    try:
        return flat.with_body(_replace(flat.body))
    except ValueError as exc:  # the marked loops stay plain multiply-adds: correct, slow
        warnings.warn(f"int8 dot-product instruction not emitted ({exc}); the loop runs as "
                      "scalar multiply-adds (correct, but slow)", UnscheduledBlockWarning,
                      stacklevel=2)
        return prim


# --------------------------------------------------------------------------- packing
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _stored(value, dot: DotProduct, dtype: str):
    """A data value as the instruction reads it (int8 shifted to uint8 for vpdpbusd)."""
    if dot.shifts(dtype):
        return (value.astype("int32") + SHIFT).astype("uint8")
    return value


def pack_weight(weight: te.Tensor, ob: int, group: int) -> te.Tensor:
    """OIHW → ``[O/ob, ceil(I/g), KH, KW, ob, g]`` inside the PrimFunc, zero-padded."""
    o, i, kh, kw = (int(d) for d in weight.shape)
    zero = tirx.const(0, weight.dtype)

    def compute(oc, ic, y, x, oo, g):
        c = ic * group + g
        return tirx.if_then_else(c < i, weight[oc * ob + oo, tirx.min(c, i - 1), y, x], zero)

    return te.compute((o // ob, _ceil_div(i, group), kh, kw, ob, group), compute,
                      name="bmlib_int8_weight_pack")


def compensation(kernel: te.Tensor, dot: DotProduct) -> te.Tensor:
    """``sum(w)`` per output channel ``[O/ob, ob]``: shifting int8 data by +128 added
    128 times it.  Computed on the instruction itself (a dot product with ones): it
    reads every weight once per call, which at 7x7 outputs costs as much as the
    convolution when done one weight at a time."""
    blocks, groups_, kh, kw, ob, group = (int(d) for d in kernel.shape)
    ones = te.compute((group,), lambda g: tirx.const(1, "uint8"), name="bmlib_int8_ones")
    axes = {name: te.reduce_axis((0, ext), name=name) for name, ext in
            (("ic", groups_), ("kh", kh), ("kw", kw)) if ext > 1}
    axes["g"] = te.reduce_axis((0, group), name="g")
    ic, ry, rx = (axes.get(k, 0) for k in ("ic", "kh", "kw"))
    g = axes["g"]

    def compute(cb, oo):
        return te.sum(ones[g].astype("int32") * kernel[cb, ic, ry, rx, oo, g].astype("int32"),
                      axis=list(axes.values()))

    return te.compute((blocks, ob), compute, name="bmlib_int8_compensation",
                      attrs={SCHEDULE_ATTR: "bmlib.int8_compensation",
                             "bmlib_dot": [dot.lanes, len(axes)], "bmlib_intrin": dot.name})


@register_schedule("bmlib.int8_compensation")
def schedule_int8_compensation(sch, block, ctx):
    """Output-channel blocks (parallel when big) | reduction | vectors | one instruction."""
    lanes, _ = (int(v) for v in sch.get(block).annotations["bmlib_dot"])
    dot_name = str(sch.get(block).annotations["bmlib_intrin"])
    cb, oo, *reduce = sch.get_loops(block)
    *outer_reduce, g = reduce
    sch.reorder(cb, *outer_reduce, oo, g)
    vector, lane = sch.split(oo, [None, lanes])
    work = 1
    for extent in loop_extents(sch, sch.get_loops(block)):
        work *= extent
    if work >= 1 << 16 and int(sch.get(cb).extent) > 1:
        sch.parallel(cb)  # before splitting off the init (its loops are copies)
    sch.decompose_reduction(block, (outer_reduce or [vector])[0])
    sch.annotate(lane, DOT_ANNOTATION, dot_name)
    sch.unroll(vector)


def _pack_data(data: te.Tensor, dot: DotProduct, padding, reach, strides, pad_value):
    """Pad NCHW data and pack it to ``[N, ceil(C/g), PH, PW, g]`` (shifted for vpdpbusd)."""
    n, c, h, w = (int(d) for d in data.shape)
    group = dot.group
    top, left = padding[0], padding[1]
    ph, pw = reach
    pad = tirx.const(pad_value, data.dtype)

    def compute(nn, cb, y, x, g):
        yy, xx, cc = y - top, x - left, cb * group + g
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w, cc < c)
        value = data[nn, tirx.min(cc, c - 1), tirx.max(tirx.min(yy, h - 1), 0),
                     tirx.max(tirx.min(xx, w - 1), 0)]
        return _stored(tirx.if_then_else(inside, value, pad), dot, data.dtype)

    return te.compute((n, _ceil_div(c, group), ph, pw, group), compute,
                      name="bmlib_int8_data_pack", attrs={SCHEDULE_ATTR: "bmlib.int8_pack"})


# --------------------------------------------------------------------------- conv2d
def _padding4(padding):
    return [padding[0], padding[1], padding[0], padding[1]] if len(padding) == 2 else padding


def conv2d_dot(call, inputs, ctx) -> Optional[te.Tensor]:
    """The int8 conv2d on the dot-product instruction, or None when it does not apply."""
    attrs = call.attrs
    data, weight = inputs
    if str(attrs.data_layout) != "NCHW" or str(attrs.out_layout) != "NCHW" or \
            int(attrs.groups) != 1 or not all_static(data.shape):
        return None
    dtype = out_dtype(attrs, data.dtype)
    if dtype != "int32":
        return None
    kernel_layout = str(attrs.kernel_layout)
    packed_as = dot_kernel_layout(kernel_layout)
    if packed_as is None and kernel_layout != "OIHW":
        return None
    dot = dot_product_for(ctx.target, str(data.dtype), str(weight.dtype))
    if dot is None:
        return None
    out_channels = int(call.ty.shape.values[1])
    if packed_as is not None:
        ob, group = packed_as
        if group != dot.group or ob % dot.lanes:
            return None  # packed for another target's instruction
        kernel = weight
    else:
        ob = output_block(dot, out_channels)
        if ob is None:
            return None
        kernel = pack_weight(weight, ob, dot.group)
    strides, dilation = attr_ints(attrs.strides), attr_ints(attrs.dilation)
    padding = _padding4(attr_ints(attrs.padding))
    n, _, h, w = (int(d) for d in data.shape)
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    oh = (h + padding[0] + padding[2] - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    reach = ((oh - 1) * strides[0] + (kh - 1) * dilation[0] + 1,
             (ow - 1) * strides[1] + (kw - 1) * dilation[1] + 1)
    if (kh, kw) == (1, 1) and not any(padding) and list(strides) == [1, 1] and \
            (h * w) % dot.lanes == 0:
        return conv2d_1x1_dot_gemm(data, kernel, dot, ob, out_channels)
    if ow % dot.lanes == 0:  # else the padded columns' epilogue is not a whole vector
        return conv2d_dot_rows(data, kernel, dot, ob, out_channels, strides, padding,
                               dilation, (oh, ow))
    packed = _pack_data(data, dot, padding, reach, strides, 0)
    groups_ = int(kernel.shape[1])
    axes = {name: te.reduce_axis((0, ext), name=name) for name, ext in
            (("ic", groups_), ("kh", kh), ("kw", kw)) if ext > 1}
    axes["g"] = te.reduce_axis((0, dot.group), name="g")
    ic, ry, rx = (axes.get(k, 0) for k in ("ic", "kh", "kw"))
    g = axes["g"]

    def compute(nn, oc, y, x, oo):
        value = packed[nn, ic, y * strides[0] + ry * dilation[0],
                       x * strides[1] + rx * dilation[1], g].astype("int32")
        return te.sum(value * kernel[oc, ic, ry, rx, oo, g].astype("int32"),
                      axis=list(axes.values()))

    conv = te.compute((n, out_channels // ob, oh, ow, ob), compute,
                      name="bmlib_int8_conv2d_dot",
                      attrs={SCHEDULE_ATTR: "bmlib.int8_conv2d_dot",
                             "bmlib_dot": [dot.lanes, len(axes)], "bmlib_intrin": dot.name})
    if dot.shifts(str(data.dtype)):
        comp = compensation(kernel, dot)
        return te.compute((n, out_channels, oh, ow),
                          lambda nn, c, y, x:
                          conv[nn, c // ob, y, x, c % ob] - comp[c // ob, c % ob] * SHIFT,
                          name="bmlib_unpack")
    return te.compute((n, out_channels, oh, ow),
                      lambda nn, c, y, x: conv[nn, c // ob, y, x, c % ob],
                      name="bmlib_unpack")


def conv2d_1x1_dot_gemm(data, kernel, dot: DotProduct, ob: int, out_channels: int):
    """A stride-1 1x1 conv as a GEMM whose vector lanes are output *pixels*:
    ``out[o, p:p+lanes] += w[o, k:k+g] (broadcast) . x[k:k+g, p:p+lanes]``.

    The data is packed ``[N, ceil(C/g), H*W, g]`` (a vector of ``lanes`` pixels x
    ``g`` channels is contiguous), and the accumulators are NCHW rows, so the
    requantize epilogue stores whole vectors of int8 pixels instead of scattering
    bytes to channel planes (which cost more than the convolution itself).
    """
    n, c, h, w = (int(d) for d in data.shape)
    group = dot.group
    groups_ = int(kernel.shape[1])
    zero = tirx.const(0, data.dtype)
    packed = te.compute(
        (n, groups_, h * w, group),
        lambda nn, k, p, gi: _stored(tirx.if_then_else(
            k * group + gi < c, data[nn, tirx.min(k * group + gi, c - 1), p // w, p % w], zero),
            dot, str(data.dtype)),
        name="bmlib_int8_data_pack", attrs={SCHEDULE_ATTR: "bmlib.int8_pack_flat"})
    axes = {}
    if groups_ > 1:
        axes["ic"] = te.reduce_axis((0, groups_), name="ic")
    axes["g"] = te.reduce_axis((0, group), name="g")
    ic, g = axes.get("ic", 0), axes["g"]

    def compute(nn, o, p):
        return te.sum(packed[nn, ic, p, g].astype("int32") *
                      kernel[o // ob, ic, 0, 0, o % ob, g].astype("int32"),
                      axis=list(axes.values()))

    conv = te.compute((n, out_channels, h * w), compute, name="bmlib_int8_conv2d_1x1_dot",
                      attrs={SCHEDULE_ATTR: "bmlib.int8_conv2d_1x1_dot",
                             "bmlib_dot": [dot.lanes, len(axes)], "bmlib_intrin": dot.name})
    if dot.shifts(str(data.dtype)):
        comp = compensation(kernel, dot)
        return te.compute((n, out_channels, h, w),
                          lambda nn, o, y, x:
                          conv[nn, o, y * w + x] - comp[o // ob, o % ob] * SHIFT,
                          name="bmlib_unflatten")
    return te.compute((n, out_channels, h, w), lambda nn, o, y, x: conv[nn, o, y * w + x],
                      name="bmlib_unflatten")


def conv2d_dot_rows(data, kernel, dot: DotProduct, ob: int, out_channels: int, strides,
                    padding, dilation, out_size):
    """A KxK conv whose vector lanes are consecutive output *pixels of a row*:
    ``out[o, y, x:x+lanes] += w[o, k:k+g, ry, rx] (broadcast) . x[k:k+g, row, cols]``.

    The data is packed ``[N, ceil(C/g), PH, sx, ceil(PW/sx), g]``: columns split by
    phase (``col = q * sx + phase``), so a strided row's window columns are
    consecutive ``q`` — one contiguous vector of ``lanes`` pixels x ``g`` channels.
    Rows are computed in whole vectors (the width padded up; the extra columns
    read the padding and are dropped), and the requantize epilogue stores whole
    vectors of int8 pixels.
    """
    n, c, h, w = (int(d) for d in data.shape)
    oh, ow = out_size
    lanes, group = dot.lanes, dot.group
    owp = -(-ow // lanes) * lanes
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    sy, sx = strides
    reach_h = (oh - 1) * sy + (kh - 1) * dilation[0] + 1
    reach_w = (owp - 1) * sx + (kw - 1) * dilation[1] + 1
    phase_w = -(-reach_w // sx)
    top, left = padding[0], padding[1]
    zero = tirx.const(0, data.dtype)

    def pack(nn, k, y, phase, q, gi):
        yy, xx, cc = y - top, q * sx + phase - left, k * group + gi
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w, cc < c)
        value = data[nn, tirx.min(cc, c - 1), tirx.max(tirx.min(yy, h - 1), 0),
                     tirx.max(tirx.min(xx, w - 1), 0)]
        return _stored(tirx.if_then_else(inside, value, zero), dot, str(data.dtype))

    groups_ = int(kernel.shape[1])
    packed = te.compute((n, groups_, reach_h, sx, phase_w, group), pack,
                        name="bmlib_int8_data_pack", attrs={SCHEDULE_ATTR: "bmlib.int8_pack_rows"})
    axes = {name: te.reduce_axis((0, ext), name=name) for name, ext in
            (("ic", groups_), ("kh", kh), ("kw", kw)) if ext > 1}
    axes["g"] = te.reduce_axis((0, group), name="g")
    ic, ry, rx = (axes.get(k, 0) for k in ("ic", "kh", "kw"))
    g = axes["g"]

    def compute(nn, o, y, x):
        column = rx * dilation[1]
        value = packed[nn, ic, y * sy + ry * dilation[0], column % sx, x + column // sx, g]
        return te.sum(value.astype("int32") *
                      kernel[o // ob, ic, ry, rx, o % ob, g].astype("int32"),
                      axis=list(axes.values()))

    conv = te.compute((n, out_channels, oh, owp), compute, name="bmlib_int8_conv2d_rows",
                      attrs={SCHEDULE_ATTR: "bmlib.int8_conv2d_rows",
                             "bmlib_dot": [dot.lanes, len(axes)], "bmlib_intrin": dot.name})
    if dot.shifts(str(data.dtype)):
        comp = compensation(kernel, dot)
        return te.compute((n, out_channels, oh, ow),
                          lambda nn, o, y, x: conv[nn, o, y, x] - comp[o // ob, o % ob] * SHIFT,
                          name="bmlib_unpack")
    return te.compute((n, out_channels, oh, ow), lambda nn, o, y, x: conv[nn, o, y, x],
                      name="bmlib_unpack")


@register_schedule("bmlib.int8_pack_rows")
def schedule_int8_pack_rows(sch, block, ctx):
    loops = sch.get_loops(block)
    sch.unroll(loops[-1])
    _parallel_if_worth_it(sch, block, 3)


@register_schedule("bmlib.int8_conv2d_rows")
def schedule_int8_conv2d_rows(sch, block, ctx):
    """(batch, channel tiles, rows) parallel | column tiles | reduction (channel
    groups, window) | channels (unrolled) x pixel vectors (unrolled) | one
    instruction; the epilogue per tile, whole vectors of pixels."""
    lanes, _ = (int(v) for v in sch.get(block).annotations["bmlib_dot"])
    dot_name = str(sch.get(block).annotations["bmlib_intrin"])
    _, rows, _, owp = (int(d) for d in sch.get(block).writes[0].source.shape)
    channels, vectors = gemm_tile(rows, owp, lanes)
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("int8 conv2d without its epilogue")
    ow = int(sch.get(epilogue).writes[0].source.shape[3])
    n, o, y, x = sch.get_loops(epilogue)
    oo, oi = sch.split(o, [None, channels])
    xo, xi = sch.split(x, [-(-ow // (vectors * lanes)), vectors * lanes])
    sch.reorder(n, oo, y, xo, oi, xi)
    sch.parallel(sch.fuse(n, oo, y))
    sch.compute_at(block, xo)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    own = sch.get_loops(block)[2:]  # (channels) x pixel vectors, then the reduction
    _mark_instruction_tile(sch, block, own, int(channels > 1) + 1, lanes, dot_name)
    if channels > 1:
        sch.unroll(oi)
    if ow % (vectors * lanes) == 0:
        pv, pl = sch.split(xi, [None, lanes])
        sch.unroll(pv)
        sch.vectorize(pl)


@register_schedule("bmlib.int8_pack_flat")
def schedule_int8_pack_flat(sch, block, ctx):
    """Pack (+ shift) to pixel-major groups: parallel over (batch, channel groups)."""
    loops = sch.get_loops(block)
    sch.unroll(loops[-1])
    _parallel_if_worth_it(sch, block, 2)


def gemm_tile(rows: int, pixels: int, lanes: int) -> tuple[int, int]:
    """``(channels, pixel vectors)`` of a 1x1 GEMM register tile: most accumulators
    within the budget, each a divisor of its extent."""
    budget = min(TILE_VECTORS.get(lanes, 12), 1023 // (4 * lanes))
    best = (1, 1)
    for vectors in range(1, budget + 1):
        if (pixels // lanes) % vectors:
            continue
        channels = divisor_at_most(rows, budget // vectors)
        if channels * vectors > best[0] * best[1]:
            best = (channels, vectors)
    return best


@register_schedule("bmlib.int8_conv2d_1x1_dot")
def schedule_int8_conv2d_1x1_dot(sch, block, ctx):
    """(batch, pixel tiles) parallel | channel tiles | reduction | channels (unrolled)
    x pixel vectors (unrolled) | one instruction; the NCHW epilogue per tile, stored
    as whole vectors of pixels."""
    lanes, _ = (int(v) for v in sch.get(block).annotations["bmlib_dot"])
    dot_name = str(sch.get(block).annotations["bmlib_intrin"])
    _, rows, pixels = (int(d) for d in sch.get(block).writes[0].source.shape)
    channels, vectors = gemm_tile(rows, pixels, lanes)
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("int8 1x1 conv without its epilogue")
    width = int(sch.get(epilogue).writes[0].source.shape[3])
    sch.transform_block_layout(epilogue, lambda n, c, h, w: (n, c, h * width + w))
    n, o, p = sch.get_loops(epilogue)
    oo, oi = sch.split(o, [None, channels])
    po, pi = sch.split(p, [None, vectors * lanes])
    sch.reorder(n, po, oo, oi, pi)
    sch.parallel(sch.fuse(n, po))
    sch.compute_at(block, oo)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    own = sch.get_loops(block)[2:]  # (channels) x pixel vectors, then the reduction
    _mark_instruction_tile(sch, block, own, int(channels > 1) + 1, lanes, dot_name)
    if channels > 1:
        sch.unroll(oi)
    pv, pl = sch.split(pi, [None, lanes])
    sch.unroll(pv)
    sch.vectorize(pl)


def tile_rows(extent: int, ob: int, lanes: int) -> int:
    """Pixels (or matmul rows) of a register tile: the largest divisor of ``extent``
    the accumulator budget allows with ``ob // lanes`` vectors each (7 for the 7, 14,
    28 and 56 wide ResNet rows with two vectors)."""
    budget = min(TILE_VECTORS.get(lanes, 12), 1023 // (4 * lanes))
    return divisor_at_most(extent, max(1, budget // (ob // lanes)))


def _parallel_if_worth_it(sch, block, outer: int) -> None:
    """A data-movement block runs its ``outer`` loops in parallel only when it is big
    enough to pay the thread-pool launch (``..schedule.parallelize``; a MobileNet-sized
    pack is not)."""
    loops = sch.get_loops(block)
    work = 1
    for extent in loop_extents(sch, loops):
        work *= extent
    parallelize(sch, list(loops[:outer]), work)


@register_schedule("bmlib.int8_pack")
def schedule_int8_pack(sch, block, ctx):
    """Pad + pack + shift: parallel over (batch, channel groups, rows), groups unrolled."""
    loops = sch.get_loops(block)
    sch.unroll(loops[-1])
    _parallel_if_worth_it(sch, block, 3)


def _mark_instruction_tile(sch, block, own_loops, tile_loops: int, lanes: int,
                           dot_name: str) -> None:
    """``own_loops``: the block's loops under its compute_at point — the register tile's
    spatial loops (``tile_loops`` of them, the channel one last) then the reduction
    (the ``g`` group last).  Reduction outside the tile but ``g``, the channel loop
    split into instructions, the init split off, each ``lanes x g`` step marked as
    one instruction (see :func:`lower_dot_products`)."""
    tile, reduce = own_loops[:tile_loops], own_loops[tile_loops:]
    *outer_reduce, g = reduce
    *pixels, channels = tile
    sch.reorder(*outer_reduce, *pixels, channels, g)
    vectors, lane = sch.split(channels, [None, lanes])
    if outer_reduce:
        sch.decompose_reduction(block, outer_reduce[0])
    else:
        sch.decompose_reduction(block, pixels[0] if pixels else vectors)
    sch.annotate(lane, DOT_ANNOTATION, dot_name)
    for loop in pixels:
        sch.unroll(loop)
    sch.unroll(vectors)


@register_schedule("bmlib.int8_conv2d_dot")
def schedule_int8_conv2d_dot(sch, block, ctx):
    """(batch, channel blocks, rows) parallel | column tiles | reduction (channel
    groups, kernel window) | tile columns (unrolled) x channel vectors | one
    instruction; the unpack (+ compensation) and requantize epilogue per tile."""
    lanes, _ = (int(v) for v in sch.get(block).annotations["bmlib_dot"])
    dot_name = str(sch.get(block).annotations["bmlib_intrin"])
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("int8 conv2d without its unpack block")
    _, _, _, ow, ob = (int(d) for d in sch.get(block).writes[0].source.shape)
    reg = tile_rows(ow, ob, lanes)
    n, c, h, w = sch.get_loops(epilogue)
    cb, ci = sch.split(c, [None, ob])
    wo, wi = sch.split(w, [None, reg])
    sch.reorder(n, cb, h, wo, wi, ci)
    sch.parallel(sch.fuse(n, cb, h))
    sch.compute_at(block, wo)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    own = sch.get_loops(block)[2:]
    _mark_instruction_tile(sch, block, own, int(reg > 1) + 1, lanes, dot_name)
    sch.unroll(wi)
    sch.vectorize(ci)


# --------------------------------------------------------------------------- matmul
def matmul_dot(call, inputs, ctx) -> Optional[te.Tensor]:
    """``matmul(A[..., M, K], B[..., K, N])`` of int8/uint8 on the dot-product
    instruction (B packed to ``[..., N/ob, ceil(K/g), ob, g]`` here), or None."""
    a, b = inputs
    if len(a.shape) < 2 or len(b.shape) < 2 or \
            not all_static(list(a.shape) + list(b.shape)):
        return None
    dtype = out_dtype(call.attrs, a.dtype)
    if dtype != "int32":
        return None
    dot = dot_product_for(ctx.target, str(a.dtype), str(b.dtype))
    if dot is None:
        return None
    out_shape = [int(d) for d in call.ty.shape.values]
    m, k, n = int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1])
    ob = output_block(dot, n)
    if ob is None:
        return None
    group = dot.group
    kg = _ceil_div(k, group)
    batch_a = [int(d) for d in a.shape[:-2]]
    batch_b = [int(d) for d in b.shape[:-2]]
    nbatch = max(len(batch_a), len(batch_b))
    batch = [max(x, y) for x, y in zip([1] * (nbatch - len(batch_a)) + batch_a,
                                       [1] * (nbatch - len(batch_b)) + batch_b)]
    if batch + [m, n] != out_shape:
        return None

    def at(shape, idx):
        offset = nbatch - len(shape)
        return tuple(0 if d == 1 else idx[offset + i] for i, d in enumerate(shape))

    zero_b = tirx.const(0, b.dtype)
    packed_b = te.compute(
        tuple(batch_b) + (n // ob, kg, ob, group),
        lambda *i: tirx.if_then_else(
            i[-3] * group + i[-1] < k,
            b[i[:-4] + (tirx.min(i[-3] * group + i[-1], k - 1), i[-4] * ob + i[-2])],
            zero_b),
        name="bmlib_int8_matmul_b_pack")
    pad = tirx.const(0, a.dtype)
    packed_a = te.compute(
        tuple(batch_a) + (m, kg, group),
        lambda *i: _stored(tirx.if_then_else(
            i[-2] * group + i[-1] < k,
            a[i[:-2] + (tirx.min(i[-2] * group + i[-1], k - 1),)], pad), dot, str(a.dtype)),
        name="bmlib_int8_matmul_a_pack")
    axes = {}
    if kg > 1:
        axes["kg"] = te.reduce_axis((0, kg), name="kg")
    axes["g"] = te.reduce_axis((0, group), name="g")
    rk, g = axes.get("kg", 0), axes["g"]

    def compute(*idx):
        bidx, i, nb, nn = idx[:nbatch], idx[nbatch], idx[nbatch + 1], idx[nbatch + 2]
        lhs = packed_a[at(batch_a, bidx) + (i, rk, g)].astype("int32")
        rhs = packed_b[at(batch_b, bidx) + (nb, rk, nn, g)].astype("int32")
        return te.sum(lhs * rhs, axis=list(axes.values()))

    result = te.compute(tuple(batch) + (m, n // ob, ob), compute, name="bmlib_int8_matmul_dot",
                        attrs={SCHEDULE_ATTR: "bmlib.int8_matmul_dot",
                               "bmlib_dot": [dot.lanes, len(axes)], "bmlib_intrin": dot.name})
    if dot.shifts(str(a.dtype)):
        r = te.reduce_axis((0, k), name="k")
        comp = te.compute(tuple(batch_b) + (n,), lambda *i: te.sum(
            b[i[:-1] + (r, i[-1])].astype("int32"), axis=r),
            name="bmlib_int8_compensation")
        return te.compute(tuple(batch) + (m, n), lambda *i: result[
            i[:-1] + (i[-1] // ob, i[-1] % ob)] - comp[at(batch_b, i[:-2]) + (i[-1],)] * SHIFT,
            name="bmlib_unpack")
    return te.compute(tuple(batch) + (m, n),
                      lambda *i: result[i[:-1] + (i[-1] // ob, i[-1] % ob)],
                      name="bmlib_unpack")


@register_schedule("bmlib.int8_matmul_dot")
def schedule_int8_matmul_dot(sch, block, ctx):
    """(batch, column blocks, row tiles) parallel | reduction | rows (unrolled) x
    channel vectors | one instruction; unpack and epilogue per tile."""
    lanes, _ = (int(v) for v in sch.get(block).annotations["bmlib_dot"])
    dot_name = str(sch.get(block).annotations["bmlib_intrin"])
    shape = [int(d) for d in sch.get(block).writes[0].source.shape]
    m, ob = shape[-3], shape[-1]
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("int8 matmul without its unpack block")
    rows = tile_rows(m, ob, lanes)
    loops = sch.get_loops(epilogue)
    batch, i, j = loops[:-2], loops[-2], loops[-1]
    jo, ji = sch.split(j, [None, ob])
    io, ii = sch.split(i, [None, rows])
    sch.reorder(*batch, jo, io, ii, ji)
    sch.parallel(sch.fuse(*batch, jo, io))
    fused = sch.get_loops(epilogue)[0]
    sch.compute_at(block, fused)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    own = sch.get_loops(block)[1:]
    _mark_instruction_tile(sch, block, own, int(rows > 1) + 1, lanes, dot_name)
    if rows > 1:
        sch.unroll(ii)
    sch.vectorize(ji)


# --------------------------------------------------------------------------- depthwise
def depthwise_int8(call, inputs, ctx) -> Optional[te.Tensor]:
    """int8/uint8 depthwise conv2d (multiplier 1) vectorized along output *pixels*.

    A depthwise convolution reduces over its kernel window only, so there is no
    channel group for a dot-product instruction; what dominates an int8 one is
    the epilogue instead: with channel vectors (the float layout) every int8
    result is a scattered byte store.  Here each vector is ``lanes`` output
    pixels of one channel row: int32 products, the requantize epilogue, and
    whole-vector stores, as the NCHW output is laid out.
    """
    attrs = call.attrs
    data, weight = inputs
    if str(attrs.data_layout) != "NCHW" or str(attrs.out_layout) != "NCHW" or \
            str(data.dtype) not in ("int8", "uint8") or \
            str(weight.dtype) not in ("int8", "uint8") or \
            out_dtype(attrs, data.dtype) != "int32" or ctx.target is None or \
            not all_static(data.shape):
        return None
    n, c, h, w = (int(d) for d in data.shape)
    groups = int(attrs.groups)
    if groups != c or int(call.ty.shape.values[1]) != c:
        return None
    layout = str(attrs.kernel_layout)
    from ..patterns import blocked_kernel_layout

    blocking = blocked_kernel_layout(layout)
    if layout == "OIHW" and int(weight.shape[1]) == 1:
        def tap(ch, y, x):
            return weight[ch, 0, y, x]
    elif blocking is not None and blocking[0] == 1:
        cb = blocking[1]

        def tap(ch, y, x):
            return weight[ch // cb, 0, y, x, 0, ch % cb]
    else:
        return None
    kh, kw = (int(d) for d in weight.shape[2:4])
    strides, dilation = attr_ints(attrs.strides), attr_ints(attrs.dilation)
    padding = _padding4(attr_ints(attrs.padding))
    oh = (h + padding[0] + padding[2] - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    lanes = ctx.lanes("int32")
    if ow < lanes // 2:
        return None  # rows shorter than half a vector: the channel-blocked template
    reach_h = (oh - 1) * strides[0] + (kh - 1) * dilation[0] + 1
    reach_w = (ow - 1) * strides[1] + (kw - 1) * dilation[1] + 1
    top, left = padding[0], padding[1]
    zero = tirx.const(0, data.dtype)
    # Columns split by phase (x = q * sx + phase), so that a strided window reads
    # consecutive columns of one phase: whole vectors, no gather.
    sx = strides[1]
    phase_w = -(-reach_w // sx)

    def pad(nn, ch, y, phase, q):
        yy, xx = y - top, q * sx + phase - left
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w)
        return tirx.if_then_else(inside, data[nn, ch, yy, xx], zero)

    padded = te.compute((n, c, reach_h, sx, phase_w), pad, name="bmlib_int8_dw_pad",
                        attrs={SCHEDULE_ATTR: "bmlib.int8_dw_pad"})
    axes = [te.reduce_axis((0, ext), name=name) for name, ext in (("kh", kh), ("kw", kw))
            if ext > 1]
    by_name = {ax.var.name: ax for ax in axes}
    ry, rx = by_name.get("kh", 0), by_name.get("kw", 0)

    def compute(nn, ch, y, x):
        column = rx * dilation[1]
        value = padded[nn, ch, y * strides[0] + ry * dilation[0], column % sx,
                       x + column // sx].astype("int32") * \
            tap(ch, ry, rx).astype("int32")
        return te.sum(value, axis=axes) if axes else value

    return te.compute((n, c, oh, ow), compute, name="bmlib_int8_depthwise",
                      attrs={SCHEDULE_ATTR: "bmlib.int8_depthwise", "bmlib_lanes": lanes})


@register_schedule("bmlib.int8_dw_pad")
def schedule_int8_dw_pad(sch, block, ctx):
    """Phase-split pad, vectorized; an explicit ``nn.pad`` feeding it (Relay pads a
    quantized depthwise input with its zero point, so it arrives as its own op) is
    inlined: one pass over the data instead of two."""
    for producer in sch.get_producers(block):
        try:
            sch.compute_inline(producer)
        except Exception:  # noqa: BLE001 - not an inlinable element-wise block: keep it
            continue
    loops = sch.get_loops(block)
    sch.vectorize(loops[-1])
    _parallel_if_worth_it(sch, block, 2)


@register_schedule("bmlib.int8_depthwise")
def schedule_int8_depthwise(sch, block, ctx):
    """(batch, channels, rows) parallel | pixel vectors | window | one vector of
    pixels, with the epilogue per row tile."""
    lanes = int(sch.get(block).annotations["bmlib_lanes"])
    _, _, _, ow = (int(d) for d in sch.get(block).writes[0].source.shape)
    vector = lanes if ow >= lanes else lanes // 2
    epilogue = inline_epilogue(sch, block)
    anchor = epilogue if epilogue is not None else block
    n, c, y, x = sch.get_loops(anchor)[:4]
    xo, xi = sch.split(x, [None, vector])
    sch.parallel(sch.fuse(n, c, y))
    if epilogue is None:
        raise ValueError("int8 depthwise without its epilogue")
    sch.compute_at(block, xo)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    own = sch.get_loops(block)[2:]
    pixels, reduce = own[0], own[1:]
    if reduce:
        sch.reorder(*reduce, pixels)
    sch.vectorize(pixels)  # before splitting off the init (its loops are copies)
    if reduce:
        sch.decompose_reduction(block, reduce[0])
    sch.vectorize(xi)


def _conv2d_int8(call, inputs, ctx) -> Optional[te.Tensor]:
    """The dot-product conv2d, else (depthwise) the pixel-vectorized one, else None."""
    result = conv2d_dot(call, inputs, ctx)
    if result is None and int(call.attrs.groups) > 1:
        result = depthwise_int8(call, inputs, ctx)
    return result


# --------------------------------------------------------------------------- dispatch
def specialize(op_name: str, special) -> None:
    """Make ``special(call, inputs, ctx)`` the template of ``op_name`` where it
    applies (it returns None elsewhere), the registered template otherwise."""
    generic = TEMPLATES.get(op_name)

    @functools.wraps(generic)
    def template(call, inputs, ctx):
        result = special(call, inputs, ctx)
        return generic(call, inputs, ctx) if result is None else result

    template.generic = generic
    TEMPLATES.register(op_name, override=True)(template)


specialize("relax.nn.conv2d", _conv2d_int8)
specialize("relax.matmul", matmul_dot)
