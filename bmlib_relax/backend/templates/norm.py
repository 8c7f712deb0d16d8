"""Normalisation templates: batch_norm (inference), layer_norm, softmax."""
from __future__ import annotations

from tvm import te, tirx, topi

from ..schedule import block_name, is_spatial, vectorize_innermost
from ._utils import attr_ints, static_dim
from .registry import SCHEDULE_ATTR, register_schedule, register_template


# Half-precision epilogues compute in float32 and round once at the end (see batch_norm).
_WIDER = {"float16": "float32", "bfloat16": "float32"}


def compute_dtype(dtype: str) -> str:
    """The dtype a per-channel affine epilogue computes in for ``dtype`` data."""
    return _WIDER.get(str(dtype), str(dtype))


def _as(value, dtype: str):
    """``value`` (a TIR expression) cast to ``dtype`` unless it already has it."""
    have = value.dtype if hasattr(value, "dtype") else value.ty  # tensor element / expression
    return value if str(have) == dtype else value.astype(dtype)


@register_template("relax.nn.batch_norm", symbolic_dims="batch")
def batch_norm(call, inputs, ctx):
    """Inference batch_norm as ``x * scale[c] + shift[c]``: the per-channel
    ``scale = gamma / sqrt(var + eps)`` and ``shift = beta - mean * scale`` are
    computed once (small blocks), so the per-element work is one multiply-add
    that fuses into a producer's epilogue.

    For float16 data everything is computed in float32 and rounded once: the
    affine form cancels ``x * scale`` against ``mean * scale``, which in float16
    loses the result (mean 300, var 0.01: ``300.25 * 10`` rounds to a multiple
    of 2, the exact answer is 2.5)."""
    attrs = call.attrs
    if bool(attrs.training):
        raise ctx.error("training-mode batch_norm (batch statistics) has no template")
    data, gamma, beta, mean, var = inputs
    axis = int(attrs.axis) % len(data.shape)
    acc = compute_dtype(data.dtype)
    eps = tirx.const(float(attrs.epsilon), acc)
    use_scale, use_center = bool(attrs.scale), bool(attrs.center)

    def scale_of(c):
        inv = tirx.rsqrt(_as(var[c], acc) + eps)
        return _as(gamma[c], acc) * inv if use_scale else inv

    scale = te.compute(var.shape, scale_of, name="bmlib_bn_scale")
    shift = te.compute(var.shape, lambda c: (_as(beta[c], acc) if use_center else
                                             tirx.const(0, acc)) - _as(mean[c], acc) * scale[c],
                       name="bmlib_bn_shift")
    out = te.compute(data.shape,
                     lambda *i: _as(_as(data[i], acc) * scale[i[axis]] + shift[i[axis]],
                                    str(data.dtype)), name="bmlib_batch_norm")
    return out, mean, var


def _row_reduction(value, outer, length, reducer, lanes, name):
    """``reducer`` of ``value(row, k)`` over ``k < length`` for every row of ``outer``.

    A static row of whole vectors is reduced in two steps: ``lanes`` partial results
    per row (``partial[row, l]`` over ``k = ko * lanes + l``: one vector accumulator,
    see :func:`schedule_rowwise`), then those ``lanes`` values.  A single scalar chain
    (one add per FMA latency) made softmax's row sums cost more than its ``exp``."""
    steps = static_dim(length)
    if steps is None or steps < 2 * lanes:
        k = te.reduce_axis((0, length), name="k")
        return te.compute(outer, lambda *i: reducer(value(i, k), axis=k), name=name,
                          attrs={ROW_PART_ATTR: 1})
    whole = steps - steps % lanes
    ko = te.reduce_axis((0, whole // lanes), name="ko")
    partial = te.compute(
        [*outer, lanes], lambda *i: reducer(value(i[:-1], ko * lanes + i[-1]), axis=ko),
        name=f"{name}_partial", attrs={PARTIAL_ATTR: 1, ROW_PART_ATTR: 1})
    kl = te.reduce_axis((0, lanes), name="kl")
    if whole == steps:
        return te.compute(outer, lambda *i: reducer(partial[i + (kl,)], axis=kl), name=name,
                          attrs={ROW_PART_ATTR: 1})
    # A row of whole vectors and a few more (a vocabulary of 33278 words): the vectors
    # as above, the rest in a short scalar chain, then the two combined.
    vectors = te.compute(outer, lambda *i: reducer(partial[i + (kl,)], axis=kl),
                         name=f"{name}_vectors", attrs={ROW_PART_ATTR: 1})
    kt = te.reduce_axis((whole, steps), name="kt")
    rest = te.compute(outer, lambda *i: reducer(value(i, kt), axis=kt), name=f"{name}_rest",
                      attrs={ROW_PART_ATTR: 1})
    combine = {te.sum: lambda a, b: a + b, te.max: tirx.max}[reducer]
    return te.compute(outer, lambda *i: combine(vectors[i], rest[i]), name=name,
                      attrs={ROW_PART_ATTR: 1})


# Block annotation of the lane-partial step of a row reduction (see _row_reduction).
PARTIAL_ATTR = "bmlib_lane_partial"
# Block annotation of every per-row intermediate of softmax / layer_norm: what
# schedule_rowwise computes at the row (and nothing upstream of it in a merged partition).
ROW_PART_ATTR = "bmlib_row_part"


@register_template("relax.nn.layer_norm", symbolic_dims=True)
def layer_norm(call, inputs, ctx):
    """layer_norm over the last axis of float32 data, per row: the mean, then the
    variance as the mean of squared deviations (a second pass over the L1-resident
    row, not ``E[x^2] - E[x]^2``, which cancels for rows far from zero), then
    ``(x - mean) * rsqrt(var + eps) * gamma + beta``; scheduled per row like softmax.
    Other axes and dtypes keep topi's layer_norm."""
    attrs = call.attrs
    data, gamma, beta = inputs
    if not (bool(attrs.center) and bool(attrs.scale)):
        raise ctx.error("layer_norm without center/scale has no template")
    axes = [a % len(data.shape) for a in attr_ints(attrs.axes)]
    if axes != [len(data.shape) - 1] or str(data.dtype) != "float32" or \
            len(data.shape) < 2 or len(gamma.shape) != 1 or len(beta.shape) != 1:
        return topi.nn.layer_norm(data, gamma, beta, attr_ints(attrs.axes),
                                  float(attrs.epsilon))
    outer, length = list(data.shape[:-1]), data.shape[-1]
    lanes = ctx.lanes("float32")
    count = tirx.Cast("float32", length) if static_dim(length) is None else \
        tirx.const(float(static_dim(length)), "float32")
    total = _row_reduction(lambda i, k: data[i + (k,)], outer, length, te.sum, lanes,
                           "bmlib_ln_sum")
    mean = te.compute(outer, lambda *i: total[i] / count, name="bmlib_ln_mean",
                         attrs={ROW_PART_ATTR: 1})
    squares = _row_reduction(
        lambda i, k: (data[i + (k,)] - mean[i]) * (data[i + (k,)] - mean[i]), outer, length,
        te.sum, lanes, "bmlib_ln_squares")
    eps = tirx.const(float(attrs.epsilon), "float32")
    inv = te.compute(outer, lambda *i: tirx.rsqrt(squares[i] / count + eps),
                     name="bmlib_ln_rstd",
                         attrs={ROW_PART_ATTR: 1})
    return te.compute(data.shape, lambda *i: (data[i] - mean[i[:-1]]) * inv[i[:-1]] *
                      gamma[i[-1]] + beta[i[-1]], name="bmlib_layer_norm",
                      attrs={SCHEDULE_ATTR: "bmlib.rowwise"})


def _row_axis(call, x) -> tuple[int, bool]:
    """The axis of a softmax-like call, and whether the row templates take it: the last
    axis of float32 data of rank 2 or more."""
    axis = int(call.attrs.axis) % len(x.shape)
    return axis, axis == len(x.shape) - 1 and len(x.shape) >= 2 and str(x.dtype) == "float32"


def _exp_rows(x, lanes: int, name: str):
    """The row maxima of ``x`` (rows along the last axis), ``exp(x - max)`` by
    ``fast_exp`` and the row sums of those: what softmax and log_softmax share."""
    outer, length = list(x.shape[:-1]), x.shape[-1]
    row_max = _row_reduction(lambda i, k: x[i + (k,)], outer, length, te.max, lanes,
                             f"{name}_max")
    shifted = te.compute(x.shape, lambda *i: x[i] - row_max[i[:-1]], name=f"{name}_shift",
                         attrs={ROW_PART_ATTR: 1})
    exp = topi.fast_exp(shifted)
    row_sum = _row_reduction(lambda i, k: exp[i + (k,)], outer, length, te.sum, lanes,
                             f"{name}_sum")
    return row_max, exp, row_sum


@register_template("relax.nn.softmax", symbolic_dims=True)
def softmax(call, inputs, ctx):
    """Softmax over the last axis, per row (see :func:`schedule_rowwise`): the row
    maximum, ``exp(x - max)`` (TVM's vectorizable polynomial ``fast_exp`` for float32:
    ``T.exp`` becomes one ``expf`` call per element), the row sum, and the
    normalisation by one reciprocal per row.  Other axes and dtypes keep topi's
    softmax."""
    x = inputs[0]
    axis, rowwise = _row_axis(call, x)
    if not rowwise:
        return topi.nn.softmax(x, axis=axis)
    outer = list(x.shape[:-1])
    _, exp, row_sum = _exp_rows(x, ctx.lanes("float32"), "bmlib_softmax")
    inv = te.compute(outer, lambda *i: tirx.const(1.0, "float32") / row_sum[i],
                     name="bmlib_softmax_inv", attrs={ROW_PART_ATTR: 1})
    return te.compute(x.shape, lambda *i: exp[i] * inv[i[:-1]], name="bmlib_softmax",
                      attrs={SCHEDULE_ATTR: "bmlib.rowwise"})


@register_schedule("bmlib.rowwise")
def schedule_rowwise(sch, block, ctx):
    """Rows in parallel; everything the row's output needs (softmax: maximum,
    exponentials, sum; layer_norm: mean, variance) computed at the row, one pass
    over L1-resident data each instead of one over the tensor.  A static row length
    is vectorized, a symbolic one left to LLVM's loop vectorizer (never a TIR
    vector); a lane-partial reduction keeps its lanes as one vector accumulator."""
    loops = sch.get_loops(block)
    row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
    sch.parallel(row)
    row_depth = len(sch.get_loops(block)) - 1
    lanes = ctx.lanes(str(sch.get(block).writes[0].source.dtype))
    names, order, frontier = set(), [], [block]
    while frontier:  # every intermediate of this softmax / layer_norm, nearest first
        for producer in sch.get_producers(frontier.pop(0)):
            name = block_name(sch, producer)
            if name not in names and name not in ctx.done and _row_part(sch, producer):
                names.add(name)
                order.append(name)
                frontier.append(producer)
    for name in order:  # the shift folds into the exponential that reads it
        if name.endswith("_shift"):
            sch.compute_inline(sch.get_sblock(name))
    order = [name for name in order if not name.endswith("_shift")]
    placed, pending = {block_name(sch, block)}, list(order)
    while pending:  # each computed at the row once all its readers are there
        name = next(n for n in pending if all(
            block_name(sch, c) in placed for c in sch.get_consumers(sch.get_sblock(n))))
        sch.compute_at(sch.get_sblock(name), row)
        placed.add(name)
        pending.remove(name)
    for name in order:
        producer = sch.get_sblock(name)
        if PARTIAL_ATTR in sch.get(producer).annotations:
            lane, step = sch.get_loops(producer)[-2:]
            sch.reorder(step, lane)
            sch.vectorize(lane)
            sch.decompose_reduction(producer, step)
        elif is_spatial(sch, producer) and len(sch.get_loops(producer)) > row_depth:
            vectorize_innermost(sch, producer, lanes)  # not a per-row scalar (1 / sum)
    vectorize_innermost(sch, block, lanes)
    for name in [block_name(sch, block), *order]:
        ctx.done.add(name)


def _row_part(sch, block) -> bool:
    """A per-row intermediate of the template, or the ``fast_exp`` of its shift."""
    if ROW_PART_ATTR in sch.get(block).annotations:
        return True
    producers = sch.get_producers(block)
    return str(sch.get(block).name_hint).startswith("T_fast_exp") and bool(producers) and \
        all(ROW_PART_ATTR in sch.get(p).annotations for p in producers)


@register_template("relax.nn.log_softmax", symbolic_dims=True)
def log_softmax(call, inputs, ctx):
    """log_softmax over the last axis of float32 data, per row like :func:`softmax`:
    ``x - max - log(sum(exp(x - max)))`` with the exponentials by ``fast_exp`` and
    one ``log`` per row (topi's: a scalar ``expf`` call per element, a word-level
    language model's output row is its vocabulary).  Other axes and dtypes keep
    topi's log_softmax."""
    x = inputs[0]
    axis, rowwise = _row_axis(call, x)
    if not rowwise:
        return topi.nn.log_softmax(x, axis=axis)
    outer = list(x.shape[:-1])
    row_max, _, row_sum = _exp_rows(x, ctx.lanes("float32"), "bmlib_log_softmax")
    log_sum = te.compute(outer, lambda *i: tirx.log(row_sum[i]),
                         name="bmlib_log_softmax_log_sum", attrs={ROW_PART_ATTR: 1})
    # (x - max) first: exact for x near the maximum, where max + log_sum would round
    return te.compute(x.shape, lambda *i: x[i] - row_max[i[:-1]] - log_sum[i[:-1]],
                      name="bmlib_log_softmax", attrs={SCHEDULE_ATTR: "bmlib.rowwise"})


@register_template("relax.nn.group_norm")
def group_norm(call, inputs, ctx):
    attrs = call.attrs
    data, gamma, beta = inputs
    return topi.nn.group_norm(data, gamma, beta, int(attrs.num_groups),
                              int(attrs.channel_axis), attr_ints(attrs.axes),
                              float(attrs.epsilon))


@register_template("relax.nn.instance_norm")
def instance_norm(call, inputs, ctx):
    attrs = call.attrs
    data, gamma, beta = inputs
    return topi.nn.instance_norm(data, gamma, beta, int(attrs.channel_axis),
                                 attr_ints(attrs.axes), float(attrs.epsilon))
