"""Pooling with Relay's defaults, ceil_mode, count_include_pad and layouts."""
from __future__ import annotations

import pytest

from .helpers import check, import_text, ops_in, pool2d_ref, rand, relay_fn

X = "%x: Tensor[(1, 2, 7, 8), float32]"

POOL_CASES = {
    # name: (attrs, pool, strides, pad before, pad after, ceil_mode, count_include_pad)
    "defaults": ("pool_size=[2, 2]", (2, 2), (1, 1), (0, 0), (0, 0), False, False),
    "stride_padding": ("pool_size=[3, 3], strides=[2, 2], padding=[1, 1]",
                       (3, 3), (2, 2), (1, 1), (1, 1), False, False),
    "asymmetric": ("pool_size=[3, 2], strides=[2, 3], padding=[0, 1, 2, 0]",
                   (3, 2), (2, 3), (0, 1), (2, 0), False, False),
    "ceil_mode": ("pool_size=[3, 3], strides=[2, 2], ceil_mode=True",
                  (3, 3), (2, 2), (0, 0), (0, 0), True, False),
    "ceil_mode_padding": ("pool_size=[2, 3], strides=[2, 2], padding=[1, 1, 0, 0], ceil_mode=True",
                          (2, 3), (2, 2), (1, 1), (0, 0), True, False),
    "count_include_pad": ("pool_size=[3, 3], strides=[2, 2], padding=[1, 1], "
                          "count_include_pad=True", (3, 3), (2, 2), (1, 1), (1, 1), False, True),
}


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pool2d(kind, case):
    attrs, pool, strides, before, after, ceil, include = POOL_CASES[case]
    if kind == "max" and include:
        attrs = attrs.replace(", count_include_pad=True", "")
    x = rand(1, 2, 7, 8)
    text = relay_fn(X, f"nn.{kind}_pool2d(%x, {attrs})")
    check(text, [x], pool2d_ref(x, kind, pool, strides, before, after, ceil, include))
    assert ops_in(import_text(text)) == [f"relax.nn.{kind}_pool2d"]


def test_max_pool2d_nhwc():
    x = rand(1, 7, 8, 2)
    text = relay_fn("%x: Tensor[(1, 7, 8, 2), float32]",
                    'nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[0, 0, 1, 1], '
                    'layout="NHWC")')
    ref = pool2d_ref(x.transpose(0, 3, 1, 2), "max", (3, 3), (2, 2), (0, 0), (1, 1))
    check(text, [x], ref.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_and_3d(kind):
    x1 = rand(1, 2, 9)
    text = relay_fn("%x: Tensor[(1, 2, 9), float32]",
                    f"nn.{kind}_pool1d(%x, pool_size=[3], strides=[2], padding=[1])")
    ref = pool2d_ref(x1[:, :, None, :], kind, (1, 3), (1, 2), (0, 1), (0, 1))[:, :, 0]
    check(text, [x1], ref)
    x3 = rand(1, 2, 4, 4, 4)
    text = relay_fn("%x: Tensor[(1, 2, 4, 4, 4), float32]",
                    f"nn.{kind}_pool3d(%x, pool_size=[2, 2, 2], strides=[2, 2, 2])")
    blocks = x3.reshape(1, 2, 2, 2, 2, 2, 2, 2)
    ref3 = getattr(blocks, "max" if kind == "max" else "mean")(axis=(3, 5, 7))
    check(text, [x3], ref3)


def test_global_pools():
    x = rand(1, 2, 7, 8)
    text = relay_fn(X, "nn.global_avg_pool2d(%x)")
    check(text, [x], x.mean(axis=(2, 3), keepdims=True))
    assert "R.nn.adaptive_avg_pool2d(x, output_size=[1, 1]" in import_text(text)["main"].script()
    check(relay_fn(X, "nn.global_max_pool2d(%x)"), [x], x.max(axis=(2, 3), keepdims=True))
    xh = rand(1, 7, 8, 2)
    text = relay_fn("%x: Tensor[(1, 7, 8, 2), float32]", 'nn.global_avg_pool2d(%x, layout="NHWC")')
    check(text, [xh], xh.mean(axis=(1, 2), keepdims=True))


@pytest.mark.parametrize("attrs,ref", [
    ("output_size=[1, 1]", lambda x: x.mean(axis=(2, 3), keepdims=True)),
    ("output_size=[2, 2]", lambda x: x.reshape(1, 2, 2, 4, 2, 4).mean(axis=(3, 5))),
    ("output_size=[None, 1]", lambda x: x.mean(axis=3, keepdims=True)),
    ("", lambda x: x),
])
def test_adaptive_avg_pool2d(attrs, ref):
    x = rand(1, 2, 8, 8)
    body = f"nn.adaptive_avg_pool2d(%x, {attrs})" if attrs else "nn.adaptive_avg_pool2d(%x)"
    check(relay_fn("%x: Tensor[(1, 2, 8, 8), float32]", body), [x], ref(x))
