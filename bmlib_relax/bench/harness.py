"""The benchmark: latency of bmlib-relax vs. references, measured in one run.

For each model (golden Relay text with recipe-v1 weights) it reports, from the
same process and machine state: median latency and spread over repeated runs
of (a) the bmlib-relax build, (b) the plain TVM Relax build of the same import
(``tvm.compile`` default), (c) PyTorch eager on the same weights when torch is
installed, and (d) GFLOP/s achieved against the machine's peak.  Ratios are
what to read: absolute numbers move with the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .peak import measured_peak_gflops, nominal_peak_gflops

DEFAULT_MODELS = ("seed_reshape_conv2d_add_bn_relu", "resnet18", "mobilenet",
                  "transformer_block")


@dataclass
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int


@dataclass
class ModelResult:
    model: str
    flops: int
    flops_offloaded: int
    compile_s: dict[str, float] = field(default_factory=dict)
    timings: dict[str, Timing] = field(default_factory=dict)
    max_abs_diff: dict[str, float] = field(default_factory=dict)

    def gflops(self, variant: str) -> float:
        t = self.timings.get(variant)
        return self.flops / (t.median_ms * 1e-3) / 1e9 if t else float("nan")


def time_it(fn: Callable[[], Any], min_runs: int = 5, min_seconds: float = 1.0,
            max_runs: int = 5000, warmup_seconds: float = 0.2) -> Timing:
    """Median and 10th/90th percentile of wall time in the steady state.

    Calls during the first ``warmup_seconds`` (at least one) are not counted: right
    after a build, the first milliseconds of a small kernel run up to twice as slow
    (cold caches and pages, idle worker threads), which would otherwise be all a
    sub-millisecond layer is measured on.  Sampling then lasts ``min_seconds``.
    """
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < warmup_seconds:
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or
                                       time.perf_counter() - start < min_seconds):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    pick = lambda q: samples[min(int(q * len(samples)), len(samples) - 1)]  # noqa: E731
    return Timing(statistics.median(samples), pick(0.1), pick(0.9), len(samples))


def host_target() -> dict:
    """LLVM for this CPU (``mcpu=native`` silently means generic in TVM 0.27)."""
    from ..backend.target import host_target as backend_host_target

    return backend_host_target()


def _golden(folder: Path):
    manifest = json.loads((folder / "manifest.json").read_text())
    from ..recipe import recipe_from_manifest

    return ((folder / "model.relay").read_text(),
            recipe_from_manifest(manifest["params"], "param"),
            recipe_from_manifest(manifest["inputs"], "input"))


def bench_model(folder: Path, target: Any, with_torch: bool, min_seconds: float) -> ModelResult:
    import tvm
    from tvm import relax

    import bmlib_relax
    from ..relay import parse

    text, params, inputs = _golden(folder)
    module = parse(text, source_name=str(folder / "model.relay"))
    feed = list(inputs.values())

    t0 = time.perf_counter()
    model = bmlib_relax.compile(module, params, target=target)
    compile_bmlib = time.perf_counter() - t0
    t0 = time.perf_counter()
    plain_ex = tvm.compile(bmlib_relax.import_relay(module, params), target=tvm.target.Target(target))
    compile_plain = time.perf_counter() - t0
    plain_vm = relax.VirtualMachine(plain_ex, tvm.cpu())
    report = model.report
    result = ModelResult(folder.name, report.flops_total, report.flops_offloaded,
                         {"bmlib": compile_bmlib, "plain": compile_plain})

    tensors = [tvm.runtime.tensor(x) for x in feed]
    bmlib_vm = model._vm
    reference = plain_vm["main"](*tensors)
    reference = reference.numpy() if hasattr(reference, "numpy") else reference[0].numpy()
    out = model(*feed)
    out = out if not isinstance(out, tuple) else out[0]
    result.max_abs_diff["bmlib_vs_plain"] = float(np.abs(out - reference).max())
    result.timings["bmlib"] = time_it(lambda: bmlib_vm["main"](*tensors),
                                      min_seconds=min_seconds)
    result.timings["plain"] = time_it(lambda: plain_vm["main"](*tensors),
                                      min_seconds=min_seconds, min_runs=3)
    if with_torch:
        from .torch_eager import TorchEagerModel

        torch_model = TorchEagerModel(module, params)
        torch_out = torch_model(*feed)
        torch_out = torch_out[0] if isinstance(torch_out, tuple) else torch_out
        result.max_abs_diff["torch_vs_plain"] = float(np.abs(torch_out.numpy() - reference).max())
        result.timings["torch"] = time_it(lambda: torch_model(*feed), min_seconds=min_seconds)
    return result


@dataclass
class LayerResult:
    layer: str  # "CxHxW -> OC kKxK sS"
    flops: int
    median_ms: float
    gflops: float
    percent_peak: float  # of the nominal peak
    percent_measured_peak: float
    p10_ms: float = 0.0
    p90_ms: float = 0.0
    torch_ms: Optional[float] = None


def conv_shapes(relax_mod) -> list[dict]:
    """Distinct conv2d configurations of a Relax module's ``main``, in order of appearance."""
    from tvm import relax

    found: dict[tuple, dict] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            attrs = expr.attrs
            data = [int(d) for d in expr.args[0].ty.shape.values]
            weight = [int(d) for d in expr.args[1].ty.shape.values]
            spec = {"data": data, "weight": weight, "groups": int(attrs.groups),
                    "strides": [int(v) for v in attrs.strides],
                    "padding": [int(v) for v in attrs.padding]}
            key = json.dumps(spec, sort_keys=True)
            found.setdefault(key, spec)

    relax.analysis.post_order_visit(relax_mod["main"].body, visit)
    return list(found.values())


def bench_conv_layers(folder: Path, target: Any, peak: float, with_torch: bool,
                      min_seconds: float, measured_peak: float = float("nan")
                      ) -> list[LayerResult]:
    """GFLOP/s of the bmlib conv2d template on each distinct conv of a golden model
    (one conv2d per build, weights packed as in a full compile; the time is a whole
    VM call, any packing and unpacking the template does included), against the
    nominal and the measured peak."""
    import tvm
    from tvm import relax

    import bmlib_relax
    from ..compiler import build_offloaded
    from ..recipe import recipe_tensor
    from ..relay import parse

    text, params, _ = _golden(folder)
    imported = bmlib_relax.import_relay(parse(text), params)
    results = []
    for spec in conv_shapes(imported):
        data_shape, weight_shape = spec["data"], spec["weight"]
        x = relax.Var("x", relax.TensorType(data_shape, "float32"))
        weight = recipe_tensor("w", weight_shape, "float32")
        bb = relax.BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                out = bb.emit_output(relax.op.nn.conv2d(
                    x, relax.const(weight), strides=spec["strides"], padding=spec["padding"],
                    groups=spec["groups"]))
            bb.emit_func_output(out)
        mod = bb.get()
        executable, _ = build_offloaded(
            bmlib_relax.partition_for_bmlib(mod, target=target), target)
        vm = relax.VirtualMachine(executable, tvm.cpu())
        arg = tvm.runtime.tensor(recipe_tensor("x", data_shape, "float32", role="input"))
        timing = time_it(lambda: vm["main"](arg), min_seconds=min_seconds)
        n, oc, oh, ow = _conv_out(spec)
        flops = 2 * n * oc * oh * ow * weight_shape[1] * weight_shape[2] * weight_shape[3]
        gflops = flops / (timing.median_ms * 1e-3) / 1e9
        name = (f"{data_shape[1]}x{data_shape[2]}x{data_shape[3]} -> {weight_shape[0]} "
                f"k{weight_shape[2]}x{weight_shape[3]} s{spec['strides'][0]}"
                + (f" g{spec['groups']}" if spec["groups"] > 1 else ""))
        torch_ms = None
        if with_torch:
            import torch

            tx = torch.from_numpy(recipe_tensor("x", data_shape, "float32", role="input"))
            tw = torch.from_numpy(weight)
            pad = spec["padding"][:2]
            with torch.no_grad():
                torch_ms = time_it(lambda: torch.nn.functional.conv2d(
                    tx, tw, stride=spec["strides"], padding=pad, groups=spec["groups"]),
                    min_seconds=min_seconds).median_ms
        results.append(LayerResult(name, flops, timing.median_ms, gflops,
                                   100 * gflops / peak, 100 * gflops / measured_peak,
                                   timing.p10_ms, timing.p90_ms, torch_ms))
    return results


def _conv_out(spec) -> list[int]:
    n, _, h, w = spec["data"]
    oc, _, kh, kw = spec["weight"]
    top, left, bottom, right = spec["padding"]
    return [n, oc, (h + top + bottom - kh) // spec["strides"][0] + 1,
            (w + left + right - kw) // spec["strides"][1] + 1]


def render_layers(model: str, layers: Sequence[LayerResult]) -> str:
    head = (f"{'conv2d layer (' + model + ')':<34} {'GFLOP':>7} {'ms':>14} {'GFLOP/s':>8} "
            f"{'%nominal':>8} {'%measured':>9} {'torch ms':>9}")
    lines = [head, "-" * len(head)]
    for r in layers:
        torch_ms = f"{r.torch_ms:.3f}" if r.torch_ms is not None else "-"
        spread = f"{r.median_ms:.3f}±{(r.p90_ms - r.p10_ms) / 2:.3f}"
        lines.append(f"{r.layer:<34} {r.flops / 1e9:>7.3f} {spread:>14} {r.gflops:>8.1f} "
                     f"{r.percent_peak:>7.1f}% {r.percent_measured_peak:>8.1f}% {torch_ms:>9}")
    return "\n".join(lines)


def compile_time(path: Path, target: Any) -> float:
    """Seconds for import + partition + codegen + build of a corpus model (free weights)."""
    import bmlib_relax
    from ..recipe import recipe_tensor
    from ..relay import parse

    start = time.perf_counter()
    module = parse(path.read_text(), source_name=str(path))
    main = module["main"]
    params = {v.name: recipe_tensor(v.name, v.type_annotation.shape, v.type_annotation.dtype)
              for v in main.params[1:]}
    bmlib_relax.compile(module, params, target=target)
    return time.perf_counter() - start


def render(results: Sequence[ModelResult], peak: float, peak_note: str,
           extra: dict[str, float], measured_peak: Optional[float] = None) -> str:
    head = (f"{'model':<34} {'GFLOP':>7} {'bmlib ms':>12} {'plain ms':>10} {'torch ms':>10} "
            f"{'plain/bmlib':>11} {'bmlib/torch':>11} {'GFLOP/s':>8} {'%peak':>6} {'compile s':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        b, p, t = (r.timings.get(k) for k in ("bmlib", "plain", "torch"))
        fmt = lambda x: f"{x.median_ms:.2f}" if x else "-"  # noqa: E731
        spread = f"{b.median_ms:.2f}±{(b.p90_ms - b.p10_ms) / 2:.2f}" if b else "-"
        lines.append(
            f"{r.model:<34} {r.flops / 1e9:>7.3f} {spread:>12} {fmt(p):>10} {fmt(t):>10} "
            f"{p.median_ms / b.median_ms if p and b else float('nan'):>11.2f} "
            f"{b.median_ms / t.median_ms if t and b else float('nan'):>11.2f} "
            f"{r.gflops('bmlib'):>8.1f} {100 * r.gflops('bmlib') / peak:>5.1f}% "
            f"{r.compile_s.get('bmlib', float('nan')):>9.2f}")
    lines.append(f"peak fp32: {peak:.0f} GFLOP/s nominal ({peak_note})")
    if measured_peak:
        lines.append(f"peak fp32: {measured_peak:.0f} GFLOP/s measured (vector FMAs only, "
                     "best of 1 s, same threads)")
    for name, seconds in extra.items():
        lines.append(f"compile time {name}: {seconds:.2f} s")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bmlib-relax bench", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--goldens", default=os.environ.get("BMLIB_RELAY_GOLDEN"),
                        help="folder of golden cases (default $BMLIB_RELAY_GOLDEN or tests/data)")
    parser.add_argument("--corpus", default=os.environ.get("BMLIB_RELAY_CORPUS"),
                        help="Relay corpus folder, for the ResNet-50 compile time")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum time per variant")
    parser.add_argument("--layers", default="resnet18",
                        help="golden whose distinct conv2d layers are timed one by one "
                             "(default resnet18; 'none' to skip)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--ghz", type=float, default=None,
                        help="clock for the roofline peak (default: cpu MHz of /proc/cpuinfo)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for TVM and torch (default $TVM_NUM_THREADS, else "
                             "every CPU); TVM's own default leaves cores idle on some VMs")
    args = parser.parse_args(argv)

    threads = args.threads or int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)
    # TVM's thread pool reads this when it first starts, i.e. at the first parallel run.
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import tvm

    goldens = Path(args.goldens) if args.goldens else \
        Path(__file__).resolve().parents[2] / "tests" / "data"
    target = host_target()
    with_torch = not args.no_torch
    if with_torch:
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:
            print("torch not installed: skipping the PyTorch column "
                  "(pip install 'bmlib-relax[bench]')", file=sys.stderr)
            with_torch = False
    results = []
    for name in args.models:
        print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
        results.append(bench_model(goldens / name, target, with_torch, args.seconds))
    peak, note = nominal_peak_gflops(threads, args.ghz)
    print("measuring the FMA peak ...", file=sys.stderr, flush=True)
    measured = measured_peak_gflops(threads, target, seconds=min(args.seconds, 1.0))
    layers: list[LayerResult] = []
    if args.layers != "none" and (goldens / args.layers / "manifest.json").exists():
        print(f"benchmarking the conv2d layers of {args.layers} ...", file=sys.stderr, flush=True)
        layers = bench_conv_layers(goldens / args.layers, target, peak, with_torch,
                                   min(args.seconds, 1.0), measured)
    extra = {}
    if args.corpus:
        resnet50 = Path(args.corpus) / "external" / "001_resnet50_pytorch_3la.relay"
        if resnet50.exists():
            print("compiling ResNet-50 ...", file=sys.stderr, flush=True)
            extra["ResNet-50 (import+partition+codegen+build)"] = compile_time(resnet50, target)
    runtime_threads = int(tvm.runtime.num_threads())
    print(f"target {json.dumps(target)}, {threads} thread(s) (TVM runtime: {runtime_threads}), "
          f"tvm {tvm.__version__}")
    print(render(results, peak, note, extra, measured))
    if layers:
        print()
        print(render_layers(args.layers, layers))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"target": target, "threads": threads, "peak_gflops": peak,
                       "measured_peak_gflops": measured,
                       "results": [asdict(r) for r in results], "compile_s": extra,
                       "conv_layers": {"model": args.layers,
                                       "layers": [asdict(r) for r in layers]}},
                      handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
