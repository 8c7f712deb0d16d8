"""Convolutions in every layout, ``out_layout``, depthwise multipliers and attribute checks,
as TVM v0.19's type relations defined them (src/relay/op/nn/convolution.cc).

* Layouts: Relay's ``Conv1DRel``/``Conv2DRel``/``Conv3DRel`` read the data, kernel and
  output layouts by axis *name* (``BijectiveLayout`` to NC[D]HW / OI[D]HW): ``NCWH`` data
  holds W before H, ``padding=[t, l, b, r]``, ``strides`` and ``dilation`` still name H
  then W.  TVM 0.27's ``topi.nn.conv`` reads the spatial axes in storage order instead.
* ``out_layout``: the result is typed (and laid out) in ``out_layout``.
* Depthwise with a channel multiplier: ``Conv2DRel``'s ``is_depthwise`` branch types a
  ``(C, M, kh, kw)`` (OIHW-space) weight with ``groups == C`` and ``channels == C * M``.
* ``channels`` / ``kernel_size`` contradicting the weight: refused by every relation.

The oracle is :func:`helpers.conv_ref` in NC[D]HW / OI[D]HW, its operands and result
permuted to the layouts by axis name.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError
from conftest import offloaded_partitions

from .helpers import check, conv_ref, import_text, rand, relay_fn

TOL = dict(rtol=1e-4, atol=1e-4)


def _t(shape, dtype="float32"):
    return f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), {dtype}]"


def _to(array, canonical: str, layout: str):
    """``array`` in the ``canonical`` layout (``NCHW``), permuted to ``layout`` by name."""
    return np.ascontiguousarray(array.transpose([canonical.index(a) for a in layout]))


def _fmt(values) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


# ----------------------------------------------------------------------------- layouts
# Every data-layout permutation of NCHW, each with a different kernel permutation of OIHW
# (H != W, KH != KW and H/W-specific strides, padding and dilation so a swap shows).
_DATA_2D = ["NCHW", "NCWH", "NHCW", "NHWC", "NWCH", "NWHC", "CNHW", "CNWH", "CHNW", "CHWN",
            "CWNH", "CWHN", "HNCW", "HNWC", "HCNW", "HCWN", "HWNC", "HWCN", "WNCH", "WNHC",
            "WCNH", "WCHN", "WHNC", "WHCN"]
_KERNEL_2D = ["OIWH", "OIHW", "HWIO", "WHIO", "IOWH", "HWOI", "WHOI", "OHWI", "OWHI", "IHWO",
              "IWHO", "HOIW", "WOIH", "HIOW", "WIOH", "OHIW", "OWIH", "IHOW", "IWOH", "HOWI",
              "WOHI", "HIWO", "WIHO", "IOHW"]


@pytest.mark.parametrize("data_layout,kernel_layout", list(zip(_DATA_2D, _KERNEL_2D)))
def test_conv2d_any_layout_matches_relay(data_layout, kernel_layout):
    x, w = rand(2, 4, 7, 6), rand(6, 2, 3, 2, seed=1)          # NCHW H=7 W=6; OIHW 3x2
    strides, before, after, dilation, groups = (2, 1), (1, 0), (0, 1), (1, 2), 2
    ref = conv_ref(x, w, strides, before, after, dilation, groups)
    xin, win = _to(x, "NCHW", data_layout), _to(w, "OIHW", kernel_layout)
    attrs = (f"strides={_fmt(strides)}, padding={_fmt(before + after)}, "
             f"dilation={_fmt(dilation)}, groups={groups}, data_layout=\"{data_layout}\", "
             f"kernel_layout=\"{kernel_layout}\"")
    text = relay_fn(f"%x: {_t(xin.shape)}, %w: {_t(win.shape)}", f"nn.conv2d(%x, %w, {attrs})")
    check(text, [xin, win], _to(ref, "NCHW", data_layout), **TOL)


@pytest.mark.parametrize("data_layout,kernel_layout", [
    ("NWHC", "HWOI"), ("NCWH", "OIWH"), ("WHCN", "WHOI"),
])
def test_depthwise_conv2d_hw_swapped_layouts(data_layout, kernel_layout):
    x, w = rand(1, 5, 4, 6), rand(5, 1, 3, 2, seed=1)
    ref = conv_ref(x, w, (1, 1), (1, 1), (1, 0), (1, 1), 5)
    xin, win = _to(x, "NCHW", data_layout), _to(w, "OIHW", kernel_layout)
    text = relay_fn(f"%x: {_t(xin.shape)}, %w: {_t(win.shape)}",
                    f'nn.conv2d(%x, %w, padding=[1, 1, 1, 0], groups=5, '
                    f'data_layout="{data_layout}", kernel_layout="{kernel_layout}")')
    check(text, [xin, win], _to(ref, "NCHW", data_layout), **TOL)


def test_conv2d_hw_swapped_result_feeds_an_op_typed_for_it():
    """The probe's chain: an NCWH conv's result added to a (1, 6, 4, 4) tensor."""
    x, w, y = rand(1, 4, 4, 5), rand(6, 4, 3, 2, seed=1), rand(1, 6, 4, 4, seed=2)
    ref = conv_ref(x, w, (1, 1), (1, 0), (1, 0), (1, 1))          # NCHW (1, 6, 4, 4)
    text = relay_fn(f"%x: {_t((1, 4, 5, 4))}, %w: {_t(w.shape)}, %y: {_t(y.shape)}",
                    '%0 = nn.conv2d(%x, %w, padding=[1, 0, 1, 0], data_layout="NCWH");\n'
                    "  nn.relu(add(%0, %y))")
    check(text, [_to(x, "NCHW", "NCWH"), w, y],
          np.maximum(_to(ref, "NCHW", "NCWH") + y, 0), **TOL)


def test_conv2d_hw_swapped_layout_is_offloaded():
    x, w = rand(1, 4, 6, 5), rand(8, 4, 3, 2, seed=1)
    ref = conv_ref(x, w, (1, 1), (1, 0), (1, 1), (1, 1))
    text = relay_fn(f"%x: {_t((1, 5, 6, 4))}, %w: {_t((8, 4, 2, 3))}",
                    'nn.conv2d(%x, %w, padding=[1, 0, 1, 1], data_layout="NWHC", '
                    'kernel_layout="OIWH")')
    model = bmlib_relax.compile(text, params={"w": _to(w, "OIHW", "OIWH")})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    np.testing.assert_allclose(model(x=_to(x, "NCHW", "NWHC")), _to(ref, "NCHW", "NWHC"),
                               **TOL)


@pytest.mark.parametrize("data_layout,kernel_layout", [
    ("NCW", "OIW"), ("NWC", "WIO"), ("WCN", "IOW"), ("CWN", "WOI"), ("CNW", "OWI"),
    ("WNC", "IWO"),
])
def test_conv1d_any_layout_matches_relay(data_layout, kernel_layout):
    x, w = rand(2, 4, 11), rand(6, 2, 3, seed=1)
    ref = conv_ref(x, w, (2,), (1,), (0,), (2,), 2)
    xin, win = _to(x, "NCW", data_layout), _to(w, "OIW", kernel_layout)
    text = relay_fn(f"%x: {_t(xin.shape)}, %w: {_t(win.shape)}",
                    f'nn.conv1d(%x, %w, strides=[2], padding=[1, 0], dilation=[2], groups=2, '
                    f'data_layout="{data_layout}", kernel_layout="{kernel_layout}")')
    check(text, [xin, win], _to(ref, "NCW", data_layout), **TOL)


@pytest.mark.parametrize("data_layout,kernel_layout", [
    ("NCDWH", "OIDWH"), ("NWHDC", "WHDIO"), ("HDWCN", "IOHWD"),
])
def test_conv3d_spatial_axes_out_of_order(data_layout, kernel_layout):
    x, w = rand(1, 2, 4, 5, 6), rand(3, 2, 2, 3, 1, seed=1)
    ref = conv_ref(x, w, (1, 2, 1), (1, 0, 0), (0, 1, 0), (1, 1, 1))
    xin, win = _to(x, "NCDHW", data_layout), _to(w, "OIDHW", kernel_layout)
    text = relay_fn(f"%x: {_t(xin.shape)}, %w: {_t(win.shape)}",
                    f'nn.conv3d(%x, %w, strides=[1, 2, 1], padding=[1, 0, 0, 0, 1, 0], '
                    f'data_layout="{data_layout}", kernel_layout="{kernel_layout}")')
    check(text, [xin, win], _to(ref, "NCDHW", data_layout), **TOL)


# ----------------------------------------------------------------------------- out_layout
@pytest.mark.parametrize("data_layout,kernel_layout,out_layout", [
    ("NCHW", "OIHW", "NHWC"), ("NHWC", "HWIO", "NCHW"), ("NCWH", "OIHW", "NHWC"),
    ("NHWC", "OHWI", "HWCN"),
])
def test_conv2d_out_layout(data_layout, kernel_layout, out_layout):
    x, w = rand(1, 3, 4, 5), rand(5, 3, 3, 2, seed=1)
    ref = conv_ref(x, w, (1, 1), (1, 1), (1, 0), (1, 1))
    xin, win = _to(x, "NCHW", data_layout), _to(w, "OIHW", kernel_layout)
    text = relay_fn(f"%x: {_t(xin.shape)}, %w: {_t(win.shape)}",
                    f'nn.conv2d(%x, %w, padding=[1, 1, 1, 0], data_layout="{data_layout}", '
                    f'kernel_layout="{kernel_layout}", out_layout="{out_layout}")')
    check(text, [xin, win], _to(ref, "NCHW", out_layout), **TOL)


def test_conv2d_out_layout_offloaded_with_a_constant_weight():
    """The probe's program: NCHW data, NHWC result, the weight a parameter."""
    x, w = rand(1, 3, 4, 4), rand(5, 3, 3, 3, seed=1)
    ref = conv_ref(x, w, (1, 1), (1, 1), (1, 1), (1, 1))
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    'nn.conv2d(%x, %w, padding=[1, 1, 1, 1], out_layout="NHWC")')
    model = bmlib_relax.compile(text, params={"w": w})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    np.testing.assert_allclose(model(x=x), ref.transpose(0, 2, 3, 1), **TOL)


def test_conv2d_blocked_out_layout():
    x, w = rand(1, 3, 4, 4), rand(8, 3, 3, 3, seed=1)
    ref = conv_ref(x, w, (1, 1), (1, 1), (1, 1), (1, 1))
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    'nn.conv2d(%x, %w, padding=[1, 1, 1, 1], out_layout="NCHW4c")')
    check(text, [x, w], ref.reshape(1, 2, 4, 4, 4).transpose(0, 1, 3, 4, 2), **TOL)


def test_conv1d_and_conv3d_out_layout():
    x1, w1 = rand(1, 3, 7), rand(4, 3, 3, seed=1)
    text = relay_fn(f"%x: {_t(x1.shape)}, %w: {_t(w1.shape)}",
                    'nn.conv1d(%x, %w, padding=[1, 0], out_layout="NWC")')
    check(text, [x1, w1], conv_ref(x1, w1, (1,), (1,), (0,), (1,)).transpose(0, 2, 1), **TOL)
    x3, w3 = rand(1, 2, 3, 4, 5), rand(3, 2, 2, 2, 2, seed=1)
    text = relay_fn(f"%x: {_t(x3.shape)}, %w: {_t(w3.shape)}",
                    'nn.conv3d(%x, %w, out_layout="NDHWC")')
    check(text, [x3, w3],
          conv_ref(x3, w3, (1,) * 3, (0,) * 3, (0,) * 3, (1,) * 3).transpose(0, 2, 3, 4, 1),
          **TOL)


def _conv_transpose_ref(x, w, strides):
    """Transposed conv, IO... kernel, no padding: every input cell times the kernel."""
    nd = x.ndim - 2
    ksize = w.shape[2:]
    out = np.zeros((x.shape[0], w.shape[1],
                    *[(x.shape[2 + i] - 1) * strides[i] + ksize[i] for i in range(nd)]))
    for idx in np.ndindex(*x.shape[2:]):
        sl = tuple(slice(idx[i] * strides[i], idx[i] * strides[i] + ksize[i]) for i in range(nd))
        out[(slice(None), slice(None)) + sl] += np.einsum(
            "nc,co...->no...", x[(slice(None), slice(None)) + idx].astype(np.float64), w)
    return out.astype(np.float32)


@pytest.mark.parametrize("op,xshape,wshape,data_layout,out_layout", [
    ("nn.conv1d_transpose", (1, 3, 4), (3, 2, 3), "NCW", "NWC"),
    ("nn.conv2d_transpose", (1, 3, 4, 3), (3, 2, 3, 2), "NCHW", "NHWC"),
    ("nn.conv3d_transpose", (1, 3, 2, 3, 2), (3, 2, 2, 2, 3), "NCDHW", "NDHWC"),
])
def test_conv_transpose_out_layout(op, xshape, wshape, data_layout, out_layout):
    x, w = rand(*xshape), rand(*wshape, seed=1)
    nd = len(xshape) - 2
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    f'{op}(%x, %w, strides={_fmt([2] * nd)}, out_layout="{out_layout}")')
    check(text, [x, w], _to(_conv_transpose_ref(x, w, [2] * nd), data_layout, out_layout),
          **TOL)


# ----------------------------------------------------------------------------- depthwise
def _multiplier_ref(x, w_cm, padding):
    """v0.19's depthwise_conv2d_nchw with a (C, M, kh, kw) filter: output c*M+m filters
    input c with w[c, m]."""
    c, m = w_cm.shape[:2]
    per_channel = np.concatenate(
        [conv_ref(x[:, ci:ci + 1], w_cm[ci][:, None], (1, 1), padding, padding, (1, 1))
         for ci in range(c)], axis=1)
    assert per_channel.shape[1] == c * m
    return per_channel


def test_depthwise_multiplier_weight_c_m_nchw():
    x, w = rand(1, 5, 6, 7), rand(5, 2, 3, 3, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w.shape)}",
                    "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=5, channels=10, "
                    "kernel_size=[3, 3])")
    check(text, [x, w], _multiplier_ref(x, w, (1, 1)), **TOL)


def test_depthwise_multiplier_weight_tflite_nhwc_hwoi_offloaded():
    x, w = rand(1, 5, 6, 7), rand(5, 2, 3, 3, seed=1)       # NCHW data; (C, M, kh, kw)
    xin, win = _to(x, "NCHW", "NHWC"), _to(w, "OIHW", "HWOI")  # TFLite: (kh, kw, C, M)
    text = relay_fn(f"%x: {_t(xin.shape)}, %w: {_t(win.shape)}",
                    "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=5, channels=10, "
                    'kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWOI")')
    want = _to(_multiplier_ref(x, w, (1, 1)), "NCHW", "NHWC")
    check(text, [xin, win], want, **TOL)
    model = bmlib_relax.compile(text, params={"w": win})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    np.testing.assert_allclose(model(x=xin), want, **TOL)


def test_depthwise_multiplier_1_and_c_times_m_forms_still_accepted():
    x = rand(1, 4, 5, 5)
    w1 = rand(4, 1, 3, 3, seed=1)
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w1.shape)}",
                    "nn.conv2d(%x, %w, groups=4, channels=4, kernel_size=[3, 3])")
    check(text, [x, w1], conv_ref(x, w1, (1, 1), (0, 0), (0, 0), (1, 1), 4), **TOL)
    w2 = rand(8, 1, 3, 3, seed=2)                       # Relax's (C*M, 1, kh, kw) form
    text = relay_fn(f"%x: {_t(x.shape)}, %w: {_t(w2.shape)}",
                    "nn.conv2d(%x, %w, groups=4, channels=8, kernel_size=[3, 3])")
    check(text, [x, w2], conv_ref(x, w2, (1, 1), (0, 0), (0, 0), (1, 1), 4), **TOL)


@pytest.mark.parametrize("body,wshape", [
    # Conv2DRel's else branch (no kernel_size): channels must be the weight's O (5)
    ("nn.conv2d(%x, %w, groups=5, channels=10)", (5, 2, 3, 3)),
    # Conv1DRel has no depthwise branch: the weight must be (channels, C/groups, k)
    ("nn.conv1d(%x, %w, groups=5, channels=10, kernel_size=[3])", (5, 2, 3)),
])
def test_multiplier_forms_relay_refused(body, wshape):
    xshape = (1, 5, 6, 6)[:len(wshape)]
    text = relay_fn(f"%x: {_t(xshape)}, %w: {_t(wshape)}", body)
    with pytest.raises(ConversionError, match="channels"):
        import_text(text)


# ----------------------------------------------------------------------------- attributes
@pytest.mark.parametrize("body,wshape,attr", [
    ("nn.conv2d(%x, %w, channels=5)", (6, 4, 3, 3), "channels"),
    ("nn.conv2d(%x, %w, kernel_size=[2, 2])", (6, 4, 3, 3), "kernel_size"),
    ("nn.conv2d(%x, %w, kernel_size=[3, 2])", (6, 4, 3, 3), "kernel_size"),
    ("nn.conv2d(%x, %w, channels=5, kernel_size=[1, 1])", (6, 4, 3, 3), "channels"),
    ("nn.conv2d(%x, %w, channels=6, kernel_size=[3, 1])", (6, 4, 3, 3), "kernel_size"),
    ('nn.conv2d(%x, %w, kernel_size=[3, 2], kernel_layout="OIWH")', (6, 4, 3, 2),
     "kernel_size"),
    ("nn.conv2d_transpose(%x, %w, channels=5)", (4, 2, 3, 3), "channels"),
    ("nn.conv2d_transpose(%x, %w, kernel_size=[2, 2])", (4, 2, 3, 3), "kernel_size"),
    ("nn.conv2d_transpose(%x, %w, channels=2, kernel_size=[3, 2])", (4, 2, 3, 3),
     "kernel_size"),
    ("nn.conv1d(%x, %w, channels=5)", (6, 4, 3), "channels"),
    ("nn.conv1d(%x, %w, kernel_size=[2])", (6, 4, 3), "kernel_size"),
    ("nn.conv1d_transpose(%x, %w, channels=3)", (4, 2, 3), "channels"),
    ("nn.conv1d_transpose(%x, %w, kernel_size=[1])", (4, 2, 3), "kernel_size"),
    ("nn.conv3d(%x, %w, channels=5)", (6, 4, 3, 3, 3), "channels"),
    ("nn.conv3d(%x, %w, kernel_size=[3, 3, 2])", (6, 4, 3, 3, 3), "kernel_size"),
    ("nn.conv3d_transpose(%x, %w, channels=5)", (4, 2, 3, 3, 3), "channels"),
    ("nn.conv3d_transpose(%x, %w, kernel_size=[3, 2, 3])", (4, 2, 3, 3, 3), "kernel_size"),
])
def test_attributes_contradicting_the_weight_are_refused(body, wshape, attr):
    xshape = (1, 4) + (4,) * (len(wshape) - 2)
    text = relay_fn(f"%x: {_t(xshape)}, %w: {_t(wshape)}", body)
    with pytest.raises(ConversionError, match=rf"nn\.conv.*{attr}="):
        import_text(text)


@pytest.mark.parametrize("body,wshape,out_channels", [
    ("nn.conv2d(%x, %w, channels=6, kernel_size=[3, 3])", (6, 4, 3, 3), 6),
    ("nn.conv2d(%x, %w, groups=2, channels=6, kernel_size=[3, 3])", (6, 2, 3, 3), 6),
    ('nn.conv2d(%x, %w, channels=6, kernel_size=[3, 2], kernel_layout="HWIO")',
     (3, 2, 4, 6), 6),
    ("nn.conv2d(%x, %w, channels=6)", (6, 4, 3, 3), 6),
    ("nn.conv2d_transpose(%x, %w, channels=2, kernel_size=[3, 3])", (4, 2, 3, 3), 2),
    # out_channels // groups == weight.shape[1]: channels=4 with groups=2, a (4, 2, ...) weight
    ("nn.conv2d_transpose(%x, %w, groups=2, channels=4)", (4, 2, 3, 3), None),
    ("nn.conv1d(%x, %w, channels=6, kernel_size=[3])", (6, 4, 3), 6),
    ("nn.conv3d_transpose(%x, %w, channels=2, kernel_size=[3, 3, 3])", (4, 2, 3, 3, 3), 2),
])
def test_attributes_agreeing_with_the_weight_are_accepted(body, wshape, out_channels):
    xshape = (1, 4) + (4,) * (len(wshape) - 2)
    text = relay_fn(f"%x: {_t(xshape)}, %w: {_t(wshape)}", body)
    ty = import_text(text)["main"].body.body.ty
    assert out_channels is None or int(ty.shape[1]) == out_channels


# ----------------------------------------------------------------------------- dilation
@pytest.mark.parametrize("op,nd", [
    ("nn.conv1d_transpose", 1), ("nn.conv2d_transpose", 2), ("nn.conv3d_transpose", 3),
])
@pytest.mark.parametrize("attr", ["dilation", "strides"])
def test_conv_transpose_zero_dilation_or_stride_refused(op, nd, attr):
    values = [0] + [1] * (nd - 1)
    text = relay_fn(f"%x: {_t((1, 4) + (4,) * nd)}, %w: {_t((4, 2) + (3,) * nd)}",
                    f"{op}(%x, %w, {attr}={_fmt(values)})")
    shown = re.escape(f"{op}: {attr}={values} must be positive")
    with pytest.raises(ConversionError, match=shown):
        import_text(text)
