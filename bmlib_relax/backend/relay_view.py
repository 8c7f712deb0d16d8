"""A Relay-style view of matched Relax expressions, for legacy check functions.

A Relay BYOC check received the matched Relay call: ``call.op.name`` was a
Relay op name, ``call.attrs`` had Relay attribute names and defaults, and
``call.args[0].tuple_value.args[0].attrs.groups`` walked the graph.  The
importer rewrote those calls into Relax (``nn.dense`` became ``matmul(x,
permute_dims(w))``, ``clip`` took its bounds as operands, ...).  The views here
undo that per op (:data:`RELAY_FORMS`), so a legacy check runs unchanged.

Arguments are followed through the bindings of the match (and the ones before
it); an argument bound outside, or a function parameter, is a leaf
(:class:`RelayVarView`).  Where a Relax call could come from several Relay ops
(an ``add`` of a reshaped vector is ``add`` or ``nn.bias_add``), the legacy
pattern that matched names the op.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

import tvm
from tvm import relax

from ..importer.provenance import origin_of, relay_call_of
from ..relay import dataflow_pattern as rp


# --------------------------------------------------------------------------- values
def _py(value: Any) -> Any:
    """A TVM attribute value as plain Python (ints, floats, strings, tuples)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tvm.tirx.IntImm):
        # TVM 0.27 prim expressions carry their dtype as ``ty`` (older ones as ``dtype``).
        dtype = str(getattr(value, "dtype", None) or getattr(value, "ty", ""))
        return bool(value.value) if "bool" in dtype else int(value.value)
    if isinstance(value, tvm.tirx.FloatImm):
        return float(value.value)
    if isinstance(value, relax.ShapeExpr):
        return tuple(_py(v) for v in value.values)
    if isinstance(value, relax.Tuple):
        return tuple(_py(f) for f in value.fields)
    if hasattr(value, "__len__") and not hasattr(value, "dtype"):
        return tuple(_py(v) for v in value)
    return str(value)


class RelayAttrs:
    """Read-only attributes under their Relay names (``attrs.groups``, ``attrs["axis"]``)."""

    def __init__(self, op_name: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_op", op_name)
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{self._op} has no Relay attribute {name!r} "
                                 f"(has: {', '.join(sorted(self._values)) or 'none'})") from None

    def __getitem__(self, name: str) -> Any:
        return self.__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Relay attributes are read-only")

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def keys(self):
        return self._values.keys()

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __repr__(self) -> str:
        return f"RelayAttrs({self._op}, {dict(self._values)})"


class TensorTypeView:
    """``checked_type`` of a tensor: ``shape`` (ints) and ``dtype``."""

    def __init__(self, shape: Optional[tuple], dtype: str):
        self.shape = shape
        self.concrete_shape = shape
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Tensor[{self.shape}, {self.dtype}]"


class TupleTypeView:
    def __init__(self, fields: list):
        self.fields = fields


def type_view(ty: Any) -> Any:
    if isinstance(ty, relax.TupleType):
        return TupleTypeView([type_view(f) for f in ty.fields])
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        dims = tuple(_py(d) for d in shape.values) if shape is not None and \
            hasattr(shape, "values") else None
        return TensorTypeView(dims, str(ty.dtype))
    return ty


# --------------------------------------------------------------------------- inverse import
class OpView:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Op({self.name})"


def _attrs(call, *names: str) -> dict[str, Any]:
    return {n: _py(getattr(call.attrs, n)) for n in names}


def _out_dtype(call) -> str:
    value = _py(getattr(call.attrs, "out_dtype", None))
    return "" if value in (None, "void", "None") else value


def _matmul(call, resolve, hint):
    lhs, rhs = call.args
    rhs_value = resolve(rhs)
    transposed = isinstance(rhs_value, relax.Call) and \
        getattr(rhs_value.op, "name", "") == "relax.permute_dims"
    rank = len(call.ty.shape.values)
    if transposed:
        inner = rhs_value.args[0]
        if hint == "nn.dense" or (hint is None and rank == 2):
            return "nn.dense", [lhs, inner], {"units": _py(inner.ty.shape.values[0]),
                                              "out_dtype": _out_dtype(call)}
        return "nn.batch_matmul", [lhs, inner], {"transpose_a": False, "transpose_b": True,
                                                 "out_dtype": _out_dtype(call)}
    if hint == "nn.batch_matmul" or (hint is None and rank >= 3):
        return "nn.batch_matmul", [lhs, rhs], {"transpose_a": False, "transpose_b": False,
                                               "out_dtype": _out_dtype(call)}
    return "nn.matmul", [lhs, rhs], {"units": None, "transpose_a": False, "transpose_b": False,
                                     "out_dtype": _out_dtype(call)}


def _add(call, resolve, hint):
    if hint != "nn.bias_add":
        return "add", list(call.args), {}
    # bias_add(x, b, axis) imports as add(x, b) (last axis) or add(x, reshape(b, [C, 1..])).
    data, bias = call.args
    # The bias is the reshaped vector, else the operand of lower rank.
    if _reshape_of(data, resolve) is not None or \
            (_reshape_of(bias, resolve) is None and _rank(data) < _rank(bias)):
        data, bias = bias, data
    source = _reshape_of(bias, resolve)
    if source is not None:
        return "nn.bias_add", [data, source], {"axis": _rank(call) - _rank(bias)}
    return "nn.bias_add", [data, bias], {"axis": -1}


def _rank(expr) -> int:
    shape = getattr(expr.ty, "shape", None)
    return len(shape.values) if shape is not None and hasattr(shape, "values") else -1


def _reshape_of(expr, resolve):
    value = resolve(expr)
    if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.reshape":
        return value.args[0]
    return None


def _reshape(call, resolve, hint):
    if hint == "nn.batch_flatten":
        return "nn.batch_flatten", [call.args[0]], {}
    return "reshape", [call.args[0]], {"newshape": _py(call.args[1])}


def _adaptive_avg_pool2d(call, resolve, hint):
    size = _py(call.attrs.output_size)
    attrs = {"layout": _py(call.attrs.layout), "out_layout": _py(call.attrs.out_layout)}
    if size in ((1, 1), (1,)) or hint == "nn.global_avg_pool2d":
        return "nn.global_avg_pool2d", [call.args[0]], attrs
    return "nn.adaptive_avg_pool2d", [call.args[0]], {**attrs, "output_size": size}


def _conv2d(call, resolve, hint):
    weight_shape = _py(call.args[1].ty.shape)
    attrs = _attrs(call, "strides", "padding", "dilation", "groups", "data_layout",
                   "kernel_layout", "out_layout")
    attrs.update(channels=weight_shape[0], kernel_size=tuple(weight_shape[2:]),
                 out_dtype=_out_dtype(call))
    return "nn.conv2d", list(call.args), attrs


def _conv2d_transpose(call, resolve, hint):
    weight_shape = _py(call.args[1].ty.shape)
    attrs = _attrs(call, "strides", "padding", "output_padding", "dilation", "groups",
                   "data_layout", "kernel_layout", "out_layout")
    attrs.update(channels=weight_shape[1] * attrs["groups"],
                 kernel_size=tuple(weight_shape[2:]), out_dtype=_out_dtype(call))
    return "nn.conv2d_transpose", list(call.args), attrs


def _pool(relay_name: str, *names: str):
    def form(call, resolve, hint):
        return relay_name, [call.args[0]], _attrs(call, "pool_size", "strides", "dilation",
                                                  "padding", "layout", "out_layout",
                                                  "ceil_mode", *names)

    return form


def _single(relay_name: str, *names: str, **renamed: str):
    """Relay op taking the first operand, attributes of the same (or ``renamed``) names."""

    def form(call, resolve, hint):
        attrs = _attrs(call, *names)
        attrs.update({relay: _py(getattr(call.attrs, relax_name))
                      for relay, relax_name in renamed.items()})
        return relay_name, [call.args[0]], attrs

    return form


def _layer_norm(call, resolve, hint):
    axes = _py(call.attrs.axes)
    attrs = _attrs(call, "epsilon", "center", "scale")
    return "nn.layer_norm", list(call.args), {**attrs, "axis": axes[0] if len(axes) == 1
                                              else axes}


def _clip(call, resolve, hint):
    return "clip", [call.args[0]], {"a_min": _py(call.args[1]), "a_max": _py(call.args[2])}


def _concat(call, resolve, hint):
    return "concatenate", [call.args[0]], _attrs(call, "axis")


def _pad(call, resolve, hint):
    width = _py(call.attrs.pad_width)
    pairs = tuple(tuple(width[i:i + 2]) for i in range(0, len(width), 2))
    return "nn.pad", [call.args[0]], {"pad_width": pairs, "pad_mode": _py(call.attrs.pad_mode),
                                      "pad_value": _py(call.attrs.pad_value)}


def _reduce(relay_name: str):
    def form(call, resolve, hint):
        return relay_name, [call.args[0]], {**_attrs(call, "axis", "keepdims"), "exclude": False}

    return form


RelayForm = Callable[[relax.Call, Callable, Optional[str]], tuple[str, list, dict]]

# Relax op -> how the Relay call it was imported from looks (name, arguments, attributes).
RELAY_FORMS: dict[str, RelayForm] = {
    "relax.matmul": _matmul,
    "relax.add": _add,
    "relax.reshape": _reshape,
    "relax.nn.conv2d": _conv2d,
    "relax.nn.conv2d_transpose": _conv2d_transpose,
    "relax.nn.batch_norm": lambda call, resolve, hint: (
        "nn.batch_norm", list(call.args), _attrs(call, "axis", "epsilon", "center", "scale")),
    "relax.nn.layer_norm": _layer_norm,
    "relax.nn.softmax": _single("nn.softmax", "axis"),
    "relax.nn.log_softmax": _single("nn.log_softmax", "axis"),
    "relax.nn.max_pool2d": _pool("nn.max_pool2d"),
    "relax.nn.avg_pool2d": _pool("nn.avg_pool2d", "count_include_pad"),
    "relax.nn.adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "relax.nn.leakyrelu": _single("nn.leaky_relu", "alpha"),
    "relax.clip": _clip,
    "relax.astype": _single("cast", "dtype"),
    "relax.permute_dims": _single("transpose", "axes"),
    "relax.concat": _concat,
    "relax.expand_dims": _single("expand_dims", "axis"),
    "relax.squeeze": _single("squeeze", "axis"),
    "relax.nn.pad": _pad,
    "relax.mean": _reduce("mean"),
    "relax.sum": _reduce("sum"),
    "relax.max": _reduce("max"),
    "relax.min": _reduce("min"),
}


def relay_op_name(relax_name: str) -> str:
    """Default Relay name of a Relax op: ``relax.nn.relu`` -> ``nn.relu``."""
    return relax_name[len("relax."):] if relax_name.startswith("relax.") else relax_name


# --------------------------------------------------------------------------- views
class _Resolver:
    """Follows Relax variables to their bound values (within what the check can see)."""

    def __init__(self, context: Any = None, bindings: Optional[Mapping] = None):
        self.bindings: dict = {}
        if context is not None:
            self.bindings.update({v: e for v, e in context.matched_bindings.items()})
        if bindings:
            self.bindings.update(bindings)

    def __call__(self, expr):
        seen = 0
        while isinstance(expr, relax.Var) and expr in self.bindings and seen < 64:
            expr, seen = self.bindings[expr], seen + 1
        return expr


class RelayExprView:
    """Common part of all views: the Relax expression and its Relay ``checked_type``."""

    def __init__(self, expr, resolver: _Resolver):
        self.relax_expr = expr
        self._resolver = resolver

    @property
    def checked_type(self):
        return type_view(self.relax_expr.ty)


class RelayCallView(RelayExprView):
    """``op.name``, ``args``, ``attrs`` in Relay terms; ``relax_expr`` is the Relax call."""

    def __init__(self, call, resolver: _Resolver, hint: Any = None):
        super().__init__(call, resolver)
        hint_name = _hint_op_name(hint)
        relax_name = call.op.name
        form = RELAY_FORMS.get(relax_name)
        if form is not None:
            name, args, attrs = form(call, resolver, hint_name)
        else:
            name = relay_op_name(relax_name)
            args = [a for a in call.args if _is_data(a)]
            attrs = {k: _py(call.attrs[k]) for k in call.attrs.keys()} \
                if call.attrs is not None and hasattr(call.attrs, "keys") else {}
        self.op = OpView(name)
        self.attrs = RelayAttrs(name, attrs)
        self._arg_exprs = args
        self._hint = hint

    @property
    def args(self) -> list:
        hints = list(self._hint.args or ()) if isinstance(self._hint, rp.CallPattern) else []
        exprs = list(self._arg_exprs)
        if len(exprs) == 2 and len(hints) == 2 and self.op.name in _COMMUTATIVE:
            exprs = _order_like(exprs, hints, self._resolver)
        return [view(e, self._resolver, hints[i] if i < len(hints) else None)
                for i, e in enumerate(exprs)]

    def __repr__(self) -> str:
        return f"RelayCallView({self.op.name})"


class RelayTupleGetItemView(RelayExprView):
    def __init__(self, expr, resolver: _Resolver, hint: Any = None):
        super().__init__(expr, resolver)
        self.index = int(expr.index)
        self._hint = hint

    @property
    def tuple_value(self):
        hint = self._hint.tuple_value if isinstance(self._hint, rp.TupleGetItemPattern) else None
        return view(self.relax_expr.tuple_value, self._resolver, hint)


class RelayTupleView(RelayExprView):
    @property
    def fields(self) -> list:
        return [view(f, self._resolver) for f in self.relax_expr.fields]


class RelayVarView(RelayExprView):
    """A value the match does not see into: a parameter or a binding outside the match."""

    @property
    def name_hint(self) -> str:
        return self.relax_expr.name


class RelayConstantView(RelayExprView):
    @property
    def data(self):
        return self.relax_expr.value


_COMMUTATIVE = {"add", "multiply", "maximum", "minimum"}


def _is_data(expr) -> bool:
    # Shapes and scalars (IntImm/FloatImm operands) are Relay attributes, not arguments.
    return not isinstance(expr, (relax.ShapeExpr, tvm.tirx.IntImm, tvm.tirx.FloatImm,
                                 tvm.ir.expr.StringImm))


def _hint_op_name(hint: Any) -> Optional[str]:
    while isinstance(hint, (rp.AttrPattern, rp.DataTypePattern, rp.ShapePattern,
                            rp.TypePattern)):
        hint = hint.pattern
    if isinstance(hint, rp.CallPattern) and isinstance(hint.op, rp.OpPattern):
        return hint.op.name
    return None


def _order_like(exprs: list, hints: list, resolver: _Resolver) -> list:
    """Order a commutative call's operands as the legacy pattern wrote them."""
    if not _matches(hints[0], exprs[0], resolver) and _matches(hints[0], exprs[1], resolver):
        return [exprs[1], exprs[0]]
    return exprs


def _matches(hint: Any, expr, resolver: _Resolver) -> bool:
    from .legacy_patterns import translate  # local: legacy_patterns imports this module

    return bool(translate(hint).match(expr, var2val=resolver.bindings))


def view(expr, resolver: _Resolver, hint: Any = None) -> Any:
    """The Relay-style view of ``expr`` (``hint``: the legacy pattern that matched it).

    A call the importer made keeps the Relay call it came from (see
    :mod:`bmlib_relax.importer.provenance`): that call itself is returned —
    Relay's op name, attributes with defaults, argument order, constants and
    ``checked_type`` throughout the graph it reaches.  Only Relax that has no
    Relay origin is viewed by undoing the import form (:data:`RELAY_FORMS`).
    """
    value = resolver(expr)
    if isinstance(value, relax.Call):
        relay_call = relay_call_of(value)
        if relay_call is not None:
            return relay_call
    while isinstance(hint, rp.AltPattern):
        hint = hint.left if _matches(hint.left, expr, resolver) else hint.right
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return RelayCallView(value, resolver, hint)
    if isinstance(value, relax.TupleGetItem):
        return RelayTupleGetItemView(value, resolver, hint)
    if isinstance(value, relax.Tuple):
        return RelayTupleView(value, resolver)
    if isinstance(value, tvm.ir.expr.GenericConst):
        return RelayConstantView(value, resolver)
    return RelayVarView(value, resolver)


def relay_view(expr, context: Any = None, hint: Any = None,
               bindings: Optional[Mapping] = None) -> Any:
    """View ``expr`` (a matched Relax expression) as the Relay expression it was imported from.

    ``context`` is the ``PatternCheckContext`` whose bindings are followed;
    ``hint`` the legacy Relay pattern that matched, naming ambiguous ops.
    """
    return view(expr, _Resolver(context, bindings), hint)


# --------------------------------------------------------------------------- composite params
class UnfollowableComposite(Exception):
    """The composite's Relax body cannot be walked back to Relay calls (no provenance, or
    an import form whose operands do not line up with the Relay arguments)."""


@dataclass(frozen=True)
class RelayParam:
    """One parameter of the composite Relay's ``CreateGroup`` would have made.

    ``expr`` is the Relax value carrying it into the composite (a parameter of the
    composite function); ``undo`` the importer's helper call applied to it *outside*
    the composite that the lowering must not see — ``("transpose", axes)`` or
    ``("reshape", shape)`` — or ``None``; ``relay`` the Relay argument (its
    ``checked_type`` is what the lowering is promised).
    """

    expr: Any
    undo: Optional[tuple]
    relay: Any


def _swap_last_two(rank: int) -> tuple:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _relax_rank(expr) -> int:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    return len(shape.values) if shape is not None and hasattr(shape, "values") else -1


def _relay_attr(call, name: str, default: Any = None) -> Any:
    attrs = getattr(call, "attrs", None)
    try:
        value = attrs[name] if attrs is not None and name in attrs else default
    except (KeyError, TypeError, AttributeError):
        value = getattr(attrs, name, default)
    return default if value is None else value


def _host_undo(relay_call, index: int, operand) -> Optional[tuple]:
    """How to undo the importer's helper call on operand ``index`` of the Relax root call
    of ``relay_call`` when that helper ran outside the composite (on the host): the
    import forms of bmlib_relax/importer/ops/linear.py."""
    name = getattr(relay_call.op, "name", "")
    rank = _relax_rank(operand)
    if name == "nn.dense" and index == 1:  # matmul(x, permute_dims(w, [1, 0]))
        return ("transpose", (1, 0))
    if name in ("nn.batch_matmul", "nn.matmul") and rank >= 2:
        flag = "transpose_a" if index == 0 else "transpose_b" if index == 1 else None
        if flag is not None and bool(_relay_attr(relay_call, flag, False)):
            return ("transpose", _swap_last_two(rank))
    if name == "nn.bias_add" and index == 1 and rank > 1:  # add(x, reshape(b, [C, 1..]))
        return ("reshape", None)
    return None


def _is_data_operand(expr) -> bool:
    """A tensor (or tuple of tensors) operand: a Relay argument, not an attribute the
    importer turned into an operand (shapes, ``PrimValue`` bounds, dtypes)."""
    return isinstance(getattr(expr, "ty", None), (relax.TensorType, relax.TupleType))


class _ParamWalk:
    """Walks a composite body from its root the way v0.19's ``CreateGroup`` visited the
    pattern (post-DFS: arguments left to right, ``add``/``multiply`` in the pattern's
    order), collecting the leaves once each."""

    def __init__(self, bindings: Mapping, params: list):
        self.resolver = _Resolver(bindings=bindings)
        self.params = list(params)
        self.found: list[RelayParam] = []

    def leaf(self, expr, undo: Optional[tuple], relay_arg: Any) -> None:
        value = self.resolver(expr)
        if not any(value.same_as(p) for p in self.params):
            if isinstance(value, relax.Constant):
                return  # a scalar kept inside the composite: not a parameter on Relax
            raise UnfollowableComposite(f"leaf {type(value).__name__} is no parameter")
        if any(p.expr.same_as(value) and p.undo == undo for p in self.found):
            return  # CreateGroup: "multiple operators in the partition may use the same input"
        self.found.append(RelayParam(value, undo, relay_arg))

    def walk(self, expr, relay_arg: Any, hint: Any) -> None:
        value = self.resolver(expr)
        hint = _unwrap_hint(hint)
        while isinstance(hint, rp.AltPattern):
            hint = _unwrap_hint(hint.left if _matches(hint.left, expr, self.resolver)
                                else hint.right)
        if isinstance(value, relax.Tuple):
            fields = getattr(relay_arg, "fields", None)
            hints = list(hint.fields or ()) if isinstance(hint, rp.TuplePattern) and \
                hint.fields is not None else []
            for i, field_expr in enumerate(value.fields):
                self.walk(field_expr, fields[i] if fields is not None and i < len(fields)
                          else None, hints[i] if i < len(hints) else None)
        elif isinstance(value, relax.TupleGetItem):
            inner = hint.tuple_value if isinstance(hint, rp.TupleGetItemPattern) else None
            self.walk(value.tuple_value, getattr(relay_arg, "tuple_value", None), inner)
        elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            self.call(value, hint)
        else:
            self.leaf(expr, None, relay_arg)

    def call(self, value: relax.Call, hint: Any) -> None:
        relay_call = relay_call_of(value)
        if relay_call is None:
            raise UnfollowableComposite(f"{value.op.name} has no Relay origin")
        if isinstance(hint, rp.TupleGetItemPattern):
            hint = _unwrap_hint(hint.tuple_value)  # a root projected outside the composite
        sources = self.sources(value, relay_call)
        relay_args = list(relay_call.args)
        if len(sources) != len(relay_args):
            raise UnfollowableComposite(f"{relay_call.op.name}: {len(sources)} operands for "
                                        f"{len(relay_args)} Relay arguments")
        hints = list(hint.args or ()) if isinstance(hint, rp.CallPattern) and \
            hint.args is not None else []
        order = list(range(len(sources)))
        if len(order) == 2 and len(hints) == 2 and \
                getattr(relay_call.op, "name", "") in _CREATE_GROUP_COMMUTATIVE:
            exprs = [sources[0][0], sources[1][0]]
            if _order_like(exprs, hints, self.resolver) != exprs:
                order = [1, 0]
        for position, index in enumerate(order):
            expr, undo = sources[index]
            sub_hint = hints[position] if position < len(hints) else None
            if undo is None:
                self.walk(expr, relay_args[index], sub_hint)
            else:
                self.leaf(expr, undo, relay_args[index])

    def sources(self, root: relax.Call, relay_call) -> list[tuple]:
        """Per Relay argument of ``relay_call``: the Relax value it was before the
        importer's helper calls (followed inside the composite), with the undo of a
        helper that ran outside."""
        out = []
        for index, operand in enumerate(a for a in root.args if _is_data_operand(a)):
            inner = self._through_parts(operand, relay_call)
            if inner is None:
                out.append((operand, _host_undo(relay_call, index, operand)))
            else:
                out.extend((e, None) for e in inner)
        return out

    def _through_parts(self, operand, relay_call) -> Optional[list]:
        value = self.resolver(operand)
        origin = origin_of(value) if isinstance(value, relax.Call) else None
        if origin is None or origin.root or origin.relay is not relay_call:
            return None
        found = []
        for arg in value.args:
            if _is_data_operand(arg):
                found.extend(self._through_parts(arg, relay_call) or [arg])
        return found


# v0.19's matcher tries swapped arguments for these (dataflow_matcher.cc, "Commutative").
_CREATE_GROUP_COMMUTATIVE = {"add", "multiply"}


def _unwrap_hint(hint: Any) -> Any:
    while isinstance(hint, (rp.AttrPattern, rp.DataTypePattern, rp.ShapePattern,
                            rp.TypePattern)):
        hint = hint.pattern
    return hint


def composite_params(root, bindings: Mapping, params: list,
                     pattern: Any = None) -> list[RelayParam]:
    """The parameters of the composite Relay would have made for ``root`` (a composite
    function's result, ``bindings`` its body's): its leaves in the pattern's post-DFS
    order, an input used twice once (v0.19 ``PatternGrouper::CreateGroup``).

    ``pattern`` (the legacy Relay pattern, when known) orders ``add``/``multiply``
    arguments matched swapped.  Raises :class:`UnfollowableComposite` where the body
    has no Relay origin to follow.
    """
    walk = _ParamWalk(bindings, params)
    walk.walk(root, None, pattern)
    return walk.found
