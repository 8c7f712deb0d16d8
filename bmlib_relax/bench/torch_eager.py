"""PyTorch eager execution of a Relay program, as the benchmark's reference.

Walks the Relay AST once per call and runs each op with the matching
``torch``/``torch.nn.functional`` call on the same weights, so "PyTorch eager"
in the benchmark means the same graph and values as the bmlib build, executed
by PyTorch's own kernels.  Only the ops of the benchmarked models are covered;
anything else raises ``NotImplementedError`` naming the op.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ..relay import ast
from ..relay.analysis import post_order_list

TorchOp = Callable[..., Any]
_TORCH_OPS: dict[str, TorchOp] = {}


def _torch():
    import torch  # optional dependency: pip install "bmlib-relax[bench]"

    return torch


def torch_op(*names: str):
    def decorator(fn: TorchOp) -> TorchOp:
        for name in names:
            _TORCH_OPS[name] = fn
        return fn

    return decorator


def _pair(value, n=2):
    vals = list(value) if isinstance(value, (tuple, list)) else [value]
    return vals * n if len(vals) == 1 else vals


@torch_op("add")
def _add(a, b, attrs):
    return a + b


@torch_op("subtract")
def _sub(a, b, attrs):
    return a - b


@torch_op("multiply")
def _mul(a, b, attrs):
    return a * b


@torch_op("divide")
def _div(a, b, attrs):
    return a / b


@torch_op("erf")
def _erf(x, attrs):
    return _torch().erf(x)


@torch_op("nn.relu")
def _relu(x, attrs):
    return _torch().relu(x)


@torch_op("reshape")
def _reshape(x, attrs):
    from ..importer.ops.tensor import relay_reshape_shape

    return x.reshape(relay_reshape_shape(list(x.shape), list(attrs["newshape"]), None))


@torch_op("transpose")
def _transpose(x, attrs):
    axes = attrs.get("axes")
    return x.permute(*axes) if axes else x.permute(*reversed(range(x.dim())))


@torch_op("nn.conv2d")
def _conv2d(x, w, attrs):
    F = _torch().nn.functional
    pad = list(attrs.get("padding", (0, 0)))
    if len(pad) == 1:
        pad = pad * 4
    elif len(pad) == 2:
        pad = pad * 2
    top, left, bottom, right = pad
    if top != bottom or left != right:
        x = F.pad(x, (left, right, top, bottom))
        top = left = 0
    return F.conv2d(x, w, stride=_pair(attrs.get("strides", 1)), padding=(top, left),
                    dilation=_pair(attrs.get("dilation", 1)), groups=int(attrs.get("groups", 1)))


@torch_op("nn.batch_norm")
def _batch_norm(x, gamma, beta, mean, var, attrs):
    F = _torch().nn.functional
    out = F.batch_norm(x, mean, var, gamma if attrs.get("scale", True) else None,
                       beta if attrs.get("center", True) else None, training=False,
                       eps=float(attrs.get("epsilon", 1e-5)))
    return (out, mean, var)


@torch_op("nn.dense")
def _dense(x, w, attrs):
    return _torch().nn.functional.linear(x, w)


@torch_op("nn.bias_add")
def _bias_add(x, b, attrs):
    axis = int(attrs.get("axis", 1)) % x.dim()
    return x + b.reshape([-1] + [1] * (x.dim() - axis - 1))


@torch_op("nn.batch_flatten")
def _batch_flatten(x, attrs):
    return x.reshape(x.shape[0], -1)


@torch_op("nn.global_avg_pool2d")
def _global_avg_pool2d(x, attrs):
    return x.mean(dim=(2, 3), keepdim=True)


@torch_op("nn.max_pool2d")
def _max_pool2d(x, attrs):
    pad = list(attrs.get("padding", (0, 0)))
    pad = pad * 2 if len(pad) == 2 else pad
    return _torch().nn.functional.max_pool2d(
        x, _pair(attrs.get("pool_size", 1)), _pair(attrs.get("strides", 1)), (pad[0], pad[1]),
        ceil_mode=bool(attrs.get("ceil_mode", False)))


@torch_op("nn.softmax")
def _softmax(x, attrs):
    return _torch().softmax(x, dim=int(attrs.get("axis", -1)))


@torch_op("nn.batch_matmul")
def _batch_matmul(a, b, attrs):
    if attrs.get("transpose_a", False):
        a = a.transpose(1, 2)
    if attrs.get("transpose_b", False):  # the text format's (C++) default
        b = b.transpose(1, 2)
    return _torch().bmm(a, b)


@torch_op("nn.layer_norm")
def _layer_norm(x, gamma, beta, attrs):
    axis = int(attrs.get("axis", -1)) % x.dim()
    if axis != x.dim() - 1:
        raise NotImplementedError("layer_norm over a non-last axis")
    return _torch().nn.functional.layer_norm(
        x, (x.shape[-1],), gamma if attrs.get("scale", True) else None,
        beta if attrs.get("center", True) else None, float(attrs.get("epsilon", 1e-5)))


class TorchEagerModel:
    """Runs ``@main`` of a Relay module with PyTorch eager ops."""

    def __init__(self, module: ast.IRModule, params: Mapping[str, np.ndarray]):
        torch = _torch()
        self.func = module["main"]
        self.order = post_order_list(self.func.body)
        missing = sorted({n.op.name for n in self.order if isinstance(n, ast.Call)
                          and isinstance(n.op, ast.Op) and n.op.name not in _TORCH_OPS})
        if missing:
            raise NotImplementedError(f"no PyTorch reference for: {', '.join(missing)}")
        self.weights = {v: torch.from_numpy(np.array(params[v.name]))
                        for v in self.func.params if v.name in params}
        self.inputs = [v for v in self.func.params if v.name not in params]

    def __call__(self, *arrays: np.ndarray):
        torch = _torch()
        values: dict[int, Any] = {id(v): t for v, t in self.weights.items()}
        for var, array in zip(self.inputs, arrays):
            values[id(var)] = torch.from_numpy(np.ascontiguousarray(array))
        with torch.no_grad():
            for node in self.order:
                if id(node) in values:
                    continue
                values[id(node)] = self._eval(node, values)
        return values[id(self.func.body)]

    def _eval(self, node: ast.Expr, values: dict) -> Any:
        torch = _torch()
        if isinstance(node, ast.Call):
            args = [values[id(a)] for a in node.args]
            return _TORCH_OPS[node.op.name](*args, node.attrs)
        if isinstance(node, ast.TupleGetItem):
            return values[id(node.tuple_value)][node.index]
        if isinstance(node, ast.Tuple):
            return tuple(values[id(f)] for f in node.fields)
        if isinstance(node, ast.Constant):
            return torch.from_numpy(np.array(node.data))
        if isinstance(node, ast.Op):
            return None
        raise NotImplementedError(f"no PyTorch reference for {type(node).__name__}")
