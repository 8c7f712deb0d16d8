#!/usr/bin/env python
"""Convert a legacy Relay bmlib pipeline into Relax artifacts.

The same code as ``bmlib-relax convert`` (see ``--help``)::

    python scripts/convert_relay_pipeline.py MODEL.relay [--params FILE] \\
        [--patterns legacy_table.py] [--lowerings legacy_lowerings.py] \\
        [--inputs name=shape:dtype ...] [--merge] [--check] -o OUTDIR
"""
import sys

from bmlib_relax.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
