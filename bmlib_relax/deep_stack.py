"""Run deeply recursive work on a thread with a large C stack.

Two things recurse as deep as a Relay program nests: the Relax VM (a native call per
call of a Relax function, so a Relay loop needs a few KiB of C stack per iteration) and
the importer (Python recursion through TVM's FFI over if/let/function bodies, a few
frames per level).  On the main thread's 8 MiB either ended in a segmentation fault
(a loop of ~2500 iterations; 400 nested ``if``s once the recursion limit was raised),
where Relay's VM kept its frames on the heap.  Both run here instead, on a thread with
:data:`RECURSION_STACK_BYTES` of stack (address space only: pages are committed as the
recursion touches them).
"""
from __future__ import annotations

import contextvars
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from . import interrupts

#: The stack of the thread deep work runs on: about 100 000 iterations of a small loop
#: in the VM, or 16 000 nested ``if``s in the importer.
RECURSION_STACK_BYTES = 1 << 30

_STACK_SIZE_LOCK = threading.Lock()
_THREAD_NAME = "bmlib-deep-stack"


def _join(worker: threading.Thread) -> None:
    """Wait for ``worker``.  A Ctrl-C while waiting is recorded (:mod:`.interrupts`), so
    work that checks it stops, and waited for before ``KeyboardInterrupt`` is raised
    here: the work left running would hold the model or the compile it was doing.  A
    second Ctrl-C stops waiting."""
    try:
        worker.join()
    except KeyboardInterrupt:
        recorded = interrupts.requested()
        interrupts.request()
        try:
            worker.join()
        finally:
            if not recorded:  # a library caller's Ctrl-C: nothing later should see it
                interrupts.clear()
        raise


def on_deep_stack(run: Callable[[], Any]) -> Any:
    """``run()`` on a fresh thread with a ``RECURSION_STACK_BYTES`` stack, in a copy of
    the caller's context (its ``ContextVar`` settings); its result, or its exception
    re-raised here."""
    if threading.current_thread().name == _THREAD_NAME:
        return run()  # already on a deep stack
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome["value"] = context.run(run)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc

    with _STACK_SIZE_LOCK:  # threading.stack_size is process-wide: set, start, restore
        previous = threading.stack_size(RECURSION_STACK_BYTES)
        try:
            worker = threading.Thread(target=target, name=_THREAD_NAME, daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    _join(worker)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


_LIMIT_LOCK = threading.Lock()
_LIMIT_HOLDERS: list[int] = []  # the previous limit while blocks hold a raised one


@contextmanager
def recursion_limit(at_least: int) -> Iterator[None]:
    """Python's recursion limit raised to ``at_least`` for the block, for recursion that
    runs :func:`on_deep_stack`.  The limit is process-wide: it is restored when the
    last block holding it raised ends (compiles on several threads at once)."""
    with _LIMIT_LOCK:
        if not _LIMIT_HOLDERS:
            _LIMIT_HOLDERS.append(sys.getrecursionlimit())
        else:
            _LIMIT_HOLDERS.append(_LIMIT_HOLDERS[0])
        if sys.getrecursionlimit() < at_least:
            sys.setrecursionlimit(at_least)
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            previous = _LIMIT_HOLDERS.pop()
            if not _LIMIT_HOLDERS:
                sys.setrecursionlimit(previous)
