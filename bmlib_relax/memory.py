"""A model run that cannot have the memory it needs: the project's own error, early.

A run allocates every tensor the VM plans for it.  When one cannot be had, TVM's CPU
allocator throws ``std::bad_alloc``, which reached the user as TVM's bare
``InternalError`` naming nothing.  Worse, Linux overcommits: a tensor larger than the
machine may be "allocated" and the process killed when the run touches it, with no
message at all.

So a compiled model knows the largest tensors it certainly allocates (every
partition's result and the model's outputs: the VM materialises these whatever it
fuses; see :func:`allocated_tensors`), and before each call compares the largest with
the memory this process may use (:func:`memory_limit`: the machine's memory and swap,
its cgroup's ``memory.max``, ``RLIMIT_AS`` / ``RLIMIT_DATA``).  One that cannot fit is
a :class:`~.errors.RunMemoryError` naming the op, its Relay ``file:line:column`` and
the sizes, before anything is allocated; an allocation that fails anyway (several
tensors together, a temporary) is the same error instead of TVM's.
"""
from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any, Optional

from .errors import RunMemoryError
from .threads import CGROUP_ROOT, cgroup_ancestors, own_cgroups

# What TVM's message says when an allocation failed (its CPU allocator throws
# std::bad_alloc; a workspace that cannot be had is reported as a failed allocation).
_ALLOCATION_FAILED = ("std::bad_alloc", "Failed to allocate", "failed to allocate")


@dataclass(frozen=True)
class TensorNeed:
    """A tensor a run allocates: its size and where it comes from."""

    nbytes: int
    shape: tuple
    dtype: str
    what: str  # the partition or op computing it
    where: Optional[str] = None  # the Relay call's file:line:column

    def describe(self) -> str:
        place = f" at {self.where}" if self.where else ""
        return (f"{self.what}{place} -> Tensor[{self.shape}, {self.dtype}] "
                f"({size_text(self.nbytes)})")


@dataclass(frozen=True)
class MemoryNeeds:
    """What a compiled model's run allocates: ``certain``, the largest tensor it
    certainly allocates (see :func:`allocated_tensors`), checked before a call;
    ``largest``, the largest static tensor anywhere in it (possibly fused away),
    named when an allocation fails; ``run_time_sized``, the first call whose result's
    size is known only when the model runs (``dyn.full`` of an input shape, ...), named
    then too: the static ``largest`` is usually not the tensor that failed."""

    certain: Optional[TensorNeed]
    largest: Optional[TensorNeed]
    run_time_sized: Optional[tuple] = None  # (what, where)


def need_record(need: Optional[TensorNeed]) -> Optional[dict]:
    """``need`` as JSON (an artifact's metadata records the largest tensor a run
    certainly allocates, so a loaded model checks it as a compiled one does)."""
    if need is None:
        return None
    return {"bytes": need.nbytes, "shape": list(need.shape), "dtype": need.dtype,
            "what": need.what, "where": need.where}


def record_problem(record: Any) -> str:
    """What is wrong with a metadata record of :func:`need_record` ("" if nothing)."""
    if record is None:
        return ""
    if not (isinstance(record, dict) and isinstance(record.get("bytes"), int) and
            not isinstance(record.get("bytes"), bool) and record["bytes"] >= 0 and
            isinstance(record.get("shape"), list) and
            all(isinstance(d, int) and not isinstance(d, bool) for d in record["shape"]) and
            isinstance(record.get("dtype"), str) and isinstance(record.get("what"), str) and
            (record.get("where") is None or isinstance(record.get("where"), str))):
        return ("'largest_tensor' is not {bytes: int, shape: [int], dtype: str, what: str, "
                "where: str|null}")
    return ""


def needs_from_record(record: Any) -> Optional[MemoryNeeds]:
    """The :class:`MemoryNeeds` an artifact's metadata records (checked by
    :func:`record_problem` first); None for an artifact written without it."""
    if record is None:
        return None
    need = TensorNeed(record["bytes"], tuple(record["shape"]), record["dtype"],
                      record["what"], record.get("where"))
    return MemoryNeeds(need, need)


def size_text(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def _meminfo(path: str = "/proc/meminfo") -> Optional[int]:
    """MemTotal + SwapTotal in bytes, None when unknown."""
    fields = {}
    try:
        with open(path) as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    fields[name] = int(parts[0]) * 1024
    except OSError:
        return None
    if "MemTotal" not in fields:
        return None
    return fields["MemTotal"] + fields.get("SwapTotal", 0)


def _cgroup_memory(root: str, proc_cgroup: str) -> Optional[int]:
    """The lowest ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1) over the
    process's cgroup and its ancestors, None without a limit."""
    own = own_cgroups(proc_cgroup)
    files = [f"{root}{rel}/memory.max" for rel in cgroup_ancestors(own.get("", "/"))]
    files += [f"{root}/memory{rel}/memory.limit_in_bytes"
              for rel in cgroup_ancestors(own.get("memory", "/"))]
    limits = []
    for path in files:
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 62):  # v1 writes "no limit" as ~2**63
            limits.append(int(text))
    return min(limits) if limits else None


def memory_limit(root: str = CGROUP_ROOT,
                 proc_cgroup: str = "/proc/self/cgroup") -> Optional[int]:
    """Bytes this process may allocate at most, None when nothing says."""
    limits = [_meminfo(), _cgroup_memory(root, proc_cgroup)]
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    known = [limit for limit in limits if limit]
    return min(known) if known else None


def memory_needs(mod: Any) -> MemoryNeeds:
    """The :class:`MemoryNeeds` of a partitioned Relax module."""
    def largest(needs):
        return max(needs, default=None, key=lambda need: need.nbytes)

    return MemoryNeeds(largest(allocated_tensors(mod)), largest(all_tensors(mod)),
                       first_run_time_sized(mod))


def first_run_time_sized(mod: Any) -> Optional[tuple]:
    """``(what, where)`` of the first call of ``main`` (its Relay op and place) whose
    result is a tensor of a size not known before the run, or None."""
    from tvm import relax

    found: list = []

    def visit(expr):
        if not found and isinstance(expr, relax.Call) and \
                _has_run_time_size(getattr(expr, "ty", None)):
            what, where = _origin(mod, expr)
            if what is not None:
                found.append((what, where))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found[0] if found else None


def _has_run_time_size(ty: Any) -> bool:
    import tvm

    if isinstance(ty, tvm.relax.TupleType):
        return any(_has_run_time_size(field) for field in ty.fields)
    return isinstance(ty, tvm.relax.TensorType) and tensor_type_bytes(ty) is None


def all_tensors(mod: Any) -> list[TensorNeed]:
    """Every static tensor a binding of a Relax function of ``mod`` computes, named by
    its op (the Relay call's, when it has one) and Relay place."""
    from tvm import relax

    needs = []
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        bindings = []
        relax.analysis.post_order_visit(
            func, lambda e: bindings.append(e) if isinstance(e, relax.Call) else None)
        for call in bindings:
            what, where = _origin(mod, call)
            needs += _tensor_needs(getattr(call, "ty", None), what or "a call", where)
    return needs


def allocated_tensors(mod: Any) -> list[TensorNeed]:
    """The static tensors a run of ``mod`` (a partitioned Relax module) certainly
    allocates: the result of every call of a bmlib partition in ``main``, and
    ``main``'s outputs.  Host ops are left out (TVM may fuse them and never allocate
    their intermediates), and so are symbolic shapes."""
    from tvm import relax

    from .backend.codegen import is_bmlib_partition

    main = mod["main"]
    values = {}
    needs = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = values[binding.var] = binding.value
            callee = getattr(value, "op", None)
            if isinstance(value, relax.Call) and isinstance(callee, relax.GlobalVar) and \
                    is_bmlib_partition(mod[callee]):
                needs += _tensor_needs(binding.var.ty, *_origin(mod, value))
    outputs = main.body.body
    fields = outputs.fields if isinstance(outputs, relax.Tuple) else [outputs]
    for field in fields:
        value = field
        while isinstance(value, relax.Var) and value in values:  # gv = lv
            value = values[value]
        what, where = _origin(mod, value)
        needs += _tensor_needs(getattr(field, "ty", None),
                               f"the model's output ({what})" if what else "the model's output",
                               where)
    return needs


def _origin(mod: Any, value: Any) -> tuple:
    """(what computes ``value``: its Relay op or partition, its Relay place)."""
    from tvm import relax

    from .importer.provenance import relay_call_of

    if not isinstance(value, relax.Call):
        return None, None
    if isinstance(value.op, relax.GlobalVar):
        callee = mod[value.op]
        return value.op.name_hint, _relay_place(callee) if isinstance(
            callee, relax.Function) else None
    relay = relay_call_of(value)
    span = getattr(relay, "span", None) if relay is not None else None
    name = getattr(getattr(relay, "op", None), "name", None) or getattr(value.op, "name", None)
    return (str(name) if name else None), (str(span) if span is not None else None)


def tensor_type_bytes(ty: Any, symbolic_dim: Optional[int] = None) -> Optional[int]:
    """Bytes of a Relax tensor type: its dims' product times its element size.  A
    symbolic dim counts as ``symbolic_dim`` (None: such a type has no static size).
    None for anything but a tensor of known rank and dtype."""
    import tvm

    dims = getattr(getattr(ty, "shape", None), "values", None)
    if not isinstance(ty, tvm.relax.TensorType) or dims is None:
        return None
    size = 1
    for dim in dims:
        if isinstance(dim, tvm.tirx.IntImm):
            size *= int(dim)
        elif symbolic_dim is None:
            return None
        else:
            size *= symbolic_dim
    try:
        return size * max(1, tvm.DataType(str(ty.dtype)).bits // 8)
    except Exception:  # noqa: BLE001 - not a dtype TVM knows
        return None


def _tensor_needs(ty: Any, what: str, where: Optional[str]) -> list[TensorNeed]:
    import tvm

    if isinstance(ty, tvm.relax.TupleType):
        return [need for field in ty.fields for need in _tensor_needs(field, what, where)]
    nbytes = tensor_type_bytes(ty)
    if nbytes is None:
        return []
    shape = tuple(int(d) for d in ty.shape.values)
    return [TensorNeed(nbytes, shape, str(ty.dtype), what, where)]


def _relay_place(func: Any) -> Optional[str]:
    """The ``file:line:column`` of the last Relay call a partition computes (its result,
    usually), from the import's provenance."""
    from tvm import relax

    from .importer.provenance import relay_place

    places = []

    def visit(expr):
        place = relay_place(expr, root_only=True) if isinstance(expr, relax.Call) else None
        if place is not None:
            places.append(place)

    relax.analysis.post_order_visit(func, visit)
    return places[-1] if places else None


def check_fits(needs: Optional[MemoryNeeds], limit: Optional[int]) -> None:
    """A ``RunMemoryError`` when the largest tensor a run certainly allocates alone
    exceeds ``limit``."""
    certain = needs.certain if needs is not None else None
    if certain is None or limit is None or certain.nbytes <= limit:
        return
    raise RunMemoryError(
        f"the model cannot run here: {certain.describe()} alone needs more memory than "
        f"this process may use ({size_text(limit)}: memory and swap, cgroup memory.max, "
        "RLIMIT_AS/RLIMIT_DATA)", certain.where)


def is_allocation_failure(exc: BaseException) -> bool:
    """Whether a TVM error is an allocation that failed."""
    text = str(exc)
    return any(marker in text for marker in _ALLOCATION_FAILED)


def allocation_error(needs: Optional[MemoryNeeds], limit: Optional[int]) -> RunMemoryError:
    """The error for a run whose allocation failed (TVM's ``std::bad_alloc``)."""
    largest = needs.largest if needs is not None else None
    dynamic = needs.run_time_sized if needs is not None else None
    known = ""
    if largest is not None:
        known = f"; its largest tensor{' of static shape' if dynamic else ''}: " \
                f"{largest.describe()}"
    if dynamic:
        what, where = dynamic
        known = (f"; tensor sizes known only at run time (from input values or shapes) "
                 f"start at {what}{' at ' + where if where else ''}: one of those is the "
                 f"likely cause{known}")
        place = where
    else:
        place = largest.where if largest else None
    room = f"; this process may use {size_text(limit)}" if limit is not None else ""
    return RunMemoryError(f"the model ran out of memory during a run (an allocation "
                          f"failed){known}{room}", place)
