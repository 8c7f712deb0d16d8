"""``relay.nn.*``: neural-network ops with Relay v0.19's Python signatures
(``python/tvm/relay/op/nn/nn.py``)."""
from __future__ import annotations

from .. import ast
from ..builder import const
from ..type_infer import register_type_relation
from ._make import (as_expr, attr_value, define_ops, dynamic_call, dynamic_form, int_as_list,
                    make_op, pad_tuple, per_axis, register, registered)


def _conv(ndim: int, layout: str, kernel: str, transpose: bool = False,
          extra: str = "") -> str:
    one = "(1,)" if ndim == 1 else "(" + ", ".join(["1"] * ndim) + ")"
    zero = "(0,)" if ndim == 1 else "(" + ", ".join(["0"] * ndim) + ")"
    if ndim == 1 and not transpose:
        one, zero = "1", "0"  # conv1d's Python defaults are plain ints
    text = (f"data, weight, {extra}strides={one}, padding={zero}, dilation={one}, groups=1, "
            f"channels=None, kernel_size=None, data_layout='{layout}', "
            f"kernel_layout='{kernel}', out_layout=''")
    if transpose:
        text += f", output_padding={zero}"
    return text + ", out_dtype=''"


def _pool(ndim: int, layout: str, avg: bool) -> str:
    one = "(1,)" if ndim == 1 else "(" + ", ".join(["1"] * ndim) + ")"
    zero = "(0,)" if ndim == 1 else "(" + ", ".join(["0"] * ndim) + ")"
    text = (f"data, pool_size={one}, strides={one}, dilation={one}, padding={zero}, "
            f"layout='{layout}', out_layout='', ceil_mode=False")
    return text + (", count_include_pad=False" if avg else "")


def _spatial(ndim: int, per_axis_attrs: str = "", record_padding: bool = True,
             also_record: tuple = ()) -> dict:
    """Table options for v0.19's conv / pool builders (nn.py): each of ``per_axis_attrs``
    given as an int becomes ``ndim`` values and ``padding`` goes through
    ``get_pad_tuple{ndim}d``.  The rewritten default padding (``(0, 0)`` -> ``(0, 0, 0,
    0)``) differs from the C++ attrs' default (ndim zeros), so v0.19's calls always held
    (and printed) it: it is recorded unless ``record_padding`` is False (conv1d, whose
    ``0`` -> ``[0, 0]`` is Conv1DAttrs' own default)."""
    normalise = {name: per_axis(ndim) for name in per_axis_attrs.split()}
    normalise["padding"] = pad_tuple(ndim)
    return {"normalise": normalise,
            "always": (("padding",) if record_padding else ()) + tuple(also_record)}


#: v0.19 conv1d/2d/3d, conv3d_transpose, conv2d_backward_weight: int kernel_size, strides
#: and dilation become per-axis tuples (conv2d_transpose and the contrib convs only pad).
_CONV_INTS = "strides dilation kernel_size"
_POOL_INTS = "pool_size strides dilation"
_POOL_SIZE = ("pool_size",)

_NORM = "axis=1, epsilon=1e-05, center=True, scale=True"
_NCHWC = ("data, kernel, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, "
          "channels=None, kernel_size=None, data_layout='NCHW8c', kernel_layout='OIHW', "
          "out_layout='', out_dtype=''")

TABLE = {
    "conv1d": (_conv(1, "NCW", "OIW"), "data weight",
               _spatial(1, _CONV_INTS, record_padding=False)),
    "conv2d": (_conv(2, "NCHW", "OIHW"), "data weight", _spatial(2, _CONV_INTS)),
    "conv3d": (_conv(3, "NCDHW", "OIDHW"), "data weight", _spatial(3, _CONV_INTS)),
    "conv1d_transpose": (_conv(1, "NCW", "IOW", transpose=True), "data weight"),
    "conv2d_transpose": (_conv(2, "NCHW", "IOHW", transpose=True), "data weight",
                         _spatial(2)),
    "conv3d_transpose": (_conv(3, "NCDHW", "IODHW", transpose=True), "data weight",
                         _spatial(3, _CONV_INTS)),
    "contrib_conv2d_winograd_without_weight_transform":
        (_conv(2, "NCHW", "OIHW", extra="tile_size, "), "data weight", _spatial(2)),
    "contrib_conv3d_winograd_without_weight_transform":
        (_conv(3, "NCDHW", "OIDHW", extra="tile_size, "), "data weight", _spatial(3)),
    "contrib_conv2d_gemm_without_weight_transform": (_conv(2, "NCHW", "OIHW"), "data weight",
                                                     _spatial(2)),
    "contrib_conv2d_nchwc": (_NCHWC, "data kernel",  # data_layout: C++ default NCHW
                             {"op_name": "nn.contrib_conv2d_NCHWc",
                              **_spatial(2, also_record=("data_layout",))}),
    "contrib_depthwise_conv2d_nchwc": (_NCHWC, "data kernel",
                                       {"op_name": "nn.contrib_depthwise_conv2d_NCHWc",
                                        **_spatial(2)}),
    "contrib_conv2d_winograd_weight_transform": ("weight, tile_size", "weight"),
    "contrib_conv3d_winograd_weight_transform": ("weight, tile_size", "weight"),
    "contrib_conv2d_gemm_weight_transform": ("weights, tile_N, tile_K", "weights"),
    "contrib_conv2d_winograd_nnpack_weight_transform":
        ("weight, convolution_algorithm, out_dtype=''", "weight"),
    "conv2d_backward_weight": (
        "grad, data, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, "
        "kernel_size=None, grad_layout='NCHW', data_layout='NCHW', kernel_layout='OIHW', "
        "out_dtype=''", "grad data", _spatial(2, _CONV_INTS)),
    "deformable_conv2d": (
        "data, offset, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), "
        "deformable_groups=1, groups=1, channels=None, kernel_size=None, data_layout='NCHW', "
        "kernel_layout='OIHW', out_layout='', out_dtype=''", "data offset weight",
        _spatial(2)),
    "softmax": ("data, axis=-1", "data"),
    "fast_softmax": ("data, axis=-1", "data"),
    "log_softmax": ("data, axis=-1", "data"),
    # Pool{1,2,3}DAttrs' padding default is ndim zeros: the rewritten one always differs
    # pool_size: the Python default (1, ...) was always passed; the C++ field is required
    "max_pool1d": (_pool(1, "NCW", False), "data",
                   _spatial(1, _POOL_INTS, also_record=_POOL_SIZE)),
    "max_pool2d": (_pool(2, "NCHW", False), "data",
                   _spatial(2, _POOL_INTS, also_record=_POOL_SIZE)),
    "max_pool3d": (_pool(3, "NCDHW", False), "data",
                   _spatial(3, _POOL_INTS, also_record=_POOL_SIZE)),
    "avg_pool1d": (_pool(1, "NCW", True), "data",
                   _spatial(1, _POOL_INTS, also_record=_POOL_SIZE)),
    "avg_pool2d": (_pool(2, "NCHW", True), "data",
                   _spatial(2, _POOL_INTS, also_record=_POOL_SIZE)),
    "avg_pool3d": (_pool(3, "NCDHW", True), "data",
                   _spatial(3, _POOL_INTS, also_record=_POOL_SIZE)),
    "max_pool2d_grad": ("out_grad, data, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), "
                        "layout='NCHW', out_layout='', ceil_mode=False", "out_grad data"),
    "avg_pool2d_grad": ("out_grad, data, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), "
                        "layout='NCHW', out_layout='', ceil_mode=False, "
                        "count_include_pad=False", "out_grad data"),
    "global_max_pool2d": ("data, layout='NCHW', out_layout=''", "data"),
    "global_avg_pool2d": ("data, layout='NCHW', out_layout=''", "data"),
    "adaptive_max_pool1d": ("data, output_size=None, layout='NCW', out_layout=''", "data",
                            {"normalise": {"output_size": int_as_list}}),
    "adaptive_avg_pool1d": ("data, output_size=None, layout='NCW', out_layout=''", "data",
                            {"normalise": {"output_size": int_as_list}}),
    "adaptive_max_pool2d": ("data, output_size=None, layout='NCHW', out_layout=''", "data"),
    "adaptive_avg_pool2d": ("data, output_size=None, layout='NCHW', out_layout=''", "data"),
    "adaptive_max_pool3d": ("data, output_size=None, layout='NCDHW', out_layout=''", "data"),
    "adaptive_avg_pool3d": ("data, output_size=None, layout='NCDHW', out_layout=''", "data"),
    # the scales' Python defaults were always passed; the C++ fields are required
    "upsampling": ("data, scale_h=1, scale_w=1, layout='NCHW', method='nearest_neighbor', "
                   "align_corners=False", "data", {"always": ("scale_h", "scale_w")}),
    "upsampling3d": ("data, scale_d=1, scale_h=1, scale_w=1, layout='NCDHW', "
                     "method='nearest_neighbor', coordinate_transformation_mode='half_pixel'",
                     "data", {"always": ("scale_d", "scale_h", "scale_w")}),
    "batch_flatten": ("data", "data"),
    "bias_add": ("data, bias, axis=1", "data bias"),
    "matmul": ("tensor_a, tensor_b, units=None, out_dtype='', transpose_a=False, "
               "transpose_b=False", "tensor_a tensor_b"),
    "dense": ("data, weight, units=None, out_dtype=''", "data weight"),
    "contrib_dense_pack": ("data, weight, weight_layout='NC', units=None, out_dtype=''",
                           "data weight"),
    "fifo_buffer": ("data, buffer, axis", "data buffer"),
    "relu": ("data", "data"),
    "leaky_relu": ("data, alpha=0.01", "data", {"always": ("alpha",)}),
    "prelu": ("data, alpha, axis=1", "data alpha"),
    "dilate": ("data, strides, dilation_value=0.0", "data"),
    "mirror_pad": ("data, pad_width, mode='SYMMETRIC'", "data"),
    # LRNAttrs' alpha defaults to 1e-4, the Python API's to 1e-5: always recorded
    "lrn": ("data, size=5, axis=1, bias=2, alpha=1e-05, beta=0.75", "data",
            {"always": ("alpha",)}),
    "l2_normalize": ("data, eps, axis=None", "data"),
    "batch_norm": ("data, gamma, beta, moving_mean, moving_var, " + _NORM,
                   "data gamma beta moving_mean moving_var", {"tuple_size": 3}),
    "instance_norm": ("data, gamma, beta, " + _NORM, "data gamma beta"),
    "layer_norm": ("data, gamma, beta, axis=-1, epsilon=1e-05, center=True, scale=True",
                   "data gamma beta"),
    "group_norm": ("data, gamma, beta, num_groups, " + _NORM, "data gamma beta"),
    "batch_matmul": ("tensor_a, tensor_b, out_dtype='', transpose_a=False, transpose_b=True",
                     "tensor_a tensor_b", {"always": ("transpose_b",)}),
    # ``+``: the CSR/BSR namedtuple (data, indices, indptr) is three operands, as v0.19's
    # MakeSparseDense / MakeSparseTranspose / MakeSparseAdd took it
    "sparse_dense": ("dense_mat, sparse_mat, sparse_lhs=False", "dense_mat +sparse_mat"),
    "sparse_transpose": ("x", "+x", {"tuple_size": 3}),
    "sparse_add": ("dense_mat, sparse_mat", "dense_mat +sparse_mat"),
    "bitpack": ("data, bits=1, pack_axis=1, bit_axis=2, pack_type='uint32', name='BitPack'",
                "data"),
    "bitserial_conv2d": (
        "data, weight, strides=(1, 1), padding=(0, 0), channels=None, kernel_size=(3, 3), "
        "activation_bits=1, weight_bits=1, data_layout='NCHW', kernel_layout='OIHW', "
        "pack_dtype='uint32', out_dtype='int16', unipolar=True", "data weight", _spatial(2)),
    "bitserial_dense": ("data, weight, units=None, data_bits=1, weight_bits=1, "
                        "pack_dtype='uint32', out_dtype='int16', unipolar=True", "data weight"),
    "cross_entropy": ("predictions, targets", "predictions targets"),
    "cross_entropy_with_logits": ("predictions, targets", "predictions targets"),
    "nll_loss": ("predictions, targets, weights, reduction='mean', ignore_index=-100",
                 "predictions targets weights"),
    "depth_to_space": ("data, block_size, layout='NCHW', mode='DCR'", "data"),
    "space_to_depth": ("data, block_size, layout='NCHW'", "data"),
    "correlation": ("data1, data2, kernel_size, max_displacement, stride1, stride2, padding, "
                    "is_multiply, layout", "data1 data2",
                    {"normalise": {"padding": per_axis(2)}}),
    "space_to_batch_nd": ("data, block_shape, paddings, pad_value=0", "data"),
    "batch_to_space_nd": ("data, block_shape, crops", "data"),
}

__all__ = define_ops(globals(), "nn.", TABLE)


@registered("nn.pad")
def pad(data, pad_width, pad_value=0, pad_mode="constant"):
    """Relay ``nn.pad``: ``pad_value`` is a scalar operand (a number becomes a constant)."""
    if not isinstance(pad_value, ast.Expr):
        pad_value = const(pad_value)
    attrs = {"pad_width": attr_value(pad_width)}
    if pad_mode != "constant":
        attrs["pad_mode"] = pad_mode
    return ast.Call(ast.Op("nn.pad"), (as_expr(data, "nn.pad data"), pad_value),
                    ast.Attrs(attrs))


dropout_raw = make_op("nn.dropout", "data, rate=0.5", "data", tuple_size=2,
                      py_name="dropout_raw",
                      doc="Relay ``nn.dropout``: the (output, mask) tuple call.")
register("nn.dropout_raw", "nn.dropout")


@registered("nn.dropout")
def dropout(data, rate=0.5):
    """Relay ``nn.dropout``: the output (field 0 of the dropout tuple)."""
    return dropout_raw(data, rate)[0]


def _global_pool_as_adaptive(kind: str, ndim: int, layout: str):
    """``nn.global_<kind>_pool{1,3}d``: v0.19 registered no such op; its Python builder
    made ``nn.adaptive_<kind>_pool{1,3}d`` with ``output_size=[1]*ndim`` (``nn/nn.py``),
    so a pattern, check function or printer sees the adaptive call, as with Relay."""
    adaptive = globals()[f"adaptive_{kind}_pool{ndim}d"]

    def builder(data, layout=layout, out_layout=""):
        return adaptive(data, [1] * ndim, layout, out_layout)

    name = f"global_{kind}_pool{ndim}d"
    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = (f"Relay ``nn.{name}``: the ``nn.adaptive_{kind}_pool{ndim}d`` call with "
                       f"output size {[1] * ndim} that v0.19's builder made.")
    register(f"nn.{name}", f"nn.adaptive_{kind}_pool{ndim}d")
    return name, builder


for _kind, _ndim, _layout in (("max", 1, "NCW"), ("avg", 1, "NCW"),
                              ("max", 3, "NCDHW"), ("avg", 3, "NCDHW")):
    _name, _builder = _global_pool_as_adaptive(_kind, _ndim, _layout)
    globals()[_name] = _builder
    __all__.append(_name)

__all__ += ["pad", "dropout", "dropout_raw"]


def _scale_operand(value):
    """A scale given with a run-time one: a float64 constant, as Relay's builder made it."""
    return value if isinstance(value, ast.Expr) else const(float(value), "float64")


dynamic_form(globals(), "pad", "pad_width", lambda a: dynamic_call(
    "nn.pad", (a["data"], a["pad_width"], a["pad_value"] if isinstance(a["pad_value"], ast.Expr)
               else const(a["pad_value"])), {"pad_mode": a["pad_mode"]}))


@register_type_relation("nn.bitserial_dense")
def _bitserial_dense_type(arg_types, attrs, call):
    """data (..., K) -> (..., units) of ``out_dtype`` (Relay's BitserialDenseRel).

    Relay's relation needs no static dims, whereas TOPI's compute (the
    importer's lowering) does: this relation keeps symbolic batch/K dims typed.
    """
    data, weight = arg_types[0], arg_types[1]
    units = attrs.get("units")
    if units is None:
        units = weight.shape[0]
    out_dtype = attrs.get("out_dtype", "int16") or data.dtype
    return ast.TensorType(tuple(data.shape[:-1]) + (units,), out_dtype)


def _scaled_dim(dim, scale: float):
    """``round(dim * scale)`` as Relay's UpSampling relations write it: an int for a
    static dim (TVM folds ``round`` with ``nearbyint``: half to even, like Python's
    ``round``), else ``Cast(dim.dtype, round(dim * scale))`` over the user's dim."""
    if dim is None:
        return None
    if isinstance(dim, int):
        return int(round(dim * scale))
    import tvm

    return tvm.tirx.Cast(str(dim.ty), tvm.te.round(dim * tvm.tirx.const(scale, "float64")))


def _upsampling_relation(axes: str, default_layout: str):
    def relation(arg_types, attrs, call):
        data = arg_types[0]
        layout = attrs.get("layout") or default_layout
        shape = list(data.shape)
        for axis in axes:
            index = layout.index(axis)
            shape[index] = _scaled_dim(shape[index], float(attrs.get(f"scale_{axis.lower()}", 1)))
        return ast.TensorType(tuple(shape), data.dtype)
    return relation


register_type_relation("nn.upsampling")(_upsampling_relation("HW", "NCHW"))
register_type_relation("nn.upsampling3d")(_upsampling_relation("DHW", "NCDHW"))


dynamic_form(globals(), "upsampling", "scale_h scale_w", lambda a: dynamic_call(
    "nn.upsampling", (a["data"], *(_scale_operand(a[k]) for k in ("scale_h", "scale_w"))),
    {k: a[k] for k in ("layout", "method", "align_corners")}))
dynamic_form(globals(), "upsampling3d", "scale_d scale_h scale_w", lambda a: dynamic_call(
    "nn.upsampling3d",
    (a["data"], *(_scale_operand(a[k]) for k in ("scale_d", "scale_h", "scale_w"))),
    {k: a[k] for k in ("layout", "method", "coordinate_transformation_mode")}))

