"""Progress lines for the long steps of a conversion (parse, import, codegen, build).

Shown on a terminal only: when stderr is not a TTY, or with ``quiet``, nothing
is printed, so logs and pipes stay clean (``enabled=True``, the CLI's
``--progress``, forces them).  Each step is also logged (``logging`` INFO,
``bmlib-relax -v``).
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Iterator, Optional, TextIO


class Progress:
    def __init__(self, enabled: Optional[bool] = None, stream: Optional[TextIO] = None):
        self.stream = stream or sys.stderr
        self.enabled = (hasattr(self.stream, "isatty") and self.stream.isatty()) \
            if enabled is None else enabled

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        start = time.perf_counter()
        _log.info("%s", title)
        if self.enabled:
            print(f"{title} ...", file=self.stream, end="", flush=True)
        try:
            yield
        except BaseException:
            if self.enabled:
                print(" failed", file=self.stream, flush=True)
            raise
        _log.debug("%s: done in %.2fs", title, time.perf_counter() - start)
        if self.enabled:
            print(f" done ({time.perf_counter() - start:.2f}s)", file=self.stream, flush=True)

    def item(self, index: int, total: int, label: str) -> None:
        """One line per unit of a long step (e.g. each partition's codegen)."""
        if self.enabled:
            print(f"\n  [{index}/{total}] {label}", file=self.stream, end="", flush=True)


_log = logging.getLogger("bmlib_relax.progress")

QUIET = Progress(enabled=False)
