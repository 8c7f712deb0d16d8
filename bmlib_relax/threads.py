"""How many threads a compiled model runs on, and keeping the caller's CPU affinity.

Why this exists: TVM's CPU thread pool guesses *physical* cores
(``hardware_concurrency() / 2`` on x86), so on a 2-vCPU VM a model from
``bmlib_relax.compile`` ran on one thread unless ``TVM_NUM_THREADS`` was set
before the pool started (ResNet-18: 36.8 ms instead of 19.1 ms).  And when the
pool starts it pins threads to cores it picks from the whole machine — with
fewer workers than CPUs the *calling* thread ends up pinned to CPU 0
(``os.sched_getaffinity(0)`` drops from {0, 1} to {0}), which starves whatever
else the user's process runs, and under ``taskset`` it may even pin outside
the CPUs the process was given.

What is done instead:

* The default is every CPU available to the process: ``os.sched_getaffinity(0)``,
  lowered to the cgroup CPU quota (``cpu.max``, or v1 ``cpu.cfs_quota_us``) when
  that is smaller.  ``num_threads=`` on ``compile``/``load`` wins, then the
  ``TVM_NUM_THREADS`` environment variable, then this default.
  (``OMP_NUM_THREADS``, which TVM would also read, is deliberately not used: it is
  often set for other libraries.)
* TVM's pool is per calling thread (``thread_local``) and fixes its number of
  workers when it starts; only ``runtime.config_threadpool(mode, nthreads, cpus)``
  changes it at run time, and only before the pool exists can it raise the worker
  count (its CPU list sets the thread's maximum concurrency).  So each model call
  first makes sure *its* thread's pool is configured (:meth:`ThreadConfig.apply`,
  cached per thread, so repeated calls cost one attribute lookup).
* No pinning: ``TVM_BIND_THREADS=0`` (read by TVM each time a pool sets
  affinities) is set when this module is imported, unless the user set it; worker
  threads then inherit the caller's affinity.  Should the caller's affinity still change while the pool is
  configured (a pool that existed before, a user who asked for binding with
  ``TVM_BIND_THREADS=1`` excepted), it is restored.
"""
from __future__ import annotations

import math
import operator
import os
import threading
import warnings
from typing import Optional

from .errors import ParamError

ENV_NUM_THREADS = "TVM_NUM_THREADS"
ENV_BIND_THREADS = "TVM_BIND_THREADS"
# TVM's ThreadGroup::AffinityMode: every worker may run on every CPU of the given list.
_SHARE_ALL_CORES = -3
CGROUP_ROOT = "/sys/fs/cgroup"
MAX_THREADS = 1024

_configured = threading.local()  # .workers / .threads: what this thread's pool was set to

# Before any pool of this process starts (TVM reads it whenever a pool sets affinities):
# no pinning, unless the user asked for it.
os.environ.setdefault(ENV_BIND_THREADS, "0")


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def _quota_v2(path: str) -> Optional[float]:
    """CPUs allowed by a cgroup v2 ``cpu.max`` ("max 100000" or "200000 100000")."""
    try:
        with open(path) as handle:
            quota, _, period = handle.read().strip().partition(" ")
        return None if quota == "max" else int(quota) / int(period or 100000)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _quota_v1(folder: str) -> Optional[float]:
    try:
        with open(os.path.join(folder, "cpu.cfs_quota_us")) as handle:
            quota = int(handle.read().strip())
        with open(os.path.join(folder, "cpu.cfs_period_us")) as handle:
            period = int(handle.read().strip())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """``{controller: path}`` from ``/proc/self/cgroup`` ("" is the v2 unified one)."""
    paths: dict[str, str] = {}
    try:
        with open(proc_cgroup) as handle:
            for line in handle:
                parts = line.strip().split(":", 2)
                if len(parts) == 3:
                    for controller in parts[1].split(","):
                        paths[controller] = parts[2]
    except OSError:
        pass
    return paths


def cgroup_ancestors(path: str) -> list[str]:
    """``/a/b`` → ``["/a/b", "/a", ""]``: a parent's quota limits its children too."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) if i else "" for i in range(len(parts), -1, -1)]


def cgroup_cpu_limit(root: str = CGROUP_ROOT,
                     proc_cgroup: str = "/proc/self/cgroup") -> Optional[int]:
    """CPUs the process's cgroup quota allows (rounded up), or None without a quota."""
    own = own_cgroups(proc_cgroup)
    quotas = []
    for relative in cgroup_ancestors(own.get("", "/")):
        quotas.append(_quota_v2(f"{root}{relative}/cpu.max"))
    for controller in ("cpu", "cpu,cpuacct"):
        for relative in cgroup_ancestors(own.get("cpu", "/")):
            quotas.append(_quota_v1(f"{root}/{controller}{relative}"))
    found = [q for q in quotas if q is not None]
    return max(1, math.ceil(min(found))) if found else None


def available_cpus() -> int:
    """CPUs this process may use: its affinity, lowered to its cgroup CPU quota."""
    cpus = len(_affinity()) or 1
    limit = cgroup_cpu_limit()
    return min(cpus, limit) if limit is not None else cpus


def _positive(value, what: str) -> int:
    """``value`` as a positive int (an int, or a string of digits from the environment)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        count = int(value.strip()) if isinstance(value, str) and value.strip().isdigit() \
            else operator.index(value)
    except TypeError:
        count = 0
    if count < 1:
        raise ParamError(f"{what} must be a positive integer, got {value!r}", what)
    if count > MAX_THREADS:  # a typo, not a request: TVM would start them all at once
        raise ParamError(f"{what}={count} is more than {MAX_THREADS} threads", what)
    return count


def resolve_num_threads(num_threads: Optional[int] = None) -> int:
    """``num_threads`` if given, else ``$TVM_NUM_THREADS``, else :func:`available_cpus`."""
    if num_threads is not None:
        return _positive(num_threads, "num_threads")
    env = os.environ.get(ENV_NUM_THREADS)
    if env is not None and env.strip():
        return _positive(env, ENV_NUM_THREADS)
    return available_cpus()


def _config_threadpool():
    import tvm

    return tvm.get_global_func("runtime.config_threadpool", allow_missing=True)


def configure_current_thread(num_threads: int) -> int:
    """Give the calling thread's TVM pool ``num_threads`` workers, keeping the caller's
    CPU affinity; returns the count TVM reports (lower only if this thread's pool
    already existed with fewer workers)."""
    import tvm

    os.environ.setdefault(ENV_BIND_THREADS, "0")
    user_binds = os.environ.get(ENV_BIND_THREADS, "0").strip() == "1"
    before = _affinity()
    # The pool's worker count is fixed when it starts: start it with room for every
    # available CPU (or more, if asked for), then use num_threads of them.
    workers = getattr(_configured, "workers", None) or max(num_threads, available_cpus())
    cpus = sorted(before) or [0]
    cpu_list = [str(cpus[i % len(cpus)]) for i in range(workers)]
    config = _config_threadpool()
    if config is None:  # a TVM without it: the pool reads TVM_NUM_THREADS when it starts
        os.environ.setdefault(ENV_NUM_THREADS, str(num_threads))
    else:
        config(_SHARE_ALL_CORES, num_threads, cpu_list)
    if not user_binds and _affinity() != before and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, before)
    _configured.workers, _configured.threads = workers, num_threads
    running = int(tvm.runtime.num_threads())
    if running < num_threads:
        warnings.warn(f"TVM's thread pool of this thread already runs {running} worker(s) "
                      f"and cannot grow once started; the model runs on {running} instead "
                      f"of {num_threads} thread(s) (call it from a new thread, or start "
                      "with the larger model)", RuntimeWarning, stacklevel=3)
    return running


class ThreadConfig:
    """The thread count of one model, resolved once (at ``compile``/``load``) and
    applied to whichever thread calls the model."""

    def __init__(self, num_threads: Optional[int] = None):
        self.num_threads = resolve_num_threads(num_threads)

    def apply(self) -> None:
        """Configure the calling thread's pool unless it already runs this many threads."""
        if getattr(_configured, "threads", None) != self.num_threads:
            configure_current_thread(self.num_threads)

    def __repr__(self) -> str:
        return f"ThreadConfig(num_threads={self.num_threads})"
