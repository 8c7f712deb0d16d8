"""Translate legacy Relay DFPatterns (and their check functions) into Relax DPL.

A Relay pattern names Relay ops with Relay arities (``is_op("reshape")(x)``);
the importer emits Relax ops, sometimes with extra non-tensor operands
(``relax.reshape(x, shape)``), under other names (``transpose`` →
``relax.permute_dims``) or as several calls (``nn.dense(x, w)`` →
``matmul(x, permute_dims(w))``).  The tables here state, per Relay op, the
Relax form the importer produces, so a pattern written against Relay matches
exactly the calls the importer emitted for the same Relay ops.  Ops whose
import is not a single Relax call get a translator function registered with
:func:`register_pattern_translator`.

``has_attr`` constraints become DPL ``has_attr`` where the Relax op carries the
attribute under a known name (:data:`RELAX_ATTR_NAME`) and the value has the
attribute's own kind; every constraint is also checked after the match on the
Relay-style view of :mod:`.relay_view` as v0.19's ``MatchRetValue`` compared it
(an int attribute equals only an int, a float one a float exactly, a string or
dtype one a string), as are the others (``units``, ``transpose_b``, ``newshape``,
clip bounds, ...) and legacy check functions.  ``has_type``/``has_shape`` with a
``?`` or a symbolic dim are checked after the match too: a ``?`` matches only a
run-time dim, a symbolic dim only the same one (v0.19's ``StructuralEqual``).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import tvm
from tvm import relax
from tvm.relax import dpl

from ..errors import BmlibError
from ..importer.provenance import origin_of
from ..registry import Registry
from ..relay import dataflow_pattern as rp
from ..relay.pattern_matcher import attr_kind, attr_value_equal
from .relay_view import relay_view


class PatternTranslationError(BmlibError, ValueError):
    """A legacy pattern uses something with no Relax equivalent (names it)."""


class PatternCheckError(BmlibError):
    """A legacy check function raised (names the pattern, the Relay call and the line)."""


# Relay op -> Relax op name, where it is not just "relax." + the Relay name.
RELAX_OP_NAME = {
    "transpose": "relax.permute_dims",
    "nn.batch_flatten": "relax.reshape",
    "nn.leaky_relu": "relax.nn.leakyrelu",
    "nn.global_avg_pool2d": "relax.nn.adaptive_avg_pool2d",
    "cast": "relax.astype",
    "concatenate": "relax.concat",
}

# Relay op -> number of trailing non-tensor operands the Relax op adds.
EXTRA_OPERANDS = {
    "reshape": 1,          # the target shape
    "nn.batch_flatten": 1,
    "clip": 2,             # a_min, a_max are PrimValue operands
    "strided_slice": 4,    # axes, begin, end, strides
}

# (Relay op, Relay attribute) -> (Relax attribute, value converter), where the
# Relax op stores the same value as an attribute.  Anything else in a has_attr
# is checked on the Relay-style view after the match.
_SAME = None
RELAX_ATTR_NAME: dict[tuple[str, str], tuple[str, Optional[Callable]]] = {
    **{("nn.conv2d", a): (a, _SAME) for a in ("strides", "dilation", "groups", "data_layout",
                                              "kernel_layout")},
    **{("nn.conv2d_transpose", a): (a, _SAME) for a in ("strides", "output_padding",
                                                        "dilation", "groups", "data_layout",
                                                        "kernel_layout")},
    **{("nn.batch_norm", a): (a, _SAME) for a in ("axis", "epsilon", "center", "scale")},
    **{("nn.layer_norm", a): (a, _SAME) for a in ("epsilon", "center", "scale")},
    ("nn.layer_norm", "axis"): ("axes", lambda v: [v] if isinstance(v, int) else list(v)),
    **{(op, a): (a, _SAME) for op in ("nn.max_pool2d", "nn.avg_pool2d")
       for a in ("pool_size", "strides", "dilation", "layout", "ceil_mode")},
    ("nn.softmax", "axis"): ("axis", _SAME),
    ("nn.leaky_relu", "alpha"): ("alpha", _SAME),
    ("transpose", "axes"): ("axes", _SAME),
    ("concatenate", "axis"): ("axis", _SAME),
}

CallTranslator = Callable[[Sequence[dpl.DFPattern], rp.CallPattern], dpl.DFPattern]
CALL_TRANSLATORS: Registry[CallTranslator] = Registry("pattern translator for Relay op")


def register_pattern_translator(relay_op: str) -> Callable[[CallTranslator], CallTranslator]:
    """Register how a Relay op's call pattern becomes Relax DPL."""
    return CALL_TRANSLATORS.register(relay_op)


def relax_op_name(relay_op: str) -> str:
    return RELAX_OP_NAME.get(relay_op, "relax." + relay_op)


def _relax_op(relay_op: str) -> str:
    """The Relax op ``relay_op`` imports to as a single call, refused (naming the Relay op)
    where there is none: ``nn.lrn``, ``qnn.conv2d``, ``copy`` ... import to other forms,
    so a pattern of them cannot match the imported program (README: such entries of a
    foreign table are left out)."""
    name = relax_op_name(relay_op)
    try:
        tvm.ir.Op.get(name)
    except (AttributeError, RuntimeError, ValueError):
        raise PatternTranslationError(
            f"is_op({relay_op!r}): the Relay op has no single-op Relax form ({name} is not "
            "a Relax op), so no imported program can match it") from None
    return name


def _arity(args: Sequence[dpl.DFPattern], relay_op: str, count: int) -> None:
    if len(args) != count:
        raise PatternTranslationError(f"is_op({relay_op!r}) takes {count} argument(s) in a "
                                      f"pattern, got {len(args)}")


@register_pattern_translator("nn.dense")
def _dense(args, pattern):
    _arity(args, "nn.dense", 2)
    return dpl.is_op("relax.matmul")(args[0], dpl.is_op("relax.permute_dims")(args[1]))


@register_pattern_translator("nn.batch_matmul")
def _batch_matmul(args, pattern):
    # transpose_b=True (Relay's default) imports with a permute_dims of the rhs.
    _arity(args, "nn.batch_matmul", 2)
    return dpl.is_op("relax.matmul")(args[0], dpl.is_op("relax.permute_dims")(args[1])) | \
        dpl.is_op("relax.matmul")(args[0], args[1])


@register_pattern_translator("nn.bias_add")
def _bias_add(args, pattern):
    # Last-axis bias: add(x, b); channel bias: add(x, reshape(b, [C, 1, ..., 1])).
    _arity(args, "nn.bias_add", 2)
    return dpl.is_op("relax.add")(args[0], args[1]) | \
        dpl.is_op("relax.add")(args[0], dpl.is_op("relax.reshape")(args[1], dpl.wildcard()))


@register_pattern_translator("nn.pad")
def _pad(args, pattern):
    # Relay passes the pad value as a second operand; Relax keeps it as an attribute.
    return dpl.is_op("relax.nn.pad")(args[0])


# --------------------------------------------------------------------------- translation
class _Translation:
    """One legacy pattern's translation: the DPL pattern plus post-match attr checks."""

    def __init__(self):
        self.memo: dict[int, dpl.DFPattern] = {}
        # annotation name -> (Relay op, {attr: value}, legacy sub-pattern)
        self.deferred_attrs: dict[str, tuple[Optional[str], dict, rp.DFPattern]] = {}
        self.annotations: dict[str, dpl.DFPattern] = {}
        # annotation name -> the Relay op the matched Relax call must come from
        self.relay_ops: dict[str, str] = {}
        # annotation name -> the dims (``None``: Relay's ``?``) the match must have
        self.deferred_shapes: dict[str, tuple] = {}

    def translate(self, pattern: Any) -> dpl.DFPattern:
        if isinstance(pattern, dpl.DFPattern):
            return pattern
        if not isinstance(pattern, rp.DFPattern):
            raise PatternTranslationError(f"not a pattern: {type(pattern).__name__}")
        if id(pattern) not in self.memo:
            self.memo[id(pattern)] = self._node(pattern)
        return self.memo[id(pattern)]

    def _call(self, pattern: rp.CallPattern) -> dpl.DFPattern:
        if isinstance(pattern.op, rp.AltPattern):
            # ``(is_op("add") | is_op("nn.bias_add"))(x, b)`` (cutlass.py): one call per op,
            # the argument patterns shared.
            ops = _alternative_ops(pattern.op)
            calls = [self._call(rp.CallPattern(op, pattern.args)) for op in ops]
            result = calls[0]
            for call in calls[1:]:
                result = result | call
            return result
        if not isinstance(pattern.op, rp.OpPattern):
            raise PatternTranslationError("only is_op(...) calls can be translated, got a call "
                                          f"of {type(pattern.op).__name__}")
        name = pattern.op.name
        if pattern.args is None:
            # Any arguments: as many wildcards as the Relax op has inputs (FuseOpsByPattern
            # fails on variadic call patterns).
            relax_name = _relax_op(name)
            arity = int(tvm.ir.Op.get(relax_name).num_inputs)
            if arity < 0:
                return self._from_relay_op(name, dpl.is_op(relax_name)(varg_default_wildcard=True))
            return self._from_relay_op(name, dpl.is_op(relax_name)(
                *[dpl.wildcard() for _ in range(arity)]))
        args = [self.translate(a) for a in pattern.args]
        custom = CALL_TRANSLATORS.get(name)
        if custom is not None:
            return self._from_relay_op(name, custom(args, pattern))
        args += [dpl.wildcard() for _ in range(EXTRA_OPERANDS.get(name, 0))]
        return self._from_relay_op(name, dpl.is_op(_relax_op(name))(*args))

    def _from_relay_op(self, relay_op: str, translated: dpl.DFPattern) -> dpl.DFPattern:
        """Remember that what ``translated`` matches must be imported from ``relay_op``:
        ``is_op("add")`` must not match the ``add`` that ``nn.bias_add`` became."""
        key = f"legacy_op{len(self.relay_ops)}"
        self.relay_ops[key] = relay_op
        self.annotations[key] = translated
        return translated

    def _attrs(self, p: rp.AttrPattern) -> dpl.DFPattern:
        """DPL ``has_attr`` for what Relax stores alike (it narrows the search); all of
        them are checked on the Relay view too, with v0.19's typed comparison."""
        inner = self.translate(p.pattern)
        op = _relay_op_of(p.pattern)
        direct = {}
        for key, value in p.attrs.items():
            mapped = RELAX_ATTR_NAME.get((op, key)) if op is not None else None
            if mapped is not None and _has_kind(value, attr_kind(op, key)):
                relax_name, convert = mapped
                direct[relax_name] = value if convert is None else convert(value)
        result = inner.has_attr(direct) if direct else inner
        if p.attrs:
            key = f"legacy_attrs{len(self.deferred_attrs)}"
            self.annotations[key] = result
            self.deferred_attrs[key] = (op, dict(p.attrs), p.pattern)
        return result

    def _shape(self, inner: dpl.DFPattern, dims: Sequence[Any]) -> dpl.DFPattern:
        """A shape constraint: static dims in DPL, any ``?`` or symbolic dim (which DPL's
        ``ShapePattern`` cannot hold) checked after the match."""
        from ..relay import ast

        dims = tuple(None if isinstance(d, ast.Any) else d for d in dims)
        if all(isinstance(d, int) for d in dims):
            return inner.has_shape(list(dims))
        key = f"legacy_shape{len(self.deferred_shapes)}"
        self.annotations[key] = inner
        self.deferred_shapes[key] = dims
        return inner

    def _node(self, p: rp.DFPattern) -> dpl.DFPattern:
        if isinstance(p, rp.WildcardPattern):
            if p.pattern is not None:  # redirect_to(...): a recursive pattern
                raise PatternTranslationError("a wildcard redirected with redirect_to(...) has "
                                              "no Relax DPL translation")
            return dpl.wildcard()
        if isinstance(p, rp.ConstantPattern):
            return dpl.is_const()
        if isinstance(p, rp.VarPattern):
            return dpl.is_var(p.name_hint) if p.name_hint else dpl.is_var()
        if isinstance(p, rp.CallPattern):
            return self._call(p)
        if isinstance(p, rp.OpPattern):
            raise PatternTranslationError(f"is_op({p.name!r}) must be called with its arguments")
        if isinstance(p, rp.TupleGetItemPattern):
            index = -1 if p.index is None else p.index
            return dpl.is_tuple_get_item(self.translate(p.tuple_value), index)
        if isinstance(p, rp.TuplePattern):
            if p.fields is None:
                return dpl.wildcard()
            return dpl.is_tuple([self.translate(f) for f in p.fields])
        if isinstance(p, rp.AltPattern):
            return self.translate(p.left) | self.translate(p.right)
        if isinstance(p, rp.AttrPattern):
            return self._attrs(p)
        if isinstance(p, rp.DataTypePattern):
            return self.translate(p.pattern).has_dtype(p.dtype)
        if isinstance(p, rp.ShapePattern):
            return self._shape(self.translate(p.pattern), p.shape)
        if isinstance(p, rp.TypePattern):
            return self._type(p)
        if isinstance(p, rp.DominatorPattern):
            # Relax DPL has no dominator analysis; an unrolled approximation would
            # silently match a different set of graphs than Relay did.
            raise PatternTranslationError(
                "dominates(...) has no Relax DPL equivalent: write the chain between "
                "parent and child out explicitly (e.g. is_op('nn.relu')(is_op('add')(...)))")
        if isinstance(p, rp.ExprPattern):
            return self._expr(p)
        raise PatternTranslationError(f"{type(p).__name__} has no Relax DPL translation yet")

    def _expr(self, p: rp.ExprPattern) -> dpl.DFPattern:
        """``is_expr(constant)``: the Relax constant the importer makes of it (DPL compares
        constants by value).  Other Relay expressions have no counterpart after import."""
        from ..relay import ast
        from tvm import relax

        expr = p.expr
        if isinstance(expr, ast.Constant) and expr.data is not None:
            return dpl.is_expr(relax.const(expr.data, str(expr.data.dtype)))
        raise PatternTranslationError(
            f"is_expr({type(expr).__name__}) cannot match the imported Relax program; only "
            "constants translate (use wildcard()/is_var() with a check function otherwise)")

    def _type(self, p: rp.TypePattern) -> dpl.DFPattern:
        """``has_type(Tensor[(shape), dtype])`` as Relax dtype and shape constraints."""
        from ..relay import ast

        ty = p.type
        inner = self.translate(p.pattern)
        if not isinstance(ty, ast.TensorType):
            raise PatternTranslationError(f"has_type({ty!r}): only tensor types can be matched")
        # v0.19 compared the whole type (StructuralEqual): rank, every dim, the dtype.
        return self._shape(inner.has_dtype(ty.dtype), tuple(ty.shape))


def _alternative_ops(p: Any) -> list:
    """The ``is_op`` leaves of ``is_op(a) | is_op(b) | ...``."""
    if isinstance(p, rp.AltPattern):
        return _alternative_ops(p.left) + _alternative_ops(p.right)
    if isinstance(p, rp.OpPattern):
        return [p]
    raise PatternTranslationError("a call of an alternative can only choose between "
                                  f"is_op(...) ops, got {type(p).__name__}")


def _relay_op_of(p: Any) -> Optional[str]:
    if isinstance(p, rp.CallPattern) and isinstance(p.op, rp.OpPattern):
        return p.op.name
    return None


def translate(pattern: Any, memo: dict | None = None) -> dpl.DFPattern:
    """Relax DPL equivalent of a legacy Relay pattern (Relax patterns pass through).

    Shared sub-patterns stay shared (memoised by identity), as DPL requires for
    patterns that use one wildcard twice.  Attribute constraints without a Relax
    attribute, and shapes with a ``?`` or symbolic dim, are dropped here;
    :func:`translate_entry` keeps them (and the typed attribute comparison) as checks.
    """
    translation = _Translation()
    if memo is not None:
        translation.memo = memo
    return translation.translate(pattern)


def _has_kind(value: Any, kind: Optional[str]) -> bool:
    """Whether a pattern value is of the attribute's declared kind (ints for an int or
    int-array field, floats for a float field, a string for a string field), so that DPL
    compares like with like; anything else is left to the typed check."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_has_kind(v, kind) for v in value)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, float)
    return kind == "str" and isinstance(value, str)


def _attr_equal(op: Optional[str], key: str, actual: Any, expected: Any) -> bool:
    """v0.19's ``MatchRetValue`` (see :func:`~bmlib_relax.relay.pattern_matcher.
    attr_value_equal`): typed, floats exactly."""
    return attr_value_equal(expected, actual, attr_kind(op, key))


def _dims_match(expr: Any, dims: tuple) -> bool:
    """The matched Relax value has the rank and dims of a Relay shape with ``?`` or
    symbolic dims: an int only a static dim of that size, ``?`` (None) only a run-time
    dim, a symbolic dim only the same named dim (v0.19 compared the types with
    ``StructuralEqual``)."""
    ty = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or len(values) != len(dims):
        return False
    for want, have in zip(dims, values):
        static = isinstance(have, tvm.tirx.IntImm)
        if isinstance(want, int):
            if not static or int(have.value) != want:
                return False
        elif want is None:
            if static:
                return False
        elif static or str(have) != str(want):
            return False
    return True


def translate_entry(name: str, pattern: Any, check: Optional[Callable] = None,
                    base_check: Optional[Callable] = None) -> tuple:
    """A legacy ``(name, pattern[, check])`` entry as ``(name, dpl, annotations, check)``.

    The resulting check runs ``base_check`` (the backend's own dtype/shape
    predicate), the attribute constraints DPL could not express, then the
    legacy ``check`` on the Relay-style view of the matched root.
    """
    translation = _Translation()
    projected = None
    if isinstance(pattern, rp.TupleGetItemPattern) and pattern.index is not None:
        # FuseOpsByPattern roots matches at calls only: ``is_tuple_get_item(bn(...), 0)``
        # (TensorRT's batch_norm entry) becomes a composite of the call, its tuple
        # projected outside; the check still receives the TupleGetItem.
        projected = pattern.index
        root_hint = pattern.tuple_value
    else:
        root_hint = pattern
    try:
        dpl_pattern = translation.translate(root_hint)
    except PatternTranslationError as exc:
        raise PatternTranslationError(f"pattern {name!r}: {exc}") from None
    deferred = dict(translation.deferred_attrs)
    shapes = dict(translation.deferred_shapes)
    relay_ops = dict(translation.relay_ops)

    def root_view(context):
        root = relay_view(context.matched_expr, context, root_hint)
        if projected is None:
            return root
        return _project(root, projected)

    def legacy_check(context) -> bool:
        if base_check is not None and not base_check(context):
            return False
        if not _from_relay_ops(context, relay_ops):
            return False
        for key, dims in shapes.items():
            if key in context.annotated_expr and \
                    not _dims_match(context.annotated_expr[key], dims):
                return False
        for key, (op, attrs, sub_pattern) in deferred.items():
            if key not in context.annotated_expr:
                continue  # in an alternative that did not match
            expr = context.annotated_expr[key]
            attrs_view = getattr(relay_view(expr, context, sub_pattern), "attrs", None)
            if attrs_view is None or not all(
                    key_ in attrs_view and _attr_equal(op, key_, attrs_view[key_], value)
                    for key_, value in attrs.items()):
                return False
        if check is None:
            return True
        view = root_view(context)
        try:
            return bool(check(view))
        except BmlibError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code: name pattern, call and line
            error = PatternCheckError(
                f"{_raised_at(exc)}: check of pattern {name!r} raised {type(exc).__name__}: "
                f"{exc} (on {_describe(view)})")
            _PENDING_CHECK_ERRORS.append(error)  # TVM's FFI re-raises it as RuntimeError
            raise error from exc

    return (name, dpl_pattern, dict(translation.annotations), legacy_check)


_PENDING_CHECK_ERRORS: list = []


def take_check_error() -> Optional[PatternCheckError]:
    """The legacy check error raised inside the last ``FuseOpsByPattern`` run, if any."""
    error = _PENDING_CHECK_ERRORS[-1] if _PENDING_CHECK_ERRORS else None
    _PENDING_CHECK_ERRORS.clear()
    return error


def _raised_at(exc: BaseException) -> str:
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "<check>"


def _describe(view: Any) -> str:
    op = getattr(getattr(view, "op", None), "name", None) or type(view).__name__
    span = getattr(view, "span", None)
    return f"{op} at {span}" if span is not None else str(op)


def _project(tuple_view: Any, index: int) -> Any:
    """``TupleGetItem(tuple_view, index)`` as a Relay node (typed when the tuple is)."""
    from ..relay import ast

    if not isinstance(tuple_view, ast.Expr):
        return tuple_view
    item = ast.TupleGetItem(tuple_view, index)
    ty = tuple_view.__dict__.get("_checked_type")
    if isinstance(ty, ast.TupleType) and index < len(ty.fields):
        item._set_checked_type(ty.fields[index])
    return item


def expand_alternatives(pattern: Any, limit: int = 64) -> list:
    """A legacy pattern with alternatives as one pattern per choice, left branches first.

    Relay chose between ``a | b`` while matching, by Relay op names; after import both
    branches can have the same Relax form (``add`` and ``nn.bias_add`` both became
    ``relax.add``), and DPL would commit to the left branch before the op names are
    checked.  Trying each choice as its own pattern, in Relay's order, keeps Relay's
    result.  Patterns with more than ``limit`` choices are left as they are.
    """
    import dataclasses
    import itertools

    alternatives: list = []
    seen: set = set()
    stack = [pattern]
    while stack:
        node = stack.pop()
        if not isinstance(node, rp.DFPattern) or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, rp.AltPattern):
            alternatives.append(node)
        for value in vars(node).values():
            stack.extend(value if isinstance(value, tuple) else (value,))
    if not alternatives or 2 ** len(alternatives) > limit:
        return [pattern]

    variants, keys = [], set()
    for choice in itertools.product((0, 1), repeat=len(alternatives)):
        chosen = {id(a): (a.left if c == 0 else a.right) for a, c in zip(alternatives, choice)}
        consulted: list = []
        memo: dict = {}

        def rebuild(node):
            if not isinstance(node, rp.DFPattern):
                return node
            if id(node) in memo:
                return memo[id(node)]
            if isinstance(node, rp.AltPattern):
                consulted.append((id(node), chosen[id(node)] is node.left))
                result = rebuild(chosen[id(node)])
            else:
                changes = {}
                for f in dataclasses.fields(node):
                    value = getattr(node, f.name)
                    new = tuple(rebuild(v) for v in value) if isinstance(value, tuple) \
                        else rebuild(value)
                    if new is not value and (not isinstance(value, tuple) or
                                             any(a is not b for a, b in zip(new, value))):
                        changes[f.name] = new
                result = dataclasses.replace(node, **changes) if changes else node
            memo[id(node)] = result
            return result

        variant = rebuild(pattern)
        key = tuple(sorted(consulted))
        if key not in keys:  # choices in branches that were not taken change nothing
            keys.add(key)
            variants.append(variant)
    return variants


def _from_relay_ops(context, relay_ops: dict[str, str]) -> bool:
    """Every matched call that has a Relay origin is the root of a call of the op the
    legacy pattern named (Relay matched Relay ops; the importer's helper calls and
    other ops imported to the same Relax op are not them)."""
    annotated = context.annotated_expr
    bindings = context.matched_bindings
    for key, relay_op in relay_ops.items():
        if key not in annotated:
            continue  # in an alternative that did not match
        expr = annotated[key]
        expr = bindings.get(expr, expr) if isinstance(expr, relax.Var) else expr
        origin = origin_of(expr)
        if origin is not None and (not origin.root or
                                   getattr(origin.relay.op, "name", None) != relay_op):
            return False
    return True


def is_legacy_pattern(pattern: Any) -> bool:
    return isinstance(pattern, rp.DFPattern)
