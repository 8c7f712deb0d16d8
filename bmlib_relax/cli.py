"""The ``bmlib-relax`` command line: a thin layer over the library.

Exit codes: 0 ok, 1 the equivalence check failed, 2 bad input (a missing file,
malformed Relay text, an unsupported op, a bad ``--inputs`` spec, a pattern or
lowering module that raises ...), 3 an internal error.  On failure the first
line on stderr is the cause; details (source line and caret) follow.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from typing import Optional, Sequence

import numpy as np

from .errors import BmlibError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXAMPLE_DIR = os.path.join(os.path.dirname(__file__), "examples", "legacy_bmlib")


# --------------------------------------------------------------------------- convert
def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert, parse_input_spec
    from .progress import Progress

    specs = [parse_input_spec(s) for s in args.inputs or []]
    result = convert(args.model, args.output, params=args.params, patterns_path=args.patterns,
                     lowerings_path=args.lowerings, inputs=specs, merge=args.merge,
                     check=args.check, target=args.target, rtol=args.rtol, atol=args.atol,
                     progress=Progress(False if args.quiet else None),
                     partition_fn=args.partition_fn)
    _print_summary(result.report, args.quiet)
    print(f"wrote {', '.join(sorted(os.path.basename(f) for f in result.files.values()))} "
          f"to {result.outdir}")
    return _check_exit(result.report)


def _print_summary(report: dict, quiet: bool) -> None:
    parts = report["partitions"]
    offloaded = sum(report["ops_offloaded"].values())
    host = sum(report["ops_host"].values())
    print(f"{len(parts)} bmlib partition(s), {offloaded} op(s) offloaded, {host} on host")
    if not quiet:
        for p in parts:
            print(f"  {p['name']}: {', '.join(p['composites'])} "
                  f"({p['num_params']} params -> {p['num_args']} PrimFunc args)")
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)


def _check_exit(report: dict) -> int:
    check = report.get("check")
    if check is None:
        return EXIT_OK
    worst = max(check["outputs"], key=lambda o: o["max_abs"], default=None)
    detail = f"max abs diff {worst['max_abs']:.3g}" if worst else "no outputs"
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
    return EXIT_CHECK_FAILED


# --------------------------------------------------------------------------- run
def _cmd_run(args: argparse.Namespace) -> int:
    from .errors import ParamError
    from .runtime import load

    model = load(args.artifact)
    feed = {}
    for spec in args.input or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ParamError(f"bad --input {spec!r}: expected name=file.npy")
        if not os.path.exists(path):
            raise ParamError(f"input {name!r}: file not found: {path}", name)
        feed[name] = np.load(path, allow_pickle=False)
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
                         rtol=1e-5, atol=1e-5, progress=Progress(False))
        print(result.model.report)
        status = max(status, _check_exit(result.report))
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
    conv.add_argument("--partition-fn", metavar="NAME",
                      help="run the legacy partition_for_<x>(mod, params) function NAME of the "
                           "--patterns module (its Relay passes, then its MergeComposite/"
                           "AnnotateTarget tables)")
    conv.add_argument("--lowerings", help="module with a legacy _LOWER_MAP of TE lowerings")
    conv.add_argument("--inputs", nargs="+", metavar="NAME=SHAPE:DTYPE|NAME=FILE.npy",
                      help="input shapes (recipe values) or input arrays")
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
    try:
        return args.func(args)
    except BmlibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - keep exit 1 for "check failed" only
        lines = str(exc).strip().splitlines()
        print(f"internal error: {type(exc).__name__}: {lines[-1] if lines else ''}",
              file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
