"""The ``bmlib-relax`` command line: a thin layer over the library.

It catches only bmlib-relax's own errors, prints them as one line (with the
``file:line:column`` they carry) and exits 2; exit 1 means a check failed.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import numpy as np

from .errors import BmlibError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _cmd_demo(args: argparse.Namespace) -> int:
    import tvm
    from tvm import relax

    from . import compile as bmlib_compile
    from . import import_relay
    from .examples import seed
    from .relay import parse

    print("bmlib-relax demo: the seed Relay graph (reshape + conv2d + add + batch_norm + relu)")
    module = parse(seed.SEED_RELAY, source_name="<seed example>")
    params = seed.seed_params()
    data = seed.seed_input()
    plain = tvm.compile(import_relay(module, params), target="llvm")
    reference = relax.VirtualMachine(plain, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    worst = 0.0
    variants = (("variant 1 (all wildcards)", seed.pattern_all_wildcards()),
                ("variant 2 (is_constant weights)", seed.pattern_constant_weights()))
    for title, pattern in variants:
        model = bmlib_compile(module, params, patterns=[(seed.COMPOSITE_NAME, pattern)])
        out = model(data)
        diff = float(np.abs(out - reference).max())
        worst = max(worst, diff)
        print(f"\n== legacy pattern {title} ==")
        print(model.report)
        print(f"max |bmlib - plain Relax build| = {diff:.3g}")
    tolerance = 1e-5
    ok = worst <= tolerance
    print(f"\n{'OK' if ok else 'MISMATCH'}: both variants match the unoffloaded build "
          f"within {tolerance:g}" if ok else f"\nMISMATCH: max difference {worst:g} > {tolerance:g}")
    return EXIT_OK if ok else EXIT_CHECK_FAILED


def _cmd_list_ops(args: argparse.Namespace) -> int:
    from .backend.templates import template_ops
    from .importer import supported_ops

    print("Relay ops the importer converts:")
    print("  " + " ".join(supported_ops()))
    print("Relax ops with a bmlib TIR template:")
    print("  " + " ".join(template_ops()))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bmlib-relax",
                                     description="Move Relay models and bmlib pipelines to Relax.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile and run the embedded seed example")
    demo.set_defaults(func=_cmd_demo)
    ops = sub.add_parser("list-ops", help="list supported Relay ops and bmlib templates")
    ops.set_defaults(func=_cmd_list_ops)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BmlibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
