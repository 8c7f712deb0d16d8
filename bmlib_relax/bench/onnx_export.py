"""Relay program → ONNX model, the graph ONNX Runtime and OpenVINO run in the benchmark.

The benchmark compares bmlib against the CPU runtimes a user would otherwise
pick.  To compare the *same* network with the *same* weights, the reference is
emitted straight from the Relay program bmlib compiles — one ONNX node (or a
few) per Relay call, weights as initializers — rather than re-created in
another framework.  Shapes come from ``relay.transform.InferType``, so Relay's
special ``reshape`` codes and defaulted axes become explicit ONNX attributes.

Only the ops of the benchmarked models are covered; anything else raises
``NotImplementedError`` naming the op.  Emitters are registered per Relay op
with :func:`onnx_op`, next to their kin.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..relay import ast
from ..relay.analysis import post_order_list

OPSET = 17

Emitter = Callable[["_Graph", ast.Call, list], Any]
_EMITTERS: dict[str, Emitter] = {}


def onnx_op(*names: str) -> Callable[[Emitter], Emitter]:
    """Register the ONNX emitter of one or more Relay ops."""

    def decorator(fn: Emitter) -> Emitter:
        for name in names:
            if name in _EMITTERS:
                raise ValueError(f"ONNX emitter for {name!r} already registered")
            _EMITTERS[name] = fn
        return fn

    return decorator


def _onnx():
    import onnx  # optional dependency: pip install "bmlib-relax[bench]"

    return onnx


def _shape(expr: ast.Expr) -> tuple[int, ...]:
    ty = expr.checked_type
    if not isinstance(ty, ast.TensorType) or any(d is None for d in ty.shape):
        raise NotImplementedError(f"ONNX export needs static tensor shapes, got {ty}")
    return tuple(int(d) for d in ty.shape)


def _ints(value: Any, n: int = 2) -> list[int]:
    vals = [int(v) for v in value] if isinstance(value, (tuple, list)) else [int(value)]
    return vals * n if len(vals) == 1 else vals


class _Graph:
    """Nodes and initializers of the ONNX graph under construction."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.initializers: list = []
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def node(self, op_type: str, inputs: Sequence[str], hint: str = "", n_out: int = 1,
             **attrs: Any) -> Any:
        outputs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(_onnx().helper.make_node(op_type, list(inputs), outputs, **attrs))
        return outputs[0] if n_out == 1 else outputs

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.initializers.append(_onnx().numpy_helper.from_array(np.asarray(array), name))
        return name

    def int64s(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype="int64"), "shape")


def _elem_type(dtype: str) -> int:
    """ONNX's element type code of a numpy/Relay dtype name."""
    return _onnx().helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _tensor_type(ty: ast.TensorType):
    onnx = _onnx()
    elem = _elem_type(ty.dtype)
    return onnx.helper.make_tensor_type_proto(elem, [int(d) for d in ty.shape])


def relay_to_onnx(module: ast.IRModule, params: Mapping[str, np.ndarray],
                  name: str = "relay") -> Any:
    """The ``onnx.ModelProto`` of ``@main`` with ``params`` as initializers.

    Graph inputs are ``@main``'s parameters that ``params`` does not bind, in
    order and with their Relay names, so the same feed runs both.
    """
    from ..relay.transform import InferType

    onnx = _onnx()
    module = InferType()(module)
    func = module["main"]
    graph = _Graph()
    values: dict[int, Any] = {}
    inputs = []
    for var in func.params:
        if var.name in params:
            graph.initializers.append(onnx.numpy_helper.from_array(
                np.ascontiguousarray(params[var.name]), var.name))
        else:
            inputs.append(onnx.helper.make_value_info(var.name, _tensor_type(var.checked_type)))
        values[id(var)] = var.name
    # ``let %v = value; body`` (A-normal-form dumps): %v names value's output.
    let_vars: dict[int, list] = {}
    for node in post_order_list(func.body):
        if isinstance(node, ast.Let):
            let_vars.setdefault(id(node.value), []).append(node.var)
    bound = {id(var) for group in let_vars.values() for var in group}
    for node in post_order_list(func.body):
        if id(node) not in values and not isinstance(node, ast.Op) and id(node) not in bound:
            values[id(node)] = (values[id(node.body)] if isinstance(node, ast.Let)
                                else _emit(graph, node, values))
        for var in let_vars.get(id(node), ()):
            values[id(var)] = values[id(node)]
    result = values[id(func.body)]
    results = list(result) if isinstance(result, tuple) else [result]
    body_types = (func.body.checked_type.fields if isinstance(func.body.checked_type, ast.TupleType)
                  else (func.body.checked_type,))
    outputs = []
    for index, (out_name, ty) in enumerate(zip(results, body_types)):
        final = f"output{index}"
        graph.nodes.append(onnx.helper.make_node("Identity", [out_name], [final]))
        outputs.append(onnx.helper.make_value_info(final, _tensor_type(ty)))
    onnx_graph = onnx.helper.make_graph(graph.nodes, name, inputs, outputs, graph.initializers)
    model = onnx.helper.make_model(onnx_graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="bmlib-relax")
    model.ir_version = min(model.ir_version, 8)  # readable by every current runtime
    onnx.checker.check_model(model)
    return model


def _emit(graph: _Graph, node: ast.Expr, values: dict) -> Any:
    if isinstance(node, ast.Call):
        if not isinstance(node.op, ast.Op):
            raise NotImplementedError("ONNX export: calls of functions are not supported")
        emitter = _EMITTERS.get(node.op.name)
        if emitter is None:
            raise NotImplementedError(f"ONNX export: no emitter for Relay op {node.op.name!r}")
        return emitter(graph, node, [values[id(a)] for a in node.args])
    if isinstance(node, ast.Constant):
        return graph.const(np.asarray(node.data))
    if isinstance(node, ast.Tuple):
        return tuple(values[id(f)] for f in node.fields)
    if isinstance(node, ast.TupleGetItem):
        produced = values[id(node.tuple_value)]
        if isinstance(produced, _SingleOutput):
            if node.index != 0:
                raise NotImplementedError("ONNX export: only output 0 of batch_norm and dropout "
                                          "is supported")
            return produced.name
        return produced[node.index]
    raise NotImplementedError(f"ONNX export: unsupported Relay construct {type(node).__name__}")


class _SingleOutput:
    """A Relay op returning a tuple of which the models only read field 0
    (batch_norm, dropout)."""

    def __init__(self, name: str):
        self.name = name


def _elementwise(op_type: str) -> Emitter:
    def emit(graph: _Graph, call: ast.Call, args: list) -> str:
        return graph.node(op_type, args)

    return emit


for _relay, _onnx_type in {"add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div",
                           "maximum": "Max", "minimum": "Min", "power": "Pow"}.items():
    onnx_op(_relay)(_elementwise(_onnx_type))
for _relay, _onnx_type in {"nn.relu": "Relu", "erf": "Erf", "sqrt": "Sqrt", "negative": "Neg",
                           "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "copy": "Identity",
                           "abs": "Abs"}.items():
    onnx_op(_relay)(_elementwise(_onnx_type))


@onnx_op("rsqrt")
def _rsqrt(graph: _Graph, call: ast.Call, args: list) -> str:
    return graph.node("Reciprocal", [graph.node("Sqrt", args)])


@onnx_op("clip")
def _clip(graph: _Graph, call: ast.Call, args: list) -> str:
    dtype = call.checked_type.dtype
    lo = graph.const(np.asarray(call.attrs["a_min"], dtype=dtype))
    hi = graph.const(np.asarray(call.attrs["a_max"], dtype=dtype))
    return graph.node("Clip", [args[0], lo, hi])


@onnx_op("nn.leaky_relu")
def _leaky_relu(graph: _Graph, call: ast.Call, args: list) -> str:
    return graph.node("LeakyRelu", args, alpha=float(call.attrs.get("alpha", 0.01)))


@onnx_op("cast")
def _cast(graph: _Graph, call: ast.Call, args: list) -> str:
    elem = _elem_type(call.checked_type.dtype)
    return graph.node("Cast", args, to=elem)


@onnx_op("reshape", "nn.batch_flatten", "expand_dims", "squeeze")
def _reshape(graph: _Graph, call: ast.Call, args: list) -> str:
    return graph.node("Reshape", [args[0], graph.int64s(_shape(call))])


@onnx_op("transpose")
def _transpose(graph: _Graph, call: ast.Call, args: list) -> str:
    rank = len(_shape(call.args[0]))
    axes = call.attrs.get("axes")
    perm = [int(a) % rank for a in axes] if axes else list(reversed(range(rank)))
    return graph.node("Transpose", args, perm=perm)


@onnx_op("concatenate")
def _concatenate(graph: _Graph, call: ast.Call, args: list) -> str:
    return graph.node("Concat", list(args[0]), axis=int(call.attrs.get("axis", 0)))


def _reduce_axes(call: ast.Call) -> list[int]:
    rank = len(_shape(call.args[0]))
    axis = call.attrs.get("axis")
    axes = list(range(rank)) if axis is None else [int(a) % rank for a in _ints(axis, 1)]
    if call.attrs.get("exclude", False):
        axes = [a for a in range(rank) if a not in axes]
    return axes


@onnx_op("mean")
def _mean(graph: _Graph, call: ast.Call, args: list) -> str:
    return graph.node("ReduceMean", args, axes=_reduce_axes(call),
                      keepdims=int(bool(call.attrs.get("keepdims", False))))


@onnx_op("argmax")
def _argmax(graph: _Graph, call: ast.Call, args: list) -> str:
    axes = _reduce_axes(call)
    if len(axes) != 1:
        raise NotImplementedError("ONNX export: argmax over several axes")
    out = graph.node("ArgMax", args, axis=axes[0],
                     keepdims=int(bool(call.attrs.get("keepdims", False))))
    elem = _elem_type(call.checked_type.dtype)
    return graph.node("Cast", [out], to=elem)


@onnx_op("nn.softmax")
def _softmax(graph: _Graph, call: ast.Call, args: list) -> str:
    return graph.node("Softmax", args, axis=int(call.attrs.get("axis", -1)))


def _to_nchw(graph: _Graph, call: ast.Call, data: str, layout_attr: str) -> tuple[str, bool]:
    """ONNX convolutions and pools are NCHW: an NHWC input is transposed in (and the
    result back out, see :func:`_from_nchw`)."""
    layout = str(call.attrs.get(layout_attr, "NCHW"))
    if layout == "NCHW":
        return data, False
    if layout == "NHWC":
        return graph.node("Transpose", [data], perm=[0, 3, 1, 2]), True
    raise NotImplementedError(f"ONNX export: {call.op.name} in layout {layout}")


def _from_nchw(graph: _Graph, out: str, transposed: bool) -> str:
    return graph.node("Transpose", [out], perm=[0, 2, 3, 1]) if transposed else out


@onnx_op("nn.conv2d")
def _conv2d(graph: _Graph, call: ast.Call, args: list) -> str:
    data, nhwc = _to_nchw(graph, call, args[0], "data_layout")
    kernel_layout = str(call.attrs.get("kernel_layout", "OIHW"))
    if sorted(kernel_layout) != sorted("OIHW"):
        raise NotImplementedError(f"ONNX export: conv2d kernel layout {kernel_layout}")
    weight = args[1] if kernel_layout == "OIHW" else graph.node(
        "Transpose", [args[1]], perm=[kernel_layout.index(c) for c in "OIHW"])
    shape = _shape(call.args[1])
    kernel = [shape[kernel_layout.index("H")], shape[kernel_layout.index("W")]]
    pad = _ints(call.attrs.get("padding", (0, 0)), 4)
    pad = pad * 2 if len(pad) == 2 else pad  # (top, left, bottom, right) = ONNX's order
    out = graph.node("Conv", [data, weight], kernel_shape=kernel, pads=pad,
                     strides=_ints(call.attrs.get("strides", 1)),
                     dilations=_ints(call.attrs.get("dilation", 1)),
                     group=int(call.attrs.get("groups", 1)))
    return _from_nchw(graph, out, nhwc)


@onnx_op("nn.batch_norm")
def _batch_norm(graph: _Graph, call: ast.Call, args: list) -> _SingleOutput:
    if int(call.attrs.get("axis", 1)) != 1:
        raise NotImplementedError("ONNX export: batch_norm over an axis other than 1")
    data, gamma, beta, mean, var = args
    channels = _shape(call.args[1])[0]
    dtype = call.args[0].checked_type.dtype
    if not call.attrs.get("scale", True):
        gamma = graph.const(np.ones(channels, dtype))
    if not call.attrs.get("center", True):
        beta = graph.const(np.zeros(channels, dtype))
    return _SingleOutput(graph.node("BatchNormalization", [data, gamma, beta, mean, var],
                                    epsilon=float(call.attrs.get("epsilon", 1e-5))))


@onnx_op("nn.dropout")
def _dropout(graph: _Graph, call: ast.Call, args: list) -> _SingleOutput:
    """Inference: the identity (Relay's second output, the mask, is never read)."""
    return _SingleOutput(args[0])


@onnx_op("nn.bias_add")
def _bias_add(graph: _Graph, call: ast.Call, args: list) -> str:
    rank = len(_shape(call.args[0]))
    axis = int(call.attrs.get("axis", 1)) % rank
    bias = graph.node("Reshape", [args[1], graph.int64s([-1] + [1] * (rank - axis - 1))])
    return graph.node("Add", [args[0], bias])


@onnx_op("nn.dense")
def _dense(graph: _Graph, call: ast.Call, args: list) -> str:
    if len(_shape(call.args[0])) == 2:
        return graph.node("Gemm", args, transB=1)
    return graph.node("MatMul", [args[0], graph.node("Transpose", [args[1]], perm=[1, 0])])


@onnx_op("nn.batch_matmul")
def _batch_matmul(graph: _Graph, call: ast.Call, args: list) -> str:
    a, b = args
    if call.attrs.get("transpose_a", False):
        a = graph.node("Transpose", [a], perm=[0, 2, 1])
    if call.attrs.get("transpose_b", True):  # the text format's (C++) default
        b = graph.node("Transpose", [b], perm=[0, 2, 1])
    return graph.node("MatMul", [a, b])


@onnx_op("nn.layer_norm")
def _layer_norm(graph: _Graph, call: ast.Call, args: list) -> str:
    data, gamma, beta = args
    width = _shape(call.args[1])[0]
    dtype = call.args[0].checked_type.dtype
    if not call.attrs.get("scale", True):
        gamma = graph.const(np.ones(width, dtype))
    if not call.attrs.get("center", True):
        beta = graph.const(np.zeros(width, dtype))
    rank = len(_shape(call.args[0]))
    if int(call.attrs.get("axis", -1)) % rank != rank - 1:
        raise NotImplementedError("ONNX export: layer_norm over a non-last axis")
    return graph.node("LayerNormalization", [data, gamma, beta], axis=-1,
                      epsilon=float(call.attrs.get("epsilon", 1e-5)))


@onnx_op("nn.global_avg_pool2d")
def _global_avg_pool2d(graph: _Graph, call: ast.Call, args: list) -> str:
    data, nhwc = _to_nchw(graph, call, args[0], "layout")
    return _from_nchw(graph, graph.node("GlobalAveragePool", [data]), nhwc)


def _pool_attrs(call: ast.Call) -> dict:
    pad = _ints(call.attrs.get("padding", (0, 0)), 4)
    pad = pad * 2 if len(pad) == 2 else pad
    return {"kernel_shape": _ints(call.attrs.get("pool_size", 1)), "pads": pad,
            "strides": _ints(call.attrs.get("strides", 1)),
            "ceil_mode": int(bool(call.attrs.get("ceil_mode", False)))}


@onnx_op("nn.max_pool2d")
def _max_pool2d(graph: _Graph, call: ast.Call, args: list) -> str:
    data, nhwc = _to_nchw(graph, call, args[0], "layout")
    out = graph.node("MaxPool", [data], dilations=_ints(call.attrs.get("dilation", 1)),
                     **_pool_attrs(call))
    return _from_nchw(graph, out, nhwc)


@onnx_op("nn.avg_pool2d")
def _avg_pool2d(graph: _Graph, call: ast.Call, args: list) -> str:
    data, nhwc = _to_nchw(graph, call, args[0], "layout")
    out = graph.node("AveragePool", [data],
                     count_include_pad=int(bool(call.attrs.get("count_include_pad", False))),
                     **_pool_attrs(call))
    return _from_nchw(graph, out, nhwc)


@onnx_op("nn.pad")
def _pad(graph: _Graph, call: ast.Call, args: list) -> str:
    widths = [[int(v) for v in pair] for pair in call.attrs["pad_width"]]
    pads = [w[0] for w in widths] + [w[1] for w in widths]
    inputs = [args[0], graph.int64s(pads)]
    if len(args) > 1:  # the pad value, in the data's dtype (Relay's text gives an int 0)
        elem = _elem_type(call.checked_type.dtype)
        inputs.append(graph.node("Cast", [args[1]], to=elem))
    return graph.node("Pad", inputs, mode=str(call.attrs.get("pad_mode", "constant")))
