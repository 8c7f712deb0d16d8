"""``bmlib_relax.compile``: Relay program in, bmlib-offloaded Relax executable out.

The pipeline, one step per layer: import (Relay AST → Relax), partition
(``FuseOpsByPattern`` with the bmlib table), lower every partition to a TIR
PrimFunc, verify each PrimFunc's arity against its call, ``RunCodegen``, and
``tvm.compile`` the rest for the host.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import tvm
from tvm import relax

from .backend.codegen import _SESSION, codegen_session, lower_partition
from .backend.partition import partition_for_bmlib
from .backend.verify import partition_call_sites, verify_partition_arity
from .errors import BmlibError, ParamError
from .importer import RelayLike, as_relay_module, import_relay
from .relay.params import ParamsLike, load_params
from .report import OffloadReport, _is_partition, build_report

TargetLike = Union[str, dict, tvm.target.Target]


def lower_and_verify(partitioned: tvm.IRModule) -> dict:
    """Lower every bmlib partition and check it against its call sites (no build)."""
    lowered = {}
    for gvar, func in partitioned.functions.items():
        if _is_partition(func):
            lowered[gvar.name_hint] = lower_partition(func, gvar.name_hint)
    verify_partition_arity(partitioned, {k: rec for k, (_, rec) in lowered.items()})
    return lowered


def build_offloaded(partitioned: tvm.IRModule, target: TargetLike = "llvm"):
    """Verify, codegen and build a partitioned module. Returns (executable, records)."""
    lowered = lower_and_verify(partitioned)
    with codegen_session(target) as records:
        _SESSION.get()["lowered"] = lowered
        with_ext = relax.transform.RunCodegen()(partitioned)
        executable = tvm.compile(with_ext, target=tvm.target.Target(target))
    return executable, dict(records)


class CompiledModel:
    """A compiled model: call it with numpy arrays, get numpy arrays back.

    Inputs are positional (in ``input_names`` order) or by name.  A single
    output is returned as an array, several as a tuple.
    """

    def __init__(self, executable, relax_module: tvm.IRModule, report: OffloadReport,
                 input_names: Sequence[str], device=None):
        self.executable = executable
        self.relax_module = relax_module
        self.report = report
        self.input_names = list(input_names)
        self.device = device or tvm.cpu()
        self._vm = relax.VirtualMachine(executable, self.device)

    def __call__(self, *args: Any, **kwargs: Any):
        if len(args) > len(self.input_names):
            raise ParamError(f"model takes {len(self.input_names)} input(s) "
                             f"({', '.join(self.input_names)}), got {len(args)}")
        values = dict(zip(self.input_names, args))
        for name, value in kwargs.items():
            if name not in self.input_names:
                raise ParamError(f"unknown input {name!r} (inputs: "
                                 f"{', '.join(self.input_names)})", name)
            if name in values:
                raise ParamError(f"input {name!r} given twice", name)
            values[name] = value
        missing = [n for n in self.input_names if n not in values]
        if missing:
            raise ParamError(f"missing input {missing[0]!r}", missing[0])
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(values[n]), self.device)
                   for n in self.input_names]
        return _to_numpy(self._vm["main"](*tensors))

    def export_library(self, path: str) -> None:
        self.executable.export_library(path)


def _to_numpy(value: Any):
    if hasattr(value, "numpy"):
        return value.numpy()
    return tuple(_to_numpy(v) for v in value)


def compile(relay_mod: RelayLike, params: ParamsLike = None, *, target: TargetLike = "llvm",
            patterns: Optional[Sequence[Any]] = None, merge: bool = False) -> CompiledModel:
    """Compile a Relay program with bmlib offload.

    ``relay_mod`` is Relay text, a parsed module or a function; ``params`` a dict
    of arrays (or an ``.npz``/``.params`` path) bound as weights.  ``patterns``
    defaults to the built-in ``bmlib`` table; a list of ``(name, pattern[,
    check])`` may use Relax DPL or legacy Relay DFPatterns.
    """
    module = as_relay_module(relay_mod)
    imported = import_relay(module, load_params(params))
    partitioned = partition_for_bmlib(imported, patterns=patterns, merge=merge)
    executable, records = build_offloaded(partitioned, target)
    report = build_report(partitioned, records)
    inputs = [p.name for p in imported["main"].params]
    return CompiledModel(executable, partitioned, report, inputs)


def compile_plain(relax_mod: tvm.IRModule, target: TargetLike = "llvm"):
    """The unoffloaded reference build (TVM's default legalization)."""
    return tvm.compile(relax_mod, target=tvm.target.Target(target))
