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

from .backend.codegen import PartitionRecord, is_bmlib_partition
from .backend.host_reasons import host_reasons
from .backend.verify import partition_call_sites
from .flops import (Flops, count_flops, evaluate_flops, flops_text, flops_vars, is_symbolic,
                    per_unit, simplify_flops, substitute_dims)

# Bookkeeping ops that are not computation.
_NON_OPS = {"relax.call_dps_packed", "relax.call_tir", "relax.call_pure_packed"}
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

    @property
    def unscheduled_blocks(self) -> int:
        return len(self.unscheduled)

    def to_dict(self) -> dict[str, Any]:
        data = {"name": self.name, "composites": list(self.composites), "ops": list(self.ops),
                "num_params": self.num_params, "num_args": self.num_args,
                "flops": per_unit(self.flops), "calls": self.calls,
                "unscheduled_blocks": self.unscheduled_blocks,
                "unscheduled": list(self.unscheduled)}
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


def _op_calls(func: relax.Function) -> list[relax.Call]:
    """Relax op calls in ``func`` (nested composite functions included)."""
    calls: list[relax.Call] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.name not in _NON_OPS:
            calls.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return calls


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
        if not isinstance(expr, relax.Call):
            return 0
        callee = local.get(expr.op, expr.op) if isinstance(expr.op, relax.Var) else expr.op
        if isinstance(callee, relax.Function):
            return walk(callee.body)
        if isinstance(callee, tvm.ir.Op) and callee.name not in _NON_OPS:
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


def _host_functions(mod: tvm.IRModule):
    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not is_bmlib_partition(func) and \
                (func.attrs is None or "Composite" not in func.attrs):
            yield func


def host_ops(mod: tvm.IRModule) -> Counter:
    """Relax op calls left outside bmlib partitions (in non-partition functions)."""
    return Counter(call.op.name for func in _host_functions(mod) for call in _op_calls(func))


def output_specs(func: relax.Function) -> list[dict]:
    """``[{name, shape, dtype}]`` of a Relax function's results (``out0``, ``out1`` ...)."""
    ret = func.ret_ty
    fields = list(ret.fields) if isinstance(ret, (relax.TupleType, tvm.ir.TupleType)) else [ret]
    specs = []
    for index, ty in enumerate(fields):
        shape = getattr(ty, "shape", None)
        dims = [int(d) if hasattr(d, "value") else str(d) for d in shape.values] \
            if shape is not None and hasattr(shape, "values") else None
        specs.append({"name": f"out{index}", "shape": dims, "dtype": str(getattr(ty, "dtype", ""))})
    return specs


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
    calls = Counter(name for name, _ in partition_call_sites(partitioned))
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
            unscheduled=[str(b) for b in record.unscheduled]))
        for _ in range(count):
            report.ops_offloaded.update(record.ops)
        report.flops_offloaded += flops * count
    report.partitions.sort(key=lambda p: p.name)
    report.ops_host = host_ops(partitioned)
    report.flops_host = sum(_flops_of(func) for func in _host_functions(partitioned))
    if report.ops_host:
        report.host_reasons = host_reasons(
            partitioned, _host_functions(partitioned),
            table if table is not None else resolve_patterns(patterns))
    return report
