"""Each Relay op's attribute fields, their value kinds and its number of arguments.

Relay gave every op an attrs type with fixed, typed fields (``ReduceAttrs``: ``axis``,
``keepdims``, ``exclude``) and a fixed number of inputs, and its parser rejected a call
with an unknown field (``ReduceAttrs: does not have field 'axes'``), a value of the
wrong type (``keepdims="False"``, ``axis=[1.5]``) or a wrong argument count.  Accepting
those silently gives plausible-looking wrong results (a misspelt ``axes`` sums every
axis), so the importer checks every call against the schema here, for every op alike.

The schemas are not restated per op: the builder API (:mod:`bmlib_relax.relay.op`)
already declares each op with Relay's Python signature and its operands
(:data:`~bmlib_relax.relay.op._make.SIGNATURES`).  A parameter that is not an operand
is an attribute; its Python default gives its kind (``keepdims=False``: a bool).  Only
what those signatures cannot say is listed here: ops whose builder is written by hand,
fields the C++ attrs have but the Python API does not take (``on_device``'s
``virtual_device``), and the kinds of attributes whose default is ``None``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from . import ast


# --------------------------------------------------------------------------- text defaults
#: Attributes whose C++ default (``set_default`` in v0.19's ``include/tvm/relay/attrs``)
#: the importer and the Relay views must use when a call leaves them out.  v0.19's
#: printer wrote only non-default attributes, so its text omits exactly these values;
#: listed are those whose C++ default differs from the Python API's (``nn.lrn`` alpha
#: 1e-4, not 1e-5) or that the Python API required (``nn.correlation``'s fields).
TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "nn.leaky_relu": {"alpha": 0.25},
    "qnn.leaky_relu": {"alpha": 0.25},
    "nn.lrn": {"alpha": 1e-4},
    "nn.batch_matmul": {"transpose_a": False, "transpose_b": False},
    "qnn.batch_matmul": {"transpose_a": False, "transpose_b": False},
    "qnn.avg_pool2d": {"layout": "NCHW", "count_include_pad": False},
    "image.resize1d": {"rounding_method": "round"},
    "image.resize2d": {"rounding_method": "round"},
    "image.resize3d": {"rounding_method": "round"},
    "nn.correlation": {"kernel_size": 1, "max_displacement": 1, "stride1": 1, "stride2": 1,
                       "padding": (0, 0), "is_multiply": True, "layout": "NCHW"},
    "nn.depth_to_space": {"block_size": 1},
    "nn.space_to_depth": {"block_size": 1},
    "nn.space_to_batch_nd": {"block_shape": (1, 1)},
    "nn.batch_to_space_nd": {"block_shape": (1, 1)},
    "vision.yolo_reorg": {"stride": 1},
    "one_hot": {"depth": 1},
    "nn.contrib_conv2d_NCHWc": {"data_layout": "NCHW", "kernel_layout": "OIHW"},
    "nn.contrib_depthwise_conv2d_NCHWc": {"data_layout": "NCHW", "kernel_layout": "OIHW"},
}


def with_text_defaults(op_name: str, attrs: ast.Attrs) -> ast.Attrs:
    """``attrs`` with the :data:`TEXT_DEFAULTS` of ``op_name`` it leaves out filled in."""
    defaults = TEXT_DEFAULTS.get(op_name)
    if not defaults or all(key in attrs for key in defaults):
        return attrs
    return ast.Attrs({**{k: v for k, v in defaults.items() if k not in attrs}, **attrs})


# --------------------------------------------------------------------------- value kinds
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating))


def _is_int(value: Any) -> bool:
    """An int, or a symbolic dim (a builder's ``te.var``): anything but a float, a string
    or a list."""
    return not isinstance(value, (float, np.floating, str, tuple, list))


def _is_ints(value: Any) -> bool:
    """An int or a (nested) list of ints: Relay's ``Array<Integer>`` fields (a single int
    is taken too, as the converters and the builder always have)."""
    if isinstance(value, (tuple, list)):
        return all(v is None or _is_ints(v) for v in value)
    return _is_int(value)


def _is_floats(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_is_floats(v) for v in value)
    return _is_number(value)


@dataclass(frozen=True)
class Kind:
    """A kind of attribute value: its description (for messages) and its test."""

    name: str
    accepts: Callable[[Any], bool]


BOOL = Kind("a bool", lambda v: isinstance(v, (bool, int, np.integer)))
INT = Kind("an integer", _is_int)
INTS = Kind("an integer or a list of integers", _is_ints)
FLOAT = Kind("a number", lambda v: _is_number(v) and not isinstance(v, bool))
FLOATS = Kind("a number or a list of numbers", _is_floats)
STR = Kind("a string", lambda v: isinstance(v, str))
ANY = Kind("any value", lambda v: True)

# Attributes that are arrays even where a Python default is a plain int (``conv1d``'s
# ``strides=1``): Relay's fields are ``Array<IndexExpr>``.
_ARRAY_NAMES = frozenset(
    "strides padding dilation pool_size kernel_size output_padding output_size pad_width "
    "shape newshape reps begin end axes window_shape output_shape indices_or_sections "
    "size".split())

# Attributes that are ``double`` in C++ where a Python default is an int
# (``nn.upsampling``'s ``scale_h=1``): an int or a float is accepted.
_FLOAT_NAMES = frozenset(
    "scale_h scale_w scale_d bias extrapolation_value pad_value mask_value dilation_value "
    "spatial_scale iou_threshold score_threshold threshold eps a_min a_max rate epsilon "
    "alpha".split())

# Kinds of attributes whose Python default is ``None`` or absent, by field name.
_KIND_BY_NAME: dict[str, Kind] = {
    **dict.fromkeys(_ARRAY_NAMES, INTS),
    "axis": INTS,  # ``Optional<Array<Integer>>`` in reductions, an int elsewhere
    "roi": FLOATS,
    **dict.fromkeys("channels units num_newaxis depth repeats batch_dims tile_size k "
                    "lhs_end rhs_end num_groups block_size".split(), INT),
    "exclusive": BOOL,
    **dict.fromkeys("dtype out_dtype in_dtype layout data_layout kernel_layout out_layout "
                    "src_layout dst_layout method mode equation".split(), STR),
}

#: Ops whose builder is written by hand: ``(signature, operands)`` of the text format, as
#: in :func:`~bmlib_relax.relay.op._make.make_op` (the fields of the C++ attrs type).
TEXT_SIGNATURES: dict[str, tuple[str, str]] = {
    "unique": ("data, sorted=True, return_counts=False", "data"),
    "zeros": ("shape=None, dtype=''", ""),
    "ones": ("shape=None, dtype=''", ""),
    "full": ("fill_value, shape=None, dtype=''", "fill_value"),
    # the dyn.* forms Relay's builder made for a run-time shape (relay.zeros(s), ...)
    "dyn.zeros": ("shape, dtype=''", "shape"),
    "dyn.ones": ("shape, dtype=''", "shape"),
    "dyn.full": ("fill_value, shape, dtype=''", "fill_value shape"),
    "dyn.reshape": ("data, newshape, allowzero=False", "data newshape"),
    # the other dyn.* ops of v0.19 (operands named ``x_`` where the attrs type keeps an
    # unset field ``x``, printed ``x=None``)
    "dyn.broadcast_to": ("data, shape_, shape=None, dtype=''", "data shape_"),
    "dyn.tile": ("data, reps_, reps=None", "data reps_"),
    "dyn.squeeze": ("data, axes, axis=None", "data axes"),
    "dyn.expand_dims": ("data, axis, num_newaxis=1", "data axis"),
    "dyn.strided_slice": ("data, begin_, end_, strides_, begin=None, end=None, strides=None, "
                          "axes=None, slice_mode='end'", "data begin_ end_ strides_"),
    "dyn.topk": ("data, k_, k=None, axis=-1, ret_type='both', is_ascend=False, dtype=''",
                 "data k_"),
    "dyn.one_hot": ("indices, on_value, off_value, depth_, depth=1, axis=-1, dtype=''",
                    "indices on_value off_value depth_"),
    "dyn.sparse_to_dense": ("sparse_indices, sparse_values, default_value, output_shape_, "
                            "output_shape=None",
                            "sparse_indices sparse_values default_value output_shape_"),
    "dyn.nn.pad": ("data, pad_width_, pad_value, pad_width=None, pad_mode='constant'",
                   "data pad_width_ pad_value"),
    "dyn.nn.upsampling": ("data, scale_h_, scale_w_, scale_h=1.0, scale_w=1.0, layout='NCHW', "
                          "method='nearest_neighbor', align_corners=False",
                          "data scale_h_ scale_w_"),
    "dyn.nn.upsampling3d": ("data, scale_d_, scale_h_, scale_w_, scale_d=1.0, scale_h=1.0, "
                            "scale_w=1.0, layout='NCDHW', method='nearest_neighbor', "
                            "coordinate_transformation_mode='half_pixel'",
                            "data scale_d_ scale_h_ scale_w_"),
    "dyn.image.resize2d": ("data, size_, roi_, size=None, roi=None, layout='NCHW', "
                           "method='linear', coordinate_transformation_mode='half_pixel', "
                           "rounding_method='', cubic_alpha=-0.5, cubic_exclude=0, "
                           "extrapolation_value=0.0, out_dtype=''", "data size_ roi_"),
    # ArangeAttrs keeps start/stop/step fields besides the operands.
    "arange": ("start_, stop_, step_, start=None, stop=None, step=None, dtype=''",
               "start_ stop_ step_"),
    "concatenate": ("data, axis=0", "*data"),
    "stack": ("data, axis=0", "*data"),
    "meshgrid": ("data, indexing='ij'", "*data"),
    "strided_slice": ("data, begin=None, end=None, strides=None, axes=None, slice_mode='end'",
                      "data"),
    "strided_set": ("data, v, begin, end, strides", "data v begin end strides"),
    "trilu": ("data, k, upper=True", "data k"),
    "sparse_to_dense": ("sparse_indices, sparse_values, default_value, output_shape=None",
                        "sparse_indices sparse_values default_value"),
    "variance": ("data, mean, axis=None, keepdims=False, exclude=False, unbiased=False",
                 "data mean"),
    # MatrixSetDiagAttrs: the builder's k/align become these fields (v0.19's Python)
    "matrix_set_diag": ("data, diagonal, k1=0, k2=0, super_diag_right_align=True, "
                        "sub_diag_right_align=False", "data diagonal"),
    "topk": ("data, k=None, axis=-1, ret_type='both', is_ascend=False, dtype=''", "data"),
    "nn.pad": ("data, pad_value, pad_width=None, pad_mode='constant'", "data pad_value"),
    "vision.get_valid_counts": ("data, threshold, score_threshold=None, id_index=0, "
                                "score_index=1", "data threshold"),
    "vision.non_max_suppression": (
        "data, valid_count, indices, max_output_size, iou_threshold, force_suppress=False, "
        "top_k=-1, coord_start=2, score_index=1, id_index=0, return_indices=True, "
        "invalid_to_bottom=False", "data valid_count indices max_output_size iou_threshold"),
    "vision.all_class_non_max_suppression": (
        "boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold, "
        "output_format='onnx'",
        "boxes scores max_output_boxes_per_class iou_threshold score_threshold"),
    "vision.regular_non_max_suppression": (
        "boxes, scores, max_detections_per_class=None, max_detections=None, num_classes=None, "
        "iou_threshold=None, score_threshold=None", "boxes scores"),
}

_LAYOUT_REWRITE = {"auto_scheduler_rewritten_layout": STR, "meta_schedule_original_shape": ANY}

#: Fields of the C++ attrs types that the Python API does not take (TVM's printer emits
#: them), per op.
EXTRA_FIELDS: dict[str, dict[str, Kind]] = {
    "device_copy": {"src_virtual_device": ANY, "dst_virtual_device": ANY},
    "on_device": {"virtual_device": ANY},
    **{op: _LAYOUT_REWRITE for op in (
        "nn.conv1d nn.conv2d nn.conv3d nn.conv1d_transpose nn.conv2d_transpose "
        "nn.conv3d_transpose nn.contrib_conv2d_NCHWc nn.contrib_depthwise_conv2d_NCHWc "
        "nn.contrib_conv2d_winograd_without_weight_transform "
        "nn.contrib_conv3d_winograd_without_weight_transform nn.dense nn.matmul "
        "nn.batch_matmul qnn.conv2d qnn.dense qnn.batch_matmul").split()},
}


@dataclass(frozen=True)
class OpSchema:
    """What a call of one Relay op may carry: its attribute fields and argument count."""

    op: str
    fields: Mapping[str, Kind]
    operands: tuple[str, ...]  # names, in argument order
    min_args: int
    tuple_operands: frozenset = frozenset()  # positions that take a tuple (``*data``)

    @property
    def max_args(self) -> int:
        return len(self.operands)

    def tuple_given_for_tensor(self, is_tuple: Sequence[bool]) -> Optional[str]:
        """The message for the first argument that is a tuple where the op takes a tensor
        (``unravel_index(%i, (3, 4))``: Relay's type relation refused it), else None."""
        for index, given_tuple in enumerate(is_tuple):
            if given_tuple and index not in self.tuple_operands and index < len(self.operands):
                return (f"argument {index} ({self.operands[index]}) is a tuple; this op takes "
                        "a tensor there")
        return None

    def check(self, attrs: Mapping[str, Any], num_args: int) -> Optional[str]:
        """The first problem of a call (its message), else None."""
        if not self.min_args <= num_args <= self.max_args:
            want = str(self.max_args) if self.min_args == self.max_args else \
                f"{self.min_args} to {self.max_args}"
            names = f" ({', '.join(self.operands)})" if self.operands else ""
            return f"expects {want} argument(s){names}, got {num_args}"
        for key, value in attrs.items():
            kind = self.fields.get(key)
            if kind is None:
                known = ", ".join(self.fields) if self.fields else "none"
                return f"unknown attribute {key!r} (this op's attributes: {known})"
            if value is None or isinstance(value, ast.MetaRef) or kind.accepts(value):
                continue
            return (f"attribute {key}={_shown(value)}: expected {kind.name}, got "
                    f"{_kind_of(value)}")
        return None


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return repr(value)


def _kind_of(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (float, np.floating)):
        return "a float"
    if isinstance(value, tuple):
        return "a list holding " + ", ".join(sorted({_kind_of(v) for v in value})) \
            if value else "an empty list"
    return type(value).__name__


def _field_kind(param: inspect.Parameter) -> Kind:
    """The kind of an attribute from its name and its Python default (see module doc)."""
    if param.name in _ARRAY_NAMES:
        return INTS
    if param.name in _FLOAT_NAMES:
        return FLOAT
    default = param.default
    if isinstance(default, bool):
        return BOOL
    if isinstance(default, int):
        return INT
    if isinstance(default, float):
        return FLOAT
    if isinstance(default, str):
        return STR
    if isinstance(default, tuple):
        return FLOATS if any(isinstance(v, float) for v in default) else INTS
    return _KIND_BY_NAME.get(param.name, ANY)


def _build(op: str, signature: inspect.Signature, specs: tuple[str, ...]) -> OpSchema:
    # ``+name``: a sparse matrix, three operands (its data, indices and indptr)
    operands = tuple(name for spec in specs for name in (
        [f"{spec[1:]}.{f}" for f in ("data", "indices", "indptr")] if spec.startswith("+")
        else [spec.lstrip("*?")]))
    names = {spec.lstrip("*?+") for spec in specs}
    fields = {name: _field_kind(p) for name, p in signature.parameters.items()
              if name not in names}
    fields.update(EXTRA_FIELDS.get(op, {}))
    required = len(operands) - sum(1 for spec in specs if spec.startswith("?"))
    tuples = frozenset(i for i, spec in enumerate(specs) if spec.startswith("*")) \
        if not any(spec.startswith("+") for spec in specs) else frozenset()
    return OpSchema(op, fields, operands, required, tuples)


@lru_cache(maxsize=None)
def _schemas() -> dict[str, OpSchema]:
    from . import op as _builders  # noqa: F401 - defining the builder ops fills SIGNATURES
    from .op._make import SIGNATURES, parse_signature

    out = {op: _build(op, sig, specs) for op, (sig, specs) in SIGNATURES.items()}
    for op, (text, inputs) in TEXT_SIGNATURES.items():
        out[op] = _build(op, parse_signature(text), tuple(inputs.split()))
    return out


def op_schema(op_name: str) -> Optional[OpSchema]:
    """The schema of ``op_name``; ``None`` for an op the builder API does not declare."""
    return _schemas().get(op_name)


def check_call(op_name: str, attrs: Mapping[str, Any], num_args: int) -> Optional[str]:
    """The first problem of a call of ``op_name`` (see :meth:`OpSchema.check`), else None."""
    schema = op_schema(op_name)
    return None if schema is None else schema.check(attrs, num_args)
