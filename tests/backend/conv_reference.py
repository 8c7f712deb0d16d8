"""NumPy references for grouped and transposed convolutions (float64, Relay semantics).

The transposed one scatters every input pixel (the definition), so it shares
nothing with the gather the bmlib template computes.
"""
from __future__ import annotations

import numpy as np


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def _pad4(padding) -> tuple[int, int, int, int]:
    if isinstance(padding, int):
        return (padding,) * 4
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    return tuple(padding)


def conv2d(x, w, strides=1, padding=0, dilation=1, groups=1):
    """NCHW data, OIHW weight ``(O, C/groups, KH, KW)``."""
    x, w = x.astype("float64"), w.astype("float64")
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    top, left, bottom, right = _pad4(padding)
    n, c, h, width = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        for ky in range(kh):
            for kx in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, ky * dh:ky * dh + sh * (oh - 1) + 1:sh,
                           kx * dw:kx * dw + sw * (ow - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, ky, kx])
    return out


def conv2d_transpose(x, w, strides=1, padding=0, output_padding=0, dilation=1, groups=1):
    """NCHW data, IOHW weight ``(C, O/groups, KH, KW)``: each input pixel scattered."""
    x, w = x.astype("float64"), w.astype("float64")
    (sh, sw), (dh, dw), (ph, pw) = _pair(strides), _pair(dilation), _pair(output_padding)
    top, left, bottom, right = _pad4(padding)
    n, c, h, width = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + ph
    full_w = (width - 1) * sw + dw * (kw - 1) + 1 + pw
    full = np.zeros((n, og * groups, full_h, full_w))
    for g in range(groups):
        for ky in range(kh):
            for kx in range(kw):
                full[:, g * og:(g + 1) * og, ky * dh:ky * dh + sh * (h - 1) + 1:sh,
                     kx * dw:kx * dw + sw * (width - 1) + 1:sw] += np.einsum(
                    "nchw,co->nohw", x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg, :, ky, kx])
    return full[:, :, top:full_h - bottom, left:full_w - right]


def conv3d_transpose(x, w, strides=1, padding=0, output_padding=0, dilation=1, groups=1):
    """NCDHW data, IODHW weight ``(C, O/groups, KD, KH, KW)``: each input voxel scattered.
    ``padding``: one int, three (symmetric) or six (front, top, left, back, bottom, right)."""
    x, w = x.astype("float64"), w.astype("float64")

    def triple(value):
        return (value,) * 3 if isinstance(value, int) else tuple(value)

    s, d, op = triple(strides), triple(dilation), triple(output_padding)
    pad = triple(padding)
    pad = pad + pad if len(pad) == 3 else pad
    n, c, *size = x.shape
    _, og, *window = w.shape
    cg = c // groups
    full = [(i - 1) * st + dl * (k - 1) + 1 + o for i, st, dl, k, o in zip(size, s, d, window, op)]
    out = np.zeros((n, og * groups, *full))
    for g in range(groups):
        for kz in range(window[0]):
            for ky in range(window[1]):
                for kx in range(window[2]):
                    contrib = np.einsum("ncdhw,co->nodhw", x[:, g * cg:(g + 1) * cg],
                                        w[g * cg:(g + 1) * cg, :, kz, ky, kx])
                    sl = tuple(slice(k * dl, k * dl + st * (i - 1) + 1, st) for k, dl, st, i in
                               zip((kz, ky, kx), d, s, size))
                    out[(slice(None), slice(g * og, (g + 1) * og), *sl)] += contrib
    return out[(slice(None), slice(None),
                *[slice(pad[a], full[a] - pad[a + 3]) for a in range(3)])]
