"""Run where the device is (issue #16 part 4): ``run --rpc`` / ``--rpc-tracker`` and
``bmlib_relax.load(path, remote=session)`` against a local ``tvm.exec.rpc_server``
(loopback only)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax.cli import EXAMPLE_DIR, main
from bmlib_relax.recipe import recipe_tensor

from conftest import cli

pytest.importorskip("cloudpickle")
pytest.importorskip("psutil")

EXAMPLE = Path(EXAMPLE_DIR)
LOOPBACK = "127.0.0.1"
SHAPE = (1, 128, 12, 40)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def start(module: str, *args) -> subprocess.Popen:
    """A TVM RPC process in its own process group (so its forked workers end with it);
    its stderr goes to a file (a pipe nobody reads could fill and stall it), so that a
    process that dies at start says why."""
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-m", module, "--host", LOOPBACK,
                             *map(str, args)], stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=True)
    proc.log = log
    return proc


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the group of the process this test started
    except ProcessLookupError:
        return
    proc.wait(timeout=30)


def wait_until(check, what: str, timeout: float = 60,
               proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            proc.log.seek(0)
            raise RuntimeError(f"{what} exited with {proc.returncode}: "
                               f"{proc.log.read()[-2000:]}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{what} did not come up in {timeout} s")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((LOOPBACK, port)) == 0


@pytest.fixture(scope="module")
def rpc_server():
    port = free_port()
    proc = start("tvm.exec.rpc_server", "--port", port, "--port-end", port + 1)
    try:
        wait_until(lambda: listening(port), "rpc_server", proc=proc)
        yield port
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def tracked_server():
    """A tracker and a server registered with it under the key ``bmlib-test``."""
    pytest.importorskip("tornado")  # TVM's rpc_tracker needs it (the `rpc` extra has it)
    tracker_port, server_port = free_port(), free_port()
    tracker = start("tvm.exec.rpc_tracker", "--port", tracker_port,
                    "--port-end", tracker_port + 1)
    server = None
    try:
        wait_until(lambda: listening(tracker_port), "rpc_tracker", proc=tracker)
        server = start("tvm.exec.rpc_server", "--port", server_port, "--port-end",
                       server_port + 1, "--tracker", f"{LOOPBACK}:{tracker_port}",
                       "--key", "bmlib-test")
        wait_until(lambda: "bmlib-test" in str(
            tvm.rpc.connect_tracker(LOOPBACK, tracker_port).summary()), "tracker registration")
        yield tracker_port
    finally:
        if server is not None:
            stop(server)
        stop(tracker)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("rpc")
    proc = cli("convert", EXAMPLE / "model.relay", "--params", EXAMPLE / "params.npz",
               "-q", "-o", out)
    assert proc.returncode == 0, proc.stderr
    data = recipe_tensor("data", SHAPE, "float32", "input")
    np.savez(out / "inputs.npz", data=data)
    local = bmlib_relax.load(out / "model.so")(data=data)
    return out, data, local


def test_run_over_rpc(rpc_server, artifact):
    out, _, local = artifact
    proc = cli("run", out / "model.so", "--rpc", f"{LOOPBACK}:{rpc_server}",
               "-i", out / "inputs.npz", "-o", out / "remote.npz", "--print-time",
               "--repeat", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Execution time summary:" in proc.stdout
    np.testing.assert_allclose(np.load(out / "remote.npz")["out0"], local, rtol=1e-6, atol=1e-6)


def test_load_remote_from_python(rpc_server, artifact):
    out, data, local = artifact
    session = tvm.rpc.connect(LOOPBACK, rpc_server)
    model = bmlib_relax.load(out / "model.so", remote=session)
    assert model.input_names == ["data"]
    assert "remote" in str(model.device).lower() or model.device.device_type > 128
    assert not model.huge_pages.pending  # remote memory: not this process's to place
    np.testing.assert_allclose(model(data=data), local, rtol=1e-6, atol=1e-6)
    with pytest.raises(bmlib_relax.ParamError, match="input 'data': expected shape"):
        model(data=data[:, :, :4])  # checked before it travels


def test_run_through_tracker(tracked_server, artifact):
    out, _, local = artifact
    proc = cli("run", out / "model.so", "--rpc-tracker", f"{LOOPBACK}:{tracked_server}",
               "--rpc-key", "bmlib-test", "-i", out / "inputs.npz", "-o", out / "tracked.npz")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(out / "tracked.npz")["out0"], local, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--rpc", "localhost"], "error: bad --rpc 'localhost': expected HOST:PORT"),
    (["--rpc-tracker", f"{LOOPBACK}:9"], "error: --rpc-tracker needs --rpc-key KEY"),
    (["--rpc", f"{LOOPBACK}:9", "--rpc-tracker", f"{LOOPBACK}:9"],
     "error: give either an RPC server"),
])
def test_bad_rpc_options(args, message, artifact, capsys):
    out, _, _ = artifact
    assert main(["run", str(out / "model.so"), *args]) == 2  # in-process: the same entry point
    assert capsys.readouterr().err.startswith(message)


def test_unreachable_server(artifact, capsys):
    out, _, _ = artifact
    port = free_port()  # nothing listens there
    assert main(["run", str(out / "model.so"), "--rpc", f"{LOOPBACK}:{port}"]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: cannot connect to RPC server {LOOPBACK}:{port}: ")
