"""The Relay → Relax import driver.

Walks a Relay function (a DAG, iteratively: dumps can be tens of thousands of
nodes deep) and emits one high-level ``relax.op.*`` call per Relay op into a
dataflow block, so that bmlib's DPL patterns can match the result.  Ops are
looked up in the converter registry; the driver itself knows only the
structural node kinds (variables, constants, tuples, projections, ``let``,
closures that are called, calls to other global functions).

Before converting anything, the whole reachable program is scanned and every
unsupported op or construct is reported in one :class:`UnsupportedOpError`,
never a partial import.

Attributes printed into the ``#[metadata]`` section are resolved here, for
every op alike: a call whose last argument is ``meta[relay.attrs.*][N]`` gets
that node's attributes, and an attribute value ``meta[runtime.BoxInt][N]`` (or
another boxed scalar) gets its value.  Without a metadata section a boxed
value stays a :class:`~bmlib_relax.relay.ast.MetaRef` for the converter to
reject by name.

Import forms (the contract with the bmlib pattern table; each converter's
module documents its own):

* ``nn.dense(x, w)`` -> ``matmul(x, permute_dims(w, [1, 0]), out_dtype)``
* ``nn.batch_matmul(a, b)`` -> ``matmul(a', b')``, ``permute_dims(.., [0, 2, 1])``
  on each operand Relay transposes (C++ defaults: neither)
* ``nn.bias_add(x, b, axis)`` -> ``add(x, b)`` on the last axis, else
  ``add(x, reshape(b, [C, 1, ..., 1]))``
* ``transpose`` -> ``permute_dims``; ``nn.batch_flatten`` -> ``reshape(x, [N, prod(rest)])``
* ``nn.softmax``/``nn.layer_norm``/``nn.relu``/``nn.conv2d``/``nn.conv2d_transpose``
  -> the ``relax.op.nn`` op of the same name; ``nn.leaky_relu`` -> ``nn.leakyrelu``
* pools -> ``nn.max_pool2d``/``nn.avg_pool2d``/``nn.adaptive_avg_pool2d``;
  ``nn.global_avg_pool2d`` -> ``nn.adaptive_avg_pool2d(x, (1, 1))`` (layout kept)
* ``nn.batch_norm`` -> ``nn.batch_norm(..., training=False)``; ``clip`` -> ``clip``;
  ``cast`` -> ``astype``; ``concatenate`` -> ``concat``; ``split`` -> ``split``
* scalar literals (``multiply(%x, 0.25f)``) -> 0-d ``relax.const(value, dtype)``
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np
import tvm
from tvm import relax

from ..errors import BmlibError, ConversionError, ParamError, UnsupportedOpError
from ..relay import ast
from ..relay.params import check_param
from ..relay.analysis import post_order_list
from .registry import get_converter

# Constructs that parse but have no Relax dataflow equivalent.
_UNSUPPORTED_CONSTRUCTS = {
    ast.Match: "match (ADT pattern matching)",
    ast.RefCreate: "ref",
    ast.RefRead: "ref_read",
    ast.RefWrite: "ref_write",
    ast.Constructor: "ADT constructor",
    ast.If: "if/else control flow",
}


@dataclass(frozen=True)
class _Closure:
    """A Relay function value that will be inlined where it is called."""

    func: ast.Function
    env: Mapping[ast.Var, Any]


def _attrs_meta_arg(call: ast.Call) -> Optional[ast.MetaRef]:
    """The trailing ``meta[relay.attrs.*][N]`` argument holding a call's attributes."""
    last = call.args[-1] if call.args else None
    if isinstance(last, ast.MetaRef) and last.kind.startswith("relay.attrs."):
        return last
    return None


def _decode_meta_attr(text: Any) -> Any:
    """A scalar attribute from metadata JSON (stored as a string): int, float, None or str."""
    if not isinstance(text, str):
        return text
    if text == "":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _where(node: object) -> Optional[str]:
    span = getattr(node, "span", None)
    return str(span) if span is not None else None


class ConvertContext:
    """What a converter may use besides its inputs and attributes."""

    def __init__(self, importer: "RelayImporter", call: ast.Call):
        self._importer = importer
        self.call = call

    @property
    def op_name(self) -> str:
        return self.call.op.name  # type: ignore[attr-defined]

    @property
    def location(self) -> Optional[str]:
        return _where(self.call)

    @property
    def bb(self) -> relax.BlockBuilder:
        return self._importer.bb

    def emit(self, expr: relax.Expr) -> relax.Expr:
        """Emit an intermediate Relax expression, naming the op on failure."""
        return self._importer.emit(expr, self.call)

    def error(self, message: str) -> ConversionError:
        return ConversionError(message, op=self.op_name, location=self.location)

    def unsupported_attr(self, name: str, value: Any) -> ConversionError:
        return self.error(f'"{name}={value}" is not supported')


def tensor_type(ty: ast.Type, where: Optional[str] = None,
                dim_vars: Optional[dict] = None) -> relax.Type:
    """Relax type of a Relay type; ``?`` dims become fresh symbolic int64 vars, named or
    symbolic dims (``te.var("n")``) one int64 var per name (shared through ``dim_vars``)."""
    if isinstance(ty, ast.TensorType):
        dims = []
        for i, dim in enumerate(ty.shape):
            if isinstance(dim, int):
                dims.append(int(dim))
            elif dim is None:
                dims.append(tvm.tirx.Var(f"d{i}", "int64"))
            else:
                name = dim if isinstance(dim, str) else getattr(dim, "name", None) or f"d{i}"
                cache = dim_vars if dim_vars is not None else {}
                dims.append(cache.setdefault(name, tvm.tirx.Var(str(name), "int64")))
        return relax.TensorType(dims, ty.dtype)
    if isinstance(ty, ast.TupleType):
        return relax.TupleType([tensor_type(f, where, dim_vars) for f in ty.fields])
    raise ConversionError(f"parameter type {type(ty).__name__} has no Relax equivalent",
                          location=where)


def _inferred_param_type(module: ast.IRModule, func: ast.Function, var: ast.Var) -> ast.Type:
    """The type Relay's inference gives an un-annotated input (from its uses), else an error."""
    from ..relay.type_infer import TypeInferencer

    ty = var.__dict__.get("_checked_type")
    if ty is None or isinstance(ty, ast.IncompleteType):
        try:
            TypeInferencer(module).infer(func)
        except BmlibError:
            pass
        ty = var.__dict__.get("_checked_type")
    if ty is None or isinstance(ty, ast.IncompleteType):
        raise ConversionError(f"input %{var.name} has no type annotation; "
                              "give its type in the text", location=_where(var))
    return ty


class RelayImporter:
    """Converts one Relay module's entry function into a Relax ``IRModule``."""

    def __init__(self, module: ast.IRModule, params: Optional[Mapping[str, np.ndarray]] = None,
                 observer: Optional[Callable[[ast.Expr, Any], None]] = None):
        self.module = module
        self.params = dict(params or {})
        self.bb = relax.BlockBuilder()
        self._active_globals: list[str] = []
        # Called with (relay node, relax value) for every converted node; type
        # inference (relay.transform.InferType) reads Relax's types through it.
        self.observer = observer

    # ------------------------------------------------------------------ entry
    def run(self, entry: str = "main") -> tvm.IRModule:
        func = self.module[entry]
        self.check_supported(func)
        relax_params, env = self._bind_params(func)
        with self.bb.function(entry, relax_params):
            with self.bb.dataflow():
                result = self._convert(func.body, env)
                if isinstance(result, _Closure):
                    raise ConversionError("the entry function returns a function value",
                                          location=_where(func))
                output = self.bb.emit_output(result)
            self.bb.emit_func_output(output)
        return self.bb.get()

    # ------------------------------------------------------------------ checks
    def check_supported(self, func: ast.Function) -> None:
        """Raise one error listing every unsupported op/construct reachable from ``func``."""
        missing_ops: list[tuple[str, Optional[str]]] = []
        constructs: list[tuple[str, Optional[str]]] = []
        seen_globals: set[str] = set()
        pending = [func]
        while pending:
            for node in post_order_list(pending.pop()):
                kind = _UNSUPPORTED_CONSTRUCTS.get(type(node))
                if kind is not None:
                    constructs.append((kind, _where(node)))
                elif isinstance(node, ast.Call) and isinstance(node.op, ast.Op):
                    if get_converter(node.op.name) is None:
                        missing_ops.append((node.op.name, _where(node)))
                elif isinstance(node, ast.GlobalVar) and node.name not in seen_globals:
                    seen_globals.add(node.name)
                    if node.name not in self.module.functions:
                        constructs.append((f"reference to undefined global @{node.name}",
                                           _where(node)))
                    else:
                        pending.append(self.module.functions[node.name])
        if missing_ops:
            raise UnsupportedOpError(missing_ops + constructs, what="op")
        if constructs:
            raise UnsupportedOpError(
                [(f"{k} (not supported by the importer)", w) for k, w in constructs],
                what="construct")

    def _bind_params(self, func: ast.Function):
        env: dict[ast.Var, Any] = {}
        relax_params = []
        names = {v.name for v in func.params}
        dim_vars: dict = {}
        extra = sorted(set(self.params) - names)
        if extra:
            raise ParamError(
                f"parameter {extra[0]!r} is not an input of @main "
                f"(inputs: {', '.join(v.name for v in func.params)})", extra[0])
        for var in func.params:
            if var.name in self.params:
                value = self.params[var.name]
                check_param(var.name, value, var.type_annotation)
                env[var] = relax.const(value, str(value.dtype))
                continue
            var_type = var.type_annotation
            if var_type is None or isinstance(var_type, ast.IncompleteType):
                var_type = _inferred_param_type(self.module, func, var)
            rvar = relax.Var(var.name, tensor_type(var_type, _where(var), dim_vars))
            env[var] = rvar
            relax_params.append(rvar)
        return relax_params, env

    # ------------------------------------------------------------------ emission
    def emit(self, expr: relax.Expr, node: object) -> relax.Expr:
        if isinstance(expr, (relax.Var, relax.Tuple, relax.ShapeExpr)) or \
                isinstance(expr, tvm.ir.expr.GenericConst):
            return expr
        try:
            return self.bb.emit(expr)
        except BmlibError:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM type inference errors
            op = getattr(getattr(node, "op", None), "name", type(node).__name__)
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ConversionError(f"Relax rejected the converted op: {first}", op=op,
                                  location=_where(node)) from None

    # ------------------------------------------------------------------ traversal
    def _operands(self, node: ast.Expr) -> tuple:
        if isinstance(node, ast.Call):
            if isinstance(node.op, ast.Op):
                return node.args[:-1] if _attrs_meta_arg(node) is not None else node.args
            if isinstance(node.op, ast.GlobalVar):
                return node.args
            return (node.op,) + node.args
        if isinstance(node, ast.Tuple):
            return node.fields
        if isinstance(node, ast.TupleGetItem):
            return (node.tuple_value,)
        return ()

    def _convert(self, root: ast.Expr, env: dict) -> Any:
        """Convert ``root`` under ``env`` (Relay var → Relax expr or closure)."""
        memo: dict[int, Any] = {}
        observer = self.observer

        def done(node: ast.Expr, value: Any) -> None:
            memo[id(node)] = value
            if observer is not None:
                observer(node, value)

        stack: list[tuple[ast.Expr, int]] = [(root, 0)]
        while stack:
            node, stage = stack.pop()
            if stage == 0 and id(node) in memo:
                continue
            if isinstance(node, ast.Var):
                done(node, self._lookup(node, env))
            elif isinstance(node, ast.Let):
                if stage == 0:
                    stack += [(node, 1), (node.value, 0)]
                elif stage == 1:
                    env[node.var] = memo[id(node.value)]
                    stack += [(node, 2), (node.body, 0)]
                else:
                    done(node, memo[id(node.body)])
            elif isinstance(node, ast.Function):
                done(node, _Closure(node, env))
            elif stage == 0:
                stack.append((node, 1))
                stack.extend((c, 0) for c in reversed(self._operands(node))
                             if id(c) not in memo)
            else:
                inputs = [memo[id(c)] for c in self._operands(node)]
                done(node, self._visit(node, inputs, env))
        return memo[id(root)]

    def _lookup(self, var: ast.Var, env: Mapping) -> Any:
        try:
            return env[var]
        except KeyError:
            raise ConversionError(f"free variable %{var.name} is not bound",
                                  location=_where(var)) from None

    def _visit(self, node: ast.Expr, inputs: list, env: dict) -> Any:
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.Tuple):
            return relax.Tuple(inputs)
        if isinstance(node, ast.TupleGetItem):
            value = inputs[0]
            if isinstance(value, relax.Tuple):
                return value.fields[node.index]
            return self.emit(relax.TupleGetItem(value, node.index), node)
        if isinstance(node, ast.Call):
            return self._call(node, inputs, env)
        if isinstance(node, ast.MetaRef):
            raise ConversionError(f"meta[{node.kind}][{node.index}] cannot be used as a value",
                                  location=_where(node))
        raise UnsupportedOpError([(type(node).__name__, _where(node))], what="construct")

    def _constant(self, node: ast.Constant) -> relax.Expr:
        if node.data is None:
            raise ConversionError(
                f"meta[relay.Constant][{node.meta_index}] has no value: the text has no "
                "#[metadata] section; print the module with show_meta_data=True or pass the "
                "weights as parameters", op="constant", location=_where(node))
        data = node.data
        return relax.const(data, str(data.dtype))

    def _call(self, node: ast.Call, inputs: list, env: dict) -> Any:
        op = node.op
        if isinstance(op, ast.Op):
            converter = get_converter(op.name)
            if converter is None:  # check_supported normally catches this first
                raise UnsupportedOpError([(op.name, _where(node))])
            ctx = ConvertContext(self, node)
            attrs = self._call_attrs(node)
            try:
                result = converter(inputs, attrs, ctx)
            except BmlibError:
                raise
            except Exception as exc:  # noqa: BLE001 - name the op for any converter failure
                detail = str(exc).strip().splitlines()
                raise ConversionError(detail[-1] if detail else type(exc).__name__,
                                      op=op.name, location=_where(node)) from exc
            return self.emit(result, node)
        if isinstance(op, ast.GlobalVar):
            return self._inline_global(op, inputs, node)
        closure = inputs[0]
        if not isinstance(closure, _Closure):
            raise ConversionError("call of a value that is not a function",
                                  location=_where(node))
        return self._inline(closure.func, inputs[1:], dict(closure.env), node)

    def _call_attrs(self, node: ast.Call) -> ast.Attrs:
        """The call's attributes with ``#[metadata]`` references resolved."""
        meta_arg = _attrs_meta_arg(node)
        has_meta_values = any(isinstance(v, ast.MetaRef) for v in node.attrs.values())
        if meta_arg is None and not has_meta_values:
            return node.attrs
        objects = self.module.metadata.get("objects", {})
        values = dict(node.attrs)
        if meta_arg is not None:
            entries = objects.get(meta_arg.kind, [])
            if meta_arg.index >= len(entries):
                raise ConversionError(
                    f"meta[{meta_arg.kind}][{meta_arg.index}] has no value: the text has no "
                    "#[metadata] section", op=node.op.name, location=_where(node))
            raw = entries[meta_arg.index].get("attrs", {})
            values.update({k: _decode_meta_attr(v) for k, v in raw.items()})
        for key, value in node.attrs.items():
            if isinstance(value, ast.MetaRef):
                entries = objects.get(value.kind, [])
                if value.index < len(entries) and "value" in entries[value.index].get("attrs", {}):
                    values[key] = _decode_meta_attr(entries[value.index]["attrs"]["value"])
        return ast.Attrs(values)

    def _inline(self, func: ast.Function, args: list, env: dict, node: ast.Call) -> Any:
        if len(args) != len(func.params):
            raise ConversionError(f"function expects {len(func.params)} arguments, "
                                  f"got {len(args)}", location=_where(node))
        env.update(zip(func.params, args))
        return self._convert(func.body, env)

    def _inline_global(self, gvar: ast.GlobalVar, args: list, node: ast.Call) -> Any:
        if gvar.name in self._active_globals:
            raise UnsupportedOpError([(f"recursive call to @{gvar.name}", _where(node))],
                                     what="construct")
        self._active_globals.append(gvar.name)
        try:
            return self._inline(self.module[gvar.name], args, {}, node)
        finally:
            self._active_globals.pop()
