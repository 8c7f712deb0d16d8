"""``python -m bmlib_relax`` is the ``bmlib-relax`` command."""
import sys

from .cli import main

sys.exit(main())
