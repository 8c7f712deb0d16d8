"""Partitions built as one LLVM module per available CPU, in threads (structure only).

Every partition must land in exactly one module, the result must not depend on how
many threads built it, and the caller's ``PassContext`` must reach every thread.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax.backend import codegen
from bmlib_relax.relay import parse

from conftest import DATA, Golden, offloaded_partitions


@pytest.fixture(scope="module")
def mobilenet():
    golden = Golden(DATA / "mobilenet")
    return parse(golden.text), golden.params(), golden.inputs()


def _compile(model, monkeypatch, cpus: int):
    module, params, _ = model
    monkeypatch.setattr("bmlib_relax.threads.available_cpus", lambda: cpus)
    compiled = bmlib_relax.compile(module, params)
    partitions = offloaded_partitions(compiled.relax_module)
    assert partitions, "nothing was offloaded"
    return compiled, partitions


def _modules_by_symbol(compiled, symbols):
    """Which of the executable's imported modules defines each symbol."""
    imports = list(compiled.executable.mod.imports)
    return {s: [i for i, m in enumerate(imports) if m.implements_function(s)] for s in symbols}


def test_each_partition_is_in_exactly_one_of_several_modules(mobilenet, monkeypatch):
    compiled, partitions = _compile(mobilenet, monkeypatch, cpus=2)
    where = _modules_by_symbol(compiled, partitions)
    assert all(len(found) == 1 for found in where.values()), where
    assert len({found[0] for found in where.values()}) == 2  # two modules share them


def test_one_cpu_builds_one_module_with_the_same_results(mobilenet, monkeypatch):
    one, partitions = _compile(mobilenet, monkeypatch, cpus=1)
    assert len({found[0] for found in _modules_by_symbol(one, partitions).values()}) == 1
    two, _ = _compile(mobilenet, monkeypatch, cpus=2)
    inputs = list(mobilenet[2].values())
    np.testing.assert_array_equal(one(*inputs), two(*inputs))


def test_the_callers_pass_context_reaches_every_build_thread(monkeypatch):
    """A pass instrument installed by the caller sees the passes each thread runs."""
    from tvm.ir.instrument import pass_instrument

    threads_seen: set[str] = set()

    @pass_instrument
    class ThreadRecorder:
        def run_before_pass(self, mod, info):
            threads_seen.add(threading.current_thread().name)

    def add(constant: float):
        a = tvm.te.placeholder((64,), name="a")
        b = tvm.te.compute((64,), lambda j: a[j] + constant, name="b")
        return tvm.te.create_prim_func([a, b])

    prims = {f"add_{i}": add(float(i)).with_attr("global_symbol", f"add_{i}")
             for i in range(8)}
    with tvm.transform.PassContext(instruments=[ThreadRecorder()]):
        modules = codegen.build_in_parallel(prims, None, threads=2)
    assert len(modules) == 2
    assert sum(1 for name in threads_seen if name.startswith("bmlib-build")) == 2, threads_seen
    x = tvm.runtime.tensor(np.arange(64, dtype="float32"))
    for i in range(8):
        y = tvm.runtime.tensor(np.zeros(64, "float32"))
        (module,) = [m for m in modules if m.implements_function(f"add_{i}")]
        module[f"add_{i}"](x, y)
        np.testing.assert_array_equal(y.numpy(), np.arange(64, dtype="float32") + i)
