"""Where a compiled model's time goes: each VM call (bmlib partitions, VM builtins) timed.

``python -m bmlib_relax.bench.partition_profile resnet18 --threads 1`` compiles the
model through bmlib and times every call the Relax VM makes (through the VM's
instrument hook), over repeated runs: the per-call median, grouped by partition
kind, and what the calls add up to against the whole run.  The rest is mostly the
hook itself (a Python call before and after every VM call): uninstrumented, the
partitions called in sequence take as long as the VM's run.  At one thread the clock
is process CPU time, which other jobs on a shared machine do not stretch.

``--conv-efficiency --repeated`` sets each conv's time in the model beside its time
when repeated in place: a layer much faster repeated waits on memory in the model
(weights that no cache keeps between runs).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import time
from pathlib import Path
from typing import Optional, Sequence
from .models import check_model_names, default_goldens, load_model


def _is_partition(callee: str) -> bool:
    """A bmlib partition's symbol (the VM's other calls are its builtins)."""
    return callee.endswith("_bmlib")


def _output_shape(call_args) -> tuple:
    """The shape of a VM call's last tensor argument (its output, destination-passing)."""
    shapes = [tuple(a.shape) for a in call_args if hasattr(a, "shape")]
    return shapes[-1] if shapes else ()


def profile_calls(model, args, runs: int, clock=time.process_time) -> tuple[float, list]:
    """(median whole-run ms, [(callee, median ms, output shape)] in call order)."""
    from tvm import relax

    vm = relax.VirtualMachine(model.executable, model.device)
    records: list = []
    started: dict = {}

    def instrument(func, name, before_run, ret_value, *call_args):
        now = clock()
        if before_run:
            started["t"] = now
        else:
            records.append((str(name), now - started["t"], _output_shape(call_args)))
        return 0

    for _ in range(3):
        vm["main"](*args)
    vm.set_instrument(instrument)
    wholes, per_run = [], []
    for _ in range(runs):
        records.clear()
        t0 = clock()
        vm["main"](*args)
        wholes.append(clock() - t0)
        per_run.append(list(records))
    calls = [(name, statistics.median(run[i][1] for run in per_run) * 1e3, shape)
             for i, (name, _, shape) in enumerate(per_run[0])]
    return statistics.median(wholes) * 1e3, calls


def repeated_calls(model, args, runs: int, clock=time.process_time) -> list:
    """[(callee, median ms, output shape)] of every bmlib partition call of one run, in
    call order, each call then repeated ``runs`` times in place (its own arguments).

    A repeated call finds its weights and input as warm as the call before left them;
    in the model, a layer whose weights no cache keeps between runs waits on memory
    for them.  The gap between the two times is that wait: ResNet-18's 14x14 3x3 convs
    take ~1.0 ms in the model and ~0.68 ms repeated, MobileNet's layers the same either
    way."""
    from tvm import relax

    vm = relax.VirtualMachine(model.executable, model.device)
    captured: list = []

    def capture(func, name, before_run, ret_value, *call_args):
        if before_run and _is_partition(str(name)):
            captured.append((str(name), func, list(call_args), _output_shape(call_args)))
        return 0

    vm.set_instrument(capture)
    vm["main"](*args)
    vm.set_instrument(None)
    timed = []
    for name, func, call_args, shape in captured:
        func(*call_args)  # warm
        times = []
        for _ in range(runs):
            start = clock()
            func(*call_args)
            times.append(clock() - start)
        timed.append((name, statistics.median(times) * 1e3, shape))
    return timed


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--calls", action="store_true", help="also list every call")
    parser.add_argument("--conv-efficiency", action="store_true",
                        help="GFLOP/s of every conv2d partition as it runs in the model, "
                             "against the FMA peak measured on the same threads and clock")
    parser.add_argument("--repeated", action="store_true",
                        help="with --conv-efficiency: also each call repeated in place "
                             "(warm weights and input), to tell memory waits from compute")
    parser.add_argument("--goldens", type=Path, default=default_goldens(),
                        help="folder of golden cases (default $BMLIB_RELAY_GOLDEN or tests/data)")
    parser.add_argument("--corpus", default=os.environ.get("BMLIB_RELAY_CORPUS"))
    args = parser.parse_args(argv)
    check_model_names(parser, args.models, args.goldens,
                      Path(args.corpus) if args.corpus else None)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tvm

    import bmlib_relax
    from ..relay import parse
    from .harness import host_target
    from .peak import measured_peak_gflops

    clock = time.process_time if args.threads == 1 else time.perf_counter
    peak: Optional[float] = None
    for name in args.models:
        bench = load_model(name, args.goldens, Path(args.corpus) if args.corpus else None)
        model = bmlib_relax.compile(parse(bench.text), bench.params, target=host_target(),
                                    input_shapes=bench.input_shapes, num_threads=args.threads)
        inputs = [tvm.runtime.tensor(x) for x in bench.inputs.values()]
        model.warm_up(*bench.inputs.values())  # as a user's later calls run it
        whole, calls = profile_calls(model, inputs, args.runs, clock)
        partitions = [c for c in calls if _is_partition(c[0])]
        print(f"{name}: whole run {whole:.3f} ms ({clock.__name__}, instrumented), "
              f"{len(calls)} VM calls, {len(partitions)} bmlib partitions = "
              f"{sum(c[1] for c in partitions):.3f} ms, other calls "
              f"{sum(c[1] for c in calls) - sum(c[1] for c in partitions):.3f} ms")
        groups: dict = collections.defaultdict(lambda: [0, 0.0])
        for callee, ms, _ in calls:
            key = re.sub(r"\d*_bmlib$", "", callee)
            groups[key][0] += 1
            groups[key][1] += ms
        for key, (count, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"  {key:<64} {count:>4} {ms:>9.3f} ms")
        if args.calls:
            for callee, ms, shape in calls:
                print(f"    {ms:>8.3f} ms  {callee}  -> {list(shape)}")
        if args.conv_efficiency:
            if peak is None:
                peak = measured_peak_gflops(args.threads, host_target(), clock=clock)
            repeated = repeated_calls(model, inputs, args.runs, clock) \
                if args.repeated else None
            print(render_conv_efficiency(conv_efficiency(model.report, calls, repeated),
                                         peak))
    return 0


def conv_efficiency(report, calls: Sequence[tuple],
                    repeated: Optional[Sequence[tuple]] = None) -> list[dict]:
    """Each call of a partition computing a ``conv2d``: its FLOPs (from the offload
    report: the partition's own, epilogue included) over its measured time.

    These are the conv layers as the model runs them — input and output in the
    layout the neighbouring partitions pass, not a one-conv build with NCHW at
    both ends.  ``repeated`` (:func:`repeated_calls`, the bmlib calls of the same
    model in the same order) adds each call's repeated time (``repeated_ms``)."""
    by_name = {p.name: p for p in report.partitions}
    bmlib_calls = [c for c in calls if _is_partition(c[0])]
    if repeated is not None and [c[0] for c in repeated] != [c[0] for c in bmlib_calls]:
        raise ValueError("repeated calls do not match the profiled calls")
    rows = []
    for i, (callee, ms, shape) in enumerate(bmlib_calls):
        info = by_name.get(callee)
        if info is None or "relax.nn.conv2d" not in info.ops or not isinstance(info.flops, int):
            continue
        row = {"partition": callee, "output": list(shape), "ms": ms,
               "flops": info.flops, "gflops": info.flops / (ms * 1e-3) / 1e9}
        if repeated is not None:
            row["repeated_ms"] = repeated[i][1]
        rows.append(row)
    return rows


def render_conv_efficiency(rows: Sequence[dict], peak: float) -> str:
    """The calls grouped by layer (output shape and FLOPs), then the whole."""
    if not rows:
        return "  no conv2d partitions"
    with_repeated = all("repeated_ms" in row for row in rows)
    groups: dict = {}
    for row in rows:
        group = groups.setdefault((str(row["output"]), row["flops"]), [0, 0.0, 0.0])
        group[0] += 1
        group[1] += row["ms"]
        group[2] += row.get("repeated_ms", 0.0)
    lines = [f"  conv2d partitions as run in the model (measured FMA peak {peak:.1f} GFLOP/s):",
             f"    {'output':<24} {'MFLOP':>8} {'calls':>5} {'ms/call':>8} {'GFLOP/s':>8} "
             f"{'%peak':>6}" + (f" {'repeated ms':>11} {'%peak':>6}" if with_repeated else "")]
    for (output, flops), (count, ms, again) in groups.items():
        gflops = flops * count / (ms * 1e-3) / 1e9
        line = (f"    {output:<24} {flops / 1e6:>8.1f} {count:>5} {ms / count:>8.3f} "
                f"{gflops:>8.1f} {100 * gflops / peak:>5.1f}%")
        if with_repeated:
            line += (f" {again / count:>11.3f} "
                     f"{100 * flops * count / (again * 1e-3) / 1e9 / peak:>5.1f}%")
        lines.append(line)
    flops = sum(r["flops"] for r in rows)
    ms = sum(r["ms"] for r in rows)
    overall = flops / (ms * 1e-3) / 1e9
    below = [(i, r) for i, r in enumerate(rows) if r["gflops"] < 0.7 * peak]
    lines.append(f"  all conv2d partitions: {flops / 1e9:.3f} GFLOP in {ms:.3f} ms = "
                 f"{overall:.1f} GFLOP/s, {100 * overall / peak:.1f}% of the measured peak; "
                 f"{len(below)} of {len(rows)} calls below 70%")
    # A layer's row is the mean of its calls: name the calls under 70 % one by one.
    for index, row in below:
        line = (f"    conv call {index + 1:>2}: {row['partition']} -> {row['output']}  "
                f"{row['ms']:.3f} ms, {100 * row['gflops'] / peak:.1f}%")
        if "repeated_ms" in row:
            line += (f" (repeated {row['repeated_ms']:.3f} ms, "
                     f"{100 * row['flops'] / (row['repeated_ms'] * 1e-3) / 1e9 / peak:.1f}%)")
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
