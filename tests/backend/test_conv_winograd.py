"""Winograd conv2d (templates/conv_winograd.py, issue #15): fp32 3x3 stride-1 convs.

Every build case first asserts that the conv was offloaded and that the
Winograd template computed it (the transformed ``HWOI{kb}o`` weight in the
partitioned module and the ``bmlib_winograd_gemm`` block in the scheduled
PrimFunc, none of its blocks left unscheduled), then compares with the plain
Relax build.  ``BMLIB_WINOGRAD`` forces the tile size on these tiny shapes
(the default rule keeps small layers on the direct template).
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir, tirx

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.codegen import build_prim_funcs
from bmlib_relax.backend.templates import conv_winograd
from bmlib_relax.backend.templates.conv import PREFETCH_ENV
from bmlib_relax.backend.templates.tiles import output_block
from bmlib_relax.check import plain_version
from bmlib_relax.errors import ParamError
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import (assert_prefetches_next_unit, assert_spread_over_reduction,
                     innermost_fma_loops, make_module, prefetch_calls, run_offloaded,
                     run_plain)

R = relax.op


@pytest.mark.parametrize("m", [2, 4])
def test_transform_matrices_compute_a_correlation(m):
    """A^T [(G g) * (B^T d)] = the valid correlation of d with g (1D, exact up to rounding)."""
    at, g, bt = conv_winograd.matrices(m)
    rng = np.random.default_rng(m)
    d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
    want = np.array([d[i:i + 3] @ k for i in range(m)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [2, 4])
def test_weight_transform_round_trips(m):
    w = np.random.default_rng(0).standard_normal((32, 5, 3, 3)).astype("float32")
    u = conv_winograd.transform_weight(w, m, 16)
    assert u.shape == (m + 2, m + 2, 2, 5, 16)
    np.testing.assert_allclose(conv_winograd.untransform_weight(u), w, rtol=1e-5, atol=1e-5)


def test_default_rule(monkeypatch):
    monkeypatch.delenv(conv_winograd.ENV, raising=False)
    assert conv_winograd.winograd_tile(64, 64, 56, 56) == 4
    assert conv_winograd.winograd_tile(128, 128, 28, 28) == 4
    assert conv_winograd.winograd_tile(256, 256, 14, 14) == 2
    assert conv_winograd.winograd_tile(512, 512, 7, 7) is None  # weights stream: direct
    assert conv_winograd.winograd_tile(128, 128, 13, 13) is None
    assert conv_winograd.winograd_tile(64, 128, 7, 7) == 4
    assert conv_winograd.winograd_tile(64, 64, 7, 7) == 4
    assert conv_winograd.winograd_tile(3, 64, 224, 224) is None
    assert conv_winograd.winograd_tile(512, 512, 4, 4) is None
    monkeypatch.setenv(conv_winograd.ENV, "0")
    assert conv_winograd.winograd_tile(64, 64, 56, 56) is None
    monkeypatch.setenv(conv_winograd.ENV, "yes")
    with pytest.raises(ParamError, match="BMLIB_WINOGRAD must be"):
        conv_winograd.winograd_tile(64, 64, 56, 56)
    mod, _ = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 16, 8, 8)],
                         [(16, 16, 3, 3)])
    with pytest.raises(ParamError, match="BMLIB_WINOGRAD must be"):
        partition_for_bmlib(mod)


def _conv_bias_bn_relu(padding):
    def build(x, w, b, gamma, beta, mean, var):
        out = R.add(R.nn.conv2d(x, w, padding=padding),
                    R.reshape(b, (int(w.ty.shape.values[0]), 1, 1)))
        out = relax.TupleGetItem(R.nn.batch_norm(out, gamma, beta, mean, R.abs(var), axis=1,
                                                 training=False), 0)
        return R.nn.relu(out)

    return build


def _lowered(partitioned):
    assert offloaded_partitions(partitioned)
    return lower_and_verify(partitioned).values()


def _assert_winograd(partitioned, used: bool = True):
    """The Winograd GEMM is (not) in the scheduled PrimFuncs; nothing unscheduled.  A
    PrimFunc with prefetches is flat already (no blocks): its GEMM buffer is looked for."""
    names = []
    for prim, record in _lowered(partitioned):
        assert not record.unscheduled, record.unscheduled
        if not _is_flat(prim):
            sch = s_tir.Schedule(prim.without_attr("global_symbol"))
            names += [str(sch.get(b).name_hint)
                      for b in sch.get_child_blocks(sch.get_sblock("root"))]
        elif "bmlib_winograd_gemm = T.alloc_buffer" in prim.script():
            names.append("bmlib_winograd_gemm_update")
    assert ("bmlib_winograd_gemm_update" in names) == used, names


def _is_flat(prim) -> bool:
    return not isinstance(prim.body, s_tir.SBlockRealize)


# (in channels, out channels, H, W, padding, m): channels that are not whole
# vectors, sizes that are not whole tiles, no / symmetric / asymmetric padding.
CASES = [
    (3, 8, 7, 9, (1, 1), "4"),
    (24, 40, 11, 13, (0, 0), "2"),
    (16, 32, 9, 6, (1, 0, 2, 1), "4"),
    (20, 16, 5, 5, (1, 1), "2"),
    (32, 64, 12, 12, (1, 1), "1"),
]


@pytest.mark.parametrize("channels,out_channels,h,w,padding,mode", CASES)
def test_winograd_conv_bias_bn_relu_matches_plain_build(monkeypatch, channels, out_channels,
                                                         h, w, padding, mode):
    monkeypatch.setenv(conv_winograd.ENV, mode)
    k = out_channels
    mod, arrays = make_module(_conv_bias_bn_relu(padding), [(1, channels, h, w)],
                              [(k, channels, 3, 3), (k,), (k,), (k,), (k,), (k,)])
    partitioned = partition_for_bmlib(mod)
    assert 'kernel_layout="HWOI' in partitioned.script(show_meta=False)
    _assert_winograd(partitioned)
    (got,), _ = run_offloaded(partitioned, arrays)
    (want,) = run_plain(mod, arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # The checker's reference build turns the transformed weight back into OIHW.
    (unpacked,) = run_plain(plain_version(partitioned), arrays)
    np.testing.assert_allclose(unpacked, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels,out_channels,size", [(12, 16, (9, 10)), (64, 64, (8, 8))])
def test_weight_not_a_constant_is_transformed_in_the_primfunc(monkeypatch, channels,
                                                              out_channels, size):
    # 64x64 crashed at run time when the generic rule vectorized the weight transform.
    def build(x, w):
        return R.nn.relu(R.nn.conv2d(x, w, padding=1))

    monkeypatch.setenv(conv_winograd.ENV, "2")
    mod, arrays = make_module(build, [(1, channels, *size), (out_channels, channels, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    assert 'kernel_layout="OIHW"' in partitioned.script(show_meta=False)
    _assert_winograd(partitioned)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-4, atol=1e-4)
    # By default a weight transformed on every call is not worth it: the direct conv.
    monkeypatch.delenv(conv_winograd.ENV)
    _assert_winograd(partition_for_bmlib(mod), used=False)


def test_disabled_or_not_applicable_keeps_the_direct_template(monkeypatch):
    monkeypatch.setenv(conv_winograd.ENV, "0")
    mod, arrays = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 16, 8, 8)],
                              [(16, 16, 3, 3)])
    _assert_winograd(partition_for_bmlib(mod), used=False)
    monkeypatch.setenv(conv_winograd.ENV, "1")
    strided, _ = make_module(lambda x, w: R.nn.conv2d(x, w, strides=2, padding=1),
                             [(1, 16, 8, 8)], [(16, 16, 3, 3)])
    _assert_winograd(partition_for_bmlib(strided), used=False)


def test_prime_output_channels(monkeypatch):
    """17 output channels block by 1: a constant weight keeps the direct template
    (Relax has no layout HWOI1o), a weight that is not a constant is transformed in
    the PrimFunc; both match the plain build."""
    monkeypatch.setenv(conv_winograd.ENV, "2")
    const, arrays = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 8, 6, 6)],
                                [(17, 8, 3, 3)])
    partitioned = partition_for_bmlib(const)
    _assert_winograd(partitioned, used=False)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(const, arrays)[0], rtol=1e-4, atol=1e-4)
    free, arrays = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1),
                               [(1, 8, 6, 6), (17, 8, 3, 3)])
    partitioned = partition_for_bmlib(free)
    _assert_winograd(partitioned)
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(free, arrays)[0], rtol=1e-4, atol=1e-4)


def test_symbolic_batch_keeps_the_direct_template(monkeypatch):
    monkeypatch.setenv(conv_winograd.ENV, "1")
    x = relax.Var("x", relax.TensorType((tvm.tirx.Var("n", "int64"), 16, 8, 8), "float32"))
    weight = np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(R.nn.conv2d(x, relax.const(weight), padding=1))
        bb.emit_func_output(out)
    mod = bb.get()
    partitioned = partition_for_bmlib(mod)
    _assert_winograd(partitioned, used=False)
    x = np.random.default_rng(1).standard_normal((2, 16, 8, 8)).astype("float32")
    (got,), _ = run_offloaded(partitioned, [x])
    np.testing.assert_allclose(got, run_plain(mod, [x])[0], rtol=1e-4, atol=1e-4)


class _Context:
    """What conv2d_winograd reads from the codegen's LowerContext: the target."""

    def __init__(self):
        from bmlib_relax.backend.target import resolve_target
        self.target = resolve_target(None)

    def lanes(self, dtype):
        from bmlib_relax.backend.target import vector_lanes
        return vector_lanes(self.target, dtype)


@pytest.mark.parametrize("m", [2, 4])
def test_blocked_input_and_output_at_te_level(m):
    """NCHW{8}c data in, NCHW{kb}c out (the reader / writer accessors the blocked
    layout plugs in), scheduled by the same rules, vs a NumPy convolution."""
    from tvm import te

    from bmlib_relax.backend.schedule import ScheduleContext, apply_schedules

    ctx = _Context()
    channels, out_channels, h, w, ib = 16, 32, 9, 7, 8
    kb = output_block(out_channels, ctx.lanes("float32"))
    data = te.placeholder((1, channels // ib, h, w, ib), "float32", name="data")
    kernel = te.placeholder((m + 2, m + 2, out_channels // kb, channels, kb), "float32",
                            name="kernel")
    out = conv_winograd.conv2d_winograd(
        conv_winograd.blocked_reader(data), [1, channels, h, w], kernel, [1, 1, 1, 1], m,
        "float32", ctx, write=conv_winograd.blocked_writer)
    assert [int(d) for d in out.shape] == [1, out_channels // kb, h, w, kb]
    sctx = ScheduleContext(ctx.target)
    prim = apply_schedules(te.create_prim_func([data, kernel, out]), ctx.target, sctx)
    assert not sctx.unscheduled, sctx.unscheduled
    built = tvm.compile(tvm.IRModule({"main": prim}), target=ctx.target)
    rng = np.random.default_rng(m)
    x = rng.standard_normal((1, channels, h, w)).astype("float32")
    weight = rng.standard_normal((out_channels, channels, 3, 3)).astype("float32")
    x_blocked = x.reshape(1, channels // ib, ib, h, w).transpose(0, 1, 3, 4, 2).copy()
    result = tvm.runtime.tensor(np.zeros([int(d) for d in out.shape], "float32"))
    built["main"](tvm.runtime.tensor(x_blocked),
                  tvm.runtime.tensor(conv_winograd.transform_weight(weight, m, kb)), result)
    padded = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    want = np.zeros((out_channels, h, w))
    for dy in range(3):
        for dx in range(3):
            want += np.einsum("kc,chw->khw", weight[:, :, dy, dx],
                              padded[:, dy:dy + h, dx:dx + w])
    got = result.numpy()[0].transpose(0, 3, 1, 2).reshape(out_channels, h, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, tile", [
    ({"kind": "llvm", "mcpu": "skylake-avx512"}, (7, 32)),  # 14 of 32 zmm registers
    ({"kind": "llvm", "mcpu": "haswell"}, (4, 16)),         # 8 of 16 ymm registers
])
def test_gemm_tile_follows_the_register_file(monkeypatch, target, tile):
    monkeypatch.setenv(conv_winograd.ENV, "2")
    monkeypatch.setenv(PREFETCH_ENV, "0")  # the scheduled blocks, not yet flattened
    mod, _ = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 16, 28, 28)],
                         [(32, 16, 3, 3)])
    partitioned = partition_for_bmlib(mod, target=target)
    assert offloaded_partitions(partitioned)
    (prim, _), = lower_and_verify(partitioned, target=target).values()
    sch = s_tir.Schedule(prim.without_attr("global_symbol"))
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("bmlib_winograd_gemm_update"))]
    assert (int(loops[-2].extent), int(loops[-1].extent)) == tile
    assert loops[-2].kind == tvm.tirx.ForKind.UNROLLED
    assert loops[-1].kind == tvm.tirx.ForKind.VECTORIZED


def test_flops_count_the_convolution_not_the_transformed_kernel(monkeypatch):
    """The report's FLOPs of a Winograd conv are its direct 3x3 conv's (2*N*K*C*9*H*W)."""
    from bmlib_relax.backend.rewrite import pack_weights
    from bmlib_relax.flops import count_flops

    def conv_flops(mode):
        monkeypatch.setenv(conv_winograd.ENV, mode)
        mod, _ = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 8, 12, 12)],
                             [(16, 8, 3, 3)])
        (call,) = [b.value for b in pack_weights(mod)["main"].body.blocks[0].bindings
                   if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
        return str(call.attrs.kernel_layout), int(count_flops(call))

    assert conv_flops("4") == ("HWOI16o", 2 * 16 * 8 * 9 * 12 * 12)
    assert conv_flops("0")[1] == 2 * 16 * 8 * 9 * 12 * 12


def _gemm_prefetches(partitioned):
    """(PrimFunc, [(enclosing loops, prefetch call)]) of the one Winograd partition."""
    (prim, _), = [(p, r) for p, r in _lowered(partitioned)
                  if "bmlib_winograd_gemm" in p.script()]
    return prim, list(prefetch_calls(prim.body))


@pytest.mark.parametrize("channels,out_channels,size,mode", [
    (32, 64, (8, 8), "2"), (24, 40, (11, 13), "4"), (64, 32, (6, 6), "2")])
def test_gemm_prefetches_every_line_of_its_next_weight_slice(monkeypatch, channels,
                                                             out_channels, size, mode):
    """Run the prefetch's index arithmetic for every iteration of the GEMM's parallel
    loop (eps, nu, K/kb, tile groups): the groups of slice ``U[eps, nu, ko]`` together
    fetch every cache line of the slice after it, and no address leaves U; with
    enough channels, a few lines before each step of the channel loop, never in the
    innermost FMA loop.  Then the
    same conv with ``$BMLIB_CONV_PREFETCH=0`` has no prefetch, and both match the plain
    build."""
    monkeypatch.setenv(conv_winograd.ENV, mode)
    k = out_channels
    mod, arrays = make_module(_conv_bias_bn_relu((1, 1)), [(1, channels, *size)],
                              [(k, channels, 3, 3), (k,), (k,), (k,), (k,), (k,)])
    partitioned = partition_for_bmlib(mod)
    _assert_winograd(partitioned)
    prim, calls = _gemm_prefetches(partitioned)
    (kernel,) = [p for p in prim.params if len(p.shape) == 5]
    a, _, k_blocks, c, kb = (int(d) for d in kernel.shape)
    per_slice, slices = c * kb, a * a * k_blocks
    total = slices * per_slice
    (path, call), = calls
    outer = path[0]
    assert int(outer.kind) == int(tirx.ForKind.PARALLEL)
    assert int(outer.extent) % slices == 0
    groups = int(outer.extent) // slices
    fetched = assert_prefetches_next_unit(path, call, total, per_slice, groups)
    assert sorted(fetched) == list(range(slices))
    if c >= 2 * conv_winograd.PREFETCH_STEP_MIN:  # channel steps: spread over them
        assert_spread_over_reduction(path)
    else:  # too few channels to split: one burst per tile group
        assert len(path) == 2
    asm = build_prim_funcs({"winograd": prim}, None).inspect_source("asm")
    loops = innermost_fma_loops(asm)
    assert loops and not any("prefetch" in body for body in loops)
    (got,), _ = run_offloaded(partitioned, arrays)
    (want,) = run_plain(mod, arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    monkeypatch.setenv(PREFETCH_ENV, "0")
    unfetched = partition_for_bmlib(mod)
    assert _gemm_prefetches(unfetched)[1] == []
    (got,), _ = run_offloaded(unfetched, arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weight_not_a_constant_is_not_prefetched(monkeypatch):
    """An in-PrimFunc weight transform has just written U: no prefetch of it."""
    monkeypatch.setenv(conv_winograd.ENV, "2")
    mod, _ = make_module(lambda x, w: R.nn.conv2d(x, w, padding=1),
                         [(1, 32, 8, 8), (32, 32, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    _assert_winograd(partitioned)
    assert _gemm_prefetches(partitioned)[1] == []

