"""The bmlib pattern table: Relax DPL composites registered under ``bmlib.``.

Each entry is ``(name, pattern, annotations, check)`` as TVM's pattern registry
expects.  Builders take flags (``make_conv2d_pattern(with_bias=True,
with_bn=True, activation="relu")``) and return the pattern plus its annotation
map; the annotation names are the contract between pattern and check.  The
codegen does not read composite names: a composite is lowered as the
composition of its ops' templates, so a check only has to accept what those
templates support.  Later entries take priority, so larger fusions are listed
after their parts.

Patterns match the forms the importer emits (``nn.dense`` is ``matmul(x,
permute_dims(w))``, ``nn.bias_add`` an ``add`` of a per-channel tensor, ...).
DPL matches ``add``/``multiply`` commutatively, so ``add(reshape(b), conv)``
and ``add(conv, reshape(b))`` are one pattern.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import DFPattern, is_const, is_op, is_tuple_get_item, wildcard
from tvm.relax.transform import PatternCheckContext
from tvm.sym.analyzer import Analyzer

from ..dims import is_static_dim, static_dim, static_dims
from ..switches import switched_on
from .templates.registry import supports_symbolic_dims, symbolic_batch_only

PREFIX = "bmlib"
SUPPORTED_DTYPES = ("float32", "float16")

Annotations = dict[str, DFPattern]
Check = Callable[[PatternCheckContext], bool]

# Element-wise ops, by arity (extra non-tensor operands such as clip's bounds are wildcards).
UNARY_OPS = ("relax.nn.relu", "relax.nn.leakyrelu", "relax.nn.gelu",
             "relax.nn.silu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.exp",
             "relax.log", "relax.sqrt", "relax.rsqrt", "relax.negative", "relax.abs",
             "relax.erf", "relax.astype")
BINARY_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide",
              "relax.maximum", "relax.minimum", "relax.power")
# Data movement and reductions offloaded as single-op composites.
MOVEMENT_OPS = ("relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze",
                "relax.flatten", "relax.concat", "relax.split", "relax.strided_slice",
                "relax.nn.pad")
REDUCE_OPS = ("relax.mean", "relax.sum", "relax.max", "relax.min")
# Ops the host runs as a view of their input (TVM's VM reshapes in place): alone in a
# partition they are a copy, so without merging they are not offloaded on their own
# (``partition_for_bmlib``); larger composites and merged partitions still take them in.
HOST_VIEW_OPS = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")
HOST_VIEWS_SWITCH = "BMLIB_HOST_VIEWS"  # 0 / off: standalone views offloaded (A/B, templates)
STANDALONE_VIEW_ENTRIES = tuple(f"{PREFIX}.{op.rsplit('.', 1)[-1]}" for op in HOST_VIEW_OPS)
# More unary math, data movement and single-op families with templates.
MATH_OPS = ("relax.cos", "relax.sin", "relax.tan", "relax.cosh", "relax.sinh", "relax.acos",
            "relax.asin", "relax.atan", "relax.acosh", "relax.asinh", "relax.atanh",
            "relax.ceil", "relax.floor", "relax.round", "relax.trunc", "relax.sign",
            "relax.square")
EXTRA_OPS = ("relax.tile", "relax.repeat", "relax.flip", "relax.image.resize2d",
             "relax.nn.prelu", "relax.nn.conv1d", "relax.nn.conv3d", "relax.nn.conv1d_transpose",
             "relax.nn.conv3d_transpose", "relax.broadcast_to",
             "relax.stack", "relax.nn.group_norm", "relax.nn.instance_norm")
# Ops whose operands or results are masks and indices (see check_tensors).
SELECTION_OPS = ("relax.less", "relax.less_equal", "relax.greater", "relax.greater_equal",
                 "relax.equal", "relax.not_equal", "relax.logical_and", "relax.logical_or",
                 "relax.logical_xor", "relax.logical_not", "relax.where", "relax.take",
                 "relax.gather_elements", "relax.gather_nd", "relax.argmax", "relax.argmin")
SELECTION_DTYPES = ("bool", "int32", "int64")
# Ops that read or make masks and indices; astype casts them (an argmax's int64 to int32).
INDEX_OPS = SELECTION_OPS + ("relax.astype",)


# --------------------------------------------------------------------------- checks
def static_shape(ty) -> Optional[list[int]]:
    """Static shape of a tensor type, None if dynamic or not a tensor."""
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or shape is None or not hasattr(shape, "values"):
        return None
    return static_dims(shape.values)


def _shape(expr) -> Optional[list[int]]:
    """Static shape of a tensor expression, None if dynamic or not a tensor."""
    return static_shape(getattr(expr, "ty", None))


def _dims(expr) -> Optional[list[Optional[int]]]:
    """Dims of a tensor expression, None for each symbolic one; None if not a tensor
    of known rank."""
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or shape is None or not hasattr(shape, "values"):
        return None
    return [static_dim(d) for d in shape.values]


def only_batch_symbolic(context: PatternCheckContext) -> bool:
    """Every tensor of the match is static but for its first dim (a free batch): what
    the conv and pool templates take (their spatial and channel dims size the
    blocking, the tiles and the packed weights)."""
    exprs = [context.matched_expr, *context.annotated_expr.values(),
             *context.matched_bindings.values()]
    for expr in exprs:
        for item in (expr, *(getattr(expr, "args", None) or ())):
            dims = _dims(item)
            if dims is not None and None in dims[1:]:
                return False
    return True


# The templates index static tensors with int32 (TE picks it for dims that fit): a
# tensor of 2**31 elements or more stays on the host (TVM's own lowering builds it).
MAX_TEMPLATE_ELEMENTS = 2 ** 31 - 1


def fits_template_indexing(ty) -> bool:
    """Whether a tensor type has at most ``MAX_TEMPLATE_ELEMENTS`` static elements."""
    return (static_elements(ty) or 0) <= MAX_TEMPLATE_ELEMENTS


def static_elements(ty) -> Optional[int]:
    """The element count of a tensor type whose dims are all static, else None."""
    shape = static_shape(ty)
    return None if shape is None else int(np.prod(shape, dtype=object))


def has_no_elements(ty) -> bool:
    """Whether a tensor type has a static dim of 0: nothing to compute, and a template's
    vectorized loop of extent 0 is an error in TVM's build ("Failed to vectorize loop
    with extent 0").  Such ops stay on the host, where TVM's build takes them."""
    shape = getattr(ty, "shape", None) if isinstance(ty, relax.TensorType) else None
    return shape is not None and hasattr(shape, "values") and \
        any(static_dim(d) == 0 for d in shape.values)


def _tensor_ok(ty, dtypes: tuple = SUPPORTED_DTYPES, symbolic: bool = False) -> bool:
    """A tensor type a template takes: a supported dtype, a known rank and some
    elements; every dim static unless ``symbolic`` (all ops of the match take symbolic
    dims)."""
    if isinstance(ty, relax.TupleType):
        return all(_tensor_ok(f, dtypes, symbolic) for f in ty.fields)
    if not isinstance(ty, relax.TensorType):
        return True  # shapes, PrimValues: operands, not data
    # The templates are written for floating point; integer math stays on the host.
    if str(ty.dtype) not in dtypes:
        return False
    if ty.shape is None or not hasattr(ty.shape, "values"):
        return False  # unknown rank
    if not fits_template_indexing(ty) or has_no_elements(ty):
        return False
    # Templates are specialised per shape at compile time, symbolic ones per free dim.
    return all(symbolic or is_static_dim(d) for d in ty.shape.values)


def _batch_only(calls) -> bool:
    """Whether an op of a match takes a symbolic batch only (see register_template)."""
    return any(symbolic_batch_only(c.op.name) for c in calls
               if isinstance(getattr(c, "op", None), tvm.ir.Op))


def _takes_symbolic_dims(calls) -> bool:
    """Whether every op of a match has a template that takes symbolic dims."""
    return all(supports_symbolic_dims(c.op.name) for c in calls
               if isinstance(getattr(c, "op", None), tvm.ir.Op))


def _tensor_dims(ty) -> list:
    if isinstance(ty, relax.TupleType):
        return [d for f in ty.fields for d in _tensor_dims(f)]
    shape = getattr(ty, "shape", None) if isinstance(ty, relax.TensorType) else None
    return list(shape.values) if shape is not None and hasattr(shape, "values") else []


def _symbolic_dims_bound(call) -> bool:
    """Every symbolic var in the shapes of ``call`` (operands and result) is a whole dim
    of one of its tensor operands: a PrimFunc binds its symbolic dims from its input
    buffers, so a var known only inside ``2 * n`` or only in the result stays host-side."""
    operand_dims = [d for a in call.args for d in _tensor_dims(getattr(a, "ty", None))]
    bound = [d for d in operand_dims if isinstance(d, tvm.tirx.Var)]
    # A symbolic target shape (reshape) goes into the partition (backend.symbolic), so
    # its dims too must come from the tensor operands.
    shapes = [d for a in call.args if isinstance(a, relax.ShapeExpr) for d in a.values]
    for dim in operand_dims + shapes + _tensor_dims(getattr(call, "ty", None)):
        if is_static_dim(dim):
            continue
        if any(not any(v.same_as(b) for b in bound)
               for v in tvm.tirx.analysis.undefined_vars(dim)):
            return False
    return True


# Ops whose template reads the target shape from the call's type: a symbolic target
# (``broadcast_to(x, R.shape([2, n, 8]))``) is lifted into a parameter of the composite,
# where the template cannot read it (only reshapes are put back: backend.symbolic).
_TARGET_SHAPE_OPS = ("relax.broadcast_to",)


def _lifted_target_shape(call) -> bool:
    return getattr(call.op, "name", "") in _TARGET_SHAPE_OPS and any(
        not is_static_dim(d) for a in call.args if isinstance(a, relax.ShapeExpr)
        for d in a.values)


def _dtypes_of(expr) -> tuple:
    """Dtypes a call may read and produce: masks (bool) and indices (int32/int64)
    are the nature of comparisons, ``where`` and indexing; everything else is float."""
    op = getattr(getattr(expr, "op", None), "name", "")
    return SUPPORTED_DTYPES + SELECTION_DTYPES if op in INDEX_OPS else SUPPORTED_DTYPES


def check_tensors(context: PatternCheckContext) -> bool:
    """Every tensor the match reads or writes has a dtype its op's template takes
    (float32/float16; masks and indices for selection ops) and a static shape, and
    no intermediate value is needed outside the composite."""
    exprs = [context.matched_expr, *context.annotated_expr.values(),
             *context.matched_bindings.values()]
    calls = [e for e in exprs if isinstance(e, relax.Call)]
    # The ops of the match only: an operand a wildcard annotates (a host permute_dims
    # feeding a conv) is produced outside and lowered by no template of this match.
    ops = [e for e in (context.matched_expr, *context.matched_bindings.values())
           if isinstance(e, relax.Call)]
    symbolic = _takes_symbolic_dims(ops)
    if symbolic and _batch_only(ops) and not only_batch_symbolic(context):
        return False
    symbolic = symbolic and all(_symbolic_dims_bound(c) for c in ops)
    if any(_lifted_target_shape(c) for c in ops):
        return False
    read_by_selection = {id(a) for c in calls if _dtypes_of(c) != SUPPORTED_DTYPES
                         for a in c.args}
    for expr in exprs:
        if isinstance(expr, relax.Call):
            dtypes = _dtypes_of(expr)
        else:  # an annotated operand: a mask or index only when a selection op reads it
            dtypes = SUPPORTED_DTYPES + SELECTION_DTYPES if id(expr) in read_by_selection \
                else SUPPORTED_DTYPES
        if not _tensor_ok(getattr(expr, "ty", None), dtypes, symbolic):
            return False
        for arg in getattr(expr, "args", None) or ():
            if not _tensor_ok(getattr(arg, "ty", None), _dtypes_of(expr), symbolic):
                return False
    # An intermediate used outside would be recomputed or lost: keep such regions apart.
    return not has_leaking_intermediate_variables(context)


def _per_channel(bias_shape: list[int], out_shape: list[int], axis: int) -> bool:
    """``bias`` broadcasts along ``axis`` of ``out`` only (the bias_add import form)."""
    if len(bias_shape) > len(out_shape):
        return False
    aligned = [1] * (len(out_shape) - len(bias_shape)) + bias_shape
    axis %= len(out_shape)
    return all(d == 1 or (i == axis and d == out_shape[axis]) for i, d in enumerate(aligned))


def _per_blocked_channel(bias_shape: list[int], out_shape: list[int]) -> bool:
    """``bias`` broadcasts along the channel axes (1 and 4) of an NCHW{b}c ``out`` only."""
    if len(bias_shape) > 5:
        return False
    aligned = [1] * (5 - len(bias_shape)) + bias_shape
    return all(d == 1 or (i in (1, 4) and d == out_shape[i]) for i, d in enumerate(aligned))


def _bias_ok(context: PatternCheckContext, producer: str, axis: int) -> bool:
    if "bias" not in context.annotated_expr:
        return True
    bias = _shape(context.annotated_expr["bias"])
    out = _dims(context.annotated_expr[producer])  # a symbolic dim takes no bias but 1
    if bias is not None and out is not None and len(out) == 5 and axis == 1:
        return _per_blocked_channel(bias, out)
    return bias is not None and out is not None and _per_channel(bias, out, axis)


def _bn_ok(context: PatternCheckContext) -> bool:
    bn = context.annotated_expr.get("bn")
    # Inference only: training-mode batch_norm computes batch statistics.
    return bn is None or not bool(bn.attrs.training)


def check_conv2d(context: PatternCheckContext) -> bool:
    if not check_tensors(context):
        return False
    attrs = context.annotated_expr["conv"].attrs
    # The conv2d template is written for NCHW data and OIHW weights, or the
    # blocked OIHW{ib}i{ob}o weights that bmlib's weight packing produces; with
    # those, also for NCHW{ib}c data and NCHW{ob}c results (see .blocked_layout).
    layouts = (str(attrs.data_layout), str(attrs.out_layout))
    blocked = layouts != ("NCHW", "NCHW")
    if not is_conv2d_kernel_layout(str(attrs.kernel_layout)) or \
            (blocked and not blocked_conv2d_layouts(str(attrs.data_layout),
                                                    str(attrs.kernel_layout),
                                                    str(attrs.out_layout), int(attrs.groups))):
        return False
    # A fused bias must be per output channel, and batch_norm must normalise channels.
    bn = context.annotated_expr.get("bn")
    if bn is not None and (blocked or int(bn.attrs.axis) not in (1, -3)):
        return False
    return _bias_ok(context, "conv", axis=1) and _bn_ok(context)


def check_conv2d_residual(context: PatternCheckContext) -> bool:
    """:func:`check_conv2d`, and the residual is a whole tensor of the conv's shape and
    dtype (a per-channel or broadcast operand is a bias, not a shortcut)."""
    if not check_conv2d(context):
        return False
    residual = getattr(context.annotated_expr["residual"], "ty", None)
    out = getattr(context.annotated_expr["conv"], "ty", None)
    if not isinstance(residual, relax.TensorType) or not isinstance(out, relax.TensorType) or \
            residual.shape is None or out.shape is None or residual.dtype != out.dtype:
        return False
    have, want = residual.shape.values, out.shape.values
    return len(have) == len(want) and all(
        static_dim(a) == static_dim(b) if is_static_dim(a) or is_static_dim(b)
        else a.same_as(b)
        for a, b in zip(have, want))


_BLOCKED_OIHW = re.compile(r"OIHW(\d+)i(\d+)o")
_WINOGRAD_HWOI = re.compile(r"HWOI(\d+)o")  # templates/conv_winograd.py's transformed weights


_BLOCKED_NCHW = re.compile(r"NCHW(\d+)c")


def blocked_conv2d_layouts(data: str, kernel: str, out: str, groups: int) -> bool:
    """NCHW or NCHW{ib}c data, an OIHW{ib}i{ob}o kernel and an NCHW{ob}c result: the
    blocked forms the conv2d template takes (groups 1; or depthwise, whose kernel
    blocks one input channel and whose data has the output's blocks).  A Winograd
    kernel (``HWOI{kb}o``) reads NCHW or any NCHW{b}c and writes NCHW{kb}c."""
    blocking = blocked_kernel_layout(kernel)
    out_match = _BLOCKED_NCHW.fullmatch(out)
    data_match = _BLOCKED_NCHW.fullmatch(data)
    winograd = _WINOGRAD_HWOI.fullmatch(kernel)
    if winograd is not None:  # transformed weights (conv_winograd.py): any input block
        return groups == 1 and out_match is not None and \
            out_match.group(1) == winograd.group(1) and (data == "NCHW" or data_match is not None)
    if blocking is None or out_match is None or int(out_match.group(1)) != blocking[1] or \
            (groups > 1 and blocking[0] != 1):
        return False
    return data == "NCHW" or (data_match is not None and
                              int(data_match.group(1)) == blocking[0 if groups == 1 else 1])


def is_pool_layout(layout: str) -> bool:
    """NCHW, or NCHW{b}c (see .blocked_layout)."""
    return layout == "NCHW" or _BLOCKED_NCHW.fullmatch(layout) is not None


def is_conv2d_kernel_layout(layout: str) -> bool:
    return layout == "OIHW" or _BLOCKED_OIHW.fullmatch(layout) is not None or \
        _WINOGRAD_HWOI.fullmatch(layout) is not None


def blocked_kernel_layout(layout: str) -> Optional[tuple[int, int]]:
    """``(ib, ob)`` of an ``OIHW{ib}i{ob}o`` layout, None for plain OIHW."""
    match = _BLOCKED_OIHW.fullmatch(layout)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def check_conv2d_transpose(context: PatternCheckContext) -> bool:
    if not check_tensors(context):
        return False
    attrs = context.annotated_expr["conv"].attrs
    # templates/conv_transpose.py: NCHW data, IOHW or packed IOHW{ib}i{ob}o weights.
    return (str(attrs.data_layout), str(attrs.out_layout)) == ("NCHW", "NCHW") and \
        re.fullmatch(r"IOHW(\d+i\d+o)?", str(attrs.kernel_layout)) is not None


def check_matmul(context: PatternCheckContext) -> bool:
    if not check_tensors(context) or not _reduction_dims_agree(context):
        return False
    # The bias of a dense is added along the last axis (nn.bias_add's import form).
    return _bias_ok(context, "matmul", axis=-1)


def _reduction_dims_agree(context: PatternCheckContext) -> bool:
    """The two operands' reduction dims are provably equal.  Relax types
    ``matmul(x: (n, k), w: (64, 64))`` without relating ``k`` to 64; a template would
    then read past ``w`` when ``k`` > 64 at run time (TVM's own lowering reads a
    part of it).  Such a matmul stays on the host."""
    lhs, rhs = (_tensor_dims(getattr(context.annotated_expr[k], "ty", None))
                for k in ("lhs", "rhs"))
    if not lhs or not rhs:
        return False
    a, b = lhs[-1], rhs[-2] if len(rhs) > 1 else rhs[0]
    if is_static_dim(a) or is_static_dim(b):
        return static_dim(a) is not None and static_dim(a) == static_dim(b)
    return a.same_as(b) or bool(Analyzer().can_prove_equal(a, b))


def check_dense(context: PatternCheckContext) -> bool:
    # nn.dense's weight is 2-D and transposed by permute_dims([1, 0]), or its 3-D
    # column panels (rewrite.pack_dense_weight) read through a [K, N] view.
    weight = _shape(context.annotated_expr["weight"])
    rhs = _shape(context.annotated_expr["rhs"])
    return weight is not None and rhs is not None and len(rhs) == 2 and \
        len(weight) in (2, 3) and check_matmul(context)


def check_batch_matmul(context: PatternCheckContext) -> bool:
    lhs, rhs = (_shape(context.annotated_expr[k]) for k in ("lhs", "rhs"))
    return lhs is not None and rhs is not None and len(lhs) >= 3 and len(rhs) >= 3 and \
        check_matmul(context)


def check_residual(context: PatternCheckContext) -> bool:
    """The residual has the dense's static shape: an element-wise epilogue, no broadcast."""
    out = _shape(context.annotated_expr["matmul"])
    return out is not None and _shape(context.annotated_expr["residual"]) == out


def check_scale(context: PatternCheckContext) -> bool:
    """The scale is a 0-d constant (bound into the partition as an immediate)."""
    scale = context.annotated_expr["scale"]
    return isinstance(scale, tvm.ir.expr.GenericConst) and _shape(scale) == []


def check_erf_gelu(context: PatternCheckContext) -> bool:
    """``0.5 * x * (1 + erf(x * 1/sqrt(2)))`` — the constants make it GELU."""
    expected = {"gelu_half": 0.5, "gelu_one": 1.0, "gelu_rsqrt2": 0.7071068}
    for key, value in expected.items():
        const = context.annotated_expr.get(key)
        if const is None:
            continue
        data = const.value.numpy()
        if data.size != 1 or abs(float(data.reshape(())) - value) > 1e-3:
            return False
    return True


def check_pool2d(context: PatternCheckContext) -> bool:
    attrs = context.annotated_expr["root"].attrs
    # topi pooling follows the input layout; NCHW and NCHW{b}c are the ones the
    # templates are tested on.
    return check_tensors(context) and is_pool_layout(str(attrs.layout)) and \
        str(attrs.out_layout) == str(attrs.layout)


def check_layout_transform(context: PatternCheckContext) -> bool:
    """NCHW <-> NCHW{b}c (and one block to another) without padding: the conversions
    .blocked_layout makes at the edges of the blocked region."""
    root = context.annotated_expr["root"]
    if not check_tensors(context) or root.attrs.pad_value is not None:
        return False
    shapes = (_shape(root.args[0]), _shape(root))
    if not all(s is not None and len(s) in (4, 5) for s in shapes) or \
            int(np.prod(shapes[0])) != int(np.prod(shapes[1])):
        return False
    try:  # the template reads through the inverse map: a map without one stays on the host
        root.attrs.index_map.inverse(shapes[0])
    except Exception:  # noqa: BLE001 - TVM reports a non-bijective map by raising
        return False
    return True


def check_batch_norm(context: PatternCheckContext) -> bool:
    return check_tensors(context) and _bn_ok(context)


def check_layer_norm(context: PatternCheckContext) -> bool:
    attrs = context.annotated_expr["root"].attrs
    # The template always scales and centres (topi.nn.layer_norm has no switches).
    return check_tensors(context) and bool(attrs.center) and bool(attrs.scale)


def check_pad(context: PatternCheckContext) -> bool:
    # Only constant padding has a template.
    return check_tensors(context) and \
        str(context.annotated_expr["root"].attrs.pad_mode) == "constant"


def _all(*checks: Check) -> Check:
    def check(context: PatternCheckContext) -> bool:
        return all(c(context) for c in checks)

    return check


# --------------------------------------------------------------------------- builders
ACTIVATIONS = ("relu", "clip", "leaky_relu", "swish", "gelu", "erf_gelu")


def make_activation(out: DFPattern, kind: Optional[str],
                    annotations: Annotations) -> DFPattern:
    """``out`` followed by the activation ``kind`` (None: no activation)."""
    if kind is None:
        return out
    if kind == "relu":
        return is_op("relax.nn.relu")(out)
    if kind in ("clip", "relu6"):  # relax.nn.relu6 is clip(x, 0, 6)
        return is_op("relax.clip")(out, wildcard(), wildcard())
    if kind == "leaky_relu":
        return is_op("relax.nn.leakyrelu")(out)
    if kind == "swish":
        return is_op("relax.multiply")(out, is_op("relax.sigmoid")(out)) | \
            is_op("relax.nn.silu")(out)
    if kind == "gelu":
        return is_op("relax.nn.gelu")(out)
    if kind == "erf_gelu":
        # Relay's erf GELU: multiply(x * 0.5, add(1, erf(x * 0.707107))).
        half, one, rsqrt2 = is_const(), is_const(), is_const()
        annotations.update(gelu_half=half, gelu_one=one, gelu_rsqrt2=rsqrt2)
        erf = is_op("relax.erf")(is_op("relax.multiply")(out, rsqrt2))
        return is_op("relax.multiply")(is_op("relax.multiply")(out, half),
                                       is_op("relax.add")(one, erf))
    raise ValueError(f"unknown activation {kind!r} (choose from {', '.join(ACTIVATIONS)})")


def _bias(out: DFPattern, annotations: Annotations) -> DFPattern:
    # nn.bias_add imports as add(x, b) on the last axis or add(x, reshape(b, [C, 1, 1])).
    bias = is_op("relax.reshape")(wildcard(), wildcard()) | wildcard()
    annotations["bias"] = bias
    return is_op("relax.add")(out, bias)


def make_conv2d_pattern(with_bias: bool = False, with_bn: bool = False,
                        activation: Optional[str] = None) -> tuple[DFPattern, Annotations]:
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    out = conv
    annotations: Annotations = {"data": data, "weight": weight, "conv": conv}
    if with_bias:
        out = _bias(out, annotations)
    if with_bn:
        out = _batch_norm(out, activation, annotations)
    out = make_activation(out, activation, annotations)
    annotations["root"] = out
    return out, annotations


def make_conv2d_residual_pattern(with_bias: bool = False, with_bn: bool = False,
                                 activation: Optional[str] = None
                                 ) -> tuple[DFPattern, Annotations]:
    """A convolution (+ bias) (+ batch_norm) whose result is added to another tensor
    of its shape (a residual block's shortcut), then (+ activation).

    One partition instead of two: the add and the activation run on the register
    tile in the conv's epilogue, so the conv's result is never written out and
    read back by a separate element-wise pass."""
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    annotations: Annotations = {"data": data, "weight": weight, "conv": conv}
    out = _bias(conv, annotations) if with_bias else conv
    if with_bn:  # the add reads the normalised output [0], whatever follows
        out = is_tuple_get_item(_batch_norm(out, None, annotations), 0)
    residual = wildcard()
    annotations["residual"] = residual
    out = is_op("relax.add")(out, residual) | is_op("relax.add")(residual, out)
    out = make_activation(out, activation, annotations)
    annotations["root"] = out
    return out, annotations


def make_conv2d_chain_pattern(length: int) -> tuple[DFPattern, Annotations]:
    """``conv2d`` followed by ``length`` element-wise ops (see
    :func:`check_conv2d_residual_chain`)."""
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    annotations: Annotations = {"data": data, "weight": weight, "conv": conv}
    out = _elemwise_steps(conv, length, "step", annotations)
    annotations["root"] = out
    return out, annotations


def _elemwise_steps(out: DFPattern, length: int, prefix: str,
                    annotations: Annotations) -> DFPattern:
    """``length`` element-wise ops after ``out``, annotated ``{prefix}0``, ``{prefix}1``..."""
    for i in range(length):
        out = _elemwise_step(out)
        annotations[f"{prefix}{i}"] = out
    return out


def check_conv2d_residual_chain(context: PatternCheckContext) -> bool:
    """A blocked (NCHW{ob}c) conv2d whose element-wise epilogue adds another tensor of
    its own shape (a residual), every step keeping that shape: the conv template
    computes the whole chain per register tile (one pass over the output instead of
    a separate add partition reading it back)."""
    if not check_tensors(context):
        return False
    conv = context.annotated_expr["conv"]
    attrs = conv.attrs
    out = _shape(conv)
    if out is None or len(out) != 5 or not blocked_conv2d_layouts(
            str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout),
            int(attrs.groups)):
        return False
    return _blocked_epilogue(context, "step", conv) is True


def _blocked_epilogue(context: PatternCheckContext, prefix: str, producer) -> Optional[bool]:
    """Check the annotated element-wise steps ``{prefix}{i}`` after ``producer`` (an
    NCHW{b}c tensor): each keeps its shape and reads, besides the previous step, only
    per-channel constants or scalars (a bias, a folded batch_norm's scale and shift, an
    activation's bounds) or whole tensors of that shape (a residual).  None when a
    step breaks that; else whether some step reads a residual."""
    out = _shape(producer)
    residual = False
    previous = producer
    steps = sorted((k for k in context.annotated_expr if k.startswith(prefix)),
                   key=lambda k: int(k[len(prefix):]))
    for key in steps:
        step = context.annotated_expr[key]
        if _shape(step) != out:
            return None
        for operand in step.args:
            # An operand bound inside the match is read through its var.
            value = context.matched_bindings.get(operand, operand) \
                if isinstance(operand, relax.Var) else operand
            if value.same_as(previous) or not isinstance(getattr(operand, "ty", None),
                                                         relax.TensorType):
                continue
            shape = _shape(operand)
            if shape == out and not isinstance(operand, tvm.ir.expr.GenericConst):
                residual = True
            elif shape is None or not _per_blocked_channel(shape, out):
                return None  # a per-channel constant (bias, scale) or a scalar only
        previous = step
    return residual


# A depthwise conv whose result feeds a light 1x1 conv (MobileNet's separable blocks)
# is one partition when the 1x1's weights are at most this size: the schedule
# computes the depthwise output a row at a time, for every channel, right before the
# 1x1 conv of that row reads it from L1 (see templates/conv.py), so that output (the
# largest activations of such models) is never written out and read back.  Heavier
# 1x1 weights would be streamed once per row.
FUSED_POINTWISE_MAX_WEIGHT_BYTES = 256 * 1024
# ``$BMLIB_FUSE_DEPTHWISE=0`` keeps them apart (A/B timing).
FUSE_DEPTHWISE_ENV = "BMLIB_FUSE_DEPTHWISE"


def make_depthwise_pointwise_pattern(first: int, second: int
                                     ) -> tuple[DFPattern, Annotations]:
    """A (depthwise) conv2d, ``first`` element-wise ops, a conv2d reading their result,
    and ``second`` element-wise ops (see :func:`check_depthwise_pointwise`)."""
    data, weight, pointwise_weight = wildcard(), wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    annotations: Annotations = {"data": data, "weight": weight, "conv": conv,
                                "pointwise_weight": pointwise_weight}
    out = _elemwise_steps(conv, first, "dw_step", annotations)
    out = is_op("relax.nn.conv2d")(out, pointwise_weight)
    annotations["pointwise"] = out
    out = _elemwise_steps(out, second, "pw_step", annotations)
    annotations["root"] = out
    return out, annotations


def check_depthwise_pointwise(context: PatternCheckContext) -> bool:
    """A blocked depthwise conv2d (NCHW{b}c in and out), its per-channel epilogue, then a
    blocked 1x1 stride-1 conv2d without padding whose weights are at most
    ``FUSED_POINTWISE_MAX_WEIGHT_BYTES``, and its per-channel epilogue."""
    if not switched_on(FUSE_DEPTHWISE_ENV):
        return False
    if not check_tensors(context):
        return False
    depthwise = context.annotated_expr["conv"]
    pointwise = context.annotated_expr["pointwise"]
    dw_in, dw_out = _shape(context.annotated_expr["data"]), _shape(depthwise)
    pw_out = _shape(pointwise)
    pw_weight = _shape(context.annotated_expr["pointwise_weight"])
    if None in (dw_in, dw_out, pw_out, pw_weight) or len(dw_in) != 5 or len(dw_out) != 5 \
            or len(pw_out) != 5:
        return False
    attrs, pw_attrs = depthwise.attrs, pointwise.attrs
    channels = dw_in[1] * dw_in[4]
    if int(attrs.groups) != channels or dw_out[1] * dw_out[4] != channels or \
            not blocked_conv2d_layouts(str(attrs.data_layout), str(attrs.kernel_layout),
                                       str(attrs.out_layout), int(attrs.groups)):
        return False
    if int(pw_attrs.groups) != 1 or str(pw_attrs.data_layout) != str(attrs.out_layout) or \
            not blocked_conv2d_layouts(str(pw_attrs.data_layout), str(pw_attrs.kernel_layout),
                                       str(pw_attrs.out_layout), 1) or \
            [int(v) for v in pw_attrs.strides] != [1, 1] or \
            any(int(v) for v in pw_attrs.padding) or \
            [int(v) for v in pw_attrs.dilation] != [1, 1] or \
            len(pw_weight) != 6 or pw_weight[2:4] != [1, 1]:
        return False
    itemsize = np.dtype(str(pointwise.ty.dtype)).itemsize
    if int(np.prod(pw_weight)) * itemsize > FUSED_POINTWISE_MAX_WEIGHT_BYTES:
        return False
    # per-channel epilogues only (a residual add is left to the partitions after)
    return _blocked_epilogue(context, "dw_step", depthwise) is False and \
        _blocked_epilogue(context, "pw_step", pointwise) is False


def make_reshape_conv2d_add_bn_relu_pattern() -> tuple[DFPattern, Annotations]:
    """The seed composite: ``relu(bn(reshape(b) + conv2d(x, w))[0])``."""
    bias = wildcard()
    reshape = is_op("relax.reshape")(bias, wildcard())
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    add = is_op("relax.add")(reshape, conv)
    bn = is_op("relax.nn.batch_norm")(add, wildcard(), wildcard(), wildcard(), wildcard())
    out = is_op("relax.nn.relu")(is_tuple_get_item(bn, 0))
    return out, {"bias": reshape, "reshape": reshape, "conv": conv, "add": add, "bn": bn,
                 "root": out}


def make_conv2d_transpose_pattern(activation: Optional[str] = None):
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d_transpose")(data, weight)
    annotations: Annotations = {"data": data, "weight": weight, "conv": conv}
    out = make_activation(conv, activation, annotations)
    annotations["root"] = out
    return out, annotations


def _head_views(tensor: DFPattern) -> DFPattern:
    """``tensor``, or up to three ``permute_dims`` of it or of its ``reshape``: how an
    imported attention splits heads out of ``[seq, hidden]`` and transposes them."""
    base = is_op("relax.reshape")(tensor, wildcard())
    one = is_op("relax.permute_dims")(base) | is_op("relax.permute_dims")(tensor)
    two = is_op("relax.permute_dims")(one)
    return is_op("relax.permute_dims")(two) | two | one | base | tensor


def make_matmul_pattern(transposed_rhs: Optional[bool] = None, with_bias: bool = False,
                        activation: Optional[str] = None,
                        head_views: bool = False) -> tuple[DFPattern, Annotations]:
    """``matmul(lhs, rhs)``; ``transposed_rhs=True`` is the dense form
    ``matmul(x, permute_dims(w))``, ``None`` accepts either; ``head_views`` takes the
    operands' head-splitting views in too (:func:`_head_views`)."""
    if head_views:
        lhs, rhs = _head_views(wildcard()), _head_views(wildcard())
        matmul = is_op("relax.matmul")(lhs, rhs)
        return matmul, {"lhs": lhs, "rhs": rhs, "matmul": matmul, "root": matmul}
    lhs, weight = wildcard(), wildcard()
    transposed = is_op("relax.permute_dims")(weight)
    # A dense weight packed into column panels (rewrite.pack_dense_weight) is read
    # through its view reshape(permute_dims(panels)), lowered inside the partition.
    panels = is_op("relax.reshape")(is_op("relax.permute_dims")(weight), wildcard())
    rhs = {True: transposed | panels, False: weight,
           None: panels | transposed | weight}[transposed_rhs]
    matmul = is_op("relax.matmul")(lhs, rhs)
    annotations: Annotations = {"lhs": lhs, "rhs": rhs, "weight": weight, "matmul": matmul}
    out = _bias(matmul, annotations) if with_bias else matmul
    out = make_activation(out, activation, annotations)
    annotations["root"] = out
    return out, annotations


def make_residual_pattern(with_bias: bool) -> tuple[DFPattern, Annotations]:
    """A dense (+ bias) added to a tensor of its own shape (a residual connection)."""
    out, annotations = make_matmul_pattern(None, with_bias)
    residual = wildcard()
    annotations["residual"] = residual
    root = is_op("relax.add")(out, residual) | is_op("relax.add")(residual, out)
    annotations["root"] = root
    return root, annotations


def make_scaled_matmul_pattern(head_views: bool = False) -> tuple[DFPattern, Annotations]:
    """``matmul(lhs, rhs) * c`` (attention's scaled scores)."""
    out, annotations = make_matmul_pattern(head_views=head_views)
    scale = wildcard()
    annotations["scale"] = scale
    root = is_op("relax.multiply")(out, scale)
    annotations["root"] = root
    return root, annotations


def _batch_norm(data: DFPattern, activation: Optional[str],
                annotations: Annotations) -> DFPattern:
    """``batch_norm(data)``; its normalised output ``[0]`` when an activation follows.

    FuseOpsByPattern only roots matches at calls, so without an activation the
    composite ends at the batch_norm call itself (a tuple, projected outside).
    """
    bn = is_op("relax.nn.batch_norm")(data, wildcard(), wildcard(), wildcard(), wildcard())
    annotations["bn"] = bn
    return bn if activation is None else is_tuple_get_item(bn, 0)


def make_batch_norm_pattern(activation: Optional[str] = None):
    annotations: Annotations = {}
    out = make_activation(_batch_norm(wildcard(), activation, annotations), activation,
                          annotations)
    annotations["root"] = out
    return out, annotations


def make_op_pattern(op_name: str) -> tuple[DFPattern, Annotations]:
    """One call of ``op_name``; trailing non-tensor operands are wildcards."""
    out = is_op(op_name)(wildcard(), varg_default_wildcard=True)
    return out, {"root": out}


def make_unary_pattern(op_name: str) -> tuple[DFPattern, Annotations]:
    return make_op_pattern(op_name)


def make_binary_pattern(op_name: str) -> tuple[DFPattern, Annotations]:
    lhs, rhs = wildcard(), wildcard()
    out = is_op(op_name)(lhs, rhs)
    return out, {"lhs": lhs, "rhs": rhs, "root": out}


def _any_op(names) -> DFPattern:
    pattern = is_op(names[0])
    for name in names[1:]:
        pattern = pattern | is_op(name)
    return pattern


def _elemwise_step(x: DFPattern) -> DFPattern:
    """Any element-wise op applied to ``x`` (as either operand of a binary op)."""
    unary = _any_op(UNARY_OPS)(x, varg_default_wildcard=True)
    binary = _any_op(BINARY_OPS)
    return unary | binary(x, wildcard()) | binary(wildcard(), x)


def make_elemwise_chain_pattern(length: int) -> tuple[DFPattern, Annotations]:
    """``length`` element-wise ops in a row (broadcasting binaries and unaries)."""
    out = wildcard()
    for _ in range(length):
        out = _elemwise_step(out)
    return out, {"root": out}


# --------------------------------------------------------------------------- table
def _entry(name: str, built: tuple[DFPattern, Annotations], check: Check = check_tensors):
    pattern, annotations = built
    return (f"{PREFIX}.{name}", pattern, annotations, check)


def _short(op_name: str) -> str:
    return op_name.rsplit(".", 1)[-1]


def _suffix(*parts: Optional[str]) -> str:
    return "".join(f"_{p}" for p in parts if p)


def bmlib_patterns() -> list[tuple]:
    """The built-in table, lowest priority first (registry order)."""
    table = []
    # Single ops: data movement, reductions, element-wise, then chains of element-wise ops.
    table += [_entry(_short(op), make_op_pattern(op),
                     check_pad if op == "relax.nn.pad" else check_tensors)
              for op in MOVEMENT_OPS + REDUCE_OPS]
    table += [_entry(_short(op), make_unary_pattern(op)) for op in UNARY_OPS + MATH_OPS]
    table += [_entry(_short(op), make_op_pattern(op)) for op in EXTRA_OPS]
    table += [_entry(_short(op), make_op_pattern(op)) for op in SELECTION_OPS]
    table += [_entry(_short(op), make_binary_pattern(op)) for op in BINARY_OPS]
    table += [_entry(f"elemwise_chain{n}", make_elemwise_chain_pattern(n)) for n in (2, 3)]
    # Normalisation and pooling.
    table += [
        _entry("softmax", make_op_pattern("relax.nn.softmax")),
        _entry("log_softmax", make_op_pattern("relax.nn.log_softmax")),
        _entry("layer_norm", make_op_pattern("relax.nn.layer_norm"), check_layer_norm),
        _entry("batch_norm", make_batch_norm_pattern(), check_batch_norm),
        _entry("batch_norm_relu", make_batch_norm_pattern("relu"), check_batch_norm),
        _entry("max_pool2d", make_op_pattern("relax.nn.max_pool2d"), check_pool2d),
        _entry("avg_pool2d", make_op_pattern("relax.nn.avg_pool2d"), check_pool2d),
        _entry("adaptive_avg_pool2d", make_op_pattern("relax.nn.adaptive_avg_pool2d"),
               check_pool2d),
        _entry("layout_transform", make_op_pattern("relax.layout_transform"),
               check_layout_transform),
    ]
    # Matrix products: any matmul, batched, then dense (+ bias) (+ activation).
    table.append(_entry("matmul", make_matmul_pattern(), check_matmul))
    table.append(_entry("batch_matmul", make_matmul_pattern(), check_batch_matmul))
    for act in (None, "relu", "gelu", "erf_gelu"):
        for bias in (False, True):
            check = _all(check_dense, check_erf_gelu)
            # The weight is permute_dims(w), or w.T already folded by weight packing.
            table.append(_entry("dense" + _suffix("bias" if bias else None, act),
                                make_matmul_pattern(None, bias, act), check))
    # Transformer epilogues computed per register tile: a dense (+ bias) joining the
    # residual stream, and attention's scores scaled by a constant (1 / sqrt(d)).
    for bias in (False, True):
        table.append(_entry("dense" + _suffix("bias" if bias else None, "residual"),
                            make_residual_pattern(bias), _all(check_dense, check_residual)))
    table.append(_entry("batch_matmul_scale", make_scaled_matmul_pattern(),
                        _all(check_batch_matmul, check_scale)))
    # Attention's products with the reshape / permute_dims that split the heads
    # (read in place by the matmul schedule instead of copied by partitions of their own).
    table.append(_entry("batch_matmul_heads", make_matmul_pattern(head_views=True),
                        check_batch_matmul))
    table.append(_entry("batch_matmul_heads_scale", make_scaled_matmul_pattern(True),
                        _all(check_batch_matmul, check_scale)))
    # Convolutions (+ bias) (+ batch_norm) (+ activation), grouped and depthwise included.
    for act in (None, "relu", "leaky_relu", "swish", "clip"):
        table.append(_entry("conv2d_transpose" + _suffix(act),
                            make_conv2d_transpose_pattern(act), check_conv2d_transpose))
        for bias in (False, True):
            for bn in (False, True):
                name = "conv2d" + _suffix("bias" if bias else None, "bn" if bn else None, act)
                table.append(_entry(name, make_conv2d_pattern(bias, bn, act), check_conv2d))
    table.append(_entry("reshape_conv2d_add_bn_relu", make_reshape_conv2d_add_bn_relu_pattern(),
                        check_conv2d))
    # Residual blocks: conv (+ bias) (+ bn) + shortcut (+ relu), after the plain forms so
    # they take precedence where the add reads a whole tensor of the conv's shape.
    for act in (None, "relu"):
        for bias in (False, True):
            for bn in (False, True):
                name = "conv2d" + _suffix("bias" if bias else None, "bn" if bn else None,
                                          "add", act)
                table.append(_entry(name, make_conv2d_residual_pattern(bias, bn, act),
                                    check_conv2d_residual))
    # A blocked conv with its residual add in the epilogue (+ bias, scale/shift, activation).
    table += [_entry(f"conv2d_residual_chain{n}", make_conv2d_chain_pattern(n),
                     check_conv2d_residual_chain) for n in (1, 2, 3, 4)]
    # A depthwise conv and the light 1x1 conv after it, computed row by row together.
    table += [_entry(f"depthwise_pointwise{first}_{second}",
                     make_depthwise_pointwise_pattern(first, second),
                     check_depthwise_pointwise)
              for first in (0, 1, 2) for second in (0, 1, 2, 3)]
    # ---- QNN (issue #18): imported integer arithmetic, int8/uint8 with int32 accumulation.
    # Integer tensors never match the float entries above (check_tensors), so the two
    # blocks do not compete; see qnn_patterns for the forms and their check.
    from .qnn_patterns import qnn_patterns

    table += qnn_patterns(_entry)
    return table


_registered = False


def register_bmlib_patterns() -> None:
    """Register the built-in table with TVM's pattern registry (idempotent)."""
    global _registered
    if not _registered:
        register_patterns(bmlib_patterns())
        _registered = True


def entry_name(entry: Any) -> str:
    """The name of a pattern table entry (a ``FusionPattern`` or a tuple)."""
    if isinstance(entry, relax.transform.FusionPattern):
        return str(entry.name)
    return str(entry[0]) if isinstance(entry, (tuple, list)) and entry else str(entry)


def get_bmlib_patterns() -> list:
    """The registered ``bmlib.*`` patterns, highest priority first."""
    register_bmlib_patterns()
    return list(get_patterns_with_prefix(PREFIX))
