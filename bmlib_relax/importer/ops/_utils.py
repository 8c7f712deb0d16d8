"""Small helpers shared by converters: shapes, dtypes, axes, attribute decoding."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.sym.analyzer import Analyzer

from ..run_checks import (BROADCAST_REASON, cast_dims, emit_run_check, emit_tensor_check,
                          equal, none_hold)


def run_time_dims(values: relax.Expr, names: Sequence[str], ctx) -> list:
    """The values of a 1-D int64 tensor of ``len(names)`` elements, known only when the
    model runs, as fresh symbolic dims of those names (``tensor_to_shape`` matched to
    new vars): a shape tensor's dims, a run-time length, a count."""
    dims = [tvm.tirx.Var(name, "int64") for name in names]
    ctx.bb.match_cast(ctx.emit(relax.op.tensor_to_shape(values)), relax.ShapeType(dims))
    return dims


def shape_of(expr: relax.Expr) -> list:
    """Static dims as ints, symbolic dims as TIR expressions."""
    shape = expr.ty.shape
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape.values]


def is_integer_dtype(dtype: str) -> bool:
    """A signed or unsigned integer dtype (not bool)."""
    return dtype.startswith(("int", "uint"))


def ndim_of(expr: relax.Expr) -> int:
    return int(expr.ty.ndim)


def static_shape(expr: relax.Expr, ctx, what: str = "input") -> list[int]:
    dims = shape_of(expr)
    if not all(isinstance(d, int) for d in dims):
        raise ctx.error(f"{what} needs a static shape, got {dims}")
    return dims


def dtype_of(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


def known_dtype(expr: relax.Expr) -> Optional[str]:
    """The element dtype of a tensor operand, None when not known (not a tensor, or a
    tensor of unknown dtype): checks between operands skip those."""
    dtype = str(getattr(expr.ty, "dtype", ""))
    return None if dtype in ("", "void") else dtype


def ints(value: Any) -> list[int]:
    """An int or a (nested) sequence of ints as a flat list."""
    if isinstance(value, (list, tuple)):
        out: list[int] = []
        for v in value:
            out.extend(ints(v))
        return out
    return [int(value)]


def optional_ints(value: Any) -> Optional[list[int]]:
    """``None`` stays ``None``; an int or a sequence becomes a list of ints."""
    return None if value is None else ints(value)


def out_dtype(attrs, key: str = "out_dtype") -> Optional[str]:
    """Relay prints a null dtype as ``""`` (or omits it): that means "same as input"."""
    value = attrs.get(key)
    return str(value) if value not in (None, "", "void") else None


def normalize_axis(axis: int, ndim: int, ctx, name: str = "axis") -> int:
    """A Relay axis (negative counts from the end) as a non-negative int."""
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ctx.error(f"{name}={axis} is out of range for a {ndim}-d tensor ({-ndim} <= "
                        f"{name} < {ndim})")
    return axis + ndim if axis < 0 else axis


def const_value(expr: relax.Expr) -> np.ndarray | None:
    """The numpy value of a Relax constant, else ``None``."""
    if isinstance(expr, tvm.ir.expr.GenericConst):
        return expr.value.numpy()
    return None


def folded_value(expr: relax.Expr, ctx) -> np.ndarray | None:
    """The value of a constant, or of a ``cast`` of one (``cast(277, dtype="int64")``)."""
    value = const_value(expr)
    if value is None and isinstance(expr, relax.Var):
        bound = ctx.bb.lookup_binding(expr)
        if isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == "relax.astype":
            inner = const_value(bound.args[0])
            if inner is not None:
                value = inner.astype(str(bound.attrs.dtype))
    return value


def index_tuple_length(data: relax.Expr, indices: relax.Expr, op: str, rule: str, ctx) -> int:
    """The length ``M`` of a gather_nd / scatter_nd's index tuples (the first dim of
    ``indices``): static and at most the data's rank, as v0.19's GatherNDRel and
    ScatterNDRel required (``op`` and ``rule`` are their names and messages); past it,
    topi indexed outside the data's shape."""
    index_dims = shape_of(indices)
    count = index_dims[0] if index_dims else None
    if not isinstance(count, int):
        raise ctx.error(f"{op} needs a static shape for the first axis of indices, got "
                        f"{index_dims}")
    if count > ndim_of(data):
        raise ctx.error(f"{op}: {rule}: the index tuples have {count} entries (the first "
                        f"dim of indices), the data {ndim_of(data)} axes")
    return count


def check_integer_divisor(divisor: relax.Expr, ctx, dividend: Optional[relax.Expr] = None
                          ) -> None:
    """Refuse an integer division (divide, floor/trunc divide and mod) that would stop
    the process with SIGFPE, as x86's integer division traps (Relay's did the same): a
    divisor that is a constant holding a 0 at import (TVM's build refuses a literal 0
    divisor too); any other divisor holding a 0, and a signed ``dividend`` holding the
    type's minimum where the divisor holds -1 (the quotient overflows), when the model
    runs (``RunCheckError``).  Float divisions keep IEEE semantics: Relay computed
    infinities and NaNs."""
    dtype = dtype_of(divisor)
    if not is_integer_dtype(dtype):
        return
    value = folded_value(divisor, ctx)
    if value is not None and (value == 0).any():
        raise ctx.error(f"integer division by zero: the divisor is a constant {dtype} "
                        f"{'0' if value.size == 1 else 'holding a 0'}")
    if value is None:
        emit_tensor_check(ctx, none_hold(relax.op.equal(divisor, relax.const(0, dtype))),
                          f"integer division by zero: the {dtype} divisor holds a 0 in this "
                          "run (the division would stop the process with SIGFPE)")
    if dividend is None or not dtype.startswith("int") or \
            (value is not None and not (value == -1).any()):
        return
    known = folded_value(dividend, ctx)  # a weight holding the minimum needs the check too
    if known is not None and not (known == np.iinfo(dtype).min).any():
        return
    check_quotient_fits(dividend, divisor, ctx)


def check_quotient_fits(dividend: relax.Expr, divisor: relax.Expr, ctx) -> None:
    """A run check that no signed ``dividend`` holding its type's minimum meets a
    ``divisor`` of -1 (the quotient overflows and x86 stops the process with SIGFPE)."""
    dtype = dtype_of(divisor)
    lowest = int(np.iinfo(dtype).min)
    emit_tensor_check(ctx, none_hold(relax.op.logical_and(
        relax.op.equal(dividend, relax.const(lowest, dtype)),
        relax.op.equal(divisor, relax.const(-1, dtype)))),
        f"integer overflow: {lowest} divided by -1 has no {dtype} quotient (the division "
        "would stop the process with SIGFPE)")


def check_product_operands(lhs: relax.Expr, rhs: relax.Expr, ctx) -> None:
    """The two operands of a product (conv, dense, matmul) have one dtype, or are both
    integers (``uint8`` data with ``int8`` weights, as QNN lowering left them): any
    other mix (a ``bool`` operand, ``float32`` with ``float16`` or with an integer)
    has no arithmetic TVM can build and failed in Relay's build, deep in LLVM."""
    a, b = known_dtype(lhs), known_dtype(rhs)
    if a is None or b is None:
        return
    integers = ("int", "uint")
    if "bool" in (a, b) or (a != b and not (a.startswith(integers) and b.startswith(integers))):
        raise ctx.error(f"operand data types {a} and {b}: a product takes two operands of "
                        "one type (or two integer types)")


def check_nonempty_average(data: relax.Expr, axes: Optional[Sequence[int]], ctx,
                           at_run_time: bool = True) -> None:
    """Refuse an average over an axis of extent 0: its divisor, the element count, is a
    constant 0 that TVM's build refuses (``Divide by zero``: Relay's build stopped there
    too).  ``axes`` None: every axis.  ``at_run_time``: an axis known only at run time
    gets a run check too."""
    dims = shape_of(data)
    for axis in range(len(dims)) if axes is None else axes:
        if isinstance(dims[axis], int) and dims[axis] == 0:
            raise ctx.error(f"averages over axis {axis} of extent 0 (input shape "
                            f"{tuple(dims)}): the count it divides by is 0")
    if at_run_time:
        check_reduced_axes_nonempty_at_run_time(data, axes, ctx)


def empty_reduced_axis(data: relax.Expr, axes: Optional[Sequence[int]]) -> Optional[int]:
    """The first axis of ``axes`` (None: every axis) with a static extent of 0, else None:
    a reduction over it reads no element.  TVM's reduction loops then never run their
    initialisation, and the result is whatever the output buffer held."""
    dims = shape_of(data)
    for axis in range(len(dims)) if axes is None else axes:
        if isinstance(dims[axis], int) and dims[axis] == 0:
            return axis
    return None


def check_reduced_axes_nonempty_at_run_time(data: relax.Expr, axes: Optional[Sequence[int]],
                                             ctx) -> None:
    """A check compiled into the model that every reduced axis of ``data`` (``axes``;
    None: every axis) whose extent is only known at run time is not empty in the run.
    TVM's reduction loops initialise their result inside the loop over the reduced
    axis: over an empty axis the result is the output buffer's old contents (the last
    run's sums, on bmlib and on the host), so such a run is refused with a
    ``RunCheckError`` naming the op and its place.  Static empty axes are decided at
    import (:func:`empty_reduced_axis`)."""
    dims = shape_of(data)
    for axis in range(len(dims)) if axes is None else axes:
        dim = dims[axis]
        if isinstance(dim, int):
            continue
        emit_run_check(ctx.bb, tvm.tirx.GT(dim, tvm.tirx.const(0, str(dim.ty))), ctx.location,
                       ctx.op_name,
                       f"reduces over axis {axis}, which has {{}} entries in this run: a "
                       "reduction over no element is not computed (TVM leaves its result "
                       "uninitialised)", dim)


def check_mirror_range(data: relax.Expr, pairs: Sequence[tuple[int, int]], reflect: bool,
                       what: str, ctx) -> None:
    """A mirror reaches at most the whole axis (symmetric, the edge repeated) or all but
    the edge (reflect).  v0.19's MirrorPadRel and PadRel did not limit the widths, and
    their computes (``topi.nn.mirror_pad``: ``-i - m`` below, ``2 * (n - 1) - i + m``
    above; ``topi::pad``'s reflect alike) then read outside the data; such widths are
    refused (a run-time dim when the model runs)."""
    spare = 1 if reflect else 0
    for axis, (dim, pair) in enumerate(zip(shape_of(data), pairs)):
        widest = max(pair)
        if widest == 0:
            continue
        if isinstance(dim, int):
            if widest > dim - spare:
                raise ctx.error(f"axis {axis} pads {widest} entries beside a dim of {dim}: "
                                f"{what} takes at most {max(dim - spare, 0)} (v0.19 read "
                                "outside the data)")
            continue
        emit_run_check(ctx.bb, tvm.tirx.GE(dim, tvm.tirx.const(widest + spare, str(dim.ty))),
                       ctx.location, ctx.op_name,
                       f"axis {axis} has {{}} entries in this run: {what} of {widest} "
                       f"needs at least {widest + spare} (v0.19 read outside the data)", dim)


def check_reads_elements(data: relax.Expr, axes: Optional[Sequence[int]],
                         result_dims: Sequence[Any], ctx, what: str) -> None:
    """Refuse an op whose result has elements but reads each of them along ``axes``
    (None: every axis) of ``data`` where one has a static extent of 0 (a take from an
    empty axis, a resize or global maximum of an empty image, an edge pad of nothing):
    there is no element to read, and TVM's lowering reads outside the tensor (a
    plausible-looking result) or divides by 0."""
    if any(isinstance(d, int) and d == 0 for d in result_dims):
        return  # an empty result reads nothing
    axis = empty_reduced_axis(data, axes)
    if axis is not None:
        raise ctx.error(f"{what} along axis {axis} of extent 0 (input shape "
                        f"{tuple(shape_of(data))}): there is no element to read")
    # an axis known at run time only: checked there, unless the result is empty then
    dims = shape_of(data)
    results = 1
    for d in result_dims:
        results = results * d
    for axis in range(len(dims)) if axes is None else axes:
        dim = dims[axis]
        if isinstance(dim, int):
            continue
        zero = tvm.tirx.const(0, str(dim.ty))
        empty_result = tvm.tirx.const(results == 0, "bool") if isinstance(results, int) \
            else tvm.tirx.EQ(results, tvm.tirx.const(0, str(results.ty)))
        emit_run_check(ctx.bb, tvm.tirx.Or(tvm.tirx.GT(dim, zero), empty_result),
                       ctx.location, ctx.op_name,
                       f"{what} along axis {axis}, which has {{}} entries in this run: "
                       "there is no element to read", dim)


def check_index_values(index: relax.Expr, bounds: Sequence[Any], ctx, what: str, *,
                       axis: int = 0, wraps: bool = False) -> None:
    """Refuse index values outside the data they index: every entry of ``index`` must
    lie in ``[0, bound)`` (``[-bound, bound)`` where the op's lowering ``wraps``
    negative ones), where ``bound`` is ``bounds[0]`` for a plain index tensor, or
    ``bounds[j]`` for the entries at position ``j`` of ``index``'s ``axis`` (the index
    tuples of ``gather_nd``/``scatter_nd``).

    TVM's gathers and scatters index their buffers unchecked, as Relay's did: an index
    out of range read beside the tensor (a plausible-looking value) or wrote beside it
    (a corrupted heap, a crash).  A constant index is checked here, naming its first
    bad entry; any other is checked when the model runs (a ``RunCheckError`` naming the
    op and its place), counting the bad entries so that an empty index passes."""
    dims = shape_of(index)
    if any(isinstance(d, int) and d == 0 for d in dims):
        return  # nothing indexed
    lows = ["-" + str(b) if wraps else "0" for b in bounds]
    ranges = ", ".join(f"[{low}, {bound})" for low, bound in zip(lows, bounds))
    rule = (f"must lie in {ranges}" if len(bounds) == 1 else
            f"must lie in {ranges} at positions 0..{len(bounds) - 1} of axis {axis}")
    # the bounds' shape, broadcasting against the index: along ``axis``, 1 elsewhere
    placed = [len(bounds) if k == axis and len(bounds) > 1 else 1 for k in range(len(dims))]
    value = folded_value(index, ctx)
    if value is not None and all(isinstance(b, int) for b in bounds):
        limit = np.asarray(bounds, dtype=np.int64).reshape(placed)
        values = value.astype(np.int64)
        bad = (values < (-limit if wraps else 0)) | (values >= limit)
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ctx.error(f"{what}: entry {list(at)} is {values[at]}, out of range: "
                            f"{what} {rule} (the data's dims); TVM would read or write "
                            "outside the tensor")
        return
    values = index if dtype_of(index) == "int64" else ctx.emit(relax.op.astype(index, "int64"))
    if all(isinstance(b, int) for b in bounds):
        limit: relax.Expr = relax.const(np.asarray(bounds, dtype=np.int64), "int64")
    else:
        limit = ctx.emit(relax.op.shape_to_tensor(relax.ShapeExpr(
            [tvm.tirx.const(b, "int64") if isinstance(b, int) else b for b in bounds])))
    limit = ctx.emit(relax.op.reshape(limit, placed or [1]))
    low = relax.op.negative(limit) if wraps else relax.const(0, "int64")
    bad = relax.op.logical_or(relax.op.less(values, low), relax.op.greater_equal(values, limit))
    emit_tensor_check(ctx, none_hold(bad),
                      f"{what} {rule} (the data's dims) in every run; this run's are not "
                      "(TVM would read or write outside the tensor)")


def reduced_shape(data: relax.Expr, axes: Optional[Sequence[int]], keepdims: bool) -> list:
    """The shape of a reduction of ``data`` over ``axes`` (None: every axis)."""
    dims = shape_of(data)
    reduced = set(range(len(dims)) if axes is None else axes)
    return [1 if i in reduced else d for i, d in enumerate(dims)
            if keepdims or i not in reduced]


def check_nonempty_reduction(lengths: Sequence[Any], ctx, what: str) -> None:
    """Refuse a product (conv, dense) that sums over nothing: ``lengths`` are its
    reduction extents (a kernel's input channels and window, a dense's K).  Every
    output would be 0, and TVM cannot vectorize the empty loops of its templates."""
    if any(isinstance(n, int) and n == 0 for n in lengths):
        raise ctx.error(f"{what} is empty: the product sums over no elements")


def check_sliding_window(data_dims: Sequence[Any], window: Sequence[Any], strides: Sequence[int],
                         padding: Sequence[int], dilation: Sequence[int], ctx) -> None:
    """A conv's or pool's window over its spatial ``data_dims``: positive strides and
    dilations, no negative padding, and a (dilated) window no larger than the padded
    input, so every output extent is at least 1.  Relax computes a negative extent
    otherwise, which the build turns into an allocation failure."""
    ndim = len(window)
    for name, values in (("strides", strides), ("dilation", dilation)):
        if any(v < 1 for v in values):
            raise ctx.error(f"{name}={list(values)} must be positive")
    if any(p < 0 for p in padding):
        raise ctx.error(f"padding={list(padding)} must not be negative")
    for i in range(ndim):
        size, k = data_dims[i], window[i]
        if not (isinstance(size, int) and isinstance(k, int)):
            continue
        if k < 1:
            raise ctx.error(f"the window {list(window)} must be at least 1 in every dim")
        span = dilation[i] * (k - 1) + 1
        padded = size + padding[i] + padding[ndim + i]
        if span > padded:
            raise ctx.error(f"the window {list(window)} (dilated: {span} in spatial dim {i}) "
                            f"is larger than the padded input ({padded})")


def scalar_operand(expr: relax.Expr, ctx, what: str):
    """A Python number from a constant scalar operand (e.g. ``nn.pad``'s pad value)."""
    value = folded_value(expr, ctx)
    if value is None or value.size != 1:
        raise ctx.error(f"{what} must be a constant scalar")
    return value.reshape(()).item()


def fill_in_dtype(value: Any, dtype: str) -> np.ndarray:
    """A fill or pad value cast to the tensor's dtype as v0.19's computes cast it
    (``topi::full`` / ``full_like`` / ``pad``: ``cast(dtype, value)``): an int outside
    the dtype's range wraps (300 is 44 in int8, -1 is 255 in uint8), a nonzero is true in
    bool.  TVM 0.27 refuses such a literal with a raw error instead."""
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dtype)


def expand_padding(padding: Sequence[int] | int, ndim: int) -> list[int]:
    """Relay padding (1, ndim or 2*ndim values) as [before..., after...]."""
    pad = ints(padding)
    if len(pad) == 1:
        return pad * (2 * ndim)
    if len(pad) == ndim:
        return pad + pad
    if len(pad) == 2 * ndim:
        return pad
    raise ValueError(f"padding {tuple(pad)} has {len(pad)} values; expected 1, {ndim} or {2 * ndim}")


def repeat_to(value: Any, n: int) -> list[int]:
    """An attribute given as one value or ``n`` values, as ``n`` ints."""
    vals = ints(value)
    return vals * n if len(vals) == 1 else vals


def size_dims(value: Any) -> list:
    """A size attribute (``image.resize2d``'s ``size``) as Relax dims: ints stay ints, a
    symbolic dim (``te.var("th")``) becomes an int64 expression."""
    values = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in values:
        if isinstance(v, (int, np.integer)):
            out.append(int(v))
        elif str(getattr(v, "ty", "")) == "int64":
            out.append(v)
        else:
            out.append(tvm.tirx.Cast("int64", v))
    return out


def round_half_away(x: relax.Expr, ctx) -> relax.Expr:
    """Relay's ``round``: halves away from zero.

    v0.19 lowered ``tir.round`` to ``llvm.round`` (0.5 -> 1, -2.5 -> -3); TVM 0.27
    rounds halves to even (``relax.op.round``: 0.5 -> 0), which ONNX's Round wants
    and Relay's did not.  ``trunc(x + sign(x) * h)`` with ``h`` the float just below
    0.5 is exact for every value of the dtype: the sum rounds once, and can reach
    the next integer only from a fraction of at least one half.  Integers are
    returned as they are (Relay's ``round`` of an integer is the identity)."""
    x = ctx.emit(x)
    dtype = dtype_of(x)
    if not dtype.startswith(("float", "bfloat")):
        return x
    half = relax.const(below_half(dtype), dtype)
    return relax.op.trunc(relax.op.add(x, relax.op.multiply(relax.op.sign(x), half)))


def round_half_away_np(x: np.ndarray) -> np.ndarray:
    """:func:`round_half_away` on a NumPy array (values folded at import)."""
    if x.dtype.kind != "f":
        return x
    with np.errstate(invalid="ignore"):
        return np.trunc(x + np.sign(x) * x.dtype.type(below_half(str(x.dtype))))


def below_half(dtype: str) -> float:
    """The largest ``dtype`` float below 0.5: what :func:`round_half_away` adds (the
    TIR form in ``te_ops`` too).  bfloat16 (8 significant bits): 0.5 - 2**-9."""
    if dtype == "bfloat16":
        return 0.5 - 2.0 ** -9
    return float(np.nextafter(np.array(0.5, dtype), np.array(0, dtype)))


def nearest_rounding(method: str, coordinate_mode: str, rounding: str) -> str:
    """The TVM 0.27 ``rounding_method`` that picks the pixels v0.19's TOPI picked.

    v0.19 resolved ``""`` to ``round`` under ``align_corners`` and ``floor`` otherwise,
    and its ``round`` was ``llvm.round`` (halves away from zero: source 0.5 -> pixel
    1); TVM 0.27's ``round`` takes halves to even (pixel 0).  ``round_prefer_ceil``
    (``floor(x + 0.5)``) is the same for every coordinate >= -0.5, and a smaller one
    is clamped to pixel 0 either way.  Other methods ignore the rounding."""
    if method != "nearest_neighbor":
        return rounding
    if rounding == "":
        rounding = "round" if coordinate_mode == "align_corners" else "floor"
    return "round_prefer_ceil" if rounding == "round" else rounding


def integer_upscale(in_size: Any, out_size: Any) -> bool:
    """v0.19's ``can_convert_multiply_to_intdiv``: a static output size that is a whole
    multiple of the input (up to the ``1e-5`` bound), which its nearest-neighbour
    ``asymmetric`` resize indexed by integer division, whatever the rounding method."""
    if not isinstance(in_size, int) or not isinstance(out_size, int) or in_size <= 0:
        return False
    factor = np.float32(out_size) / np.float32(in_size)
    return float(factor) % 1 == 0 and factor <= 1 / (1e-5 * in_size + 1e-5)


def resize_args(attrs, default_layout: str, default_rounding: str) -> dict:
    """Keyword arguments of ``relax.op.image.resize2d`` from Relay's resize attributes,
    with Relay's defaults spelled out (Relax's ``cubic_alpha`` default differs)."""
    roi = attrs.get("roi")
    return dict(
        roi=tuple(float(v) for v in roi) if roi else None,
        layout=attrs.get("layout") or default_layout,
        method=attrs.get("method", "linear"),
        coordinate_transformation_mode=attrs.get("coordinate_transformation_mode",
                                                 "half_pixel"),
        rounding_method=nearest_rounding(attrs.get("method", "linear"),
                                         attrs.get("coordinate_transformation_mode",
                                                   "half_pixel"),
                                         attrs.get("rounding_method", default_rounding)),
        cubic_alpha=float(attrs.get("cubic_alpha", -0.5)),
        cubic_exclude=int(attrs.get("cubic_exclude", 0)),
        extrapolation_value=float(attrs.get("extrapolation_value", 0.0)),
        out_dtype=out_dtype(attrs),
    )


def checked_broadcast_to(data: relax.Expr, target: list, ctx) -> relax.Expr:
    """``broadcast_to(data, target)`` with the run-time dims of ``data`` checked against
    the target's (:func:`sized_as_target`)."""
    data = sized_as_target(data, target, ctx)
    if len(target) == ndim_of(data) and all(
            (isinstance(a, int) and isinstance(b, int) and a == b) or
            (not isinstance(a, int) and not isinstance(b, int) and a.same_as(b))
            for a, b in zip(shape_of(data), target)):
        return data  # already the target's shape (a broadcast of run-time dims to themselves)
    return relax.op.broadcast_to(data, target)


def sized_as_target(data: relax.Expr, target: list, ctx) -> relax.Expr:
    """``data`` whose run-time-sized dims are checked, when the model runs, to equal the
    target's dim on their axis (right-aligned), and cast to it.  TVM's broadcast_to
    decides when it builds whether a dim broadcasts: a run-time dim it cannot relate to
    the target's was indexed as if equal, so a 1 row (or 3 rows) broadcast to 5 read
    past the input — garbage, silently.  A run-time 1 that Relay broadcast is refused
    by name, as for every broadcasting op (:data:`BROADCAST_REASON`)."""
    dims = shape_of(data)
    if all(isinstance(d, int) for d in dims) or len(target) < len(dims):
        return data
    offset = len(target) - len(dims)
    analyzer = Analyzer()
    cast, changed = list(data.ty.shape.values), False
    for axis, dim in enumerate(dims):
        want = target[offset + axis]
        if isinstance(dim, int) or (not isinstance(want, int) and
                                    (dim.same_as(want) or analyzer.can_prove_equal(dim, want))):
            continue
        emit_run_check(ctx.bb, equal(dim, want), ctx.location, ctx.op_name,
                       f"the input has {{}} entries on axis {axis}, the target {{}}; "
                       f"{BROADCAST_REASON}", dim, want)
        cast[axis], changed = want, True
    return cast_dims(ctx.bb, data, cast) if changed else data
