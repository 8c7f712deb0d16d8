"""``relay.testing``: the helpers Relay's own tests imported (``run_infer_type``,
``run_opt_pass``) and the workloads tutorials and benchmarks started from
(``resnet``/``mobilenet``/``mlp``/``vgg``/``squeezenet.get_workload``, ``create_workload``,
``init``, ``layers``).

The workloads are written for bmlib-relax: the same networks by name and arguments,
their parameter names in v0.19's style, weights drawn afresh (they are random in v0.19
too; compare outputs between builds of one workload, never with v0.19's numbers)."""
from __future__ import annotations

from typing import Callable, Union

from .. import ast, transform


def run_opt_pass(expr: ast.Expr, opt_pass: Union[Callable, list]) -> ast.Expr:
    """Run ``opt_pass`` on ``expr`` wrapped as ``@main``; return the function, or its body
    when ``expr`` was not a function (as Relay's helper did)."""
    passes = opt_pass if isinstance(opt_pass, list) else [opt_pass]
    mod = ast.IRModule.from_expr(expr)
    mod = transform.Sequential(passes)(mod)
    entry = mod["main"]
    return entry if isinstance(expr, ast.Function) else entry.body


def run_infer_type(expr: ast.Expr) -> ast.Expr:
    """``expr`` with every node's ``checked_type`` inferred."""
    return run_opt_pass(expr, transform.InferType())


def rand(dtype: str, *shape: int):
    """v0.19's ``relay.testing.rand``: a tensor of uniform [0, 1) values."""
    import numpy as np
    import tvm

    return tvm.runtime.tensor(np.random.rand(*shape).astype(dtype))


# (after the helpers above, which their siblings use)
from . import init, layers, mlp, mobilenet, resnet, squeezenet, vgg  # noqa: E402
from .init import create_workload  # noqa: E402

__all__ = ["run_infer_type", "run_opt_pass", "create_workload", "rand", "init", "layers",
           "mlp", "mobilenet", "resnet", "squeezenet", "vgg"]

# What v0.19's relay.testing had that is not written here.
_NOT_PORTED = ("inception_v3", "densenet", "dqn", "dcgan", "lstm",
               "resnet_3d", "synthetic", "mobilenet_v2", "yolo_detection", "temp_op_attr",
               "count_ops", "check_grad", "byoc_trace", "nat", "tf")


def __getattr__(name: str):
    if name in _NOT_PORTED:
        raise AttributeError(f"relay.testing.{name} is not available in bmlib-relax (its "
                             "workloads: resnet, mobilenet, mlp, vgg, squeezenet; helpers: "
                             "create_workload, init, layers, rand, run_infer_type, "
                             "run_opt_pass)")
    raise AttributeError(f"module 'relay.testing' has no attribute {name!r}")
