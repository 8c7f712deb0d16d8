"""The benchmark: latency of bmlib-relax vs. references, measured in one run.

For each model (golden Relay text with recipe-v1 weights) it reports, from the
same process and machine state: median latency and spread over repeated runs
of (a) the bmlib-relax build, (b) the plain TVM Relax build of the same import
(``tvm.compile`` default), (c) PyTorch eager on the same weights when torch is
installed, (d) ONNX Runtime and OpenVINO on an ONNX graph emitted from the same
Relay program and weights (:mod:`.onnx_export`) when they are installed, and
(e) GFLOP/s achieved against the machine's peak.  ``--scaling`` runs the whole
benchmark at one thread and at every thread, each in its own process (thread
pools are sized when they start), and reports the 1 → N speed-up.  Ratios are
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

from .models import check_model_names, default_goldens, golden_names, load_model
from .partition_profile import render_conv_efficiency
from .peak import measured_peak_gflops, nominal_peak_gflops

DEFAULT_MODELS = ("seed_reshape_conv2d_add_bn_relu", "resnet18", "mobilenet",
                  "transformer_block")
REFERENCE_COLUMNS = ("torch", "onnxruntime", "openvino")


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
    # --unpinned: per-round unpinned/pinned latency ratios of the bmlib build
    unpinned_ratios: list[float] = field(default_factory=list)

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


def time_interleaved(fns: dict[str, Callable[[], Any]], min_seconds: float,
                     min_runs: int = 10) -> tuple[dict[str, Timing], list[float]]:
    """Time two variants call by call, alternating (A, B, A, B, ...): on a shared,
    noisy machine the load drifts between two separately timed variants, while the
    two calls of a pair see nearly the same load.  Returns each variant's timing and
    the ratio second / first of every pair (read their median)."""
    (name_a, fn_a), (name_b, fn_b) = list(fns.items())[:2]
    for fn in (fn_a, fn_b):
        fn()  # warm-up (cold caches, idle worker threads)
    samples: dict[str, list[float]] = {name_a: [], name_b: []}
    start = time.perf_counter()
    while len(samples[name_a]) < min_runs or time.perf_counter() - start < min_seconds:
        for name, fn in ((name_a, fn_a), (name_b, fn_b)):
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) * 1e3)
    ratios = [b / a for a, b in zip(samples[name_a], samples[name_b])]
    timings = {}
    for name, values in samples.items():
        ordered = sorted(values)
        pick = lambda q: ordered[min(int(q * len(ordered)), len(ordered) - 1)]  # noqa: E731
        timings[name] = Timing(statistics.median(ordered), pick(0.1), pick(0.9), len(ordered))
    return timings, ratios


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


def _first(out: Any) -> np.ndarray:
    """The first output as numpy (a model's tuple, a runner's list or a VM's Array)."""
    if hasattr(out, "numpy"):
        return out.numpy()
    if isinstance(out, np.ndarray):
        return out
    return _first(out[0])


def bench_model(name: str, goldens: Path, corpus: Optional[Path], target: Any,
                with_torch: bool, min_seconds: float, runtimes: Sequence[str] = (),
                threads: int = 1, unpinned: bool = False, merge: bool = False) -> ModelResult:
    """Compile and time one model with bmlib, the plain build and every reference.

    ``unpinned``: a model whose inputs have dynamic (``?``) dims is also built
    without pinning them, and both bmlib builds are timed in alternating rounds on
    the same (pinned-shape) inputs (``bmlib_unpinned``, ``unpinned_ratios``).
    ``merge``: the bmlib builds merge neighbouring composites (``compile(merge=True)``)."""
    import tvm
    from tvm import relax

    import bmlib_relax
    from ..compiler import compile_plain as build_plain
    from ..relay import parse
    bench = load_model(name, goldens, corpus)
    module = parse(bench.text, source_name=bench.source)
    feed = list(bench.inputs.values())

    t0 = time.perf_counter()
    model = bmlib_relax.compile(module, bench.params, target=target,
                                input_shapes=bench.input_shapes, merge=merge)
    compile_bmlib = time.perf_counter() - t0
    t0 = time.perf_counter()
    plain_ex = build_plain(_plain_module(bench), target)
    compile_plain = time.perf_counter() - t0
    plain_vm = relax.VirtualMachine(plain_ex, tvm.cpu())
    report = model.report
    result = ModelResult(name, report.flops_total, report.flops_offloaded,
                         {"bmlib": compile_bmlib, "plain": compile_plain})

    tensors = [tvm.runtime.tensor(x) for x in feed]
    bmlib_vm = model._vm
    reference = _first(plain_vm["main"](*tensors))
    result.max_abs_diff["bmlib_vs_plain"] = float(np.abs(_first(model.warm_up(*feed))
                                                        - reference).max())
    if unpinned and bench.input_shapes:
        t0 = time.perf_counter()
        free = bmlib_relax.compile(module, bench.params, target=target, merge=merge)
        result.compile_s["bmlib_unpinned"] = time.perf_counter() - t0
        result.max_abs_diff["unpinned_vs_pinned"] = float(
            np.abs(_first(free.warm_up(*feed)) - _first(model(*feed))).max())
        free_vm = free._vm
        timings, result.unpinned_ratios = time_interleaved(
            {"bmlib": lambda: bmlib_vm["main"](*tensors),
             "bmlib_unpinned": lambda: free_vm["main"](*tensors)}, min_seconds=2 * min_seconds)
        result.timings.update(timings)
    else:
        result.timings["bmlib"] = time_it(lambda: bmlib_vm["main"](*tensors),
                                          min_seconds=min_seconds)
    result.timings["plain"] = time_it(lambda: plain_vm["main"](*tensors),
                                      min_seconds=min_seconds, min_runs=3)
    if with_torch:
        from .torch_eager import TorchEagerModel

        try:
            torch_model = TorchEagerModel(module, bench.params)
        except NotImplementedError as exc:
            print(f"{name}: no PyTorch column ({exc})", file=sys.stderr)
        else:
            torch_out = _first(torch_model(*feed))
            result.max_abs_diff["torch_vs_plain"] = float(np.abs(torch_out - reference).max())
            result.timings["torch"] = time_it(lambda: torch_model(*feed), min_seconds=min_seconds)
    if runtimes:
        from .onnx_export import relay_to_onnx
        from .runtimes import make_runner

        try:
            model_bytes = relay_to_onnx(_relay_module(bench), bench.params,
                                        name).SerializeToString()
        except NotImplementedError as exc:  # a reference we cannot build: say so, go on
            print(f"{name}: no ONNX Runtime / OpenVINO columns ({exc})", file=sys.stderr)
            runtimes = ()
        for runtime in runtimes:
            runner = make_runner(runtime, model_bytes, list(bench.inputs), threads)
            out = _first(runner(*feed))
            result.max_abs_diff[f"{runtime}_vs_plain"] = float(
                np.abs(out.astype("float64") - reference).max())
            result.timings[runtime] = time_it(lambda: runner(*feed), min_seconds=min_seconds)
    return result


def _relay_module(bench):
    """The model's Relay module, dynamic inputs pinned as for bmlib."""
    from ..relay import parse
    from ..relay.rewrite import with_input_types

    module = parse(bench.text, source_name=bench.source)
    if bench.input_shapes:
        module = with_input_types(module, {k: (v, None) for k, v in bench.input_shapes.items()})
    return module


def _plain_module(bench):
    """The unpartitioned import, for the plain build."""
    import bmlib_relax

    return bmlib_relax.import_relay(_relay_module(bench), bench.params)


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


def one_conv_model(spec: dict, weight: np.ndarray, target: Any) -> Callable[[Any], Any]:
    """The bmlib build of one conv2d (a ``conv_shapes`` entry, its weight bound as a
    constant and packed as in a full compile): the VM's ``main``, NCHW in and out."""
    import tvm
    from tvm import relax

    import bmlib_relax
    from ..compiler import build_offloaded

    x = relax.Var("x", relax.TensorType(spec["data"], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(
                x, relax.const(weight), strides=spec["strides"], padding=spec["padding"],
                groups=spec["groups"]))
        bb.emit_func_output(out)
    executable, _ = build_offloaded(bmlib_relax.partition_for_bmlib(bb.get(), target=target),
                                    target)
    return relax.VirtualMachine(executable, tvm.cpu())["main"]


def bench_conv_layers(folder: Path, target: Any, peak: float, with_torch: bool,
                      min_seconds: float, measured_peak: float = float("nan")
                      ) -> list[LayerResult]:
    """GFLOP/s of the bmlib conv2d template on each distinct conv of a golden model
    (one conv2d per build, weights packed as in a full compile; the time is a whole
    VM call, any packing and unpacking the template does included), against the
    nominal and the measured peak."""
    import tvm

    import bmlib_relax
    from ..recipe import recipe_tensor
    from ..relay import parse

    text, params, _ = _golden(folder)
    imported = bmlib_relax.import_relay(parse(text), params)
    results = []
    for spec in conv_shapes(imported):
        data_shape, weight_shape = spec["data"], spec["weight"]
        weight = recipe_tensor("w", weight_shape, "float32")
        run = one_conv_model(spec, weight, target)
        arg = tvm.runtime.tensor(recipe_tensor("x", data_shape, "float32", role="input"))
        timing = time_it(lambda: run(arg), min_seconds=min_seconds)
        flops = conv_flops(spec)
        gflops = flops / (timing.median_ms * 1e-3) / 1e9
        name = conv_layer_name(spec)
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


def conv_flops(spec: dict) -> int:
    """FLOPs of one ``conv_shapes`` entry (a multiply and an add per weight tap)."""
    n, oc, oh, ow = _conv_out(spec)
    weight = spec["weight"]
    return 2 * n * oc * oh * ow * weight[1] * weight[2] * weight[3]


def conv_layer_name(spec: dict) -> str:
    """``64x56x56 -> 128 k3x3 s2`` (and ``g<groups>`` when grouped)."""
    data, weight = spec["data"], spec["weight"]
    return (f"{data[1]}x{data[2]}x{data[3]} -> {weight[0]} k{weight[2]}x{weight[3]} "
            f"s{spec['strides'][0]}" + (f" g{spec['groups']}" if spec["groups"] > 1 else ""))


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


def conv_partitions_in_model(name: str, goldens: Path, corpus: Optional[Path], target: Any,
                             threads: int, runs: int = 20) -> list[dict]:
    """Every conv2d partition call of ``name`` as the compiled model makes it (wall
    time; process CPU time at one thread), with its GFLOP/s, and the same call repeated
    in place (``repeated_ms``): see :func:`.partition_profile.conv_efficiency`."""
    import tvm

    import bmlib_relax
    from ..relay import parse
    from .partition_profile import conv_efficiency, profile_calls, repeated_calls

    bench = load_model(name, goldens, corpus)
    model = bmlib_relax.compile(parse(bench.text), bench.params, target=target,
                                input_shapes=bench.input_shapes, num_threads=threads)
    inputs = [tvm.runtime.tensor(x) for x in bench.inputs.values()]
    model.warm_up(*bench.inputs.values())  # profile the model as a user's later calls run it
    clock = time.process_time if threads == 1 else time.perf_counter
    _, calls = profile_calls(model, inputs, runs, clock)
    return conv_efficiency(model.report, calls, repeated_calls(model, inputs, runs, clock))


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


def _ms(timing: Optional[Timing]) -> str:
    return f"{timing.median_ms:.2f}" if timing else "-"


def _ratio(a: Optional[Timing], b: Optional[Timing]) -> float:
    return a.median_ms / b.median_ms if a and b else float("nan")


def best_reference(result: ModelResult) -> Optional[str]:
    """The faster of ONNX Runtime and OpenVINO for this model (the goal's yardstick)."""
    timed = [k for k in ("onnxruntime", "openvino") if k in result.timings]
    return min(timed, key=lambda k: result.timings[k].median_ms) if timed else None


def render(results: Sequence[ModelResult], peak: float, peak_note: str,
           extra: dict[str, float], measured_peak: Optional[float] = None) -> str:
    head = (f"{'model':<32} {'GFLOP':>7} {'bmlib ms':>12} {'plain ms':>9} {'torch ms':>9} "
            f"{'ORT ms':>8} {'OV ms':>8} {'plain/bmlib':>11} {'bmlib/best':>10} "
            f"{'GFLOP/s':>8} {'%peak':>6} {'compile s':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        b = r.timings.get("bmlib")
        best = best_reference(r)
        spread = f"{b.median_ms:.2f}±{(b.p90_ms - b.p10_ms) / 2:.2f}" if b else "-"
        lines.append(
            f"{r.model:<32} {r.flops / 1e9:>7.3f} {spread:>12} {_ms(r.timings.get('plain')):>9} "
            f"{_ms(r.timings.get('torch')):>9} {_ms(r.timings.get('onnxruntime')):>8} "
            f"{_ms(r.timings.get('openvino')):>8} {_ratio(r.timings.get('plain'), b):>11.2f} "
            f"{_ratio(b, r.timings.get(best) if best else None):>10.2f} "
            f"{r.gflops('bmlib'):>8.1f} {100 * r.gflops('bmlib') / peak:>5.1f}% "
            f"{r.compile_s.get('bmlib', float('nan')):>9.2f}")
    lines.append(f"peak fp32: {peak:.0f} GFLOP/s nominal ({peak_note})")
    if measured_peak:
        lines.append(f"peak fp32: {measured_peak:.0f} GFLOP/s measured (vector FMAs only, "
                     "best of 1 s, same threads)")
    for name, seconds in extra.items():
        lines.append(f"compile time {name}: {seconds:.2f} s")
    for r in results:
        free, pinned = r.timings.get("bmlib_unpinned"), r.timings.get("bmlib")
        if free and pinned:
            ratios = sorted(r.unpinned_ratios)
            q = lambda f: ratios[min(int(f * len(ratios)), len(ratios) - 1)]  # noqa: E731
            lines.append(
                f"{r.model} unpinned (dynamic dims symbolic) {free.median_ms:.2f} ms vs pinned "
                f"{pinned.median_ms:.2f} ms (alternating calls, {free.runs} each): "
                f"unpinned/pinned median of pair ratios {statistics.median(ratios):.3f} "
                f"(p10 {q(0.1):.3f}, p90 {q(0.9):.3f}), of medians {_ratio(free, pinned):.3f}; "
                f"max abs diff {r.max_abs_diff['unpinned_vs_pinned']:.2e}; "
                f"compile {r.compile_s['bmlib_unpinned']:.1f} s vs {r.compile_s['bmlib']:.1f} s")
    return "\n".join(lines)


def render_scaling(runs: dict[int, list[dict]]) -> str:
    """Latency at 1 and N threads per model and variant, and N-thread / 1-thread."""
    counts = sorted(runs)
    low, high = counts[0], counts[-1]
    by_model = {t: {r["model"]: r for r in results} for t, results in runs.items()}
    variants = ["bmlib", "onnxruntime", "openvino", "torch"]
    head = f"{'model':<32} {'variant':<12} " + " ".join(f"{str(t) + ' thr ms':>10}" for t in counts) \
        + f" {f'{high}/{low} thr':>10}"
    lines = [head, "-" * len(head)]
    for model in by_model[low]:
        for variant in variants:
            times = [by_model[t].get(model, {}).get("timings", {}).get(variant) for t in counts]
            if not all(times):
                continue
            cells = " ".join(f"{t['median_ms']:>10.2f}" for t in times)
            lines.append(f"{model:<32} {variant:<12} {cells} "
                         f"{times[-1]['median_ms'] / times[0]['median_ms']:>10.2f}")
    return "\n".join(lines)


def _scaling(argv: Sequence[str], counts: Sequence[int], json_path: Optional[str] = None) -> int:
    """Run this benchmark once per thread count, each in a fresh process, then compare.
    ``json_path``: also write ``{"scaling": {"<count>": <that run's --json document>}}``."""
    import subprocess
    import tempfile

    documents: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for count in counts:
            out = Path(folder) / f"bench_{count}.json"
            print(f"=== {count} thread(s) ===", flush=True)
            env = dict(os.environ, TVM_NUM_THREADS=str(count))
            code = subprocess.call([sys.executable, "-m", "bmlib_relax.bench.harness", *argv,
                                    "--threads", str(count), "--json", str(out)], env=env)
            if code:
                return code
            documents[str(count)] = json.loads(out.read_text())
    print()
    print(render_scaling({int(count): doc["results"] for count, doc in documents.items()}))
    if json_path:
        from ..runtime import write_json_atomic  # imports tvm: only when asked

        write_json_atomic(json_path, {"scaling": documents})
    return 0


# --reference-isa: oneDNN's names for the instruction sets OpenVINO may be capped to.
REFERENCE_ISAS = {"sse41": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE"}


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """``--target`` and ``--reference-isa``, shared by the benchmark tools."""
    parser.add_argument("--target", default=None,
                        help="TVM target of the bmlib and plain builds, tvmc's spelling "
                             "(e.g. 'llvm -mcpu=znver3': AVX2 code on an AVX-512 host; "
                             "default: this CPU)")
    parser.add_argument("--reference-isa", choices=sorted(REFERENCE_ISAS), default=None,
                        help="cap OpenVINO's instruction set (oneDNN's ONEDNN_MAX_CPU_ISA), "
                             "e.g. avx2 beside --target 'llvm -mcpu=znver3' to compare AVX2 "
                             "code with AVX2 code; ONNX Runtime cannot be capped and keeps "
                             "the host's")


def apply_target_options(parser: argparse.ArgumentParser, args: argparse.Namespace
                         ) -> Optional[dict]:
    """The ``--target`` given (checked; a bad one is a usage error, exit 2), else None;
    caps OpenVINO's ISA for ``--reference-isa`` (oneDNN reads it when OpenVINO first
    runs, so this comes before any reference is made)."""
    target = None
    if args.target:
        from ..backend.target import parse_target_string, resolve_target
        from ..errors import TargetError

        try:
            target = (json.loads(args.target) if args.target.lstrip().startswith("{")
                      else parse_target_string(args.target))
            resolve_target(target)
        except (TargetError, ValueError) as exc:
            parser.error(f"--target {args.target!r}: {exc}")
    if args.reference_isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = REFERENCE_ISAS[args.reference_isa]
    return target


def _strip_option(argv: Sequence[str], option: str, takes_value: bool) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == option:
            skip = takes_value
            continue
        if item.startswith(option + "="):
            continue
        out.append(item)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="bmlib-relax bench", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS),
                        help="golden names, or resnet50 / resnet50_tf (corpus dumps) / "
                             "bert_layer (BERT-base encoder layer)")
    parser.add_argument("--goldens", type=Path, default=default_goldens(),
                        help="folder of golden cases (default $BMLIB_RELAY_GOLDEN or tests/data)")
    parser.add_argument("--corpus", default=os.environ.get("BMLIB_RELAY_CORPUS"),
                        help="Relay corpus folder, for resnet50 models and the ResNet-50 "
                             "compile time")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-runtimes", action="store_true",
                        help="skip the ONNX Runtime and OpenVINO columns")
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum time per variant")
    parser.add_argument("--layers", default="resnet18",
                        help="golden whose distinct conv2d layers are timed one by one "
                             "(default resnet18; 'none' to skip)")
    parser.add_argument("--conv-in-model", default="none",
                        help="comma-separated models whose conv2d partitions are timed as "
                             "the model runs them (every VM call timed), in GFLOP/s against "
                             "the measured FMA peak (e.g. resnet18,resnet50; default none)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--ghz", type=float, default=None,
                        help="clock for the roofline peak (default: cpu MHz of /proc/cpuinfo)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for TVM and every reference (default $TVM_NUM_THREADS, "
                             "else every CPU this process may use)")
    parser.add_argument("--unpinned", action="store_true",
                        help="also build models with dynamic (?) input dims without pinning "
                             "them, and time both bmlib builds in alternating rounds")
    parser.add_argument("--merge", action="store_true",
                        help="build the bmlib models with merged partitions (compile(merge=True))")
    parser.add_argument("--scaling", action="store_true",
                        help="run at 1 thread and at every thread (one process each) and "
                             "report the speed-up")
    add_target_options(parser)
    args = parser.parse_args(argv)
    # None: this CPU's, found after the --scaling parent hands over (no tvm there)
    target = apply_target_options(parser, args)
    if args.json:  # before the benchmark, not after it (a bad path is bad input, exit 2)
        from ..errors import ParamError
        from ..preflight import writable_file

        try:
            writable_file(args.json, "--json")
        except ParamError as exc:
            parser.error(str(exc))
    goldens = args.goldens
    corpus = Path(args.corpus) if args.corpus else None
    in_model_names = [m for m in args.conv_in_model.split(",") if m and m != "none"]
    check_model_names(parser, list(args.models) + in_model_names, goldens, corpus)

    if args.layers != "none" and args.layers not in golden_names(goldens):
        parser.error(f"--layers {args.layers!r}: no such golden case in {goldens}")

    # Every CPU as the compiled model counts them by default (affinity, cgroup quota).
    from ..threads import available_cpus, configure_current_thread

    if args.scaling:
        rest = _strip_option(_strip_option(_strip_option(argv, "--scaling", False),
                                           "--threads", True), "--json", True)
        return _scaling(rest, sorted({1, available_cpus()}), args.json)

    threads = args.threads or int(os.environ.get("TVM_NUM_THREADS") or available_cpus())
    # TVM's thread pool reads this when it first starts, i.e. at the first parallel run;
    # configure_current_thread also keeps TVM from pinning this thread to one CPU.
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import tvm

    configure_current_thread(threads)

    target = target or host_target()
    with_torch = not args.no_torch
    if with_torch:
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:
            print("torch not installed: skipping the PyTorch column "
                  "(pip install 'bmlib-relax[bench]')", file=sys.stderr)
            with_torch = False
    runtimes: list[str] = []
    if not args.no_runtimes:
        from .runtimes import available_runtimes

        runtimes = available_runtimes()
        missing = {"onnxruntime", "openvino"} - set(runtimes)
        if missing:
            print(f"not installed, no column: {', '.join(sorted(missing))} "
                  "(pip install 'bmlib-relax[bench]')", file=sys.stderr)
    results = []
    for name in args.models:
        print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
        results.append(bench_model(name, goldens, corpus, target, with_torch, args.seconds,
                                   runtimes, threads, unpinned=args.unpinned,
                                   merge=args.merge))
    peak, note = nominal_peak_gflops(threads, args.ghz)
    print("measuring the FMA peak ...", file=sys.stderr, flush=True)
    measured = measured_peak_gflops(threads, target, seconds=min(args.seconds, 1.0))
    layers: list[LayerResult] = []
    if args.layers != "none":
        print(f"benchmarking the conv2d layers of {args.layers} ...", file=sys.stderr, flush=True)
        layers = bench_conv_layers(goldens / args.layers, target, peak, with_torch,
                                   min(args.seconds, 1.0), measured)
    in_model = {}
    for name in in_model_names:
        print(f"profiling the conv2d partitions of {name} ...", file=sys.stderr, flush=True)
        in_model[name] = conv_partitions_in_model(name, goldens, corpus, target, threads)
    extra = {}
    if corpus:
        resnet50 = corpus / "external" / "001_resnet50_pytorch_3la.relay"
        if resnet50.exists():
            print("compiling ResNet-50 ...", file=sys.stderr, flush=True)
            extra["ResNet-50 (import+partition+codegen+build)"] = compile_time(resnet50, target)
    runtime_threads = configure_current_thread(threads)
    print(f"target {json.dumps(target)}, {threads} thread(s) (TVM runtime: {runtime_threads}), "
          f"tvm {tvm.__version__}")
    if args.reference_isa:
        print(f"OpenVINO capped to {args.reference_isa} (ONEDNN_MAX_CPU_ISA="
              f"{REFERENCE_ISAS[args.reference_isa]}); ONNX Runtime runs the host's ISA")
    print(render(results, peak, note, extra, measured))
    if layers:
        print()
        print(render_layers(args.layers, layers))
    for name, rows in in_model.items():
        print()
        print(f"{name}:")
        print(render_conv_efficiency(rows, measured))
    if args.json:
        from ..runtime import write_json_atomic

        write_json_atomic(args.json, {"target": target, "threads": threads,
                                      "peak_gflops": peak,
                                      "measured_peak_gflops": measured,
                                      "results": [asdict(r) for r in results],
                                      "compile_s": extra,
                                      "conv_layers": {"model": args.layers,
                                                      "layers": [asdict(r) for r in layers]},
                                      "conv_in_model": in_model})
    return 0


if __name__ == "__main__":
    sys.exit(main())
