"""On/off environment switches of optimisations (for A/B timing).

Each optimisation that changes code generation or placement without changing results
(blocked layout, K-blocking, prefetch, huge pages, ...) has an environment variable that
turns it off (``0``, ``off``, ``false`` or ``no``); anything else, or unset, leaves it
on.  The names live next to the code they switch (``BMLIB_CONV_PREFETCH`` in
``backend/templates/conv.py``, ``BMLIB_HUGE_PAGES`` in ``hugepages.py``, ...) and are
listed in the README.  A module of its own, importing nothing of the project: the
runtime that ``load`` imports reads it too.
"""
from __future__ import annotations

import os

OFF_VALUES = ("0", "off", "false", "no")


def switched_on(name: str) -> bool:
    """Whether the optimisation switched by environment variable ``name`` is on."""
    return os.environ.get(name, "1").strip().lower() not in OFF_VALUES
