"""Relay's op namespaces for building graphs: ``relay.add``, ``relay.nn.*``, ``relay.image.*``,
``relay.vision.*``.

Only graph construction: each function returns an AST call node.  The tables
give every function Relay v0.19's Python signature (``python/tvm/relay/op/
tensor.py``, ``transform.py``, ``reduce.py``, ``algorithm.py``), so a script
that built a model with ``tvm.relay`` ports by changing its imports.  Functions
that Relay's Python API composes from several ops (``std``, ``logsumexp``,
``mean_variance``) are composed here the same way.
"""
from __future__ import annotations

import builtins
from typing import Any, Optional

from . import image, nn, vision
from .. import ast
from ..builder import const, get
from ..type_infer import register_type_relation
from ._make import (
    REGISTERED, TupleWrapper, as_expr, default_to, define_ops, dynamic_call, dynamic_form,
    int_as_list, is_dynamic, make_op, registered, tuple_operand,
)

_UNARY = ("log log2 log10 tan cos cosh sin sinh acos acosh asin asinh atan atanh exp erf sqrt "
          "rsqrt sigmoid floor ceil trunc round abs sign tanh negative logical_not bitwise_not "
          "zeros_like ones_like copy isnan isfinite isinf stop_gradient fast_exp fast_tanh "
          "fast_erf")
_BINARY = ("add subtract multiply divide floor_divide trunc_divide power mod floor_mod trunc_mod "
           "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor equal "
           "not_equal less less_equal greater greater_equal maximum minimum right_shift "
           "left_shift")
_REDUCE = "data, axis=None, keepdims=False, exclude=False"
#: v0.19 reduce.py: ``axis = [axis] if isinstance(axis, int) else axis``.
_AXIS_LIST = {"normalise": {"axis": int_as_list}}
#: v0.19 transform.py squeeze / reshape / reverse_reshape / broadcast_to: an int is a list.
_INT_LIST = {name: {"normalise": {name: int_as_list}} for name in ("axis", "newshape", "shape")}


def _stft_window(arguments) -> ast.Expr:
    """v0.19 stft's default window: ``_make.ones([n_fft], "int32")``."""
    return ast.Call(ast.Op("ones"), (), ast.Attrs({"shape": (int(arguments["n_fft"]),),
                                                   "dtype": "int32"}))


#: v0.19 stft filled ``hop_length = n_fft // 4``, ``win_length = n_fft`` and the window
#: before ``_make.stft``; StftAttrs' defaults are -1, so the call always held them.
_STFT = {"always": ("hop_length", "win_length"),
         "normalise": {"hop_length": default_to(lambda a: int(a["n_fft"]) // 4),
                       "win_length": default_to(lambda a: int(a["n_fft"])),
                       "window": default_to(_stft_window)}}

TABLE: dict = {name: ("data", "data") for name in _UNARY.split()}
TABLE.update({name: ("lhs, rhs", "lhs rhs") for name in _BINARY.split()})
TABLE.update({
    # tensor.py
    "clip": ("a, a_min, a_max", "a"),
    "fixed_point_multiply": ("data, multiplier, shift", "data"),
    "einsum": ("data, equation", "*data"),
    "device_copy": ("data, src_device, dst_device", "data"),
    "shape_of": ("data, dtype='int32'", "data", {"always": ("dtype",)}),
    "ndarray_size": ("data, dtype='int32'", "data", {"always": ("dtype",)}),
    # transform.py
    "sliding_window": ("data, axis, window_shape, strides", "data"),
    "cast": ("data, dtype", "data"),
    "cast_like": ("data, dtype_like", "data dtype_like"),
    "reinterpret": ("data, dtype", "data"),
    "expand_dims": ("data, axis, num_newaxis=1", "data"),
    "transpose": ("data, axes=None", "data", {"always": ("axes",)}),
    "squeeze": ("data, axis=None", "data", _INT_LIST["axis"]),
    "reshape": ("data, newshape, allowzero=False", "data", _INT_LIST["newshape"]),
    "argwhere": ("condition", "condition"),
    "scatter_elements": ("data, indices, updates, axis=0, reduction='update'",
                         "data indices updates"),
    "scatter_nd": ("data, indices, updates, mode='update'", "data indices updates"),
    "reshape_like": ("data, shape_like, lhs_begin=0, lhs_end=None, rhs_begin=0, rhs_end=None",
                     "data shape_like"),
    "take": ("data, indices, axis=None, batch_dims=0, mode='clip'", "data indices"),
    "full_like": ("data, fill_value", "data fill_value"),
    "repeat": ("data, repeats, axis", "data"),
    "tile": ("data, reps", "data"),
    "reverse": ("data, axis", "data"),
    "reverse_sequence": ("data, seq_lengths, seq_axis=1, batch_axis=0", "data seq_lengths"),
    "where": ("condition, x, y", "condition x y"),
    "broadcast_to": ("data, shape", "data", _INT_LIST["shape"]),
    "broadcast_to_like": ("data, broadcast_type", "data broadcast_type"),
    "collapse_sum_like": ("data, collapse_type", "data collapse_type"),
    "collapse_sum_to": ("data, shape", "data"),
    "split": ("data, indices_or_sections, axis=0", "data",
              {"tuple_size": lambda attrs, _: (attrs["indices_or_sections"]
                                               if isinstance(attrs["indices_or_sections"], int)
                                               else len(attrs["indices_or_sections"]) + 1)}),
    "slice_like": ("data, shape_like, axes=None", "data shape_like"),
    "layout_transform": ("data, src_layout, dst_layout", "data"),
    "reverse_reshape": ("data, newshape", "data",
                        {"op_name": "contrib_reverse_reshape", **_INT_LIST["newshape"]}),
    "gather": ("data, axis, indices", "data indices"),
    "gather_nd": ("data, indices, batch_dims=0, index_rank=None", "data indices"),
    "sequence_mask": ("data, valid_length, mask_value=0, axis=0", "data valid_length"),
    "one_hot": ("indices, on_value, off_value, depth, axis, dtype",
                "indices on_value off_value"),
    "unravel_index": ("indices, shape", "indices shape"),
    "adv_index": ("inputs", "*inputs"),
    "sparse_fill_empty_rows": ("sparse_indices, sparse_values, dense_shape, default_value",
                               "sparse_indices sparse_values dense_shape default_value",
                               {"tuple_size": 3}),
    "sparse_reshape": ("sparse_indices, prev_shape, new_shape",
                       "sparse_indices prev_shape new_shape", {"tuple_size": 2}),
    "cumsum": ("data, axis=None, dtype=None, exclusive=None", "data"),
    "cumprod": ("data, axis=None, dtype=None, exclusive=None", "data"),
    "invert_permutation": ("data", "data"),
    "stft": ("data, n_fft, hop_length=None, win_length=None, window=None, normalized=False, "
             "onesided=True", "data ?window", _STFT),
    "dft": ("re_data, im_data, inverse=False", "re_data im_data",
            {"tuple_size": 2, "normalise": {"inverse": default_to(lambda _: False)}}),
    # reduce.py
    "sum": (_REDUCE, "data", _AXIS_LIST), "all": (_REDUCE, "data", _AXIS_LIST),
    "any": (_REDUCE, "data", _AXIS_LIST), "max": (_REDUCE, "data", _AXIS_LIST),
    "min": (_REDUCE, "data", _AXIS_LIST), "mean": (_REDUCE, "data", _AXIS_LIST),
    "prod": (_REDUCE, "data", _AXIS_LIST),
    "argmax": (_REDUCE + ", select_last_index=False", "data", _AXIS_LIST),
    "argmin": (_REDUCE + ", select_last_index=False", "data", _AXIS_LIST),
    # algorithm.py
    "sort": ("data, axis=-1, is_ascend=1", "data"),
    "argsort": ("data, axis=-1, is_ascend=1, dtype='int32'", "data"),
    "searchsorted": ("sorted_sequence, values, right=False, dtype='int32'",
                     "sorted_sequence values"),
    # annotation.py
    "on_device": ("body, device=None, constrain_result=False, constrain_body=True", "body"),
    "stop_fusion": ("data", "data", {"op_name": "annotation.stop_fusion"}),
    # annotation.py: relay.annotation.checkpoint / compiler_begin / compiler_end;
    # cast_hint, fixed_point_multiply_per_axis: v0.19's _make.* only; op.py: debug
    "checkpoint": ("data", "data", {"op_name": "annotation.checkpoint"}),
    "compiler_begin": ("data, compiler", "data", {"op_name": "annotation.compiler_begin"}),
    "compiler_end": ("data, compiler", "data", {"op_name": "annotation.compiler_end"}),
    "cast_hint": ("data, dtype", "data", {"op_name": "annotation.cast_hint"}),
    "debug": ("expr, debug_func=None", "expr"),
    "fixed_point_multiply_per_axis": ("x, m, lshift, rshift, is_lshift_required, "
                                      "is_rshift_required, axes", "x m lshift rshift"),
})

__all__ = ["nn", "image", "vision", "TupleWrapper", "get", "registered_ops"] + \
    define_ops(globals(), "", TABLE)

@registered("matrix_set_diag")
def matrix_set_diag(data, diagonal, k=0, align="RIGHT_LEFT"):
    """Relay ``matrix_set_diag``: v0.19's builder turned the band ``k`` and ``align`` into
    the call's fields ``k1``, ``k2``, ``super_diag_right_align``, ``sub_diag_right_align``
    (what its printer, patterns and the importer read)."""
    k1, k2 = (k[0], k[1] if len(k) >= 2 else k[0]) if isinstance(k, (tuple, list)) else (k, k)
    attrs = {"k1": int(k1), "k2": int(k2), "super_diag_right_align": align[:5] == "RIGHT",
             "sub_diag_right_align": align[-5:] == "RIGHT"}
    return ast.Call(ast.Op("matrix_set_diag"), (as_expr(data, "matrix_set_diag data"),
                                                 as_expr(diagonal, "matrix_set_diag diagonal")),
                    ast.Attrs(attrs))


@registered("unique")
def unique(data, is_sorted=True, return_counts=False):
    """Relay ``unique``: (output, indices, inverse_indices, num_unique[, counts])."""
    call = ast.Call(ast.Op("unique"), (as_expr(data, "unique data"),),
                    ast.Attrs({"sorted": bool(is_sorted), "return_counts": bool(return_counts)}))
    return TupleWrapper(call, 5 if return_counts else 4)


# ------------------------------------------------------------------ Python-side logic
def _shape_list(shape: Any) -> Any:
    if isinstance(shape, ast.Constant) and shape.data is not None:
        return tuple(int(v) for v in shape.data.reshape(-1))
    if isinstance(shape, int):
        return (shape,)
    if isinstance(shape, (list, tuple)):
        return tuple(int(d) if not hasattr(d, "ty") else d for d in shape)
    return shape


#: ``dyn.*`` op -> the builder function that makes it for a run-time shape / size.
DYNAMIC_FORMS = {"dyn.zeros": "zeros", "dyn.ones": "ones", "dyn.full": "full",
                 "dyn.reshape": "reshape", "dyn.broadcast_to": "broadcast_to",
                 "dyn.tile": "tile", "dyn.strided_slice": "strided_slice", "dyn.topk": "topk",
                 "dyn.one_hot": "one_hot", "dyn.squeeze": "squeeze",
                 "dyn.expand_dims": "expand_dims", "dyn.sparse_to_dense": "sparse_to_dense",
                 "dyn.nn.pad": "nn.pad", "dyn.nn.upsampling": "nn.upsampling",
                 "dyn.nn.upsampling3d": "nn.upsampling3d",
                 "dyn.image.resize2d": "image.resize2d"}


@registered("zeros")
def zeros(shape, dtype):
    """Relay ``zeros``: a tensor of zeros (``shape`` int, list or constant)."""
    if is_dynamic(shape):
        return dynamic_call("zeros", (shape,), {"dtype": str(dtype)})
    return ast.Call(ast.Op("zeros"), (), ast.Attrs({"shape": _shape_list(shape),
                                                     "dtype": str(dtype)}))


@registered("ones")
def ones(shape, dtype):
    """Relay ``ones``: a tensor of ones."""
    if is_dynamic(shape):
        return dynamic_call("ones", (shape,), {"dtype": str(dtype)})
    return ast.Call(ast.Op("ones"), (), ast.Attrs({"shape": _shape_list(shape),
                                                    "dtype": str(dtype)}))


@registered("full")
def full(fill_value, shape=(), dtype=""):
    """Relay ``full``: ``fill_value`` (a scalar operand) broadcast to ``shape``."""
    if is_dynamic(shape):
        return dynamic_call("full", (fill_value, shape), {"dtype": str(dtype)} if dtype else {})
    attrs = {"shape": _shape_list(shape)}
    if dtype:
        attrs["dtype"] = str(dtype)
    return ast.Call(ast.Op("full"), (as_expr(fill_value, "full fill_value"),), ast.Attrs(attrs))


@registered("arange")
def arange(start, stop=None, step=None, dtype="float32"):
    """Relay ``arange``: one argument is ``stop`` (start 0), step defaults to 1."""
    if step is None:
        step = const(1, dtype=dtype)
    if stop is None:
        stop, start = start, const(0, dtype=dtype)
    operands = tuple(as_expr(v, "arange", dtype) for v in (start, stop, step))
    return ast.Call(ast.Op("arange"), operands, ast.Attrs({"dtype": str(dtype)}))


@registered("concatenate")
def concatenate(data, axis):
    """Relay ``concatenate`` of a list of tensors (or a tuple-typed expression)."""
    if isinstance(data, (list, tuple)) and not data:
        raise ValueError("relay.concatenate requires data to be non-empty.")
    if not isinstance(axis, int):
        raise ValueError("For now, we only support integer axis")
    return ast.Call(ast.Op("concatenate"), (tuple_operand(data, "concatenate data"),),
                    ast.Attrs({"axis": axis}))


@registered("stack")
def stack(data, axis):
    """Relay ``stack`` of a list of tensors or of any tuple-typed expression (a let-bound
    tuple, a call returning a tuple)."""
    if isinstance(data, (list, tuple)) and not data:
        raise ValueError("relay.stack requires data to be non-empty.")
    if not isinstance(axis, int):
        raise ValueError("For now, we only support integer axis")
    return ast.Call(ast.Op("stack"), (tuple_operand(data, "stack data"),),
                    ast.Attrs({"axis": axis}))


@registered("meshgrid")
def meshgrid(data, indexing="ij"):
    """Relay ``meshgrid``: one grid per input vector (a TupleWrapper)."""
    operand = tuple_operand(data, "meshgrid data")
    size = len(operand.fields) if isinstance(operand, ast.Tuple) else None
    call = ast.Call(ast.Op("meshgrid"), (operand,), ast.Attrs({"indexing": indexing}))
    return TupleWrapper(call, size)


@registered("strided_slice")
def strided_slice(data, begin, end, strides=None, axes=None, slice_mode="end"):
    """Relay ``strided_slice`` (static ``begin``/``end``/``strides``; run-time ones make
    ``dyn.strided_slice``, as Relay's builder did).  v0.19 began with ``strides =
    strides or [1]``, so its static calls always held ``strides`` (StridedSliceAttrs has
    no default for it)."""
    if strides is None or (isinstance(strides, (list, tuple)) and not strides):
        strides = [1]
    if builtins.any(is_dynamic(v) for v in (begin, end, strides)):  # `any` is Relay's op here
        bounds = [v if isinstance(v, ast.Expr) else const(list(v), dtype="int64")
                  for v in (begin, end, strides)]
        return dynamic_call("strided_slice", (data, *bounds), {"slice_mode": slice_mode})
    attrs = {"begin": _shape_list(begin), "end": _shape_list(end),
             "strides": _shape_list(strides)}
    if axes is not None:
        attrs["axes"] = _shape_list(axes)
    if slice_mode != "end":
        attrs["slice_mode"] = slice_mode
    return ast.Call(ast.Op("strided_slice"), (as_expr(data, "strided_slice data"),),
                    ast.Attrs(attrs))


@registered("strided_set")
def strided_set(data, v, begin, end, strides=None):
    """Relay ``strided_set``: ``begin``/``end``/``strides`` are tensor operands."""
    strides = strides if strides is not None else const([1], dtype="int32")
    operands = [as_expr(data, "strided_set data"), as_expr(v, "strided_set v")]
    operands += [as_expr(list(x) if isinstance(x, tuple) else x, "strided_set", "int64"
                         if not isinstance(x, ast.Expr) else None)
                 for x in (begin, end, strides)]
    return ast.Call(ast.Op("strided_set"), tuple(operands))


@registered("trilu")
def trilu(data, k, upper=True):
    """Relay ``trilu``: ``k`` is an int32 scalar operand."""
    k = k if isinstance(k, ast.Expr) else const(k, dtype="int32")
    return ast.Call(ast.Op("trilu"), (as_expr(data, "trilu data"), k),
                    ast.Attrs({"upper": bool(upper)}))


@registered("sparse_to_dense")
def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0):
    """Relay ``sparse_to_dense``: ``default_value`` is a scalar operand."""
    if default_value == 0 and not isinstance(default_value, ast.Expr):
        default_value = const(0)
    operands = (as_expr(sparse_indices, "sparse_to_dense"), as_expr(sparse_values,
                "sparse_to_dense"), as_expr(default_value, "sparse_to_dense"))
    return ast.Call(ast.Op("sparse_to_dense"), operands,
                    ast.Attrs({"output_shape": _shape_list(output_shape)}))


# ------------------------------------------------------------------ reductions composed in Python
def _axis_list(axis: Any) -> Any:
    """v0.19 reduce.py's ``axis = [axis] if isinstance(axis, int) else axis``."""
    return int_as_list(axis)


def _variance_call(data, mean_value, axis, keepdims, exclude, unbiased) -> ast.Call:
    attrs = {"axis": None if axis is None else tuple(axis), "keepdims": bool(keepdims),
             "exclude": bool(exclude), "unbiased": bool(unbiased)}
    return ast.Call(ast.Op("variance"), (data, mean_value), ast.Attrs(attrs))


@registered("variance")
def variance(data, axis=None, keepdims=False, exclude=False, unbiased=False, with_mean=None):
    """Relay ``variance``: the mean is computed here (or given as ``with_mean``)."""
    data = as_expr(data, "variance data")
    axis = _axis_list(axis)
    m = globals()["mean"](data, axis, True, exclude) if with_mean is None else with_mean
    return _variance_call(data, m, axis, keepdims, exclude, unbiased)


@registered("std", "variance")
def std(data, axis=None, keepdims=False, exclude=False, unbiased=False):
    """Relay ``std``: ``sqrt`` of the variance about the mean."""
    data = as_expr(data, "std data")
    axis = _axis_list(axis)
    m = globals()["mean"](data, axis, True, exclude)
    return globals()["sqrt"](_variance_call(data, m, axis, keepdims, exclude, unbiased))


@registered("mean_variance", "variance")
def mean_variance(data, axis=None, keepdims=False, exclude=False, unbiased=False):
    """Relay ``mean_variance``: the tuple (mean, variance)."""
    data = as_expr(data, "mean_variance data")
    axis = _axis_list(axis)
    m = globals()["mean"](data, axis, True, exclude)
    var = _variance_call(data, m, axis, keepdims, exclude, unbiased)
    if not keepdims:
        m = globals()["squeeze"](m, axis=axis)
    return TupleWrapper(ast.Tuple((m, var)), 2)


@registered("mean_std", "variance")
def mean_std(data, axis=None, keepdims=False, exclude=False):
    """Relay ``mean_std``: the tuple (mean, standard deviation)."""
    data = as_expr(data, "mean_std data")
    axis = _axis_list(axis)
    m = globals()["mean"](data, axis, True, exclude)
    s = globals()["sqrt"](_variance_call(data, m, axis, keepdims, exclude, False))
    if not keepdims:
        m = globals()["squeeze"](m)
    return TupleWrapper(ast.Tuple((m, s)), 2)


@registered("logsumexp", "max")
def logsumexp(data, axis=None, keepdims=False):
    """Relay ``logsumexp``: ``log(sum(exp(x - max))) + max``, composed as Relay's Python API."""
    data = as_expr(data, "logsumexp data")
    axis = _axis_list(axis)
    max_x = globals()["max"](data, axis, True)
    sum_x = globals()["sum"](globals()["exp"](data - max_x), axis, True)
    out = globals()["log"](sum_x) + max_x
    if not keepdims:
        out = globals()["squeeze"](out, axis)
    return out


@registered("segment_sum", "scatter_elements")
def segment_sum(data, segment_ids, num_segments=None):
    """Relay ``segment_sum``: ``out[segment_ids[i]] += data[i]`` into ``num_segments``
    rows (default ``max(segment_ids) + 1``, known only at run time).

    Relay's Python API composed it from ``dyn.zeros``/``dyn.tile`` over
    ``shape_of(data)``; here it is composed from static-rank ops instead (a
    run-time ``arange`` gives the dynamic row count), so ``data`` needs a known
    rank: its type must be inferable when the call is built.
    """
    from ..type_infer import TypeInferencer

    data = as_expr(data, "segment_sum data")
    ids = as_expr(segment_ids, "segment_sum segment_ids")
    data_type = TypeInferencer(ast.IRModule({})).infer(data)
    if not isinstance(data_type, ast.TensorType) or not data_type.shape:
        raise TypeError("segment_sum: data must be a tensor of known rank (annotate it)")
    g = globals()
    trail = [1] * (len(data_type.shape) - 1)
    ids_col = g["reshape"](ids, [-1] + trail)
    updates = g["slice_like"](data, ids_col, axes=[0])  # the rows that have an id
    indices = g["broadcast_to_like"](ids_col, updates)
    first = g["zeros_like"](g["sum"](data, axis=[0], keepdims=True))  # (1, rest): a row
    if isinstance(num_segments, int):
        base = g["repeat"](first, num_segments, 0)
    else:
        if num_segments is None:
            rows = g["max"](ids) + g["cast_like"](const(1), ids)
        else:
            rows = g["reshape"](as_expr(num_segments, "segment_sum num_segments"), [])
        ramp = g["arange"](const(0, "int32"), rows, const(1, "int32"), dtype="int32")
        column = g["zeros_like"](g["cast_like"](g["reshape"](ramp, [-1] + trail), data))
        base = column * first
    return g["scatter_elements"](base, indices, updates, axis=0, reduction="add")


@registered("topk")
def topk(data, k=1, axis=-1, ret_type="both", is_ascend=False, dtype="int32"):
    """Relay ``topk``: a (values, indices) TupleWrapper for ``ret_type="both"``."""
    if isinstance(k, ast.Constant) and k.data is not None:
        k = int(k.data)
    attrs = {"k": k, "axis": axis, "ret_type": ret_type, "is_ascend": bool(is_ascend),
             "dtype": dtype}
    if is_dynamic(k):
        del attrs["k"]
        call = dynamic_call("topk", (data, k), attrs)
    else:
        call = ast.Call(ast.Op("topk"), (as_expr(data, "topk data"),), ast.Attrs(attrs))
    return TupleWrapper(call, 2) if ret_type == "both" else call


def reshape_like_shape(lhs: list, rhs: list, attrs) -> list:
    """Relay's ReshapeLike: ``lhs[:lhs_begin] + rhs[rhs_begin:rhs_end] + lhs[lhs_end:]``
    (ends ``None`` = to the end, negative indices count from the end)."""
    def span(dims, begin_key, end_key):
        begin = attrs.get(begin_key) or 0
        end = attrs.get(end_key)
        begin = begin + len(dims) if begin < 0 else begin
        end = len(dims) if end is None else (end + len(dims) if end < 0 else end)
        return begin, end

    lhs_begin, lhs_end = span(lhs, "lhs_begin", "lhs_end")
    rhs_begin, rhs_end = span(rhs, "rhs_begin", "rhs_end")
    return list(lhs[:lhs_begin]) + list(rhs[rhs_begin:rhs_end]) + list(lhs[lhs_end:])


@register_type_relation("reshape_like")
def _reshape_like_type(arg_types, attrs, call):
    """Relay's ReshapeLikeRel: the spliced shape; sizes must agree when both are static
    (a symbolic lhs is taken on trust, as Relay's AssertEQ deferred it)."""
    data, like = arg_types
    shape = reshape_like_shape(list(data.shape), list(like.shape), attrs)

    def size(dims):
        total = 1
        for d in dims:
            if not isinstance(d, int):
                return None
            total *= d
        return total

    if size(data.shape) is not None and size(shape) is not None \
            and size(data.shape) != size(shape):
        raise ValueError(f"reshape_like of a {tuple(data.shape)} tensor to {tuple(shape)}: "
                         "the sizes differ")
    return ast.TensorType(tuple(shape), data.dtype)


@register_type_relation("unique")
def _unique_type(arg_types, attrs, call):
    """Relay's UniqueRel: every output at the input's length, int32 indices and counts."""
    data = arg_types[0]
    if len(data.shape) != 1:
        raise ValueError("unique takes a 1-d tensor")
    vector = ast.TensorType(data.shape, "int32")
    fields = [ast.TensorType(data.shape, data.dtype), vector, vector,
              ast.TensorType((1,), "int32")]
    if attrs.get("return_counts", False):
        fields.append(vector)
    return ast.TupleType(tuple(fields))


def split_problem(sections, dim) -> Optional[str]:
    """What Relay's SplitRel refused in a split of an axis of extent ``dim`` (an int, or
    anything else for a symbolic one) into ``sections`` (a count, or the split indices),
    None when it accepts it: a count below 1 or one that does not divide the extent;
    indices not strictly ascending from above 0, or not inside the extent.  The one
    statement of the rule: the builder's type inference and the importer both ask it."""
    if isinstance(sections, int):
        if sections < 1:
            return f"indices_or_sections={sections} must be at least 1"
        if isinstance(dim, int) and dim % sections:
            return f"indices_or_sections={sections} must divide the axis' extent {dim}"
        return None
    sections = [int(i) for i in sections]
    # (not any(): this module defines Relay's `any` op under that name)
    if [b for a, b in zip([0] + sections, sections) if b <= a]:
        return (f"indices_or_sections {sections} must be a sorted ascending list of "
                "positive indices")
    if isinstance(dim, int) and sections and sections[-1] >= dim:
        return f"split indices {sections} must lie inside the axis' extent {dim}"
    return None


@register_type_relation("split")
def _split_type(arg_types, attrs, call):
    """Relay's SplitRel: ``n`` sections are ``dim // n`` each (``dim`` must divide), split
    indices give their differences and ``dim - last``, symbolic dims kept as written."""
    data = arg_types[0]
    ndim = len(data.shape)
    axis = int(attrs.get("axis", 0))
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-d input")
    axis %= ndim
    dim = data.shape[axis]
    sections = attrs["indices_or_sections"]
    problem = split_problem(sections, dim)
    if problem is not None:
        raise ValueError(problem)

    def with_dim(value):
        shape = list(data.shape)
        shape[axis] = value
        return ast.TensorType(tuple(shape), data.dtype)

    if isinstance(sections, int):
        part = None if dim is None else dim // sections
        return ast.TupleType(tuple(with_dim(part) for _ in range(sections)))
    fields, begin = [], 0
    for index in (int(i) for i in sections):
        fields.append(with_dim(index - begin))
        begin = index
    fields.append(with_dim(None if dim is None else dim - begin))
    return ast.TupleType(tuple(fields))


def registered_ops() -> dict[str, str]:
    """Every builder function (``"nn.conv2d"``, ``"vision.roi_align"``, ...) and the Relay op
    its call node uses, for ``bmlib-relax list-ops``."""
    return dict(sorted(REGISTERED.items()))


__all__ += ["unique", "zeros", "ones", "full", "arange", "concatenate", "stack", "meshgrid",
            "strided_slice", "strided_set", "trilu", "sparse_to_dense",
            "variance", "std", "mean_variance", "mean_std", "logsumexp", "topk", "segment_sum",
            "matrix_set_diag"]


dynamic_form(globals(), "reshape", "newshape", lambda a: dynamic_call(
    "reshape", (a["data"], a["newshape"]), {"allowzero": bool(a.get("allowzero", False))}))
dynamic_form(globals(), "broadcast_to", "shape", lambda a: dynamic_call(
    "broadcast_to", (a["data"], a["shape"]), {}))
dynamic_form(globals(), "tile", "reps", lambda a: dynamic_call(
    "tile", (a["data"], a["reps"]), {}))
dynamic_form(globals(), "one_hot", "depth", lambda a: dynamic_call(
    "one_hot", (a["indices"], a["on_value"], a["off_value"], a["depth"]),
    {"axis": a.get("axis", -1), "dtype": a.get("dtype", "float32")}))
dynamic_form(globals(), "squeeze", "axis", lambda a: dynamic_call(
    "squeeze", (a["data"], a["axis"]), {}))
dynamic_form(globals(), "expand_dims", "axis", lambda a: dynamic_call(
    "expand_dims", (a["data"], a["axis"]), {"num_newaxis": int(a["num_newaxis"])}))
dynamic_form(globals(), "sparse_to_dense", "output_shape", lambda a: dynamic_call(
    "sparse_to_dense", (a["sparse_indices"], a["sparse_values"],
                        a["default_value"] if isinstance(a["default_value"], ast.Expr)
                        else const(a["default_value"]), a["output_shape"]), {}))


@register_type_relation("nn.sparse_dense")
def _sparse_dense_type(arg_types, attrs, call):
    """v0.19's SparseDenseRel: ``(dense rows, sparse rows)`` (``sparse_lhs``: the other
    way round) in the dense operand's dtype; the sparse rows are ``len(indptr) - 1``,
    times the block rows of BSR (3-d) data."""
    dense, data, _, indptr = arg_types
    if len(data.shape) not in (1, 3):
        raise ValueError(f"the sparse data is {len(data.shape)}-d: CSR data is 1-d, BSR 3-d")
    if len(dense.shape) != 2 or len(indptr.shape) != 1:
        raise ValueError("sparse_dense takes a 2-d dense operand and a 1-d indptr")
    rows = indptr.shape[0] - 1 if isinstance(indptr.shape[0], int) else None
    if rows is not None and len(data.shape) == 3 and isinstance(data.shape[1], int):
        rows *= data.shape[1]
    shape = (rows, dense.shape[0]) if attrs.get("sparse_lhs", False) else \
        (dense.shape[0], rows)
    return ast.TensorType(shape, dense.dtype)


@register_type_relation("nn.sparse_add")
def _sparse_add_type(arg_types, attrs, call):
    """v0.19's SparseAddRel: the dense operand's type; 1-d sparse data and indices of its
    dtype."""
    dense, data, indices, _ = arg_types
    if data.dtype != dense.dtype or len(data.shape) != 1 or len(indices.shape) != 1:
        raise ValueError("sparse_add takes 1-d sparse data and indices, the data in the dense "
                         "operand's dtype")
    return ast.TensorType(tuple(dense.shape), dense.dtype)


@register_type_relation("nn.sparse_transpose")
def _sparse_transpose_type(arg_types, attrs, call):
    """v0.19's SparseTransposeRel: the three arrays keep their types (a square matrix)."""
    data, indices, indptr = arg_types
    if len(data.shape) != 1 or len(indices.shape) != 1:
        raise ValueError("sparse_transpose takes 1-d CSR data and indices")
    return ast.TupleType((data, indices, indptr))
