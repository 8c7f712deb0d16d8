"""Operator attributes a Relay DFPattern can test with ``has_attr`` on an op.

Relay registered per-op attributes such as ``TOpPattern`` (the fusion class the
pattern language's dominator examples filter on: ``wildcard().has_attr({"TOpPattern":
K_ELEMWISE})``).  Relay is gone, so the values are restated here from Relay v0.19's
op registrations; an op or attribute missing from the table does not match, as in
Relay when the op had no such attribute.

The ``TOpPattern`` table is every op v0.19 gave one: ``set_attr<TOpPattern>`` in
``src/relay/op/**/*.cc`` and ``src/relay/qnn/op/*.cc`` (also through the
``RELAY_REGISTER_UNARY_OP``/``BINARY_OP``/``CMP_OP`` macros of ``op_common.h``), and
``register_pattern`` in ``python/tvm/relay/op/_tensor.py``, ``_transform.py``,
``_algorithm.py``, ``vision/``, ``image/``, ``random/``, ``dyn/`` and ``qnn/op/_qnn.py``.
Ops v0.19 registered without one (``nn.layer_norm``, ``nn.instance_norm``,
``nn.group_norm``, ``nn.l2_normalize``, ``qnn.leaky_relu``, ...) are absent, so no
``TOpPattern`` constraint matches them, as in Relay.
"""
from __future__ import annotations

from typing import Any

from ..errors import BmlibError
from .op_schema import TEXT_DEFAULTS

# Relay's OpPatternKind values.
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_ELEMWISE_FUSABLE = 0, 1, 2, 3, 4
TUPLE, OPAQUE = 7, 8

_ELEMWISE_OPS = (
    "abs acos acosh asin asinh atan atanh bitwise_not cast cast_like ceil clip copy cos "
    "cosh dyn.full dyn.ones dyn.zeros erf exp fast_erf fast_exp fast_tanh "
    "fixed_point_multiply floor full full_like isfinite isinf isnan log log10 log2 "
    "logical_not negative nn.leaky_relu nn.relu ones ones_like qnn.dequantize "
    "qnn.quantize qnn.requantize qnn.simulated_dequantize qnn.simulated_quantize qnn.tanh "
    "reinterpret relay.op.annotation.simulated_quantize round rsqrt sigmoid sign sin sinh "
    "sqrt tan tanh trilu trunc zeros zeros_like"
)
_BROADCAST_OPS = (
    "add bitwise_and bitwise_or bitwise_xor broadcast_to broadcast_to_like divide "
    "dyn.broadcast_to equal expand_dims fixed_point_multiply_per_axis floor_divide "
    "floor_mod greater greater_equal left_shift less less_equal logical_and logical_or "
    "logical_xor maximum minimum mod multiply nn.bias_add nn.prelu not_equal power "
    "qnn.add qnn.mul qnn.subtract repeat right_shift subtract tile trunc_divide trunc_mod "
    "where"
)
_INJECTIVE_OPS = (
    "adv_index auto_scheduler_layout_transform concatenate contrib_reverse_reshape "
    "dyn.expand_dims dyn.image.resize2d dyn.nn.pad dyn.nn.upsampling dyn.nn.upsampling3d "
    "dyn.reshape dyn.squeeze dyn.strided_slice dyn.tile einsum gather gather_nd "
    "image.affine_grid image.crop_and_resize image.grid_sample image.resize1d "
    "image.resize2d image.resize3d invert_permutation layout_transform matrix_set_diag "
    "meshgrid meta_schedule_layout_transform ndarray_size nn.batch_flatten "
    "nn.batch_to_space_nd nn.bitpack nn.depth_to_space nn.dilate nn.mirror_pad nn.pad "
    "nn.space_to_batch_nd nn.space_to_depth nn.upsampling nn.upsampling3d qnn.concatenate "
    "reshape reshape_like reverse reverse_sequence sequence_mask slice_like "
    "sparse_reshape split squeeze stack strided_set strided_slice take transpose "
    "unravel_index vision.yolo_reorg"
)
_COMM_REDUCE_OPS = (
    "all any argmax argmin collapse_sum_like collapse_sum_to max mean min prod sum "
    "variance"
)
_OUT_ELEMWISE_FUSABLE_OPS = (
    "dyn.one_hot image.dilation2d nn.adaptive_avg_pool1d nn.adaptive_avg_pool2d "
    "nn.adaptive_avg_pool3d nn.adaptive_max_pool1d nn.adaptive_max_pool2d "
    "nn.adaptive_max_pool3d nn.avg_pool1d nn.avg_pool2d nn.avg_pool2d_grad nn.avg_pool3d "
    "nn.batch_matmul nn.batch_norm nn.bitserial_conv2d nn.bitserial_dense "
    "nn.contrib_conv2d_NCHWc nn.contrib_conv2d_gemm_weight_transform "
    "nn.contrib_conv2d_gemm_without_weight_transform "
    "nn.contrib_conv2d_winograd_weight_transform "
    "nn.contrib_conv2d_winograd_without_weight_transform "
    "nn.contrib_conv3d_winograd_weight_transform "
    "nn.contrib_conv3d_winograd_without_weight_transform nn.contrib_dense_pack "
    "nn.contrib_depthwise_conv2d_NCHWc nn.conv1d nn.conv1d_transpose nn.conv2d "
    "nn.conv2d_backward_weight nn.conv2d_transpose nn.conv3d nn.conv3d_transpose "
    "nn.correlation nn.deformable_conv2d nn.dense nn.fast_softmax nn.global_avg_pool2d "
    "nn.global_max_pool2d nn.internal.sparse_dense_padded nn.log_softmax nn.matmul "
    "nn.max_pool1d nn.max_pool2d nn.max_pool2d_grad nn.max_pool3d nn.nll_loss nn.softmax "
    "nn.sparse_conv2d nn.sparse_dense nn.sparse_transpose one_hot qnn.avg_pool2d "
    "qnn.batch_matmul qnn.contrib_dense_pack qnn.conv2d qnn.dense vision.roi_align "
    "vision.roi_pool"
)
_OPAQUE_OPS = (
    "annotation.bitpack_end annotation.bitpack_start annotation.cast_hint "
    "annotation.checkpoint annotation.compiler_begin annotation.compiler_end "
    "annotation.stop_fusion arange argsort argwhere call_lowered cumprod cumsum debug "
    "device_copy dft dyn.sparse_to_dense dyn.topk memory.alloc_storage "
    "memory.alloc_tensor memory.kill nn.contrib_conv2d_winograd_nnpack_weight_transform "
    "nn.cross_entropy nn.cross_entropy_with_logits nn.dropout nn.fifo_buffer nn.lrn "
    "nn.sparse_add on_device random.multinomial random.normal random.threefry_generate "
    "random.threefry_split random.uniform scatter_elements scatter_nd searchsorted "
    "shape_of sliding_window sort sparse_fill_empty_rows sparse_to_dense stft topk unique "
    "vision.all_class_non_max_suppression vision.get_valid_counts vision.multibox_prior "
    "vision.multibox_transform_loc vision.non_max_suppression vision.proposal "
    "vision.regular_non_max_suppression vm.invoke_tvm_op vm.reshape_tensor vm.shape_of"
)

#: op attribute name -> {Relay op name: value}
OP_ATTRS: dict[str, dict[str, Any]] = {"TOpPattern": {}}
for _kind, _names in ((ELEMWISE, _ELEMWISE_OPS), (BROADCAST, _BROADCAST_OPS),
                      (INJECTIVE, _INJECTIVE_OPS), (COMM_REDUCE, _COMM_REDUCE_OPS),
                      (OUT_ELEMWISE_FUSABLE, _OUT_ELEMWISE_FUSABLE_OPS), (OPAQUE, _OPAQUE_OPS)):
    OP_ATTRS["TOpPattern"].update(dict.fromkeys(_names.split(), _kind))

_MISSING = object()


def op_attr(op_name: str, attr_name: str) -> Any:
    """The registered value of ``attr_name`` for ``op_name``, or :data:`MISSING`."""
    return OP_ATTRS.get(attr_name, {}).get(op_name, _MISSING)


MISSING = _MISSING

#: Ops v0.19 registered that neither the builder's schemas, the importer nor the table
#: above name (``src/relay/parser/meta_ref.cc``, ``src/relay/transforms/partial_eval.cc``).
_OTHER_RELAY_OPS = frozenset({"parser.MetaRef", "annotation.with_funcid"})


def is_relay_op(op_name: str) -> bool:
    """Whether ``op_name`` is an op Relay knew: v0.19's ``Op::Get`` found every op with a
    ``TOpPattern`` above, every op the builder API declares (:mod:`.op_schema`) and every
    op the importer converts; anything else (``nn.conv2D``) was "not registered"."""
    if op_name in OP_ATTRS["TOpPattern"] or op_name in _OTHER_RELAY_OPS:
        return True
    from .op_schema import op_schema

    if op_schema(op_name) is not None:
        return True
    from ..importer.registry import get_converter  # the importer imports this package

    return get_converter(op_name) is not None


def relay_op_names() -> list[str]:
    """Every op name :func:`is_relay_op` accepts (for "did you mean" hints)."""
    from ..importer.registry import supported_ops
    from .op_schema import _schemas

    return sorted(set(OP_ATTRS["TOpPattern"]) | _OTHER_RELAY_OPS | set(_schemas()) |
                  set(supported_ops()))


class UnknownOpError(BmlibError, ValueError):
    """An op name Relay never registered (v0.19's ``Op::Get`` failed): from
    ``relay.op.get(name)`` or ``is_op(name)``."""


def check_relay_op(name: str, caller: str) -> None:
    """Refuse ``name`` unless Relay v0.19 registered it, as ``Op::Get`` did for both
    ``relay.op.get`` and ``is_op``: a misspelled ``nn.conv2D`` would otherwise build a
    call no converter knows, or a pattern that never matches.  ``caller`` is the call
    the user wrote (``is_op('nn.conv2D')``), for the message."""
    if is_relay_op(name):
        return
    import difflib

    names = relay_op_names()
    by_case = [n for n in names if n.lower() == name.lower()]
    close = by_case or difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UnknownOpError(f"{caller}: Operator {name} is not registered: not an op of "
                         f"Relay v0.19{hint}")


# --------------------------------------------------------------------------- call attributes
_DEFAULTS: dict[str, dict[str, Any]] = {}



def _builder_functions():
    """(module, op-name prefix) of every builder op namespace (relay.op, relay.op.nn, ...)."""
    import importlib
    import pkgutil

    from . import op as op_package

    yield op_package, ""
    for info in pkgutil.iter_modules(op_package.__path__):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{op_package.__name__}.{info.name}"), info.name + "."


def op_attr_defaults(op_name: str) -> dict[str, Any]:
    """Relay's default attribute values of ``op_name``'s calls (empty if unknown).

    Relay's call attributes always held every field; the builder records only
    what the caller passed (and always the attributes whose Python default differs
    from the text format's), so ``has_attr`` and ``call.attrs.name`` fall back to
    the defaults of the builder function's signature, or the text format's default
    for those few attributes (a call lacking one was parsed from text).
    """
    if not _DEFAULTS:
        import inspect

        from .op._make import normalise_attrs

        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        for module, prefix in _builder_functions():
            for short, fn in list(vars(module).items()):
                signature = getattr(fn, "__signature__", None)
                if not callable(fn) or not isinstance(signature, inspect.Signature):
                    continue
                name = getattr(fn, "relay_op_name", None) or prefix + short
                # as a call records them (conv1d's default strides=1 is [1], as in v0.19)
                _DEFAULTS.setdefault(name, normalise_attrs(name, {
                    p.name: p.default for p in signature.parameters.values()
                    if p.kind in keyword and p.default is not inspect.Parameter.empty}))
        # Text-format (C++) defaults the Python API's differ from: the builder always
        # records those, so a call that lacks one was parsed from text.
        for name, overrides in TEXT_DEFAULTS.items():
            _DEFAULTS.setdefault(name, {}).update(overrides)
        _DEFAULTS.setdefault("", {})  # marks the table as built
    return _DEFAULTS.get(op_name, {})
