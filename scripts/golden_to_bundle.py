#!/usr/bin/env python3
"""Convert vendored goldens (``tests/data/<case>``: model.relay, recipe-v1 manifest.json,
expected.npz) into golden bundles, the format ``scripts/record_relay_golden.py`` writes
and ``bmlib-relax verify`` / ``pytest --bmlib-golden`` read.

    python scripts/golden_to_bundle.py tests/data/op_dense tests/data/mlp -o bundles/
"""
from __future__ import annotations

import argparse
import os
import sys

from bmlib_relax.verify_bundle import bundle_from_golden


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("goldens", nargs="+", help="golden folders (tests/data layout)")
    parser.add_argument("-o", "--output", required=True, help="folder to write bundles into")
    args = parser.parse_args(argv)
    for golden in args.goldens:
        out = bundle_from_golden(golden, os.path.join(args.output,
                                                      os.path.basename(os.path.normpath(golden))))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
