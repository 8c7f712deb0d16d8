"""The K-blocked schedule of weight-heavy blocked convs (templates/conv.py: k_blocking,
_k_blocked_conv, schedule_conv2d_kchunk): numerics against the plain build, the path
actually taken (its blocks in the lowered partition, nothing left unscheduled), the
predicate that chooses it and the switch that turns it off.

``$BMLIB_CONV_KBLOCK=0,1,8`` (KiB thresholds: any weight size, 1 KiB chunks, 8 KiB
output groups) forces the path onto tiny convs, so the chunk loop has several
iterations at test sizes, and the output rows are one group or several.
"""
from __future__ import annotations

import importlib
import itertools
import re

import pytest
from tvm import relax, s_tir, tirx

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.codegen import build_prim_funcs
from bmlib_relax.compiler import lower_and_verify

from helpers import (assert_spread_over_reduction, check_offloaded_run, index_value,
                     innermost_fma_loops, make_module, prefetch_calls, update_realizes)

conv_templates = importlib.import_module("bmlib_relax.backend.templates.conv")
R = relax.op
FORCED = "0,1,8"


def _chain(stride=1, kernel=1, padding=0, dilation=1):
    """conv+relu (makes the activations blocked), then the conv under test + bias + relu."""
    def build(x, w1, w2, bias):
        a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
        b = R.nn.conv2d(a, w2, strides=stride, padding=padding, dilation=dilation)
        return R.nn.relu(R.add(b, R.reshape(bias, [1, -1, 1, 1])))
    return build


def _residual(x, w1, w2, w3):
    """Two heavy convs whose results meet in an add (merged: one conv's epilogue)."""
    a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
    return R.nn.relu(R.add(R.nn.conv2d(a, w2), R.nn.conv2d(a, w3)))


# Output widths are whole row tiles on AVX2 (4 or 8 pixels: the 8-accumulator tile of
# templates/tiles.pixel_tile) and AVX-512 (7 or 14):
# K-blocking applies to row-tiled convs only, so the path under test is the same on
# either machine.
CASES = {
    # name: (build, input shape, weights)
    "1x1 64->96 28x28": (_chain(), (1, 8, 28, 28), [(64, 8, 3, 3), (96, 64, 1, 1), (96,)]),
    "1x1 odd 40->24 4x56": (_chain(), (1, 8, 4, 56), [(40, 8, 3, 3), (24, 40, 1, 1), (24,)]),
    "1x1 stride 2 64->32 8x56->4x28": (_chain(stride=2), (1, 8, 8, 56),
                                       [(64, 8, 3, 3), (32, 64, 1, 1), (32,)]),
    "3x3 stride 2 pad 1 48->64 8x56->4x28": (_chain(stride=2, kernel=3, padding=1),
                                             (1, 8, 8, 56),
                                             [(48, 8, 3, 3), (64, 48, 3, 3), (64,)]),
    "3x3 dilated 64->32 4x28": (_chain(kernel=3, padding=2, dilation=2), (1, 8, 4, 28),
                                [(64, 8, 3, 3), (32, 64, 3, 3), (32,)]),
    "1x1 rows in groups 64->32 21x28": (_chain(), (1, 8, 21, 28),
                                        [(64, 8, 3, 3), (32, 64, 1, 1), (32,)]),
}


def _kchunk_prims(partitioned) -> list:
    return [prim for prim, _ in lower_and_verify(partitioned).values()
            if "bmlib_conv2d_kchunk" in prim.script()]


def _buffers(prim) -> list:
    """The buffers a (scheduled or flattened) PrimFunc allocates."""
    found = []

    def visit(stmt):
        if isinstance(stmt, s_tir.SBlockRealize):
            found.extend(stmt.block.alloc_buffers)
            visit(stmt.block.body)
        elif isinstance(stmt, tirx.AllocBuffer):
            found.append(stmt.buffer)
        elif isinstance(stmt, tirx.SeqStmt):
            for child in stmt.seq:
                visit(child)
        elif isinstance(stmt, (tirx.For, tirx.AttrStmt)):
            visit(stmt.body)
        elif isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case)
            if stmt.else_case is not None:
                visit(stmt.else_case)

    visit(prim.body)
    return found


def _kchunk_partitions(partitioned) -> list[str]:
    lowered = lower_and_verify(partitioned)
    return [name for name, (prim, _) in lowered.items()
            if "bmlib_conv2d_kchunk" in prim.script()]




@pytest.mark.parametrize("kernel_rows, rows_outer", [("1", "1"), ("0", "1"), ("1", "0")])
@pytest.mark.parametrize("case", sorted(CASES))
def test_k_blocked_convs_match_the_plain_build(case, kernel_rows, rows_outer, monkeypatch):
    """With 1 KiB chunks a 3x3 conv's input-channel block (at least 4.5 KiB of weights)
    is split into chunks of one kernel row, unless ``$BMLIB_CONV_KROW=0``; 1x1 convs
    chunk input-channel blocks either way.  The weights are light: row groups outside
    the output blocks, or (``$BMLIB_CONV_ROWS_OUTER=0``) inside."""
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, FORCED)
    monkeypatch.setenv(conv_templates.KROW_ENV, kernel_rows)
    monkeypatch.setenv(conv_templates.ROWS_OUTER_ENV, rows_outer)
    build, shape, weights = CASES[case]
    mod, arrays = make_module(build, [shape], weights)
    partitioned = partition_for_bmlib(mod)
    kchunk = _kchunk_partitions(partitioned)
    assert kchunk, "the K-blocked path was not taken"
    kernel_size = weights[1][2]
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")  # the chunk buffer unflattened
    prims = _kchunk_prims(partitioned)
    monkeypatch.delenv(conv_templates.PREFETCH_ENV)
    for prim in prims:
        (kernel,) = [p for p in prim.params if len(p.shape) == 6]
        (chunk_buffer,) = [b for b in _buffers(prim) if b.name == "bmlib_conv2d_kchunk"]
        ico = int(kernel.shape[1])
        by_row = kernel_rows == "1" and kernel_size > 1
        chunks = int(chunk_buffer.shape[2])
        assert chunks == ico * kernel_size if by_row else ico % chunks == 0, \
            (case, chunk_buffer.shape, kernel.shape)
    check_offloaded_run(mod, partitioned, arrays)


def test_merged_residual_k_blocked(monkeypatch):
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, FORCED)
    mod, arrays = make_module(_residual, [(1, 8, 4, 28)],
                              [(64, 8, 3, 3), (32, 64, 1, 1), (32, 64, 1, 1)])
    partitioned = partition_for_bmlib(mod, merge=True)
    assert _kchunk_partitions(partitioned)
    check_offloaded_run(mod, partitioned, arrays)


def test_default_predicate_takes_heavy_convs_only(monkeypatch):
    """By default a conv is K-blocked when its weights per output-channel block pass
    KBLOCK_MIN_WEIGHT_BYTES: a 1024->32 1x1 (64 KiB per block of 16 channels, 128 KiB per
    block of 32) is, the 3x3 8->1024 before it (4.5-9 KiB per block) is not; the switch
    turns it off."""
    monkeypatch.delenv(conv_templates.KBLOCK_ENV, raising=False)
    mod, arrays = make_module(_chain(), [(1, 8, 2, 28)],
                              [(1024, 8, 3, 3), (32, 1024, 1, 1), (32,)])
    partitioned = partition_for_bmlib(mod)
    heavy = _kchunk_partitions(partitioned)
    assert len(heavy) == 1
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, "0")
    assert not _kchunk_partitions(partitioned)


class _Type:
    def __init__(self, shape):
        self.shape = type("S", (), {"values": list(shape)})()


class _Call:
    def __init__(self, out_shape):
        self.ty = _Type(out_shape)


class _Kernel:
    def __init__(self, shape):
        self.shape = list(shape)


@pytest.mark.parametrize("kernel, out, expected", [
    # 1024->1024 1x1 on 7x7, blocks of 32: 128 KiB per output block; 4 KiB per input block
    ((32, 32, 1, 1, 32, 32), (1, 32, 7, 7, 32), "chunked"),
    # 256->256 on 28x28: 32 KiB per output block, stays in L1: plain schedule
    ((8, 8, 1, 1, 32, 32), (1, 8, 28, 28, 32), None),
    # width not a multiple of the 7-pixel tile: the flat-pixel path, unchanged
    ((32, 32, 1, 1, 32, 32), (1, 32, 5, 5, 32), None),
    # a single input-channel block: nothing to chunk
    ((4, 1, 3, 3, 512, 32), (1, 4, 7, 7, 32), None),
])
def test_k_blocking_predicate(kernel, out, expected, monkeypatch):
    monkeypatch.delenv(conv_templates.KBLOCK_ENV, raising=False)
    plan = conv_templates.k_blocking(_Kernel(kernel), "float32", 7, _Call(out))
    if expected is None:
        assert plan is None
        return
    chunk, rows, _ = plan
    ico, per_block = kernel[1], kernel[4] * kernel[2] * kernel[3] * kernel[5] * 4
    assert ico % chunk == 0 and 1 <= chunk < ico
    assert chunk * per_block <= conv_templates.KBLOCK_CHUNK_BYTES
    assert out[2] % rows == 0
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, "off")
    assert conv_templates.k_blocking(_Kernel(kernel), "float32", 7, _Call(out)) is None


@pytest.mark.parametrize("kblock", ["0", FORCED])
@pytest.mark.parametrize("shape, stride, out", [((1, 8, 14, 14), 2, 32), ((1, 8, 15, 13), 2, 32),
                                                ((1, 8, 21, 21), 3, 32),
                                                ((1, 8, 14, 14), 2, 24)])  # flat pixels
def test_strided_1x1_gathers_its_pixels(kblock, shape, stride, out, monkeypatch):
    """A strided 1x1 on blocked data whose output blocks run outside its rows reads a
    gathered copy of the pixels it samples (bmlib_data_subsample), with the plain row
    tiles or the K-blocked ones; odd sizes leave the last row/column out as the
    strided conv does.  (Both weight bounds 0: every weight heavy.)"""
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, kblock)
    monkeypatch.setattr(conv_templates, "ROWS_OUTER_MAX_WEIGHT_BYTES", 0)
    monkeypatch.setattr(conv_templates, "KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES", 0)
    mod, arrays = make_module(_chain(stride=stride), [shape],
                              [(64, 8, 3, 3), (out, 64, 1, 1), (out,)])
    partitioned = partition_for_bmlib(mod)
    lowered = lower_and_verify(partitioned)
    gathered = [name for name, (prim, _) in lowered.items()
                if "bmlib_data_subsample" in prim.script()]
    assert len(gathered) == 1
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.STRIDED_GATHER_ENV, "0")
    assert not any("bmlib_data_subsample" in prim.script()
                   for prim, _ in lower_and_verify(partitioned).values())


@pytest.mark.parametrize("heavy", [False, True])
def test_strided_1x1_gathers_only_when_blocks_run_outside(heavy, monkeypatch):
    """Light weights run rows outside (each row's input read once for all blocks): the
    conv reads the strided pixels in place, a pass and a parallel region fewer; heavy
    ones run blocks outside, each re-reading the gathered copy.  The same numbers."""
    if heavy:
        monkeypatch.setattr(conv_templates, "ROWS_OUTER_MAX_WEIGHT_BYTES", 0)
    mod, arrays = make_module(_chain(stride=2), [(1, 8, 14, 14)],
                              [(64, 8, 3, 3), (32, 64, 1, 1), (32,)])
    partitioned = partition_for_bmlib(mod)
    gathered = [name for name, (prim, _) in lower_and_verify(partitioned).items()
                if "bmlib_data_subsample" in prim.script()]
    assert len(gathered) == int(heavy)
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.ROWS_OUTER_ENV, "0")  # blocks outside for all
    assert len([name for name, (prim, _) in lower_and_verify(partitioned).items()
                if "bmlib_data_subsample" in prim.script()]) == 1


def _parallel_order(partitioned) -> tuple[tuple[int, int], int]:
    """The K-blocked conv's (output block, output row) computed first in its second
    parallel iteration (every other loop at 0), and the output rows per group it chose
    (its block's attribute)."""
    (prim,) = _kchunk_prims(partitioned)
    (loops, realize), = list(update_realizes(prim.body, "bmlib_conv2d_kchunk"))
    (parallel,) = [l for l in loops if int(l.kind) == int(tirx.ForKind.PARALLEL)]
    env = {l.loop_var: int(l.loop_var.same_as(parallel.loop_var)) for l in loops}
    _, oc_block, _, row = (index_value(v, env) for v in realize.iter_values[:4])
    return (oc_block, row), int(realize.block.annotations["bmlib_group_rows"])


def test_light_k_blocked_conv_runs_row_groups_outside(monkeypatch):
    """A K-blocked conv with light weights (64->64 1x1, 16 KiB) parallelizes over row
    groups outside its output blocks: iteration 1 is block 1 of the first group, and it
    prefetches no chunks (its weights stay in L2).  ``$BMLIB_CONV_ROWS_OUTER=0``: the
    blocks outside, iteration 1 is the second row group (of 21 rows) of block 0."""
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, FORCED)
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")  # keeps the function unflattened
    monkeypatch.delenv(conv_templates.ROWS_OUTER_ENV, raising=False)
    mod, arrays = make_module(_chain(), [(1, 8, 21, 28)],
                              [(64, 8, 3, 3), (64, 64, 1, 1), (64,)])
    partitioned = partition_for_bmlib(mod)
    second, _ = _parallel_order(partitioned)
    assert second == (1, 0)
    monkeypatch.delenv(conv_templates.PREFETCH_ENV)
    assert not any("T.prefetch" in p.script() for p in _kchunk_prims(partitioned))
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.ROWS_OUTER_ENV, "0")
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")
    second, rows = _parallel_order(partitioned)
    assert 1 <= rows < 21 and 21 % rows == 0
    assert second == (0, rows)


def test_k_blocked_row_groups_have_their_own_weight_bound(monkeypatch):
    """A K-blocked conv re-reads its weights once per row group, not per row: its
    weights are light up to KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES, whatever the per-row
    bound (ROWS_OUTER_MAX_WEIGHT_BYTES) says."""
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, FORCED)
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")  # keeps the function unflattened
    monkeypatch.delenv(conv_templates.ROWS_OUTER_ENV, raising=False)
    monkeypatch.setattr(conv_templates, "ROWS_OUTER_MAX_WEIGHT_BYTES", 0)
    assert conv_templates.KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES > \
        conv_templates.FUSED_POINTWISE_MAX_WEIGHT_BYTES  # ResNet's 288-576 KiB 3x3 s2
    mod, _ = make_module(_chain(), [(1, 8, 21, 28)], [(64, 8, 3, 3), (64, 64, 1, 1), (64,)])
    partitioned = partition_for_bmlib(mod)
    second, _ = _parallel_order(partitioned)
    assert second == (1, 0)  # row groups outside
    monkeypatch.setattr(conv_templates, "KBLOCK_ROWS_OUTER_MAX_WEIGHT_BYTES", 0)
    second, rows = _parallel_order(partitioned)
    assert 1 <= rows < 21 and 21 % rows == 0
    assert second == (0, rows)  # blocks outside


# ----------------------------------------------------------------- next-chunk prefetch
@pytest.mark.parametrize("case", ["1x1 64->96 28x28", "1x1 rows in groups 64->32 21x28",
                                  "3x3 stride 2 pad 1 48->64 8x56->4x28"])
def test_k_blocked_conv_prefetches_every_line_of_its_next_chunk(case, monkeypatch):
    """Run the prefetch loop nest's index arithmetic for every iteration: while chunk
    ``ko`` of output block ``cb`` is computed, the lines fetched cover all of the next
    chunk (or the next block's first chunk after the last one) and stay inside the
    weight; the prefetch sits outside the innermost FMA loops (with a 3x3 kernel, a few
    lines before each kernel column of a tile).  These weights are light
    (their rows would run outside, without the prefetch): ``$BMLIB_CONV_ROWS_OUTER=0``
    keeps the output blocks outside, as for heavy ones."""
    monkeypatch.setenv(conv_templates.KBLOCK_ENV, FORCED)
    monkeypatch.setenv(conv_templates.ROWS_OUTER_ENV, "0")
    build, shape, weights = CASES[case]
    mod, arrays = make_module(build, [shape], weights)
    partitioned = partition_for_bmlib(mod)
    lowered = lower_and_verify(partitioned)
    prims = {name: prim for name, (prim, _) in lowered.items()
             if "bmlib_conv2d_kchunk" in prim.script()}
    (prim,) = prims.values()
    (kernel,) = [p for p in prim.params if len(p.shape) == 6]
    oc_blocks, ico, kh, kw, ib, ob = (int(d) for d in kernel.shape)
    per_block = kh * kw * ib * ob
    total = oc_blocks * ico * per_block
    (path, call), = list(prefetch_calls(prim.body))
    index = call.args[0].args[0].indices[0]
    outer, chunk_loop = path[0], path[1]
    assert int(outer.kind) == int(tirx.ForKind.PARALLEL)
    chunks = int(chunk_loop.extent)
    chunk = ico // chunks
    row_groups = int(outer.extent) // oc_blocks
    fetched: dict[tuple[int, int], set[int]] = {}
    for values in itertools.product(*(range(int(loop.extent)) for loop in path)):
        env = {loop.loop_var: v for loop, v in zip(path, values)}
        element = index_value(index, env)
        assert 0 <= element < total
        cb = values[0] // row_groups
        fetched.setdefault((cb, values[1]), set()).add(element * 4 // 64)
    for (cb, ko), lines in fetched.items():
        start = (cb * ico + (ko + 1) * chunk) * per_block
        end = min(start + chunk * per_block, total)
        expected = set(range(min(start, total - 1) * 4 // 64, (end * 4 - 1) // 64 + 1))
        assert expected <= lines, (cb, ko)
    if kw > 1:  # a chunk's tile reduces over (kernel column, channels): spread over steps
        assert_spread_over_reduction(path)
    asm = build_prim_funcs(prims, None).inspect_source("asm")
    assert re.search(r"^\s+prefetcht1\s", asm, flags=re.M)
    loops = innermost_fma_loops(asm)
    assert loops and not any("prefetch" in body for body in loops)
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(conv_templates.PREFETCH_ENV, "0")
    assert not any("T.prefetch" in p.script() for p, _ in lower_and_verify(partitioned).values())
