"""Convolution converters against a numpy convolution (attribute variants goldens miss)."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, conv_ref, import_text, ops_in, rand, relay_fn


def _t(shape, dtype="float32"):
    return f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), {dtype}]"


CONV2D_CASES = {
    # name: (data shape, weight shape, attrs text, strides, pad before, pad after, dilation, groups)
    "asymmetric_padding": ((1, 3, 9, 8), (4, 3, 3, 3), "padding=[0, 1, 2, 1]",
                           (1, 1), (0, 1), (2, 1), (1, 1), 1),
    "two_value_padding": ((1, 3, 7, 7), (4, 3, 3, 3), "padding=[1, 2]",
                          (1, 1), (1, 2), (1, 2), (1, 1), 1),
    "dilation_stride": ((2, 4, 11, 10), (6, 4, 3, 3), "strides=[2, 1], dilation=[2, 3]",
                        (2, 1), (0, 0), (0, 0), (2, 3), 1),
    "groups": ((1, 6, 8, 8), (9, 2, 3, 3), "padding=[1, 1, 1, 1], groups=3",
               (1, 1), (1, 1), (1, 1), (1, 1), 3),
    "depthwise_stride": ((1, 4, 9, 9), (4, 1, 3, 3), "strides=[2, 2], groups=4, channels=4",
                         (2, 2), (0, 0), (0, 0), (1, 1), 4),
}


@pytest.mark.parametrize("case", sorted(CONV2D_CASES))
def test_conv2d_nchw_variants(case):
    dshape, wshape, attrs, strides, before, after, dilation, groups = CONV2D_CASES[case]
    x, w = rand(*dshape), rand(*wshape, seed=1)
    text = relay_fn(f"%x: {_t(dshape)}, %w: {_t(wshape)}", f"nn.conv2d(%x, %w, {attrs})")
    check(text, [x, w], conv_ref(x, w, strides, before, after, dilation, groups), rtol=1e-4,
          atol=1e-4)


def test_conv2d_nhwc_hwio():
    x, w = rand(1, 7, 6, 3), rand(3, 3, 3, 5, seed=1)  # NHWC data, HWIO kernel
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    'nn.conv2d(%x, %w, padding=[1, 1, 1, 1], data_layout="NHWC", '
                    'kernel_layout="HWIO")')
    ref = conv_ref(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (1, 1), (1, 1), (1, 1),
                   (1, 1)).transpose(0, 2, 3, 1)
    check(text, [x, w], ref, rtol=1e-4, atol=1e-4)
    assert ops_in(import_text(text)) == ["relax.nn.conv2d"]


@pytest.mark.parametrize("attrs,strides,before,after,dilation,groups", [
    ("padding=[1]", (1,), (1,), (1,), (1,), 1),
    ("padding=[0, 2], strides=[2]", (2,), (0,), (2,), (1,), 1),
    ("dilation=[2], groups=2", (1,), (0,), (0,), (2,), 2),
])
def test_conv1d(attrs, strides, before, after, dilation, groups):
    x, w = rand(2, 4, 12), rand(6, 4 // groups, 3, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}", f"nn.conv1d(%x, %w, {attrs})")
    check(text, [x, w], conv_ref(x, w, strides, before, after, dilation, groups), rtol=1e-4,
          atol=1e-4)


def test_conv3d_asymmetric_padding():
    x, w = rand(1, 2, 5, 6, 4), rand(3, 2, 3, 3, 2, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    "nn.conv3d(%x, %w, strides=[1, 2, 1], padding=[1, 0, 1, 1, 2, 0])")
    check(text, [x, w], conv_ref(x, w, (1, 2, 1), (1, 0, 1), (1, 2, 0), (1, 1, 1)), rtol=1e-4,
          atol=1e-4)


def _conv_transpose_ref(x, w, strides, padding, output_padding):
    """Transposed conv (IO... kernel): scatter every input cell times the kernel."""
    n, c = x.shape[:2]
    o, ksize = w.shape[1], w.shape[2:]
    nd = len(ksize)
    full = [(x.shape[2 + i] - 1) * strides[i] + ksize[i] for i in range(nd)]
    out = np.zeros((n, o, *[f + output_padding[i] for i, f in enumerate(full)]))
    for idx in np.ndindex(*x.shape[2:]):
        sl = tuple(slice(idx[i] * strides[i], idx[i] * strides[i] + ksize[i]) for i in range(nd))
        out[(slice(None), slice(None)) + sl] += np.einsum("nc,co...->no...",
                                                          x[(slice(None), slice(None)) + idx], w)
    crop = tuple(slice(padding[i], out.shape[2 + i] - padding[nd + i]) for i in range(nd))
    return out[(slice(None), slice(None)) + crop].astype(np.float32)


def test_conv2d_transpose_output_padding():
    x, w = rand(1, 3, 4, 5), rand(3, 2, 3, 3, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    "nn.conv2d_transpose(%x, %w, channels=2, kernel_size=[3, 3], strides=[2, 2], "
                    "output_padding=[1, 0], padding=[1, 0, 0, 1])")
    check(text, [x, w], _conv_transpose_ref(x, w, (2, 2), (1, 0, 0, 1), (1, 0)), rtol=1e-4,
          atol=1e-4)
    assert ops_in(import_text(text)) == ["relax.nn.conv2d_transpose"]


def test_conv1d_transpose_reads_the_first_output_padding_value_as_relay_did():
    # TVM's own tests build conv1d_transpose with output_padding=(0, 0); Relay read [0].
    x, w = rand(1, 4, 6), rand(4, 3, 3, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    "nn.conv1d_transpose(%x, %w, channels=3, kernel_size=[3], strides=[2], "
                    "padding=[1, 1], output_padding=[1, 0])")
    check(text, [x, w], _conv_transpose_ref(x, w, (2,), (1, 1), (1,)), rtol=1e-4, atol=1e-4)


def test_conv3d_transpose_default_iodhw_kernel():
    x, w = rand(1, 2, 3, 3, 2), rand(2, 3, 2, 2, 2, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    "nn.conv3d_transpose(%x, %w, channels=3, kernel_size=[2, 2, 2], "
                    "strides=[2, 2, 2], padding=[0, 0, 0, 0, 0, 0])")
    check(text, [x, w], _conv_transpose_ref(x, w, (2, 2, 2), (0,) * 6, (0, 0, 0)), rtol=1e-4,
          atol=1e-4)


def test_contrib_conv2d_nchwc_matches_plain_conv():
    """AlterOpLayout's blocked conv: NCHW2c data, OIHW2i3o kernel, NCHW3c output."""
    x, w = rand(1, 4, 6, 6), rand(6, 4, 3, 3, seed=1)
    xb = x.reshape(1, 2, 2, 6, 6).transpose(0, 1, 3, 4, 2)                  # NCHW2c
    wb = w.reshape(2, 3, 2, 2, 3, 3).transpose(0, 2, 4, 5, 3, 1)             # OIHW2i3o
    text = relay_fn(f"%x: {_t(xb.shape)}, %w: {_t(wb.shape)}",
                    "nn.contrib_conv2d_NCHWc(%x, %w, padding=[1, 1, 1, 1], channels=6, "
                    'kernel_size=[3, 3], data_layout="NCHW2c", kernel_layout="OIHW2i3o", '
                    'out_layout="NCHW3c")')
    ref = conv_ref(x, w, (1, 1), (1, 1), (1, 1), (1, 1))
    check(text, [xb, wb], ref.reshape(1, 2, 3, 6, 6).transpose(0, 1, 3, 4, 2), rtol=1e-4,
          atol=1e-4)
