"""Seeded randomized cross-checks of the bmlib TIR templates ("no silent wrong answer").

For every template family a seeded generator draws random but valid
configurations — odd sizes, batch 1-3, channels that are not whole vectors,
strides, asymmetric padding, dilation, groups, 1-pixel / 7x7 / 14x14 outputs,
ceil_mode pools, dense with odd M/N/K, a symbolic batch or sequence where the
template declares symbolic dims — puts several of them (each on its own input,
with its usual epilogue: bias, relu) into one Relay program, compiles it with
``bmlib_relax.compile`` (asserting every op of interest was offloaded) and
compares each output with the plain Relax build of the same imported module.

TVM 0.27 miscompiles some index forms (``(p % c + k) // d`` read as
``((p + k) % c) // d``), which silently broke a schedule that fused rows into
the parallel loop; random shapes are how such index bugs are found.

Scale: ``BMLIB_FUZZ_CASES=N`` draws N cases per family (default: a few, so the
module stays well under a minute); ``BMLIB_FUZZ_SEED`` picks another seed;
``BMLIB_FUZZ_MERGE=1`` compiles with merged partitions (``merge=True``).
A failure message names the family, seed and the case's configuration; a case
worth keeping goes into ``REGRESSIONS`` below.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.compiler import compile_plain
from bmlib_relax.importer import import_relay
from bmlib_relax.relay import ast

from conftest import offloaded_partitions

SEED = int(os.environ.get("BMLIB_FUZZ_SEED", "0"))
CASES = int(os.environ.get("BMLIB_FUZZ_CASES", "0"))  # 0: each family's default count
MERGE = os.environ.get("BMLIB_FUZZ_MERGE", "0") == "1"  # merged partitions (merge=True)
OPS_PER_PROGRAM = 6  # ops compiled together (compile time dominates)

nn = relay.nn
qnn = relay.qnn.op


@dataclass
class Case:
    """One op on its own input: ``build(x, v)`` gives its Relay output (``v``: the
    Relay vars of ``weights`` by name, and ``v["y"]`` for a second input)."""

    desc: str
    data_shape: tuple
    build: Callable
    weights: dict = field(default_factory=dict)
    offloaded: tuple = ()  # Relax ops that must run on bmlib (report.ops_host lacks them)
    dtype: str = "float32"
    symbolic_batch: bool = False  # data's ``symbolic_axis`` dim(s) are ``?``; run at 3 sizes
    symbolic_axis: "int | tuple" = 0
    exact: bool = False
    second_shape: tuple = ()  # a second input ``y``, passed as v["y"]
    second_symbolic_axis: int | None = None  # its ``?`` dim (a fresh one: Relay's ``?``)


def _normal(rng, shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype("float32")


def _pick(rng, values):
    return values[int(rng.integers(len(values)))]


def _padding(rng, k, dilation=1):
    """(top, left, bottom, right), each at most the kernel's reach (asymmetric)."""
    reach = (k - 1) * dilation
    top, bottom, left, right = (int(rng.integers(0, reach + 1)) for _ in range(4))
    return (top, left, bottom, right)


def _spatial(rng, k, stride, dilation, pad_hw, target_out=None):
    """An input size giving a valid output (sometimes exactly ``target_out`` pixels)."""
    reach = (k - 1) * dilation + 1
    if target_out is not None:
        size = (target_out - 1) * stride + reach - pad_hw
        if size >= 1:
            return size
    low = max(1, reach - pad_hw)
    return int(rng.integers(low, low + 12))


def _epilogue(rng, out_channels, weights, tag, axis=1):
    """Bias, batch_norm, relu or clip after the op (the patterns' usual epilogues)."""
    kinds = ["none", "bias", "relu", "bias_relu"]
    if axis == 1:
        kinds += ["bn_relu", "bias_clip"]
    kind = _pick(rng, kinds)
    if "bias" in kind:
        weights[f"{tag}_b"] = _normal(rng, (out_channels,))
    if "bn" in kind:
        for name in ("gamma", "beta", "mean"):
            weights[f"{tag}_{name}"] = _normal(rng, (out_channels,))
        weights[f"{tag}_var"] = np.abs(_normal(rng, (out_channels,))) + 0.5

    def apply(y, v):
        if "bias" in kind:
            y = nn.bias_add(y, v[f"{tag}_b"], axis=axis)
        if "bn" in kind:
            y = nn.batch_norm(y, v[f"{tag}_gamma"], v[f"{tag}_beta"], v[f"{tag}_mean"],
                              v[f"{tag}_var"])[0]
        if "relu" in kind:
            y = nn.relu(y)
        if "clip" in kind:
            y = relay.clip(y, 0.0, 0.5)
        return y
    return kind, apply


# ---------------------------------------------------------------- generators --
def gen_conv2d(rng, tag, groups_kind="dense"):
    batch = int(rng.integers(1, 4))
    k = (int(_pick(rng, [1, 1, 2, 3, 3, 5, 7])), int(_pick(rng, [1, 3, 3, 2, 5])))
    if rng.random() < 0.5:
        k = (k[0], k[0])
    strides = (int(_pick(rng, [1, 1, 2, 3])), int(_pick(rng, [1, 1, 2])))
    dilation = (int(_pick(rng, [1, 1, 1, 2])), int(_pick(rng, [1, 1, 2])))
    if groups_kind == "dense":
        groups = 1
        c = int(_pick(rng, [1, 3, 5, 8, 13, 16, 17, 24, 32]))
        o = int(_pick(rng, [1, 4, 7, 16, 19, 32, 33, 48]))
    elif groups_kind == "depthwise":
        c = int(_pick(rng, [3, 8, 13, 16, 17, 32]))
        groups = c
        o = c * int(_pick(rng, [1, 1, 1, 2]))
    else:
        groups = int(_pick(rng, [2, 3, 4]))
        c = groups * int(_pick(rng, [1, 2, 3, 5, 8]))
        o = groups * int(_pick(rng, [1, 2, 3, 4, 8]))
    pad = _padding(rng, max(k), max(dilation)) if rng.random() < 0.7 else (0, 0, 0, 0)
    pad = (min(pad[0], (k[0] - 1) * dilation[0]), min(pad[1], (k[1] - 1) * dilation[1]),
           min(pad[2], (k[0] - 1) * dilation[0]), min(pad[3], (k[1] - 1) * dilation[1]))
    target = _pick(rng, [None, None, 1, 7, 14, 4])
    h = _spatial(rng, k[0], strides[0], dilation[0], pad[0] + pad[2], target)
    w = _spatial(rng, k[1], strides[1], dilation[1], pad[1] + pad[3], target)
    weights = {f"{tag}_w": _normal(rng, (o, c // groups) + k)}
    kind, epilogue = _epilogue(rng, o, weights, tag)
    attrs = dict(strides=strides, padding=pad, dilation=dilation, groups=groups, channels=o,
                 kernel_size=k)
    desc = f"conv2d x={(batch, c, h, w)} w={(o, c // groups) + k} {attrs} +{kind}"
    return Case(desc, (batch, c, h, w),
                lambda x, v: epilogue(nn.conv2d(x, v[f"{tag}_w"], **attrs), v),
                weights, ("relax.nn.conv2d",))


def gen_conv2d_1x1(rng, tag):
    """1x1 convs (GEMM path when the pixels are whole vectors, else blocked)."""
    batch = int(rng.integers(1, 4))
    c = int(_pick(rng, [3, 8, 16, 17, 32, 40]))
    o = int(_pick(rng, [5, 16, 19, 32, 64]))
    h, w = _pick(rng, [(4, 8), (8, 8), (2, 16), (7, 7), (1, 1), (14, 14), (3, 5), (16, 4)])
    strides = _pick(rng, [(1, 1), (1, 1), (2, 2)])
    weights = {f"{tag}_w": _normal(rng, (o, c, 1, 1))}
    kind, epilogue = _epilogue(rng, o, weights, tag)
    desc = f"conv2d_1x1 x={(batch, c, h, w)} o={o} strides={strides} +{kind}"
    return Case(desc, (batch, c, h, w),
                lambda x, v: epilogue(nn.conv2d(x, v[f"{tag}_w"], strides=strides, channels=o,
                                                kernel_size=(1, 1)), v),
                weights, ("relax.nn.conv2d",))


def gen_depthwise(rng, tag):
    return gen_conv2d(rng, tag, "depthwise")


def gen_grouped(rng, tag):
    return gen_conv2d(rng, tag, "grouped")


def gen_conv2d_transpose(rng, tag):
    batch = int(rng.integers(1, 4))
    groups = int(_pick(rng, [1, 1, 1, 2, 4]))
    c = groups * int(_pick(rng, [1, 2, 3, 4, 8]))
    o_per = int(_pick(rng, [1, 3, 4, 8, 16, 17]))
    k = (int(_pick(rng, [1, 2, 3, 4, 5])),) * 2
    if rng.random() < 0.3:
        k = (k[0], int(_pick(rng, [1, 2, 3])))
    strides = (int(_pick(rng, [1, 2, 2, 3])), int(_pick(rng, [1, 2, 3])))
    dilation = (int(_pick(rng, [1, 1, 2])), int(_pick(rng, [1, 1, 2])))
    pad = tuple(int(rng.integers(0, (k[i % 2] - 1) * dilation[i % 2] + 1)) for i in range(4))
    out_pad = tuple(int(rng.integers(0, max(strides[i], dilation[i]))) for i in range(2))
    h, w = int(rng.integers(1, 8)), int(rng.integers(1, 8))
    oh = (h - 1) * strides[0] - pad[0] - pad[2] + dilation[0] * (k[0] - 1) + out_pad[0] + 1
    ow = (w - 1) * strides[1] - pad[1] - pad[3] + dilation[1] * (k[1] - 1) + out_pad[1] + 1
    if oh < 1 or ow < 1:
        pad = (0, 0, 0, 0)
    weights = {f"{tag}_w": _normal(rng, (c, o_per) + k)}
    o = o_per * groups
    kind, epilogue = _epilogue(rng, o, weights, tag)
    attrs = dict(strides=strides, padding=pad, dilation=dilation, groups=groups, channels=o,
                 kernel_size=k, output_padding=out_pad)
    desc = f"conv2d_transpose x={(batch, c, h, w)} w={(c, o_per) + k} {attrs} +{kind}"
    return Case(desc, (batch, c, h, w),
                lambda x, v: epilogue(nn.conv2d_transpose(x, v[f"{tag}_w"], **attrs), v),
                weights, ("relax.nn.conv2d_transpose",))


def gen_pool(rng, tag):
    batch = int(rng.integers(1, 4))
    c = int(_pick(rng, [1, 3, 8, 13, 16, 17]))
    kind = _pick(rng, ["max", "max", "avg", "global_avg", "adaptive"])
    if kind == "global_avg":
        h, w = int(rng.integers(1, 15)), int(rng.integers(1, 15))
        return Case(f"global_avg_pool2d x={(batch, c, h, w)}", (batch, c, h, w),
                    lambda x, v: nn.global_avg_pool2d(x), {},
                    ("relax.nn.adaptive_avg_pool2d",))
    if kind == "adaptive":
        h, w = int(rng.integers(1, 15)), int(rng.integers(1, 15))
        size = (int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1)))
        return Case(f"adaptive_avg_pool2d x={(batch, c, h, w)} out={size}", (batch, c, h, w),
                    lambda x, v: nn.adaptive_avg_pool2d(x, output_size=size), {},
                    ("relax.nn.adaptive_avg_pool2d",))
    k = (int(_pick(rng, [1, 2, 3, 3, 5])), int(_pick(rng, [1, 2, 3, 3])))
    strides = (int(_pick(rng, [1, 2, 2, 3])), int(_pick(rng, [1, 2, 2])))
    dilation = (1, 1) if kind == "avg" or rng.random() < 0.7 else (2, int(_pick(rng, [1, 2])))
    pad = tuple(int(rng.integers(0, (k[i % 2] - 1) // 1 + 1)) if k[i % 2] > 1 and
                rng.random() < 0.6 else 0 for i in range(4))
    pad = tuple(min(p, k[i % 2] // 2) for i, p in enumerate(pad))  # keep windows non-empty
    ceil_mode = bool(rng.random() < 0.35)
    target = _pick(rng, [None, None, 1, 7])
    h = _spatial(rng, k[0], strides[0], dilation[0], pad[0] + pad[2], target)
    w = _spatial(rng, k[1], strides[1], dilation[1], pad[1] + pad[3], target)
    attrs = dict(pool_size=k, strides=strides, padding=pad, ceil_mode=ceil_mode)
    if kind == "max":
        attrs["dilation"] = dilation
        op, relax_op = nn.max_pool2d, "relax.nn.max_pool2d"
    else:
        attrs["count_include_pad"] = bool(rng.random() < 0.5)
        op, relax_op = nn.avg_pool2d, "relax.nn.avg_pool2d"
    relu = rng.random() < 0.3
    desc = f"{kind}_pool2d x={(batch, c, h, w)} {attrs}{' +relu' if relu else ''}"
    return Case(desc, (batch, c, h, w),
                lambda x, v: (nn.relu(op(x, **attrs)) if relu else op(x, **attrs)), {},
                (relax_op,))


def gen_dense(rng, tag, symbolic=False):
    m = int(_pick(rng, [1, 2, 3, 5, 7, 13, 17, 31]))
    k = int(_pick(rng, [1, 3, 7, 16, 17, 33, 64]))
    n = int(_pick(rng, [1, 5, 10, 16, 17, 31, 48]))
    weights = {f"{tag}_w": _normal(rng, (n, k))}
    kind, epilogue = _epilogue(rng, n, weights, tag, axis=-1)
    desc = f"dense M={m}{'(?)' if symbolic else ''} K={k} N={n} +{kind}"
    return Case(desc, (m, k),
                lambda x, v: epilogue(nn.dense(x, v[f"{tag}_w"], units=n), v),
                weights, ("relax.matmul",), symbolic_batch=symbolic)


def gen_dense_symbolic(rng, tag):
    return gen_dense(rng, tag, symbolic=True)


def gen_batch_matmul(rng, tag):
    b = int(rng.integers(1, 4))
    m, k, n = (int(_pick(rng, [1, 3, 5, 8, 17])) for _ in range(3))
    weights = {f"{tag}_w": _normal(rng, (b, n, k))}
    symbolic = bool(rng.random() < 0.4)
    return Case(f"batch_matmul B={b} M={m}{'(?)' if symbolic else ''} K={k} N={n}", (b, m, k),
                lambda x, v: nn.batch_matmul(x, v[f"{tag}_w"]), weights, ("relax.matmul",),
                symbolic_batch=symbolic, symbolic_axis=1 if symbolic else 0)


def gen_attention_matmul(rng, tag):
    """``batch_matmul(q, k)`` of two inputs with a free sequence length (scores), then
    softmax, or ``scores @ v`` with the sequence as the reduction."""
    b, d = int(rng.integers(1, 4)), int(_pick(rng, [1, 7, 16, 17, 33]))
    s = int(_pick(rng, [1, 3, 5, 9, 17]))
    if rng.random() < 0.5:
        return Case(f"softmax(batch_matmul(q, k)) q=k=({b}, {s}(?), {d})", (b, s, d),
                    lambda x, v: nn.softmax(nn.batch_matmul(x, v["y"])), {},
                    ("relax.matmul", "relax.nn.softmax"), symbolic_batch=True,
                    symbolic_axis=1, second_shape=(b, s, d), second_symbolic_axis=1)
    n = int(_pick(rng, [1, 4, 16, 17]))
    return Case(f"batch_matmul(p, v) p=({b}, {s}(?), {n}) v=({b}, {d}, {n})", (b, s, n),
                lambda x, v: nn.batch_matmul(x, v["y"]), {}, ("relax.matmul",),
                symbolic_batch=True, symbolic_axis=1, second_shape=(b, d, n))


def gen_self_attention(rng, tag):
    """One input (b, s?, d): q, k, v projections, softmax(q k^T) v — the free sequence
    length is shared by both matmuls, and the second one reduces over it."""
    b, d = int(rng.integers(1, 4)), int(_pick(rng, [1, 7, 16, 17, 33]))
    s = int(_pick(rng, [1, 3, 5, 9, 17]))
    e, f = int(_pick(rng, [3, 8, 16, 19])), int(_pick(rng, [1, 5, 16, 17]))
    weights = {f"{tag}_q": _normal(rng, (e, d)), f"{tag}_k": _normal(rng, (e, d)),
               f"{tag}_v": _normal(rng, (f, d))}
    symbolic_batch = bool(rng.random() < 0.5)

    def build(x, v):
        q, k = nn.dense(x, v[f"{tag}_q"]), nn.dense(x, v[f"{tag}_k"])
        scores = nn.softmax(nn.batch_matmul(q, k) * relay.const(0.3), axis=-1)
        values = relay.transpose(nn.dense(x, v[f"{tag}_v"]), axes=(0, 2, 1))
        return nn.batch_matmul(scores, values)

    return Case(f"self-attention x=({b}{'?' if symbolic_batch else ''}, {s}?, {d}) "
                f"qk={e} v={f}", (b, s, d), build, weights,
                ("relax.matmul", "relax.nn.softmax"), symbolic_batch=True,
                symbolic_axis=(0, 1) if symbolic_batch else 1)


def gen_conv_chain(rng, tag):
    """conv -> pool -> conv (layouts and epilogues between templates)."""
    first = gen_conv2d(rng, tag + "a")
    channels = first.weights[tag + "a_w"].shape[0]
    k = int(_pick(rng, [1, 3]))
    o = int(_pick(rng, [4, 16, 17]))
    weights = dict(first.weights)
    weights[tag + "b_w"] = _normal(rng, (o, channels, k, k))
    pool = _pick(rng, ["max", "avg", "none"])

    def build(x, v):
        y = first.build(x, v)
        if pool == "max":
            y = nn.max_pool2d(y, pool_size=(2, 2), strides=(1, 1), padding=(0, 0, 1, 1))
        elif pool == "avg":
            y = nn.avg_pool2d(y, pool_size=(2, 2), strides=(1, 1), padding=(1, 1, 0, 0))
        return nn.relu(nn.conv2d(y, v[tag + "b_w"], padding=(k // 2, k // 2), channels=o,
                                 kernel_size=(k, k)))

    return Case(f"chain [{first.desc}] -> {pool} pool -> conv{k}x{k} o={o} +relu",
                first.data_shape, build, weights, ("relax.nn.conv2d",),
                symbolic_batch=bool(rng.random() < 0.3))


def gen_conv_nd(rng, tag):
    """conv1d / conv3d (TOPI computes) and their transposes (the gather template)."""
    rank = int(_pick(rng, [1, 3]))
    transpose = bool(rng.random() < 0.5)
    batch = int(rng.integers(1, 3))
    groups = int(_pick(rng, [1, 1, 2]))
    c = groups * int(_pick(rng, [1, 3, 4]))
    o = groups * int(_pick(rng, [1, 2, 5, 8]))
    k = tuple(int(_pick(rng, [1, 2, 3])) for _ in range(rank))
    strides = tuple(int(_pick(rng, [1, 2])) for _ in range(rank))
    dilation = tuple(int(_pick(rng, [1, 1, 2])) for _ in range(rank))
    pad = tuple(int(rng.integers(0, (k[i % rank] - 1) * dilation[i % rank] + 1))
                for i in range(2 * rank))
    if transpose:
        size = tuple(int(rng.integers(1, 6)) for _ in range(rank))
        out_pad = tuple(int(rng.integers(0, max(strides[i], dilation[i])))
                        for i in range(rank))
        if any((size[i] - 1) * strides[i] - pad[i] - pad[i + rank] +
               dilation[i] * (k[i] - 1) + out_pad[i] + 1 < 1 for i in range(rank)):
            pad = (0,) * (2 * rank)
        weight = (c, o // groups) + k
        attrs = dict(strides=strides, padding=pad, dilation=dilation, groups=groups,
                     channels=o, kernel_size=k, output_padding=out_pad)
        op = nn.conv1d_transpose if rank == 1 else nn.conv3d_transpose
    else:
        size = tuple(_spatial(rng, k[i], strides[i], dilation[i], pad[i] + pad[i + rank])
                     for i in range(rank))
        size = tuple(min(s_, 9) if (s_ + pad[i] + pad[i + rank] - (k[i] - 1) * dilation[i]
                                   - 1) // strides[i] >= 0 else s_
                     for i, s_ in enumerate(size))
        weight = (o, c // groups) + k
        attrs = dict(strides=strides, padding=pad, dilation=dilation, groups=groups,
                     channels=o, kernel_size=k)
        op = nn.conv1d if rank == 1 else nn.conv3d
    weights = {f"{tag}_w": _normal(rng, weight)}
    relu = bool(rng.random() < 0.5)
    name = f"conv{rank}d{'_transpose' if transpose else ''}"
    return Case(f"{name} x={(batch, c) + size} w={weight} {attrs}{' +relu' if relu else ''}",
                (batch, c) + size,
                lambda x, v: (nn.relu if relu else (lambda y: y))(op(x, v[f"{tag}_w"], **attrs)),
                weights, (f"relax.nn.{name}",))


def gen_softmax(rng, tag):
    rank = int(rng.integers(2, 4))
    shape = tuple(int(_pick(rng, [1, 2, 3, 7, 16, 17, 33])) for _ in range(rank))
    axis = int(rng.integers(-rank, rank))
    symbolic = bool(rng.random() < 0.4)
    op = _pick(rng, ["softmax", "softmax", "log_softmax"])
    fn = getattr(nn, op)
    sym_axis = 0
    if symbolic and (axis % rank) == 0:
        sym_axis = 1 if rank > 1 else 0
    return Case(f"{op} x={shape} axis={axis}{' sym dim %d' % sym_axis if symbolic else ''}",
                shape, lambda x, v: fn(x, axis=axis), {}, (f"relax.nn.{op}",),
                symbolic_batch=symbolic, symbolic_axis=sym_axis)


def gen_layer_norm(rng, tag):
    shape = (int(_pick(rng, [1, 2, 3])), int(_pick(rng, [1, 5, 7])),
             int(_pick(rng, [3, 16, 17, 33])))
    weights = {f"{tag}_g": _normal(rng, shape[-1:]) + 1, f"{tag}_b": _normal(rng, shape[-1:])}
    symbolic = bool(rng.random() < 0.5)
    return Case(f"layer_norm x={shape}{' (?, seq)' if symbolic else ''}", shape,
                lambda x, v: nn.layer_norm(x, v[f"{tag}_g"], v[f"{tag}_b"]), weights,
                ("relax.nn.layer_norm",), symbolic_batch=symbolic,
                symbolic_axis=int(rng.integers(0, 2)))


def gen_conv_symbolic(rng, tag):
    """conv2d / depthwise / pools with a free batch (``symbolic_dims="batch"``)."""
    kind = _pick(rng, ["dense", "dense", "depthwise", "grouped", "pool"])
    case = gen_pool(rng, tag) if kind == "pool" else gen_conv2d(rng, tag, kind)
    case.symbolic_batch = True
    case.desc = "symbolic batch: " + case.desc
    return case


def gen_qnn_conv2d(rng, tag):
    """int8 conv2d + requantize (VNNI / AVX2 dot-product templates), exact."""
    batch = int(rng.integers(1, 3))
    depthwise = rng.random() < 0.3
    c = int(_pick(rng, [3, 4, 8, 13, 16, 17, 32]))
    o = c if depthwise else int(_pick(rng, [4, 7, 16, 19, 32]))
    groups = c if depthwise else 1
    k = int(_pick(rng, [1, 3, 3, 5]))
    strides = (int(_pick(rng, [1, 1, 2])),) * 2
    dilation = int(_pick(rng, [1, 1, 1, 2])) if k > 1 else 1
    pad = int(rng.integers(0, k // 2 + 1))
    target = _pick(rng, [None, None, 1, 7])
    h = _spatial(rng, k, strides[0], dilation, 2 * pad, target)
    w = _spatial(rng, k, strides[1], dilation, 2 * pad, target)
    dtype = _pick(rng, ["int8", "uint8"])
    x_zp = int(_pick(rng, [0, 3, -128] if dtype == "int8" else [0, 128, 7]))
    weight = rng.integers(-128, 128, size=(o, c // groups, k, k)).astype("int8")
    out_dtype = _pick(rng, ["int8", "uint8"])
    rounding = _pick(rng, ["UPWARD", "TONEAREST"])
    weights = {f"{tag}_w": weight}
    bias = rng.random() < 0.5
    if bias:
        weights[f"{tag}_b"] = rng.integers(-2000, 2000, size=(o,)).astype("int32")
    per_channel = bool(rng.random() < 0.4)
    w_scale = (rng.uniform(0.005, 0.02, size=o).astype("float32") if per_channel else 0.01)
    acc_scale = (w_scale * np.float32(0.05)).astype("float32") if per_channel else 0.0005
    clip = bool(rng.random() < 0.4)
    c_ = relay.const
    lo = -128 if out_dtype == "int8" else 0

    def build(x, v):
        acc = qnn.conv2d(x, v[f"{tag}_w"], c_(x_zp), c_(0), c_(0.05), c_(w_scale),
                         kernel_size=(k, k), channels=o, strides=strides,
                         padding=(pad, pad), dilation=(dilation, dilation), groups=groups)
        if bias:
            acc = nn.bias_add(acc, v[f"{tag}_b"])
        y = qnn.requantize(acc, c_(acc_scale), c_(0), c_(0.1), c_(3), rounding=rounding,
                           out_dtype=out_dtype, axis=1)
        return relay.clip(y, lo + 3, 127) if clip else y

    desc = (f"qnn.conv2d {dtype} x={(batch, c, h, w)} zp={x_zp} w={weight.shape} "
            f"strides={strides} dilation={dilation} pad={pad} groups={groups} bias={bias} "
            f"per_channel={per_channel} -> {out_dtype} {rounding} clip={clip}")
    return Case(desc, (batch, c, h, w), build, weights, (), dtype, exact=True)


def gen_qnn_dense(rng, tag):
    m, k, n = (int(_pick(rng, vals)) for vals in ([1, 3, 7, 17], [4, 7, 16, 33], [5, 16, 19]))
    weight = rng.integers(-128, 128, size=(n, k)).astype("int8")
    c_ = relay.const

    def build(x, v):
        acc = qnn.dense(x, v[f"{tag}_w"], c_(-1), c_(0), c_(0.05), c_(0.01), units=n)
        return qnn.requantize(acc, c_(0.0005), c_(0), c_(0.1), c_(3), out_dtype="int8")

    return Case(f"qnn.dense int8 M={m} K={k} N={n}", (m, k), build, {f"{tag}_w": weight}, (),
                "int8", exact=True)


FAMILIES = {  # name: (generator, default cases)
    "conv2d": (gen_conv2d, 4),
    "conv2d_1x1": (gen_conv2d_1x1, 2),
    "depthwise": (gen_depthwise, 3),
    "grouped": (gen_grouped, 3),
    "conv2d_transpose": (gen_conv2d_transpose, 4),
    "pool": (gen_pool, 5),
    "dense": (gen_dense, 3),
    "dense_symbolic": (gen_dense_symbolic, 2),
    "batch_matmul": (gen_batch_matmul, 2),
    "softmax": (gen_softmax, 3),
    "layer_norm": (gen_layer_norm, 2),
    "conv_symbolic_batch": (gen_conv_symbolic, 3),
    "qnn_conv2d": (gen_qnn_conv2d, 3),
    "qnn_dense": (gen_qnn_dense, 2),
    "attention_matmul": (gen_attention_matmul, 2),
    "self_attention": (gen_self_attention, 2),
    "conv_chain": (gen_conv_chain, 2),
    "conv_nd": (gen_conv_nd, 3),
    # 8-lane vectors and 16 registers: the AVX2 tiles (the host runs AVX2 code)
    "conv2d_avx2": (gen_conv2d, 3),
    "depthwise_avx2": (gen_depthwise, 2),
    "conv2d_transpose_avx2": (gen_conv2d_transpose, 2),
}
TARGETS = {name: {"kind": "llvm", "mcpu": "haswell"} for name in FAMILIES if name.endswith("_avx2")}


# ------------------------------------------------------------------- harness --
def _data(rng, case: Case, shape) -> np.ndarray:
    if case.dtype == "float32":
        return _normal(rng, shape, 1.0)
    lo, hi = (-128, 127) if case.dtype == "int8" else (0, 255)
    x = rng.integers(lo, hi + 1, size=shape).astype(case.dtype)
    x.flat[:2] = (lo, hi)[: x.size]
    return x


def _axes(axis) -> tuple:
    return tuple(axis) if isinstance(axis, tuple) else (axis,)


def _program(cases: list[Case]):
    """One Relay module: input ``x{i}`` and weights per case, the outputs as a tuple."""
    inputs, outputs, weights = [], [], {}
    for i, case in enumerate(cases):
        shape = list(case.data_shape)
        if case.symbolic_batch:
            for axis in _axes(case.symbolic_axis):
                shape[axis] = relay.Any()
        x = relay.var(f"x{i}", shape=shape, dtype=case.dtype)
        wvars = {name: relay.var(name, shape=value.shape, dtype=str(value.dtype))
                 for name, value in case.weights.items()}
        if case.second_shape:
            second = list(case.second_shape)
            if case.symbolic_batch and case.second_symbolic_axis is not None:
                second[case.second_symbolic_axis] = relay.Any()
            wvars["y"] = relay.var(f"y{i}", shape=second, dtype=case.dtype)
            inputs.append(wvars["y"])
        inputs += [x, *[v for k, v in wvars.items() if k != "y"]]
        weights.update(case.weights)
        outputs.append(case.build(x, wvars))
    body = outputs[0] if len(outputs) == 1 else relay.Tuple(outputs)
    return ast.IRModule({"main": relay.Function(inputs, body)}), weights


def _as_list(result) -> list[np.ndarray]:
    """A model's (numpy) or the VM's (tvm) output(s) as a list of numpy arrays."""
    if isinstance(result, np.ndarray):
        return [result]
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [r.numpy() if hasattr(r, "numpy") else np.asarray(r) for r in result]


def check_cases(cases: list[Case], seed: int, label: str, target=None) -> None:
    """Compile ``cases`` together on bmlib and plainly; every output must agree."""
    module, weights = _program(cases)
    model = bmlib_relax.compile(module, weights, target=target, merge=MERGE)
    assert offloaded_partitions(model.relax_module), f"{label}: nothing offloaded"
    host = dict(model.report.ops_host)
    for case in cases:
        stuck = [op for op in case.offloaded if op in host]
        assert not stuck, f"{label}: {case.desc}: {stuck} left on the host ({host})"
    if not any(case.offloaded for case in cases):  # qnn: every op's composite offloaded
        # (identical partitions are shared: ``calls`` counts their uses)
        composites = [n for p in model.report.to_dict()["partitions"]
                      for n in p["composites"] * p["calls"]]
        qnn_ops = [n for n in composites if n.startswith("bmlib.qnn_") and
                   n.endswith("_requantize")]
        assert len(qnn_ops) == len(cases), f"{label}: composites {composites}"
        assert not host, f"{label}: left on the host: {host}"
    plain = relax.VirtualMachine(compile_plain(import_relay(module, weights)), tvm.cpu())
    rng = np.random.default_rng(seed)
    batches = (1, 3, 2) if any(c.symbolic_batch for c in cases) else (None,)
    for batch in batches:
        arrays, case_data = [], []
        for case in cases:
            shape = list(case.data_shape)
            if case.symbolic_batch and batch is not None:
                for axis in _axes(case.symbolic_axis):
                    shape[axis] = batch + axis  # distinct sizes per symbolic dim
            if case.second_shape:
                second = list(case.second_shape)
                if case.second_symbolic_axis is not None and batch is not None:
                    second[case.second_symbolic_axis] = batch
                arrays.append(_data(rng, case, tuple(second)))
            case_data.append(_data(rng, case, tuple(shape)))
            arrays.append(case_data[-1])
        got = _as_list(model(*arrays))
        want = _as_list(plain["main"](*[tvm.runtime.tensor(a) for a in arrays]))
        assert len(got) == len(want) == len(cases)
        for case, g, w, a in zip(cases, got, want, case_data):
            where = f"{label}: {case.desc} (data {a.shape})"
            assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
            if case.exact:
                np.testing.assert_array_equal(g, w, err_msg=where)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3, err_msg=where)


def draw(family: str, seed: int, count: int) -> list[Case]:
    generator, _ = FAMILIES[family]
    rng = np.random.default_rng([seed, zlib.crc32(family.encode())])  # stable per family
    return [generator(rng, f"c{i}") for i in range(count)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_template_family_matches_plain_build(family):
    count = CASES or FAMILIES[family][1]
    cases = draw(family, SEED, count)
    for start in range(0, len(cases), OPS_PER_PROGRAM):
        chunk = cases[start:start + OPS_PER_PROGRAM]
        check_cases(chunk, SEED + start, f"{family} seed={SEED} cases {start}..",
                    TARGETS.get(family))


# ---------------------------------------------------------------- regressions --
@pytest.mark.parametrize("shape,pool_size,strides,padding", [
    ((1, 3, 8, 8), (1, 3), (1, 1), (0, 0, 0, 0)),   # 1-row window: no ky loop
    ((2, 3, 8, 8), (1, 1), (1, 2), (0, 0, 0, 0)),
    ((1, 3, 5, 1), (2, 2), (1, 1), (0, 0, 1, 1)),   # 1-column input: no width loop
    ((1, 3, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),   # neither
])
def test_separable_max_pool_schedules_unit_loops(shape, pool_size, strides, padding):
    """Found by this fuzzer: the separable max pool's rule assumed the row pass keeps
    a width and a window-row loop under the output row; compute_at drops unit loops,
    so a 1-row window or a 1-column input rolled the block back (correct, unscheduled)."""
    import warnings

    from bmlib_relax.backend.schedule import UnscheduledBlockWarning

    case = Case(f"max_pool2d {shape} {pool_size}", shape,
                lambda x, v: nn.max_pool2d(x, pool_size=pool_size, strides=strides,
                                           padding=padding), {}, ("relax.nn.max_pool2d",))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        check_cases([case], SEED, "regression")
