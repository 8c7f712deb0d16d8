"""Operator attributes a Relay DFPattern can test with ``has_attr`` on an op.

Relay registered per-op attributes such as ``TOpPattern`` (the fusion class the
pattern language's dominator examples filter on: ``wildcard().has_attr({"TOpPattern":
K_ELEMWISE})``).  Relay is gone, so the values are restated here from Relay v0.19's
op registrations; an op or attribute missing from the table does not match, as in
Relay when the op had no such attribute.
"""
from __future__ import annotations

from typing import Any

# Relay's OpPatternKind values.
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_ELEMWISE_FUSABLE = 0, 1, 2, 3, 4
TUPLE, OPAQUE = 7, 8

_ELEMWISE_OPS = (
    "log log2 log10 tan cos cosh sin sinh acos acosh asin asinh atan atanh exp fast_exp erf "
    "fast_erf sqrt rsqrt zeros_like ones_like sigmoid copy floor ceil trunc round sign abs tanh "
    "fast_tanh negative logical_not bitwise_not isnan isfinite isinf clip cast cast_like "
    "reinterpret nn.relu nn.leaky_relu stop_gradient full_like fixed_point_multiply "
    "annotation.stop_fusion")
_BROADCAST_OPS = (
    "add subtract multiply divide power mod floor_divide floor_mod trunc_divide trunc_mod "
    "maximum minimum left_shift right_shift equal not_equal less less_equal greater "
    "greater_equal logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor "
    "where nn.bias_add nn.prelu")
_INJECTIVE_OPS = (
    "reshape reshape_like transpose squeeze expand_dims concatenate stack split strided_slice "
    "slice_like take tile repeat reverse reverse_sequence broadcast_to broadcast_to_like "
    "collapse_sum_like collapse_sum_to layout_transform full zeros ones arange gather gather_nd "
    "nn.pad nn.batch_flatten nn.upsampling nn.upsampling3d nn.depth_to_space "
    "nn.space_to_depth image.resize1d image.resize2d image.resize3d image.crop_and_resize "
    "sequence_mask auto_scheduler_layout_transform meta_schedule_layout_transform")
_COMM_REDUCE_OPS = "sum mean max min prod all any argmax argmin variance std logsumexp"
_OUT_ELEMWISE_FUSABLE_OPS = (
    "nn.conv1d nn.conv2d nn.conv3d nn.conv1d_transpose nn.conv2d_transpose nn.conv3d_transpose "
    "nn.contrib_conv2d_NCHWc nn.dense nn.matmul nn.batch_matmul nn.max_pool1d nn.max_pool2d "
    "nn.max_pool3d nn.avg_pool1d nn.avg_pool2d nn.avg_pool3d nn.global_avg_pool2d "
    "nn.global_max_pool2d nn.adaptive_avg_pool1d nn.adaptive_avg_pool2d nn.adaptive_avg_pool3d "
    "one_hot cumsum cumprod")
_OPAQUE_OPS = (
    "nn.softmax nn.log_softmax nn.dropout nn.batch_norm nn.layer_norm nn.instance_norm "
    "nn.group_norm scatter_nd argsort topk on_device device_copy")

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


# --------------------------------------------------------------------------- call attributes
_DEFAULTS: dict[str, dict[str, Any]] = {}

#: Attributes whose text-format (C++) default differs from the Python API's.  The
#: builder always records these, so a call that lacks one was parsed from text, where
#: the C++ default applies.
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "nn.leaky_relu": {"alpha": 0.25},
    "nn.batch_matmul": {"transpose_a": False, "transpose_b": False},
}


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

        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        for module, prefix in _builder_functions():
            for short, fn in list(vars(module).items()):
                signature = getattr(fn, "__signature__", None)
                if not callable(fn) or not isinstance(signature, inspect.Signature):
                    continue
                name = getattr(fn, "relay_op_name", None) or prefix + short
                _DEFAULTS.setdefault(name, {
                    p.name: p.default for p in signature.parameters.values()
                    if p.kind in keyword and p.default is not inspect.Parameter.empty})
        for name, overrides in _TEXT_DEFAULTS.items():
            _DEFAULTS.setdefault(name, {}).update(overrides)
        _DEFAULTS.setdefault("", {})  # marks the table as built
    return _DEFAULTS.get(op_name, {})
