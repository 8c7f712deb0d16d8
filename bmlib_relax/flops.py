"""FLOP counters, one per Relax op, for the offload report.

A multiply-add counts as 2 FLOPs.  Element-wise ops count 1 per output
element, reductions and pooling 1 per element read.  Ops without a counter
(data movement, casts) count 0.

With symbolic dims (a free batch ``n``, a sequence length ``d0``) a count is a
PrimExpr of them (``4096 * d0 + 128 * d0 * d0``): :func:`evaluate_flops` gives
its value for concrete dims, :func:`flops_text` its printed form.
"""
from __future__ import annotations

import ast
import math
import operator
import re
from typing import Any, Callable, Mapping, Sequence, Union

import tvm
from tvm import relax
from tvm.sym.analyzer import Analyzer

from .registry import Registry

Flops = Union[int, "tvm.tirx.PrimExpr"]  # a PrimExpr of the symbolic dims when there are any
FlopCounter = Callable[[relax.Call], Flops]

COUNTERS: Registry[FlopCounter] = Registry("FLOP counter for Relax op")


def register_flops(*op_names: str) -> Callable[[FlopCounter], FlopCounter]:
    """Register ``fn(call) -> int`` as the FLOP counter of each Relax op."""
    return COUNTERS.register(*op_names)


def count_flops(call: relax.Call) -> Flops:
    """FLOPs of one Relax op call: an int, or a PrimExpr of its symbolic dims (0 for ops
    without a counter or of unknown rank)."""
    counter = COUNTERS.get(getattr(call.op, "name", ""))
    if counter is None:
        return 0
    try:
        return simplify_flops(counter(call))
    except (TypeError, ValueError, AttributeError):  # unknown rank: nothing to count
        return 0


def simplify_flops(value: Flops) -> Flops:
    """An int for a static count, else the simplified int64 PrimExpr."""
    if isinstance(value, int):
        return value
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    if str(value.ty) != "int64":
        value = value.astype("int64")
    value = Analyzer().simplify(value)
    return int(value.value) if isinstance(value, tvm.tirx.IntImm) else value


def is_symbolic(value: Flops) -> bool:
    return not isinstance(simplify_flops(value), int)


def flops_vars(value: Flops) -> list[str]:
    """Names of the symbolic dims a count depends on, sorted."""
    if not is_symbolic(value):
        return []
    return sorted({str(v) for v in tvm.tirx.analysis.undefined_vars(simplify_flops(value))})


def flops_text(value: Flops) -> str:
    """A count as text: ``"1024"`` or ``"d0*4096 + d0*d0*128"``."""
    value = simplify_flops(value)
    return str(value) if isinstance(value, int) else \
        re.sub(r"T\.int64\((-?\d+)\)", r"\1", str(value))


def substitute_dims(value: Flops, mapping: Sequence[tuple[Any, Any]]) -> Flops:
    """``value`` with each ``(var, expr)`` of ``mapping`` substituted (a partition's
    own symbolic dims replaced by those of its call site in ``main``)."""
    if not is_symbolic(value) or not mapping:
        return simplify_flops(value)
    analyzer = Analyzer()
    for var, expr in mapping:
        expr = expr if str(expr.ty) == str(var.ty) else expr.astype(str(var.ty))
        analyzer.bind(var, expr)
    return simplify_flops(analyzer.simplify(simplify_flops(value)))


def evaluate_flops(value: Flops, dims: Mapping[str, int]) -> int:
    """The count for concrete values of its symbolic dims (by name); a ``KeyError``
    names a dim ``dims`` does not give."""
    value = simplify_flops(value)
    if isinstance(value, int):
        return value
    analyzer = Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(value):
        if str(var) not in dims:
            raise KeyError(str(var))
        analyzer.bind(var, tvm.tirx.const(int(dims[str(var)]), var.ty))
    result = analyzer.simplify(value)
    return int(result.value)


def evaluate_flops_text(text: str, dims: Mapping[str, int]) -> int:
    """A count written by :func:`flops_text` (``"d0 * 8640 + d0 * d0 * 261"``, as an
    artifact's metadata stores it) for concrete dims: integers, dim names, ``+ - *
    //`` and parentheses only (anything else is a ``ValueError``; nothing is executed)."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and \
                not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise KeyError(node.id)
            return int(dims[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"not a FLOP formula: {text!r}")

    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"not a FLOP formula: {text!r}") from None
    return walk(tree)


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv}


def per_unit(value: Flops) -> int:
    """The count with every symbolic dim 1: per sample (per token) for a model linear in
    its free dims; the integer the report's ``flops_*`` fields hold."""
    return evaluate_flops(value, {name: 1 for name in flops_vars(value)})


def has_counter(op_name: str) -> bool:
    return op_name in COUNTERS


def _shape(ty) -> list:
    """Static dims as ints, symbolic ones as their (int64) PrimExprs."""
    if isinstance(ty, relax.TupleType):
        ty = ty.fields[0]
    return [int(d.value) if isinstance(d, tvm.tirx.IntImm) else d for d in ty.shape.values]


def _elements(ty) -> Flops:
    return math.prod(_shape(ty))


def _per_output_element(per: int) -> FlopCounter:
    return lambda call: per * _elements(call.ty)


def _per_input_element(call: relax.Call) -> int:
    return _elements(call.args[0].ty)


# --------------------------------------------------------------------------- counters
def layout_dims(shape: list[int], layout: str) -> dict[str, int]:
    """Each primal axis's full extent in a (possibly blocked) layout string:
    ``OIHW16i32o`` with shape ``[O/32, I/16, KH, KW, 16, 32]`` gives O and I whole."""
    dims: dict[str, int] = {}
    axis = 0
    index = 0
    while index < len(layout):
        digits = ""
        while layout[index].isdigit():
            digits += layout[index]
            index += 1
        letter = layout[index]
        index += 1
        extent = shape[axis]
        axis += 1
        key = letter.upper()
        dims[key] = dims.get(key, 1) * extent
    return dims


def _conv_flops(call, default_data: str, default_kernel: str, transposed: bool) -> int:
    attrs = call.attrs
    out = layout_dims(_shape(call.ty), str(getattr(attrs, "out_layout", "") or
                                           getattr(attrs, "data_layout", default_data)))
    data = layout_dims(_shape(call.args[0].ty), str(getattr(attrs, "data_layout", default_data)))
    weight = layout_dims(_shape(call.args[1].ty),
                         str(getattr(attrs, "kernel_layout", default_kernel)))
    spatial = [axis for axis in "DHW" if axis in weight]
    window = math.prod(weight[axis] for axis in spatial)
    if re.fullmatch(r"HWOI\d+o", str(getattr(attrs, "kernel_layout", ""))):
        window = 9  # a Winograd-transformed 3x3 weight (backend/templates/conv_winograd.py)
    groups = int(getattr(attrs, "groups", 1))
    if transposed:
        # Every input element is scattered onto (O / groups) * window outputs.
        outputs_per_input = out["C"] // groups
        return 2 * math.prod(data[a] for a in "NC" + "".join(spatial)) * outputs_per_input * window
    # 2 * N * K * spatial outputs * (C / groups) * window
    return 2 * math.prod(out[a] for a in "NC" + "".join(spatial)) * (data["C"] // groups) * window


@register_flops("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d")
def _conv(call):
    default = {"relax.nn.conv1d": ("NCW", "OIW"), "relax.nn.conv3d": ("NCDHW", "OIDHW")}
    data, kernel = default.get(call.op.name, ("NCHW", "OIHW"))
    return _conv_flops(call, data, kernel, transposed=False)


@register_flops("relax.nn.conv2d_transpose", "relax.nn.conv1d_transpose",
                "relax.nn.conv3d_transpose")
def _conv_transpose(call):
    data, kernel = {"relax.nn.conv1d_transpose": ("NCW", "IOW"),
                    "relax.nn.conv3d_transpose": ("NCDHW", "IODHW")}.get(call.op.name,
                                                                      ("NCHW", "IOHW"))
    return _conv_flops(call, data, kernel, transposed=True)


@register_flops("relax.matmul")
def _matmul(call):
    # 2 * M * N * K per batch: every output element is a length-K dot product.
    return 2 * _elements(call.ty) * _shape(call.args[0].ty)[-1]


register_flops("relax.nn.batch_norm")(_per_output_element(2))  # scale and shift (inference)
register_flops("relax.nn.layer_norm")(_per_output_element(5))  # mean, variance, normalise, affine
register_flops("relax.nn.softmax", "relax.nn.log_softmax")(_per_output_element(5))


@register_flops("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.max_pool1d",
                "relax.nn.avg_pool1d", "relax.nn.max_pool3d", "relax.nn.avg_pool3d")
def _pool(call):
    # One read per window element of every output element, whatever the layout.
    return _elements(call.ty) * math.prod(int(v) for v in call.attrs.pool_size)


register_flops("relax.cumsum", "relax.cumprod")(_per_output_element(1))  # one add/mul each
register_flops("relax.nn.adaptive_avg_pool2d", "relax.mean", "relax.sum", "relax.max",
               "relax.min", "relax.argmax", "relax.argmin")(_per_input_element)

register_flops(
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum", "relax.power", "relax.nn.relu", "relax.nn.leakyrelu", "relax.nn.gelu",
    "relax.nn.silu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.exp", "relax.log",
    "relax.sqrt", "relax.rsqrt", "relax.negative", "relax.abs", "relax.erf",
)(_per_output_element(1))
