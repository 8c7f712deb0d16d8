"""Normalisation templates: batch_norm (inference), layer_norm, softmax."""
from __future__ import annotations

from tvm import te, tirx, topi

from ..schedule import block_name, is_spatial, vectorize_innermost
from ._utils import attr_ints
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


@register_template("relax.nn.layer_norm", symbolic_dims=True)
def layer_norm(call, inputs, ctx):
    attrs = call.attrs
    data, gamma, beta = inputs
    if not (bool(attrs.center) and bool(attrs.scale)):
        raise ctx.error("layer_norm without center/scale has no template")
    return topi.nn.layer_norm(data, gamma, beta, attr_ints(attrs.axes), float(attrs.epsilon))


@register_template("relax.nn.softmax", symbolic_dims=True)
def softmax(call, inputs, ctx):
    """Softmax over the last axis in four computes, scheduled per row (see
    :func:`schedule_softmax`): the row maximum, ``exp(x - max)`` (TVM's
    vectorizable polynomial ``fast_exp`` for float32: ``T.exp`` becomes one
    ``expf`` call per element), the row sum, and the normalisation.  Other axes and
    dtypes keep topi's softmax."""
    x = inputs[0]
    axis = int(call.attrs.axis) % len(x.shape)
    if axis != len(x.shape) - 1 or len(x.shape) < 2 or str(x.dtype) != "float32":
        return topi.nn.softmax(x, axis=axis)
    outer, length = list(x.shape[:-1]), x.shape[-1]
    k = te.reduce_axis((0, length), name="k")
    row_max = te.compute(outer, lambda *i: te.max(x[i + (k,)], axis=k),
                         name="bmlib_softmax_max")
    shifted = te.compute(x.shape, lambda *i: x[i] - row_max[i[:-1]],
                         name="bmlib_softmax_shift")
    exp = topi.fast_exp(shifted)
    k2 = te.reduce_axis((0, length), name="k")
    row_sum = te.compute(outer, lambda *i: te.sum(exp[i + (k2,)], axis=k2),
                         name="bmlib_softmax_sum")
    return te.compute(x.shape, lambda *i: exp[i] / row_sum[i[:-1]], name="bmlib_softmax",
                      attrs={SCHEDULE_ATTR: "bmlib.softmax"})


@register_schedule("bmlib.softmax")
def schedule_softmax(sch, block, ctx):
    """Rows in parallel, each row's maximum, exponentials, sum and normalisation
    computed at the row (one pass over L1-resident data instead of four over the
    tensor); a static row length is vectorized, a symbolic one left to LLVM's loop
    vectorizer (never a TIR vector)."""
    (exp, row_sum) = sorted(sch.get_producers(block),
                            key=lambda b: not is_spatial(sch, b))  # the exp block first
    (shifted,) = sch.get_producers(exp)
    (row_max,) = [b for b in sch.get_producers(shifted) if not is_spatial(sch, b)]
    loops = sch.get_loops(block)
    row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
    sch.parallel(row)
    sch.compute_inline(shifted)
    for producer in (row_sum, exp, row_max):
        sch.compute_at(producer, row)
    lanes = ctx.lanes(str(sch.get(block).writes[0].source.dtype))
    for spatial in (exp, block):
        vectorize_innermost(sch, spatial, lanes)
    for done in (block, exp, row_sum, row_max):
        ctx.done.add(block_name(sch, done))


@register_template("relax.nn.log_softmax", symbolic_dims=True)
def log_softmax(call, inputs, ctx):
    return topi.nn.log_softmax(inputs[0], axis=int(call.attrs.axis))


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
