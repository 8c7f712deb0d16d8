"""One oracle for the per-op importer tests: parse a Relay snippet, import, build, run."""
from __future__ import annotations

import numpy as np
import tvm

from bmlib_relax import import_relay
from bmlib_relax.relay import parse

from conftest import run_plain

HEADER = '#[version = "0.0.5"]\n'


def relay_fn(params: str, body: str) -> str:
    """``def @main(<params>) { <body> }`` as Relay text."""
    return f"{HEADER}def @main({params}) {{\n  {body}\n}}\n"


def import_text(text: str, params=None) -> tvm.IRModule:
    return import_relay(parse(text, "snippet.relay"), params)


def run_relay(text: str, *inputs: np.ndarray, params=None):
    """Import ``text`` and run the plain Relax build on ``inputs`` (in @main's order)."""
    return run_plain(import_text(text, params), list(inputs))


def check(text: str, inputs: list[np.ndarray], expected, rtol=1e-5, atol=1e-5, params=None):
    """Assert that the imported program computes ``expected`` (an array or a list)."""
    out = run_relay(text, *inputs, params=params)
    if isinstance(expected, (list, tuple)):
        assert isinstance(out, list) and len(out) == len(expected)
        for got, want in zip(out, expected):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        assert np.asarray(out).shape == np.asarray(expected).shape
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)
    return out


def ops_in(mod: tvm.IRModule) -> list[str]:
    """Names of the Relax ops called in ``main``, in binding order."""
    names = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = getattr(binding.value, "op", None)
            if isinstance(op, tvm.ir.Op):
                names.append(op.name)
    return names


def rand(*shape, dtype="float32", seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed + sum(shape) * 7 + len(shape))
    return rng.uniform(low, high, size=shape).astype(dtype)
