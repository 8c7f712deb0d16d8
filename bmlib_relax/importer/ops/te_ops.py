"""Relay ops Relax has no operator for, lowered with TOPI's compute (``call_te``).

Each becomes a ``call_tir`` of the PrimFunc TOPI's TE definition builds —
the same compute Relay's own strategy used — so the op runs on the host
(bmlib's patterns match Relax operators only).  Forms: ``sliding_window``,
``reinterpret``, ``nn.correlation`` (NCHW), ``nn.deformable_conv2d`` (NCHW,
OIHW, or NHWC/HWIO), ``image.dilation2d``, ``image.crop_and_resize``, ``nn.bitpack``,
``nn.bitserial_conv2d`` (NCHW), ``nn.bitserial_dense``,
``nn.contrib_conv3d_winograd_weight_transform``; ``stft`` is TOPI's formula as a TE reduction.
"""
from __future__ import annotations

from tvm import te, tirx, topi
from tvm.topi import image as topi_image
from tvm.topi import nn as topi_nn

from ..registry import register_converter
from ._utils import (
    below_half, check_index_values, dtype_of, expand_padding, ints, out_dtype, shape_of,
)


@register_converter("sliding_window")
def _sliding_window(inputs, attrs, ctx):
    return ctx.bb.call_te(topi.sliding_window, inputs[0], int(attrs["axis"]),
                          ints(attrs["window_shape"]), ints(attrs["strides"]))


@register_converter("reinterpret")
def _reinterpret(inputs, attrs, ctx):
    return ctx.bb.call_te(topi.reinterpret, inputs[0], str(attrs["dtype"]))


@register_converter("nn.correlation")
def _correlation(inputs, attrs, ctx):
    if attrs.get("layout", "NCHW") != "NCHW":
        raise ctx.unsupported_attr("layout", attrs.get("layout"))
    return ctx.bb.call_te(topi_nn.correlation_nchw, inputs[0], inputs[1],
                          int(attrs["kernel_size"]), int(attrs["max_displacement"]),
                          int(attrs["stride1"]), int(attrs["stride2"]),
                          _correlation_padding(attrs["padding"]), bool(attrs["is_multiply"]))


def _correlation_padding(value):
    """TOPI takes an int or 2 or 4 values (Relay's attribute may hold 1)."""
    pad = ints(value)
    return pad[0] if len(pad) == 1 else tuple(pad)


#: data layout -> (kernel layout, TOPI compute) of the deformable convolutions TOPI has.
_DEFORMABLE_CONV2D = {"NCHW": ("OIHW", topi_nn.deformable_conv2d_nchw),
                      "NHWC": ("HWIO", topi_nn.deformable_conv2d_nhwc)}


@register_converter("nn.deformable_conv2d")
def _deformable_conv2d(inputs, attrs, ctx):
    layout = attrs.get("data_layout") or "NCHW"
    kernel_layout, compute = _DEFORMABLE_CONV2D.get(layout, (None, None))
    if compute is None:
        raise ctx.unsupported_attr("data_layout", layout)
    if (attrs.get("kernel_layout") or "OIHW") != kernel_layout:
        raise ctx.unsupported_attr("kernel_layout", attrs.get("kernel_layout"))
    pad = expand_padding(attrs.get("padding", (0, 0)), 2)
    if pad[:2] != pad[2:]:
        raise ctx.unsupported_attr("padding", attrs.get("padding"))
    return ctx.bb.call_te(compute, inputs[0], inputs[1], inputs[2],
                          ints(attrs.get("strides", (1, 1))), pad[:2],
                          ints(attrs.get("dilation", (1, 1))),
                          int(attrs.get("deformable_groups", 1)), int(attrs.get("groups", 1)),
                          out_dtype(attrs) or dtype_of(inputs[0]))


@register_converter("image.dilation2d")
def _dilation2d(inputs, attrs, ctx):
    layout = attrs.get("data_layout", "NCHW")
    compute = {"NCHW": topi_image.dilation2d_nchw, "NHWC": topi_image.dilation2d_nhwc}.get(layout)
    if compute is None:
        raise ctx.unsupported_attr("data_layout", layout)
    # v0.19's dilation2d_strategy: the weight is IHW for NCHW data, HWI for NHWC (TOPI reads
    # it so whatever kernel_layout says), and the dilations are positive
    kernel_layout = attrs.get("kernel_layout") or "IHW"
    if kernel_layout != {"NCHW": "IHW", "NHWC": "HWI"}[layout]:
        raise ctx.error(f"kernel_layout={kernel_layout!r} with data_layout={layout!r}: v0.19 "
                        f"built only {'IHW' if layout == 'NCHW' else 'HWI'} for it")
    # Relay's relation reads strides[0:2] and dilations[0:2] (scripts pass 4 values).
    dilations = ints(attrs.get("dilations", (1, 1)))[:2]
    if min(dilations) < 1:
        raise ctx.error(f"dilations={dilations}: dilation should be positive")
    return ctx.bb.call_te(compute, inputs[0], inputs[1], ints(attrs.get("strides", (1, 1)))[:2],
                          expand_padding(attrs.get("padding", (0, 0)), 2), dilations,
                          out_dtype(attrs) or dtype_of(inputs[0]))


@register_converter("image.crop_and_resize")
def _crop_and_resize(inputs, attrs, ctx):
    # box_indices pick the image of each box: out of range, TOPI reads beside the batch
    check_index_values(inputs[2], shape_of(inputs[0])[:1], ctx, "box_indices")
    layout, method = attrs.get("layout", "NCHW"), attrs.get("method", "bilinear")
    crop_size = ints(attrs["crop_size"])
    if 1 in crop_size:
        raise ctx.error(f"crop_size={crop_size}: TOPI's crop_and_resize scales by "
                        "1 / (crop_size - 1), a division by zero (Relay could not build it)")
    extrapolation = float(attrs.get("extrapolation_value", 0.0))
    dtype = out_dtype(attrs) or dtype_of(inputs[0])
    if method == "nearest_neighbor" and layout in ("NCHW", "NHWC"):
        return ctx.bb.call_te(_crop_and_resize_nearest, inputs[0], inputs[1], inputs[2],
                              crop_size, layout, extrapolation, dtype,
                              primfunc_name_hint="image_crop_and_resize_nearest")
    return ctx.bb.call_te(topi_image.crop_and_resize, inputs[0], inputs[1], inputs[2],
                          crop_size, layout, method, extrapolation, dtype)


def _crop_and_resize_nearest(data, boxes, box_indices, crop_size, layout: str,
                             extrapolation_value: float, dtype: str):
    """TOPI's nearest-neighbour ``crop_and_resize`` (``_resize_2d`` with boxes, the same
    float32 coordinate arithmetic) with v0.19's rounding: its ``te.round`` was
    ``llvm.round``, halves away from zero, where TVM 0.27's takes them to even (a box
    over the whole image reads source 0.5 at output 1: pixel 1 in Relay, 0 in 0.27)."""
    h_axis, w_axis = (2, 3) if layout == "NCHW" else (1, 2)
    image_h = data.shape[h_axis].astype("int32")
    image_w = data.shape[w_axis].astype("int32")
    target_h, target_w = crop_size
    shape = list(data.shape)
    shape[0], shape[h_axis], shape[w_axis] = box_indices.shape[0], target_h, target_w

    def source(lo, hi, size, target, out):
        scale = ((size - 1) * (hi - lo)).astype("float") / (target - 1)
        return lo * (size - 1) + scale * out

    def round_half_away(value):
        half = tirx.const(below_half("float32"), "float32")
        return tirx.trunc(value + tirx.Select(value < 0, -half, half)).astype("int32")

    def compute(*index):
        n, y, x = index[0], index[h_axis], index[w_axis]
        in_y = source(boxes[n, 0], boxes[n, 2], image_h, target_h, y)
        in_x = source(boxes[n, 1], boxes[n, 3], image_w, target_w, x)
        read = list(index)
        read[0] = box_indices[n]
        read[h_axis] = te.max(te.min(round_half_away(in_y), image_h - 1), 0)
        read[w_axis] = te.max(te.min(round_half_away(in_x), image_w - 1), 0)
        value = data[tuple(read)].astype("float")
        outside = tirx.Or(tirx.Or(in_y < 0, in_y > image_h - 1),
                          tirx.Or(in_x < 0, in_x > image_w - 1))
        return tirx.Select(outside, tirx.const(extrapolation_value, "float32"),
                           value).astype(dtype)

    return te.compute(shape, compute, name="crop_and_resize")


@register_converter("nn.bitpack")
def _bitpack(inputs, attrs, ctx):
    return ctx.bb.call_te(topi_nn.bitpack, inputs[0], int(attrs.get("bits", 1)),
                          int(attrs.get("pack_axis", 1)), int(attrs.get("bit_axis", 2)),
                          attrs.get("pack_type", "uint32"))


@register_converter("nn.bitserial_conv2d")
def _bitserial_conv2d(inputs, attrs, ctx):
    if attrs.get("data_layout", "NCHW") != "NCHW":
        raise ctx.unsupported_attr("data_layout", attrs.get("data_layout"))
    return ctx.bb.call_te(topi_nn.bitserial_conv2d_nchw, inputs[0], inputs[1],
                          ints(attrs.get("strides", (1, 1))), ints(attrs.get("padding", (0, 0))),
                          int(attrs.get("activation_bits", 1)), int(attrs.get("weight_bits", 1)),
                          attrs.get("pack_dtype", "uint32"), attrs.get("out_dtype", "int16"),
                          bool(attrs.get("unipolar", True)))


@register_converter("nn.bitserial_dense")
def _bitserial_dense(inputs, attrs, ctx):
    return ctx.bb.call_te(topi_nn.bitserial_dense, inputs[0], inputs[1],
                          int(attrs.get("data_bits", 1)), int(attrs.get("weight_bits", 1)),
                          attrs.get("pack_dtype", "uint32"), attrs.get("out_dtype", "int16"),
                          bool(attrs.get("unipolar", True)))


@register_converter("nn.contrib_conv3d_winograd_weight_transform")
def _conv3d_winograd_weight_transform(inputs, attrs, ctx):
    return ctx.bb.call_te(topi_nn.conv3d_winograd_weight_transform, inputs[0],
                          int(attrs["tile_size"]))


@register_converter("stft")
def _stft(inputs, attrs, ctx):
    """Relay's stft: (batch, n_fft//2 + 1 or n_fft, frames, 2) real/imag parts.

    Relay's Python API filled the defaults (``hop_length = n_fft // 4``,
    ``win_length = n_fft``, a window of ones); a 1-d signal has no batch axis.
    The compute is TOPI's formula as a TE reduction: TOPI's own kernel
    vectorizes the frame loop, which LLVM cannot build for a dynamic length.
    """
    from tvm import relax

    data = inputs[0]
    n_fft = int(attrs["n_fft"])
    hop = attrs.get("hop_length")
    hop = n_fft // 4 if hop is None else int(hop)
    win_length = attrs.get("win_length")
    win_length = n_fft if win_length is None else int(win_length)
    window = inputs[1] if len(inputs) > 1 else relax.const(
        __import__("numpy").ones(n_fft, dtype_of(data)))
    onesided = bool(attrs.get("onesided", True))
    one_d = len(shape_of(data)) == 1
    if one_d:
        data = ctx.emit(relax.op.expand_dims(data, 0))
    batch, length = shape_of(data)
    rows = n_fft // 2 + 1 if onesided else n_fft
    frames = (length - n_fft) // hop + 1
    out = ctx.bb.call_te(_stft_compute, data, window, hop, win_length,
                         float(n_fft) if attrs.get("normalized", False) else None,
                         [batch, rows, frames], primfunc_name_hint="stft")
    return relax.op.squeeze(ctx.emit(out), [0]) if one_d else out


def _stft_compute(data, window, hop, win_length, normalize_by, shape):
    """out[b, w, m] = sum_k window[k] * x[b, m*hop + k] * (cos, -sin)(2 pi w k / win_length)."""
    import math

    from tvm import te, tirx

    dtype = data.dtype
    k = te.reduce_axis((0, win_length), name="k")

    def cell(b, w, m, part):
        angle = tirx.const(2 * math.pi / win_length, dtype) * tirx.Cast(dtype, w) * \
            tirx.Cast(dtype, k)
        x = tirx.Cast(dtype, window[k]) * data[b, m * hop + k]
        term = tirx.Select(part == 0, x * tirx.cos(angle), -x * tirx.sin(angle))
        return te.sum(term, axis=k)

    out = te.compute(list(shape) + [2], cell, name="stft")
    if normalize_by is None:
        return out
    scale = tirx.const(1 / math.sqrt(normalize_by), dtype)
    return te.compute(out.shape, lambda *i: out(*i) * scale, name="stft_norm")
