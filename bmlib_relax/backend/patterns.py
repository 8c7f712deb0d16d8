"""The bmlib pattern table: Relax DPL composites registered under ``bmlib.``.

Each entry is ``(name, pattern, annotations, check)`` as TVM's pattern registry
expects.  Builders take flags (``make_conv2d_pattern(with_bn=True,
activation="relax.nn.relu")``) and return the pattern plus its annotation map;
the annotation names are the contract between pattern, check and template.
Checks are pure predicates that accept exactly what the templates support.
Later entries take priority, so larger fusions are listed after their parts.
"""
from __future__ import annotations

from typing import Callable, Optional

from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.dpl import DFPattern, is_op, is_tuple_get_item, wildcard
from tvm.relax.transform import PatternCheckContext

PREFIX = "bmlib"
SUPPORTED_DTYPES = ("float32", "float16")

Annotations = dict[str, DFPattern]


# --------------------------------------------------------------------------- checks
def _static_tensor(expr) -> bool:
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return False
    return all(hasattr(d, "value") for d in shape.values)


def check_tensors(context: PatternCheckContext) -> bool:
    """Every annotated tensor is float32/float16 with a static shape."""
    for expr in context.annotated_expr.values():
        ty = getattr(expr, "ty", None)
        if ty is None or not hasattr(ty, "dtype"):
            continue  # tuples and shape arguments
        # The templates are written for floating point; integer math stays on the host.
        if str(ty.dtype) not in SUPPORTED_DTYPES:
            return False
        # Templates are specialised per shape at compile time.
        if not _static_tensor(expr):
            return False
    return True


def check_conv2d(context: PatternCheckContext) -> bool:
    if not check_tensors(context):
        return False
    conv = context.annotated_expr["conv"]
    attrs = conv.attrs
    # The conv2d template is written for NCHW data and OIHW weights.
    return str(attrs.data_layout) == "NCHW" and str(attrs.kernel_layout) == "OIHW" \
        and str(attrs.out_layout) == "NCHW"


# --------------------------------------------------------------------------- builders
def make_conv2d_pattern(with_bn: bool = False,
                        activation: Optional[str] = None) -> tuple[DFPattern, Annotations]:
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    out = conv
    annotations: Annotations = {"data": data, "weight": weight, "conv": conv}
    if with_bn:
        bn = is_op("relax.nn.batch_norm")(out, wildcard(), wildcard(), wildcard(), wildcard())
        out = is_tuple_get_item(bn, 0)
        annotations["bn"] = bn
    if activation is not None:
        out = is_op(activation)(out)
    annotations["root"] = out
    return out, annotations


def make_reshape_conv2d_add_bn_relu_pattern() -> tuple[DFPattern, Annotations]:
    """The seed composite: ``relu(bn(reshape(b) + conv2d(x, w))[0])``."""
    bias = wildcard()
    reshape = is_op("relax.reshape")(bias, wildcard())
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    add = is_op("relax.add")(reshape, conv)
    bn = is_op("relax.nn.batch_norm")(add, wildcard(), wildcard(), wildcard(), wildcard())
    out = is_op("relax.nn.relu")(is_tuple_get_item(bn, 0))
    return out, {"bias": bias, "reshape": reshape, "conv": conv, "add": add, "bn": bn,
                 "root": out}


def make_unary_pattern(op_name: str) -> tuple[DFPattern, Annotations]:
    data = wildcard()
    out = is_op(op_name)(data)
    return out, {"data": data, "root": out}


def make_binary_pattern(op_name: str) -> tuple[DFPattern, Annotations]:
    lhs, rhs = wildcard(), wildcard()
    out = is_op(op_name)(lhs, rhs)
    return out, {"lhs": lhs, "rhs": rhs, "root": out}


# --------------------------------------------------------------------------- table
def _entry(name: str, built: tuple[DFPattern, Annotations],
           check: Callable[[PatternCheckContext], bool] = check_tensors):
    pattern, annotations = built
    return (f"{PREFIX}.{name}", pattern, annotations, check)


def bmlib_patterns() -> list[tuple]:
    """The built-in table, lowest priority first (registry order)."""
    table = [
        _entry("relu", make_unary_pattern("relax.nn.relu")),
        _entry("add", make_binary_pattern("relax.add")),
        _entry("conv2d", make_conv2d_pattern(), check_conv2d),
        _entry("conv2d_relu", make_conv2d_pattern(activation="relax.nn.relu"), check_conv2d),
        _entry("conv2d_bn", make_conv2d_pattern(with_bn=True), check_conv2d),
        _entry("conv2d_bn_relu", make_conv2d_pattern(with_bn=True, activation="relax.nn.relu"),
               check_conv2d),
        _entry("reshape_conv2d_add_bn_relu", make_reshape_conv2d_add_bn_relu_pattern(),
               check_conv2d),
    ]
    return table


_registered = False


def register_bmlib_patterns() -> None:
    """Register the built-in table with TVM's pattern registry (idempotent)."""
    global _registered
    if not _registered:
        register_patterns(bmlib_patterns())
        _registered = True


def get_bmlib_patterns() -> list:
    """The registered ``bmlib.*`` patterns, highest priority first."""
    register_bmlib_patterns()
    return list(get_patterns_with_prefix(PREFIX))
