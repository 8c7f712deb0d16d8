"""Winograd convolution for fp32 3x3 stride-1 ``conv2d`` (groups=1, dilation 1).

``F(m x m, 3 x 3)`` computes an ``m x m`` output tile from an ``a x a`` input
tile (``a = m + 2``) with ``a*a`` multiplies per (input, output channel) pair
instead of ``9*m*m``: 2.25x fewer for ``F(2x2)``, 4x for ``F(4x4)``.  With
``V = B^T d B`` (input tiles), ``U = G g G^T`` (weights) and
``Y = A^T [sum_c U_c * V_c] A`` the convolution becomes ``a*a`` independent
GEMMs over channels (:func:`conv2d_winograd`):

* ``bmlib_winograd_pad``: NCHW (read through :func:`nchw_reader`) padded and
  packed to ``[N, C/cb, Hp, Wp, cb]``, so the input transform loads whole
  vectors of channels (the direct conv's ``bmlib.pack_nchwc`` rule schedules it);
* ``bmlib_winograd_input_rows`` / ``bmlib_winograd_input``: ``V[e, n, P, C]``
  (``P`` tiles, padded to whole register tiles), rows ``B^T d`` first, both per
  tile, channels vectorized;
* ``bmlib_winograd_gemm``: ``M[e, n, K/kb, P, kb] = sum_c V[e, n, p, c] U[e, n, K/kb, c, kb]``,
  register tiles of ``tp`` tiles x ``kb`` output channels (the direct conv's
  14 accumulators with 32 vector registers);
* ``bmlib_winograd_output_rows`` / ``bmlib_winograd_output``: ``Y = A^T M A``
  written NCHW (by :func:`nchw_writer`), fused with the element-wise epilogue (bias,
  batch_norm, activation) and vectorized over ``kb`` output channels.

The transform matrices are constants: each transform is written in Python as a
sparse sum per matrix row (zero coefficients dropped, +-1 without a multiply)
and selected by the row index, which the schedule unrolls, so the generated
code holds exactly the non-zero terms.

Weights: a constant OIHW weight is transformed once at compile time
(:func:`rewrite_conv2d`, called from ``backend/rewrite.py``) into
``U[a, a, K/kb, C, kb]`` with kernel layout ``HWOI{kb}o`` and the bottom/right
padding grown by ``a - 3``: Relax's type inference then sees an ``a x a``
kernel and still infers the true output shape, and TVM's own legalization
refuses that blocked layout (a partition that is not offloaded cannot compute a
wrong result from it; ``bmlib_relax.check`` turns it back into OIHW).  A weight
that is not a constant is transformed inside the PrimFunc.

When it is used (:func:`winograd_tile`): ``BMLIB_WINOGRAD=0`` disables it,
``BMLIB_WINOGRAD=1`` forces it on every conv it can compute, ``2`` / ``4`` force
that tile size; by default (unset) the measured rule of :func:`winograd_tile`.

Numerics: F(4x4) is up to ~1e-5 of a layer's output range off (the direct template
~2e-6, F(2x2) under 1e-6), and the transforms mix a tile's inputs, so a NaN or inf in
the input makes whole F(4x4) tiles NaN and an inf makes F(2x2) outputs NaN; the README
(Winograd section) gives the measurements and ``BMLIB_WINOGRAD=0`` as the way out.
"""
from __future__ import annotations

import os
import re
from fractions import Fraction
from typing import Any, Callable, Optional

import numpy as np
from tvm import te, tirx

from ...constants import tensor_constant
from ...errors import ParamError
from .. import prefetch
from ..schedule import divisor_at_most, inline_epilogue
from ..target import vector_registers
from ._utils import attr_ints, out_dtype
from .registry import SCHEDULE_ATTR, register_schedule
from .tiles import accumulators, output_block

ENV = "BMLIB_WINOGRAD"
WINOGRAD_LAYOUT = re.compile(r"HWOI(\d+)o")

_F = Fraction
# (A^T, G, B^T) of F(m, 3) (Lavin & Gray, points 0, +-1, +-2, inf for m=4).
MATRICES = {
    2: ([[1, 1, 1, 0], [0, 1, -1, -1]],
        [[1, 0, 0], [_F(1, 2), _F(1, 2), _F(1, 2)], [_F(1, 2), _F(-1, 2), _F(1, 2)], [0, 0, 1]],
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
    4: ([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
        [[_F(1, 4), 0, 0], [_F(-1, 6), _F(-1, 6), _F(-1, 6)], [_F(-1, 6), _F(1, 6), _F(-1, 6)],
         [_F(1, 24), _F(1, 12), _F(1, 6)], [_F(1, 24), _F(-1, 12), _F(1, 6)], [0, 0, 1]],
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T, G, B^T)`` of ``F(m, 3)`` as float64 arrays."""
    return tuple(np.array([[float(v) for v in row] for row in mat]) for mat in MATRICES[m])


# --------------------------------------------------------------------------- when
def winograd_tile(in_channels: int, out_channels: int, out_h: int, out_w: int) -> Optional[int]:
    """The output tile ``m`` of the Winograd conv to use for a conv the template can
    compute (see :func:`applicable`), or None for the direct template.

    The default rule follows 1-thread A/B measurements on AVX-512 (Rocket Lake,
    docs/drafts/h-wino.md): F(4x4) wins on every 28x28-or-larger output from 8
    channels up (1.3-3.0x) and on small layers; with both 7 <= H, W < 28 and
    at least 128x128 channels F(2x2) wins (its transformed weights are 2.25x
    smaller than F(4x4)'s, and those layers stream their weights: 1.1-1.9x over
    the direct conv).  Fewer than 8 input channels (a network's RGB input) leave
    the GEMM too short: the direct conv is faster (3->64 at 224x224: 1.5x slower
    with F(4x4)); so are outputs under 7x7 (tiles would be mostly padding), and
    outputs under 14x14 with at least 128x128 channels (see below).
    """
    mode = winograd_mode()
    if mode == "0":
        return None
    if mode in ("2", "4"):
        return int(mode)
    if mode == "1":
        return 4 if min(out_h, out_w) >= 4 else 2
    if min(in_channels, out_channels) < 8 or min(out_h, out_w) < 7:
        return None
    if min(out_h, out_w) < 14 and in_channels * out_channels >= 128 * 128:
        # 7x7 outputs with many channels (ResNet's last stage) stream their weights from
        # L3 in a model: F(2x2)'s, 1.8x the direct conv's, lost to the K-blocked direct
        # template there (whole ResNet-18, interleaved: 18.5 -> 17.7 ms with direct),
        # though a one-layer build with warm weights favoured F(2x2) (1.55 -> 1.36 ms).
        return None
    return 4 if min(out_h, out_w) >= 28 or in_channels * out_channels < 128 * 128 else 2


def winograd_mode() -> str:
    """``$BMLIB_WINOGRAD``: "" (unset: the default rule), "0", "1", "2" or "4"; anything
    else is a :class:`~bmlib_relax.errors.ParamError` (a typo must not silently mean
    the default)."""
    mode = os.environ.get(ENV, "").strip()
    if mode not in ("", "0", "1", "2", "4"):
        raise ParamError(f"{ENV} must be 0 (off), 1 (wherever it applies), 2 or 4 (that "
                         f"tile size) or unset (the measured rule), got {mode!r}", ENV)
    return mode


def applicable(data_shape, weight_shape, strides, dilation, groups: int, dtype: str,
               out_dtype: str) -> bool:
    """The conv is one this template computes: fp32, groups 1, 3x3, stride 1,
    dilation 1, static shapes (a symbolic batch keeps the direct template)."""
    return dtype == out_dtype == "float32" and groups == 1 and \
        all(isinstance(d, int) for d in data_shape) and \
        tuple(weight_shape[2:4]) == (3, 3) and list(strides) == [1, 1] and \
        list(dilation) == [1, 1]


# --------------------------------------------------------------------------- weights
def transform_weight(weight: np.ndarray, m: int, kb: int) -> np.ndarray:
    """OIHW ``(K, C, 3, 3)`` → ``U[a, a, K/kb, C, kb]`` (``U = G g G^T``, kernel
    layout ``HWOI{kb}o``), computed in float64."""
    _, g, _ = matrices(m)
    k, c = weight.shape[:2]
    a = m + 2
    u = g @ weight.astype(np.float64) @ g.T  # (K, C, a, a)
    u = u.reshape(k // kb, kb, c, a, a).transpose(3, 4, 0, 2, 1)
    return np.ascontiguousarray(u.astype(weight.dtype))


def untransform_weight(u: np.ndarray) -> np.ndarray:
    """``U[a, a, K/kb, C, kb]`` → the OIHW weight it came from (least squares
    through G's pseudo-inverse; exact up to rounding)."""
    a = u.shape[0]
    _, g, _ = matrices(a - 2)
    pinv = np.linalg.pinv(g)
    ko, c, kb = u.shape[2:]
    plain = u.astype(np.float64).transpose(2, 4, 3, 0, 1).reshape(ko * kb, c, a, a)
    return (pinv @ plain @ pinv.T).astype(u.dtype)


def winograd_layout(layout: str) -> Optional[int]:
    """``kb`` of a ``HWOI{kb}o`` Winograd kernel layout, None for any other."""
    match = WINOGRAD_LAYOUT.fullmatch(layout)
    return None if match is None else int(match.group(1))


def rewrite_conv2d(call, array: np.ndarray, lanes: int) -> Optional[Any]:
    """The Winograd form of a constant-weight Relax ``conv2d`` on NCHW data (see the
    module docstring), or None when the template does not apply or would not win."""
    data = call.args[0]
    shape = [getattr(d, "value", d) for d in data.ty.shape.values]
    return winograd_conv2d(data, array, call.attrs, shape, str(data.ty.dtype),
                           [getattr(d, "value", d) for d in call.ty.shape.values], lanes)


def winograd_conv2d(data, array: np.ndarray, attrs, shape, dtype: str, out_shape, lanes: int,
                    data_layout: str = "NCHW", result_block: Optional[int] = None
                    ) -> Optional[Any]:
    """``conv2d(data, U, kernel_layout="HWOI{kb}o")`` computing the conv ``attrs``
    describes with the OIHW weight ``array`` (logical NCHW ``shape`` and ``out_shape``),
    or None when Winograd does not apply or would not win.

    ``data_layout`` is the layout ``data`` is in (``NCHW`` or a blocked ``NCHW{b}c``:
    the template reads either); ``result_block`` asks for an ``NCHW{kb}c`` result (the
    blocked layout pass, :mod:`..blocked_layout`), and is refused (None) unless it is
    the Winograd GEMM's own output-channel block ``kb``.
    """
    from tvm import relax  # the backend's Relax side; templates themselves need TE only

    if not applicable(shape, array.shape, attr_ints(attrs.strides), attr_ints(attrs.dilation),
                      int(attrs.groups), dtype, out_dtype(attrs, dtype)) or \
            not all(isinstance(d, int) for d in out_shape) or str(array.dtype) != "float32":
        return None
    m = winograd_tile(int(shape[1]), int(array.shape[0]), int(out_shape[2]), int(out_shape[3]))
    if m is None:
        return None
    kb = output_block(int(array.shape[0]), lanes)
    if kb == 1 or (result_block is not None and result_block != kb):
        return None  # Relax refuses the layout HWOI1o (a prime channel count over a vector)
    top, left, bottom, right = _padding4(attr_ints(attrs.padding))
    return relax.op.nn.conv2d(
        data, tensor_constant(transform_weight(array, m, kb)), strides=attrs.strides,
        padding=(top, left, bottom + m - 1, right + m - 1), dilation=attrs.dilation,
        groups=1, data_layout=data_layout, kernel_layout=f"HWOI{kb}o",
        out_layout="NCHW" if result_block is None else f"NCHW{kb}c",
        out_dtype=attrs.out_dtype)


def _padding4(padding):
    return list(padding) * 2 if len(padding) == 2 else list(padding)


# --------------------------------------------------------------------------- dispatch
def dispatch(call, inputs, ctx) -> Optional[te.Tensor]:
    """The Winograd conv for ``conv2d``'s template, or None to use the direct one.

    A ``HWOI{kb}o`` weight was transformed at compile time: it is always computed
    here.  A plain OIHW weight (not a constant) only when ``BMLIB_WINOGRAD`` forces
    it: transforming the weight on every call measured slower than the direct
    conv or about even (32->32 at 28x28: 1.9x slower, 64->64 at 56x56: 1.07x faster).
    """
    attrs = call.attrs
    data, weight = inputs
    kb = winograd_layout(str(attrs.kernel_layout))
    data_block, result_block = (_activation_block(str(attrs.data_layout)),
                                _activation_block(str(attrs.out_layout) or "NCHW"))
    if data_block is None or result_block is None:
        return None
    dtype = out_dtype(attrs, str(data.dtype))
    shape = [int(d) if isinstance(d, (int, tirx.IntImm)) else d for d in data.shape]
    if data_block:  # NCHW{b}c data: its logical NCHW shape, read through blocked_reader
        shape = shape[:1] + [shape[1] * shape[4]] + shape[2:4]
    read = blocked_reader(data) if data_block else nchw_reader(data)
    if kb is None and (data_block or result_block):
        return None  # blocked data with an OIHW{ib}i{ob}o weight: the direct template
    if result_block and result_block != kb:
        raise ctx.error(f"Winograd conv2d: output layout {attrs.out_layout} is not blocked "
                        f"by the kernel's {kb} output channels")
    write = blocked_writer if result_block else nchw_writer
    strides, dilation = attr_ints(attrs.strides), attr_ints(attrs.dilation)
    padding = _padding4(attr_ints(attrs.padding))
    if kb is not None:
        a = int(weight.shape[0])
        m = a - 2
        if m not in MATRICES or not applicable(shape, (0, 0, 3, 3), strides, dilation,
                                               int(attrs.groups), str(data.dtype), dtype):
            raise ctx.error(f"Winograd kernel layout {attrs.kernel_layout} with a {a}x{a} "
                            f"transformed kernel has no template for this conv2d")
        padding = padding[:2] + [padding[2] - (m - 1), padding[3] - (m - 1)]
        return conv2d_winograd(read, shape, weight, padding, m, dtype, ctx, write)
    if str(attrs.kernel_layout) != "OIHW" or str(weight.dtype) != "float32" or not applicable(
            shape, [int(d) for d in weight.shape], strides, dilation, int(attrs.groups),
            str(data.dtype), dtype):
        return None
    out = [int(d) for d in call.ty.shape.values[2:4]]
    m = winograd_tile(shape[1], int(weight.shape[0]), *out)
    if m is None or winograd_mode() not in ("1", "2", "4"):
        return None
    kernel = kernel_transform(weight, m, output_block(int(weight.shape[0]), ctx.lanes(dtype)))
    return conv2d_winograd(nchw_reader(data), shape, kernel, padding, m, dtype, ctx)


def _activation_block(layout: str) -> Optional[int]:
    """0 for NCHW, ``b`` for a blocked NCHW{b}c, None for any other layout."""
    if layout == "NCHW":
        return 0
    match = re.fullmatch(r"NCHW(\d+)c", layout)
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------- compute
Reader = Callable[..., Any]


def nchw_reader(data: te.Tensor) -> Reader:
    """``read(n, c, y, x)`` of NCHW data (the accessor a blocked NCHW{b}c input
    would replace: ``data[n, c // b, y, x, c % b]``)."""
    return lambda n, c, y, x: data[n, c, y, x]


def blocked_reader(data: te.Tensor) -> Reader:
    """``read(n, c, y, x)`` of channel-blocked NCHW{b}c data ``[N, C/b, H, W, b]``."""
    block = int(data.shape[4])
    return lambda n, c, y, x: data[n, c // block, y, x, c % block]


def _sparse_sum(coefficients, terms: Callable[[int], Any]):
    """``sum_i coefficients[i] * terms(i)`` over the non-zero coefficients, written
    without the multiply for +-1."""
    total = None
    for i, coef in enumerate(coefficients):
        coef = float(coef)
        if coef == 0:
            continue
        term = terms(i)
        if coef == -1:
            total = -term if total is None else total - term
            continue
        if coef != 1:
            term = term * tirx.const(coef, "float32")
        total = term if total is None else total + term
    return total if total is not None else tirx.const(0, "float32")


def _by_row(index, rows: int, expression: Callable[[int], Any]):
    """``expression(index)`` for a loop variable ``index`` in ``[0, rows)``: a
    select chain on the row, folded away once the schedule unrolls ``index``."""
    value = expression(rows - 1)
    for row in range(rows - 2, -1, -1):
        value = tirx.Select(index == row, expression(row), value)
    return value


def kernel_transform(weight: te.Tensor, m: int, kb: int) -> te.Tensor:
    """``U = G g G^T`` inside the PrimFunc (a weight that is not a constant)."""
    _, g, _ = MATRICES[m]
    a = m + 2
    k, c = int(weight.shape[0]), int(weight.shape[1])

    def compute(eps, nu, ko, ci, ki):
        def row(e):
            return _by_row(nu, a, lambda n: _sparse_sum(
                g[e], lambda i: _sparse_sum(g[n], lambda j: weight[ko * kb + ki, ci, i, j])))
        return _by_row(eps, a, row)

    return te.compute((a, a, k // kb, c, kb), compute, name="bmlib_winograd_kernel",
                      attrs={SCHEDULE_ATTR: "bmlib.winograd_kernel"})


def register_tile(tiles: int, kb: int, lanes: int, registers: int) -> int:
    """Tiles per GEMM register tile: as many as the accumulators allow, fewer when
    that pads ``tiles`` less."""
    limit = max(1, accumulators(registers) // max(1, kb // lanes))
    best = limit
    for t in range(limit, max(1, limit // 2) - 1, -1):
        if -(-tiles // t) * t < -(-tiles // best) * best:
            best = t
    return best


def nchw_writer(shape, value: Callable[..., Any], kb: int) -> te.Tensor:
    """The output block: NCHW ``shape`` holding ``value(n, k, y, x)`` (see
    :func:`blocked_writer` for NCHW{kb}c)."""
    return te.compute(tuple(shape), value, name="bmlib_winograd_output")


def blocked_writer(shape, value: Callable[..., Any], kb: int) -> te.Tensor:
    """The output block in NCHW{kb}c, ``[N, K/kb, H, W, kb]`` (``kb`` the GEMM's
    output-channel block, so the schedule's vectorized channels are the block's)."""
    n, channels, h, w = shape
    return te.compute((n, channels // kb, h, w, kb),
                      lambda nn, ko, y, x, ki: value(nn, ko * kb + ki, y, x),
                      name="bmlib_winograd_output")


def conv2d_winograd(read: Reader, shape, kernel: te.Tensor, padding, m: int, dtype: str,
                    ctx, write: Callable[..., te.Tensor] = nchw_writer) -> te.Tensor:
    """NCHW data (``read``, logical ``shape``) and ``U[a, a, K/kb, C, kb]`` → the
    output ``write`` makes (NCHW)."""
    at, _, bt = MATRICES[m]
    a = m + 2
    n, channels, h, w = shape
    top, left, bottom, right = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    th, tw = -(-oh // m), -(-ow // m)
    kb = int(kernel.shape[4])
    out_channels = int(kernel.shape[2]) * kb
    lanes = ctx.lanes(dtype)
    tiles = n * th * tw
    tp = register_tile(tiles, kb, lanes, vector_registers(ctx.target))
    padded_tiles = -(-tiles // tp) * tp
    cb = divisor_at_most(channels, lanes)
    zero = tirx.const(0, dtype)

    def pad(nn, co, y, x, ci):
        yy, xx = y - top, x - left
        inside = tirx.all(yy >= 0, yy < h, xx >= 0, xx < w)
        return tirx.if_then_else(inside, read(nn, co * cb + ci, yy, xx), zero)

    padded = te.compute((n, channels // cb, th * m + 2, tw * m + 2, cb), pad,
                        name="bmlib_winograd_pad", attrs={SCHEDULE_ATTR: "bmlib.pack_nchwc"})

    def tile_of(p):
        return p // (th * tw), (p // tw) % th, p % tw

    # The transforms are separable: rows first (B^T d), then columns ((B^T d) B),
    # each a select over <= a rows of <= 4 terms, computed per tile by the schedule.
    def input_rows(eps, p, j, c):
        nn, ty, tx = tile_of(tirx.min(p, tiles - 1))
        return _by_row(eps, a, lambda e: _sparse_sum(
            bt[e], lambda i: padded[nn, c // cb, ty * m + i, tx * m + j, c % cb]))

    rows = te.compute((a, padded_tiles, a, channels), input_rows, name="bmlib_winograd_input_rows")
    v = te.compute((a, a, padded_tiles, channels),
                   lambda eps, nu, p, c: _by_row(nu, a, lambda f: _sparse_sum(
                       bt[f], lambda j: rows[eps, p, j, c])),
                   name="bmlib_winograd_input",
                   attrs={SCHEDULE_ATTR: "bmlib.winograd_input", "bmlib_block": cb})
    rc = te.reduce_axis((0, channels), name="rc")
    gemm = te.compute(
        (a, a, out_channels // kb, padded_tiles, kb),
        lambda eps, nu, ko, p, ki: te.sum(v[eps, nu, p, rc] * kernel[eps, nu, ko, rc, ki],
                                          axis=rc),
        name="bmlib_winograd_gemm", attrs={SCHEDULE_ATTR: "bmlib.winograd_gemm", "bmlib_tile": tp})
    # A^T M: m rows of the output tile, then (A^T M) A in the NCHW output block.
    out_rows = te.compute(
        (m, a, out_channels // kb, padded_tiles, kb),
        lambda i, f, ko, p, ki: _by_row(i, m, lambda r: _sparse_sum(
            at[r], lambda e: gemm[e, f, ko, p, ki])),
        name="bmlib_winograd_output_rows",
        attrs={SCHEDULE_ATTR: "bmlib.winograd_output", "bmlib_winograd_m": m})

    def output_transform(nn, k, y, x):
        p = (nn * th + y // m) * tw + x // m
        ko, ki = k // kb, k % kb
        return _by_row(x % m, m, lambda j: _sparse_sum(
            at[j], lambda f: out_rows[y % m, f, ko, p, ki])).astype(dtype)

    return write((n, out_channels, oh, ow), output_transform, kb)


# --------------------------------------------------------------------------- schedules
@register_schedule("bmlib.winograd_input")
def schedule_winograd_input(sch, block, ctx):
    """(tiles, channel blocks) parallel | rows of the tile (B^T d) | eps, nu
    unrolled | channels vectorized."""
    cb = int(sch.get(block).annotations["bmlib_block"])
    (rows,) = sch.get_producers(block)
    eps, nu, p, c = sch.get_loops(block)
    co, ci = sch.split(c, [None, cb])
    sch.reorder(p, co, eps, nu, ci)
    outer = sch.fuse(p, co)
    sch.parallel(outer)
    sch.unroll(eps)
    sch.unroll(nu)
    if cb > 1:
        sch.vectorize(ci)
    # One row of B^T d at a time (a tile's rows would be 36 vectors: a workspace
    # allocation per tile, as every buffer of 1 KiB or more; see ..schedule).
    sch.compute_at(rows, eps)
    inner = sch.get_loops(rows)[2:]  # j, channels of the block (unit loops dropped)
    for loop in inner[:-1] if cb > 1 else inner:
        sch.unroll(loop)
    if cb > 1:
        sch.vectorize(inner[-1])
    ctx.done.add(str(sch.get(rows).name_hint))


@register_schedule("bmlib.winograd_kernel")
def schedule_winograd_kernel(sch, block, ctx):
    """The in-PrimFunc weight transform: (K/kb, C) parallel | kb | eps, nu unrolled
    (the select chains fold to the non-zero terms), scalar: the 9 taps of one
    (output, input) channel pair are contiguous in OIHW."""
    eps, nu, ko, ci, ki = sch.get_loops(block)
    sch.reorder(ko, ci, ki, eps, nu)
    sch.parallel(sch.fuse(ko, ci))
    sch.unroll(eps)
    sch.unroll(nu)


@register_schedule("bmlib.winograd_gemm")
def schedule_winograd_gemm(sch, block, ctx):
    """The batched GEMM as register tiles: (eps, nu, K/kb, tile groups) parallel |
    channels | ``tp`` tiles (unrolled) x ``kb`` output channels (vectorized),
    accumulated in a tile buffer (see the register-tile note in ..schedule) and
    copied out."""
    from .conv import _prefetched_kernel, _tile_under  # conv imports this module lazily

    tp = int(sch.get(block).annotations["bmlib_tile"])
    kb = int(sch.get(block).writes[0].source.shape[4])
    kernel = _prefetched_kernel(sch, block, rank=5)  # U[a, a, K/kb, C, kb]
    out = sch.cache_write(block, 0, "global")
    eps, nu, ko, p, ki = sch.get_loops(out)
    po, pi = sch.split(p, [None, tp])
    groups = int(sch.get(po).extent)
    outer = sch.fuse(eps, nu, ko, po)
    sch.parallel(outer)
    sch.compute_at(block, sch.get_loops(out)[0])
    if tp > 1:
        sch.unroll(pi)
    if kb > 1:
        sch.vectorize(ki)
    reductions = _tile_under(sch, block, sch.get_loops(block)[1:], tp, kb)
    if kernel is not None:
        _mark_slice_prefetch(sch, outer, reductions, kernel, groups)
    ctx.done.add(str(sch.get(out).name_hint))


# The channel loop of a Winograd GEMM tile is split into up to this many steps, a few
# prefetches before each, when every step keeps at least PREFETCH_STEP_MIN channels.
PREFETCH_STEPS = 8
PREFETCH_STEP_MIN = 16


def _mark_slice_prefetch(sch, outer, reductions: list, kernel, groups: int) -> None:
    """Mark the GEMM for :func:`_next_slice_prefetch`: its channel loop split into
    steps (the prefetches go at the outer one, spread over the tile's work: a burst
    of 74 lines at its start stalls the FMAs behind the line-fill buffers; inside the
    innermost FMA loop a prefetch stops LLVM from keeping the accumulators in
    registers), or the parallel loop ``outer`` when the channels are too few."""
    slices = int(kernel.shape[0]) * int(kernel.shape[1]) * int(kernel.shape[2])
    per_slice = int(kernel.shape[3]) * int(kernel.shape[4])
    site = outer
    if len(reductions) == 1:
        channels = int(sch.get(reductions[0]).extent)
        step = divisor_at_most(channels, max(PREFETCH_STEP_MIN, channels // PREFETCH_STEPS))
        if step >= PREFETCH_STEP_MIN and channels // step > 1:
            site, _ = sch.split(reductions[0], [None, step])
    prefetch.mark(sch, site, "winograd_slice", str(kernel.name), slices, groups, per_slice)


@prefetch.register_prefetch("winograd_slice")
def _next_slice_prefetch(site: prefetch.PrefetchSite):
    """While the Winograd GEMM's tile groups multiply by one slice ``U[eps, nu, ko]``
    (C x kb weights, read from L1/L2 by every group), fetch the next slice into L2,
    spread over the slice's tile groups and the steps of their channel loop.  The
    parallel loop is (eps, nu, K/kb, tile groups) fused, so the next slice is the next
    stretch of U.  Only when U is a
    parameter of the partition (a transformed constant): an in-PrimFunc transform
    has just written it.  ResNet-18's 14x14 3x3 convs stream 4 MB of U each from
    memory in the model."""
    name = str(site.mark[0])
    slices, groups, per_slice = (int(v) for v in site.mark[1:])
    weight = site.buffers.get(name)
    if int(site.loop.kind) == int(tirx.ForKind.PARALLEL):  # no channel steps: one burst
        outer, steps, step = site.loop, 1, 0
    else:
        outer, steps, step = site.parallel, int(site.loop.extent), site.loop.loop_var
    if weight is None or outer is None:
        return None
    lines = -(-per_slice // prefetch.elements_per_line(weight))
    index = outer.loop_var
    return prefetch.spread_prefetch(weight, (tirx.floordiv(index, groups) + 1) * per_slice,
                                    lines, groups * steps,
                                    tirx.floormod(index, groups) * steps + step,
                                    limit=slices * per_slice)


@register_schedule("bmlib.winograd_output")
def schedule_winograd_output(sch, block, ctx):
    """The output transform inlined into the NCHW epilogue block, tiled (n, K/kb,
    row tiles) parallel | column tiles | m x m (unrolled) x kb (vectorized), with
    the rows A^T M of a tile computed at its column tile."""
    m = int(sch.get(block).annotations["bmlib_winograd_m"])
    kb = int(sch.get(block).writes[0].source.shape[4])
    epilogue = inline_epilogue(sch, block)
    if epilogue is None:
        raise ValueError("Winograd output rows without the output transform")
    loops = sch.get_loops(epilogue)
    if len(loops) == 5:  # NCHW{kb}c output (blocked_writer)
        n, ko, y, x, ki = loops
    else:
        n, k, y, x = loops
        ko, ki = sch.split(k, [None, kb])
    yo, yi = sch.split(y, [None, m])
    xo, xi = sch.split(x, [None, m])
    sch.reorder(n, ko, yo, xo, yi, xi, ki)
    sch.parallel(sch.fuse(n, ko, yo))
    sch.unroll(yi)
    sch.unroll(xi)
    if kb > 1:
        sch.vectorize(ki)
    ctx.done.add(str(sch.get(epilogue).name_hint))
    sch.compute_at(block, yi)  # one row A^T M of the tile: under 1 KiB, a stack buffer
    inner = sch.get_loops(block)[4:]  # f (, channels of the block)
    for loop in inner[:-1] if kb > 1 else inner:
        sch.unroll(loop)
    if kb > 1:
        sch.vectorize(inner[-1])
