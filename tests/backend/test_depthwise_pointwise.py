"""A blocked depthwise conv and the light 1x1 conv after it as one partition
(patterns.py: bmlib.depthwise_pointwise*; templates/conv.py: _schedule_depthwise_pointwise):
which blocks match, the schedule's structure (one parallel loop over output rows, the
depthwise conv computed inside it, per row, before the 1x1 conv), numerics against the
plain build, and ``$BMLIB_FUSE_DEPTHWISE=0``."""
from __future__ import annotations

import pytest
from tvm import relax, s_tir, tirx

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend import patterns
from bmlib_relax.compiler import lower_and_verify

from helpers import check_offloaded_run, composite_names, make_module

R = relax.op


def _separable(channels, stride=1, activation=R.nn.relu, bias=True):
    """conv3x3 8->C + relu (the activations become blocked), then depthwise 3x3 (+ bias)
    + activation, then 1x1 C->out (+ bias) + activation."""
    def build(x, w0, wd, bd, wp, bp):
        a = R.nn.relu(R.nn.conv2d(x, w0, padding=1))
        d = R.nn.conv2d(a, wd, strides=stride, padding=1, groups=channels)
        d = activation(R.add(d, R.reshape(bd, [1, -1, 1, 1])) if bias else d)
        p = R.nn.conv2d(d, wp)
        return activation(R.add(p, R.reshape(bp, [1, -1, 1, 1])) if bias else p)
    return build


def _relu6(x):
    return R.clip(x, 0.0, 6.0)


def _weights(channels, out):
    return [(channels, 8, 3, 3), (channels, 1, 3, 3), (channels,), (out, channels, 1, 1),
            (out,)]


def _fused(mod) -> list[str]:
    return [n for n in composite_names(mod) if n.startswith("bmlib.depthwise_pointwise")]


def _parallel_loops(stmt, found):
    if isinstance(stmt, s_tir.SBlockRealize):
        _parallel_loops(stmt.block.body, found)
    elif isinstance(stmt, tirx.For):
        if int(stmt.kind) == int(tirx.ForKind.PARALLEL):
            found.append(stmt)
        _parallel_loops(stmt.body, found)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _parallel_loops(child, found)
    return found


def _blocks_under(stmt, names):
    if isinstance(stmt, s_tir.SBlockRealize):
        names.append(str(stmt.block.name_hint))
        _blocks_under(stmt.block.body, names)
    elif isinstance(stmt, tirx.For):
        _blocks_under(stmt.body, names)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _blocks_under(child, names)
    return names


# The 1x1's output widths are whole register tiles on AVX2 (4 pixels) and AVX-512 (7 or
# 14): the row-by-row schedule needs a row-tiled 1x1.
CASES = {
    # name: (build, input, channels, out, output rows of the fused partition)
    "relu 32->48 s1": (_separable(32), (1, 8, 6, 28), 32, 48, 6),
    "relu6 64->32 s2": (_separable(64, stride=2, activation=_relu6), (1, 8, 10, 56), 64, 32, 5),
    "no bias 32->32": (_separable(32, bias=False), (1, 8, 7, 28), 32, 32, 7),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_depthwise_and_pointwise_run_row_by_row_in_one_partition(case, monkeypatch):
    monkeypatch.delenv(patterns.FUSE_DEPTHWISE_ENV, raising=False)
    build, shape, channels, out, rows = CASES[case]
    mod, arrays = make_module(build, [shape], _weights(channels, out))
    partitioned = partition_for_bmlib(mod)
    assert len(_fused(partitioned)) == 1, composite_names(partitioned)
    fused = [prim for prim, _ in lower_and_verify(partitioned).values()
             if "bmlib_depthwise_nchwc" in prim.script()]
    assert len(fused) == 1 and "bmlib_conv2d_nchwc" in fused[0].script()
    (row,) = _parallel_loops(fused[0].body, [])  # one parallel loop: the output rows
    assert int(row.extent) == rows
    under = _blocks_under(row.body, [])
    assert any(n.startswith("bmlib_depthwise_nchwc") for n in under) and \
        any(n.startswith("bmlib_conv2d_nchwc") for n in under), under
    check_offloaded_run(mod, partitioned, arrays)
    monkeypatch.setenv(patterns.FUSE_DEPTHWISE_ENV, "0")
    apart = partition_for_bmlib(mod)
    assert not _fused(apart)
    check_offloaded_run(mod, apart, arrays)


def test_heavy_pointwise_stays_apart(monkeypatch):
    """A 1x1 with more than FUSED_POINTWISE_MAX_WEIGHT_BYTES of weights (256->512:
    512 KiB) would be streamed once per row: not fused."""
    monkeypatch.delenv(patterns.FUSE_DEPTHWISE_ENV, raising=False)
    mod, arrays = make_module(_separable(256), [(1, 8, 7, 7)], _weights(256, 512))
    partitioned = partition_for_bmlib(mod)
    assert not _fused(partitioned)
    check_offloaded_run(mod, partitioned, arrays)
