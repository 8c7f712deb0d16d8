"""Why an op stayed on the host: one reason per op call left outside bmlib.

A user reading "ops on host: nn.conv2d x53" needs to know what to change: the
op may have no bmlib template, use a dtype or a dynamic shape the templates do
not take, have matched a pattern whose check turned it down (which one), or
simply not be covered by any pattern of the table.  The reasons are tried in
that order, each from the op call itself and the table that partitioned it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import tvm
from tvm import relax

from ..dims import all_static
from ..importer.provenance import relay_call_of
from .patterns import (HOST_VIEW_OPS, MAX_TEMPLATE_ELEMENTS, STANDALONE_VIEW_ENTRIES,
                       SUPPORTED_DTYPES, has_no_elements, static_elements)
from .qnn_patterns import QNN_DTYPES
from .templates import get_template, supports_symbolic_dims, symbolic_batch_only

NO_TEMPLATE = "no_template"
DTYPE = "dtype_not_supported"
DYNAMIC = "dynamic_shape"
REJECTED = "rejected_by_check"
TOO_LARGE = "tensor_too_large"
UNMATCHED = "unmatched"
VIEW = "view_on_host"

#: Calls that are no op of the model: packed and TIR calls (a ``call_tir`` counts as the
#: Relay op that made it, see :func:`op_name_of`) and the importer's run-time checks.
NON_OPS = frozenset({"relax.call_dps_packed", "relax.call_tir", "relax.call_pure_packed",
                     "relax.assert_op"})


def op_name_of(call: relax.Call) -> Optional[str]:
    """The name an op call is counted under: its Relax op, or for a ``call_tir`` the Relay
    op it computes (a TOPI compute the importer called: ``image.dilation2d``,
    ``fast_exp``, ...); ``None`` for :data:`NON_OPS` and a ``call_tir`` no Relay op
    made."""
    name = call.op.name
    if name == "relax.call_tir":
        relay_call = relay_call_of(call)
        return getattr(getattr(relay_call, "op", None), "name", None)
    return None if name in NON_OPS else name


def model_op_calls(func: relax.Function) -> list[relax.Call]:
    """The model's op calls in ``func`` (nested composite functions included): the calls
    :func:`op_name_of` names, but those whose result has no elements -- they compute
    nothing (the importer makes such results ``zeros`` of their shape).  The report's
    op counts and the host reasons count these same calls."""
    calls: list[relax.Call] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
                op_name_of(expr) is not None and not has_no_elements(expr.ty):
            calls.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return calls


@dataclass(frozen=True)
class HostReason:
    op: str
    reason: str  # one of the constants above
    detail: str  # human-readable, e.g. "dtype int8", "check of bmlib.conv2d"

    def to_dict(self, count: int) -> dict[str, Any]:
        return {"op": self.op, "reason": self.reason, "detail": self.detail, "count": count}


def _tensor_types(call: relax.Call) -> Iterable[Any]:
    for expr in (call, *call.args):
        ty = getattr(expr, "ty", None)
        fields = ty.fields if isinstance(ty, relax.TupleType) else [ty]
        for field in fields:
            if isinstance(field, relax.TensorType):
                yield field


def _is_static(ty: relax.TensorType, from_axis: int = 0) -> bool:
    """Every dim from ``from_axis`` on is static."""
    shape = ty.shape
    return shape is not None and hasattr(shape, "values") and \
        all_static(shape.values[from_axis:])


def host_reason(call: relax.Call, table: Sequence[Any], var2val: dict) -> HostReason:
    """The reason ``call`` (an op call outside every partition) runs on the host."""
    op = call.op.name
    if op == "relax.call_tir":
        return HostReason(op_name_of(call), NO_TEMPLATE,
                          "no bmlib template: a TOPI compute run on the host")
    if get_template(op) is None:
        return HostReason(op, NO_TEMPLATE, "no bmlib template for this op")
    types = list(_tensor_types(call))
    dynamic = [ty for ty in types if not _is_static(ty)]
    if dynamic and not supports_symbolic_dims(op):
        return HostReason(op, DYNAMIC, f"dynamic shape {dynamic[0].shape}")
    beyond_batch = [ty for ty in dynamic if not _is_static(ty, from_axis=1)]
    if beyond_batch and symbolic_batch_only(op):
        return HostReason(op, DYNAMIC, f"dynamic shape {beyond_batch[0].shape} (the template "
                                       "takes a symbolic batch, the first dim, only)")
    sizes = [n for n in map(static_elements, types) if n is not None]
    if sizes and max(sizes) > MAX_TEMPLATE_ELEMENTS:
        return HostReason(op, TOO_LARGE, f"a tensor of {max(sizes)} elements (bmlib's "
                                         f"templates index up to {MAX_TEMPLATE_ELEMENTS} "
                                         "with int32)")
    dtypes = sorted({str(ty.dtype) for ty in types} - set(SUPPORTED_DTYPES))
    if dtypes and set(dtypes) <= set(QNN_DTYPES):
        return HostReason(op, DTYPE, f"dtype {', '.join(dtypes)}: integer tensors are "
                                     "offloaded only inside the quantized composites "
                                     "(bmlib.qnn_*), and none covers this op here")
    if dtypes:
        return HostReason(op, DTYPE, f"dtype {', '.join(dtypes)} (bmlib takes "
                                     f"{', '.join(SUPPORTED_DTYPES)})")
    matched = [name for name, pattern in map(_name_and_pattern, table)
               if pattern is not None and name not in STANDALONE_VIEW_ENTRIES and
               _matches(pattern, call, var2val)]
    # A float call also fits the shape of the quantized composites' patterns (their
    # dtypes are in the checks): name the pattern written for what the call computes.
    meant = [name for name in matched if not _is_quantized(name)] or matched
    if meant:
        return HostReason(op, REJECTED, f"matched {meant[0]}, rejected by its check")
    if op in HOST_VIEW_OPS:
        return HostReason(op, VIEW, "a view of its input on the host, no copy (a bmlib "
                                    "partition of it alone would copy the tensor)")
    return HostReason(op, UNMATCHED, "no pattern of the table matches it")


def _matches(pattern: Any, call: relax.Call, var2val: dict) -> bool:
    try:
        return bool(pattern.match(call, var2val))
    except Exception:  # noqa: BLE001 - a pattern that cannot be tried here says nothing
        return False


def _is_quantized(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("qnn_")


def _name_and_pattern(entry: Any) -> tuple[str, Optional[Any]]:
    if isinstance(entry, relax.transform.FusionPattern):
        return str(entry.name), entry.pattern
    if isinstance(entry, (tuple, list)) and len(entry) >= 2:
        return str(entry[0]), entry[1]
    return str(entry), None


def host_reasons(mod: tvm.IRModule, functions: Iterable[relax.Function],
                 table: Sequence[Any]) -> Counter:
    """``Counter`` of :class:`HostReason` over every op call of ``functions`` (the
    host functions of the partitioned ``mod``)."""
    reasons: Counter = Counter()
    for func in functions:
        var2val = relax.analysis.get_var2val(func)
        for call in model_op_calls(func):
            reasons[host_reason(call, table, var2val)] += 1
    return reasons
