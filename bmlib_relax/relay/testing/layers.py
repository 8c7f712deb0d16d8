"""``relay.testing.layers``: layers that create their own named weight variables.

``conv2d(data, name="conv0", ...)`` makes ``%conv0_weight``; ``batch_norm_infer`` makes
``_gamma``/``_beta``/``_moving_mean``/``_moving_var`` and keeps the normalized tensor —
the names :class:`~bmlib_relax.relay.testing.init.Initializer` dispatches on.
"""
from __future__ import annotations

from typing import Any, Optional

from .. import ast
from ..builder import var
from ..op import nn


def _named(kwargs: dict, suffix: str) -> ast.Var:
    name = kwargs.get("name")
    if not name:
        raise ValueError(f"a layer without an explicit {suffix} needs name=...")
    return var(f"{name}_{suffix}")


def batch_norm_infer(data: ast.Expr, gamma: Optional[ast.Expr] = None,
                     beta: Optional[ast.Expr] = None, moving_mean: Optional[ast.Expr] = None,
                     moving_var: Optional[ast.Expr] = None, **kwargs: Any) -> ast.Expr:
    """``nn.batch_norm(...)[0]``: the inference output, with weights named after
    ``name``."""
    gamma = gamma if gamma is not None else _named(kwargs, "gamma")
    beta = beta if beta is not None else _named(kwargs, "beta")
    moving_mean = moving_mean if moving_mean is not None else _named(kwargs, "moving_mean")
    moving_var = moving_var if moving_var is not None else _named(kwargs, "moving_var")
    kwargs.pop("name", None)
    return nn.batch_norm(data, gamma, beta, moving_mean, moving_var, **kwargs)[0]


def conv2d(data: ast.Expr, weight: Optional[ast.Expr] = None, **kwargs: Any) -> ast.Expr:
    weight = weight if weight is not None else _named(kwargs, "weight")
    kwargs.pop("name", None)
    return nn.conv2d(data, weight, **kwargs)


def conv3d(data: ast.Expr, weight: Optional[ast.Expr] = None, **kwargs: Any) -> ast.Expr:
    weight = weight if weight is not None else _named(kwargs, "weight")
    kwargs.pop("name", None)
    return nn.conv3d(data, weight, **kwargs)


def conv2d_transpose(data: ast.Expr, weight: Optional[ast.Expr] = None,
                     **kwargs: Any) -> ast.Expr:
    weight = weight if weight is not None else _named(kwargs, "weight")
    kwargs.pop("name", None)
    return nn.conv2d_transpose(data, weight, **kwargs)


def dense_add_bias(data: ast.Expr, weight: Optional[ast.Expr] = None,
                   bias: Optional[ast.Expr] = None, units: Optional[int] = None,
                   **kwargs: Any) -> ast.Expr:
    """``nn.bias_add(nn.dense(data, weight), bias, axis=-1)``."""
    weight = weight if weight is not None else _named(kwargs, "weight")
    bias = bias if bias is not None else _named(kwargs, "bias")
    kwargs.pop("name", None)
    return nn.bias_add(nn.dense(data, weight, units, **kwargs), bias, axis=-1)


def conv_kernel_layout(data_layout: str, is_depthwise: bool = False) -> str:
    """The kernel layout that goes with ``data_layout`` (``NHWC`` -> ``HWIO``, or ``HWOI``
    for a depthwise kernel)."""
    layouts = {("NCHW", False): "OIHW", ("NCHW", True): "OIHW",
               ("NHWC", False): "HWIO", ("NHWC", True): "HWOI",
               ("NCDHW", False): "OIDHW", ("NDHWC", False): "DHWIO"}
    if (data_layout, is_depthwise) not in layouts:
        raise ValueError(f"no kernel layout for data layout {data_layout!r}"
                         f"{' (depthwise)' if is_depthwise else ''}")
    return layouts[(data_layout, is_depthwise)]


__all__ = ["batch_norm_infer", "conv2d", "conv3d", "conv2d_transpose", "dense_add_bias",
           "conv_kernel_layout"]
