"""``relay.testing.init``: weight initializers and ``create_workload``.

An initializer fills one parameter array, chosen by the parameter's name suffix
(``..._weight``, ``_bias``, ``_gamma``, ``_beta``, ``_mean``, ``_var``), as v0.19's did;
``create_workload`` types a network and fills every parameter except ``data``.  The
random draws use numpy's global generator seeded with ``seed`` (as v0.19 did, so a
user's own ``Initializer`` subclass draws the same numbers it did there); the values
are not v0.19's, whose networks differ in structure details.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np
import tvm

from .. import ast
from ..transform import InferType

#: Suffix -> method, in v0.19's order of checks ("moving_var" ends in "var", ...).
_SUFFIXES = (("weight", "_init_weight"), ("bias", "_init_bias"), ("gamma", "_init_gamma"),
             ("beta", "_init_beta"), ("mean", "_init_mean"), ("var", "_init_var"))


class Initializer:
    """Fills ``arr`` in place for a parameter called ``desc``."""

    def __init__(self, **kwargs: Any):
        self._kwargs = kwargs

    def __call__(self, desc: str, arr: np.ndarray) -> None:
        for suffix, method in _SUFFIXES:
            if desc.endswith(suffix):
                getattr(self, method)(desc, arr)
                return
        self._init_default(desc, arr)

    def _init_bias(self, _: str, arr: np.ndarray) -> None:
        arr[:] = 0.0

    def _init_gamma(self, _: str, arr: np.ndarray) -> None:
        arr[:] = 1.0

    def _init_beta(self, _: str, arr: np.ndarray) -> None:
        arr[:] = 0.0

    def _init_mean(self, _: str, arr: np.ndarray) -> None:
        arr[:] = 0.0

    def _init_var(self, _: str, arr: np.ndarray) -> None:
        arr[:] = 1.0

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not initialize weights "
                                  f"({name})")

    def _init_default(self, name: str, _: np.ndarray) -> None:
        raise ValueError(f"no initialization rule for parameter {name!r}: its name must end "
                         "in weight, bias, gamma, beta, mean or var")


class Xavier(Initializer):
    """Uniform in ``±sqrt(magnitude / factor)``, ``factor`` the fan-in, fan-out or their
    mean (receptive field included); a ``depthwise`` weight uses the window size."""

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg",
                 magnitude: float = 3):
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type != "uniform":
            raise ValueError(f"Xavier: unknown random type {rnd_type!r} (only 'uniform')")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Xavier: factor_type {factor_type!r} is not avg, in or out")
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, \
            float(magnitude)

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        if arr.ndim < 2:
            raise ValueError(f"Xavier cannot initialize {name}: a weight of rank {arr.ndim} "
                             "(at least 2 needed)")
        window = float(np.prod(arr.shape[2:])) if arr.ndim > 2 else 1.0
        fan_in, fan_out = arr.shape[1] * window, arr.shape[0] * window
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[
            self.factor_type]
        if "depthwise" in name:  # one input channel per output: only the window connects
            factor = window
        bound = np.sqrt(self.magnitude / factor)
        arr[:] = np.random.uniform(-bound, bound, size=arr.shape)


class Constant(Initializer):
    """Every weight element ``1 / size``: the weights of one parameter sum to 1."""

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[:] = 1.0 / arr.size


def create_workload(net: Union[ast.Function, ast.IRModule],
                    initializer: Optional[Initializer] = None,
                    seed: int = 0) -> tuple[ast.IRModule, dict]:
    """``(mod, params)``: ``net`` typed as ``@main``, and a tensor for each of its
    parameters other than ``data`` filled by ``initializer`` (default :class:`Xavier`)."""
    mod = net if isinstance(net, ast.IRModule) else ast.IRModule.from_expr(net)
    mod = InferType()(mod)
    np.random.seed(seed)
    initializer = initializer or Xavier()
    params = {}
    for param in mod["main"].params:
        if param.name_hint == "data":
            continue
        ty = param.checked_type
        value = np.zeros([int(d) for d in ty.shape], ty.dtype)
        initializer(param.name_hint, value)
        params[param.name_hint] = tvm.runtime.tensor(value)
    return mod, params


__all__ = ["Initializer", "Xavier", "Constant", "create_workload"]
