"""NHWC → NCHW at partition time: Relay's ``ConvertLayout`` for the bmlib templates.

TensorFlow and TFLite imports are NHWC with HWIO weights; the bmlib conv2d and
pooling templates are NCHW (their weights re-laid out once, see
:mod:`.rewrite`).  Relay users ran ``ConvertLayout({"nn.conv2d": ["NCHW",
"default"]})``; this is its Relax counterpart for the built-in table:

* every NHWC ``conv2d`` runs on an NCHW *twin* of its input, with its weight
  permuted to OIHW (a constant weight: folded at compile time by
  :mod:`.fold`);
* layout-agnostic ops whose inputs have twins (element-wise ops, per-channel
  broadcasts, ``pad``, pools, reductions over named axes) are computed on the
  twins too, so a conv → batch-norm → relu → conv chain never leaves NCHW;
* the NHWC value is materialised (one ``permute_dims``) only where something
  still needs it — an op that is not layout-agnostic, or the function's result.

Transposes between neighbours therefore cancel by construction.  TVM's own
``relax.transform.ConvertLayout`` stops at per-channel constants that broadcast
over the last axis (the batch-norm scale and shift of every TF dump) and
leaves a transpose pair around each convolution, which is why this pass exists.
"""
from __future__ import annotations

from typing import Callable, Optional

import tvm
from tvm import relax

from ..constants import tensor_constant
from ..dims import all_static
from ..registry import Registry
from .rewrite import const_array
from .twins import TwinRebuilder, rebuild_functions

TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)

UNARY = ("relax.nn.relu", "relax.sqrt", "relax.rsqrt", "relax.negative", "relax.exp",
         "relax.log", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.abs", "relax.erf",
         "relax.nn.gelu", "relax.nn.silu", "relax.nn.leakyrelu", "relax.astype", "relax.square",
         "relax.floor", "relax.ceil", "relax.round", "relax.trunc", "relax.sign",
         "relax.zeros_like")
# Element-wise with NumPy broadcasting, so the same on NCHW twins: the arithmetic above,
# the integer shifts and the comparisons of a requantize epilogue (the importer's
# qnn.requantize: ``right_shift(x * m + where(x >= 0, r, r - 1), s)``), whose NHWC chain
# then stays in NCHW up to its clip/cast, one ``bmlib.qnn_conv2d_requantize`` as for NCHW.
BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
          "relax.minimum", "relax.power", "relax.left_shift", "relax.right_shift",
          "relax.greater_equal", "relax.greater", "relax.less", "relax.less_equal",
          "relax.equal", "relax.not_equal")
TERNARY = ("relax.where",)

# op name -> fn(converter, call, new_args) -> (value, is_nchw) or None (not convertible)
Rule = Callable[["_LayoutConverter", relax.Call], Optional[tuple[relax.Expr, bool]]]
RULES: Registry[Rule] = Registry("NHWC layout rule for Relax op")


def _rank(expr: relax.Expr) -> Optional[int]:
    ty = expr.ty
    return int(ty.ndim) if isinstance(ty, relax.TensorType) and int(ty.ndim) >= 0 else None


class _LayoutConverter(TwinRebuilder):
    """Rebuilds one function binding by binding, keeping NCHW twins of NHWC values."""

    def __init__(self, func: relax.Function):
        super().__init__(func)
        self.wanted: set = set()  # old vars whose NCHW value an NHWC conv will read
        self.current: Optional[relax.Var] = None  # the binding being rebuilt

    # -- values ---------------------------------------------------------------
    def materialise(self, var: relax.Var) -> relax.Expr:
        return self.bb.emit(relax.op.permute_dims(self.twin[var], TO_NHWC))

    def nchw(self, expr: relax.Expr) -> Optional[relax.Expr]:
        """The NCHW twin of a 4-D NHWC operand, if it has one."""
        return self.twin.get(expr) if isinstance(expr, relax.Var) else None

    def input_nchw(self, expr: relax.Expr) -> Optional[relax.Expr]:
        """The NCHW twin of a layout-agnostic op's input; an input without one is
        transposed here when the op's result is on its way into an NHWC conv (a
        ``pad`` of the model's input), so the transpose happens once, first."""
        twin = self.nchw(expr)
        if twin is None and self.current in self.wanted and _rank(expr) == 4:
            twin = self.as_nchw(expr)
        return twin

    def as_nchw(self, expr: relax.Expr) -> Optional[relax.Expr]:
        """``expr`` as an NCHW value: its twin, or a permuted (folded, if constant) copy of an
        operand of rank <= 4 that broadcasts against an NHWC tensor."""
        twin = self.nchw(expr)
        if twin is not None:
            return twin
        rank = _rank(expr)
        if rank is None or rank > 4:
            return None
        array = const_array(expr)
        if array is not None:
            return tensor_constant(
                array.reshape((1,) * (4 - rank) + array.shape).transpose(TO_NCHW))
        if rank < 4 and not all_static(expr.ty.shape.values):
            return None  # a symbolic operand of lower rank: left in NHWC
        value = self.substitute(expr)
        if rank < 4:
            shape = [1] * (4 - rank) + [int(d) for d in expr.ty.shape.values]
            value = self.bb.emit(relax.op.reshape(value, shape))
        return self.bb.emit(relax.op.permute_dims(value, TO_NCHW))

    # -- rebuilding -------------------------------------------------------------
    def prepare(self, bindings: list, result: relax.Expr) -> None:
        self._mark_wanted(bindings)

    def _mark_wanted(self, bindings: list) -> None:
        for binding in reversed(bindings):
            value = binding.value
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                continue
            name = value.op.name
            if name == "relax.nn.conv2d" and str(value.attrs.data_layout) == "NHWC":
                self.wanted.add(value.args[0])
            elif binding.var in self.wanted and (name in UNARY or name == "relax.nn.pad"):
                self.wanted.add(value.args[0])

    def rebuild_binding(self, var: relax.Var, value: relax.Expr) -> None:
        self.current = var
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            rule = RULES.get(value.op.name)
            converted = rule(self, value) if rule is not None else None
            if converted is not None:
                new, is_nchw = converted
                emitted = self.bb.emit(new)
                (self.twin if is_nchw else self.plain)[var] = emitted
                return
        self.plain[var] = self.bb.emit(self.substitute(value))


def _layouts(call: relax.Call, data: str, kernel: str, out: Optional[str]) -> bool:
    attrs = call.attrs
    return str(attrs.data_layout) == data and str(attrs.kernel_layout) == kernel and \
        str(attrs.out_layout) == (out or data)


def _permutation(layout: str, target: str) -> list[int]:
    return [layout.index(axis) for axis in target]


@RULES.register("relax.nn.conv2d")
def _conv2d(conv: _LayoutConverter, call: relax.Call):
    attrs = call.attrs
    kernel = str(attrs.kernel_layout)
    if str(attrs.data_layout) != "NHWC" or str(attrs.out_layout) != "NHWC" or \
            sorted(kernel) != sorted("OIHW"):
        return None
    data = conv.as_nchw(call.args[0])
    weight = call.args[1]
    array = const_array(weight)
    perm = _permutation(kernel, "OIHW")
    weight = tensor_constant(array.transpose(perm)) \
        if array is not None \
        else conv.bb.emit(relax.op.permute_dims(conv.substitute(weight), perm))
    conv.converted += 1
    return relax.op.nn.conv2d(data, weight, strides=attrs.strides, padding=attrs.padding,
                              dilation=attrs.dilation, groups=int(attrs.groups),
                              data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
                              out_dtype=attrs.out_dtype), True


def _unary(conv: _LayoutConverter, call: relax.Call):
    twin = conv.input_nchw(call.args[0])
    if twin is None:
        return None
    return relax.Call(call.op, [twin, *map(conv.substitute, call.args[1:])], call.attrs,
                      call.ty_args), True


def _binary(conv: _LayoutConverter, call: relax.Call):
    lhs, rhs = call.args
    if conv.nchw(lhs) is None and conv.nchw(rhs) is None:
        return None
    if _rank(lhs) != 4 and _rank(rhs) != 4:
        return None
    new_lhs, new_rhs = conv.as_nchw(lhs), conv.as_nchw(rhs)
    if new_lhs is None or new_rhs is None:
        return None
    return relax.Call(call.op, [new_lhs, new_rhs], call.attrs, call.ty_args), True


def _ternary(conv: _LayoutConverter, call: relax.Call):
    """``where(cond, a, b)``: broadcast like a binary op, over three operands."""
    args = list(call.args)
    if all(conv.nchw(a) is None for a in args) or all(_rank(a) != 4 for a in args):
        return None
    converted = [conv.as_nchw(a) for a in args]
    if any(a is None for a in converted):
        return None
    return relax.Call(call.op, converted, call.attrs, call.ty_args), True


for _name in UNARY:
    RULES.register(_name)(_unary)
for _name in BINARY:
    RULES.register(_name)(_binary)
for _name in TERNARY:
    RULES.register(_name)(_ternary)


@RULES.register("relax.nn.pad")
def _pad(conv: _LayoutConverter, call: relax.Call):
    twin = conv.input_nchw(call.args[0])
    if twin is None:
        return None
    widths = [int(v) for v in call.attrs.pad_width]
    pairs = [widths[2 * i:2 * i + 2] for i in range(4)]
    reordered = [v for axis in TO_NCHW for v in pairs[axis]]
    return relax.op.nn.pad(twin, reordered, pad_mode=str(call.attrs.pad_mode),
                           pad_value=float(call.attrs.pad_value)), True


def _pool(make: Callable[..., relax.Expr]) -> Rule:
    def rule(conv: _LayoutConverter, call: relax.Call):
        attrs = call.attrs
        twin = conv.nchw(call.args[0])
        if twin is None or str(attrs.layout) != "NHWC" or str(attrs.out_layout) != "NHWC":
            return None
        return make(twin, pool_size=attrs.pool_size, strides=attrs.strides,
                    padding=attrs.padding, dilation=attrs.dilation,
                    ceil_mode=bool(attrs.ceil_mode),
                    count_include_pad=bool(attrs.count_include_pad), layout="NCHW"), True

    return rule


RULES.register("relax.nn.max_pool2d")(_pool(relax.op.nn.max_pool2d))
RULES.register("relax.nn.avg_pool2d")(_pool(relax.op.nn.avg_pool2d))


def _reduction(make: Callable[..., relax.Expr]) -> Rule:
    def rule(conv: _LayoutConverter, call: relax.Call):
        twin = conv.nchw(call.args[0])
        if twin is None or call.attrs.axis is None:
            return None
        axes = sorted(int(a) % 4 for a in call.attrs.axis)
        keepdims = bool(call.attrs.keepdims)
        kept = [a for a in range(4) if a not in axes]
        new_axes = sorted(TO_NCHW.index(a) for a in axes)
        if keepdims:
            return make(twin, new_axes, keepdims=True), True
        # Without keepdims the result is in the original layout when the kept axes keep
        # their order (N, C after reducing H, W), else this op stays as it was.
        kept_nchw = [axis for axis in TO_NCHW if axis in kept]
        if kept_nchw != kept:
            return None
        return make(twin, new_axes, keepdims=False), False

    return rule


for _name, _make in {"relax.mean": relax.op.mean, "relax.sum": relax.op.sum,
                     "relax.max": relax.op.max, "relax.min": relax.op.min}.items():
    RULES.register(_name)(_reduction(_make))


def has_nhwc_conv(func: relax.Function) -> bool:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d" \
                and str(expr.attrs.data_layout) == "NHWC":
            found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


def convert_nhwc_to_nchw(mod: tvm.IRModule) -> tvm.IRModule:
    """Run the NHWC convolutions (and what follows them) of every function in NCHW."""
    return rebuild_functions(mod, has_nhwc_conv, _LayoutConverter)
