"""The ``bmlib-relax`` command line: a thin layer over the library.

Exit codes: 0 ok, 1 the equivalence check failed, 2 bad input (a missing file,
malformed Relay text, an unsupported op, a bad ``--inputs`` spec, a pattern or
lowering module that raises ...), 3 an internal error.  On failure the first
line on stderr is the cause; details (source line and caret) follow.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import traceback
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from . import interrupts
from .errors import BmlibError, BundleError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
_LISTED_INPUTS = 20  # undeclared inputs named on stderr (a model without weights has hundreds)
EXAMPLE_DIR = os.path.join(os.path.dirname(__file__), "examples", "legacy_bmlib")
log = logging.getLogger("bmlib_relax")


# --------------------------------------------------------------------------- convert
def _convert_inputs(args: argparse.Namespace) -> list:
    """``--inputs`` (name=shape:dtype, name=file.npy, file.npz) and tvmc's ``--input-shapes``."""
    from .cli_tvmc import parse_input_shapes, split_model_from_inputs
    from .preflight import InputSpec, parse_input_spec, read_npz
    from .errors import ParamError

    args.model, values = split_model_from_inputs(args.model, args.inputs)
    specs = []
    for value in values:
        if "=" not in value and value.endswith(".npz"):
            specs += [InputSpec(k, tuple(a.shape), str(a.dtype), a)
                      for k, a in read_npz(value).items()]
        else:
            specs.append(parse_input_spec(value))
    given = {s.name: s for s in specs}
    for text in args.input_shapes or []:
        for name, shape in parse_input_shapes(text):
            shape = _static_or_declared(name, shape)
            if shape is None:  # all dims dynamic: it names an input, as tvmc's did
                if name not in given:
                    specs.append(InputSpec(name))
                continue
            if name in given and given[name].shape not in (None, shape):
                raise ParamError(f"input {name!r}: --input-shapes says {list(shape)}, "
                                 f"--inputs gives {list(given[name].shape)}", name)
            if name not in given:
                specs.append(InputSpec(name, shape))
    return specs


def _static_or_declared(name: str, shape: tuple) -> Optional[tuple]:
    """An ``--input-shapes`` shape to pin, or None when every dim is dynamic (``-1``/``0``,
    tvmc's ``relay.Any()``): the input keeps the shape its declaration gives, as with
    tvmc, whose Relay frontend took ``--input-shapes`` for the names of the inputs only.
    Pinning some dims and leaving others dynamic is refused rather than done halfway."""
    from .errors import ParamError

    if all(d is not None for d in shape):
        return shape
    if shape and all(d is None for d in shape):
        return None
    raise ParamError(f"input {name!r}: --input-shapes gives dynamic dims (-1 or 0) beside "
                     f"static ones {['?' if d is None else d for d in shape]}; give every "
                     "dim, or -1 for each to keep the declared shape", name)


def _cmd_convert(args: argparse.Namespace) -> int:
    from .cli_tvmc import native_stderr_silenced
    from .preflight import (check_output_dir, input_file, read_model_text, source_file,
                            unique_specs)

    # Bad input is found before TVM and the compiler are imported (fast exit 2).
    specs = _convert_inputs(args)
    unique_specs(specs)
    check_output_dir(args.output, args.force)
    read_model_text(args.model)
    if args.params:
        input_file(args.params, "params file")
    for path, what in ((args.patterns, "pattern table file"),
                       (args.lowerings, "lowerings module file")):
        if path:
            source_file(path, what)
    log.info("inputs: %s", ", ".join(f"{s.name}={s.shape}:{s.dtype}" for s in specs) or "-")
    from .convert import convert
    from .progress import Progress

    with native_stderr_silenced(args.quiet) as stderr:
        # --progress wins over -q for the progress lines (CI logs without TVM's noise)
        progress = Progress(True if args.progress else False if args.quiet else None, stderr)
        result = convert(args.model, args.output, params=args.params,
                         patterns_path=args.patterns, lowerings_path=args.lowerings,
                         inputs=specs, merge=args.merge, check=args.check, target=args.target,
                         rtol=args.rtol, atol=args.atol, progress=progress, force=args.force,
                         partition_fn=args.partition_fn)
    _print_summary(result.report, args.quiet)
    written = ", ".join(sorted(os.path.basename(f) for f in result.files.values()))
    if result.check_passed is False:
        print(f"wrote {written} to {result.outdir} for inspection; the check failed, so "
              f"{args.output} was left as it was")
    else:
        print(f"wrote {written} to {result.outdir}")
    status = _check_exit(result.report)  # a failed check is the first line on stderr
    for warning in result.report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    _print_inputs(result.report)  # kept with -q: a missing weight is never silent
    return status


def _print_inputs(report: dict) -> None:
    """Name the model's inputs on stderr when none were declared: a params file that
    lacks a weight turns it into an input, and this is where a user sees it."""
    if report.get("declared_inputs"):
        return
    inputs = report["inputs"]
    print(f"note: no --inputs given; the model's {len(inputs)} input(s) are its parameters "
          "without a weight:", file=sys.stderr)
    for spec in inputs[:_LISTED_INPUTS]:
        print(f"  {spec['name']}: {tuple(spec['shape'])} {spec['dtype']}", file=sys.stderr)
    if len(inputs) > _LISTED_INPUTS:
        print(f"  ... and {len(inputs) - _LISTED_INPUTS} more (all in report.json); declare "
              "the real inputs with --inputs to find the missing weights", file=sys.stderr)


def _print_summary(report: dict, quiet: bool) -> None:
    parts = report["partitions"]
    offloaded = sum(report["ops_offloaded"].values())
    host = sum(report["ops_host"].values())
    print(f"{len(parts)} bmlib partition(s), {offloaded} op(s) offloaded, {host} on host")
    if not quiet:
        for p in parts:
            print(f"  {p['name']}: {', '.join(p['composites'])} "
                  f"({p['num_params']} params -> {p['num_args']} PrimFunc args)")


def _check_exit(report: dict) -> int:
    check = report.get("check")
    if check is None:
        return EXIT_OK
    worst = max(check["outputs"], key=lambda o: o["max_abs"], default=None)
    detail = f"max abs diff {worst['max_abs']:.3g}" if worst else "no outputs"
    if check.get("generated_inputs"):
        names = check["generated_inputs"]
        detail += (f"; generated inputs (recipe v1): {', '.join(names[:8])}"
                   + (f", ... ({len(names)} in all)" if len(names) > 8 else ""))
    if check["ok"]:
        print(f"check passed: matches the plain Relax build ({detail}, "
              f"rtol {check['rtol']:g}, atol {check['atol']:g})")
        return EXIT_OK
    print(f"check failed: bmlib output differs from the plain Relax build ({detail})",
          file=sys.stderr)
    div = check.get("first_divergence")
    if div:
        print(f"  first diverging intermediate: {div['binding']} from {div['producer']} "
              f"(max abs {div['max_abs']:.3g})", file=sys.stderr)
    elif check.get("localisation_error"):
        print(f"  the diverging intermediate could not be located: "
              f"{check['localisation_error']}", file=sys.stderr)
    return EXIT_CHECK_FAILED


# --------------------------------------------------------------------------- run
def _cmd_run(args: argparse.Namespace) -> int:
    from .cli_tvmc import native_stderr_silenced

    with native_stderr_silenced(args.quiet):
        return _run(args)


def _run_feed(args: argparse.Namespace, model) -> dict:
    """Inputs from ``-i file.npz``, ``--input name=file.npy|file.npz``, then ``--fill-mode``."""
    from .cli_tvmc import fill_input
    from .errors import ParamError
    from .preflight import load_input_array, read_npz

    feed: dict = {}
    given_by: dict[str, str] = {}

    def add(arrays: dict, source: str) -> None:
        """An input given by two options (``-i a.npz --input x=b.npy``) is refused: one of
        them was silently dropped."""
        for name, array in arrays.items():
            if name in given_by:
                raise ParamError(f"input {name!r} is given twice: by {given_by[name]} and by "
                                 f"{source}; give it once", name)
            given_by[name] = source
            feed[name] = array

    for path in args.inputs or []:
        add(read_npz(path), f"-i {path}")
    for spec in args.input or []:
        name, sep, path = spec.partition("=")
        if not sep and spec.endswith(".npz"):
            add(read_npz(spec), f"--input {spec}")
            continue
        if not sep or not name or not path:
            raise ParamError(f"bad --input {spec!r}: expected name=file.npy or file.npz")
        add({name: load_input_array(path, name)}, f"--input {spec}")
    if args.fill_mode:
        if not model.input_specs:
            raise ParamError(f"--fill-mode needs the input signature ({args.artifact} has no "
                             "model.json beside it)")
        rng = np.random.default_rng(0)
        for spec in model.input_specs:
            if spec["name"] not in feed:
                feed[spec["name"]] = fill_input(spec, args.fill_mode, rng)
    return feed


def _run(args: argparse.Namespace) -> int:
    from .runtime import load, named_outputs

    session = None
    if args.rpc or args.rpc_tracker or args.rpc_key:
        from .rpc import connect

        session = connect(args.rpc, args.rpc_tracker, args.rpc_key)
        log.info("running on the RPC server %s", args.rpc or f"{args.rpc_key}@{args.rpc_tracker}")
    output = _outputs_path(args.output) if args.output else None
    model = load(args.artifact, remote=session)
    feed = _run_feed(args, model)
    log.info("running %s with %s", args.artifact,
             ", ".join(f"{k}{tuple(v.shape)}:{v.dtype}" for k, v in feed.items()) or "no inputs")
    outputs = named_outputs(model(**feed) if model.input_names else model(*feed.values()))
    for name, out in outputs:
        print(f"{name}: {_output_summary(out)}")
    _print_flops(model, feed)
    if args.print_time:
        _print_time(model, feed, args.repeat, args.number)
    if output is not None:
        _save_outputs(output, outputs)
        print(f"wrote {output}")
    return EXIT_OK


def _output_summary(out: np.ndarray) -> str:
    """Shape, dtype, min/max/sum of one output; an empty one (a free dim of size 0)
    has no min or max, which numpy would raise on."""
    head = f"shape {tuple(out.shape)} dtype {out.dtype}"
    if out.size == 0:
        return f"{head} (empty)"
    return (f"{head} min {out.min():.6g} max {out.max():.6g} "
            f"sum {out.astype(np.float64).sum():.6g}")


def _outputs_path(path: str) -> str:
    """The ``.npz`` that ``run -o`` writes: ``path`` with ``.npz`` added unless it ends so
    (as ``np.savez`` names it, so the message and the file agree), checked writable
    before the model runs -- a bad path must not cost a run and end in a traceback."""
    from .preflight import writable_file

    return writable_file(path if path.endswith(".npz") else path + ".npz", "-o")


def _save_outputs(path: str, outputs: Sequence[tuple[str, np.ndarray]]) -> None:
    """Write the named outputs to ``path`` atomically (a reader never sees half an .npz)."""
    from .runtime import atomic_write

    _write_result("-o", path, lambda: atomic_write(
        path, lambda tmp: np.savez(tmp, **dict(outputs)), suffix=".npz"))


def _write_result(option: str, path: str, write: Callable[[], Any]) -> None:
    """Run ``write`` (an atomic write of a command's result to ``path``); a write that
    fails anyway (disk full) is bad input naming ``option`` and the file, not a
    traceback after all the work."""
    from .errors import ParamError

    try:
        write()
    except OSError as exc:
        raise ParamError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


def _print_flops(model, feed: dict) -> None:
    """The FLOPs of this run (formulas of the symbolic dims evaluated for these inputs),
    when the artifact records them."""
    flops_of = getattr(model, "flops", None)  # a remote (RPC) model has no metadata here
    flops = flops_of(**feed) if flops_of is not None and model.input_names else None
    if flops is None:
        return
    dims = ", ".join(f"{k}={v}" for k, v in sorted(flops["dims"].items()))
    print(f"FLOPs: {flops['total']:,} ({flops['offloaded']:,} on bmlib)"
          + (f" for {dims}" if dims else ""))


def _print_time(model, feed: dict, repeat: int, number: int) -> None:
    """tvmc's summary, measured with TVM's ``time_evaluator`` on the VM's ``main``."""
    import tvm

    arrays = model._arrange((), feed) if model.input_names else list(feed.values())
    # (already C-contiguous; np.ascontiguousarray would make a 0-d input shape (1,))
    tensors = [tvm.runtime.tensor(np.require(a, requirements="C"), model.device)
               for a in arrays]
    model.huge_pages.wait()  # the run before placed the weights; time what later runs get
    timer = model._vm.time_evaluator("main", model.device, number=number, repeat=repeat)
    results_ms = np.array(timer(*tensors).results) * 1e3
    print("Execution time summary:")
    print(f" {'mean (ms)':>10} {'median (ms)':>12} {'max (ms)':>10} {'min (ms)':>10} "
          f"{'std (ms)':>10}")
    print(f" {results_ms.mean():10.4f} {np.median(results_ms):12.4f} {results_ms.max():10.4f} "
          f"{results_ms.min():10.4f} {results_ms.std():10.4f}")


# --------------------------------------------------------------------------- verify
def _cmd_verify(args: argparse.Namespace) -> int:
    """Every bundle: PASS/FAIL line; exit 1 if one differs, 2 if one is damaged."""
    from .cli_tvmc import native_stderr_silenced
    from .verify_bundle import find_bundles, read_bundle, verify_bundle

    status = EXIT_OK
    results = []
    if args.json:
        from .preflight import writable_file

        writable_file(args.json, "--json")
    bundles = find_bundles(args.bundles)
    if not bundles:
        raise BundleError(f"no golden bundle found under {', '.join(args.bundles)}")
    for path in bundles:
        try:
            with native_stderr_silenced(args.quiet):
                result = verify_bundle(read_bundle(path), rtol=args.rtol, atol=args.atol,
                                       merge=args.merge, target=args.target)
        except BmlibError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = max(status, EXIT_BAD_INPUT)
            results.append({"path": str(path), "ok": False, "error": str(exc)})
            continue
        print(result.summary(), file=sys.stdout if result.ok else sys.stderr)
        results.append(result.to_dict())
        if not result.ok:
            status = max(status, EXIT_CHECK_FAILED)
    if args.json:
        from .runtime import write_json_atomic

        _write_result("--json", args.json, lambda: write_json_atomic(args.json, results))
    return status


# --------------------------------------------------------------------------- demo
def _cmd_demo(args: argparse.Namespace) -> int:
    """The seed pipeline through ``convert``, with both legacy pattern variants."""
    from .convert import convert
    from .progress import Progress

    print("bmlib-relax demo: the Relay bmlib pipeline that failed with "
          "'num_args should be 8' (reshape + conv2d + add + batch_norm + relu)\n")
    outroot = args.output or tempfile.mkdtemp(prefix="bmlib-relax-demo-")
    variants = [
        ("variant 1: all-wildcard pattern", "bmlib_patterns_wildcard.py"),
        ("variant 2: is_constant() weights, with a legacy check function", "bmlib_patterns.py"),
    ]
    status = EXIT_OK
    for index, (title, table) in enumerate(variants, 1):
        print(f"== {title} ==")
        result = convert(os.path.join(EXAMPLE_DIR, "model.relay"),
                         os.path.join(outroot, f"variant{index}"),
                         params=os.path.join(EXAMPLE_DIR, "params.npz"),
                         patterns_path=os.path.join(EXAMPLE_DIR, table), check=True,
                         rtol=1e-5, atol=1e-5, progress=Progress(False), force=True)
        print(result.model.report)
        status = max(status, _check_exit(result.report))
        for warning in result.report["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"artifacts: {result.outdir}\n")
    print("OK: both variants offload the whole graph and match the unoffloaded build"
          if status == EXIT_OK else "MISMATCH: see above")
    return status


def _cmd_list_ops(args: argparse.Namespace) -> int:
    from .op_map import op_table

    table = op_table()
    if args.json:
        print(json.dumps(table, indent=1))
        return EXIT_OK
    width = max(len(row["relay"]) for row in table["relay_ops"])
    print("Relay op -> Relax op(s) [bmlib template: yes/no]")
    for row in table["relay_ops"]:
        relax_ops = ", ".join(f"{o['op']} [{'bmlib' if o['bmlib_template'] else 'host'}]"
                              for o in row["relax"]) or "(no Relax op: rewritten away)"
        print(f"  {row['relay']:<{width}}  {relax_ops}")
    print("Relax ops with a bmlib TIR template:")
    print("  " + " ".join(table["bmlib_templates"]))
    return EXIT_OK


# --------------------------------------------------------------------------- parser
def _target_arg(text: str):
    """A target name, or a JSON target dict (TVM 0.27 refuses ``llvm -mcpu=...`` strings)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"--target is not valid JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:  # too deep, a number too long for int()
            from .preflight import json_problem

            raise argparse.ArgumentTypeError(f"--target is not valid JSON: "
                                             f"{json_problem(exc)}") from None
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


class _VersionAction(argparse.Action):
    """``--version``: imports TVM only when asked."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .versions import version_text

        print(version_text())
        parser.exit()


def _verbose_parent() -> argparse.ArgumentParser:
    """``-v`` accepted after the subcommand too (``bmlib-relax convert -v ...``)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="log what happens (-vv: debug)")
    return parent


def tolerance(text: str) -> float:
    """A ``--rtol``/``--atol`` value: a finite number >= 0 (a negative or NaN tolerance
    made every check fail and blamed a partition for it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a tolerance is a finite number >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bmlib-relax", description="Move Relay models and bmlib BYOC pipelines to Relax.")
    parser.add_argument("--version", action=_VersionAction,
                        help="print bmlib-relax, apache-tvm and LLVM versions")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what happens (-vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True)

    conv = sub.add_parser("convert", parents=[_verbose_parent()], help="convert a Relay model (+ legacy pattern table) "
                                          "into Relax artifacts")
    conv.add_argument("model", nargs="?", help="Relay text file (mod.astext() output)")
    conv.add_argument("-o", "--output", required=True, help="output folder")
    conv.add_argument("--params", help=".params (save_param_dict) or .npz weights")
    conv.add_argument("--patterns", help="legacy pattern table module (tvm.relay syntax)")
    conv.add_argument("--partition-fn", metavar="NAME",
                      help="run the legacy partition_for_<x>(mod, params) function NAME of the "
                           "--patterns module (its Relay passes, then its MergeComposite/"
                           "AnnotateTarget tables)")
    conv.add_argument("--lowerings", help="module with a legacy _LOWER_MAP of TE lowerings")
    conv.add_argument("--inputs", nargs="+", metavar="NAME=SHAPE:DTYPE|NAME=FILE.npy|FILE.npz",
                      help="input shapes (recipe values) or input arrays")
    conv.add_argument("--input-shapes", action="append", metavar='"NAME:[D1,D2,...] ..."',
                      help="tvmc syntax: input shapes, several separated by spaces")
    conv.add_argument("--force", action="store_true",
                      help="replace a non-empty output folder (atomically, at the end)")
    conv.add_argument("--merge", action="store_true", help="merge neighbouring composites")
    conv.add_argument("--check", action="store_true",
                      help="compare against the plain Relax build (exit 1 if it differs)")
    conv.add_argument("--rtol", type=tolerance, default=1e-4)
    conv.add_argument("--atol", type=tolerance, default=1e-4)
    conv.add_argument("--target", type=_target_arg, default=None,
                      help='TVM target: "llvm -mcpu=skylake-avx512" or '
                           '\'{"kind": "llvm", "mcpu": "znver3"}\' '
                           "(default: LLVM for the host CPU)")
    conv.add_argument("-q", "--quiet", action="store_true",
                      help="no progress output, and no C++ log lines from TVM/LLVM")
    conv.add_argument("--progress", action="store_true",
                      help="progress lines even when stderr is not a terminal (CI logs)")
    conv.set_defaults(func=_cmd_convert)

    run = sub.add_parser("run", parents=[_verbose_parent()], help="run a converted model.so")
    run.add_argument("artifact", help="model.so written by convert")
    run.add_argument("-i", "--inputs", action="append", metavar="FILE.npz",
                     help="input arrays by name (tvmc's --inputs)")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy|FILE.npz")
    run.add_argument("-o", "--outputs", "--output", dest="output",
                     help="write the outputs (out0, out1, ...) to this .npz")
    run.add_argument("--fill-mode", choices=("zeros", "ones", "random"),
                     help="fill the inputs not given (from model.json's signature)")
    run.add_argument("--print-time", action="store_true",
                     help="time main with TVM's time_evaluator (mean/median/max/min/std ms)")
    run.add_argument("--repeat", type=_positive_int, default=10,
                     help="timed repetitions (--print-time)")
    run.add_argument("--number", type=_positive_int, default=1,
                     help="runs per repetition (--print-time)")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="no C++ log lines from TVM/LLVM")
    run.add_argument("--rpc", metavar="HOST:PORT",
                     help="run on this TVM RPC server (python -m tvm.exec.rpc_server)")
    run.add_argument("--rpc-tracker", metavar="HOST:PORT", help="get the server from a tracker")
    run.add_argument("--rpc-key", metavar="KEY", help="device key to request from the tracker")
    run.set_defaults(func=_cmd_run)

    ver = sub.add_parser("verify", parents=[_verbose_parent()], help="verify golden bundles recorded on Relay "
                                        "(scripts/record_relay_golden.py)")
    ver.add_argument("bundles", nargs="+", metavar="BUNDLE",
                     help="bundle folder, or a folder searched for bundles")
    ver.add_argument("--merge", action="store_true", help="merge neighbouring composites")
    ver.add_argument("--rtol", type=tolerance, default=None, help="override the bundle's rtol")
    ver.add_argument("--atol", type=tolerance, default=None, help="override the bundle's atol")
    ver.add_argument("--target", type=_target_arg, default=None,
                     help="TVM target (default: LLVM for the host CPU)")
    ver.add_argument("-q", "--quiet", action="store_true",
                     help="no C++ log lines from TVM/LLVM")
    ver.add_argument("--json", metavar="FILE", help="write every bundle's result to FILE")
    ver.set_defaults(func=_cmd_verify)

    demo = sub.add_parser("demo", parents=[_verbose_parent()], help="convert and check the embedded seed example")
    demo.add_argument("-o", "--output", help="folder for the artifacts (default: a temp dir)")
    demo.set_defaults(func=_cmd_demo)

    # Dispatched in main() before parsing; listed here for --help.
    sub.add_parser("bench", help="benchmark against the plain Relax build and PyTorch "
                                 "(bmlib-relax bench --help)")

    ops = sub.add_parser("list-ops", parents=[_verbose_parent()], help="list supported Relay ops and bmlib templates")
    ops.add_argument("--json", action="store_true", help="machine-readable table")
    ops.set_defaults(func=_cmd_list_ops)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # the benchmark has its own options (and --help)
        from .bench.harness import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s",
                        level=logging.WARNING - 10 * min(getattr(args, "verbose", 0), 2))
    with _sigint_recorded(lambda: _interrupted_message(args)):
        try:
            if getattr(args, "target", None) is not None:
                from .backend.target import runnable_target

                args.target = runnable_target(args.target, "--target")
                log.info("target: %s", args.target)
            status = args.func(args)
            sys.stdout.flush()  # a closed pipe (``| head``) fails here, not at exit
            if interrupts.requested():
                # Ctrl-C came after the last write (every write asks interrupts first),
                # or a step swallowed it in a command that writes nothing.
                return _interrupted_status()
            return status
        except BaseException as exc:  # noqa: BLE001 - every way out gets its exit code
            return _exit_status(exc, args, interrupted=interrupts.requested())


def _interrupted_message(args: argparse.Namespace) -> str:
    if args.command != "convert":
        return "interrupted"
    if interrupts.published():
        return "interrupted: after the output folder was written (it is complete)"
    return "interrupted: nothing was written (a previous output folder is left as it was)"


# The signals that stop a command like Ctrl-C, with the disposition they must have for
# us to take them over (one a parent process set to "ignore" stays ignored).
_STOP_SIGNALS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))


@contextlib.contextmanager
def _sigint_recorded(message: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` as usual, and is also recorded in
    :mod:`.interrupts`: raised inside a Python callback that TVM's C++ code made (a
    pattern check, an expression mutator, the codegen), it comes out of the FFI as a
    bare ``RuntimeError``, which a step that tolerates errors may catch; the writes
    of results then refuse to go on (:func:`.interrupts.raise_if_requested`).

    SIGTERM (``kill``, ``timeout``, a CI runner cancelling a job) is handled the same
    way: by default it kills the process at once, leaving a staging folder of tens
    of MB beside the output; as an interrupt the conversion cleans up on its way out.

    ``message()`` is printed at once, so it is the first line on stderr, before the
    warnings TVM's destructors print while the interrupted work unwinds.
    """
    taken = [sig for sig, default in _STOP_SIGNALS if signal.getsignal(sig) is default] \
        if threading.current_thread() is threading.main_thread() else []
    if not taken:
        yield
        return
    # The real stderr, kept open: with -q file descriptor 2 points at /dev/null while
    # TVM runs (cli_tvmc.native_stderr_silenced), and the message must still be seen.
    sys.stderr.flush()
    real_stderr = os.fdopen(os.dup(2), "w", buffering=1)

    def on_signal(signum, frame):
        if not interrupts.requested():  # the first Ctrl-C: say so at once
            interrupts.request(signum)
            print(message(), file=real_stderr, flush=True)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in taken}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        interrupts.clear()
        real_stderr.close()


def _interrupted_status() -> int:
    """128 + the signal that stopped the command, as shells report it (130 for Ctrl-C,
    143 for SIGTERM)."""
    return 128 + interrupts.signal_number()


def _exit_status(exc: BaseException, args: argparse.Namespace, interrupted: bool) -> int:
    """The exit code of a command that raised ``exc``; prints its cause first on stderr."""
    if interrupted:  # the signal handler printed the message
        return _interrupted_status()
    if isinstance(exc, KeyboardInterrupt):
        print(_interrupted_message(args), file=sys.stderr)
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        return _stdout_closed()
    if isinstance(exc, BmlibError):
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if isinstance(exc, SystemExit):
        # Only user code (a pattern table, a lowering) can get here: our own commands
        # return their status.  Exiting 0 with nothing written would look like success.
        print(f"error: user code called sys.exit({exc.code!r}) during {args.command}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if not isinstance(exc, Exception):
        raise exc  # GeneratorExit and the like: not ours to translate
    print(f"internal error: {type(exc).__name__}: {_cause_line(exc)}", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
    return EXIT_INTERNAL


def _stdout_closed() -> int:
    """The reader of stdout went away (``bmlib-relax list-ops | head -1``): stop
    quietly, as command-line tools killed by SIGPIPE do (exit 141).  Stdout is pointed
    at /dev/null so that Python's final flush does not report the pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _cause_line(exc: BaseException) -> str:
    """The first line of an exception's message that is not traceback noise."""
    for line in str(exc).splitlines():
        text = line.strip()
        if text and not text.startswith(("Traceback", "File ")) and \
                not line.startswith((" ", "\t")):
            return text
    return ""


if __name__ == "__main__":
    sys.exit(main())
