"""``relay.nn.*``: neural-network ops with Relay's Python signatures."""
from __future__ import annotations

from ._make import Always, define_ops, make_op

_CONV_COMMON = (("groups", 1), ("channels", None), ("kernel_size", None))


def _conv(layout: str, kernel: str, ndim: int, transpose: bool = False) -> tuple:
    ones, zeros = (1,) * ndim, (0,) * ndim
    attrs = (("strides", ones), ("padding", zeros), ("dilation", ones)) + _CONV_COMMON + (
        ("data_layout", layout), ("kernel_layout", kernel), ("out_layout", ""))
    if transpose:
        attrs += (("output_padding", zeros),)
    return ("data weight", attrs + (("out_dtype", ""),))


def _pool(layout: str, ndim: int, avg: bool) -> tuple:
    ones, zeros = (1,) * ndim, (0,) * ndim
    attrs = (("pool_size", ones), ("strides", ones), ("dilation", ones), ("padding", zeros),
             ("layout", layout), ("out_layout", ""), ("ceil_mode", False))
    if avg:
        attrs += (("count_include_pad", False),)
    return ("data", attrs)


_NORM = (("axis", 1), ("epsilon", 1e-5), ("center", True), ("scale", True))

TABLE = {
    "conv1d": _conv("NCW", "OIW", 1),
    "conv2d": _conv("NCHW", "OIHW", 2),
    "conv3d": _conv("NCDHW", "OIDHW", 3),
    "conv1d_transpose": _conv("NCW", "IOW", 1, transpose=True),
    "conv2d_transpose": _conv("NCHW", "IOHW", 2, transpose=True),
    "conv3d_transpose": _conv("NCDHW", "IODHW", 3, transpose=True),
    "dense": ("data weight", (("units", None), ("out_dtype", ""))),
    "matmul": ("tensor_a tensor_b", (("units", None), ("out_dtype", ""),
                                     ("transpose_a", False), ("transpose_b", False))),
    "batch_matmul": ("tensor_a tensor_b", (("out_dtype", ""), ("transpose_a", False),
                                           ("transpose_b", Always(True)))),
    "bias_add": ("data bias", (("axis", 1),)),
    "batch_norm": ("data gamma beta moving_mean moving_var", _NORM),
    "layer_norm": ("data gamma beta", (("axis", -1),) + _NORM[1:]),
    "instance_norm": ("data gamma beta", _NORM),
    "group_norm": ("data gamma beta", (("num_groups", 1),) + _NORM),
    "relu": ("data", ()),
    "leaky_relu": ("data", (("alpha", Always(0.01)),)),
    "prelu": ("data alpha", (("axis", 1),)),
    "softmax": ("data", (("axis", -1),)),
    "log_softmax": ("data", (("axis", -1),)),
    "max_pool1d": _pool("NCW", 1, False), "max_pool2d": _pool("NCHW", 2, False),
    "max_pool3d": _pool("NCDHW", 3, False), "avg_pool1d": _pool("NCW", 1, True),
    "avg_pool2d": _pool("NCHW", 2, True), "avg_pool3d": _pool("NCDHW", 3, True),
    "global_avg_pool2d": ("data", (("layout", "NCHW"), ("out_layout", ""))),
    "global_max_pool2d": ("data", (("layout", "NCHW"), ("out_layout", ""))),
    "adaptive_avg_pool1d": ("data", (("output_size", None), ("layout", "NCW"), ("out_layout", ""))),
    "adaptive_avg_pool2d": ("data", (("output_size", None), ("layout", "NCHW"), ("out_layout", ""))),
    "adaptive_avg_pool3d": ("data", (("output_size", None), ("layout", "NCDHW"), ("out_layout", ""))),
    "pad": ("data ?pad_value", (("pad_width", None), ("pad_mode", "constant"))),
    "batch_flatten": ("data", ()),
    "upsampling": ("data", (("scale_h", 1), ("scale_w", 1), ("layout", "NCHW"),
                            ("method", "nearest_neighbor"), ("align_corners", False))),
    "contrib_conv2d_NCHWc": _conv("NCHW8c", "OIHW8i8o", 2),
}

__all__ = define_ops(globals(), "nn.", TABLE)

dropout_raw = make_op("nn.dropout", ["data"], [("rate", 0.5)],
                      "Relay ``nn.dropout``: the (output, mask) tuple call.")


def dropout(data, rate: float = 0.5):
    """Relay ``nn.dropout``: the output (field 0 of the dropout tuple)."""
    return dropout_raw(data, rate)[0]


__all__ += ["dropout", "dropout_raw"]
