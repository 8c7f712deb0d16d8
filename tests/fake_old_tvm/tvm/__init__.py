"""Fake old TVM (see ../README.md): the Relay-era APIs the recorder uses."""
import numpy as np

__version__ = "0.19.0-fake"
CALLS = []  # what the recorder asked for, dumped by the tests' BYOC hook


class NDArray(object):
    def __init__(self, value):
        self._value = np.array(value)

    def numpy(self):
        return self._value.copy()


class _Nd(object):
    NDArray = NDArray

    @staticmethod
    def array(value):
        return NDArray(value.numpy() if isinstance(value, NDArray) else value)


nd = _Nd()


class Device(object):
    def __init__(self, kind, index):
        self.kind, self.index = kind, index


def cpu(index=0):
    return Device("cpu", index)


class IRModule(object):
    @staticmethod
    def from_expr(func):
        from .relay import Module

        return Module(func.text)


from . import transform  # noqa: E402,F401
from . import relay  # noqa: E402,F401
