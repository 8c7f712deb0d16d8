"""``relay.qnn.op.*``: Relay v0.19's QNN dialect with its Python signatures.

Graph construction only (each function returns an AST call node); the
importer (:mod:`bmlib_relax.importer.ops.qnn`) gives the ops Relay's
canonicalized integer semantics, and ``relay.transform.InferType`` their
output types through it.  Quantization parameters (scales, zero points) are
Relay expressions; Python numbers become ``float32``/``int32`` constants as
Relay's ``relay.const`` made them.

Where Relay's Python default differs from the text format's C++ default
(``out_dtype="int32"`` of ``qnn.conv2d``, ``out_dtype="int8"`` of
``qnn.requantize``, ...), the call records the attribute explicitly, so the
printed text reads back with the same meaning.  ``relay.qnn.op`` is this
module itself (``from bmlib_relax.relay import qnn; qnn.op.conv2d(...)``).
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

from .. import ast
from ._make import as_expr, define_ops, make_op, pad_tuple, register

_BINARY = ("lhs, rhs, lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point, output_scale, "
           "output_zero_point, lhs_axis=-1, rhs_axis=-1",
           "lhs rhs lhs_scale lhs_zero_point rhs_scale rhs_zero_point output_scale "
           "output_zero_point")
_UNARY = ("x, scale, zero_point, output_scale, output_zero_point",
          "x scale zero_point output_scale output_zero_point")
_UNARY_OPS = ("tanh", "exp", "sqrt", "rsqrt", "erf", "abs", "sigmoid", "hardswish", "log")

#: v0.19 qnn.conv2d / conv2d_transpose: ``padding = get_pad_tuple2d(padding)``; the
#: rewritten default (0, 0, 0, 0) is not Conv2DAttrs' [0, 0], so calls always hold it.
_PAD_2D = {"padding": pad_tuple(2)}

# name: (Relay v0.19 signature, tensor operands[, options]); "always" lists the
# attributes whose Python default differs from the text format's.
TABLE: dict = {
    "requantize": ("data, input_scale, input_zero_point, output_scale, output_zero_point, "
                   "axis=-1, rounding='None', compute_dtype='None', out_dtype='int8'",
                   "data input_scale input_zero_point output_scale output_zero_point",
                   {"always": ("out_dtype",)}),
    "quantize": ("data, output_scale, output_zero_point, axis=-1, out_dtype='int8'",
                 "data output_scale output_zero_point", {"always": ("out_dtype",)}),
    "dequantize": ("data, input_scale, input_zero_point, axis=-1, out_dtype='float32'",
                   "data input_scale input_zero_point", {"always": ("out_dtype",)}),
    "concatenate": ("data, input_scales, input_zero_points, output_scale, output_zero_point, "
                    "axis", "*data *input_scales *input_zero_points output_scale "
                    "output_zero_point"),
    "dense": ("data, weight, input_zero_point, kernel_zero_point, input_scale, kernel_scale, "
              "units, out_dtype='int32'",
              "data weight input_zero_point kernel_zero_point input_scale kernel_scale",
              {"always": ("out_dtype",)}),
    "contrib_dense_pack": ("data, weight, input_zero_point, kernel_zero_point, input_scale, "
                           "kernel_scale, kernel_layout='NC', units=None, out_dtype='int32'",
                           "data weight input_zero_point kernel_zero_point input_scale "
                           "kernel_scale", {"always": ("out_dtype",)}),
    "add": _BINARY, "subtract": _BINARY, "mul": _BINARY,
    "softmax": ("x, scale, zero_point, output_scale, output_zero_point, axis=-1",
                "x scale zero_point output_scale output_zero_point"),
    "conv2d_transpose": ("data, weight, input_zero_point, kernel_zero_point, input_scale, "
                         "kernel_scale, strides=(1, 1), padding=(0, 0), dilation=(1, 1), "
                         "groups=1, channels=None, kernel_size=None, data_layout='NCHW', "
                         "kernel_layout='IOHW', out_layout='', output_padding=(0, 0), "
                         "out_dtype='int32'",
                         "data weight input_zero_point kernel_zero_point input_scale "
                         "kernel_scale", {"always": ("out_dtype", "padding"),
                                          "normalise": _PAD_2D}),
    "avg_pool2d": ("data, input_scale, input_zero_point, output_scale, output_zero_point, "
                   "pool_size, strides, padding, dilation, ceil_mode=False, "
                   "count_include_pad=True, layout='NHWC', out_layout=''",
                   "data input_scale input_zero_point output_scale output_zero_point",
                   {"always": ("count_include_pad", "layout")}),
}
TABLE.update({name: _UNARY for name in _UNARY_OPS})

__all__ = define_ops(globals(), "qnn.", TABLE)

_conv2d_call = make_op(
    "qnn.conv2d",
    "data, kernel, input_zero_point, kernel_zero_point, input_scale, kernel_scale, "
    "kernel_size, channels, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, "
    "data_layout='NCHW', kernel_layout='OIHW', out_layout='', out_dtype='int32'",
    "data kernel input_zero_point kernel_zero_point input_scale kernel_scale",
    always=("out_dtype", "padding"), normalise=_PAD_2D)


def conv2d(data, kernel, input_zero_point, kernel_zero_point, input_scale, kernel_scale,
           kernel_size, channels, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
           data_layout="NCHW", kernel_layout="OIHW", out_layout="", out_dtype="int32"):
    """Relay ``qnn.conv2d`` (padding normalized to 4 values, as Relay's Python API did)."""
    return _conv2d_call(data, kernel, input_zero_point, kernel_zero_point, input_scale,
                        kernel_scale, kernel_size, channels, strides, padding,
                        dilation, groups, data_layout, kernel_layout, out_layout, out_dtype)


# BatchMatmulAttrs' transpose fields default to False; MakeQuantizedBatchMatmul set
# transpose_b=True, so v0.19 printed it (and read text without it as False).
_batch_matmul_call = make_op(
    "qnn.batch_matmul",
    "x, y, x_zero_point, y_zero_point, x_scale, y_scale, out_dtype='int32', "
    "transpose_a=False, transpose_b=True",
    "x y x_zero_point y_zero_point x_scale y_scale", always=("out_dtype", "transpose_b"))


def batch_matmul(x, y, x_zero_point, y_zero_point, x_scale, y_scale, out_dtype="int32"):
    """Relay ``qnn.batch_matmul`` (``y`` transposed: the call records transpose_b=True)."""
    return _batch_matmul_call(x, y, x_zero_point, y_zero_point, x_scale, y_scale, out_dtype)


# LeakyReluAttrs' alpha defaults to 0.25 (text without it); the Python API requires it.
_leaky_relu_call = make_op("qnn.leaky_relu",
                           "x, input_scale, input_zero_point, output_scale, output_zero_point, "
                           "alpha=0.25",
                           "x input_scale input_zero_point output_scale output_zero_point",
                           always=("alpha",))


def leaky_relu(x, alpha, input_scale, input_zero_point, output_scale, output_zero_point):
    """Relay ``qnn.leaky_relu`` (``alpha`` is an attribute, second in the Python API)."""
    return _leaky_relu_call(x, input_scale, input_zero_point, output_scale, output_zero_point,
                            alpha=alpha)


# Relay's topi.nn.qnn.SQNN_DTYPE_TO_CODE: the simulated ops take the dtype as a tensor.
SQNN_DTYPE_TO_CODE = {"disable": 0, "int8": 1, "uint8": 2, "int32": 3}


def _dtype_code(dtype: Any) -> ast.Expr:
    from ..builder import const

    if isinstance(dtype, str):
        if dtype not in SQNN_DTYPE_TO_CODE:
            raise ValueError(f"simulated QNN dtype {dtype!r}: expected one of "
                             f"{sorted(SQNN_DTYPE_TO_CODE)}")
        return const(SQNN_DTYPE_TO_CODE[dtype], "int32")
    return as_expr(dtype, "simulated QNN dtype")


def _flat(expr: Any) -> ast.Expr:
    return ast.Call(ast.Op("reshape"), (as_expr(expr, "qnn parameter"),),
                    ast.Attrs({"newshape": (-1,)}))


_sim_quantize_call = make_op("qnn.simulated_quantize",
                             "data, out_dtype, output_scale, output_zero_point, axis=-1",
                             "data out_dtype output_scale output_zero_point")
_sim_dequantize_call = make_op("qnn.simulated_dequantize",
                               "data, in_dtype, input_scale, input_zero_point, axis=-1",
                               "data in_dtype input_scale input_zero_point")


def simulated_quantize(data, output_scale, output_zero_point, axis=-1, out_dtype="int8"):
    """Relay ``qnn.simulated_quantize`` (dtype as a code tensor, parameters flattened)."""
    return _sim_quantize_call(data, _dtype_code(out_dtype), _flat(output_scale),
                              _flat(output_zero_point), axis=axis)


def simulated_dequantize(data, input_scale, input_zero_point, axis=-1, in_dtype="int8"):
    """Relay ``qnn.simulated_dequantize`` (dtype as a code tensor, parameters flattened)."""
    return _sim_dequantize_call(data, _dtype_code(in_dtype), _flat(input_scale),
                                _flat(input_zero_point), axis=axis)


__all__ += ["conv2d", "batch_matmul", "leaky_relu", "simulated_quantize",
            "simulated_dequantize", "SQNN_DTYPE_TO_CODE", "op"]
for _name in ("conv2d", "batch_matmul", "leaky_relu", "simulated_quantize",
              "simulated_dequantize"):
    register(f"qnn.{_name}", f"qnn.{_name}")

# ``relay.qnn.op.conv2d``: the namespace Relay scripts use is this module.
op = sys.modules[__name__]

OP_NAMES: Sequence[str] = tuple(sorted(
    ["qnn." + n for n in TABLE] + ["qnn.conv2d", "qnn.batch_matmul", "qnn.leaky_relu",
                                   "qnn.simulated_quantize", "qnn.simulated_dequantize"]))
