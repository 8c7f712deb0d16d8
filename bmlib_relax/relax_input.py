"""Relax modules as input: models that never were Relay (ONNX, PyTorch, TVMScript).

``bmlib_relax.compile`` takes a Relax ``IRModule`` as well as Relay: e.g. the
output of ``tvm.relax.frontend.onnx.from_onnx`` or
``tvm.relax.frontend.torch.from_exported_program``.  This module brings such a
module into the form the bmlib partitioner expects from the Relay importer: a
``main`` function, weights bound as constants (``params`` given here, or the
``"params"`` a frontend attached with ``keep_params_in_input=True``), bindings
inside dataflow blocks (``FuseOpsByPattern`` only looks there), normalized.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym.analyzer import Analyzer

from .errors import ConversionError, ParamError
from .runtime import dim_text, input_specs

# What the frontends do to names: from_onnx (sanitize_input_names=True, the default)
# turns "input.1" into "input_1" and prefixes a name that does not start with a letter
# or "_" ("0" -> "input_0"), see its _sanitize_name.
RENAMED_NOTE = ("names are those of the Relax module's main, which TVM's frontends may "
                "rename: from_onnx turns 'input.1' into 'input_1' and '0' into 'input_0'")


def is_relax_module(value: object) -> bool:
    return isinstance(value, tvm.IRModule) and any(
        isinstance(f, relax.Function) for f in value.functions.values())


def prepare_relax_module(mod: tvm.IRModule, params: Optional[Mapping[str, np.ndarray]] = None,
                         input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                         inputs: Optional[Sequence[str]] = None) -> tvm.IRModule:
    """``mod`` with its weights bound and its bindings in dataflow blocks.

    ``inputs`` (names) declares the model's inputs as for Relay input
    (:func:`~.compiler.unbound_inputs`): every other parameter of ``main`` must be a
    weight, given by ``params`` or attached by the frontend."""
    names = [gv.name_hint for gv in mod.functions]
    if "main" not in names:
        raise ConversionError(f"the Relax module has no 'main' function (it has "
                              f"{', '.join(sorted(names)) or 'none'})")
    if input_shapes:
        raise ParamError("input_shapes applies to Relay input; give a Relax module static "
                         "shapes when importing it (e.g. from_onnx(model, shape_dict=...))")
    main = mod["main"]
    if main.attrs is not None and "params" in main.attrs:  # keep_params_in_input=True
        mod, attached = relax.frontend.detach_params(mod)
        bound = {p.name: t for p, t in zip(mod["main"].params[-len(attached["main"]):],
                                           attached["main"])} if attached.get("main") else {}
        params = {**{k: v.numpy() for k, v in bound.items()}, **dict(params or {})}
    params = dict(params or {})
    _check_names(mod["main"], params, inputs)
    if params:
        by_name = {p.name: p for p in mod["main"].params}
        # np.require, not ascontiguousarray: that one makes a 0-d weight shape (1,)
        arrays = {k: np.require(v, requirements="C") for k, v in params.items()}
        for name, array in arrays.items():
            check_relax_param(name, array, by_name[name])
        check_shared_dims(mod["main"], arrays)
        mod = relax.transform.BindParams(
            "main", {k: tvm.runtime.tensor(v) for k, v in arrays.items()})(mod)
    input_specs(mod["main"])  # every remaining parameter is a tensor input (or an error)
    mod = relax.transform.ConvertToDataflow()(mod)
    return bind_shape_values(relax.transform.Normalize()(mod))


def _check_names(main: relax.Function, params: Mapping[str, np.ndarray],
                 inputs: Optional[Sequence[str]]) -> None:
    """Weights and declared inputs name parameters of ``main``; declared inputs and
    weights cover all of them.  The last two checks are the Relay path's
    (``compiler.unbound_inputs``); an unknown name says how frontends rename."""
    from .compiler import unbound_inputs  # local: compiler loads this module lazily

    names = [p.name for p in main.params]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise ParamError(f"params {', '.join(map(repr, unknown))} are no parameter of "
                         f"main (it takes {', '.join(sorted(names))})"
                         f"{renamed_hint(unknown, names)}", unknown[0])
    declared = list(dict.fromkeys(inputs or ()))
    unknown = [n for n in declared if n not in names]
    if unknown:
        raise ParamError(f"declared input(s) {', '.join(map(repr, unknown))} are not "
                         f"parameters of @main (parameters: {', '.join(sorted(names))})"
                         f"{renamed_hint(unknown, names)}", unknown[0])
    unbound_inputs(tvm.IRModule({tvm.ir.GlobalVar("main"): main}), params, declared)


def sanitized_name(name: str) -> str:
    """``name`` as TVM's ``from_onnx`` sanitises an input name (its ``_sanitize_name``,
    without the numbering it adds on a clash)."""
    new = name.replace(".", "_")
    if not new or not (new[0].isalpha() or new[0] == "_"):
        new = "input_" + new
    return new


def renamed_hint(unknown: Sequence[str], names: Sequence[str]) -> str:
    """The tail of an unknown-name message: which given names match a renamed
    parameter, and how frontends rename."""
    guesses = [f"{sanitized_name(n)!r} for {n!r}" for n in unknown
               if sanitized_name(n) != n and sanitized_name(n) in names]
    guess = f"; did you mean {', '.join(guesses)}?" if guesses else ""
    return f"{guess} ({RENAMED_NOTE})"


def check_shared_dims(main: relax.Function, arrays: Mapping[str, np.ndarray]) -> None:
    """A ``ParamError`` when weights disagree on a symbolic dim of ``main``'s parameters.

    ``check_relax_param`` lets a symbolic dim take any size, one weight at a time; but
    ``w: (n, 3)`` and ``v: (n, 3)`` must agree on ``n``.  ``BindParams`` raised TVM's
    raw ValueError on 2 vs 4, and bound 1 vs 4 (broadcasting hid it), pinning ``n`` to
    whichever it saw last.  A dim that is a formula (``2 * n``) is checked against the
    sizes the whole-var dims gave."""
    params = [p for p in main.params if p.name in arrays]
    sizes: list[tuple[tirx.Var, int, str]] = []  # (var, size, the weight that set it)
    for param in params:
        for axis, dim in enumerate(_dims_of(param)):
            if not isinstance(dim, tirx.Var):
                continue
            size = int(arrays[param.name].shape[axis])
            seen = next((s for s in sizes if s[0].same_as(dim)), None)
            if seen is None:
                sizes.append((dim, size, param.name))
            elif seen[1] != size:
                raise ParamError(
                    f"params {seen[2]!r} and {param.name!r} disagree on the symbolic dim "
                    f"{dim.name!r}: {seen[2]!r} gives it {seen[1]}, {param.name!r} {size} "
                    f"(shape {tuple(arrays[param.name].shape)})", param.name)
    analyzer = Analyzer()
    for var, size, _ in sizes:
        analyzer.bind(var, tirx.IntImm(str(var.ty), size))
    for param in params:
        for axis, dim in enumerate(_dims_of(param)):
            if isinstance(dim, (tirx.Var, tirx.IntImm)):
                continue
            want = analyzer.simplify(dim)
            got = int(arrays[param.name].shape[axis])
            if isinstance(want, tirx.IntImm) and int(want) != got:
                given = ", ".join(f"{v.name} = {n} from {w!r}" for v, n, w in sizes
                                  if any(v.same_as(u) for u in tirx.analysis.undefined_vars(dim)))
                raise ParamError(f"param {param.name!r}: dim {axis} is {dim_text(dim)}, which "
                                 f"is {int(want)} with {given}, but it has {got}", param.name)


def _dims_of(param: relax.Var) -> list:
    ty = param.ty
    shape = getattr(ty, "shape", None) if isinstance(ty, relax.TensorType) else None
    return list(shape.values) if shape is not None and hasattr(shape, "values") else []


# Calls that take a shape *value* natively (packed functions, the conversion back).
_SHAPE_VALUE_OPS = ("relax.shape_to_tensor",)


def _run_time_shape(arg: relax.Expr) -> bool:
    """A shape-typed variable whose dims are not in its type: ``tensor_to_shape(s)``."""
    ty = getattr(arg, "ty", None)
    return isinstance(arg, relax.Var) and isinstance(ty, relax.ShapeType) and ty.values is None


@mutator
class _ShapeValueBinder(PyExprMutator):
    """Gives each run-time shape an op takes names for its dims (``match_cast``).
    An error is kept in ``error`` (raised through TVM's FFI it would become a
    RuntimeError) and raised by :func:`bind_shape_values`."""

    error: Optional[ConversionError] = None

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        op = call.op
        if not isinstance(op, tvm.ir.Op) or op.name.startswith("relax.call_") or \
                op.name in _SHAPE_VALUE_OPS or not any(map(_run_time_shape, call.args)):
            return call
        args = [self._bind(op, a) if _run_time_shape(a) else a for a in call.args]
        return relax.Call(op, args, call.attrs, call.ty_args, call.span)

    def _bind(self, op: tvm.ir.Op, shape: relax.Var) -> relax.Expr:
        ndim = shape.ty.ndim
        if ndim < 0:
            self.error = self.error or ConversionError(
                f"R.{op.name[len('relax.'):]} takes a run-time shape ({shape.name}) of unknown "
                "rank, which TVM cannot build; give the tensor holding the shape a static "
                "length (from_onnx(model, shape_dict=...)) or make the shape a constant",
                op=op.name)
            return shape
        dims = [tirx.Var(f"{shape.name}_dim{i}", "int64") for i in range(ndim)]
        self.builder_.match_cast(shape, relax.ShapeType(dims))
        return relax.ShapeExpr(dims)


def bind_shape_values(mod: tvm.IRModule) -> tvm.IRModule:
    """Ops given a shape computed at run time get a ``ShapeExpr`` of fresh dims instead.

    ONNX ``ConstantOfShape(s)`` with ``s`` a model input is ``broadcast_to(c,
    tensor_to_shape(s))``: the shape's rank is known (``R.Shape(ndim=2)``) but not its
    dims, and TVM's legalization takes only a ``ShapeExpr``, so VM codegen raised a raw
    InternalError (plain ``tvm.compile`` too).  ``match_cast(shape, R.Shape([d0, d1]))``
    names the dims, which is what TVM's frontend does itself for ``Expand``/``Reshape``
    (its ``_tensor_to_shape_expr``); the op then lowers with symbolic dims.  A shape of
    unknown rank is a ``ConversionError`` naming the op, before anything is built."""
    binder = _ShapeValueBinder(mod)
    changed = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            new = binder.visit_expr(func)
            if binder.error is not None:
                raise binder.error
            if not new.same_as(func):
                changed[gvar] = new
    if not changed:
        return mod
    mod = mod.clone()  # never the caller's module, which IRModule.__setitem__ would change
    for gvar, func in changed.items():
        mod[gvar] = func
    return mod


def check_relax_param(name: str, value: np.ndarray, param: relax.Var) -> None:
    """A ``ParamError`` when ``value`` does not fit ``main``'s parameter ``param``, in the
    words the Relay path uses (``relay.params.check_param``): its shape (a symbolic dim
    takes any size) and exactly its dtype (a big-endian ``>f4`` array is no ``float32``
    one there either).  ``BindParams`` gave TVM's raw errors, or bound it and failed
    later in an op's type check."""
    spec = input_specs(relax.Function([param], param))[0]
    want = spec["shape"]
    shape_ok = value.ndim == len(want) and all(
        not isinstance(w, int) or w == s for w, s in zip(want, value.shape))
    if not (shape_ok and str(value.dtype) == spec["dtype"]):
        dims = [str(w) for w in want]
        want_text = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
        raise ParamError(f"parameter {name!r}: expected shape {want_text} dtype "
                         f"{spec['dtype']}, got shape {tuple(value.shape)} dtype {value.dtype}",
                         name)
