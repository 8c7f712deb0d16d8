"""The offload report: what went to bmlib, what stayed on the host.

Built from the partitioned module and the codegen's records, so it describes
what was actually compiled, not what the patterns intended.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import tvm
from tvm import relax

from .backend.codegen import CODEGEN_NAME, PartitionRecord

# Bookkeeping ops that are not computation.
_NON_OPS = {"relax.call_dps_packed", "relax.call_tir", "relax.call_pure_packed"}


@dataclass
class PartitionInfo:
    name: str
    composites: list[str]
    ops: list[str]
    num_params: int
    num_args: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "composites": list(self.composites), "ops": list(self.ops),
                "num_params": self.num_params, "num_args": self.num_args}


@dataclass
class OffloadReport:
    partitions: list[PartitionInfo] = field(default_factory=list)
    ops_offloaded: Counter = field(default_factory=Counter)
    ops_host: Counter = field(default_factory=Counter)

    @property
    def num_offloaded(self) -> int:
        return sum(self.ops_offloaded.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "partitions": [p.to_dict() for p in self.partitions],
            "ops_offloaded": dict(sorted(self.ops_offloaded.items())),
            "ops_host": dict(sorted(self.ops_host.items())),
        }

    def __str__(self) -> str:
        lines = [f"bmlib offload report: {len(self.partitions)} partition(s), "
                 f"{self.num_offloaded} op(s) on bmlib, {sum(self.ops_host.values())} on host"]
        if self.partitions:
            width = max(len(p.name) for p in self.partitions)
            lines.append(f"  {'partition':<{width}}  params  args  composites / ops")
            for p in self.partitions:
                lines.append(f"  {p.name:<{width}}  {p.num_params:>6}  {p.num_args:>4}  "
                             f"{', '.join(p.composites)}")
                lines.append(f"  {'':<{width}}  {'':>6}  {'':>4}  {' '.join(_short(o) for o in p.ops)}")
        for title, counts in (("on bmlib", self.ops_offloaded), ("on host", self.ops_host)):
            body = ", ".join(f"{_short(k)} x{v}" for k, v in sorted(counts.items())) or "-"
            lines.append(f"  ops {title}: {body}")
        return "\n".join(lines)


def _short(op_name: str) -> str:
    return op_name[len("relax."):] if op_name.startswith("relax.") else op_name


def _is_partition(func: Any) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and \
        str(func.attrs.get("Codegen", "")) == CODEGEN_NAME


def host_ops(mod: tvm.IRModule) -> Counter:
    """Relax op calls left outside bmlib partitions (in non-partition functions)."""
    counts: Counter = Counter()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.name not in _NON_OPS:
            counts[expr.op.name] += 1

    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and not _is_partition(func) and \
                (func.attrs is None or "Composite" not in func.attrs):
            relax.analysis.post_order_visit(func, visit)
    return counts


def build_report(partitioned: tvm.IRModule,
                 records: Mapping[str, PartitionRecord]) -> OffloadReport:
    report = OffloadReport()
    for gvar, func in partitioned.functions.items():
        if not _is_partition(func):
            continue
        record = records.get(gvar.name_hint)
        if record is None:
            continue
        report.partitions.append(PartitionInfo(
            name=record.name, composites=list(record.composites), ops=list(record.ops),
            num_params=record.num_params, num_args=record.num_args))
        report.ops_offloaded.update(record.ops)
    report.partitions.sort(key=lambda p: p.name)
    report.ops_host = host_ops(partitioned)
    return report
