"""Schedules and weight packing: what the fast templates promise, checked without timing.

Speed itself is measured only by ``scripts/bench.py``; these tests check the
structure that makes it fast (packed weights, wide vector instructions on the
host target) and that scheduling never costs correctness (a failing or missing
rule leaves a block as default lowering made it).
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax, te

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.codegen import build_prim_funcs
from bmlib_relax.backend.schedule import ScheduleContext, apply_schedules
from bmlib_relax.backend.target import host_target, resolve_target, vector_bits
from bmlib_relax.backend.templates import SCHEDULE_ATTR, register_schedule
from bmlib_relax.compiler import lower_and_verify

from helpers import innermost_fma_loops, make_module, run_offloaded, run_plain

R = relax.op


def _conv_relu(x, w):
    return R.nn.relu(R.nn.conv2d(x, w, padding=1))


def test_default_target_is_the_host_cpu():
    target = resolve_target(None)
    assert str(target.attrs["mcpu"]) == str(tvm.target.codegen.llvm_get_system_cpu())
    assert host_target() == {"kind": "llvm",
                             "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}


def test_conv2d_weights_are_packed_once_and_stay_arguments(monkeypatch):
    monkeypatch.setenv("BMLIB_WINOGRAD", "0")  # the direct template's blocked weights
    mod, arrays = make_module(_conv_relu, [(1, 16, 10, 10)], [(16, 16, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    text = partitioned.script()
    assert re.search(r'kernel_layout="OIHW\d+i\d+o"', text)
    lowered = lower_and_verify(partitioned)  # the arity verifier still passes
    (prim, record), = lowered.values()
    assert record.num_args == record.num_params + 1 == 3
    # 16 output channels on 8-lane vectors: one block of two vectors.
    assert "(1, 2, 3, 3, 8, 16)" in prim.script() or vector_bits(None) != 256
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)


def test_pack_weights_can_be_switched_off():
    mod, _ = make_module(_conv_relu, [(1, 16, 10, 10)], [(16, 16, 3, 3)])
    assert 'kernel_layout="OIHW"' in partition_for_bmlib(mod, pack_weights=False).script()


@pytest.mark.skipif(vector_bits(None) < 256, reason="the host has no 256-bit vectors")
def test_conv2d_partition_uses_wide_vector_fma():
    mod, _ = make_module(_conv_relu, [(1, 16, 14, 14)], [(32, 16, 3, 3)])
    lowered = lower_and_verify(partition_for_bmlib(mod))
    built = build_prim_funcs({name: prim for name, (prim, _) in lowered.items()}, None)
    asm = built.inspect_source("asm")
    register = "zmm" if vector_bits(None) >= 512 else "ymm"
    assert re.search(rf"vfmadd\w*\s+[^\n]*%{register}", asm), \
        f"no {register} FMA in the conv2d partition"


def test_conv2d_schedule_is_applied():
    mod, _ = make_module(_conv_relu, [(1, 16, 14, 14)], [(16, 16, 3, 3)])
    (prim, _), = lower_and_verify(partition_for_bmlib(mod)).values()
    script = prim.script()
    assert "T.parallel" in script and "T.vectorized" in script


@pytest.mark.parametrize("data, weight, strides, padding", [
    ((1, 32, 22, 22), (64, 32, 1, 1), 2, 0),    # 11x11 output: 121 pixels, padded to whole tiles
    ((2, 16, 11, 11), (32, 16, 3, 3), 1, 1),    # batch 2, 11x11 output
    ((1, 8, 5, 5), (48, 8, 3, 3), 2, 1),        # 3x3 output
    ((1, 8, 7, 7), (24, 8, 3, 3), 1, 1),        # 24 channels: one-vector blocks, 12/14 pixels
])
def test_conv2d_on_widths_without_whole_row_tiles(monkeypatch, data, weight, strides, padding):
    # Rows of 3, 7 or 11 pixels take no whole tile of 4, 5, 6, 8 or 12 (AVX2), 7 or 14
    # (AVX-512): the output pixels are tiled as one flat, padded axis, whose
    # padding must not leak into the output.
    monkeypatch.setenv("BMLIB_WINOGRAD", "0")  # the direct template (3x3 s1: Winograd)
    def build(x, w, b):
        return R.nn.relu(R.add(R.nn.conv2d(x, w, strides=strides, padding=padding),
                               R.reshape(b, (weight[0], 1, 1))))

    mod, arrays = make_module(build, [data], [weight, (weight[0],)])
    partitioned = partition_for_bmlib(mod)
    (prim, _), = lower_and_verify(partitioned).values()
    assert "bmlib_conv2d_nchwc_flat" in prim.script()
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data, weight, strides, weight_input", [
    ((1, 16, 8, 8), (32, 16, 1, 1), 1, False),   # 64 pixels, 32 channels (tail tile of 2)
    ((2, 8, 16, 8), (10, 8, 1, 1), 2, False),    # batch 2, strided: 8x4 sampled pixels
    ((1, 12, 4, 8), (20, 12, 1, 1), 1, True),    # OIHW weight as an input, not packed
])
def test_1x1_conv2d_runs_as_a_gemm_on_nchw(data, weight, strides, weight_input):
    # Whole vectors of output pixels: the 1x1 conv is a GEMM on NCHW with tiles of
    # 6 channels (padded to whole tiles) x 2 vectors of pixels, no NCHWc packing.
    def build(x, w, b):  # w is a constant or, with weight_input, the second input
        return R.nn.relu(R.add(R.nn.conv2d(x, w, strides=strides),
                               R.reshape(b, (weight[0], 1, 1))))

    if weight_input:
        mod, arrays = make_module(build, [data, weight], [(weight[0],)])
    else:
        mod, arrays = make_module(build, [data], [weight, (weight[0],)])
    partitioned = partition_for_bmlib(mod)
    (prim, _), = lower_and_verify(partitioned).values()
    script = prim.script()
    assert "bmlib_conv2d_1x1_gemm" in script and "bmlib_data_pack" not in script
    (got,), _ = run_offloaded(partitioned, arrays)
    np.testing.assert_allclose(got, run_plain(mod, arrays)[0], rtol=1e-5, atol=1e-5)


def _parallel_bodies(asm: str) -> list[str]:
    """The assembly of each parallel-loop body (TVM emits one function per loop)."""
    parts = re.split(r"^(\S*__tvm_parallel_lambda\S*):\n", asm, flags=re.M)
    return [body.split(".Lfunc_end")[0] for body in parts[2::2]]


@pytest.mark.parametrize("kernel", ["conv2d", "conv2d_direct", "matmul"])
def test_accumulator_tiles_are_not_workspace_allocations(monkeypatch, kernel):
    # A "local" tile would become a TVMBackendAllocWorkspace/FreeWorkspace pair
    # per tile inside the parallel loop (see the register-tile note in schedule.py).
    # conv2d: Winograd (3x3 stride 1), conv2d_direct: the direct template.
    monkeypatch.setenv("BMLIB_WINOGRAD", "0" if kernel == "conv2d_direct" else "1")
    if kernel.startswith("conv2d"):
        mod, _ = make_module(_conv_relu, [(1, 16, 14, 14)], [(32, 16, 3, 3)])
    else:
        mod, _ = make_module(lambda x, w: R.nn.relu(R.matmul(x, w)), [(64, 128)], [(128, 64)])
    lowered = lower_and_verify(partition_for_bmlib(mod))
    built = build_prim_funcs({name: prim for name, (prim, _) in lowered.items()}, None)
    asm = built.inspect_source("asm")
    hot = [body for body in _parallel_bodies(asm) if "vfmadd" in body]
    assert hot, "no parallel loop with FMAs"
    if kernel == "conv2d":
        assert not any("AllocWorkspace" in body for body in hot)
    # A matmul tile over 1 KiB (24 accumulators with AVX-512) is allocated once per
    # parallel iteration; what matters is that its k loop keeps it in registers.
    loops = innermost_fma_loops(asm)
    if kernel == "conv2d":
        # Winograd's input/output transforms multiply by the transform's constants
        # (loaded from the constant pool) and store every value they make; the
        # GEMM's loop is the one that must keep its tile in registers.
        loops = [body for body in loops if ".LCPI" not in body]
    assert loops, "no FMA loop"
    for body in loops:
        assert "call" not in body, body
        assert not re.search(r"vmov\w*\s+%[xyz]mm\d+, [^%\n]*\(", body), body  # no spills




def _tagged_module(rule: str):
    a = te.placeholder((64, 64), name="a")
    b = te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="double",
                   attrs={SCHEDULE_ATTR: rule})
    c = te.compute((64, 64), lambda i, j: b[i, j] + 1.0, name="plus_one")
    return te.create_prim_func([a, c]), a


def _run_prim(prim) -> np.ndarray:
    built = build_prim_funcs({"f": prim.with_attr("global_symbol", "f")}, None)
    x = np.arange(64 * 64, dtype="float32").reshape(64, 64)
    out = tvm.runtime.tensor(np.zeros((64, 64), "float32"))
    built["f"](tvm.runtime.tensor(x), out)
    return out.numpy(), x


def test_unknown_rule_leaves_the_block_unscheduled_and_correct():
    prim, _ = _tagged_module("bmlib.no_such_rule")
    ctx = ScheduleContext(resolve_target(None))
    got, x = _run_prim(apply_schedules(prim, ctx=ctx))
    np.testing.assert_array_equal(got, x * 2 + 1)
    assert any(rule == "bmlib.no_such_rule" for _, rule, _ in ctx.failures)


def test_failing_rule_is_rolled_back():
    @register_schedule("bmlib.test_failing_rule")
    def failing(sch, block, ctx):
        sch.parallel(sch.get_loops(block)[0])
        raise RuntimeError("half-way")

    prim, _ = _tagged_module("bmlib.test_failing_rule")
    ctx = ScheduleContext(resolve_target(None))
    scheduled = apply_schedules(prim, ctx=ctx)
    got, x = _run_prim(scheduled)
    np.testing.assert_array_equal(got, x * 2 + 1)
    assert [f[0] for f in ctx.failures] == ["double"]


def test_float_division_by_a_literal_zero_compiles_to_ieee_results():
    # The bound scalar 0 is not inlined into the divide (TVM folds `x / 0` and refuses
    # it at build); schedule errors are not rendered with the IR (rendering folded the
    # same division inside the error's construction and aborted the process).
    import bmlib_relax

    text = ('#[version = "0.0.5"]\n'
            'def @main(%x: Tensor[(4, 64), float32]) {\n'
            '  %0 = divide(%x, 0f);\n'
            '  add(multiply(%0, 2f), 1f)\n}\n')
    model = bmlib_relax.compile(text, num_threads=1)
    report = model.report.to_dict()
    assert report["flops_offloaded"] == report["flops_total"] > 0, report["host_ops"]
    x = np.linspace(-2, 2, 256, dtype="float32").reshape(4, 64)
    x[0, :3] = [-1.0, 0.0, 1.0]
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = x / np.float32(0) * 2 + 1
    np.testing.assert_array_equal(model(x=x), expected)


@pytest.mark.parametrize("dtype, suffix", [("float64", "f64"), ("float32", "f"),
                                           ("float16", "f16")])
@pytest.mark.parametrize("zero", ["0", "-0"])
def test_division_by_a_literal_zero_on_the_host_gives_ieee_results(dtype, suffix, zero):
    """What bmlib does not take (float64), and the plain Relax reference build, divide by
    a literal 0 per element too: TVM's legalization inlined the scalar and its constant
    folder stopped the build (InternalError: Divide by zero) -- see host_legalize."""
    import bmlib_relax
    from bmlib_relax.compiler import compile_plain
    from bmlib_relax.importer import import_relay
    from bmlib_relax.relay import parse

    x = np.array([[1, -2, 0, np.nan], [np.inf, -np.inf, 3, -0.0]], dtype)
    divisor = np.array(float(zero), dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = {"divide": x / divisor, "floor_divide": np.floor(x / divisor),
                    "floor_mod": x - np.floor(x / divisor) * divisor,
                    "mod": np.fmod(x, divisor)}
    for op, want in expected.items():
        text = (f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 4), {dtype}]) '
                f'{{ {op}(%x, {zero}{suffix}) }}')
        got = np.asarray(bmlib_relax.compile(text, num_threads=1)(x))
        np.testing.assert_array_equal(got, want, err_msg=op)
        vm = tvm.relax.VirtualMachine(compile_plain(import_relay(parse(text))), tvm.cpu())
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), want,
                                      err_msg=f"{op} (plain build)")
