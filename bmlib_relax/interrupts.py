"""A Ctrl-C that the work cannot lose on its way out.

The command line turns SIGINT into ``KeyboardInterrupt`` as Python does, and also
records it here (:func:`request`).  Raised inside a Python callback that TVM's C++ code
made (the ``relax.ext.bmlib`` codegen, a pattern check, an expression mutator), the
``KeyboardInterrupt`` comes out of the FFI as a plain error, and a step that tolerates
errors (a schedule rule rolled back, a prefetch skipped) may catch it and go on: the
work then runs to its end although the user stopped it.  So the places that make
results visible -- an output folder published, a file renamed into place -- and the
loops over partitions ask :func:`raise_if_requested` first: once Ctrl-C is recorded
nothing new is written, whatever swallowed the exception.

No imports from the package: every layer may use it.
"""
from __future__ import annotations

import threading

_REQUESTED = threading.Event()
_PUBLISHED = threading.Event()
_SIGNAL = [2]  # the signal recorded (SIGINT; SIGTERM is handled alike), for the exit code


def request(signum: int = 2) -> None:
    """Record a Ctrl-C, or a ``kill``/``timeout`` (SIGTERM): the command line's signal
    handler calls this.  The first signal recorded is kept."""
    if not _REQUESTED.is_set():
        _SIGNAL[0] = signum
    _REQUESTED.set()


def signal_number() -> int:
    """The signal that stopped the command (2 for Ctrl-C): its exit code is 128 + it."""
    return _SIGNAL[0]


def clear() -> None:
    """Forget a recorded Ctrl-C and a publication (when the command ends)."""
    _REQUESTED.clear()
    _PUBLISHED.clear()
    _SIGNAL[0] = 2


def note_published() -> None:
    """Record that the command's output was made visible (a Ctrl-C after this finds it
    complete, and the message says so)."""
    _PUBLISHED.set()


def published() -> bool:
    return _PUBLISHED.is_set()


def requested() -> bool:
    return _REQUESTED.is_set()


def raise_if_requested() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C was recorded and not yet cleared."""
    if _REQUESTED.is_set():
        raise KeyboardInterrupt
