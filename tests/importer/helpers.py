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


# ----------------------------------------------------------------------------- numpy oracles
def conv_ref(x, w, strides, pad_before, pad_after, dilation, groups=1):
    """N-d convolution, data (N, C, *S) and weight (O, C/groups, *K), like Relay's."""
    nd = x.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(pad_before, pad_after)))
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    ksize = w.shape[2:]
    out_sp = [(x.shape[2 + i] - dilation[i] * (ksize[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    out = np.zeros((n, o, *out_sp), dtype=np.float64)
    og = o // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        ws = w[g * og:(g + 1) * og].astype(np.float64)
        for kidx in np.ndindex(*ksize):
            sl = tuple(slice(kidx[i] * dilation[i],
                             kidx[i] * dilation[i] + strides[i] * (out_sp[i] - 1) + 1, strides[i])
                       for i in range(nd))
            patch = xs[(slice(None), slice(None)) + sl]  # (N, cg, *out)
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch,
                                                     ws[(slice(None), slice(None)) + kidx])
    return out.astype(x.dtype)


def pool2d_ref(x, kind, pool, strides, pad_before, pad_after, ceil_mode=False,
               count_include_pad=False):
    """Relay/topi 2-d pooling on NCHW data."""
    n, c, h, w = x.shape
    out_sp = []
    for i, size in enumerate((h, w)):
        total = size + pad_before[i] + pad_after[i] - pool[i]
        steps = -(-total // strides[i]) if ceil_mode else total // strides[i]
        out_sp.append(steps + 1)
    out = np.zeros((n, c, *out_sp), dtype=np.float64)
    for oh in range(out_sp[0]):
        for ow in range(out_sp[1]):
            h0, w0 = oh * strides[0] - pad_before[0], ow * strides[1] - pad_before[1]
            h1, w1 = h0 + pool[0], w0 + pool[1]
            hs, ws_, he, we = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            window = x[:, :, hs:he, ws_:we].astype(np.float64)
            if kind == "max":
                out[:, :, oh, ow] = window.max(axis=(2, 3))
            else:
                if count_include_pad:
                    # padded cells count, but not the part past the padded input (ceil_mode)
                    count = (min(h1, h + pad_after[0]) - h0) * (min(w1, w + pad_after[1]) - w0)
                else:
                    count = (he - hs) * (we - ws_)
                out[:, :, oh, ow] = window.sum(axis=(2, 3)) / count
    return out.astype(x.dtype)
