"""RPC models used as TVM users use a session (probe p21): an artifact loaded twice over
one session, one remote model called from two threads, a session whose server went
away.  Loopback only, against a local ``tvm.exec.rpc_server``.

Loading the same artifact a second time used to upload it again under the same
content-derived name, rewriting the file the first load had mapped: the server's
session died of SIGSEGV, and the first model's next call raised a raw TVM
``InternalError``.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.rpc import RemoteError

from conftest import offloaded_partitions
from test_entry_point_fixes import hammer
from test_rpc import LOOPBACK, free_port, listening, start, stop, wait_until

pytest.importorskip("cloudpickle")
pytest.importorskip("psutil")


def _server():
    port = free_port()
    proc = start("tvm.exec.rpc_server", "--port", port, "--port-end", port + 1)
    wait_until(lambda: listening(port), "rpc_server", proc=proc)
    return proc, port


@pytest.fixture(scope="module")
def rpc_server():
    proc, port = _server()
    try:
        yield port
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def dense_artifact(tmp_path_factory):
    """relu(dense(x, w)), w bound: an offloaded model and its numpy reference."""
    x = relay.var("x", shape=(4, 8), dtype="float32")
    w = relay.var("w", shape=(6, 8), dtype="float32")
    weight = np.random.default_rng(0).standard_normal((6, 8)).astype("float32")
    model = bmlib_relax.compile(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))),
                                {"w": weight})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    path = tmp_path_factory.mktemp("rpc_reload") / "model.so"
    model.export_library(path)
    return path, lambda data: np.maximum(data @ weight.T, 0)  # nn.dense is x @ w.T


def _inputs(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((4, 8)).astype("float32") for _ in range(count)]


def test_same_artifact_loaded_twice_over_one_session(rpc_server, dense_artifact):
    path, reference = dense_artifact
    session = tvm.rpc.connect(LOOPBACK, rpc_server)
    (x,) = _inputs(1)
    first = bmlib_relax.load(path, remote=session)
    np.testing.assert_allclose(first(x), reference(x), rtol=1e-5, atol=1e-6)
    second = bmlib_relax.load(path, remote=session)
    np.testing.assert_allclose(second(x), reference(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first(x), reference(x), rtol=1e-5, atol=1e-6)
    # the session is still alive for a third load of it
    third = bmlib_relax.load(path, remote=session)
    np.testing.assert_allclose(third(x=x), reference(x), rtol=1e-5, atol=1e-6)


def test_two_threads_share_one_remote_model(rpc_server, dense_artifact):
    path, reference = dense_artifact
    session = tvm.rpc.connect(LOOPBACK, rpc_server)
    model = bmlib_relax.load(path, remote=session)
    other = bmlib_relax.load(path, remote=session)  # the same session: one socket
    inputs = _inputs(2)
    assert hammer(model, [(x,) for x in inputs], [reference(x) for x in inputs],
                  calls=25) == []
    problems: list = []
    import threading
    runs = [threading.Thread(target=lambda m=m, x=x: problems.extend(
        hammer(m, [(x,)], [reference(x)], calls=25))) for m, x in zip([model, other], inputs)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert problems == []


def test_a_lost_session_is_a_remote_error(dense_artifact):
    path, reference = dense_artifact
    proc, port = _server()
    try:
        model = bmlib_relax.load(path, remote=tvm.rpc.connect(LOOPBACK, port))
        (x,) = _inputs(1)
        np.testing.assert_allclose(model(x), reference(x), rtol=1e-5, atol=1e-6)
    finally:
        stop(proc)
    with pytest.raises(RemoteError, match="RPC"):
        model(x)
