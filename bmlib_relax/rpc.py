"""Running an artifact where the device is: TVM's RPC (``tvm.rpc``).

``bmlib_relax.load(path, remote=session)`` uploads the ``export_library``
artifact to an RPC server (``python -m tvm.exec.rpc_server`` on the board, or
one reached through a tracker), loads it there and returns a model called
exactly like a local one: inputs by name, checked against the artifact's
signature *before* they travel, outputs fetched back as numpy arrays.
``bmlib-relax run MODEL.so --rpc HOST:PORT`` (or ``--rpc-tracker HOST:PORT
--rpc-key KEY``) is the same from the command line.

The server needs TVM's RPC extras (``pip install "bmlib-relax[rpc]"``:
``cloudpickle``, ``psutil``); the board runs the same apache-tvm runtime.
"""
from __future__ import annotations

import hashlib
import os
import threading
import weakref
from typing import Any, Optional

import tvm

from .errors import ArtifactError, BmlibError, ParamError
from .runtime import ModelRunner, read_metadata, verify_library


class RemoteError(BmlibError, RuntimeError):
    """An RPC server or tracker that cannot be reached or refuses the artifact."""


def parse_address(text: str, option: str = "--rpc") -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ParamError(f"bad {option} {text!r}: expected HOST:PORT")
    return host, int(port)


def connect(rpc: Optional[str] = None, tracker: Optional[str] = None,
            key: Optional[str] = None, session_timeout: int = 0) -> Any:
    """An RPC session: straight to a server (``rpc="host:port"``) or through a tracker
    (``tracker="host:port"``, ``key`` naming the device kind)."""
    if (rpc is None) == (tracker is None):
        raise ParamError("give either an RPC server (--rpc HOST:PORT) or a tracker "
                         "(--rpc-tracker HOST:PORT --rpc-key KEY)")
    if rpc is not None:
        host, port = parse_address(rpc, "--rpc")
        try:
            return tvm.rpc.connect(host, port, session_timeout=session_timeout)
        except Exception as exc:  # noqa: BLE001 - TVM raises InternalError/TVMError
            raise RemoteError(f"cannot connect to RPC server {host}:{port}: "
                              f"{_last_line(exc)}") from None
    if not key:
        raise ParamError("--rpc-tracker needs --rpc-key KEY (the device kind the server "
                         "registered with)")
    host, port = parse_address(tracker, "--rpc-tracker")
    try:
        client = tvm.rpc.connect_tracker(host, port)
    except Exception as exc:  # noqa: BLE001
        raise RemoteError(f"cannot connect to RPC tracker {host}:{port}: "
                          f"{_last_line(exc)}") from None
    try:
        return client.request(key, priority=1, session_timeout=session_timeout, max_retry=2)
    except Exception as exc:  # noqa: BLE001
        raise RemoteError(f"RPC tracker {host}:{port} gave no session for key {key!r}: "
                          f"{_last_line(exc)}") from None


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


class _SessionState:
    """What this process keeps per RPC session: one lock for everything sent over its
    socket (TVM's RPC client is one connection, not safe for two threads at once), and
    the modules already loaded there, by library SHA-256."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.modules: dict[str, Any] = {}


_SESSIONS: "weakref.WeakKeyDictionary[Any, _SessionState]" = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def _session_state(session: Any) -> _SessionState:
    with _SESSIONS_LOCK:
        state = _SESSIONS.get(session)
        if state is None:
            state = _SESSIONS[session] = _SessionState()
        return state


def _remote_module(path: str, session: Any, state: _SessionState, sha256: str) -> Any:
    """The artifact's module on the server, uploaded and loaded once per session.

    A second upload under the same content-derived name rewrote the file the first load
    had mapped: the server's session died of SIGSEGV.  The same bytes are loaded once and
    shared (each model keeps a VM of its own), as a local ``load`` shares them.  The
    bytes sent are the ones hashed here, so a library replaced after ``verify_library``
    never travels."""
    module = state.modules.get(sha256)
    if module is not None:
        return module
    with open(path, "rb") as handle:
        blob = bytearray(handle.read())
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise ArtifactError(f"{path}: the library was replaced while it was being loaded; "
                            "load it again", path)
    # a content-addressed name: two artifacts called model.so never overwrite each other
    remote_name = f"{os.path.splitext(os.path.basename(path))[0]}-{sha256[:16]}.so"
    try:
        session.upload(blob, target=remote_name)
        module = session.load_module(remote_name)
    except Exception as exc:  # noqa: BLE001
        raise RemoteError(f"the RPC server could not load {path}: {_last_line(exc)}") from None
    state.modules[sha256] = module
    return module


class RemoteModel(ModelRunner):
    """An artifact loaded on an RPC server; called like a local model.

    Calls of every model of one session are serialized on the session's lock (see
    ``ModelRunner._call_locked``); a failure of the session itself (the server gone, the
    connection lost) is a :class:`RemoteError`."""

    def __init__(self, path: str, session: Any, device: Any = None):
        if not os.path.exists(path):
            raise ParamError(f"artifact not found: {path}")
        self.path = path
        self.session = session
        # The artifact is checked here, before it travels (ArtifactError names the file).
        self.metadata = read_metadata(path)
        verify_library(path, self.metadata)
        state = _session_state(session)
        specs = list(self.metadata["inputs"])
        with state.lock:
            module = _remote_module(path, session, state, self.metadata["sha256"])
            try:
                super().__init__(module, [s["name"] for s in specs], specs,
                                 device if device is not None else session.cpu(0))
            except Exception as exc:  # noqa: BLE001 - TVM's errors from the session
                raise RemoteError(f"the RPC server could not start {path}: "
                                  f"{_last_line(exc)}") from None
        self.call_lock = state.lock

    def __call__(self, *args: Any, **kwargs: Any):
        try:
            return super().__call__(*args, **kwargs)
        except BmlibError:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM's InternalError / RPCError
            raise RemoteError(f"the RPC call of {self.path} failed: {_last_line(exc)}") \
                from None


def load_remote(path: str, session: Any, device: Any = None) -> RemoteModel:
    return RemoteModel(os.fspath(path), session, device)
