"""The machine's fp32 peak: the nominal figure, and one measured in the same run.

The nominal peak (threads x 2 FMA pipes x their lanes x 2 flops x clock) uses
the clock ``/proc/cpuinfo`` reports, which on most VMs is the base clock: the
cores run faster, so a good kernel can exceed "100 %" of it.  The measured
peak times a kernel that does nothing but independent vector FMAs, built by TVM
for the same target and run on the same threads, so "% of measured peak" says
how close a template comes to what this machine gives right now.
"""
from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

# Independent FMA chains per thread: enough to cover the FMA latency on both
# pipes (latency 4-5 cycles x 2 pipes), few enough to stay in 16 registers.
FMA_CHAINS = 10


# AMD family 19h (Zen 3 and Zen 4) has two 256-bit FMA pipes: Zen 4 runs a 512-bit
# FMA on both, so it does 16 fp32 FMA lanes per cycle, not AVX-512's 32.
_HALF_WIDTH_AVX512 = (("AuthenticAMD", 25),)


def _first_cpu_fields(cpuinfo: str) -> dict[str, str]:
    """/proc/cpuinfo's ``key : value`` lines, the first CPU's value of each key."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def fma_lanes_per_cycle(cpuinfo: str) -> tuple[int, str]:
    """(fp32 FMA lanes per cycle per core, how they are counted) from /proc/cpuinfo's text."""
    return _fma_lanes(_first_cpu_fields(cpuinfo))


def _fma_lanes(fields: dict[str, str]) -> tuple[int, str]:
    flags = set(fields.get("flags", "").split())
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    family = fields.get("cpu family", "")
    vendor = (fields.get("vendor_id", ""), int(family) if family.isdigit() else -1)
    if lanes == 16 and vendor in _HALF_WIDTH_AVX512:
        return 16, "2 FMA x 8 lanes (512-bit FMAs on 256-bit pipes)"
    return 2 * lanes, f"2 FMA x {lanes} lanes"


def nominal_peak_gflops(threads: int, ghz: Optional[float] = None) -> tuple[float, str]:
    """Theoretical fp32 peak: threads x FMA lanes per cycle x 2 x clock.

    The clock is ``ghz`` or the ``cpu MHz`` of /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as handle:
            cpuinfo = handle.read()
    except OSError:
        cpuinfo = ""
    fields = _first_cpu_fields(cpuinfo)
    lanes, counted = _fma_lanes(fields)
    mhz = float(fields.get("cpu MHz") or 0.0)
    ghz = ghz or (mhz or 2500.0) / 1000
    peak = threads * lanes * 2 * ghz
    return peak, f"{threads} thread(s) x {counted} x 2 x {ghz:.2f} GHz"


def _fma_kernel(threads: int, lanes: int):
    from tvm.script import tirx as T

    chains, dtype = FMA_CHAINS, "float32"

    @T.prim_func
    def fma_peak(out: T.Buffer((threads, chains, lanes), dtype), iters: T.int32):
        T.func_attr({"global_symbol": "fma_peak", "tirx.noalias": True})
        for thread in T.parallel(threads):
            acc = T.alloc_buffer((chains, lanes), dtype)
            for c, lane in T.grid(chains, lanes):
                acc[c, lane] = T.Cast(dtype, c + lane)
            for _ in range(iters):
                for c in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        acc[c, lane] = acc[c, lane] * T.float32(0.99999994) + T.float32(1e-7)
            for c, lane in T.grid(chains, lanes):
                out[thread, c, lane] = acc[c, lane]

    return fma_peak


def measured_peak_gflops(threads: int, target: Any = None, seconds: float = 1.0,
                         clock: Any = time.perf_counter) -> float:
    """GFLOP/s of a pure vector-FMA kernel on ``threads`` threads (the best of a few
    runs of about ``seconds / 5`` each, timed by ``clock``: wall time, or
    ``time.process_time`` for a one-thread peak on a shared machine)."""
    import tvm

    from ..backend.target import resolve_target, vector_lanes

    resolved = resolve_target(target)
    lanes = vector_lanes(resolved, "float32")
    lib = tvm.tirx.build(tvm.IRModule({"fma_peak": _fma_kernel(threads, lanes)}),
                         target=resolved)
    func = lib["fma_peak"]
    out = tvm.runtime.tensor(np.zeros((threads, FMA_CHAINS, lanes), "float32"))
    flops_per_iter = 2 * threads * FMA_CHAINS * lanes
    iters = 100_000
    best = 0.0
    deadline = time.perf_counter() + seconds
    while True:
        start = clock()
        func(out, iters)
        elapsed = clock() - start
        best = max(best, flops_per_iter * iters / elapsed / 1e9)
        if time.perf_counter() > deadline:
            return best
        # Grow each run to about a fifth of the budget.
        iters = max(iters, int(iters * (seconds / 5) / max(elapsed, 1e-6)))
