"""Thread defaults of compiled and loaded models (structure only, never timing).

A model uses every CPU available to the process (affinity, cgroup quota) unless
``num_threads=`` or ``TVM_NUM_THREADS`` says otherwise, and running it never
changes the caller's CPU affinity (TVM's pool used to pin the calling thread to
CPU 0).  Each case runs in a fresh child process: TVM's pool is started once per
thread and keeps its size, so only a new process shows the defaults.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from bmlib_relax.errors import ParamError
from bmlib_relax.threads import cgroup_cpu_limit, resolve_num_threads

from conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                reason="CPU affinity is Linux-only")

CHILD = textwrap.dedent("""\
    import json, os, sys
    spec = json.loads(sys.argv[1])
    if spec.get("affinity"):
        os.sched_setaffinity(0, spec["affinity"])
    import tvm
    import bmlib_relax
    from bmlib_relax.examples import seed
    from bmlib_relax.threads import available_cpus

    before = sorted(os.sched_getaffinity(0))
    if spec.get("query_first"):  # starts this thread's pool with TVM's own default size
        import bmlib_relax.threads
        tvm.runtime.num_threads()
    kwargs = {"num_threads": spec["num_threads"]} if "num_threads" in spec else {}
    if spec.get("artifact"):
        model = bmlib_relax.load(spec["artifact"], **kwargs)
    else:
        model = bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params(), **kwargs)
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(seed.seed_input())
        model(seed.seed_input())
    after = sorted(os.sched_getaffinity(0))
    tasks = [int(t) for t in os.listdir("/proc/self/task")]
    threads_cpus = sorted({c for t in tasks for c in os.sched_getaffinity(t)})
    runtime = tvm.runtime.num_threads()  # would start a default pool if none were running
    print(json.dumps({
        "available": available_cpus(), "configured": model.threads.num_threads,
        "runtime": runtime, "before": before, "after": after,
        "after_query": sorted(os.sched_getaffinity(0)), "threads_cpus": threads_cpus,
        "warnings": [str(w.message) for w in caught],
    }))
""")


def run_child(spec: dict, env: dict | None = None) -> dict:
    child_env = {k: v for k, v in os.environ.items()
                 if k not in ("TVM_NUM_THREADS", "TVM_BIND_THREADS")}
    child_env.update(env or {}, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=child_env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Running the model never moves the caller, and no thread escapes its CPUs.
    assert result["after"] == result["after_query"] == result["before"]
    assert set(result["threads_cpus"]) <= set(result["before"])
    return result


CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def test_default_uses_every_available_cpu():
    result = run_child({})
    assert result["available"] == min(len(CPUS), cgroup_cpu_limit() or len(CPUS))
    assert result["configured"] == result["runtime"] == result["available"]
    assert result["warnings"] == []


def test_default_follows_the_affinity_of_the_process():
    result = run_child({"affinity": [CPUS[-1]]})
    assert result["before"] == [CPUS[-1]]
    assert result["configured"] == result["runtime"] == 1


def test_tvm_num_threads_wins_over_the_default():
    result = run_child({}, {"TVM_NUM_THREADS": "3"})
    assert result["configured"] == result["runtime"] == 3


def test_num_threads_argument_wins_over_tvm_num_threads():
    """Also one worker on every CPU: the pool TVM used to start by pinning the calling
    thread to CPU 0 (``run_child`` checks the affinity is unchanged)."""
    result = run_child({"num_threads": 1}, {"TVM_NUM_THREADS": "3"})
    assert result["before"] == CPUS
    assert result["configured"] == result["runtime"] == 1


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_threads_stay_on_the_cpus_the_process_was_given():
    """Two threads on one allowed CPU (not CPU 0): nothing moves to other CPUs."""
    result = run_child({"affinity": [CPUS[-1]], "num_threads": 2})
    assert result["runtime"] == 2 and result["threads_cpus"] == [CPUS[-1]]


@pytest.mark.skipif(len(CPUS) < 2 or (os.cpu_count() or 1) // 2 >= len(CPUS),
                    reason="TVM's own default pool is not smaller here")
def test_a_pool_started_before_the_model_is_reported():
    """TVM's pool cannot grow once started: a model that gets fewer threads says so."""
    result = run_child({"query_first": True})
    assert result["runtime"] < result["configured"] == result["available"]
    (message,) = result["warnings"]
    assert f"the model runs on {result['runtime']} instead of {result['configured']}" in message


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    import bmlib_relax
    from bmlib_relax.examples import seed

    path = tmp_path_factory.mktemp("threads") / "model.so"
    bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params()).export_library(str(path))
    return str(path)


def test_loaded_model_defaults_and_argument(artifact):
    result = run_child({"artifact": artifact, "affinity": [CPUS[0]]})
    assert result["configured"] == result["runtime"] == 1
    result = run_child({"artifact": artifact, "num_threads": 2})
    assert result["configured"] == result["runtime"] == 2


def test_bad_thread_counts_are_param_errors(monkeypatch):
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    for bad in (0, -2, 1.5, True, "two"):
        with pytest.raises(ParamError, match="num_threads must be a positive integer"):
            resolve_num_threads(bad)
    with pytest.raises(ParamError, match="num_threads=100000 is more than 1024 threads"):
        resolve_num_threads(100000)
    monkeypatch.setenv("TVM_NUM_THREADS", "lots")
    with pytest.raises(ParamError, match="TVM_NUM_THREADS must be a positive integer"):
        resolve_num_threads()
    assert resolve_num_threads(2) == 2


@pytest.mark.parametrize("v2, v1, want", [
    ("max 100000", None, None),
    ("150000 100000", None, 2),
    ("50000 100000", None, 1),
    (None, ("300000", "100000"), 3),
    (None, ("-1", "100000"), None),
])
def test_cgroup_cpu_quota(tmp_path, v2, v1, want):
    (tmp_path / "proc_cgroup").write_text("0::/\n1:cpu,cpuacct:/\n")
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        folder = tmp_path / "cpu,cpuacct"
        folder.mkdir()
        (folder / "cpu.cfs_quota_us").write_text(v1[0])
        (folder / "cpu.cfs_period_us").write_text(v1[1])
    assert cgroup_cpu_limit(str(tmp_path), str(tmp_path / "proc_cgroup")) == want


def test_cgroup_quota_of_a_parent_limits_the_process(tmp_path):
    (tmp_path / "proc_cgroup").write_text("0::/user/app\n")
    (tmp_path / "user" / "app").mkdir(parents=True)
    (tmp_path / "user" / "app" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "user" / "cpu.max").write_text("100000 100000\n")
    assert cgroup_cpu_limit(str(tmp_path), str(tmp_path / "proc_cgroup")) == 1
