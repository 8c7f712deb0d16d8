"""Helpers for backend tests: one-op Relax modules and the plain reference build."""
from __future__ import annotations

import itertools
import re
from typing import Callable, Sequence

import numpy as np
import tvm
from tvm import relax, s_tir, tirx

from bmlib_relax.backend.patterns import bmlib_patterns
from bmlib_relax.compiler import build_offloaded
from bmlib_relax.recipe import recipe_tensor


def pattern_entry(name: str) -> tuple:
    """The built-in table's entry ``bmlib.<name>``."""
    (entry,) = [e for e in bmlib_patterns() if e[0] == f"bmlib.{name}"]
    return entry


def make_module(build: Callable, inputs: Sequence[tuple], weights: Sequence[tuple] = (),
                dtype: str = "float32") -> tuple[tvm.IRModule, list[np.ndarray]]:
    """``main(*inputs)`` whose body is ``build(*input_vars, *weight_constants)``.

    Weights are Relax constants (as the importer binds params); inputs get
    recipe values.  Returns the module and the input arrays.
    """
    params = [relax.Var(f"x{i}", relax.TensorType(shape, dtype)) for i, shape in
              enumerate(inputs)]
    consts = [relax.const(recipe_tensor(f"w{i}", shape, dtype)) for i, shape in
              enumerate(weights)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(*params, *consts))
        bb.emit_func_output(out)
    arrays = [recipe_tensor(f"x{i}", shape, dtype, role="input") for i, shape in
              enumerate(inputs)]
    return bb.get(), arrays


def run(executable, arrays: Sequence[np.ndarray]):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [o.numpy() for o in out]


def run_plain(mod: tvm.IRModule, arrays: Sequence[np.ndarray]):
    return run(tvm.compile(mod, target="llvm"), arrays)


def run_offloaded(partitioned: tvm.IRModule, arrays: Sequence[np.ndarray]):
    executable, records = build_offloaded(partitioned)
    return run(executable, arrays), records


def composite_names(mod: tvm.IRModule) -> list[str]:
    """The ``Composite`` names of the functions inside ``mod``'s functions (one per
    matched pattern instance, so a name may repeat)."""
    names = []

    def visit(expr):
        if isinstance(expr, relax.Function) and expr.attrs is not None and \
                "Composite" in expr.attrs:
            names.append(str(expr.attrs["Composite"]))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
            if func.attrs is not None and "Composite" in func.attrs:
                names.append(str(func.attrs["Composite"]))
    return names


def innermost_fma_loops(asm: str) -> list[str]:
    """Bodies of the innermost loops (a label to its backward branch) that run FMAs."""
    lines = asm.splitlines()
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.match(r"^\.LBB\w+:$", line)}
    loops = []
    for i, line in enumerate(lines):
        jump = re.match(r"^\s+j\w+\s+(\.LBB\w+)$", line)
        if jump and labels.get(jump.group(1), i + 1) < i:
            body = lines[labels[jump.group(1)] + 1:i]
            if not any(re.match(r"^\.LBB\w+:$", b) for b in body) and \
                    any("vfmadd" in b for b in body):
                loops.append("\n".join(body))
    return loops


def check_offloaded_run(mod: tvm.IRModule, partitioned: tvm.IRModule,
                        arrays: Sequence[np.ndarray], rtol: float = 1e-4) -> None:
    """Something was offloaded, no schedule rule was rolled back (no warning, no
    unscheduled block) and the outputs match TVM's plain build of ``mod``."""
    import warnings

    from bmlib_relax.backend.schedule import UnscheduledBlockWarning
    from conftest import offloaded_partitions

    assert offloaded_partitions(partitioned)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnscheduledBlockWarning)
        got, records = run_offloaded(partitioned, arrays)
    assert all(not r.unscheduled for r in records.values())
    for have, want in zip(got, run_plain(mod, arrays)):
        np.testing.assert_allclose(have, want, rtol=rtol, atol=rtol)


_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "FloorDiv": lambda a, b: a // b, "FloorMod": lambda a, b: a % b, "Min": min,
           "Max": max}


def index_value(expr, env: dict) -> int:
    """An integer TIR index expression evaluated for the loop values ``env`` (by var)."""
    from tvm import tirx

    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return env[expr]
    if isinstance(expr, tirx.Cast):
        return index_value(expr.value, env)
    for kind, op in _BINARY.items():
        if isinstance(expr, getattr(tirx, kind)):
            return op(index_value(expr.a, env), index_value(expr.b, env))
    raise TypeError(f"unexpected index expression {type(expr).__name__}: {expr}")


def update_realizes(stmt, prefix: str, loops=()):
    """(enclosing loops, realize) of every block named ``prefix...`` in a scheduled body,
    its reduction init left out."""
    if isinstance(stmt, s_tir.SBlockRealize):
        name = str(stmt.block.name_hint)
        if name.startswith(prefix) and not name.endswith("_init"):
            yield loops, stmt
        yield from update_realizes(stmt.block.body, prefix, loops)
    elif isinstance(stmt, tirx.For):
        yield from update_realizes(stmt.body, prefix, loops + (stmt,))
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            yield from update_realizes(child, prefix, loops)


def assert_prefetches_next_unit(path, call, total: int, per_unit: int,
                                iterations_per_unit: int) -> dict[int, set[int]]:
    """Run the prefetch ``call``'s address arithmetic for every iteration of its loop
    nest ``path`` (outermost: the parallel loop, ``iterations_per_unit`` iterations per
    unit of ``per_unit`` weight elements): every address stays in the ``total``-element
    float32 weight, and the iterations of unit ``u`` together fetch every cache line of
    unit ``u + 1`` (the last one clamped to the weight).  Returns the lines by unit."""
    index = call.args[0].args[0].indices[0]
    fetched: dict[int, set[int]] = {}
    for values in itertools.product(*(range(int(loop.extent)) for loop in path)):
        element = index_value(index, {loop.loop_var: v for loop, v in zip(path, values)})
        assert 0 <= element < total
        fetched.setdefault(values[0] // iterations_per_unit, set()).add(element * 4 // 64)
    for unit, lines in fetched.items():
        start = min((unit + 1) * per_unit, total - 1)
        end = min((unit + 2) * per_unit, total)
        assert set(range(start * 4 // 64, (end * 4 - 1) // 64 + 1)) <= lines, unit
    return fetched


def assert_spread_over_reduction(path) -> None:
    """The prefetch loop (``path[-1]``, from :func:`prefetch_calls`) runs inside a step
    of a reduction: its enclosing loop updates an accumulator (a store reading the
    buffer it writes) that it does not initialise (so the loop is inside the tile's
    reduction, not around the whole tile): a few lines before each reduction step of a
    register tile, not all at the start of the tile."""
    from bmlib_relax.backend.schedule import any_node

    step_loop = path[-2]
    assert int(step_loop.kind) == int(tirx.ForKind.SERIAL)
    stores: list = []
    any_node(step_loop.body, lambda node: isinstance(node, tirx.BufferStore) and
             stores.append(node) and False)

    def reads_itself(store) -> bool:
        # (TVM 0.27's BufferLoad is a factory; a load holds its buffer as ``source``)
        return any_node(store.value, lambda load: getattr(load, "source", None) is not None
                        and load.source.same_as(store.buffer))

    updated = [s.buffer for s in stores if reads_itself(s)]
    assert updated, "no reduction update around the prefetch"
    initialised = [s.buffer for s in stores if not reads_itself(s)]
    assert not any(u.same_as(i) for u in updated for i in initialised), \
        "the prefetch's loop holds a whole register tile (init and reduction)"


def prefetch_calls(stmt, path=()):
    """(enclosing For loops, prefetch call) of every ``tirx.prefetch`` in a flat body."""
    if isinstance(stmt, tirx.For):
        yield from prefetch_calls(stmt.body, path + (stmt,))
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            yield from prefetch_calls(child, path)
    elif isinstance(stmt, (tirx.IfThenElse, tirx.AttrStmt)):
        for child in (getattr(stmt, "then_case", None), getattr(stmt, "else_case", None),
                      getattr(stmt, "body", None)):
            if isinstance(child, tirx.Stmt):
                yield from prefetch_calls(child, path)
    elif isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
            stmt.value.op.name == "tirx.prefetch":
        yield path, stmt.value
