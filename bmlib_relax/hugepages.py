"""Putting a compiled model's weights and activations on 2 MiB pages.

Why this exists: on hosts whose transparent huge pages are in ``madvise`` mode
(many distributions' default, and this project's benchmark machine) the memory TVM
allocates for a model's constants and for the VM's activation storage sits on
4 KiB pages: ResNet-50's 120 MB are ~30 000 pages, a TLB miss each on every run,
and the hardware prefetchers stop at every 4 KiB boundary.  A large model streams
its weights from L3 or DRAM on each run, so this is where its late layers wait.
Measured in one process, two builds with and without (interleaved, 1 thread):
ResNet-50 1-8 % faster, the BERT-base layer 3-4 %, ResNet-18 6 %, MobileNet 1-2 %.
The spread is how many pages were huge anyway, which varies from build to build
(numpy advises its own large arrays and glibc reuses that memory): 40 % of
ResNet-50's without this, 75-85 % with it.

What is done: a model's first call runs with a VM instrument that records the
tensors its calls touch (the constants, and the pooled storage the VM reuses on
every run); the call's own inputs are left out.  Then a background thread asks the
kernel to collapse the 2 MiB blocks mostly covered by those tensors into huge
pages (``madvise(MADV_COLLAPSE)``, Linux 6.1+; it works in ``madvise`` mode
without any system setting).  The contents never change, only their mapping: a
block the kernel refuses (THP ``never``, an older kernel, a block across two
mappings, no free huge page, pages being written just then) costs speed only.
Refusals are counted in :class:`HugePageReport`, never raised.

``BMLIB_HUGE_PAGES=0`` turns it off.  The thread's work (0.2-1 s of kernel time
for ResNet-50) runs beside the model's next calls; :meth:`HugePages.wait`
lets a benchmark start timing after it.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .switches import switched_on

_log = logging.getLogger(__name__)

ENV_HUGE_PAGES = "BMLIB_HUGE_PAGES"
HUGE_PAGE_BYTES = 2 << 20
MADV_COLLAPSE = 25  # linux/mman.h, since 6.1
#: Tensors smaller than this are not worth a look (their blocks are mostly other data).
MIN_TENSOR_BYTES = 64 << 10
#: A block is collapsed when the recorded tensors cover at least this much of it, so
#: that collapsing (which populates every page of the block) adds little memory.
MIN_BLOCK_COVERAGE = HUGE_PAGE_BYTES // 4
THP_ENABLED_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"
CPU_DEVICE_TYPE = 1  # DLPack kDLCPU (an RPC session's CPU has a larger number)


@dataclass
class HugePageReport:
    """What the collapse did: blocks tried, collapsed, and why others were refused."""

    tensors: int = 0
    tensor_bytes: int = 0
    blocks: int = 0
    collapsed: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # errno name -> blocks
    seconds: float = 0.0
    skipped: Optional[str] = None  # why nothing was tried

    def summary(self) -> str:
        if self.skipped:
            return f"huge pages: not used ({self.skipped})"
        refused = ", ".join(f"{n} {name}" for name, n in sorted(self.refused.items()))
        return (f"huge pages: {self.collapsed} of {self.blocks} 2 MiB blocks collapsed "
                f"({self.tensors} tensors, {self.tensor_bytes / 1e6:.1f} MB)"
                + (f"; refused: {refused}" if refused else "")
                + f" in {self.seconds:.2f} s")


def enabled_by_environment() -> bool:
    return switched_on(ENV_HUGE_PAGES)


def unavailable_reason(thp_enabled_path: str = THP_ENABLED_PATH) -> Optional[str]:
    """Why this process cannot collapse pages at all, or None."""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} has no MADV_COLLAPSE"
    try:
        with open(thp_enabled_path) as f:
            if "[never]" in f.read():
                return "transparent huge pages are disabled ([never])"
    except OSError:
        return f"{thp_enabled_path} is not readable"
    return None


def blocks_to_collapse(ranges: Iterable[tuple[int, int]],
                       block: int = HUGE_PAGE_BYTES,
                       min_coverage: int = MIN_BLOCK_COVERAGE) -> list[int]:
    """Start addresses of the ``block``-aligned blocks that the byte ranges
    ``(start, size)`` cover by at least ``min_coverage`` bytes (overlaps counted once)."""
    merged: list[list[int]] = []
    for start, size in sorted((s, n) for s, n in ranges if n > 0):
        end = start + size
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    coverage: dict[int, int] = {}
    for start, end in merged:
        first = start - start % block
        for base in range(first, end, block):
            coverage[base] = coverage.get(base, 0) + min(end, base + block) - max(start, base)
    return sorted(base for base, covered in coverage.items() if covered >= min_coverage)


def tensor_range(tensor: Any) -> Optional[tuple[int, int]]:
    """``(address, bytes)`` of a CPU tensor's data, or None for one numpy cannot view."""
    import numpy as np

    try:
        array = np.from_dlpack(tensor)  # a view: no copy
    except Exception:  # noqa: BLE001 - a dtype numpy cannot view: not ours to place
        return None
    return array.__array_interface__["data"][0], array.nbytes


def _madvise():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc.madvise


def collapse(ranges: Sequence[tuple[int, int]], madvise=None) -> HugePageReport:
    """Ask the kernel to back the blocks :func:`blocks_to_collapse` picks with huge pages."""
    report = HugePageReport(tensors=len(ranges), tensor_bytes=sum(n for _, n in ranges))
    madvise = madvise or _madvise()
    t0 = time.perf_counter()
    for base in blocks_to_collapse(ranges):
        report.blocks += 1
        if madvise(base, HUGE_PAGE_BYTES, MADV_COLLAPSE) == 0:
            report.collapsed += 1
        else:
            code = ctypes.get_errno()
            name = errno.errorcode.get(code, str(code))
            report.refused[name] = report.refused.get(name, 0) + 1
    report.seconds = time.perf_counter() - t0
    return report


class HugePages:
    """One model's huge-page placement: recorded on its first call, done in the background.

    States: ``report`` is None until the collapse has finished (or was skipped).
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and enabled_by_environment()
        self.report: Optional[HugePageReport] = None
        self._started = False
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """True until the first call has recorded what to place."""
        return self.enabled and not self._started

    def run_recording(self, vm: Any, inputs: Sequence[Any]) -> Any:
        """Run ``vm["main"](*inputs)`` recording the tensors its calls touch, then start
        collapsing their blocks in a background thread.  Returns the call's result."""
        with self._lock:
            first = not self._started
            self._started = True
        if not first:
            return vm["main"](*inputs)
        reason = unavailable_reason()
        if reason is not None:
            self.report = HugePageReport(skipped=reason)
            return vm["main"](*inputs)
        import tvm

        # Addresses, not the tensors: holding every tensor of the run would keep a
        # loop's temporaries alive.  Memory freed before the collapse is only refused.
        skip = {r for r in map(tensor_range, inputs) if r is not None}
        touched: dict[int, int] = {}

        def record(func, name, before_run, ret_value, *args):  # noqa: ARG001 - VM's signature
            if not before_run:
                return 0  # VMInstrumentReturnKind.NO_OP
            for arg in args:
                if isinstance(arg, tvm.runtime.Tensor) and \
                        arg.device.dlpack_device_type() == CPU_DEVICE_TYPE:
                    found = tensor_range(arg)
                    if found is not None and found[1] >= MIN_TENSOR_BYTES and found not in skip:
                        touched[found[0]] = max(touched.get(found[0], 0), found[1])
            return 0

        vm.set_instrument(record)
        try:
            result = vm["main"](*inputs)
        finally:
            vm.set_instrument(None)
        self._thread = threading.Thread(target=self._collapse, name="bmlib-huge-pages",
                                        args=(sorted(touched.items()),), daemon=True)
        self._thread.start()
        return result

    def _collapse(self, ranges: list[tuple[int, int]]) -> None:
        try:
            self.report = collapse(ranges)
        except Exception as exc:  # noqa: BLE001 - a placement hint must never break a model
            self.report = HugePageReport(skipped=f"{type(exc).__name__}: {exc}")
        _log.debug("%s", self.report.summary())

    def wait(self, timeout: Optional[float] = None) -> Optional[HugePageReport]:
        """Block until the background collapse is done (e.g. before timing); its report."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self.report is None and not self.enabled:
            return HugePageReport(skipped=f"turned off ({ENV_HUGE_PAGES}=0 or by the caller)")
        return self.report
