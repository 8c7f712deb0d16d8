"""Relay's QNN dialect (``qnn.*``) as the integer arithmetic Relay v0.19 canonicalized it to.

``relay.build`` never ran a ``qnn.*`` op: its QNN canonicalization pass rewrote
each one into plain integer Relay ops (zero-point terms, int32 accumulation,
fixed-point requantization) before anything was compiled.  These converters
emit that arithmetic as high-level ``relax.op.*`` calls, so results are
bit-exact with a Relay build:

* **requantize** (``compute_dtype="int64"``, the default): subtract the input
  zero point in int32, then multiply by ``input_scale / output_scale`` as a
  fixed-point number.  The multiplier is ``float64(in) / float64(out)`` of the
  float32 scale constants, split by ``frexp`` into a Q31 significand (rounded
  half away from zero; 2^31 renormalized) and a shift, computed here at import
  time exactly as ``GetFixedPointMultiplierShift`` did.  The product is taken
  in int64 and shifted right by ``31 + right_shift`` after adding
  ``2^(total-1)`` (``UPWARD``: ties toward +inf) or, for a negative product,
  ``2^(total-1) - 1`` (``TONEAREST``: ties away from zero).  A per-tensor
  ``UPWARD`` multiplier that is an exact power of two takes TIR's
  ``q_multiply_shift`` shortcut (int32 shifts).  Equal per-tensor scales skip
  the multiply.  Then the output zero point is added and the result clipped
  to the output dtype.  ``compute_dtype="float32"/"float64"`` follow Relay's
  floating-point lowering (rounding emulated without SSE4.1, as Relay did for
  a plain ``llvm`` target).
* **conv2d / dense / batch_matmul**: int8/uint8 operands with an int32
  accumulator; with a zero kernel zero point the input zero point becomes the
  padding value plus a per-output-channel constant term (``zp_x * sum(w)``),
  otherwise both operands are shifted in int32 first (Relay's fallback; the
  same integers).
* **add / subtract / mul / concatenate**: operands requantized (or upcast)
  to int32 at the output scale, combined, clipped back, as in ``op_common.h``.
* **quantize / dequantize**: ``round(x / scale) + zp`` clipped and cast (halves away
  from zero, v0.19's ``llvm.round``);
  ``(int32(q) - zp) * scale``; per-channel along ``axis``.

Scales and zero points must be constants (as Relay's canonicalization
required); a non-constant one is a ``ConversionError`` naming the parameter.

``fixed_point_multiply_per_axis``, the plain Relay op v0.19's per-channel
``FixedPointMultiplyPerChannel`` emitted, is here too: its multipliers and shifts are
tensors (any values, constant or not) indexed by the data's indices at ``axes``.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import tvm
from tvm import relax

from ...relay import ast
from ..registry import get_converter, register_converter
from ..run_checks import emit_run_check, emit_tensor_check, none_hold
from ._utils import (
    dtype_of, folded_value, ints, ndim_of, normalize_axis, repeat_to, round_half_away,
    round_half_away_np, shape_of,
)
from .conv import check_conv_weight
from .layout import layout_transform

_INT_RANGE = {d: (int(np.iinfo(d).min), int(np.iinfo(d).max))
              for d in ("int8", "uint8", "int16", "uint16", "int32")}


# --------------------------------------------------------------------------- parameters
class QParam:
    """A constant scale or zero point: its value and whether Relay saw a scalar."""

    def __init__(self, value: np.ndarray):
        self.value = value
        self.is_scalar = value.ndim == 0

    def equals_scalar(self, other: "QParam") -> bool:
        """Relay's ``IsEqualScalar``: both 0-d constants of one dtype and value."""
        return (self.is_scalar and other.is_scalar and self.value.dtype == other.value.dtype
                and self.value.item() == other.value.item())

    def is_scalar_value(self, number: int) -> bool:
        return self.is_scalar and self.value.item() == number

    def item(self):
        return self.value.reshape(()).item()


def _constant_value(expr: relax.Expr, ctx) -> Optional[np.ndarray]:
    """A constant, a cast of one, or a reshape of one (``relay.qnn.op`` wraps simulated
    ops' parameters in ``reshape(-1)``)."""
    if isinstance(expr, relax.Tuple):
        return None
    if isinstance(expr, relax.Var):
        bound = ctx.bb.lookup_binding(expr)
        if isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == "relax.reshape":
            inner = _constant_value(bound.args[0], ctx)
            if inner is not None:
                return inner.reshape([int(d) for d in bound.ty.shape.values])
    return folded_value(expr, ctx)


def qparam(expr: relax.Expr, ctx, name: str, dtype: str) -> QParam:
    """The constant value of quantization parameter ``name`` (float32 scale / int32 zp)."""
    value = _constant_value(expr, ctx)
    if value is None:
        raise ctx.error(f"{name} must be a constant (Relay's QNN canonicalization "
                        "needed its value at compile time)")
    if str(value.dtype) != dtype:
        raise ctx.error(f"{name} must be {dtype}, got {value.dtype}")
    if value.ndim > 1:
        raise ctx.error(f"{name} must be a scalar or a 1-d tensor, got shape {value.shape}")
    if dtype.startswith("float"):
        # an infinite or NaN scale, or a 0 the op divides by, quantizes every value to
        # the same clipped integer (or an undefined NaN cast): a plausible-looking result
        if not np.isfinite(value).all():
            raise ctx.error(f"{name} must be finite, got {_first_bad(value, ~np.isfinite(value))}")
        if name == "output_scale" and (value == 0).any():
            raise ctx.error(f"{name} must not be 0 (the op divides by it)")
    return QParam(value)


def check_per_channel(param: QParam, name: str, data: relax.Expr, axis: int, ctx) -> None:
    """v0.19's ``AssignType`` (qnn/utils.h): a scale or zero point is a scalar or holds
    one value per entry of the axis it applies along — a (1,) one against an axis of 3
    was a type error, not a broadcast."""
    if param.is_scalar:
        return
    dims = shape_of(data)
    extent = dims[axis] if dims else 1
    if isinstance(extent, int) and param.value.size != extent:
        raise ctx.error(f"{name} has {param.value.size} value(s), but axis {axis} it applies "
                        f"along has {extent} entries (a scalar or one per entry, as v0.19's "
                        "type relation required)")


def require_scalar(param: QParam, name: str, ctx) -> None:
    """v0.19's ``IsScalarType`` check of a parameter that has no axis."""
    if not param.is_scalar:
        raise ctx.error(f"{name} must be a scalar, got shape {param.value.shape} (as v0.19's "
                        "type relation required)")


def _first_bad(value: np.ndarray, bad: np.ndarray) -> str:
    flat = value.reshape(-1)
    index = int(np.flatnonzero(bad.reshape(-1))[0])
    return f"{flat[index]}" if value.ndim == 0 else f"{flat[index]} at index {index}"


def _const(value, dtype: str) -> relax.Expr:
    return relax.const(np.asarray(value, dtype=dtype), dtype)


def _along(value: np.ndarray, ndim: int, axis: int, dtype: str) -> relax.Expr:
    """A 1-d per-channel vector shaped to broadcast along ``axis`` (a scalar stays 0-d)."""
    value = np.asarray(value, dtype=dtype)
    if value.ndim == 0:
        return _const(value, dtype)
    if ndim == 0:  # v0.19's per-channel lowering took axis -1 of it and failed too
        raise ValueError(f"a per-channel parameter of shape {value.shape} cannot apply to a "
                         "0-d tensor (it has no channel axis)")
    shape = [1] * ndim
    shape[axis] = value.size
    return _const(value.reshape(shape), dtype)


def _clip_cast(expr: relax.Expr, dtype: str) -> relax.Expr:
    """Relay's ``ConvertDtype``: clip to the dtype's range, then cast."""
    lo, hi = _INT_RANGE[dtype]
    return relax.op.astype(relax.op.clip(expr, lo, hi), dtype)


def _check_qdtype(dtype: str, ctx, what: str, allowed: Sequence[str]) -> str:
    if dtype not in allowed:
        raise ctx.error(f"{what} must be one of {', '.join(allowed)}, got {dtype}")
    return dtype


# --------------------------------------------------------------------------- fixed point
def fixed_point_multiplier_shift(multiplier: float) -> tuple[int, int]:
    """Relay's ``GetFixedPointMultiplierShift``: a Q31 significand and a power-of-two shift."""
    if multiplier == 0.0:
        return 0, 0
    significand, exponent = math.frexp(multiplier)
    scaled = significand * (1 << 31)
    # std::round: halfway cases away from zero (exact in float64 here).
    fixed = int(math.copysign(math.floor(abs(scaled) + 0.5), scaled))
    if fixed == (1 << 31):
        fixed //= 2
        exponent += 1
    return fixed, exponent


def _shifts(shift: int) -> tuple[int, int]:
    return (shift, 0) if shift > 0 else (0, -shift)


# A right shift past this many bits has no int64 form (v0.19 shifted by 64 or more there:
# undefined); the product it would round is below 1/2 in magnitude (an int32 times a
# Q31 significand is below 2**62), so it rounds to 0 in every mode: a multiplier below
# about 2**-33 multiplies to 0.
_MAX_TOTAL_SHIFT = 63


def _fixed_point_per_tensor(t32: relax.Expr, multiplier: float, rounding: str) -> relax.Expr:
    """``t32 * multiplier`` rounded as Relay's FixedPointMultiply / ...ToNearest (int32 out)."""
    fixed, shift = fixed_point_multiplier_shift(multiplier)
    lshift, rshift = _shifts(shift)
    if rounding == "UPWARD" and fixed == (1 << 30):
        # TIR q_multiply_shift legalizes an exact power of two into int32 shifts.
        exp = shift - 1
        if exp > 0:
            return relax.op.left_shift(t32, _const(exp, "int32"))
        if 0 < -exp < 32:
            e = -exp
            return relax.op.right_shift(relax.op.add(t32, _const(1 << (e - 1), "int32")),
                                        _const(e, "int32"))
    total = rshift + 31
    if total > _MAX_TOTAL_SHIFT:
        return relax.op.zeros_like(t32)
    x = relax.op.astype(t32, "int64")
    if lshift:
        x = relax.op.left_shift(x, _const(lshift, "int64"))
    x = relax.op.multiply(x, _const(fixed, "int64"))
    pos = 1 << (total - 1)
    if rounding == "UPWARD":
        x = relax.op.add(x, _const(pos, "int64"))
    else:
        x = relax.op.add(x, relax.op.where(relax.op.greater_equal(x, _const(0, "int64")),
                                           _const(pos, "int64"), _const(pos - 1, "int64")))
    return relax.op.astype(relax.op.right_shift(x, _const(total, "int64")), "int32")


def _fixed_point_per_channel(t32: relax.Expr, multipliers: Sequence[float], ndim: int,
                             axis: int, rounding: str) -> relax.Expr:
    """Relay's FixedPointMultiplyPerChannel(+ToNearest) along ``axis`` (int32 out)."""
    pairs = [fixed_point_multiplier_shift(m) for m in multipliers]
    fixed = np.array([p[0] for p in pairs], "int64")
    lshift = np.array([_shifts(p[1])[0] for p in pairs], "int64")
    total = np.array([_shifts(p[1])[1] + 31 for p in pairs], "int64")
    vanishing = total > _MAX_TOTAL_SHIFT  # channels whose product rounds to 0
    fixed[vanishing], total[vanishing] = 0, 31
    pos = np.left_shift(np.int64(1), total - 1)
    x = relax.op.astype(t32, "int64")
    if lshift.any():
        x = relax.op.left_shift(x, _along(lshift, ndim, axis, "int64"))
    x = relax.op.multiply(x, _along(fixed, ndim, axis, "int64"))
    if rounding == "UPWARD":
        x = relax.op.add(x, _along(pos, ndim, axis, "int64"))
    else:
        x = relax.op.add(x, relax.op.where(relax.op.greater_equal(x, _const(0, "int64")),
                                           _along(pos, ndim, axis, "int64"),
                                           _along(pos - 1, ndim, axis, "int64")))
    return relax.op.astype(relax.op.right_shift(x, _along(total, ndim, axis, "int64")), "int32")


def _round_fp(x: relax.Expr, rounding: str, dtype: str) -> relax.Expr:
    """Relay's Upward / Tonearest float rounding (the non-SSE4.1 emulation's values)."""
    half = _const(0.5, dtype)
    if rounding == "UPWARD":
        return relax.op.floor(relax.op.add(x, half))
    sign = relax.op.where(relax.op.less(x, _const(0.0, dtype)), _const(-1.0, dtype),
                          _const(1.0, dtype))
    return relax.op.multiply(relax.op.floor(relax.op.add(relax.op.abs(x), half)), sign)


# --------------------------------------------------------------------------- requantize
_MAX_FIXED_POINT_MULTIPLIER = float(2 ** 31)


def requantize(data: relax.Expr, in_scale: QParam, in_zp: QParam, out_scale: QParam,
               out_zp: QParam, axis: int, rounding: str, compute_dtype: str, out_dtype: str,
               ctx) -> relax.Expr:
    """Relay's ``RequantizeLower`` for constant parameters."""
    if not out_scale.is_scalar:
        raise ctx.error("output_scale must be a scalar")
    if out_scale.item() == 0.0:
        raise ctx.error("output_scale must not be 0")
    if rounding not in ("UPWARD", "TONEAREST"):
        raise ctx.unsupported_attr("rounding", rounding)
    data = ctx.emit(data)
    ndim = ndim_of(data)
    axis = ndim - 1 if axis == -1 else normalize_axis(axis, max(ndim, 1), ctx)
    out_scale_f = float(out_scale.item())
    if compute_dtype in ("float32", "float64"):
        return _requantize_fp(data, in_scale, in_zp, out_scale_f, out_zp, ndim, axis,
                              rounding, compute_dtype, out_dtype)
    if compute_dtype != "int64":
        raise ctx.unsupported_attr("compute_dtype", compute_dtype)
    t = data if dtype_of(data) == "int32" else relax.op.astype(data, "int32")
    if not in_zp.is_scalar_value(0):
        t = relax.op.subtract(t, _along(in_zp.value.reshape(-1) if not in_zp.is_scalar
                                        else in_zp.value, ndim, axis, "int32"))
    largest = float(np.max(np.abs(in_scale.value.astype("float64")))) / abs(out_scale_f)
    if largest >= _MAX_FIXED_POINT_MULTIPLIER:
        # its shift would pass the int64 the fixed-point product is computed in
        raise ctx.error(f"input_scale / output_scale = {largest:g} is out of the fixed-point "
                        f"range (below 2**31) of compute_dtype int64")
    if in_scale.is_scalar:
        if not in_scale.equals_scalar(out_scale):
            multiplier = float(np.float64(in_scale.item()) / np.float64(out_scale_f))
            t = _fixed_point_per_tensor(t, multiplier, rounding)
    else:
        multipliers = [float(np.float64(s) / np.float64(out_scale_f))
                       for s in in_scale.value.astype("float32")]
        t = _fixed_point_per_channel(t, multipliers, ndim, axis, rounding)
    if not out_zp.is_scalar_value(0):
        t = relax.op.add(_const(out_zp.item(), "int32"), t)
    if out_dtype == "int32":
        return t
    return _clip_cast(t, out_dtype)


def _requantize_fp(data, in_scale: QParam, in_zp: QParam, out_scale_f: float, out_zp: QParam,
                   ndim: int, axis: int, rounding: str, fdtype: str, out_dtype: str):
    t = relax.op.astype(data, fdtype)
    if not in_zp.is_scalar_value(0):
        zp = in_zp.value.reshape(-1) if not in_zp.is_scalar else in_zp.value
        t = relax.op.subtract(t, _along(zp.astype(fdtype), ndim, axis, fdtype))
    if in_scale.is_scalar:
        if float(in_scale.item()) != out_scale_f:
            m = np.float64(in_scale.item()) / np.float64(out_scale_f)
            t = relax.op.multiply(_const(m, fdtype), t)
    else:
        m = in_scale.value.astype("float64") / np.float64(out_scale_f)
        t = relax.op.multiply(t, _along(m, ndim, axis, fdtype))
    if not out_zp.is_scalar_value(0):
        t = relax.op.add(t, _const(out_zp.item(), fdtype))
    t = relax.op.astype(_round_fp(t, rounding, fdtype), "int32")
    return t if out_dtype == "int32" else _clip_cast(t, out_dtype)


_QDTYPES = ("int8", "uint8", "int16", "int32")


def _required_out_dtype(attrs, ctx) -> str:
    """``out_dtype`` of qnn.quantize / requantize / dequantize, which v0.19 required:
    QuantizeAttrs and DequantizeAttrs have no default (the parser refused text without
    one) and RequantizeAttrs' is void, which RequantizeRel refused.  Reading it as int8
    would give a model v0.19 never ran another meaning."""
    value = attrs.get("out_dtype")
    if value is None or str(value) in ("", "void"):
        raise ctx.error("out_dtype is required (Relay had no default for it)")
    return str(value)


@register_converter("qnn.requantize")
def _requantize(inputs, attrs, ctx):
    data, in_scale, in_zp, out_scale, out_zp = inputs
    out_dtype = _check_qdtype(_required_out_dtype(attrs, ctx), ctx, "out_dtype",
                              ("int8", "uint8", "int16", "int32"))
    # v0.19's RequantizeRel took int64 too (its lowering casts the input to int32 first)
    _check_qdtype(dtype_of(data), ctx, "the input dtype", _QDTYPES + ("int64",))
    # "None" (the attribute's default) meant the RequantizeConfig default: UPWARD, int64.
    rounding = str(attrs.get("rounding", "None"))
    compute_dtype = str(attrs.get("compute_dtype", "None"))
    scale, zp = (qparam(in_scale, ctx, "input_scale", "float32"),
                 qparam(in_zp, ctx, "input_zero_point", "int32"))
    out = (qparam(out_scale, ctx, "output_scale", "float32"),
           qparam(out_zp, ctx, "output_zero_point", "int32"))
    axis = int(attrs.get("axis", -1))
    if ndim_of(data):
        for param, name in ((scale, "input_scale"), (zp, "input_zero_point")):
            check_per_channel(param, name, data, normalize_axis(axis, ndim_of(data), ctx), ctx)
    for param, name in zip(out, ("output_scale", "output_zero_point")):
        require_scalar(param, name, ctx)
    return requantize(data, scale, zp, *out, axis,
                      "UPWARD" if rounding == "None" else rounding,
                      "int64" if compute_dtype == "None" else compute_dtype, out_dtype, ctx)


def _requantize_or_upcast(expr, scale: QParam, zp: QParam, out_scale: QParam, out_zp: QParam,
                          axis: int, ctx, dtype: str = "int32"):
    """``op_common.h`` RequantizeOrUpcast (config-default rounding: UPWARD, int64)."""
    if scale.equals_scalar(out_scale) and zp.equals_scalar(out_zp):
        return expr if dtype_of(expr) == dtype else relax.op.astype(expr, dtype)
    return requantize(expr, scale, zp, out_scale, out_zp, axis, "UPWARD", "int64", dtype, ctx)


# --------------------------------------------------------------------------- quantize
def _param_axis(attrs, data, ctx) -> tuple[int, int]:
    ndim = ndim_of(data)
    axis = int(attrs.get("axis", -1))
    return ndim, (normalize_axis(axis, ndim, ctx) if ndim else 0)


@register_converter("qnn.quantize")
def _quantize(inputs, attrs, ctx):
    data, scale_e, zp_e = inputs
    out_dtype = _check_qdtype(_required_out_dtype(attrs, ctx), ctx, "out_dtype",
                              ("int8", "uint8", "int16", "uint16", "int32"))  # QuantizeRel's
    if dtype_of(data) != "float32":
        raise ctx.error(f"input must be float32, got {dtype_of(data)}")
    ndim, axis = _param_axis(attrs, data, ctx)
    scale = qparam(scale_e, ctx, "output_scale", "float32")
    zp = qparam(zp_e, ctx, "output_zero_point", "int32")
    for param, name in ((scale, "output_scale"), (zp, "output_zero_point")):
        check_per_channel(param, name, data, axis, ctx)
    scaled = round_half_away(relax.op.divide(data, _along(scale.value, ndim, axis, "float32")),
                             ctx)
    shifted = relax.op.add(scaled, _along(zp.value.astype("float32"), ndim, axis, "float32"))
    lo, hi = _INT_RANGE[out_dtype]
    return relax.op.astype(relax.op.clip(shifted, float(lo), float(hi)), out_dtype)


@register_converter("qnn.dequantize")
def _dequantize(inputs, attrs, ctx):
    data, scale_e, zp_e = inputs
    out_dtype = _required_out_dtype(attrs, ctx)
    if out_dtype not in ("float32", "float16"):
        raise ctx.unsupported_attr("out_dtype", out_dtype)
    _check_qdtype(dtype_of(data), ctx, "the input dtype", _QDTYPES + ("uint16",))  # DequantizeRel's
    ndim, axis = _param_axis(attrs, data, ctx)
    scale = qparam(scale_e, ctx, "input_scale", "float32")
    zp = qparam(zp_e, ctx, "input_zero_point", "int32")
    shifted = relax.op.subtract(relax.op.astype(data, "int32"),
                                _along(zp.value, ndim, axis, "int32"))
    out = relax.op.multiply(relax.op.astype(shifted, "float32"),
                            _along(scale.value, ndim, axis, "float32"))
    if out_dtype == "float32":
        return out
    info = np.finfo(out_dtype)
    return relax.op.astype(relax.op.clip(out, float(info.min), float(info.max)), out_dtype)


# --------------------------------------------------------------------------- conv / dense
def _int32(expr: relax.Expr) -> relax.Expr:
    return expr if dtype_of(expr) == "int32" else relax.op.astype(expr, "int32")


def _zp_shifted(expr: relax.Expr, zp: QParam, ndim: int, axis: int) -> relax.Expr:
    t = _int32(expr)
    if zp.is_scalar_value(0):
        return t
    return relax.op.subtract(t, _along(zp.value, ndim, axis, "int32"))


def _zp_broadcast(expr: relax.Expr, zp: QParam) -> relax.Expr:
    """``expr`` in int32 minus ``zp`` broadcast as numpy does (right-aligned)."""
    t = _int32(expr)
    if zp.is_scalar_value(0):
        return t
    return relax.op.subtract(t, _const(np.asarray(zp.value, "int32"), "int32"))


@register_converter("qnn.conv2d")
def _qnn_conv2d(inputs, attrs, ctx):
    """v0.19's ``QnnConv2DRel`` ran ``Conv2DRel``: the weight is checked against
    ``channels``/``kernel_size`` and the result is in ``out_layout``."""
    out = _qnn_conv2d_in_data_layout(inputs, attrs, ctx)
    data_layout = attrs.get("data_layout") or "NCHW"
    out_layout = attrs.get("out_layout") or data_layout
    if out_layout == data_layout:
        return out
    return layout_transform(ctx.emit(out), data_layout, out_layout, ctx)


def _qnn_conv2d_in_data_layout(inputs, attrs, ctx):
    data, weight, in_zp_e, k_zp_e = inputs[:4]
    in_zp = qparam(in_zp_e, ctx, "input_zero_point", "int32")
    k_zp = qparam(k_zp_e, ctx, "kernel_zero_point", "int32")
    if not in_zp.is_scalar:
        raise ctx.error("input_zero_point must be a scalar")
    for what, expr in (("data", data), ("kernel", weight)):
        _check_qdtype(dtype_of(expr), ctx, f"the {what} dtype", ("int8", "uint8", "int16"))
    data_layout = attrs.get("data_layout") or "NCHW"
    kernel_layout = attrs.get("kernel_layout") or "OIHW"
    if data_layout not in ("NCHW", "NHWC"):
        raise ctx.unsupported_attr("data_layout", data_layout)
    if kernel_layout not in ("OIHW", "HWIO", "HWOI", "OHWI"):
        raise ctx.unsupported_attr("kernel_layout", kernel_layout)
    out_dtype = str(attrs.get("out_dtype") or "int32")
    if out_dtype not in ("int32", "int64"):
        raise ctx.unsupported_attr("out_dtype", out_dtype)
    check_conv_weight(data, weight, data_layout, kernel_layout, int(attrs.get("groups", 1)),
                      attrs, 2, ctx)
    padding = ints(attrs.get("padding", 0))
    padding = padding * 4 if len(padding) == 1 else padding + padding if len(padding) == 2 \
        else padding
    conv = dict(strides=repeat_to(attrs.get("strides", 1), 2),
                dilation=repeat_to(attrs.get("dilation", 1), 2),
                groups=int(attrs.get("groups", 1)), data_layout=data_layout,
                kernel_layout=kernel_layout, out_dtype=out_dtype)
    o_axis = kernel_layout.index("O")
    if not k_zp.is_scalar_value(0):
        # Relay's Conv2DFallBack arithmetic: both operands shifted in int32.
        zp_w = k_zp.value if k_zp.is_scalar else k_zp.value.reshape(-1)
        return relax.op.nn.conv2d(ctx.emit(_zp_shifted(data, in_zp, 4, 0)),
                                  ctx.emit(_zp_shifted(weight, QParam(zp_w), 4, o_axis)),
                                  padding=padding, **conv)
    zp_x = int(in_zp.item())
    if zp_x == 0:
        return relax.op.nn.conv2d(data, weight, padding=padding, **conv)
    # Input zero point: pad with it, subtract zp_x * sum(w) per output channel.
    if any(padding):
        top, left, bottom, right = padding
        spatial = {"NCHW": [0, 0, 0, 0, top, bottom, left, right],
                   "NHWC": [0, 0, top, bottom, left, right, 0, 0]}[data_layout]
        data = ctx.emit(relax.op.nn.pad(data, spatial, "constant", float(zp_x)))
    term1 = ctx.emit(relax.op.nn.conv2d(data, weight, padding=[0, 0, 0, 0], **conv))
    reduce_axes = [i for i in range(4) if i != o_axis]
    wsum = ctx.emit(relax.op.sum(ctx.emit(relax.op.astype(weight, out_dtype)),
                                 axis=reduce_axes))
    c_axis = data_layout.index("C")
    shape = [1, 1, 1, 1]
    shape[c_axis] = -1
    term3 = relax.op.multiply(_const(zp_x, out_dtype), relax.op.reshape(wsum, shape))
    return relax.op.subtract(term1, term3)


def _matmul_terms(data, weight_t, weight_sum_axis, weight, in_zp: QParam, k_zp: QParam,
                  out_dtype: str, ctx, batch: bool):
    """``data @ weight_t`` with zero points (weight_t is the transposed int weight).

    A scalar input zero point; the kernel's is a scalar or a vector along the units (the
    last axis of ``weight_t``).  With a nonzero kernel zero point both operands are
    shifted in int32: v0.19's four terms (dense.cc ``QnnDenseCanonicalize``:
    ``term1 - term2 + (term4 - term3)``, int32 ops) are this product expanded, so the
    int32 results are the same integers."""
    if not k_zp.is_scalar_value(0):
        x = ctx.emit(_zp_shifted(data, in_zp, 0, 0))
        ndim = ndim_of(weight_t)
        w = ctx.emit(_zp_shifted(weight_t, k_zp, ndim, ndim - 1))
        return relax.op.matmul(x, w, out_dtype=out_dtype)
    term1 = relax.op.matmul(data, weight_t, out_dtype=out_dtype)
    zp_x = int(in_zp.item())
    if zp_x == 0:
        return term1
    term1 = ctx.emit(term1)
    wsum = relax.op.sum(ctx.emit(relax.op.astype(weight, out_dtype)), axis=[weight_sum_axis],
                        keepdims=batch)
    return relax.op.subtract(term1, relax.op.multiply(_const(zp_x, out_dtype), wsum))


def _dense_zero_points(in_zp_e, k_zp_e, units: int, out_dtype: str, ctx):
    """The zero points as v0.19's QnnDenseRel and canonicalization took them: a scalar
    input zero point (``IsScalarType``); a scalar kernel zero point, or a vector that
    broadcasts over the ``units`` (``Multiply(kzp, repeat(sum(x), units))``, so
    ``units`` or 1 entries).  An int64 ``out_dtype`` leaves no zero point: the zero-point
    terms are int32, and v0.19's ``Subtract`` of them from the int64 ``term1`` was a type
    error (BroadcastRel: "data types int64 and int32 do not match")."""
    in_zp = qparam(in_zp_e, ctx, "input_zero_point", "int32")
    k_zp = qparam(k_zp_e, ctx, "kernel_zero_point", "int32")
    if not in_zp.is_scalar:
        raise ctx.error("input_zero_point must be a scalar")
    if not k_zp.is_scalar and k_zp.value.size not in (1, units):
        raise ctx.error(f"kernel_zero_point has {k_zp.value.size} values: expected a scalar "
                        f"or one per unit ({units})")
    if out_dtype == "int64" and not (in_zp.is_scalar_value(0) and k_zp.is_scalar_value(0)):
        raise ctx.error("out_dtype int64 needs both zero points to be the scalar 0 (v0.19 "
                        "subtracted int32 zero-point terms from the int64 product: a type "
                        "error)")
    return in_zp, k_zp


@register_converter("qnn.dense")
def _qnn_dense(inputs, attrs, ctx):
    """v0.19's QnnDenseRel: int8/uint8/int16/uint16 data, an int8/uint8 weight, an
    int32/int64 result."""
    data, weight, in_zp_e, k_zp_e = inputs[:4]
    _check_qdtype(dtype_of(data), ctx, "the data dtype", ("int8", "uint8", "int16", "uint16"))
    _check_qdtype(dtype_of(weight), ctx, "the weight dtype", ("int8", "uint8"))
    out_dtype = str(attrs.get("out_dtype") or "int32")
    if out_dtype not in ("int32", "int64"):
        raise ctx.unsupported_attr("out_dtype", out_dtype)
    units = attrs.get("units")
    rows = shape_of(weight)[0]
    if units is not None and isinstance(rows, int) and int(units) != rows:
        raise ctx.error(f"units={units} does not match the weight's {rows} rows")
    in_zp, k_zp = _dense_zero_points(in_zp_e, k_zp_e, rows, out_dtype, ctx)
    return _matmul_terms(data, ctx.emit(relax.op.permute_dims(weight, [1, 0])), 1, weight,
                         in_zp, k_zp, out_dtype, ctx, batch=False)


@register_converter("qnn.batch_matmul")
def _qnn_batch_matmul(inputs, attrs, ctx):
    x, y, x_zp_e, y_zp_e = inputs[:4]
    for what, expr in (("x", x), ("y", y)):  # QnnBatchMatmulRel: int8/uint8, int32 out
        _check_qdtype(dtype_of(expr), ctx, f"the {what} dtype", ("int8", "uint8"))
    # BatchMatmulAttrs' defaults are False/False; MakeQuantizedBatchMatmul set
    # transpose_b=True, so printed text carries it, and its canonicalization refused the rest.
    if attrs.get("transpose_a", False) or not attrs.get("transpose_b", False):
        raise ctx.error("qnn.batch_matmul supports only transpose_a=False, transpose_b=True "
                        "(as Relay did; a call without transpose_b has it False)")
    out_dtype = str(attrs.get("out_dtype") or "int32")
    if out_dtype != "int32":
        raise ctx.unsupported_attr("out_dtype", out_dtype)
    # y is (B, N, K): sum over K, keep (B, 1, N) to broadcast over the rows of x.
    y_t = ctx.emit(relax.op.permute_dims(y, [0, 2, 1]))
    in_zp = qparam(x_zp_e, ctx, "x_zero_point", "int32")
    k_zp = qparam(y_zp_e, ctx, "y_zero_point", "int32")
    for name, zp in (("x_zero_point", in_zp), ("y_zero_point", k_zp)):
        if not zp.is_scalar:  # QnnBatchMatmulRel's IsScalarType
            raise ctx.error(f"{name} must be a scalar")
    if k_zp.is_scalar_value(0) and int(in_zp.item()) != 0:
        term1 = ctx.emit(relax.op.matmul(x, y_t, out_dtype=out_dtype))
        ysum = ctx.emit(relax.op.sum(ctx.emit(relax.op.astype(y, out_dtype)), axis=[2]))
        ysum = ctx.emit(relax.op.expand_dims(ysum, 1))
        return relax.op.subtract(term1, relax.op.multiply(_const(int(in_zp.item()), out_dtype),
                                                          ysum))
    return _matmul_terms(x, y_t, 2, y, in_zp, k_zp, out_dtype, ctx, batch=True)


# --------------------------------------------------------------------------- element-wise
def _binary_params(inputs, attrs, ctx):
    """The six parameters of a binary QNN op, checked as v0.19's QnnBroadcastRel did:
    lhs/rhs ones scalar or one per entry of ``lhs_axis``/``rhs_axis``, output ones
    scalar."""
    names = ("lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point", "output_scale",
             "output_zero_point")
    dtypes = ("float32", "int32") * 3
    params = [qparam(e, ctx, n, d) for e, n, d in zip(inputs[2:8], names, dtypes)]
    for side, data in (("lhs", inputs[0]), ("rhs", inputs[1])):
        scale, zp = params[:2] if side == "lhs" else params[2:4]
        if scale.is_scalar and zp.is_scalar:
            continue
        ndim = ndim_of(data)
        axis = normalize_axis(int(attrs.get(f"{side}_axis", -1)), ndim, ctx,
                              f"{side}_axis") if ndim else 0
        for param, name in ((scale, f"{side}_scale"), (zp, f"{side}_zero_point")):
            check_per_channel(param, name, data, axis, ctx)
    for param, name in zip(params[4:], names[4:]):
        require_scalar(param, name, ctx)
    return params


def _binary_dtype(lhs, rhs, ctx) -> str:
    # QnnBroadcastRel checked no dtype; ConvertDtype clipped to the input's range
    dtype = _check_qdtype(dtype_of(lhs), ctx, "lhs dtype",
                          ("int8", "uint8", "int16", "uint16", "int32"))
    if dtype_of(rhs) != dtype:
        raise ctx.error(f"lhs and rhs dtypes differ ({dtype} vs {dtype_of(rhs)})")
    return dtype


def _add_sub(relax_op, zp_op):
    def convert(inputs, attrs, ctx):
        lhs, rhs = inputs[:2]
        dtype = _binary_dtype(lhs, rhs, ctx)
        ls, lz, rs, rz, os_, oz = _binary_params(inputs, attrs, ctx)
        lhs_axis, rhs_axis = int(attrs.get("lhs_axis", -1)), int(attrs.get("rhs_axis", -1))
        a = _requantize_or_upcast(lhs, ls, lz, os_, oz, lhs_axis, ctx)
        b = _requantize_or_upcast(rhs, rs, rz, os_, oz, rhs_axis, ctx)
        out = relax_op(a, b)
        if not oz.is_scalar_value(0):
            out = zp_op(out, _const(oz.item(), "int32"))
        return _clip_cast(out, dtype) if dtype != "int32" else out

    return convert


register_converter("qnn.add")(_add_sub(relax.op.add, relax.op.subtract))
register_converter("qnn.subtract")(_add_sub(relax.op.subtract, relax.op.add))


@register_converter("qnn.mul")
def _qnn_mul(inputs, attrs, ctx):
    lhs, rhs = inputs[:2]
    dtype = _binary_dtype(lhs, rhs, ctx)
    ls, lz, rs, rz, os_, oz = _binary_params(inputs, attrs, ctx)
    lhs_axis, rhs_axis = int(attrs.get("lhs_axis", -1)), int(attrs.get("rhs_axis", -1))
    ndim = ndim_of(lhs)
    zero = QParam(np.array(0, "int32"))
    if ls.is_scalar and rs.is_scalar:
        # v0.19's QnnMulCanonicalize subtracted the zero points as given here (a plain,
        # right-aligned broadcast: a 1-D one runs along the last axis, lhs_axis unused)
        product = relax.op.multiply(_zp_broadcast(lhs, lz), _zp_broadcast(rhs, rz))
        new_scale = QParam(np.array(np.float32(ls.item()) * np.float32(rs.item()), "float32"))
        return requantize(product, new_scale, zero, os_, oz, -1, "UPWARD", "int64", dtype, ctx)
    if lhs_axis != rhs_axis:
        raise ctx.error("per-channel qnn.mul needs lhs_axis == rhs_axis (as Relay did)")
    axis = normalize_axis(lhs_axis, ndim, ctx)
    a = _zp_shifted(lhs, QParam(lz.value.reshape(-1)) if not lz.is_scalar_value(0) else lz,
                    ndim, axis)
    b = _zp_shifted(rhs, QParam(rz.value.reshape(-1)) if not rz.is_scalar_value(0) else rz,
                    ndim, axis)
    scales = (ls.value.astype("float64") * rs.value.astype("float64")).astype("float32")
    return requantize(relax.op.multiply(a, b), QParam(scales.reshape(-1)), zero, os_, oz, axis,
                      "UPWARD", "int64", dtype, ctx)


def _tuple_fields(expr: relax.Expr, ctx, what: str) -> list:
    if isinstance(expr, relax.Tuple):
        return list(expr.fields)
    raise ctx.error(f"{what} must be a tuple written in the call")


@register_converter("qnn.concatenate")
def _qnn_concatenate(inputs, attrs, ctx):
    data, scales_e, zps_e, out_scale_e, out_zp_e = inputs
    if isinstance(data, relax.Tuple):
        fields = list(data.fields)
    else:
        fields = [ctx.emit(relax.TupleGetItem(data, i)) for i in range(len(data.ty.fields))]
    scales = _tuple_fields(scales_e, ctx, "input_scales")
    zps = _tuple_fields(zps_e, ctx, "input_zero_points")
    if not len(fields) == len(scales) == len(zps):
        raise ctx.error(f"{len(fields)} tensors but {len(scales)} scales and {len(zps)} "
                        "zero points")
    out_scale = qparam(out_scale_e, ctx, "output_scale", "float32")
    out_zp = qparam(out_zp_e, ctx, "output_zero_point", "int32")
    require_scalar(out_scale, "output_scale", ctx)  # QnnConcatenateRel: all scalars
    require_scalar(out_zp, "output_zero_point", ctx)
    parts = []
    for i, (tensor, s, z) in enumerate(zip(fields, scales, zps)):
        scale = qparam(s, ctx, f"input_scales[{i}]", "float32")
        zp = qparam(z, ctx, f"input_zero_points[{i}]", "int32")
        require_scalar(scale, f"input_scales[{i}]", ctx)
        require_scalar(zp, f"input_zero_points[{i}]", ctx)
        if scale.equals_scalar(out_scale) and zp.equals_scalar(out_zp):
            parts.append(tensor)
        else:
            parts.append(ctx.emit(requantize(tensor, scale, zp, out_scale, out_zp, -1, "UPWARD",
                                             "int64", dtype_of(tensor), ctx)))
    axis = normalize_axis(int(attrs.get("axis", 0)), ndim_of(fields[0]), ctx)
    return relax.op.concat(parts, axis=axis)


# --------------------------------------------------------------------------- lookup tables
def _dequantize_np(q: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return (q.astype("int32") - np.int32(zp)).astype("float32") * np.float32(scale)


def _quantize_np(x: np.ndarray, scale: float, zp: int, dtype: str) -> np.ndarray:
    lo, hi = _INT_RANGE[dtype]
    with np.errstate(all="ignore"):
        q = round_half_away_np(x.astype("float32") / np.float32(scale)) + np.float32(zp)
        # Relay's quantize clipped with max(min(q, hi), lo), which LLVM selects as
        # ``q < hi ? q : hi``: a NaN entry (sqrt / log of a negative) became hi
        q = np.where(np.isnan(q), np.float32(hi), q)
        return np.clip(q, lo, hi).astype(dtype)


def _hardswish(x):
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _erf(x):
    return np.vectorize(math.erf, otypes=["float64"])(x).astype(x.dtype)


# Relay v0.19 legalized these to a 256-entry table: dequantize every input value,
# apply the NumPy function, quantize (create_integer_lookup_op), then ``take``.
_LOOKUP_FUNCS = {
    "qnn.sqrt": np.sqrt, "qnn.rsqrt": lambda a: 1 / np.sqrt(a), "qnn.exp": np.exp,
    "qnn.sigmoid": lambda a: 1 / (1 + np.exp(-a)), "qnn.hardswish": _hardswish,
    "qnn.tanh": np.tanh, "qnn.log": np.log, "qnn.abs": np.abs, "qnn.erf": _erf,
}


def _unary_operands(inputs, ctx, dtypes: tuple,
                    names: tuple = ("input_scale", "input_zero_point", "output_scale",
                                    "output_zero_point")):
    """``(data, its dtype, (scale, zero point, output scale, output zero point))`` of a
    one-tensor QNN op, each parameter checked and named as Relay names it."""
    data = inputs[0]
    dtype = _check_qdtype(dtype_of(data), ctx, "the input dtype", dtypes)
    params = tuple(qparam(e, ctx, n, d) for e, n, d in zip(
        inputs[1:5], names, ("float32", "int32", "float32", "int32")))
    return data, dtype, params


def _require_scalars(params: tuple, ctx,
                     names: tuple = ("input_scale", "input_zero_point", "output_scale",
                                     "output_zero_point")) -> None:
    for param, name in zip(params, names):
        require_scalar(param, name, ctx)


def _lookup(fn):
    def convert(inputs, attrs, ctx):
        data, dtype, (scale, zp, out_scale, out_zp) = _unary_operands(
            inputs, ctx, ("int8", "uint8"),
            ("scale", "zero_point", "output_scale", "output_zero_point"))
        if not all(p.is_scalar for p in (scale, zp, out_scale, out_zp)):
            raise ctx.error("the quantization parameters must be scalars")
        lo, hi = _INT_RANGE[dtype]
        values = np.arange(lo, hi + 1).astype(dtype)  # table index = value - lo
        with np.errstate(all="ignore"):
            real = fn(_dequantize_np(values, scale.item(), zp.item()))
        table = _quantize_np(np.asarray(real, "float32"), out_scale.item(), out_zp.item(), dtype)
        index = relax.op.add(relax.op.astype(data, "int32"), _const(-lo, "int32"))
        return relax.op.take(_const(table, dtype), ctx.emit(index), axis=0)

    return convert


for _name, _fn in _LOOKUP_FUNCS.items():
    register_converter(_name)(_lookup(_fn))


# --------------------------------------------------------------------------- others
def _fixed_point_scalar(value: int, multiplier: float) -> int:
    """TIR ``q_multiply_shift`` (UPWARD) of one int32 value, as Relay folded it."""
    fixed, shift = fixed_point_multiplier_shift(multiplier)
    if fixed == (1 << 30) and shift - 1 > 0:
        return _wrap32(value << (shift - 1))
    if fixed == (1 << 30) and 0 < 1 - shift < 32:
        e = 1 - shift
        return _wrap32(_wrap32(value + (1 << (e - 1))) >> e)
    lshift, rshift = _shifts(shift)
    total = rshift + 31
    return _wrap32(((value << lshift) * fixed + (1 << (total - 1))) >> total)


def _wrap32(value: int) -> int:
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


@register_converter("qnn.leaky_relu")
def _qnn_leaky_relu(inputs, attrs, ctx):
    # QnnLeakyReluRel: int8/uint8 and scalar parameters
    data, dtype, params = _unary_operands(inputs, ctx, ("int8", "uint8"))
    _require_scalars(params, ctx)
    scale, zp, out_scale, out_zp = params
    # LeakyReluAttrs' default, which v0.19's printer left out of the text: 0.25
    alpha = float(attrs.get("alpha", 0.25))
    x32 = ctx.emit(_int32(data))
    requantized = ctx.emit(_requantize_or_upcast(x32, scale, zp, out_scale, out_zp, -1, ctx))
    product = _fixed_point_per_tensor(requantized, alpha, "UPWARD")
    scaled_zp = _fixed_point_scalar(int(out_zp.item()), 1 - alpha)
    negative = relax.op.add(ctx.emit(product), _const(scaled_zp, "int32"))
    out = relax.op.where(relax.op.less(x32, _const(zp.item(), "int32")), ctx.emit(negative),
                         requantized)
    return _clip_cast(ctx.emit(out), dtype)


@register_converter("qnn.avg_pool2d")
def _qnn_avg_pool2d(inputs, attrs, ctx):
    # QnnAvgPool2DRel: int8/uint8 and scalar parameters
    data, dtype, params = _unary_operands(inputs, ctx, ("int8", "uint8"))
    _require_scalars(params, ctx)
    scale, zp, out_scale, out_zp = params
    upcast = ctx.emit(_requantize_or_upcast(data, scale, zp, out_scale, out_zp, -1, ctx))
    # Relay canonicalized it to nn.avg_pool2d of the int32 operand: the same converter
    # (v0.19's ceil_mode windows, an int32 average truncated toward zero)
    pooled = get_converter("nn.avg_pool2d")([upcast], _PoolAttrs(attrs), ctx)
    return _clip_cast(ctx.emit(pooled), dtype)


class _PoolAttrs:
    """qnn.avg_pool2d's attributes as nn.avg_pool2d reads them (``pool_size`` defaults to
    1 here, as the qnn op's did)."""

    def __init__(self, attrs):
        self._attrs = attrs

    def get(self, key, default=None):
        return self._attrs.get(key, default)

    def __getitem__(self, key):
        return self._attrs.get(key, 1) if key == "pool_size" else self._attrs[key]


@register_converter("qnn.conv2d_transpose")
def _qnn_conv2d_transpose(inputs, attrs, ctx):
    """Relay legalized it to ``nn.conv2d_transpose`` of the zero-point-shifted int32
    operands (same attrs type): that op's converter, with its layouts, ``out_layout``
    and weight checks."""
    data, weight, in_zp_e, k_zp_e = inputs[:4]
    in_zp = qparam(in_zp_e, ctx, "input_zero_point", "int32")
    k_zp = qparam(k_zp_e, ctx, "kernel_zero_point", "int32")
    data_layout = attrs.get("data_layout") or "NCHW"
    kernel_layout = attrs.get("kernel_layout") or "IOHW"
    x = ctx.emit(_zp_shifted(data, in_zp, 4, data_layout.index("C")))
    w = ctx.emit(_zp_shifted(weight, k_zp, 4, kernel_layout.index("O")))
    transpose = {**attrs, "out_dtype": str(attrs.get("out_dtype") or "int32")}
    return get_converter("nn.conv2d_transpose")(
        [x, w], ast.Attrs(transpose).for_op("nn.conv2d_transpose"), ctx)


_SQNN_CODES = {0: None, 1: "int8", 2: "uint8", 3: "int32"}  # topi.nn.qnn.SQNN_DTYPE_TO_CODE


def _sqnn_dtype(expr, ctx) -> Optional[str]:
    value = folded_value(expr, ctx)
    if value is None or value.size != 1 or int(value.reshape(())) not in _SQNN_CODES:
        raise ctx.error("the dtype code must be a constant 0 (disable), 1 (int8), "
                        "2 (uint8) or 3 (int32)")
    return _SQNN_CODES[int(value.reshape(()))]


def _sqnn_params(inputs, attrs, ctx, names):
    data = inputs[0]
    ndim = ndim_of(data)
    axis = normalize_axis(int(attrs.get("axis", -1)), ndim, ctx)
    scale = qparam(inputs[2], ctx, names[0], "float32").value.reshape(-1)
    zp = qparam(inputs[3], ctx, names[1], "int32").value.reshape(-1)
    # topi indexes the parameters by (index along axis) mod their length.
    count = shape_of(data)[axis]
    take = np.arange(count) % scale.size, np.arange(count) % zp.size
    return (_along(scale[take[0]], ndim, axis, "float32"),
            _along(zp[take[1]].astype("float32"), ndim, axis, "float32"))


@register_converter("qnn.simulated_quantize")
def _simulated_quantize(inputs, attrs, ctx):
    dtype = _sqnn_dtype(inputs[1], ctx)
    if dtype is None:
        return inputs[0]
    scale, zp = _sqnn_params(inputs, attrs, ctx, ("output_scale", "output_zero_point"))
    lo, hi = _INT_RANGE[dtype]
    rounded = relax.op.add(round_half_away(relax.op.divide(inputs[0], scale), ctx), zp)
    return relax.op.clip(rounded, float(lo), float(hi))


@register_converter("qnn.simulated_dequantize")
def _simulated_dequantize(inputs, attrs, ctx):
    if _sqnn_dtype(inputs[1], ctx) is None:
        return inputs[0]
    scale, zp = _sqnn_params(inputs, attrs, ctx, ("input_scale", "input_zero_point"))
    return relax.op.multiply(relax.op.subtract(inputs[0], zp), scale)


# ------------------------------------------------------------ fixed_point_multiply_per_axis
#: The shifts whose int64 forms are defined: ``x << lshift`` and ``>> (rshift + 31)``
#: within 0..63, and ``1 << (rshift + 30)`` not negative (LLVM: poison past them).
_LSHIFT_RANGE = (0, 63)
_RSHIFT_RANGE = (-30, 32)


def _per_axis_param(param: relax.Expr, data: relax.Expr, axes: Sequence[int], name: str,
                    ctx) -> relax.Expr:
    """``param`` broadcast against ``data`` as topi indexed it: ``param(*[i[a] for a in
    axes])``, one axis of ``param`` per entry of ``axes`` (its rank), each at least as
    long as the data's axis it follows (a longer one is read in part; a shorter one was
    read past its end).  Int64, ready for the arithmetic."""
    if dtype_of(param) != "int32":
        raise ctx.error(f"{name} is {dtype_of(param)}: v0.19's q_multiply_shift_per_axis "
                        "takes int32 multipliers and shifts (ICHECK in QMultiplyShift)")
    p_dims, d_dims = shape_of(param), shape_of(data)
    if len(p_dims) != len(axes):
        raise ctx.error(f"{name} is {len(p_dims)}-d but axes={list(axes)} index it with "
                        f"{len(axes)} indices (topi reads {name}(i[axes]))")
    ends = []
    for j, (p_dim, axis) in enumerate(zip(p_dims, axes)):
        d_dim = d_dims[axis]
        if isinstance(p_dim, int) and isinstance(d_dim, int):
            if p_dim < d_dim:
                raise ctx.error(f"{name} has {p_dim} entries on axis {j}, the data {d_dim} on "
                                f"axis {axis}: topi would read past the end of {name}")
        elif isinstance(p_dim, int) or not p_dim.same_as(d_dim):
            p_val = tvm.tirx.const(p_dim, "int64") if isinstance(p_dim, int) else p_dim
            d_val = tvm.tirx.const(d_dim, "int64") if isinstance(d_dim, int) else d_dim
            emit_run_check(ctx.bb, tvm.tirx.GE(p_val, d_val), ctx.location, ctx.op_name,
                           f"{name} has {{}} entries on axis {j}, the data {{}} on axis "
                           f"{axis}: topi would read past the end of {name}", p_val, d_val)
        ends.append(d_dim)
    if any(p != d if isinstance(p, int) and isinstance(d, int) else
           isinstance(p, int) or not p.same_as(d) for p, d in zip(p_dims, ends)):
        param = relax.op.strided_slice(param, list(range(len(ends))), [0] * len(ends), ends)
    order = sorted(range(len(axes)), key=lambda j: axes[j])
    if order != list(range(len(axes))):
        param = relax.op.permute_dims(param, order)
    placed = [d_dims[k] if k in axes else 1 for k in range(len(d_dims))]
    return relax.op.astype(relax.op.reshape(param, placed), "int64")


def _check_shift_values(shift: relax.Expr, name: str, bounds: tuple[int, int], ctx) -> None:
    """Shift amounts whose int64 shifts are defined (constants at import, others when the
    model runs): past them v0.19's LLVM shifts were poison, no value to reproduce."""
    low, high = bounds
    rule = f"{name} must lie in [{low}, {high}] (the int64 shifts of q_multiply_shift_per_axis)"
    value = folded_value(shift, ctx)
    if value is not None:
        bad = (value < low) | (value > high)
        if bad.any():
            raise ctx.error(f"{name}: {_first_bad(value, bad)}: {rule}")
        return
    outside = relax.op.logical_or(relax.op.less(shift, _const(low, "int32")),
                                  relax.op.greater(shift, _const(high, "int32")))
    emit_tensor_check(ctx, none_hold(ctx.emit(outside)), f"{rule} in every run; this run's "
                                                         "do not")


@register_converter("fixed_point_multiply_per_axis")
def _fixed_point_multiply_per_axis(inputs, attrs, ctx):
    """v0.19's topi.fixed_point_multiply_per_axis, legalized as ``QMultiplyShift``
    (src/target/intrin_rule.cc): in int64, ``x << lshift`` if ``is_lshift_required``
    (else no left shift, whatever the shifts hold), times the multiplier, plus
    ``1 << (rshift + 30)``, arithmetic shift right by ``rshift + 31`` (halves toward
    +inf), cast to int32; ``is_rshift_required`` is not read.  The result is int32 and
    FixedPointMultiplyPerAxisRel typed it as the data, so the data must be int32 (another
    dtype gave a kernel whose output disagreed with its type)."""
    data, multiplier, lshift, rshift = inputs
    if dtype_of(data) != "int32":
        raise ctx.error(f"data is {dtype_of(data)}: v0.19's compute returns int32 while its "
                        "type is the data's, so only int32 data ran")
    ndim = ndim_of(data)
    axes = [normalize_axis(a, ndim, ctx) for a in ints(attrs["axes"])]
    if len(set(axes)) != len(axes):
        raise ctx.error(f"axes={ints(attrs['axes'])} repeat an axis (topi would read the "
                        "parameters' diagonal; not supported)")
    lshift_required = bool(attrs.get("is_lshift_required", False))
    if lshift_required:
        _check_shift_values(lshift, "left_shift", _LSHIFT_RANGE, ctx)
    _check_shift_values(rshift, "right_shift", _RSHIFT_RANGE, ctx)
    fixed, lsh, rsh = (ctx.emit(_per_axis_param(p, data, axes, name, ctx)) for p, name in
                       ((multiplier, "fp_multiplier"), (lshift, "left_shift"),
                        (rshift, "right_shift")))
    x = relax.op.astype(data, "int64")
    if lshift_required:
        x = relax.op.left_shift(x, lsh)
    x = relax.op.multiply(x, fixed)
    total = ctx.emit(relax.op.add(rsh, _const(31, "int64")))
    rounding = relax.op.left_shift(_const(1, "int64"),
                                   relax.op.subtract(total, _const(1, "int64")))
    x = relax.op.right_shift(relax.op.add(x, rounding), total)
    return relax.op.astype(x, "int32")
