"""A run that cannot have its memory is the project's RunMemoryError, named and early
(bmlib_relax/memory.py); constant folding does not allocate a huge constant."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import memory, relay
from bmlib_relax.errors import BmlibError, RunMemoryError
from bmlib_relax.relay import parse
from bmlib_relax.relay import transform as relay_transform
from conftest import cli


def test_a_tensor_larger_than_the_process_may_use_is_refused_before_the_run():
    """The model's output alone is 16 TiB: refused before anything is allocated (under
    overcommit such an allocation may succeed and the process be killed when touched),
    naming the op and its place."""
    model = bmlib_relax.compile(parse('#[version = "0.0.5"]\n'
                                      'def @main(%x: Tensor[(4), float32]) {\n'
                                      '  broadcast_to(%x, shape=[1048576, 1048576, 4])\n}'),
                                num_threads=1)
    assert model.memory_needs.certain.nbytes == 1 << 44
    model.memory_limit = 1 << 30  # whatever this machine has
    with pytest.raises(RunMemoryError) as caught:
        model(np.ones(4, "float32"))
    message = str(caught.value)
    assert "broadcast_to" in message and "<string>:3:3" in message
    assert "16384.0 GiB" in message and "1.0 GiB" in message
    assert caught.value.location == "<string>:3:3"
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, BmlibError)


def test_a_loaded_artifact_checks_the_largest_tensor_its_metadata_records(tmp_path):
    """export_library records the largest tensor a run certainly allocates; the loaded
    model refuses a call that cannot fit as the compiled one did."""
    model = bmlib_relax.compile(parse('#[version = "0.0.5"]\n'
                                      'def @main(%x: Tensor[(4), float32]) {\n'
                                      '  broadcast_to(%x, shape=[1048576, 1048576, 4])\n}'),
                                num_threads=1)
    model.export_library(str(tmp_path / "big.so"))
    loaded = bmlib_relax.load(str(tmp_path / "big.so"), num_threads=1)
    assert loaded.memory_needs.certain == model.memory_needs.certain
    loaded.memory_limit = 1 << 30
    with pytest.raises(RunMemoryError, match="<string>:3:3"):
        loaded(np.ones(4, "float32"))
    # `bmlib-relax run` on it: exit 2 and one line, the tensor (16 TiB) being more than
    # any machine this runs on has
    np.save(tmp_path / "x.npy", np.ones(4, "float32"))
    done = cli("run", tmp_path / "big.so", "--input", f"x={tmp_path / 'x.npy'}")
    assert done.returncode == 2, done.stderr
    assert "the model cannot run here" in done.stderr and "<string>:3:3" in done.stderr


def test_partition_results_count_as_allocated_and_small_models_run():
    """Every bmlib partition's result is an allocation the check knows (with the
    partition's Relay place); a model that fits runs as before."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 16, 16), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.max_pool2d(%0, pool_size=[2, 2], strides=[2, 2]);
  sum(%1)
}"""
    model = bmlib_relax.compile(parse(text), num_threads=1)
    needs = {(n.shape, n.where) for n in memory.allocated_tensors(model.relax_module)}
    assert {((1, 8, 16, 16), "<string>:3:8"), ((1, 8, 8, 8), "<string>:4:8"),
            ((), "<string>:5:3")} == needs
    assert model.memory_needs.certain.nbytes == 8 * 16 * 16 * 4
    x = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype("float32")
    want = np.maximum(x, 0).reshape(1, 8, 8, 2, 8, 2).max(axis=(3, 5)).sum()
    np.testing.assert_allclose(model(x), want, rtol=1e-5)


def test_memory_limit_reads_the_cgroup_and_its_ancestors(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/a/b\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "memory.max").write_text("max\n")
    (tmp_path / "a" / "memory.max").write_text(f"{3 << 30}\n")
    limit = memory.memory_limit(root=str(tmp_path), proc_cgroup=str(proc))
    assert limit is not None and limit <= 3 << 30
    (tmp_path / "a" / "memory.max").write_text("max\n")
    unlimited = memory.memory_limit(root=str(tmp_path), proc_cgroup=str(proc))
    assert unlimited is None or unlimited > 3 << 30  # the machine's memory, or nothing


_OUT_OF_MEMORY = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import numpy as np, bmlib_relax
    from bmlib_relax.errors import RunMemoryError
    from bmlib_relax.relay import parse
    text = '#[version = "0.0.5"]\\ndef @main(%x: Tensor[(4), float32]) {\\n' \\
           '  %0 = zeros(shape=[65536, 32768], dtype="float32");\\n' \\
           '  add(%x, sum(%0))\\n}'
    model = bmlib_relax.compile(parse(text), num_threads=1)
    assert model.memory_limit == 6 << 30, model.memory_limit
    try:
        model(np.ones(4, "float32"))
    except RunMemoryError as exc:
        print("RunMemoryError:", exc)
        sys.exit(0)
    sys.exit("ran")
""")


def test_an_allocation_that_fails_during_the_run_is_a_run_memory_error():
    """An 8 GiB host intermediate under a 6 GiB address-space limit: TVM's
    ``std::bad_alloc`` becomes RunMemoryError naming the largest tensor and its place
    (its own process: the limit and the failure stay there)."""
    done = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RunMemoryError: the model ran out of memory" in done.stdout
    assert "zeros at <string>:3:8" in done.stdout and "8.0 GiB" in done.stdout


def test_fold_constant_leaves_a_huge_constant_computation_unfolded(monkeypatch):
    """Folding ``zeros(shape=[65536, 65536])`` would allocate 16 GiB while transforming
    the module: a result past FOLD_MAX_BYTES stays a call (the same values at run time);
    smaller ones fold as before."""
    monkeypatch.setattr(relay_transform, "FOLD_MAX_BYTES", 1024)
    x = relay.var("x", shape=(4,))
    big = relay.sum(relay.zeros((16, 32), "float32"))  # 2 KiB
    small = relay.sum(relay.zeros((8, 32), "float32"))  # 1 KiB
    mod = relay.transform.FoldConstant()(relay.IRModule.from_expr(
        relay.Function([x], relay.add(relay.add(x, big), small))))
    body = mod["main"].body
    assert isinstance(body.args[1], relay.Constant)  # the small one folded
    unfolded = body.args[0].args[1]
    assert isinstance(unfolded, relay.Call) and unfolded.op.name == "sum"
    assert unfolded.args[0].op.name == "zeros"


_OUT_OF_MEMORY_DYNAMIC = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import numpy as np, bmlib_relax
    from bmlib_relax.errors import RunMemoryError
    text = '#[version = "0.0.5"]\\ndef @main(%v: float32, %s: Tensor[(2), int64]) {\\n' \\
           '  dyn.full(%v, %s, dtype="float32")\\n}'
    model = bmlib_relax.compile(text, num_threads=1)
    try:
        model(v=np.array(1, "float32"), s=np.array([10**9, 10**9], "int64"))
    except RunMemoryError as exc:
        print("RunMemoryError:", exc)
        print("location:", exc.location)
        sys.exit(0)
    sys.exit("ran")
""")


def test_an_allocation_sized_at_run_time_names_the_op_that_sized_it():
    """``dyn.full`` of a shape given as an input: the failed allocation is one whose
    size only the run knew; the message named the largest *static* tensor (16 bytes)
    as if it were the culprit."""
    done = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY_DYNAMIC],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "known only at run time" in done.stdout
    assert "start at dyn.full at <string>:3:3" in done.stdout
    assert "location: <string>:3:3" in done.stdout
