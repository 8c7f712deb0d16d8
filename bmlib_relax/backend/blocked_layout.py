"""NCHW → NCHW{b}c between partitions: activations stay channel-blocked.

The conv2d and depthwise templates compute in a channel-blocked layout
(``NCHW[ob]c``, the ``ob`` channels of a block the vectorized axis).  Run on
NCHW tensors, every conv partition packs its input NCHW → NCHW[ib]c and unpacks
its result again: on MobileNet the pack alone was half of a depthwise partition.
ONNX Runtime and OpenVINO run the whole graph blocked; this pass does the same
for the built-in table, in the manner of :mod:`.layout` (NHWC → NCHW):

* every static fp32 or fp16 NCHW ``conv2d`` with a constant weight (groups 1, or
  depthwise with multiplier 1) becomes ``conv2d(data_layout="NCHW{ib}c",
  kernel_layout="OIHW{ib}i{ob}o", out_layout="NCHW{ob}c")`` on the *blocked
  twin* of its input (an input without a twin — the model's input — is read
  as NCHW: the conv template packs it itself, so there is no separate pass);
  ``ib`` is the block its input already has, ``ob`` the block the weight
  packing would choose (:func:`.rewrite.conv2d_blocking`);
* an inference ``batch_norm`` right after such a conv is folded into the
  weights and a per-channel bias; elsewhere (ResNet's pre-activation ones) it
  becomes a per-channel scale and shift on the twin;
* layout-agnostic ops on twins are computed on the twins: element-wise ops
  (per-channel constants re-laid out to ``(1, C/b, 1, 1, b)``), residual adds
  (an operand with another block is converted), max/avg/adaptive pools,
  ``mean`` over H, W and channel concats of whole blocks;
* the NCHW value is materialised with one ``layout_transform`` only where an
  op needs it (reshape, dense, the function's result, an op without a rule).

Symbolic shapes are left alone (the blocked conv rule wants every dim static).
Disable with ``partition_for_bmlib(..., blocked_layout=False)`` or
``BMLIB_BLOCKED_LAYOUT=0``.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import tvm
from tvm import relax

from ..constants import tensor_constant
from ..dims import static_dims
from ..importer.provenance import same_origin
from ..registry import Registry
from .layout import BINARY, UNARY
from .rewrite import (conv2d_blocking, const_array, depthwise_blocking, pack_conv2d_weight,
                      within_template_bounds)
from ..switches import switched_on
from .target import vector_lanes
from .twins import TwinRebuilder, rebuild_functions
from .templates.conv_winograd import winograd_conv2d

BLOCKED_DTYPES = ("float32", "float16")  # what the conv templates compute in
ENV_SWITCH = "BMLIB_BLOCKED_LAYOUT"

Rule = Callable[["_BlockedConverter", relax.Var, relax.Call], bool]
RULES: Registry[Rule] = Registry("blocked layout rule for Relax op")


def enabled_by_default() -> bool:
    """``$BMLIB_BLOCKED_LAYOUT`` (``0``/``off``/``false`` disable) — for A/B timing."""
    return switched_on(ENV_SWITCH)


def blocked_layout_name(block: int) -> str:
    return f"NCHW{block}c"


def _static_shape(expr) -> Optional[list[int]]:
    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None or \
            not hasattr(ty.shape, "values"):
        return None
    return static_dims(ty.shape.values)


def to_blocked(value: relax.Expr, block: int) -> relax.Expr:
    return relax.op.layout_transform(
        value, index_map=lambda n, c, h, w: (n, c // block, h, w, c % block))


def to_nchw(value: relax.Expr, block: int) -> relax.Expr:
    return relax.op.layout_transform(
        value, index_map=lambda n, cb, h, w, c: (n, cb * block + c, h, w))


def blocked_constant(array: np.ndarray, channels: int, block: int) -> Optional[np.ndarray]:
    """A constant broadcasting against an NCHW tensor of ``channels`` channels, re-laid
    out to broadcast against its NCHW{block}c twin; None when it is not per-channel
    (or a scalar)."""
    if array.ndim > 4:
        return None
    full = array.reshape((1,) * (4 - array.ndim) + array.shape)
    if full.shape[0] != 1 or full.shape[2] != 1 or full.shape[3] != 1:
        return None
    if full.shape[1] == 1:
        return full.reshape(1, 1, 1, 1, 1)
    if full.shape[1] != channels:
        return None
    return np.ascontiguousarray(full.reshape(1, channels // block, block, 1, 1)
                                .transpose(0, 1, 3, 4, 2))


class _BlockedConverter(TwinRebuilder):
    """Rebuilds one function binding by binding, keeping blocked twins of NCHW values."""

    def __init__(self, func: relax.Function, target: Any):
        super().__init__(func)
        self.target = target
        self.twin: dict[Any, tuple[relax.Expr, int]] = {}  # old var -> (NCHW{b}c value, b)
        self.bn_twin: dict[Any, tuple[relax.Expr, int]] = {}  # batch_norm var -> its [0]
        self.bindings: dict[Any, relax.Expr] = {}
        self.bound_var: dict[Any, relax.Var] = {}  # bound value -> its var
        self.uses: dict[Any, list] = {}
        self.folded_bn: dict[Any, np.ndarray] = {}  # batch_norm var -> shift (its conv scaled)
        self.feeds_conv: set = set()  # old vars that reach a blockable conv's data

    # -- values ---------------------------------------------------------------
    def materialise(self, var: relax.Var) -> relax.Expr:
        value, block = self.twin[var]
        return self.bb.emit(to_nchw(value, block))

    def blocked(self, expr: relax.Expr) -> Optional[tuple[relax.Expr, int]]:
        return self.twin.get(expr) if isinstance(expr, relax.Var) else None

    def as_block(self, expr: relax.Expr, block: int, channels: int) -> Optional[relax.Expr]:
        """``expr`` broadcasting against an NCHW{block}c twin of ``channels`` channels:
        a twin (converted when its block differs), a per-channel or scalar constant, or
        a full NCHW tensor of the same shape (transformed)."""
        twin = self.blocked(expr)
        if twin is not None:
            value, own = twin
            if own == block:
                return value
            return self.bb.emit(to_blocked(self.original(expr), block))
        array = const_array(expr)
        if array is None and isinstance(expr, relax.Var):
            array = const_array(self.bindings.get(expr))
        if array is not None:
            if array.size == 1 and array.ndim <= 5:
                return tensor_constant(array.reshape(()))
            converted = blocked_constant(array, channels, block)
            return None if converted is None else tensor_constant(converted, str(array.dtype))
        shape = _static_shape(expr)
        if shape is None or len(shape) != 4 or shape[1] != channels:
            return None
        return self.bb.emit(to_blocked(self.substitute(expr), block))

    # -- rebuilding -------------------------------------------------------------
    def prepare(self, bindings: list, result: relax.Expr) -> None:
        self._count_uses(bindings, result)
        self._mark_feeds_conv(bindings)

    def finish(self, func: relax.Function) -> relax.Function:
        # Weights and biases bound to vars were re-laid out into new constants: drop the
        # originals (and anything else left unread) so the build does not keep both.
        return relax.analysis.remove_all_unused(func)

    def _count_uses(self, bindings, result) -> None:
        for binding in bindings:
            self.bindings[binding.var] = binding.value
            self.bound_var[binding.value] = binding.var

            def visit(expr, user=binding.value):
                if isinstance(expr, relax.Var):
                    self.uses.setdefault(expr, []).append(user)

            relax.analysis.post_order_visit(binding.value, visit)

        def visit_result(expr):
            if isinstance(expr, relax.Var):
                self.uses.setdefault(expr, []).append(None)

        relax.analysis.post_order_visit(result, visit_result)

    def _mark_feeds_conv(self, bindings) -> None:
        """The values that flow, through layout-agnostic ops only, into the data of a
        conv this pass can block.  A conv whose input has no twin is blocked only when
        its result is such a value: a lone conv gains nothing from the blocked layout
        (its result would be converted back right away)."""
        for binding in reversed(bindings):
            value = binding.value
            if isinstance(value, relax.Call) and _conv_weight(self, value) is not None:
                self.feeds_conv.add(value.args[0])
            elif binding.var in self.feeds_conv:
                for operand in _agnostic_operands(value):
                    self.feeds_conv.add(operand)

    def foldable_batch_norm(self, var: relax.Var) -> Optional[relax.Call]:
        """The inference batch_norm that alone reads ``var`` (a conv's result) and whose
        normalised output ``[0]`` alone is read, with constant statistics."""
        users = self.uses.get(var, [])
        if len(users) != 1:
            return None
        bn = users[0]
        if not _is_batch_norm(bn) or not bn.args[0].same_as(var) or \
                _batch_norm_params(bn) is None:
            return None
        bn_var = self.bound_var.get(bn)
        if bn_var is None or not self.only_first_field_used(bn_var):
            return None
        return bn

    def only_first_field_used(self, var: relax.Var) -> bool:
        users = self.uses.get(var, [])
        return bool(users) and all(isinstance(u, relax.TupleGetItem) and int(u.index) == 0
                                   for u in users)

    def rebuild_binding(self, var: relax.Var, value: relax.Expr) -> None:
        if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var) \
                and value.tuple_value in self.bn_twin and int(value.index) == 0:
            self.twin[var] = self.bn_twin[value.tuple_value]
            return
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            rule = RULES.get(value.op.name)
            if rule is not None and rule(self, var, value):
                return
        self.plain[var] = self.bb.emit(self.substitute(value))


def _is_batch_norm(expr) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.name == "relax.nn.batch_norm"


def _batch_norm_params(bn: relax.Call) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(scale, shift) per channel of an inference batch_norm over axis 1 with constant
    parameters, computed in float64: float32 only.  In any other dtype v0.19 rounded every
    op of its SimplifyInference form to that dtype (the importer writes those ops out,
    importer/ops/normalization.py), which a float64 fold would not reproduce."""
    attrs = bn.attrs
    shape = _static_shape(bn.args[0])
    if shape is None or len(shape) != 4 or bool(attrs.training) or \
            int(attrs.axis) % 4 != 1 or str(bn.args[0].ty.dtype) != "float32":
        return None
    arrays = [const_array(a) for a in bn.args[1:]]
    if any(a is None for a in arrays):
        return None
    gamma, beta, mean, var = (a.astype("float64") for a in arrays)
    if not bool(attrs.scale):
        gamma = np.ones_like(gamma)
    if not bool(attrs.center):
        beta = np.zeros_like(beta)
    scale = gamma / np.sqrt(var + float(attrs.epsilon))
    return scale, beta - mean * scale


def _agnostic_operands(value) -> list:
    """The tensor operands a layout-agnostic op (one with a rule here) computes on."""
    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value]
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op) or \
            value.op.name not in RULES or value.op.name == "relax.nn.conv2d":
        return []
    if value.op.name in BINARY:
        return list(value.args)
    if value.op.name == "relax.concat":
        parts = value.args[0]
        return list(parts.fields) if isinstance(parts, relax.Tuple) else []
    return [value.args[0]]


def _conv_weight(conv: "_BlockedConverter", call: relax.Call) -> Optional[np.ndarray]:
    """The OIHW weight of a conv2d this pass can block: static fp32 NCHW, a constant
    weight, groups 1 or depthwise with multiplier 1 (what the blocked templates take)."""
    if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.nn.conv2d":
        return None
    attrs = call.attrs
    data, weight = call.args
    array = const_array(weight)
    if array is None and isinstance(weight, relax.Var):
        array = const_array(conv.bindings.get(weight))
    in_shape, out_shape = _static_shape(data), _static_shape(call)
    if array is None or array.ndim != 4 or in_shape is None or out_shape is None or \
            str(array.dtype) not in BLOCKED_DTYPES or str(call.ty.dtype) not in BLOCKED_DTYPES \
            or str(data.ty.dtype) not in BLOCKED_DTYPES or \
            (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != \
            ("NCHW", "OIHW", "NCHW") or not within_template_bounds(data, call):
        return None
    groups = int(attrs.groups)
    if groups == 1 or (groups == in_shape[1] == out_shape[1] and array.shape[1] == 1):
        return array
    return None


# --------------------------------------------------------------------------- rules
@RULES.register("relax.nn.conv2d")
def _conv2d(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    attrs = call.attrs
    data = call.args[0]
    array = _conv_weight(conv, call)
    twin = conv.blocked(data)
    if array is None or (twin is None and var not in conv.feeds_conv):
        return False
    groups = int(attrs.groups)
    channels, out_channels = _static_shape(data)[1], _static_shape(call)[1]
    lanes = vector_lanes(conv.target, str(array.dtype))
    if groups == 1:
        ib, ob = conv2d_blocking(channels, out_channels, lanes)
        if twin is not None:
            ib = twin[1]
    else:
        ib = ob = twin[1] if twin is not None else depthwise_blocking(channels, lanes)
    bn = conv.foldable_batch_norm(var)
    shift = None
    if bn is not None:
        scale, shift = _batch_norm_params(bn)
        array = (array.astype("float64") * scale.reshape(-1, 1, 1, 1)).astype(array.dtype)
    source = twin[0] if twin is not None else conv.substitute(data)
    data_layout = blocked_layout_name(ib) if twin is not None else "NCHW"
    # A 3x3 stride-1 conv where Winograd wins takes its transformed weight (HWOI{ob}o)
    # and reads and writes the same blocked activations (templates/conv_winograd.py).
    blocked = winograd_conv2d(source, array, attrs, _static_shape(data), str(data.ty.dtype),
                              _static_shape(call), lanes, data_layout, ob) \
        if groups == 1 else None
    if blocked is None:
        packed = pack_conv2d_weight(array, 1 if groups > 1 else ib, ob)
        blocked = relax.op.nn.conv2d(
            source, tensor_constant(packed), strides=attrs.strides, padding=attrs.padding,
            dilation=attrs.dilation, groups=groups, data_layout=data_layout,
            kernel_layout=f"OIHW{1 if groups > 1 else ib}i{ob}o",
            out_layout=blocked_layout_name(ob), out_dtype=attrs.out_dtype)
    result = conv.bb.emit(same_origin(blocked, call))
    conv.twin[var] = (result, ob)
    conv.converted += 1
    if bn is not None:
        conv.folded_bn[conv.bound_var[bn]] = shift
    return True


@RULES.register("relax.nn.batch_norm")
def _batch_norm(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    twin = conv.blocked(call.args[0])
    if twin is None or not conv.only_first_field_used(var):
        return False
    value, block = twin
    dtype = str(call.args[0].ty.dtype)
    channels = _static_shape(call.args[0])[1]
    if var in conv.folded_bn:
        shift = conv.folded_bn[var]
        out = relax.op.add(value, relax.const(
            blocked_constant(shift.astype(dtype).reshape(1, -1, 1, 1), channels, block)))
    else:
        params = _batch_norm_params(call)
        if params is None:
            return False
        scale, shift = (blocked_constant(p.astype(dtype).reshape(1, -1, 1, 1), channels, block)
                        for p in params)
        scaled = conv.bb.emit(relax.op.multiply(value, relax.const(scale)))
        out = relax.op.add(scaled, relax.const(shift))
    conv.bn_twin[var] = (conv.bb.emit(out), block)
    return True


def _unary(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    twin = conv.blocked(call.args[0])
    if twin is None:
        return False
    new = relax.Call(call.op, [twin[0], *map(conv.substitute, call.args[1:])], call.attrs,
                     call.ty_args)
    conv.twin[var] = (conv.bb.emit(new), twin[1])
    return True


def _binary(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    lhs, rhs = call.args
    twins = [conv.blocked(lhs), conv.blocked(rhs)]
    out_shape = _static_shape(call)
    if all(t is None for t in twins) or out_shape is None or len(out_shape) != 4:
        return False
    block = next(t for t in twins if t is not None)[1]
    channels = out_shape[1]
    new_lhs = conv.as_block(lhs, block, channels)
    new_rhs = conv.as_block(rhs, block, channels) if new_lhs is not None else None
    if new_lhs is None or new_rhs is None:
        return False
    conv.twin[var] = (conv.bb.emit(relax.Call(call.op, [new_lhs, new_rhs], call.attrs,
                                              call.ty_args)), block)
    return True


for _name in UNARY:
    RULES.register(_name)(_unary)
for _name in BINARY:
    RULES.register(_name)(_binary)


def _nchw_pool_input_twin(conv: _BlockedConverter, call: relax.Call):
    """The blocked twin ``(value, block)`` of an NCHW pool's input, or None (no twin,
    or a pool in another layout: left as it is)."""
    attrs = call.attrs
    if str(attrs.layout) != "NCHW" or str(attrs.out_layout) != "NCHW":
        return None
    return conv.blocked(call.args[0])


def _pool(make: Callable[..., relax.Expr]) -> Rule:
    def rule(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
        attrs = call.attrs
        twin = _nchw_pool_input_twin(conv, call)
        if twin is None:
            return False
        layout = blocked_layout_name(twin[1])
        new = make(twin[0], pool_size=attrs.pool_size, strides=attrs.strides,
                   padding=attrs.padding, dilation=attrs.dilation,
                   ceil_mode=bool(attrs.ceil_mode),
                   count_include_pad=bool(attrs.count_include_pad), layout=layout)
        conv.twin[var] = (conv.bb.emit(new), twin[1])
        return True

    return rule


RULES.register("relax.nn.max_pool2d")(_pool(relax.op.nn.max_pool2d))
RULES.register("relax.nn.avg_pool2d")(_pool(relax.op.nn.avg_pool2d))


@RULES.register("relax.nn.adaptive_avg_pool2d")
def _adaptive_avg_pool2d(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    attrs = call.attrs
    twin = _nchw_pool_input_twin(conv, call)
    if twin is None:
        return False
    layout = blocked_layout_name(twin[1])
    size = None if attrs.output_size is None else [int(s) for s in attrs.output_size]
    new = relax.op.nn.adaptive_avg_pool2d(twin[0], size, layout=layout, out_layout=layout)
    conv.twin[var] = (conv.bb.emit(new), twin[1])
    return True


@RULES.register("relax.mean")
def _mean(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    """``mean`` over H and W: on the twin (keepdims: the result is a twin too)."""
    twin = conv.blocked(call.args[0])
    if twin is None or call.attrs.axis is None or \
            sorted(int(a) % 4 for a in call.attrs.axis) != [2, 3]:
        return False
    value, block = twin
    if bool(call.attrs.keepdims):
        conv.twin[var] = (conv.bb.emit(relax.op.mean(value, [2, 3], keepdims=True)), block)
        return True
    reduced = conv.bb.emit(relax.op.mean(value, [2, 3], keepdims=False))  # (N, C/b, b)
    shape = _static_shape(call)
    conv.plain[var] = conv.bb.emit(relax.op.reshape(reduced, shape))
    return True


@RULES.register("relax.concat")
def _concat(conv: _BlockedConverter, var: relax.Var, call: relax.Call) -> bool:
    """A channel concat (fire modules, inception) of blocked tensors: a concat of the
    channel-block axis, when every part's channels are whole blocks."""
    parts = call.args[0]
    out_shape = _static_shape(call)
    if not isinstance(parts, relax.Tuple) or out_shape is None or len(out_shape) != 4 or \
            call.attrs.axis is None or int(call.attrs.axis) % 4 != 1:
        return False
    twins = [conv.blocked(p) for p in parts.fields]
    if all(t is None for t in twins):
        return False
    block = next(t for t in twins if t is not None)[1]
    shapes = [_static_shape(p) for p in parts.fields]
    if any(s is None or len(s) != 4 or s[1] % block for s in shapes):
        return False
    blocked = [conv.as_block(p, block, s[1]) for p, s in zip(parts.fields, shapes)]
    if any(b is None for b in blocked):
        return False
    conv.twin[var] = (conv.bb.emit(relax.op.concat(blocked, axis=1)), block)
    return True


# --------------------------------------------------------------------------- driver
def has_blockable_conv(func: relax.Function) -> bool:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d" \
                and str(expr.attrs.data_layout) == "NCHW" and \
                str(expr.attrs.kernel_layout) == "OIHW":
            found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


def convert_to_blocked(mod: tvm.IRModule, target: Any = None) -> tvm.IRModule:
    """Run the static fp32 NCHW convolutions of every function (and the layout-agnostic
    ops between them) in NCHW{b}c, converting only at the edges."""
    return rebuild_functions(mod, has_blockable_conv,
                             lambda func: _BlockedConverter(func, target))
