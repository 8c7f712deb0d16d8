"""bmlib composites for imported QNN arithmetic (int8/uint8 with int32 accumulation).

The importer writes each ``qnn.*`` op as Relay's canonicalized integer ops
(:mod:`bmlib_relax.importer.ops.qnn`); these patterns match those exact forms,
so a quantized convolution or dense *and* its requantize epilogue land in one
composite, lowered into one PrimFunc by the templates (int8/uint8 operands
read as such, int32 accumulator, the fixed-point epilogue computed per output
element — nothing materialized in between):

* ``bmlib.qnn_conv2d_requantize``: ``[pad(x, zp)] -> conv2d(int8, int8 -> int32)
  [- zp_x * sum(w)] [+ bias]`` then requantize (fixed-point multiply,
  rounding, output zero point, clip + cast) and an optional clip (ReLU);
  grouped / depthwise / per-channel included (the constants differ, not the form).
* ``bmlib.qnn_dense_requantize``, ``bmlib.qnn_batch_matmul_requantize``: the same
  around ``matmul``.
* ``bmlib.qnn_requantize``, ``bmlib.qnn_quantize``, ``bmlib.qnn_dequantize``,
  ``bmlib.qnn_add`` (``add``/``subtract``), ``bmlib.qnn_mul``,
  ``bmlib.qnn_concatenate``: the element-wise QNN ops on their own.

The float table's ``check_tensors`` keeps integer tensors on the host (its
templates assume floating point); :func:`check_qnn` accepts them here, where the
whole integer computation is matched.
"""
from __future__ import annotations

from typing import Optional

from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import DFPattern, is_op, wildcard
from tvm.relax.transform import PatternCheckContext

from ..dims import all_static

QNN_DTYPES = ("int8", "uint8", "int16", "int32", "int64", "float32", "bool")
QNN_OPERAND_DTYPES = ("int8", "uint8", "int16")

Annotations = dict[str, DFPattern]


def _op(name: str):
    return is_op(f"relax.{name}")


# --------------------------------------------------------------------------- checks
def _tensor_ok(ty) -> bool:
    if isinstance(ty, relax.TupleType):
        return all(_tensor_ok(f) for f in ty.fields)
    if not isinstance(ty, relax.TensorType):
        return True
    return str(ty.dtype) in QNN_DTYPES and ty.shape is not None and \
        hasattr(ty.shape, "values") and all_static(ty.shape.values)


def _dtype(expr) -> Optional[str]:
    ty = getattr(expr, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def check_qnn(context: PatternCheckContext) -> bool:
    """Static shapes, QNN dtypes, no leaking intermediates; integer operands for the
    accumulating op (a float conv/matmul belongs to the float table)."""
    exprs = [context.matched_expr, *context.annotated_expr.values(),
             *context.matched_bindings.values()]
    for expr in exprs:
        if not _tensor_ok(getattr(expr, "ty", None)):
            return False
        for arg in getattr(expr, "args", None) or ():
            if not _tensor_ok(getattr(arg, "ty", None)):
                return False
    conv = context.annotated_expr.get("conv")
    if conv is not None and not accepts_qnn_conv2d(conv):
        return False
    matmul = context.annotated_expr.get("matmul")
    if matmul is not None and not _integer_accumulation(matmul):
        return False
    return not has_leaking_intermediate_variables(context)


def _integer_accumulation(acc: relax.Call) -> bool:
    """QNN operands (int8/uint8/int16) accumulated in int32/int64."""
    return all(_dtype(a) in QNN_OPERAND_DTYPES for a in acc.args[:2]) and \
        _dtype(acc) in ("int32", "int64")


def accepts_qnn_conv2d(conv: relax.Call) -> bool:
    """Whether ``bmlib.qnn_conv2d_requantize`` can hold this ``conv2d`` call: static
    shapes and QNN dtypes for it and its operands, integer accumulation, NCHW data and
    an OIHW (plain, blocked or dot-product packed) kernel.

    :func:`check_qnn` decides with it, and so does the weight packing
    (:mod:`.rewrite`) for an int8/uint8 conv: a conv this refuses stays on the host,
    where TVM's own lowering reads OIHW only — packing it would leave a conv no one can
    build (a free batch did: "CodeGenVM cannot emit this Relax operator")."""
    from .dot_product import dot_kernel_layout
    from .patterns import is_conv2d_kernel_layout

    if not all(_tensor_ok(getattr(e, "ty", None)) for e in (conv, *conv.args)):
        return False
    if not _integer_accumulation(conv):
        return False
    attrs = conv.attrs
    layout = str(attrs.kernel_layout)
    return (str(attrs.data_layout), str(attrs.out_layout)) == ("NCHW", "NCHW") and \
        (is_conv2d_kernel_layout(layout) or dot_kernel_layout(layout) is not None)


def check_integer_output(context: PatternCheckContext) -> bool:
    """An element-wise QNN composite must compute an integer result (else it is float)."""
    return check_qnn(context) and str(_dtype(context.matched_expr)).startswith(("int", "uint"))


def _validates_tensors(check):
    # partition.resolve_patterns otherwise adds the float table's check_tensors, which
    # rejects every integer tensor.
    check.validates_tensors = True
    return check


# --------------------------------------------------------------------------- builders
def _quantized(x: Optional[DFPattern] = None) -> DFPattern:
    """``x`` (any expression by default) holding int8/uint8/int16 values: the casts a
    pattern starts with must be QNN upcasts, never, say, a shared float->int cast."""
    x = wildcard() if x is None else x
    return x.has_dtype("int8") | x.has_dtype("uint8") | x.has_dtype("int16")


def fixed_point_multiply(t: DFPattern) -> DFPattern:
    """The importer's fixed-point multiply of int32 ``t`` (per tensor or per channel):
    int64 ``[<< l] * m + rounding >> s`` back to int32, or the power-of-two shortcut."""
    x = _op("astype")(t)
    x = _op("left_shift")(x, wildcard()) | x
    x = _op("multiply")(x, wildcard())
    nearest = _op("where")(_op("greater_equal")(x, wildcard()), wildcard(), wildcard())
    x = _op("add")(x, nearest | wildcard())
    general = _op("astype")(_op("right_shift")(x, wildcard()))
    power_of_two = _op("left_shift")(t, wildcard()) | \
        _op("right_shift")(_op("add")(t, wildcard()), wildcard())
    return general | power_of_two


def requantize(data: DFPattern, required: bool = False) -> DFPattern:
    """``qnn.requantize`` of ``data`` as imported (compute_dtype int64).

    ``required=False`` also accepts no requantize at all (an int32 result)."""
    t = _op("astype")(_quantized(data)) | data
    t = _op("subtract")(t, wildcard()) | t  # input zero point
    scaled = fixed_point_multiply(t) if required else fixed_point_multiply(t) | t
    shifted = _op("add")(wildcard(), scaled) | scaled  # output zero point
    return _op("astype")(_op("clip")(shifted, wildcard(), wildcard())) | shifted


def _accumulated(acc: DFPattern) -> DFPattern:
    """``acc`` with its zero-point term subtracted and a bias added (both optional)."""
    out = _op("subtract")(acc, wildcard()) | acc
    return _op("add")(out, wildcard()) | out


def _clip(out: DFPattern) -> DFPattern:
    return _op("clip")(out, wildcard(), wildcard()) | out


def make_qnn_conv2d_pattern() -> tuple[DFPattern, Annotations]:
    data, weight = wildcard(), wildcard()
    padded = _op("nn.pad")(data, varg_default_wildcard=True)
    conv = _op("nn.conv2d")(padded | data, weight)
    out = _clip(requantize(_accumulated(conv)))
    return out, {"data": data, "weight": weight, "conv": conv, "root": out}


def make_qnn_matmul_pattern() -> tuple[DFPattern, Annotations]:
    """``matmul(x, permute_dims(w))`` as imported, or ``matmul(x, w.T)`` once folded."""
    lhs, weight = wildcard(), wildcard()
    rhs = _op("permute_dims")(weight) | weight
    matmul = _op("matmul")(lhs, rhs)
    out = _clip(requantize(_accumulated(matmul)))
    return out, {"lhs": lhs, "weight": weight, "matmul": matmul, "root": out}


def make_qnn_requantize_pattern() -> tuple[DFPattern, Annotations]:
    out = _clip(requantize(wildcard(), required=True))
    return out, {"root": out}


def make_qnn_quantize_pattern() -> tuple[DFPattern, Annotations]:
    """``round(x / scale) + zp`` clipped and cast, Relay's round imported as
    ``trunc(q + sign(q) * h)`` (halves away from zero)."""
    quotient = _op("divide")(wildcard(), wildcard())
    scaled = _op("trunc")(_op("add")(quotient, _op("multiply")(_op("sign")(quotient),
                                                              wildcard())))
    out = _op("astype")(_op("clip")(_op("add")(scaled, wildcard()), wildcard(), wildcard()))
    return out, {"root": out}


def make_qnn_dequantize_pattern() -> tuple[DFPattern, Annotations]:
    shifted = _op("subtract")(_op("astype")(_quantized()) | wildcard(), wildcard())
    out = _op("multiply")(_op("astype")(shifted), wildcard())
    return out, {"shifted": shifted, "root": out}


def check_dequantize(context: PatternCheckContext) -> bool:
    """The zero point is subtracted in int32 (else this is float arithmetic)."""
    return check_qnn(context) and _dtype(context.annotated_expr["shifted"]) == "int32"


def _ndim(expr) -> int:
    ty = getattr(expr, "ty", None)
    return int(ty.ndim) if isinstance(ty, relax.TensorType) else -1


def check_qnn_dense(context: PatternCheckContext) -> bool:
    return check_qnn(context) and _ndim(context.annotated_expr["weight"]) == 2


def check_qnn_batch_matmul(context: PatternCheckContext) -> bool:
    return check_qnn(context) and _ndim(context.annotated_expr["lhs"]) >= 3 and \
        _ndim(context.annotated_expr["weight"]) >= 3


for _check in (check_qnn, check_integer_output, check_dequantize, check_qnn_dense,
               check_qnn_batch_matmul):
    _validates_tensors(_check)


def _upcast_or_requantize() -> DFPattern:
    """An operand of qnn.add: requantized to the output scale in int32, or upcast."""
    return requantize(wildcard(), required=True) | _op("astype")(_quantized())


def make_qnn_add_pattern() -> tuple[DFPattern, Annotations]:
    lhs, rhs = _upcast_or_requantize(), _upcast_or_requantize()
    combined = _op("add")(lhs, rhs) | _op("subtract")(lhs, rhs)
    shifted = _op("subtract")(combined, wildcard()) | _op("add")(combined, wildcard()) | \
        combined
    out = _op("astype")(_op("clip")(shifted, wildcard(), wildcard()))
    return out, {"root": out}


def make_qnn_mul_pattern() -> tuple[DFPattern, Annotations]:
    def operand():
        cast = _op("astype")(_quantized())
        return _op("subtract")(cast, wildcard()) | cast

    product = _op("multiply")(operand(), operand())
    out = requantize(product, required=False)
    return out, {"root": out}


def make_qnn_concatenate_pattern() -> tuple[DFPattern, Annotations]:
    out = _op("concat")(wildcard())
    return out, {"root": out}


def qnn_patterns(entry) -> list[tuple]:
    """The QNN entries, lowest priority first; ``entry(name, built, check)`` makes one."""
    return [
        entry("qnn_concatenate", make_qnn_concatenate_pattern(), check_integer_output),
        entry("qnn_dequantize", make_qnn_dequantize_pattern(), check_dequantize),
        entry("qnn_quantize", make_qnn_quantize_pattern(), check_qnn),
        entry("qnn_requantize", make_qnn_requantize_pattern(), check_integer_output),
        entry("qnn_mul", make_qnn_mul_pattern(), check_integer_output),
        entry("qnn_add", make_qnn_add_pattern(), check_integer_output),
        entry("qnn_batch_matmul_requantize", make_qnn_matmul_pattern(),
              check_qnn_batch_matmul),
        entry("qnn_dense_requantize", make_qnn_matmul_pattern(), check_qnn_dense),
        entry("qnn_conv2d_requantize", make_qnn_conv2d_pattern(), check_qnn),
    ]
