"""Equivalence checking: the bmlib build against the plain Relax build.

``compare`` gives max abs/rel differences per output.  When a model differs,
``first_divergence`` localises it: both builds of the *partitioned* module are
run with every intermediate tensor of ``main`` exposed, and the first binding
whose values differ beyond tolerance is reported with what produced it (a bmlib
partition and its composites, or a host op).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .backend.codegen import is_bmlib_partition
from .backend.blocked_layout import to_blocked, to_nchw
from .compiler import compile_plain
from .runtime import named_outputs


@dataclass
class Difference:
    name: str
    max_abs: float
    max_rel: float
    ok: bool
    nan_mismatches: int = 0  # elements that are NaN in exactly one of the two tensors

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def difference(name: str, got: np.ndarray, want: np.ndarray, rtol: float,
               atol: float) -> Difference:
    """Max abs/rel difference of ``got`` against the reference ``want``, NaN-aware.

    A NaN where the reference has a NaN is equal (both builds agree the value is
    undefined); a NaN against a number — either way round — diverges, and is
    counted in ``nan_mismatches`` (``max_abs`` is then infinite), so a NaN never
    hides inside a max that ignores it.
    """
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got64.shape != want64.shape:
        return Difference(name, float("inf"), float("inf"), False)
    got_nan, want_nan = np.isnan(got64), np.isnan(want64)
    both_nan = got_nan & want_nan
    nan_mismatches = int(np.count_nonzero(got_nan != want_nan))
    with np.errstate(invalid="ignore", over="ignore"):
        abs_diff = np.abs(got64 - want64)
        # Equal infinities (inf - inf = nan) and NaN pairs agree; one-sided NaNs diverge.
        same = both_nan | (got64 == want64)
        abs_diff = np.where(same, 0.0, abs_diff)
        abs_diff = np.where(np.isnan(abs_diff), np.inf, abs_diff)
        max_abs = float(abs_diff.max()) if abs_diff.size else 0.0
        scale = np.abs(np.where(want_nan, 0.0, want64))
        rel = np.where(np.isinf(abs_diff), np.inf,
                       abs_diff / np.maximum(np.where(np.isinf(scale), 0.0, scale),
                                             np.finfo(np.float32).tiny))
        max_rel = float(rel.max()) if rel.size else 0.0
        # An infinite difference (inf against -inf or a number) is never within tolerance,
        # even where the reference's own infinity makes ``rtol * |want|`` infinite.
        ok = bool(np.all(same | (np.isfinite(abs_diff) & (abs_diff <= atol + rtol * scale))))
    return Difference(name, max_abs, max_rel, ok and nan_mismatches == 0, nan_mismatches)


def compare(got: Any, want: Any, rtol: float, atol: float) -> list[Difference]:
    """One difference per output, by the names :func:`~.runtime.named_outputs` gives
    (nested tuples flattened: ``out1.0``, ``out1.1``)."""
    return [difference(name, g, w, rtol, atol)
            for (name, g), (_, w) in zip(named_outputs(got), named_outputs(want))]


_PACKED_KERNEL = re.compile(r"^OIHW(\d+)i(\d+)o$")
_WINOGRAD_KERNEL = re.compile(r"^HWOI(\d+)o$")


def _activation_block(layout: str) -> int:
    match = re.fullmatch(r"NCHW(\d+)c", layout)
    return int(match.group(1)) if match else 0


@mutator
class _KernelUnpacker(PyExprMutator):
    """Turns ``conv2d(x, W_packed, kernel_layout="OIHW{ib}i{ob}o")`` back into an OIHW conv.

    ``backend/rewrite.py`` packs constant conv weights into ``[O/ob, I/ib, KH, KW,
    ib, ob]`` for the bmlib templates; TVM's legalization has no conv2d for that
    layout, so the plain (reference) build of a partitioned module would not
    compile.  The reference un-packs the weight with ``permute_dims`` + ``reshape``
    (plain Relax ops every build can run) and convolves in OIHW.
    """

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D401 - visitor hook
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
            return call
        packed = _PACKED_KERNEL.match(str(call.attrs.kernel_layout))
        if _WINOGRAD_KERNEL.match(str(call.attrs.kernel_layout)):
            return _winograd_to_oihw(call)
        if packed is None:
            return call
        data, weight = call.args
        oo, io, kh, kw, ib, ob = [int(d) for d in weight.ty.shape.values]
        unpacked = relax.op.reshape(relax.op.permute_dims(weight, [0, 5, 1, 4, 2, 3]),
                                    (oo * ob, io * ib, kh, kw))
        attrs = call.attrs
        # Blocked NCHW{b}c activations (backend/blocked_layout.py): convolve in NCHW.
        data_block, out_block = (_activation_block(str(attrs.data_layout)),
                                 _activation_block(str(attrs.out_layout)))
        if data_block:
            data = self.builder_.normalize(to_nchw(data, data_block))
        conv = self.builder_.normalize(relax.op.nn.conv2d(
            data, unpacked, strides=attrs.strides, padding=attrs.padding,
            dilation=attrs.dilation, groups=attrs.groups,
            data_layout="NCHW" if data_block else attrs.data_layout,
            kernel_layout="OIHW", out_layout="NCHW" if out_block else attrs.out_layout,
            out_dtype=attrs.out_dtype))
        return to_blocked(conv, out_block) if out_block else conv


def _winograd_to_oihw(call: relax.Call) -> relax.Expr:
    """A Winograd conv (``HWOI{kb}o``: ``U = G g G^T``, padding grown by ``a - 3``, see
    backend/templates/conv_winograd.py) as the OIHW conv it computes:
    ``g = G+ U G+^T`` with ``G+`` the pseudo-inverse of ``G``."""
    from .backend.templates.conv_winograd import matrices

    data, weight = call.args
    a, _, ko, c, kb = [int(d) for d in weight.ty.shape.values]
    pinv = np.linalg.pinv(matrices(a - 2)[1]).astype("float32")
    plain = relax.op.reshape(relax.op.permute_dims(weight, [2, 4, 3, 0, 1]), (ko * kb, c, a, a))
    oihw = relax.op.matmul(relax.op.matmul(relax.const(pinv), plain), relax.const(pinv.T))
    attrs = call.attrs
    top, left, bottom, right = [int(p) for p in attrs.padding]
    # Blocked NCHW{b}c activations (backend/blocked_layout.py): convolve in NCHW.
    data_block, out_block = (_activation_block(str(attrs.data_layout)),
                             _activation_block(str(attrs.out_layout)))
    if data_block:
        data = to_nchw(data, data_block)
    conv = relax.op.nn.conv2d(
        data, oihw, strides=attrs.strides, padding=(top, left, bottom - (a - 3), right - (a - 3)),
        dilation=attrs.dilation, groups=attrs.groups,
        data_layout="NCHW" if data_block else attrs.data_layout, kernel_layout="OIHW",
        out_layout="NCHW" if out_block else attrs.out_layout, out_dtype=attrs.out_dtype)
    return to_blocked(conv, out_block) if out_block else conv


def unpack_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every packed-kernel conv2d rewritten to an OIHW conv (see above)."""
    unpacker = _KernelUnpacker(mod)
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            unpacker.builder_.update_func(gvar, unpacker.visit_expr(func))
    return relax.transform.Normalize()(unpacker.builder_.get())


def plain_version(partitioned: tvm.IRModule) -> tvm.IRModule:
    """The partitioned module with its partitions compiled by TVM itself (packed
    weights read through an un-packing view, so TVM's legalization applies)."""
    functions = {}
    for gvar, func in partitioned.functions.items():
        if is_bmlib_partition(func):
            func = func.without_attr("Codegen")
        functions[gvar] = func
    return unpack_kernels(relax.transform.LambdaLift()(tvm.IRModule(functions)))


def probe_version(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[tuple[str, str]]]:
    """``mod`` whose ``main`` also returns every intermediate tensor, in binding order.

    Returns the module and, per exposed tensor, ``(binding name, producer)``.
    """
    mod = relax.transform.ToNonDataflow()(mod)
    main = mod["main"]
    exposed: list[relax.Var] = []
    producers: list[tuple[str, str]] = []
    for block in main.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.var.ty, relax.TensorType):
                exposed.append(binding.var)
                producers.append((binding.var.name, _producer(mod, binding.value)))
    results = [main.body.body] + exposed
    body = relax.SeqExpr(main.body.blocks, relax.Tuple(results))
    ret_ty = relax.TupleType([r.ty for r in results])
    probe = relax.Function(main.params, body, ret_ty, main.is_pure, main.attrs)
    functions = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
    functions[mod.get_global_var("main")] = probe
    return relax.transform.Normalize()(tvm.IRModule(functions)), producers


def _producer(mod: tvm.IRModule, value: relax.Expr) -> str:
    if isinstance(value, relax.Call):
        if isinstance(value.op, relax.GlobalVar):
            func = mod[value.op]
            composites = sorted(_composites(func))
            kind = "bmlib partition" if is_bmlib_partition(func) else "function"
            return f"{kind} {value.op.name_hint}" + (f" ({', '.join(composites)})"
                                                     if composites else "")
        if isinstance(value.op, tvm.ir.Op):
            return f"host op {value.op.name}"
    return type(value).__name__


def _composites(func: relax.Function) -> set[str]:
    found: set[str] = set()

    def visit(expr):
        if isinstance(expr, relax.Function) and expr.attrs is not None \
                and "Composite" in expr.attrs:
            found.add(str(expr.attrs["Composite"]))

    relax.analysis.post_order_visit(func, visit)
    return found


def first_divergence(partitioned: tvm.IRModule, inputs: Sequence[np.ndarray], build_offloaded,
                     target: Any, rtol: float, atol: float) -> Optional[dict[str, Any]]:
    """The first intermediate of ``main`` where bmlib and plain builds disagree."""
    probe, producers = probe_version(partitioned)
    offloaded_ex, _ = build_offloaded(probe, target)
    plain_ex = compile_plain(plain_version(probe), target)
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs]
    got = relax.VirtualMachine(offloaded_ex, tvm.cpu())["main"](*tensors)
    want = relax.VirtualMachine(plain_ex, tvm.cpu())["main"](*tensors)
    for index, (name, producer) in enumerate(producers):
        diff = difference(name, got[index + 1].numpy(), want[index + 1].numpy(), rtol, atol)
        if not diff.ok:
            return {"binding": name, "index": index, "producer": producer,
                    "max_abs": diff.max_abs, "max_rel": diff.max_rel,
                    "nan_mismatches": diff.nan_mismatches}
    return None
