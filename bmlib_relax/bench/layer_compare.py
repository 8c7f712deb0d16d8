"""Per-layer comparison: each distinct conv2d of a golden model, bmlib vs ONNX Runtime / OpenVINO.

``python -m bmlib_relax.bench.layer_compare resnet18 mobilenet --threads 1``
builds, for every distinct conv2d configuration of the model, a one-convolution
model three ways (bmlib, ONNX Runtime, OpenVINO on a one-node ONNX graph with
the same weights) and times them *interleaved*: short rounds of each variant
in turn, repeated, the per-variant median of round medians kept.  On a shared
machine the load moves during a run; interleaving makes the ratios (what to
read) comparable even when the absolute numbers are not.  GFLOP/s are given
against the measured FMA peak of the same thread count (:mod:`.peak`).
``--whole`` compares whole models (any benchmark model name, e.g. ``resnet50``,
``bert_layer``) the same interleaved way; ``--scaling`` times whole models at 1 and
N threads in one process, the two counts interleaved (see :func:`compare_scaling`).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np
from .models import check_model_names, default_goldens, load_model


def _onnx_conv(spec: dict, weight: np.ndarray) -> bytes:
    """A one-node ONNX model: the conv2d ``spec`` with ``weight`` as an initializer."""
    from onnx import TensorProto, helper, numpy_helper

    n, c, h, w = spec["data"]
    top, left, bottom, right = spec["padding"]
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=spec["strides"],
                            pads=[top, left, bottom, right], group=spec["groups"])
    out = [n, weight.shape[0], (h + top + bottom - weight.shape[2]) // spec["strides"][0] + 1,
           (w + left + right - weight.shape[3]) // spec["strides"][1] + 1]
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def interleaved(fns: dict[Any, Callable[[], Any]], rounds: int = 15,
                round_seconds: float = 0.05,
                clock: Callable[[], float] = time.perf_counter,
                setup: Optional[dict[Any, Callable[[], Any]]] = None) -> dict[Any, float]:
    """Median over ``rounds`` of each variant's median call time (ms) in a round;
    the variants take turns round by round.

    ``clock`` is wall time by default; at one thread, ``time.process_time`` (CPU
    time of the whole process, every runtime's own threads included) is far
    steadier on a machine shared with other jobs, which only stretch wall time.
    ``setup[variant]``, when given, runs before each of that variant's rounds (and
    its warm-up), e.g. to size TVM's thread pool.
    """
    setup = setup or {}
    for name, fn in fns.items():  # warm up (first calls after a build run cold)
        if name in setup:
            setup[name]()
        start = time.perf_counter()
        while time.perf_counter() - start < 0.1:
            fn()
    per_round: dict[Any, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if name in setup:
                setup[name]()
            samples = []
            start = time.perf_counter()
            while len(samples) < 3 or time.perf_counter() - start < round_seconds:
                t0 = clock()
                fn()
                samples.append((clock() - t0) * 1e3)
            per_round[name].append(statistics.median(samples))
    return {k: statistics.median(v) for k, v in per_round.items()}


def compare_layers(model: str, goldens: Path, target: Any, threads: int,
                   runtimes: Sequence[str], rounds: int = 15) -> list[dict]:
    import tvm

    import bmlib_relax
    from ..recipe import recipe_tensor
    from ..relay import parse
    from .harness import _golden, conv_flops, conv_layer_name, conv_shapes, one_conv_model
    from .runtimes import make_runner

    text, params, _ = _golden(goldens / model)
    imported = bmlib_relax.import_relay(parse(text), params)
    rows = []
    for spec in conv_shapes(imported):
        weight = recipe_tensor("w", spec["weight"], "float32")
        x_np = recipe_tensor("x", spec["data"], "float32", role="input")
        x = tvm.runtime.tensor(x_np)
        bmlib_fn = one_conv_model(spec, weight, target)
        fns: dict[str, Callable[[], Any]] = {"bmlib": lambda f=bmlib_fn: f(x)}
        reference = bmlib_fn(x).numpy()
        onnx_bytes = _onnx_conv(spec, weight)
        for runtime in runtimes:
            runner = make_runner(runtime, onnx_bytes, ["x"], threads)
            np.testing.assert_allclose(runner(x_np)[0], reference, rtol=1e-3, atol=1e-3)
            fns[runtime] = lambda r=runner: r(x_np)
        clock = time.process_time if threads == 1 else time.perf_counter
        times = interleaved(fns, rounds, clock=clock)
        rows.append({"layer": conv_layer_name(spec), "flops": conv_flops(spec), "ms": times})
    return rows


class _WholeModel(NamedTuple):
    """A benchmark model built for the whole-model comparisons: the bmlib call (the VM's
    ``main`` on prepared tensors), the numpy inputs, and the ONNX graph the references
    run (emitted from the same Relay program and weights)."""
    call: Callable[[], Any]
    feed: list
    input_names: list
    onnx_bytes: bytes
    model: Any


def _whole_model(name: str, goldens: Path, corpus: Optional[Path], target: Any,
                 threads: int) -> _WholeModel:
    import tvm

    import bmlib_relax
    from ..relay import parse
    from .harness import _relay_module
    from .onnx_export import relay_to_onnx

    bench = load_model(name, goldens, corpus)
    model = bmlib_relax.compile(parse(bench.text), bench.params, target=target,
                                input_shapes=bench.input_shapes, num_threads=threads)
    feed = list(bench.inputs.values())
    tensors = [tvm.runtime.tensor(x) for x in feed]
    model.warm_up(*feed)  # what a user's second call gets: weights on huge pages
    main = model._vm["main"]
    onnx_bytes = relay_to_onnx(_relay_module(bench), bench.params, name).SerializeToString()
    return _WholeModel(lambda: main(*tensors), feed, list(bench.inputs), onnx_bytes, model)


def compare_models(names: Sequence[str], goldens: Path, corpus: Optional[Path], target: Any,
                   threads: int, runtimes: Sequence[str], rounds: int = 9) -> list[tuple]:
    """(model, {variant: ms}) of whole models: bmlib and every reference, interleaved."""
    from .runtimes import make_runner

    clock = time.process_time if threads == 1 else time.perf_counter
    rows = []
    for name in names:
        built = _whole_model(name, goldens, corpus, target, threads)
        built.model.threads.apply()  # the VM is called directly: size the pool as model() would
        fns: dict[str, Callable[[], Any]] = {"bmlib": built.call}
        for runtime in runtimes:
            fns[runtime] = lambda r=make_runner(runtime, built.onnx_bytes, built.input_names,
                                                threads): r(*built.feed)
        rows.append((name, interleaved(fns, rounds, round_seconds=0.3, clock=clock)))
    return rows


def compare_scaling(names: Sequence[str], goldens: Path, corpus: Optional[Path], target: Any,
                    threads: int, runtimes: Sequence[str], rounds: int = 9) -> list[tuple]:
    """(model, {(variant, thread count): ms}) at 1 and ``threads`` threads, measured in
    one process: rounds of every variant at both counts take turns (TVM's pool is
    resized before each bmlib round; the references have a session per count), wall
    time.  Load that comes and goes during the run then weighs on both counts alike;
    ``scripts/bench.py --scaling``, one fresh process per count minutes apart, also
    measures how the machine's load moved in between."""
    from ..threads import configure_current_thread
    from .runtimes import make_runner

    counts = (1, threads)
    rows = []
    for name in names:
        built = _whole_model(name, goldens, corpus, target, threads)
        fns: dict[tuple, Callable[[], Any]] = {}
        setup: dict[tuple, Callable[[], Any]] = {}
        for count in counts:
            fns[("bmlib", count)] = built.call
            setup[("bmlib", count)] = lambda c=count: configure_current_thread(c)
        for runtime in runtimes:
            for count in counts:
                fns[(runtime, count)] = lambda r=make_runner(runtime, built.onnx_bytes,
                                                             built.input_names, count): \
                    r(*built.feed)
        try:
            rows.append((name, interleaved(fns, rounds, round_seconds=0.3, setup=setup)))
        finally:
            configure_current_thread(threads)
    return rows


def render_scaling(rows: Sequence[tuple], threads: int) -> str:
    head = f"{'model':<14} {'variant':<12} {'1 thr ms':>9} {f'{threads} thr ms':>9} " \
        f"{f'{threads}/1 thr':>8}"
    lines = [head, "-" * len(head)]
    for name, times in rows:
        for variant in dict.fromkeys(v for v, _ in times):
            one, many = times[(variant, 1)], times[(variant, threads)]
            lines.append(f"{name:<14} {variant:<12} {one:>9.2f} {many:>9.2f} {many / one:>8.2f}")
    return "\n".join(lines)


def render(model: str, rows: Sequence[dict], peak: float, runtimes: Sequence[str]) -> str:
    head = f"{'conv2d (' + model + ')':<30} {'MFLOP':>7} {'bmlib ms':>9} " + " ".join(
        f"{r[:8] + ' ms':>11}" for r in runtimes) + f" {'bmlib/best':>10} {'GFLOP/s':>8} " \
        f"{'%peak':>6} {'best %pk':>8}"
    lines = [head, "-" * len(head)]
    for row in rows:
        t = row["ms"]
        best = min((t[r] for r in runtimes), default=float("nan"))
        gf = row["flops"] / (t["bmlib"] * 1e-3) / 1e9
        best_gf = row["flops"] / (best * 1e-3) / 1e9
        lines.append(f"{row['layer']:<30} {row['flops'] / 1e6:>7.1f} {t['bmlib']:>9.3f} " +
                     " ".join(f"{t[r]:>11.3f}" for r in runtimes) +
                     f" {t['bmlib'] / best:>10.2f} {gf:>8.1f} {100 * gf / peak:>5.1f}%"
                     f" {100 * best_gf / peak:>7.1f}%")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import os

    from .harness import add_target_options, apply_target_options, host_target
    from .peak import measured_peak_gflops
    from .runtimes import available_runtimes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=["resnet18", "mobilenet"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--goldens", type=Path, default=default_goldens(),
                        help="folder of golden cases (default $BMLIB_RELAY_GOLDEN or tests/data)")
    parser.add_argument("--corpus", default=os.environ.get("BMLIB_RELAY_CORPUS"))
    parser.add_argument("--whole", action="store_true",
                        help="compare whole models instead of their conv2d layers")
    parser.add_argument("--scaling", action="store_true",
                        help="whole models at 1 and --threads threads, interleaved in one "
                             "process (default --threads: every available CPU)")
    add_target_options(parser)
    args = parser.parse_args(argv)
    target = apply_target_options(parser, args)
    check_model_names(parser, args.models, args.goldens,
                      Path(args.corpus) if args.corpus else None)
    if args.scaling:
        from ..threads import available_cpus

        threads = args.threads if args.threads > 1 else available_cpus()
        if threads < 2:
            parser.error("--scaling needs at least 2 CPUs")
        runtimes = available_runtimes()
        print(f"whole models at 1 and {threads} threads, wall time, interleaved rounds in "
              "one process")
        print(render_scaling(compare_scaling(
            args.models, args.goldens, Path(args.corpus) if args.corpus else None,
            target or host_target(), threads, runtimes, args.rounds), threads))
        return 0
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    target = target or host_target()
    if args.whole:
        runtimes = available_runtimes()
        clock = "process CPU time" if args.threads == 1 else "wall time"
        print(f"whole models, {args.threads} thread(s), {clock}, interleaved rounds")
        for name, t in compare_models(args.models, args.goldens,
                                      Path(args.corpus) if args.corpus else None, target,
                                      args.threads, runtimes, args.rounds):
            best = min((t[r] for r in runtimes), default=float("nan"))
            print(f"{name:<14} " + "  ".join(f"{k} {v:.2f} ms" for k, v in t.items()) +
                  f"  bmlib/best {t['bmlib'] / best:.2f}")
        return 0
    peak = measured_peak_gflops(args.threads, target,
                                clock=time.process_time if args.threads == 1 else time.perf_counter)
    runtimes = available_runtimes()
    for model in args.models:
        rows = compare_layers(model, args.goldens, target, args.threads, runtimes,
                              args.rounds)
        print(render(model, rows, peak, runtimes))
        total = {k: sum(r["ms"][k] for r in rows) for k in rows[0]["ms"]}
        print("sum over distinct layers (ms): " +
              ", ".join(f"{k} {v:.3f}" for k, v in total.items()))
    print(f"measured FMA peak: {peak:.0f} GFLOP/s at {args.threads} thread(s); times are "
          + ("process CPU time" if args.threads == 1 else "wall time"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
