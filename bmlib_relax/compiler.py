"""``bmlib_relax.compile``: Relay program in, bmlib-offloaded Relax executable out.

The pipeline, one step per layer: import (Relay AST → Relax), partition
(``FuseOpsByPattern`` with the bmlib table), lower every partition to a TIR
PrimFunc, verify each PrimFunc's arity against its call, ``RunCodegen``, and
``tvm.compile`` the rest for the host.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import tvm

from . import interrupts
from .backend.codegen import codegen_session, is_bmlib_partition, lower_partition
from .backend.partition import partition_for_bmlib
from .backend.recursion_guard import guard_recursion_depth
from .backend.run_codegen import run_codegen
from .backend.target import resolve_target, runnable_target
from .backend.verify import verify_partition_arity
from .deep_stack import on_deep_stack, recursion_limit
from .errors import ConversionError, ParamError, UnsupportedOpError
from .host_legalize import legalize_for_host
from .host_tir import ensure_registered as host_tir_pipeline
from .importer import (IMPORT_RECURSION_LIMIT, RelayLike, as_relay_module, import_relay,
                       nests_deeply, provenance)
from .legacy.lowerings import lowering_scope
from .memory import memory_needs
from .preflight import require_main
from .relay import ast
from .relay.params import ParamsLike, load_params
from .relay.rewrite import with_input_types
from .report import OffloadReport, build_report, is_recursive
from .runtime import ModelRunner, export_artifact, input_specs
from .threads import ThreadConfig

TargetLike = Union[str, dict, tvm.target.Target, None]


def lower_and_verify(partitioned: tvm.IRModule,
                     on_partition: Optional[Callable[[int, int, str], None]] = None,
                     target: TargetLike = None) -> dict:
    """Lower (and schedule, for ``target``) every bmlib partition and check it
    against its call sites (no build).

    ``on_partition(index, total, name)`` is called before each one (progress).
    """
    names = [gvar.name_hint for gvar, func in partitioned.functions.items()
             if is_bmlib_partition(func)]
    lowered = {}
    for index, name in enumerate(sorted(names), 1):
        interrupts.raise_if_requested()
        if on_partition is not None:
            on_partition(index, len(names), name)
        lowered[name] = lower_partition(partitioned[name], name, target)
    verify_partition_arity(partitioned, {k: rec for k, (_, rec) in lowered.items()})
    return lowered


def build_verified(partitioned: tvm.IRModule, lowered: dict, target: TargetLike = None):
    """``RunCodegen`` with already verified partitions, then ``tvm.compile``."""
    with codegen_session(target, lowered) as records:
        with_ext = with_host_code(legalize_for_host(
            guard_recursion_depth(run_codegen(partitioned))))
        executable = tvm.compile(with_ext, target=resolve_target(target),
                                 tir_pipeline=host_tir_pipeline())
    return executable, dict(records)


HOST_ANCHOR = "__bmlib_host_anchor"


def with_host_code(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with at least one host TIR function.

    ``tvm.compile`` builds the host's TIR functions into one module; when there are
    none — every op offloaded, the case bmlib aims for — TVM 0.27 makes it an empty C
    source module (``";"``), and a "c" module in the import tree makes the
    executable's ``jit()`` export the whole library before it can run it: every
    weight constant serialised, compiled and linked by the system compiler and read
    back (ResNet-50: about 6 of 11 s of compile time).  One empty PrimFunc keeps the
    host module LLVM, which runs as it is.
    """
    if any(isinstance(func, tvm.tirx.PrimFunc) for func in mod.functions.values()):
        return mod
    anchor = tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(tvm.tirx.const(0, "int32")))
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)  # external_mods kept
    mod[HOST_ANCHOR] = anchor.with_attr("global_symbol", HOST_ANCHOR)
    return mod


def build_offloaded(partitioned: tvm.IRModule, target: TargetLike = None):
    """Verify, codegen and build a partitioned module for ``target`` (default: the
    host CPU). Returns (executable, records)."""
    target = resolve_target(target)
    return build_verified(partitioned, lower_and_verify(partitioned, target=target), target)


class CompiledModel(ModelRunner):
    """A compiled model: call it with numpy arrays, get numpy arrays back.

    Inputs are positional (in ``input_names`` order) or by name.  ``report``
    tells what was offloaded; ``relax_module`` is the partitioned module.
    """

    def __init__(self, executable, relax_module: tvm.IRModule, report: OffloadReport,
                 device=None, num_threads: Optional[int] = None):
        specs = input_specs(relax_module["main"])
        super().__init__(executable, [s["name"] for s in specs], specs, device, num_threads,
                         recursive=is_recursive(relax_module))
        self.relax_module = relax_module
        self.report = report
        self.memory_needs = memory_needs(relax_module)
        #: The Relay views of the import(s) this model came from (``compile`` sets it):
        #: legacy checks and reports read them through the spans of ``relax_module``.
        self.provenance_tables: list = []
        report.inputs = [dict(s) for s in specs]

    def flops(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        """``{"total", "offloaded", "host"}`` FLOPs of one run on these inputs: with
        symbolic dims (a free batch or sequence length) the report's formulas evaluated
        at the dims the inputs' shapes give."""
        arrays = self._arrange(args, kwargs)
        return self.report.flops_for(self.report.dims_of_inputs(arrays))

    def export_library(self, path: str, files: Sequence[str] = ()) -> str:
        """Write a shared library loadable with ``bmlib_relax.load``, plus its own metadata
        (``d/a.so`` → ``d/a.json``: input signature, SHA-256 of the library and of
        ``files``), both atomically.  Returns the metadata path."""
        from .flops import flops_text

        flops = {"total": flops_text(self.report.flops_total),
                 "offloaded": flops_text(self.report.flops_offloaded)}
        outputs = (self.report.signature or {}).get("outputs", ())
        return export_artifact(self.executable, os.fspath(path), self.input_specs,
                               outputs=outputs, files=files, flops=flops,
                               recursive=self.recursive,
                               largest_tensor=self.memory_needs.certain)


def unbound_inputs(module: ast.IRModule, weights: Mapping[str, Any],
                   declared: Optional[Sequence[str]] = None) -> list[str]:
    """The parameters of ``@main`` that no weight binds: the model's inputs.

    A params file that lacks one weight would otherwise silently turn that weight
    into a model input.  When the caller ``declared`` its inputs, every other
    unbound parameter is such a missing weight: one ``ParamError`` lists them all
    (before anything is built).  A declared name that is also given as a weight
    is refused too.
    """
    params = module["main"].params
    shared = sorted({v.name for v in params if v.name in weights and
                     sum(p.name == v.name for p in params) > 1})
    if shared:
        # Relay identifies variables by identity; a weight keyed by a shared name
        # would be bound to every parameter of that name (Relay refuses this too).
        raise ParamError(f"weight {shared[0]!r} is ambiguous: several parameters of @main "
                         f"are called {shared[0]!r}", shared[0])
    unbound = [v.name for v in params if v.name not in weights]
    if not declared:
        return unbound
    names = {v.name for v in params}
    declared = list(dict.fromkeys(declared))
    unknown = [n for n in declared if n not in names]
    if unknown:
        raise ParamError(f"declared input(s) {', '.join(map(repr, unknown))} are not "
                         f"parameters of @main (parameters: {', '.join(sorted(names))})",
                         unknown[0])
    both = [n for n in declared if n in weights]
    if both:
        raise ParamError(f"declared input(s) {', '.join(map(repr, both))} are also given as "
                         "weights", both[0])
    missing = [n for n in dict.fromkeys(unbound) if n not in declared]
    if missing:
        raise ParamError(
            f"{len(missing)} parameter(s) of @main are neither declared inputs nor given "
            f"weights (missing weights?): {', '.join(missing)} "
            f"(declared inputs: {', '.join(declared)})", missing[0])
    return unbound


#: Python frames a compile may nest (it runs on the deep stack's thread): the importer's
#: bound, which the passes after it stay within.
COMPILE_RECURSION_LIMIT = IMPORT_RECURSION_LIMIT


def compile(relay_mod: RelayLike, params: ParamsLike = None, *, target: TargetLike = None,
            patterns: Optional[Sequence[Any]] = None, merge: bool = False,
            input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
            lowerings: Optional[Mapping[str, Callable]] = None,
            num_threads: Optional[int] = None,
            inputs: Optional[Sequence[str]] = None,
            blocked_layout: Optional[bool] = None) -> CompiledModel:
    """Compile a Relay program (or a Relax module) with bmlib offload.

    ``relay_mod`` is Relay text, a parsed module or a function, or a Relax
    ``tvm.IRModule`` (e.g. from ``tvm.relax.frontend.onnx.from_onnx``; see
    :mod:`bmlib_relax.relax_input`); ``params`` a dict
    of arrays (or an ``.npz``/``.params`` path) bound as weights.  ``patterns``
    defaults to the built-in ``bmlib`` table; a list of ``(name, pattern[,
    check])`` may use Relax DPL or legacy Relay DFPatterns.  ``target`` defaults to
    the host CPU (``{"kind": "llvm", "mcpu": <llvm_get_system_cpu()>}``); TVM
    target dicts, strings and ``Target`` objects are accepted.  ``input_shapes``
    (``{"data": (1, 3, 224, 224)}``) pins dynamic (``?``) input dims: the bmlib
    templates take static shapes only, so a dynamic model is otherwise left to
    the host.  ``lowerings`` (``{composite name: fn(call, inputs)}``, a legacy
    ``_LOWER_MAP``) apply to this call only.  The model runs on ``num_threads``
    threads (default ``$TVM_NUM_THREADS``, else every CPU available to the process).

    ``inputs`` (names) declares the model's inputs, as do the keys of
    ``input_shapes``: every other parameter of ``@main`` must then be bound by
    ``params``, or a ``ParamError`` lists the missing weights.  Without a
    declaration the unbound parameters are the inputs (``report.inputs``).
    ``blocked_layout=False`` (or ``$BMLIB_BLOCKED_LAYOUT=0``) keeps every activation
    NCHW between partitions (see :mod:`.backend.blocked_layout`; for A/B timing).
    """
    target = runnable_target(target)
    ThreadConfig(num_threads)  # a bad num_threads / $TVM_NUM_THREADS fails before compiling
    # TVM's scopes are per thread: the caller's PassContext (config, instruments) and
    # target scope apply on the deep stack's thread too
    pass_context = tvm.transform.PassContext.current()
    target_scope = tvm.target.Target.current(allow_none=True)

    def run() -> "CompiledModel":
        with pass_context, target_scope or contextlib.nullcontext(), \
                recursion_limit(COMPILE_RECURSION_LIMIT):
            return _compile(relay_mod, params, target, patterns, merge, lowerings, inputs,
                            input_shapes, blocked_layout, num_threads)

    if not isinstance(relay_mod, tvm.IRModule):
        relay_mod = as_relay_module(relay_mod)  # parsed once, to measure its nesting
    deep = not isinstance(relay_mod, tvm.IRModule) and nests_deeply(relay_mod)
    with provenance.tables_created() as tables:
        try:
            # The import and the passes after it (branch lifting, partitioning, the
            # report) recurse a few frames per nested if/let/function body, several of
            # them through TVM's FFI: on the main thread's 8 MiB, 400 nested ifs crashed
            # the process once Python's limit allowed them.  Such programs compile on a
            # deep stack; every other one on the caller's thread.
            model = on_deep_stack(run) if deep else _compile(
                relay_mod, params, target, patterns, merge, lowerings, inputs, input_shapes,
                blocked_layout, num_threads)
        except RecursionError:
            raise ConversionError(
                f"the program nests too deeply to compile (if/let/function bodies inside "
                f"each other past {COMPILE_RECURSION_LIMIT:,} Python frames); flatten the "
                "nesting (a chain of ifs choosing values can be a where/select)") from None
    model.provenance_tables = tables  # the model's Relay views live (and die) with it
    return model


def _compile(relay_mod, params, target, patterns, merge, lowerings, inputs, input_shapes,
             blocked_layout, num_threads) -> "CompiledModel":
    weights = load_params(params)
    if isinstance(relay_mod, tvm.IRModule):  # a Relax module (ONNX, PyTorch, TVMScript)
        from .relax_input import prepare_relax_module

        imported = prepare_relax_module(relay_mod, weights, input_shapes, inputs)
    else:
        module = require_main(as_relay_module(relay_mod))
        if input_shapes:
            module = with_input_types(module, {k: (v, None) for k, v in input_shapes.items()})
        unbound_inputs(module, weights, list(inputs or ()) + list(input_shapes or ()))
        # Tuple-typed inputs become one tensor input per field (``t.0``, ...).
        imported = import_relay(module, weights, flatten_tuple_inputs=True)
        if isinstance(module["main"].ret_type, ast.FuncType):
            span = getattr(module["main"], "span", None)
            raise UnsupportedOpError([(
                "@main returns a function (a model returns tensors; import_relay + "
                "tvm.compile gives the VM closure)", str(span) if span else None)],
                what="construct")
    with lowering_scope(lowerings):
        partitioned = partition_for_bmlib(imported, patterns=patterns, merge=merge,
                                          target=target, blocked_layout=blocked_layout)
        executable, records = build_offloaded(partitioned, target)
    report = build_report(partitioned, records, target, patterns)
    return CompiledModel(executable, partitioned, report, num_threads=num_threads)


def compile_plain(relax_mod: tvm.IRModule, target: TargetLike = None):
    """The unoffloaded reference build (TVM's default legalization; a division by a
    constant scalar zero computed per element, as Relay did: see :mod:`.host_legalize`)."""
    return tvm.compile(legalize_for_host(guard_recursion_depth(relax_mod)),
                       target=resolve_target(target),
                       tir_pipeline=host_tir_pipeline())
