#!/usr/bin/env python
"""Time parsing + importing a Relay model dump (default: the corpus' PyTorch ResNet-50).

    python scripts/bench_import.py [model.relay] [--runs N]

The path defaults to ``$BMLIB_RELAY_CORPUS/external/001_resnet50_pytorch_3la.relay``.
Weights stay parameters by default; ``--weights`` binds recipe-v1 tensors as
constants (generated once, outside the timing).  Prints the median.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bmlib_relax import import_relay
from bmlib_relax.relay import parse

DEFAULT = "external/001_resnet50_pytorch_3la.relay"


def _default_path() -> Path | None:
    corpus = os.environ.get("BMLIB_RELAY_CORPUS")
    return Path(corpus) / DEFAULT if corpus else None


def _recipe_weights(module) -> dict:
    from bmlib_relax.recipe import recipe_tensor

    return {p.name: recipe_tensor(p.name, p.type_annotation.shape, p.type_annotation.dtype)
            for p in module["main"].params[1:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=_default_path(),
                        help="Relay text file (default: $BMLIB_RELAY_CORPUS/" + DEFAULT + ")")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--weights", action="store_true",
                        help="bind recipe weights for every parameter but the first")
    args = parser.parse_args(argv)
    if args.path is None:
        parser.error("give a path or set BMLIB_RELAY_CORPUS")
    text = args.path.read_text()
    params = _recipe_weights(parse(text, args.path.name)) if args.weights else None
    parse_times, import_times = [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        module = parse(text, args.path.name)
        parsed = time.perf_counter()
        import_relay(module, params)
        done = time.perf_counter()
        parse_times.append(parsed - start)
        import_times.append(done - parsed)
    totals = [p + i for p, i in zip(parse_times, import_times)]
    print(f"{args.path.name}: parse {statistics.median(parse_times):.3f} s, "
          f"import {statistics.median(import_times):.3f} s, "
          f"parse+import median {statistics.median(totals):.3f} s over {args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
