"""The offload report: what went to bmlib, what stayed on the host.

Built from the partitioned module and the codegen's records, so it describes
what was actually compiled, not what the patterns intended.  FLOPs come from
the per-op counters of :mod:`bmlib_relax.flops` (a multiply-add is 2 FLOPs).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import tvm
from tvm import relax

from .backend.call_graph import call_graph, callees_first
from .backend.codegen import PartitionRecord, is_bmlib_partition
from .backend.host_reasons import NON_OPS, host_reasons, model_op_calls, op_name_of
from .backend.verify import partition_call_sites
from .dims import dim_or_text
from .flops import (Flops, count_flops, evaluate_flops, flops_text, flops_vars, is_symbolic,
                    per_unit, simplify_flops, substitute_dims)

# Bookkeeping ops that are not computation.
# Calls that compute nothing of the model: calling conventions, and the run-time
# checks the importer adds (``assert_op``: a comparison of shape values on the host).
_NAME_WIDTH = 44


@dataclass
class PartitionInfo:
    name: str
    composites: list[str]
    ops: list[str]
    num_params: int
    num_args: int
    # per call: an int, or a PrimExpr of the symbolic dims (see bmlib_relax.flops)
    flops: Flops = 0
    calls: int = 1  # structurally equal partitions are one function called several times
    # "block (rule: reason)" of blocks whose schedule rule was rolled back (slow, correct)
    unscheduled: list[str] = field(default_factory=list)
    # element types it computes in: {"inputs": [...], "outputs": [...]} (int8 vs float32)
    dtypes: dict = field(default_factory=dict)

    @property
    def unscheduled_blocks(self) -> int:
        return len(self.unscheduled)

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "composites": list(self.composites), "ops": list(self.ops),
                "num_params": self.num_params, "num_args": self.num_args,
                "flops": per_unit(self.flops), "calls": self.calls,
                "unscheduled_blocks": self.unscheduled_blocks,
                "unscheduled": list(self.unscheduled), "dtypes": dict(self.dtypes)}
        if is_symbolic(self.flops):
            data["flops_expr"] = flops_text(self.flops)
        return data


@dataclass
class OffloadReport:
    partitions: list[PartitionInfo] = field(default_factory=list)
    ops_offloaded: Counter = field(default_factory=Counter)
    ops_host: Counter = field(default_factory=Counter)
    # ints, or PrimExprs of the model's symbolic dims (a free batch / sequence length)
    flops_offloaded: Flops = 0
    flops_host: Flops = 0
    # why each host op stayed there: HostReason -> count
    host_reasons: Counter = field(default_factory=Counter)
    # what it was built with and for: target, versions, input/output signature of main
    target: str = ""
    versions: dict = field(default_factory=dict)
    signature: dict = field(default_factory=dict)
    # The model's inputs (the parameters of main no weight binds): name, shape, dtype.
    inputs: list[dict] = field(default_factory=list)
    # Per Relax function (main, Relay globals, lifted loops): op and FLOP counts of one
    # run of its own body, each partition it calls counted once per call site
    # (function_counts), and "runs": how often it runs per call of main (function_runs).
    # The totals above weight each function by its runs.
    functions: dict = field(default_factory=dict)

    @property
    def num_offloaded(self) -> int:
        return sum(self.ops_offloaded.values())

    @property
    def flops_total(self) -> Flops:
        return simplify_flops(self.flops_offloaded + self.flops_host)

    @property
    def symbolic_dims(self) -> list[str]:
        """Names of the symbolic dims the FLOP counts depend on (empty when static)."""
        return sorted(set(flops_vars(self.flops_offloaded)) | set(flops_vars(self.flops_host)))

    def flops_for(self, dims: Mapping[str, int]) -> dict[str, int]:
        """``{"total", "offloaded", "host"}`` FLOPs for concrete symbolic dims (by name,
        e.g. ``{"d0": 17}``); a ``ParamError`` names a dim that is not given."""
        from .errors import ParamError

        try:
            offloaded = evaluate_flops(self.flops_offloaded, dims)
            host = evaluate_flops(self.flops_host, dims)
        except KeyError as exc:
            raise ParamError(f"FLOPs depend on the symbolic dim {exc.args[0]}, which the "
                             f"given dims {dict(dims)} do not set", exc.args[0]) from None
        return {"total": offloaded + host, "offloaded": offloaded, "host": host}

    def dims_of_inputs(self, arrays: Sequence[Any]) -> dict[str, int]:
        """The symbolic dims (by name) that input ``arrays`` (in signature order) fix."""
        from .runtime import symbolic_dims_of

        return symbolic_dims_of(self.signature.get("inputs", []), arrays)

    @property
    def offloaded_fraction(self) -> float:
        """Share of the model's FLOPs computed on bmlib (1.0 for a FLOP-free model); with
        symbolic dims, at every symbolic dim 1."""
        total = per_unit(self.flops_total)
        return per_unit(self.flops_offloaded) / total if total else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "partitions": [p.to_dict() for p in self.partitions],
            "ops_offloaded": dict(sorted(self.ops_offloaded.items())),
            "ops_host": dict(sorted(self.ops_host.items())),
            # ints: with symbolic dims, at every symbolic dim 1 (per sample / per token);
            # the formulas are in "flops_symbolic"
            "flops_total": per_unit(self.flops_total),
            "flops_offloaded": per_unit(self.flops_offloaded),
            "flops_symbolic": None if not self.symbolic_dims else {
                "dims": self.symbolic_dims, "total": flops_text(self.flops_total),
                "offloaded": flops_text(self.flops_offloaded),
                "host": flops_text(self.flops_host)},
            "target": self.target,
            "versions": dict(self.versions),
            "signature": dict(self.signature),
            "host_ops": [reason.to_dict(count) for reason, count in
                         sorted(self.host_reasons.items(),
                                key=lambda item: (item[0].op, item[0].reason, item[0].detail))],
            "inputs": [dict(i) for i in self.inputs],
            "functions": {k: _function_entry(v) for k, v in sorted(self.functions.items())},
        }

    def __str__(self) -> str:
        lines = [f"bmlib offload report: {len(self.partitions)} partition(s), "
                 f"{self.num_offloaded} op(s) on bmlib, {sum(self.ops_host.values())} on host",
                 f"FLOPs: {_si(self.flops_total)} total, {_si(self.flops_offloaded)} on bmlib "
                 f"({100 * self.offloaded_fraction:.1f} %), {_si(self.flops_host)} on host"]
        if self.symbolic_dims:
            lines[-1] += (f" (symbolic dims {', '.join(self.symbolic_dims)}; "
                          f"% at {'='.join(self.symbolic_dims)}=1)")
        if self.partitions:
            width = min(max(len(p.name) for p in self.partitions), _NAME_WIDTH)
            lines.append(f"  {'partition':<{width}}  calls  params  args    FLOPs  "
                         "composites / ops")
            for p in self.partitions:
                lines.append(f"  {_clip(p.name, width):<{width}}  {p.calls:>5}  "
                             f"{p.num_params:>6}  {p.num_args:>4}  {_si(p.flops):>7}  "
                             f"{', '.join(p.composites)}")
                lines.append(f"  {'':<{width}}  {'':>5}  {'':>6}  {'':>4}  {'':>7}  "
                             f"{' '.join(_short(o) for o in p.ops)}")
                for block in p.unscheduled:
                    lines.append(f"  {'':<{width}}  unscheduled (rolled back): {block}")
        unscheduled = sum(p.unscheduled_blocks for p in self.partitions)
        if unscheduled:
            lines.append(f"  unscheduled blocks: {unscheduled} (a schedule rule failed and was "
                         "rolled back: correct, but slow)")
        for title, counts in (("on bmlib", self.ops_offloaded), ("on host", self.ops_host)):
            body = ", ".join(f"{_short(k)} x{v}" for k, v in sorted(counts.items())) or "-"
            lines.append(f"  ops {title}: {body}")
        for reason, count in sorted(self.host_reasons.items(),
                                    key=lambda item: (item[0].op, item[0].detail)):
            lines.append(f"    host {_short(reason.op)} x{count}: {reason.detail}")
        if len(self.functions) > 1:
            lines.append("  per function (ops on bmlib/host, FLOPs on bmlib/host):")
            for name, c in sorted(self.functions.items()):
                runs = f" (runs {c['runs']}x)" if c.get("runs", 1) != 1 else ""
                lines.append(f"    {name}{runs}: {c['ops_offloaded']}/{c['ops_host']} ops, "
                             f"{_si(per_unit(c['flops_offloaded']))}/"
                             f"{_si(per_unit(c['flops_host']))} FLOPs, "
                             f"{len(c['partitions'])} partition call(s)")
        return "\n".join(lines)


def _si(flops: Flops) -> str:
    if is_symbolic(flops):
        return flops_text(flops)
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if flops >= scale:
            return f"{flops / scale:.2f}{unit}"
    return str(flops)


def _clip(name: str, width: int) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def _short(op_name: str) -> str:
    return op_name[len("relax."):] if op_name.startswith("relax.") else op_name


def _flops_of(func: relax.Function) -> Flops:
    """FLOPs of one call of ``func``: every op counted each time it runs, so a local
    composite function called twice (after ``MergeCompositeFunctions``) counts twice."""
    local: dict = {}

    def walk(expr) -> int:
        if isinstance(expr, relax.SeqExpr):
            total = 0
            for block in expr.blocks:
                for binding in block.bindings:
                    if isinstance(binding.value, relax.Function):
                        local[binding.var] = binding.value
                    else:
                        total += walk(binding.value)
            return total + walk(expr.body)
        if isinstance(expr, relax.If):  # both branches, as the op counts
            return walk(expr.true_branch) + walk(expr.false_branch)
        if not isinstance(expr, relax.Call):
            return 0
        callee = local.get(expr.op, expr.op) if isinstance(expr.op, relax.Var) else expr.op
        if isinstance(callee, relax.Function):
            return walk(callee.body)
        if isinstance(callee, tvm.ir.Op) and callee.name not in NON_OPS:
            return count_flops(expr)
        return 0

    return simplify_flops(walk(func.body))


def _in_caller_dims(flops: Flops, func: relax.Function, name: str,
                    mod: tvm.IRModule) -> Flops:
    """A partition's FLOPs in its caller's symbolic dims: a partition has symbolic vars
    of its own (``d0`` in each), mapped through its (first) call site's arguments, so
    the model's total is one formula of ``main``'s dims."""
    if not is_symbolic(flops):
        return flops
    calls = [call for site, call in partition_call_sites(mod) if site == name]
    return _at_call_site(flops, func, calls[0]) if calls else flops


def _at_call_site(flops: Flops, func: relax.Function, call: relax.Call) -> Flops:
    """A partition's FLOPs in the symbolic dims of the arguments ``call`` passes."""
    mapping = []
    for param, arg in zip(func.params, call.args):
        shape, given = getattr(param.ty, "shape", None), getattr(arg.ty, "shape", None)
        if not hasattr(shape, "values") or not hasattr(given, "values"):
            continue
        for dim, value in zip(shape.values, given.values):
            if isinstance(dim, tvm.tirx.Var) and not any(dim.same_as(v) for v, _ in mapping):
                mapping.append((dim, value))
    return substitute_dims(flops, mapping)


def _is_host_function(func) -> bool:
    return isinstance(func, relax.Function) and not is_bmlib_partition(func) and \
        (func.attrs is None or "Composite" not in func.attrs)


def _host_functions(mod: tvm.IRModule):
    for func in mod.functions.values():
        if _is_host_function(func):
            yield func


def host_ops(mod: tvm.IRModule, runs: Optional[Mapping[str, int]] = None) -> Counter:
    """Relax op calls left outside bmlib partitions (in non-partition functions), each
    counted ``runs[function]`` times (default once)."""
    counts: Counter = Counter()
    for gv, func in mod.functions.items():
        if _is_host_function(func):
            times = (runs or {}).get(gv.name_hint, 1)
            for call in model_op_calls(func):
                counts[op_name_of(call)] += times
    return counts


def _call_graph(mod: tvm.IRModule) -> dict[str, Counter]:
    """``{function: Counter(callee: call sites)}`` over the Relax functions that are no
    partitions."""
    return call_graph(mod, skip=is_bmlib_partition)


def is_recursive(mod: tvm.IRModule, entry: str = "main") -> bool:
    """Whether a call of ``entry`` can recurse (a Relay loop or recursive global): the
    VM then nests a native call per iteration (see ``runtime.ModelRunner``)."""
    return bool(callees_first(_call_graph(mod), entry)[1])


def function_runs(mod: tvm.IRModule, entry: str = "main") -> dict[str, int]:
    """How many times each Relax function runs per call of ``entry``, from the call
    graph: once per call site in each run of its caller (both branches of an ``If``
    counted); a call inside a cycle (recursion: trip count unknown) adds nothing."""
    sites = _call_graph(mod)
    order, back_edges = callees_first(sites, entry)
    runs: dict[str, int] = {}
    if entry in sites:
        runs[entry] = 1
    for name in reversed(order):
        for callee, count in sites[name].items():
            if callee in sites and (name, callee) not in back_edges:
                runs[callee] = runs.get(callee, 0) + runs.get(name, 0) * count
    return runs


def _function_entry(counts: dict) -> dict:
    """A ``functions`` entry for JSON: FLOP formulas at every symbolic dim 1, as the totals."""
    return {k: per_unit(v) if k.startswith("flops") else v for k, v in counts.items()}


def function_counts(mod: tvm.IRModule, records: Mapping[str, PartitionRecord]) -> dict:
    """``{function: {ops_offloaded, ops_host, flops_offloaded, flops_host, partitions}}``
    for every Relax function that is not a partition: what its own body computes (a
    function it calls is counted in its own entry, not the caller's)."""
    partitions = {gv.name_hint: f for gv, f in mod.functions.items() if is_bmlib_partition(f)}
    counts = {}
    for gvar, func in mod.functions.items():
        if gvar.name_hint in partitions or not isinstance(func, relax.Function) or \
                (func.attrs is not None and "Composite" in func.attrs):
            continue
        called: list[str] = []

        def visit(expr, called=called):
            if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and \
                    expr.op.name_hint in partitions:
                called.append(expr.op.name_hint)

        relax.analysis.post_order_visit(func, visit)
        offloaded = [records[n] for n in called if n in records]
        counts[gvar.name_hint] = {
            "ops_offloaded": sum(len(r.ops) for r in offloaded),
            "ops_host": len(model_op_calls(func)),
            "flops_offloaded": sum(_flops_of(partitions[n]) for n in called if n in records),
            "flops_host": _flops_of(func),
            "partitions": sorted(called)}
    return counts


def partition_dtypes(func: relax.Function) -> dict[str, list[str]]:
    """The distinct dtypes of a partition's tensor inputs and outputs, in order seen."""
    def dtypes(types) -> list[str]:
        seen: list[str] = []
        for ty in types:
            fields = ty.fields if isinstance(ty, relax.TupleType) else [ty]
            for f in fields:
                if isinstance(f, relax.TensorType) and str(f.dtype) not in seen:
                    seen.append(str(f.dtype))
        return seen

    return {"inputs": dtypes(p.ty for p in func.params), "outputs": dtypes([func.body.ty])}


def output_specs(func: relax.Function) -> list[dict]:
    """``[{name, shape, dtype}]`` of a Relax function's results: ``out0``, ``out1`` ...,
    a nested tuple's fields as ``out1.0``, ``out1.1`` (the names ``convert`` and ``run``
    give the arrays: ``runtime.named_outputs``)."""
    ret = func.ret_ty
    tuple_types = (relax.TupleType, tvm.ir.TupleType)
    fields = list(ret.fields) if isinstance(ret, tuple_types) else [ret]

    def specs_of(ty, name: str) -> list[dict]:
        if isinstance(ty, tuple_types):
            return [spec for i, field in enumerate(ty.fields)
                    for spec in specs_of(field, f"{name}.{i}")]
        shape = getattr(ty, "shape", None)
        dims = [dim_or_text(d) for d in shape.values] \
            if shape is not None and hasattr(shape, "values") else None
        return [{"name": name, "shape": dims, "dtype": str(getattr(ty, "dtype", ""))}]

    return [spec for index, ty in enumerate(fields) for spec in specs_of(ty, f"out{index}")]


def build_report(partitioned: tvm.IRModule,
                 records: Mapping[str, PartitionRecord], target: Any = None,
                 patterns: Optional[Sequence[Any]] = None,
                 table: Optional[Sequence[Any]] = None) -> OffloadReport:
    """The report of a partitioned and built module for ``target``; ``patterns`` is the
    table it was partitioned with (default: the built-in one; or ``table``, the same
    already resolved), to say why host ops stayed there."""
    from .backend.partition import resolve_patterns
    from .backend.target import resolve_target
    from .runtime import input_specs
    from .versions import versions

    report = OffloadReport(target=str(resolve_target(target)), versions=versions())
    if "main" in [g.name_hint for g in partitioned.functions]:
        main = partitioned["main"]
        report.signature = {"inputs": input_specs(main), "outputs": output_specs(main)}
    runs = function_runs(partitioned)
    calls = Counter()  # partition -> calls per run of main (a function called twice: 2x)
    for name, entry in function_counts(partitioned, records).items():
        for partition in entry["partitions"]:
            calls[partition] += runs.get(name, 1)
    for name, _ in partition_call_sites(partitioned):
        calls.setdefault(name, 1)
    for gvar, func in partitioned.functions.items():
        if not is_bmlib_partition(func):
            continue
        record = records.get(gvar.name_hint)
        if record is None:
            continue
        flops = _in_caller_dims(_flops_of(func), func, gvar.name_hint, partitioned)
        count = calls.get(gvar.name_hint, 1)
        report.partitions.append(PartitionInfo(
            name=record.name, composites=list(record.composites), ops=list(record.ops),
            num_params=record.num_params, num_args=record.num_args, flops=flops, calls=count,
            unscheduled=[str(b) for b in record.unscheduled], dtypes=partition_dtypes(func)))
        for _ in range(count):
            report.ops_offloaded.update(record.ops)
        report.flops_offloaded += flops * count
    report.partitions.sort(key=lambda p: p.name)
    report.functions = function_counts(partitioned, records)
    for name, entry in report.functions.items():
        entry["runs"] = runs.get(name, 1)
    report.ops_host = host_ops(partitioned, runs)
    report.flops_host = sum(_flops_of(func) * runs.get(gv.name_hint, 1)
                            for gv, func in partitioned.functions.items()
                            if _is_host_function(func))
    if report.ops_host:
        report.host_reasons = host_reasons(
            partitioned, _host_functions(partitioned),
            table if table is not None else resolve_patterns(patterns))
    return report
