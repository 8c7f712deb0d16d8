"""Relay's op namespaces for building graphs: ``relay.add``, ``relay.nn.*``, ``relay.image.*``.

Only graph construction: each function returns an AST call node.  The table
below covers every op the importer converts, with Relay's Python signatures,
so a script that built a model with ``tvm.relay`` ports by changing its imports.
"""
from __future__ import annotations

from . import image, nn
from ..builder import get
from ._make import TupleWrapper, define_ops

_REDUCE = (("axis", None), ("keepdims", False), ("exclude", False))

_UNARY = ("negative abs sqrt rsqrt exp log erf sigmoid tanh floor ceil round trunc sign sin cos "
          "tan sinh cosh asin acos atan asinh acosh atanh logical_not bitwise_not isnan isinf "
          "isfinite zeros_like ones_like copy stop_gradient fast_exp fast_tanh fast_erf")
_BINARY = ("add subtract multiply divide power maximum minimum floor_divide floor_mod equal "
           "not_equal less less_equal greater greater_equal logical_and logical_or logical_xor "
           "bitwise_and bitwise_or bitwise_xor left_shift right_shift")

TABLE: dict = {name: ("data", ()) for name in _UNARY.split()}
TABLE.update({name: ("lhs rhs", ()) for name in _BINARY.split()})
TABLE.update({
    "clip": ("a", (("a_min", None), ("a_max", None))),
    "cast": ("data", (("dtype", "float32"),)),
    "cast_like": ("data dtype_like", ()),
    "where": ("condition x y", ()),
    "reshape": ("data", (("newshape", None), ("allowzero", False))),
    "reshape_like": ("data shape_like", ()),
    "transpose": ("data", (("axes", None),)),
    "squeeze": ("data", (("axis", None),)),
    "expand_dims": ("data", (("axis", 0), ("num_newaxis", 1))),
    "concatenate": ("*data", (("axis", 0),)),
    "stack": ("*data", (("axis", 0),)),
    "split": ("data", (("indices_or_sections", 1), ("axis", 0))),
    "strided_slice": ("data", (("begin", None), ("end", None), ("strides", None),
                               ("axes", None), ("slice_mode", "end"))),
    "take": ("data indices", (("axis", None), ("batch_dims", 0), ("mode", "clip"))),
    "tile": ("data", (("reps", None),)),
    "repeat": ("data", (("repeats", 1), ("axis", 0))),
    "reverse": ("data", (("axis", 0),)),
    "sum": ("data", _REDUCE), "mean": ("data", _REDUCE), "max": ("data", _REDUCE),
    "min": ("data", _REDUCE), "prod": ("data", _REDUCE),
    "variance": ("data mean", _REDUCE + (("unbiased", False),)),
    "std": ("data mean", _REDUCE + (("unbiased", False),)),
    "argmax": ("data", _REDUCE + (("select_last_index", False),)),
    "argmin": ("data", _REDUCE + (("select_last_index", False),)),
    "full": ("fill_value", (("shape", None), ("dtype", ""))),
    "full_like": ("data fill_value", ()),
    "zeros": ("", (("shape", None), ("dtype", "float32"))),
    "ones": ("", (("shape", None), ("dtype", "float32"))),
    "arange": ("start ?stop ?step", (("dtype", "float32"),)),
    "broadcast_to": ("data", (("shape", None),)),
    "broadcast_to_like": ("data broadcast_type", ()),
    "collapse_sum_like": ("data collapse_type", ()),
    "collapse_sum_to": ("data", (("shape", None),)),
    "layout_transform": ("data", (("src_layout", "NCHW"), ("dst_layout", "NCHW"))),
    "scatter_nd": ("data indices updates", (("mode", "update"),)),
    "on_device": ("data", (("virtual_device", None), ("constrain_result", True),
                           ("constrain_body", True))),
    "device_copy": ("data", (("src_device", None), ("dst_device", None))),
    "shape_of": ("data", (("dtype", "int32"),)),
})

__all__ = ["nn", "image", "TupleWrapper", "get"] + define_ops(globals(), "", TABLE)
