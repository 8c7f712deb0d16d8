"""Relay's ``dyn.*`` ops: the static op whenever their shape operands are known at import.

Relay's builder made ``dyn.tile(x, reps)``, ``dyn.strided_slice(x, b, e, s)``... whenever
a shape, size or count was an expression instead of a Python value (the ONNX and
TensorFlow frontends did so for every ``Expand``/``Slice``/``TopK`` whose operand was a
graph input), and ``relay.build`` then ran ``DynamicToStatic``
(v0.19's ``src/relay/transforms/dynamic_to_static.cc``): once constants were folded, each
such call whose operands had become constants was rebuilt as the static op, with the
constants as its attributes.  Binding the weights (``params``) is what made those
operands constants, so a model whose ``reps`` is a weight ran static.

The import does the same, per op: an operand that is a constant here — a literal, a
bound weight, a ``cast`` of one, ``shape_of`` a tensor of static shape — becomes the
static op's attribute, read as v0.19 read it (``ToVector``, ``ToScalar``, ``ToMatrix``),
and the static op's own converter runs (with its checks; errors still name the
``dyn.*`` call).  An operand known only when the model runs keeps the run-time form
where one exists (``dyn.zeros``/``ones``/``full``/``reshape``); the other ops are then
refused by name — their result shapes would be unknown to every template.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np

from ...relay import ast
from ..registry import get_converter, register_converter
from .create import run_time_full, run_time_ones, run_time_zeros
from ._utils import folded_value
from .tensor import run_time_reshape


# --------------------------------------------------------------- reading operand values
def _integer_array(value: np.ndarray) -> np.ndarray:
    if value.dtype.kind not in "iub":
        raise ValueError(f"holds {value.dtype} values, not integers")
    return value


def _vector(value: np.ndarray) -> tuple[int, ...]:
    """A 1-D integer tensor as a list of ints (v0.19's ``ToVector``)."""
    if value.ndim != 1:
        raise ValueError(f"must be a 1-D tensor, got shape {value.shape}")
    return tuple(int(v) for v in _integer_array(value))


def _integer(value: np.ndarray) -> int:
    """One integer (v0.19's ``ToScalar``: a scalar or a one-element tensor)."""
    if value.size != 1:
        raise ValueError(f"must hold one value, got shape {value.shape}")
    return int(_integer_array(value).reshape(()))


def _scale(value: np.ndarray) -> float:
    """A 0-d tensor as a float (``dyn.nn.upsampling``'s scales)."""
    if value.ndim != 0:
        raise ValueError(f"must be a scalar, got shape {value.shape}")
    return float(value)


def _floats(value: np.ndarray) -> tuple[float, ...]:
    """A 1-D tensor as float32 values (v0.19's ``ToFloatVector``: ``image.resize2d``'s roi)."""
    if value.ndim != 1:
        raise ValueError(f"must be a 1-D tensor, got shape {value.shape}")
    return tuple(float(np.float32(v)) for v in value)


def _matrix(value: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """A 2-D integer tensor as rows of ints (v0.19's ``ToMatrix``: ``nn.pad``'s widths)."""
    if value.ndim != 2:
        raise ValueError(f"must be a 2-D tensor, got shape {value.shape}")
    return tuple(tuple(int(v) for v in row) for row in _integer_array(value))


Reader = Callable[[np.ndarray], Any]


@dataclass(frozen=True)
class StaticForm:
    """How one ``dyn.*`` op becomes its static op: which operands (by position) become
    which attributes, read how; the other operands stay operands, in order."""

    static_op: str
    attributes: Mapping[int, tuple[str, Reader]]
    run_time: Optional[Callable] = None  # the converter for operands known only at run time

    def convert(self, inputs: list, attrs: ast.Attrs, ctx) -> Any:
        values = {i: folded_value(inputs[i], ctx) for i in self.attributes}
        unknown = [name for i, (name, _) in self.attributes.items() if values[i] is None]
        if unknown:
            if self.run_time is not None:
                return self.run_time(inputs, attrs, ctx)
            plural = len(unknown) > 1
            raise ctx.error(
                f"its {' and '.join(unknown)} operand{'s are' if plural else ' is'} known only "
                f"when the model runs: {ctx.op_name} is converted (to {self.static_op}, as "
                f"Relay's DynamicToStatic did) only when {'they are' if plural else 'it is'} a "
                f"constant, a bound weight or the shape of a static tensor")
        static_attrs = {key: value for key, value in attrs.items()
                        if value is not None and key not in
                        {name for name, _ in self.attributes.values()}}
        for i, (name, read) in self.attributes.items():
            try:
                static_attrs[name] = read(values[i])
            except ValueError as exc:
                raise ctx.error(f"the {name} operand {exc}") from None
        kept = [x for i, x in enumerate(inputs) if i not in self.attributes]
        converter = get_converter(self.static_op)
        return converter(kept, ast.Attrs(static_attrs).for_op(self.static_op), ctx)


#: Each ``dyn.*`` op Relay v0.19 had, with its static form (DynamicToStatic's table, and
#: ``dyn.expand_dims``, whose run-time axis the same rule makes an attribute).
STATIC_FORMS: dict[str, StaticForm] = {
    "dyn.zeros": StaticForm("zeros", {0: ("shape", _vector)}, run_time_zeros),
    "dyn.ones": StaticForm("ones", {0: ("shape", _vector)}, run_time_ones),
    "dyn.full": StaticForm("full", {1: ("shape", _vector)}, run_time_full),
    "dyn.reshape": StaticForm("reshape", {1: ("newshape", _vector)}, run_time_reshape),
    "dyn.broadcast_to": StaticForm("broadcast_to", {1: ("shape", _vector)}),
    "dyn.tile": StaticForm("tile", {1: ("reps", _vector)}),
    "dyn.squeeze": StaticForm("squeeze", {1: ("axis", _vector)}),
    "dyn.expand_dims": StaticForm("expand_dims", {1: ("axis", _integer)}),
    "dyn.strided_slice": StaticForm("strided_slice", {1: ("begin", _vector),
                                                      2: ("end", _vector),
                                                      3: ("strides", _vector)}),
    "dyn.topk": StaticForm("topk", {1: ("k", _integer)}),
    "dyn.one_hot": StaticForm("one_hot", {3: ("depth", _integer)}),
    "dyn.sparse_to_dense": StaticForm("sparse_to_dense", {3: ("output_shape", _vector)}),
    "dyn.nn.pad": StaticForm("nn.pad", {1: ("pad_width", _matrix)}),
    "dyn.nn.upsampling": StaticForm("nn.upsampling", {1: ("scale_h", _scale),
                                                      2: ("scale_w", _scale)}),
    "dyn.nn.upsampling3d": StaticForm("nn.upsampling3d", {1: ("scale_d", _scale),
                                                          2: ("scale_h", _scale),
                                                          3: ("scale_w", _scale)}),
    "dyn.image.resize2d": StaticForm("image.resize2d", {1: ("size", _vector),
                                                        2: ("roi", _floats)}),
}

for _name, _form in STATIC_FORMS.items():
    register_converter(_name)(_form.convert)
