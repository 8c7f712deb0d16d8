"""The ``bmlib-relax`` command line: a thin layer over the library.

Exit codes: 0 ok, 1 the equivalence check failed, 2 bad input (a missing file,
malformed Relay text, an unsupported op, a bad ``--inputs`` spec, a pattern or
lowering module that raises ...), 3 an internal error.  On failure the first
line on stderr is the cause; details (source line and caret) follow.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import traceback
from typing import Iterator, Optional, Sequence

import numpy as np

from .errors import BmlibError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
_LISTED_INPUTS = 20  # undeclared inputs named on stderr (a model without weights has hundreds)
EXAMPLE_DIR = os.path.join(os.path.dirname(__file__), "examples", "legacy_bmlib")


# --------------------------------------------------------------------------- convert
def _cmd_convert(args: argparse.Namespace) -> int:
    from .preflight import (check_output_dir, input_file, parse_input_spec, read_model_text,
                            unique_specs)

    # Bad input is found before TVM and the compiler are imported (fast exit 2).
    specs = [parse_input_spec(s) for s in args.inputs or []]
    unique_specs(specs)
    check_output_dir(args.output, args.force)
    read_model_text(args.model)
    for path, what in ((args.params, "params file"), (args.patterns, "pattern table file"),
                       (args.lowerings, "lowerings module file")):
        if path:
            input_file(path, what)
    from .convert import convert
    from .progress import Progress

    result = convert(args.model, args.output, params=args.params, patterns_path=args.patterns,
                     lowerings_path=args.lowerings, inputs=specs, merge=args.merge,
                     check=args.check, target=args.target, rtol=args.rtol, atol=args.atol,
                     progress=Progress(False if args.quiet else None), force=args.force)
    _print_summary(result.report, args.quiet)
    print(f"wrote {', '.join(sorted(os.path.basename(f) for f in result.files.values()))} "
          f"to {result.outdir}")
    status = _check_exit(result.report)  # a failed check is the first line on stderr
    for warning in result.report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    _print_inputs(result.report)
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
    from .errors import ParamError
    from .preflight import load_input_array
    from .runtime import load

    model = load(args.artifact)
    feed = {}
    for spec in args.input or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ParamError(f"bad --input {spec!r}: expected name=file.npy")
        feed[name] = load_input_array(path, name)
    outputs = model(**feed) if model.input_names else model(*feed.values())
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for i, out in enumerate(outputs):
        print(f"out{i}: shape {tuple(out.shape)} dtype {out.dtype} "
              f"min {out.min():.6g} max {out.max():.6g} sum {out.astype(np.float64).sum():.6g}")
    if args.output:
        np.savez(args.output, **{f"out{i}": o for i, o in enumerate(outputs)})
        print(f"wrote {args.output}")
    return EXIT_OK


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
    from .backend.templates import template_ops
    from .importer import supported_ops

    print("Relay ops the importer converts:")
    print("  " + " ".join(supported_ops()))
    print("Relax ops with a bmlib TIR template:")
    print("  " + " ".join(template_ops()))
    return EXIT_OK


# --------------------------------------------------------------------------- parser
def _target_arg(text: str):
    """A target name, or a JSON target dict (TVM 0.27 refuses ``llvm -mcpu=...`` strings)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"--target is not valid JSON: {exc}") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bmlib-relax", description="Move Relay models and bmlib BYOC pipelines to Relax.")
    sub = parser.add_subparsers(dest="command", required=True)

    conv = sub.add_parser("convert", help="convert a Relay model (+ legacy pattern table) "
                                          "into Relax artifacts")
    conv.add_argument("model", help="Relay text file (mod.astext() output)")
    conv.add_argument("-o", "--output", required=True, help="output folder")
    conv.add_argument("--params", help=".params (save_param_dict) or .npz weights")
    conv.add_argument("--patterns", help="legacy pattern table module (tvm.relay syntax)")
    conv.add_argument("--lowerings", help="module with a legacy _LOWER_MAP of TE lowerings")
    conv.add_argument("--inputs", nargs="+", metavar="NAME=SHAPE:DTYPE|NAME=FILE.npy",
                      help="input shapes (recipe values) or input arrays")
    conv.add_argument("--force", action="store_true",
                      help="replace a non-empty output folder (atomically, at the end)")
    conv.add_argument("--merge", action="store_true", help="merge neighbouring composites")
    conv.add_argument("--check", action="store_true",
                      help="compare against the plain Relax build (exit 1 if it differs)")
    conv.add_argument("--rtol", type=float, default=1e-4)
    conv.add_argument("--atol", type=float, default=1e-4)
    conv.add_argument("--target", type=_target_arg, default=None,
                      help='TVM target, e.g. llvm or \'{"kind": "llvm", "mcpu": "znver3"}\' '
                           "(default: LLVM for the host CPU)")
    conv.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    conv.set_defaults(func=_cmd_convert)

    run = sub.add_parser("run", help="run a converted model.so")
    run.add_argument("artifact", help="model.so written by convert")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    run.add_argument("--output", help="write the outputs to this .npz")
    run.set_defaults(func=_cmd_run)

    demo = sub.add_parser("demo", help="convert and check the embedded seed example")
    demo.add_argument("-o", "--output", help="folder for the artifacts (default: a temp dir)")
    demo.set_defaults(func=_cmd_demo)

    # Dispatched in main() before parsing; listed here for --help.
    sub.add_parser("bench", help="benchmark against the plain Relax build and PyTorch "
                                 "(bmlib-relax bench --help)")

    ops = sub.add_parser("list-ops", help="list supported Relay ops and bmlib templates")
    ops.set_defaults(func=_cmd_list_ops)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # the benchmark has its own options (and --help)
        from .bench.harness import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    with _sigint_recorded(_interrupted_message(args)) as sigint:
        try:
            return args.func(args)
        except BaseException as exc:  # noqa: BLE001 - every way out gets its exit code
            return _exit_status(exc, args, interrupted=sigint.received)


class _SigintRecord:
    received = False


def _interrupted_message(args: argparse.Namespace) -> str:
    note = (": nothing was written (a previous output folder is left as it was)"
            if args.command == "convert" else "")
    return f"interrupted{note}"


@contextlib.contextmanager
def _sigint_recorded(message: str) -> Iterator[_SigintRecord]:
    """Ctrl-C raises ``KeyboardInterrupt`` as usual, and is also recorded: raised inside
    a Python callback that TVM's C++ code made (a pattern check, an expression
    mutator, the codegen), it comes out of the FFI as a bare ``RuntimeError``.

    ``message`` is printed at once, so it is the first line on stderr, before the
    warnings TVM's destructors print while the interrupted work unwinds.
    """
    record = _SigintRecord()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield record
        return

    def on_sigint(signum, frame):
        if not record.received:
            record.received = True
            print(message, file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield record
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_status(exc: BaseException, args: argparse.Namespace, interrupted: bool) -> int:
    """The exit code of a command that raised ``exc``; prints its cause first on stderr."""
    if interrupted:  # the SIGINT handler printed the message
        return EXIT_INTERRUPTED
    if isinstance(exc, KeyboardInterrupt):
        print(_interrupted_message(args), file=sys.stderr)
        return EXIT_INTERRUPTED
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
