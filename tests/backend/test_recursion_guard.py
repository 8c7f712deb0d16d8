"""Recursion past the run's stack is a RunCheckError naming the function, not a crash.

The Relax VM nests a native call per Relax call; a Relay loop of ~150 000 iterations
(two nested calls each: the loop and its lifted branch) overflowed the 1 GiB stack of
the recursion thread and the process died with a segmentation fault.  Every function
on a call cycle now counts its depth and checks it against
``MAX_RECURSION_DEPTH`` (read when the model is built: lowered here to keep the cases
fast).
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import import_relay
from bmlib_relax.backend import recursion_guard
from bmlib_relax.backend.recursion_guard import guard_recursion_depth, recursive_functions
from bmlib_relax.compiler import compile_plain
from bmlib_relax.errors import RunCheckError
from bmlib_relax.relay import parse

from conftest import offloaded_partitions

LOOP = '''#[version = "0.0.5"]
def @main(%n: int32, %x: Tensor[(4), float32]) {
  let %loop = fn (%i: int32, %acc: Tensor[(4), float32]) -> (int32, Tensor[(4), float32]) {
    if (less(%i, %n)) {
      %0 = add(%acc, %x);
      %1 = multiply(%0, 0.5f);
      %loop(add(%i, 1), %1)
    } else {
      (%i, %acc)
    }
  };
  %loop(0, %x)
}
'''

EVEN_ODD = '''#[version = "0.0.5"]
def @even(%n: int32) -> bool {
  if (equal(%n, 0)) { True } else { @odd(subtract(%n, 1)) }
}
def @odd(%n: int32) -> bool {
  if (equal(%n, 0)) { False } else { @even(subtract(%n, 1)) }
}
def @main(%n: int32) -> bool {
  @even(%n)
}
'''


def _loop_reference(n: int, x: np.ndarray) -> np.ndarray:
    acc = x.copy()
    for _ in range(n):
        acc = (acc + x) * np.float32(0.5)
    return acc


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(recursion_guard, "MAX_RECURSION_DEPTH", 1000)
    return 1000


def test_a_loop_within_the_bound_runs_and_one_past_it_is_refused(small_limit):
    model = bmlib_relax.compile(LOOP, {})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = np.array([1, 2, 3, 4], "float32")
    # The loop and its lifted branch nest two calls per iteration.
    count, acc = model(n=np.array(400, "int32"), x=x)
    assert int(count) == 400
    np.testing.assert_allclose(acc, _loop_reference(400, x), rtol=1e-6)
    with pytest.raises(RunCheckError, match=r"^@loop\w*: more than 1,000 nested calls of "
                                             r"the model's recursive functions"):
        model(n=np.array(600, "int32"), x=x)
    # The model still runs after a refused call.
    assert int(model(n=np.array(3, "int32"), x=x)[0]) == 3


def test_mutual_recursion_is_bounded_too(small_limit):
    model = bmlib_relax.compile(EVEN_ODD, {})
    assert bool(model(n=np.array(10, "int32"))) is True
    assert bool(model(n=np.array(11, "int32"))) is False
    with pytest.raises(RunCheckError, match=r"^@(even|odd)\w*: more than 1,000 nested"):
        model(n=np.array(5000, "int32"))


def test_the_plain_reference_build_is_bounded_too(small_limit):
    from tvm import relax
    import tvm

    exe = compile_plain(import_relay(parse(LOOP)))
    vm = relax.VirtualMachine(exe, tvm.cpu())
    n = tvm.runtime.tensor(np.array(600, "int32"))
    x = tvm.runtime.tensor(np.ones(4, "float32"))
    with pytest.raises(Exception, match="more than 1,000 nested calls"):
        vm["main"](n, x)


def test_only_functions_that_count_the_depth_are_changed():
    mod = import_relay(parse(LOOP))
    cycle = {gv.name_hint for gv in recursive_functions(mod)}
    assert "main" not in cycle and cycle and all(n.startswith("loop") for n in cycle)
    guarded = guard_recursion_depth(mod)
    for gv, func in guarded.functions.items():
        extra = 1 if gv.name_hint in cycle else 0  # (no private function reaches the cycle)
        assert len(func.params) == len(mod[gv.name_hint].params) + extra
    plain = import_relay(parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) { nn.relu(%x) }
'''))
    assert guard_recursion_depth(plain).same_as(plain)


def test_chained_loops_count_the_depth_through_the_function_between_them(small_limit):
    """A plain global that starts the next recursive one (``@w1`` called from ``@count0``'s
    exit) passed 0 on: three loops each under the bound nested past the stack together
    (a segmentation fault at 3 x 49 000).  The depth now runs through ``@w1``."""
    parts = ['#[version = "0.0.5"]']
    for k in range(2):
        exit_value = "@w1(%n, %acc)" if k == 0 else "%acc"
        parts.append(f'''
def @count{k}(%i: int32, %n: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {{
  if (less(%i, %n)) {{ @count{k}(add(%i, 1), %n, add(%acc, 1f)) }} else {{ {exit_value} }}
}}
def @w{k}(%n: int32, %acc: Tensor[(2), float32]) -> Tensor[(2), float32] {{
  @count{k}(0, %n, %acc)
}}''')
    parts.append("def @main(%n: int32, %x: Tensor[(2), float32]) { @w0(%n, %x) }")
    mod = import_relay(parse("\n".join(parts)))
    carriers = {gv.name_hint for gv in recursion_guard.depth_carriers(mod)}
    assert "w1" in carriers and "main" not in carriers
    model = bmlib_relax.compile("\n".join(parts), {})
    np.testing.assert_array_equal(model(np.int32(200), np.zeros(2, "float32")), [400, 400])
    # two nested calls per iteration (the lifted branch): each loop alone nests 600 at
    # n=300, under 1 000; together they do not
    with pytest.raises(RunCheckError, match=r"more than 1,000 nested calls"):
        model(np.int32(300), np.zeros(2, "float32"))
