"""Where a compiled model's time goes: each VM call (bmlib partitions, VM builtins) timed.

``python -m bmlib_relax.bench.partition_profile resnet18 --threads 1`` compiles the
model through bmlib and times every call the Relax VM makes (through the VM's
instrument hook), over repeated runs: the per-call median, grouped by partition
kind, and what the calls add up to against the whole run (the rest is the VM's
own interpretation).  At one thread the clock is process CPU time, which other
jobs on a shared machine do not stretch.
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
            shapes = [tuple(a.shape) for a in call_args if hasattr(a, "shape")]
            records.append((str(name), now - started["t"], shapes[-1] if shapes else ()))
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--calls", action="store_true", help="also list every call")
    parser.add_argument("--goldens", default=os.environ.get("BMLIB_RELAY_GOLDEN",
                                                            "../shared/relay_golden"))
    parser.add_argument("--corpus", default=os.environ.get("BMLIB_RELAY_CORPUS"))
    args = parser.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tvm

    import bmlib_relax
    from ..relay import parse
    from .harness import host_target
    from .models import load_model

    clock = time.process_time if args.threads == 1 else time.perf_counter
    for name in args.models:
        bench = load_model(name, Path(args.goldens), Path(args.corpus) if args.corpus else None)
        model = bmlib_relax.compile(parse(bench.text), bench.params, target=host_target(),
                                    input_shapes=bench.input_shapes, num_threads=args.threads)
        inputs = [tvm.runtime.tensor(x) for x in bench.inputs.values()]
        whole, calls = profile_calls(model, inputs, args.runs, clock)
        partitions = [c for c in calls if c[0].endswith("_bmlib")]
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
