"""``nn.adaptive_max_pool{1,2,3}d``, and the global 1d/3d pools v0.19's builder made of
the adaptive ops (v0.19 registered no ``nn.global_*_pool1d/3d`` op).

References are numpy, from the window rule of v0.19's ``adaptive_pool_impl``
(``include/tvm/topi/nn/pooling.h``): output ``o`` of ``m`` over ``n`` input elements reads
``[floor(o*n/m), ceil((o+1)*n/m))``.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from bmlib_relax import relay
from bmlib_relax.errors import ConversionError

from .helpers import check, import_text, rand, relay_fn


def _adaptive_ref(x: np.ndarray, size, axes, reduce) -> np.ndarray:
    """Adaptive pooling of ``x`` over ``axes`` to ``size`` (numpy, window by window)."""
    out_shape = list(x.shape)
    for axis, m in zip(axes, size):
        out_shape[axis] = m
    out = np.empty(out_shape, x.dtype)
    for index in itertools.product(*(range(m) for m in size)):
        window = [slice(None)] * x.ndim
        target = [slice(None)] * x.ndim
        for axis, o, m in zip(axes, index, size):
            n = x.shape[axis]
            window[axis] = slice(o * n // m, -(-(o + 1) * n // m))
            target[axis] = slice(o, o + 1)
        out[tuple(target)] = reduce(x[tuple(window)], axis=tuple(axes), keepdims=True)
    return out


@pytest.mark.parametrize("shape, layout, output_size, size", [
    ((1, 2, 7), "NCW", "[3]", (3,)),
    ((1, 7, 2), "NWC", "[4]", (4,)),
    ((1, 2, 7, 5), "NCHW", "[3, 2]", (3, 2)),
    ((1, 2, 7, 5), "NCHW", "[4]", (4, 4)),        # one value: every spatial dim
    ((1, 7, 5, 2), "NHWC", "[2, 3]", (2, 3)),
    ((1, 2, 5, 4, 3), "NCDHW", "[2, 3, 2]", (2, 3, 2)),
    ((1, 5, 4, 3, 2), "NDHWC", "[3, 1, 2]", (3, 1, 2)),
])
def test_adaptive_max_pool_matches_v019_windows(shape, layout, output_size, size):
    ndim = len(size)
    x = rand(*shape, seed=3)
    axes = [layout.index(c) for c in "DHW" if c in layout]
    text = relay_fn(f"%x: Tensor[{shape}, float32]",
                    f'nn.adaptive_max_pool{ndim}d(%x, output_size={output_size}, '
                    f'layout="{layout}")')
    check(text, [x], _adaptive_ref(x, size, axes, np.max))


def test_adaptive_max_pool_output_size_none_keeps_the_dim():
    x = rand(1, 2, 6, 5, seed=4)
    text = relay_fn("%x: Tensor[(1, 2, 6, 5), float32]",
                    "nn.adaptive_max_pool2d(%x, output_size=[2, None])")
    check(text, [x], _adaptive_ref(x, (2, 5), [2, 3], np.max))


def test_adaptive_max_pool_out_layout_is_ignored_as_relay_did():
    # v0.19's AdaptivePool2DRel / Compute never read out_layout (only layout inference
    # did): the result stays in the data layout.
    x = rand(1, 2, 6, 4, seed=5)
    text = relay_fn("%x: Tensor[(1, 2, 6, 4), float32]",
                    'nn.adaptive_max_pool2d(%x, output_size=[3, 2], out_layout="NHWC")')
    check(text, [x], _adaptive_ref(x, (3, 2), [2, 3], np.max))


def test_adaptive_max_pool_integer_data_keeps_its_dtype():
    x = np.random.default_rng(6).integers(-128, 128, (1, 2, 5), dtype=np.int8)
    text = relay_fn("%x: Tensor[(1, 2, 5), int8]", "nn.adaptive_max_pool1d(%x, output_size=[2])")
    check(text, [x], _adaptive_ref(x, (2,), [2], np.max))


def test_adaptive_max_pool_of_an_empty_dim_is_refused():
    text = relay_fn("%x: Tensor[(1, 2, 0), float32]", "nn.adaptive_max_pool1d(%x, output_size=[1])")
    with pytest.raises(ConversionError, match="takes the maximum along axis 2 of extent 0"):
        import_text(text)


@pytest.mark.parametrize("kind, ndim", [("max", 1), ("avg", 1), ("max", 3), ("avg", 3)])
def test_global_1d_3d_builders_make_the_adaptive_call(kind, ndim):
    """As v0.19's builder: ``adaptive_<kind>_pool<ndim>d(data, [1] * ndim, ...)``."""
    shape = (1, 2, 5) if ndim == 1 else (1, 2, 3, 4, 2)
    x = relay.var("x", shape=shape)
    call = getattr(relay.nn, f"global_{kind}_pool{ndim}d")(x)
    assert call.op.name == f"nn.adaptive_{kind}_pool{ndim}d"
    assert tuple(call.attrs["output_size"]) == (1,) * ndim
    x_np = rand(*shape, seed=7)
    reduce = np.max if kind == "max" else np.mean
    check(relay.Function([x], call).astext(), [x_np],
          reduce(x_np, axis=tuple(range(2, 2 + ndim)), keepdims=True))
