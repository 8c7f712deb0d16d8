#!/usr/bin/env python
"""Benchmark bmlib-relax against the plain Relax build and PyTorch eager (see bmlib_relax.bench)."""
import sys

from bmlib_relax.bench.harness import main

if __name__ == "__main__":
    sys.exit(main())
