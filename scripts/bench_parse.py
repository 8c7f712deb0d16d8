#!/usr/bin/env python
"""Benchmark the Relay text parser on the largest corpus files.

Usage: python scripts/bench_parse.py [CORPUS_DIR_OR_FILE ...] [--top N] [--repeat R]

The corpus defaults to ``$BMLIB_RELAY_CORPUS`` or ``../shared/relay_corpus``.
Prints bytes, best-of-R seconds and MB/s per file (parse = tokenize + parse,
metadata decoding included).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bmlib_relax.relay.parser import parse  # noqa: E402


def _files(paths: list[str], top: int) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        found.extend(sorted(p.rglob("*.relay")) if p.is_dir() else [p])
    found.sort(key=lambda f: f.stat().st_size, reverse=True)
    return found[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*",
                    default=[os.environ.get("BMLIB_RELAY_CORPUS", "../shared/relay_corpus")])
    ap.add_argument("--top", type=int, default=8, help="how many of the largest files")
    ap.add_argument("--repeat", type=int, default=3, help="runs per file (best is shown)")
    args = ap.parse_args(argv)
    files = _files(args.paths, args.top)
    if not files:
        print(f"no .relay files under {args.paths}", file=sys.stderr)
        return 1
    print(f"{'file':48} {'bytes':>10} {'seconds':>9} {'MB/s':>7}")
    for f in files:
        text = f.read_text()
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            parse(text, str(f))
            best = min(best, time.perf_counter() - start)
        size = len(text.encode())
        print(f"{f.name[:48]:48} {size:>10} {best:>9.3f} {size / best / 1e6:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
