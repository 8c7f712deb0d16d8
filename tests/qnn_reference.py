"""NumPy model of Relay v0.19's QNN canonicalization (the arithmetic ``relay.build`` ran).

Written for the tests from Relay's C++ lowering (``src/relay/qnn/utils.cc``,
``op/requantize.cc``, ``op/*.cc``, TIR's ``q_multiply_shift`` legalization),
independently of the importer: the multiplier/shift come from ``numpy.frexp``
and integer rounding is done on Python ints, so a shared mistake is unlikely.
"""
from __future__ import annotations

import numpy as np

QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
          "uint16": (0, 65535), "int32": (-2**31, 2**31 - 1)}


def multiplier_shift(m: float) -> tuple[int, int]:
    if m == 0:
        return 0, 0
    sig, exp = np.frexp(np.float64(m))
    q = sig * 2.0**31
    fixed = int(np.floor(q + 0.5)) if q >= 0 else -int(np.floor(-q + 0.5))
    if fixed == 2**31:
        fixed //= 2
        exp += 1
    return fixed, int(exp)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


def fixed_point_multiply(x: np.ndarray, m: float, rounding: str, per_tensor: bool = True):
    """int32 ``x`` times multiplier ``m`` (Relay's FixedPointMultiply*; int64 math)."""
    fixed, shift = multiplier_shift(m)
    x = x.astype(np.int64)
    if per_tensor and rounding == "UPWARD" and fixed == 2**30 and not (0 < shift - 1) \
            and 0 < 1 - shift < 32:
        e = 1 - shift  # q_multiply_shift's power-of-two shortcut (int32 wrap-around)
        return _wrap32(_wrap32(x + (1 << (e - 1))) >> e)
    if per_tensor and rounding == "UPWARD" and fixed == 2**30 and shift - 1 > 0:
        return _wrap32(x << (shift - 1))
    lshift, rshift = (shift, 0) if shift > 0 else (0, -shift)
    prod = (x << lshift) * fixed
    total = rshift + 31
    if rounding == "UPWARD":
        prod = prod + (1 << (total - 1))
    else:
        prod = prod + np.where(prod >= 0, 1 << (total - 1), (1 << (total - 1)) - 1)
    return _wrap32(prod >> total)


def requantize(x, in_scale, in_zp, out_scale, out_zp, out_dtype, rounding="UPWARD", axis=-1):
    """``qnn.requantize`` with compute_dtype int64 (scales float32, zps int32)."""
    x = np.asarray(x).astype(np.int64)
    in_scale = np.asarray(in_scale, np.float32)
    in_zp = np.asarray(in_zp, np.int32)
    axis = axis % x.ndim

    def along(v):
        shape = [1] * x.ndim
        shape[axis] = -1
        return np.asarray(v).reshape(shape)

    t = _wrap32(x - (along(in_zp) if in_zp.ndim else int(in_zp)))  # int32 arithmetic
    if in_scale.ndim == 0:
        if float(in_scale) != float(np.float32(out_scale)):
            t = fixed_point_multiply(t, float(np.float64(in_scale) / np.float64(
                np.float32(out_scale))), rounding)
    else:
        out = np.empty_like(t)
        for c, s in enumerate(in_scale):
            idx = [slice(None)] * t.ndim
            idx[axis] = c
            out[tuple(idx)] = fixed_point_multiply(
                t[tuple(idx)], float(np.float64(s) / np.float64(np.float32(out_scale))),
                rounding, per_tensor=False)
        t = out
    t = _wrap32(t + int(out_zp))
    lo, hi = QRANGE[out_dtype]
    return np.clip(t, lo, hi).astype(out_dtype)


def round_half_away(x):
    """C's ``round`` (v0.19 lowered Relay's round to ``llvm.round``): halves away from 0,
    computed exactly in float64 (every float32 is a float64); -0.0 stays -0.0."""
    x = np.asarray(x)
    wide = x.astype(np.float64)
    return np.copysign(np.floor(np.abs(wide) + 0.5), wide).astype(x.dtype)


def quantize(x, scale, zp, out_dtype, axis=-1):
    x = np.asarray(x, np.float32)
    scale, zp = np.asarray(scale, np.float32), np.asarray(zp, np.int32)
    if scale.ndim:
        shape = [1] * x.ndim
        shape[axis % x.ndim] = -1
        scale, zp = scale.reshape(shape), (zp.reshape(shape) if zp.ndim else zp)
    lo, hi = QRANGE[out_dtype]
    q = round_half_away(x / scale) + zp.astype(np.float32)
    return np.clip(q, lo, hi).astype(out_dtype)


def dequantize(q, scale, zp, axis=-1):
    q = np.asarray(q)
    scale, zp = np.asarray(scale, np.float32), np.asarray(zp, np.int32)
    if scale.ndim:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = -1
        scale = scale.reshape(shape)
        zp = zp.reshape(shape) if zp.ndim else zp
    return (q.astype(np.int32) - zp).astype(np.float32) * scale


def conv2d_nchw(x, w, x_zp, w_zp, strides=(1, 1), padding=(0, 0, 0, 0), groups=1):
    """int32 result of ``qnn.conv2d`` (NCHW/OIHW): sum((x - zp_x) * (w - zp_w))."""
    xs = x.astype(np.int64) - int(x_zp)
    ws = w.astype(np.int64) - (np.asarray(w_zp).reshape(-1, 1, 1, 1) if np.ndim(w_zp)
                               else int(w_zp))
    top, left, bottom, right = padding
    xs = np.pad(xs, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, wd = xs.shape
    o, i, kh, kw = ws.shape
    sh, sw = strides
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    opg = o // groups
    for oc in range(o):
        g = oc // opg
        xg = xs[:, g * i:(g + 1) * i]
        for y in range(oh):
            for z in range(ow):
                win = xg[:, :, y * sh:y * sh + kh, z * sw:z * sw + kw]
                out[:, oc, y, z] = (win * ws[oc]).sum(axis=(1, 2, 3))
    return out.astype(np.int32)


def dense(x, w, x_zp, w_zp):
    return ((x.astype(np.int64) - int(x_zp)) @ (w.astype(np.int64) - int(w_zp)).T).astype(
        np.int32)


def add(a, b, a_s, a_zp, b_s, b_zp, o_s, o_zp, subtract=False):
    dtype = str(a.dtype)

    def to_out(t, s, zp):
        if np.float32(s) == np.float32(o_s) and int(zp) == int(o_zp):
            return t.astype(np.int64)
        return requantize(t, s, zp, o_s, o_zp, "int32").astype(np.int64)

    ta, tb = to_out(a, a_s, a_zp), to_out(b, b_s, b_zp)
    out = ta - tb + int(o_zp) if subtract else ta + tb - int(o_zp)
    lo, hi = QRANGE[dtype]
    return np.clip(out, lo, hi).astype(dtype)


def mul(a, b, a_s, a_zp, b_s, b_zp, o_s, o_zp):
    prod = (a.astype(np.int64) - int(a_zp)) * (b.astype(np.int64) - int(b_zp))
    return requantize(prod, np.float32(a_s) * np.float32(b_s), 0, o_s, o_zp, str(a.dtype))


def concatenate(tensors, scales, zps, o_s, o_zp, axis):
    parts = []
    for t, s, z in zip(tensors, scales, zps):
        same = np.float32(s) == np.float32(o_s) and int(z) == int(o_zp)
        parts.append(t if same else requantize(t, s, z, o_s, o_zp, str(t.dtype)))
    return np.concatenate(parts, axis=axis)
