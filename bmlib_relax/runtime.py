"""Running compiled models: in-process results of ``compile`` and shipped artifacts.

``load(path)`` needs nothing but TVM and numpy at run time: it reads an
``export_library`` artifact and, when present, the ``model.json`` signature
written beside it (input names, shapes and dtypes), so inputs can be passed by
name and checked before they reach the VM.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

import numpy as np
import tvm
from tvm import relax

from .errors import ParamError
from .threads import ThreadConfig

SIGNATURE_FILE = "model.json"


class ModelRunner:
    """Calls a Relax VM ``main`` with numpy arrays, by position or by input name.

    A single output comes back as an array, several as a tuple.  It runs on
    ``num_threads`` threads (default: every CPU available, see :mod:`.threads`).
    """

    def __init__(self, executable: Any, input_names: Sequence[str],
                 input_specs: Optional[Sequence[dict]] = None, device: Any = None,
                 num_threads: Optional[int] = None):
        self.threads = ThreadConfig(num_threads)
        self.executable = executable
        self.input_names = list(input_names)
        self.input_specs = list(input_specs or [])
        self.device = device or tvm.cpu()
        self._vm = relax.VirtualMachine(executable, self.device)

    def _arrange(self, args: Sequence[Any], kwargs: dict) -> list[np.ndarray]:
        names = self.input_names
        if len(args) > len(names):
            raise ParamError(f"model takes {len(names)} input(s) ({', '.join(names)}), "
                             f"got {len(args)}")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names:
                raise ParamError(f"unknown input {name!r} (inputs: {', '.join(names)})", name)
            if name in values:
                raise ParamError(f"input {name!r} given twice", name)
            values[name] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise ParamError(f"missing input {missing[0]!r}", missing[0])
        arrays = [np.ascontiguousarray(values[n]) for n in names]
        for spec, array in zip(self.input_specs, arrays):
            _check_input(spec, array)
        return arrays

    def __call__(self, *args: Any, **kwargs: Any):
        arrays = self._arrange(args, kwargs)
        self.threads.apply()
        result = self._vm["main"](*[tvm.runtime.tensor(a, self.device) for a in arrays])
        return to_numpy(result)


def _check_input(spec: dict, array: np.ndarray) -> None:
    want_shape = [d if isinstance(d, int) else None for d in spec.get("shape", [])]
    shape_ok = len(want_shape) == array.ndim and all(
        w is None or w == s for w, s in zip(want_shape, array.shape))
    if not shape_ok or str(array.dtype) != spec.get("dtype", str(array.dtype)):
        raise ParamError(
            f"input {spec['name']!r}: expected shape {tuple(spec['shape'])} dtype "
            f"{spec['dtype']}, got shape {array.shape} dtype {array.dtype}", spec["name"])


def to_numpy(value: Any):
    if hasattr(value, "numpy"):
        return value.numpy()
    return tuple(to_numpy(v) for v in value)


def input_specs(func: relax.Function) -> list[dict]:
    """``[{name, shape, dtype}]`` of a Relax function's parameters (symbolic dims as str)."""
    specs = []
    for param in func.params:
        ty = param.ty
        shape = [int(d) if hasattr(d, "value") else str(d) for d in ty.shape.values]
        specs.append({"name": param.name, "shape": shape, "dtype": str(ty.dtype)})
    return specs


def write_signature(folder: str, specs: Sequence[dict], outputs: Sequence[dict] = ()) -> str:
    path = os.path.join(folder, SIGNATURE_FILE)
    with open(path, "w") as handle:
        json.dump({"inputs": list(specs), "outputs": list(outputs)}, handle, indent=2)
    return path


class LoadedModel(ModelRunner):
    """A model loaded from an ``export_library`` artifact."""

    def __init__(self, path: str, device: Any = None, num_threads: Optional[int] = None):
        if not os.path.exists(path):
            raise ParamError(f"artifact not found: {path}")
        self.path = path
        module = tvm.runtime.load_module(path)
        signature_path = os.path.join(os.path.dirname(os.path.abspath(path)), SIGNATURE_FILE)
        specs: list[dict] = []
        if os.path.exists(signature_path):
            with open(signature_path) as handle:
                specs = json.load(handle).get("inputs", [])
        names = [s["name"] for s in specs]
        super().__init__(module, names, specs, device, num_threads)

    def __call__(self, *args: Any, **kwargs: Any):
        if not self.input_names:  # no signature file: positional only, unchecked
            self.threads.apply()
            result = self._vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a), self.device)
                                        for a in args])
            return to_numpy(result)
        return super().__call__(*args, **kwargs)


def load(path: str, device: Any = None, num_threads: Optional[int] = None,
         remote: Any = None) -> ModelRunner:
    """Load a model artifact written by ``export_library`` / ``bmlib-relax convert``.

    ``num_threads``: default ``$TVM_NUM_THREADS``, else every CPU available.
    ``remote``: a ``tvm.rpc`` session; the artifact is uploaded and run there
    (:mod:`bmlib_relax.rpc`), ``device`` defaulting to the remote CPU.
    """
    if remote is not None:
        from .rpc import load_remote

        return load_remote(path, remote, device)
    return LoadedModel(os.fspath(path), device, num_threads)
