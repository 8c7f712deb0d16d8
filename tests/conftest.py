"""Shared test helpers: goldens, recipe tensors and the plain Relax reference build."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from bmlib_relax.recipe import recipe_from_manifest

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parent.parent


#: Peak resident memory of one test process running the largest models (ResNet-50 twice,
#: measured 2.3 GB); ``-n auto`` starts no more workers than the free memory holds.
WORKER_MEMORY_BYTES = 3 << 30


def _available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def pytest_xdist_auto_num_workers(config) -> int:
    """Workers for ``pytest -n auto``: one per CPU the process may use (affinity and cgroup
    quota, as the compiled models count them; xdist's own guess counts physical cores, one
    on a 2-vCPU VM), no more than the available memory holds."""
    from bmlib_relax.threads import available_cpus

    workers = available_cpus()
    memory = _available_memory_bytes()
    if memory is not None:
        workers = min(workers, memory // WORKER_MEMORY_BYTES)
    return max(1, workers)


#: Set when this process is one of several xdist workers and pinned TVM to one thread
#: (see pytest_configure); the CLI subprocesses then get the user's defaults back.
_PINNED_WORKER_THREADS = False


def pytest_configure(config) -> None:
    """Each of several ``-n`` workers runs its models on one thread (``TVM_NUM_THREADS=1``)
    unless the environment says otherwise: N workers each starting a pool of every CPU
    oversubscribe the machine, and a parallel loop then waits at its barrier for a thread
    the other worker's pool preempted.  Tests of the thread defaults run in child
    processes with the variable removed."""
    global _PINNED_WORKER_THREADS
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if os.environ.get("PYTEST_XDIST_WORKER") and workers > 1 and \
            "TVM_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = "1"
        _PINNED_WORKER_THREADS = True


def cli(*args, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run the bmlib-relax command in a subprocess (``python -m bmlib_relax``, same entry point)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if _PINNED_WORKER_THREADS:
        env.pop("TVM_NUM_THREADS", None)
    return subprocess.run([sys.executable, "-m", "bmlib_relax", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def shared_dir(variable: str) -> Path | None:
    """A directory named by an environment variable (CI sets them), else None."""
    value = os.environ.get(variable)
    return Path(value) if value else None


def corpus_dir() -> Path:
    path = shared_dir("BMLIB_RELAY_CORPUS")
    if path is None:
        pytest.skip("BMLIB_RELAY_CORPUS is not set")
    return path


# Relay's text printer wrote float32 scalars with 6 significant digits, so a scale the
# generator computed in float32 can print as a different float32.  qnn_mobilenet_tiny's last
# accumulator scale is 0.06f * 0.02f = 0.0011999999 (float32), printed "0.0012f": with the
# printed value the softmax is 4.6e-5 off (every int8 layer otherwise matches), with the
# product it matches to 8e-9.  The tests put the computed value back, as they do for the
# constant op_take's text lost.
PRINTED_SCALARS = {
    "qnn_mobilenet_tiny": {np.float32(0.0012): np.float32(0.06) * np.float32(0.02)},
}


def restore_printed_scalars(case: str, module):
    """``module`` with the float32 scalars ``PRINTED_SCALARS[case]`` maps replaced."""
    from bmlib_relax.relay import ast
    from bmlib_relax.relay.analysis import post_order_list
    from bmlib_relax.relay.rewrite import substitute

    fixes = PRINTED_SCALARS.get(case)
    if not fixes:
        return module
    mapping = {}
    for name, func in module.functions.items():
        for node in post_order_list(func):
            data = getattr(node, "data", None) if isinstance(node, ast.Constant) else None
            if data is not None and data.ndim == 0 and data.dtype == np.float32 and \
                    np.float32(data) in fixes:
                mapping[node] = ast.Constant(np.array(fixes[np.float32(data)], "float32"),
                                             span=node.span)
    assert mapping, f"{case}: no printed scalar to restore"
    return ast.IRModule({name: substitute(func, mapping)
                         for name, func in module.functions.items()})


#: Goldens whose text printed boxed attribute values (``meta[runtime.BoxInt][N]``)
#: without a ``#[metadata]`` section: the parser recovers them from the printed types
#: and says so in a RecoveredMetadataWarning.
RECOVERED_FROM_TYPES = {"op_split": 2}


def parse_golden(golden: "Golden"):
    """Parse a golden's text as printed; check the recovery warning of exactly the
    goldens listed in ``RECOVERED_FROM_TYPES`` (and no other warning of that kind)."""
    import warnings

    from bmlib_relax.errors import RecoveredMetadataWarning
    from bmlib_relax.relay import parse

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecoveredMetadataWarning)
        module = parse(golden.text, f"{golden.name}/model.relay")
    recovered = [r for w in caught if issubclass(w.category, RecoveredMetadataWarning)
                 for r in w.message.recoveries]
    assert len(recovered) == RECOVERED_FROM_TYPES.get(golden.name, 0), recovered
    return module


class Golden:
    """One Relay-path golden case (text, manifest, expected outputs)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.name = folder.name
        self.manifest = json.loads((folder / "manifest.json").read_text())
        self.text = (folder / "model.relay").read_text()

    @property
    def tolerance(self) -> dict:
        tol = self.manifest["tolerance"]
        return {"rtol": tol["rtol"], "atol": tol["atol"]}

    def inputs(self) -> dict[str, np.ndarray]:
        return recipe_from_manifest(self.manifest["inputs"], "input")

    def params(self) -> dict[str, np.ndarray]:
        return recipe_from_manifest(self.manifest["params"], "param")

    def expected(self) -> list[np.ndarray]:
        with np.load(self.folder / "expected.npz") as npz:
            return [npz[f"out{i}"] for i in range(len(npz.files))]


def run_plain(relax_mod: tvm.IRModule, inputs: list[np.ndarray]):
    """Run TVM's own legalized build of ``relax_mod`` (the unoffloaded reference)."""
    ex = tvm.compile(relax_mod, target="llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]


def host_ops_besides_views(report) -> dict:
    """The report's host ops other than the views it kept there on purpose (a standalone
    reshape/squeeze/expand_dims/flatten, reason ``view_on_host``)."""
    views = {h["op"] for h in report.to_dict()["host_ops"] if h["reason"] == "view_on_host"}
    return {op: n for op, n in report.ops_host.items() if op not in views and n}


def offloaded_partitions(module: tvm.IRModule) -> list[str]:
    """Names of functions with ``Codegen="bmlib"`` — proof that something was offloaded."""
    return [gv.name_hint for gv, f in module.functions.items()
            if isinstance(f, relax.Function) and f.attrs is not None
            and str(f.attrs.get("Codegen", "")) == "bmlib"]


def run_beside_offloaded_relu(params, outs, values):
    """Compile ``fn(params) -> (relu(params[0]), *outs)`` from the Relay builder, assert the
    relu (at least) was offloaded, check it, and return the ``outs`` results: an op with no
    bmlib template still runs next to something bmlib did compute."""
    import bmlib_relax
    from bmlib_relax import relay

    func = relay.Function(params, relay.Tuple([relay.nn.relu(params[0])] + list(outs)))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    results = model(*values)
    np.testing.assert_allclose(results[0], np.maximum(values[0], 0), rtol=1e-6)
    return results[1:]
