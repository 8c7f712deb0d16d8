"""Relay op level 2 behaviour (TVM v0.19's ``test_op_level2.py`` area), own tests.

Oracles: numpy and ``tvm.topi.testing``; each compile asserts bmlib offloaded something.
"""
import numpy as np
import tvm.topi.testing
from tvm import te

from bmlib_relax import relay
from conftest import run_beside_offloaded_relu as _run

RNG = np.random.default_rng(2)


def test_conv2d_weight_type_in_packed_layouts():
    """An un-annotated weight's type follows from channels/kernel_size in any layout."""
    x = relay.var("x", relay.TensorType((1, 8, 16, 16, 4, 4), "int8"))
    w = relay.var("w")
    y = relay.nn.conv2d(x, w, kernel_size=(3, 3), padding=(1, 1), channels=16,
                        data_layout="NCHW4n4c", kernel_layout="OIHW4o4i", out_dtype="int32")
    yy = relay.testing.run_infer_type(y)
    assert yy.checked_type == relay.TensorType((1, 4, 16, 16, 4, 4), "int32")
    assert yy.args[1].checked_type == relay.TensorType((4, 8, 3, 3, 4, 4), "int8")


def _transpose_ref(data_nchw, kernel_iohw, stride, pad, out_pad):
    """Direct formula of a transposed conv: y[o] = sum_i x[i] w[o + pad - i * stride]."""
    n, c, h, w = data_nchw.shape
    _, oc, kh, kw = kernel_iohw.shape
    oh = (h - 1) * stride - 2 * pad + kh + out_pad
    ow = (w - 1) * stride - 2 * pad + kw + out_pad
    out = np.zeros((n, oc, oh, ow), "float32")
    for i in range(h):
        for j in range(w):
            for a in range(kh):
                for b in range(kw):
                    o, p = i * stride + a - pad, j * stride + b - pad
                    if 0 <= o < oh and 0 <= p < ow:
                        out[:, :, o, p] += data_nchw[:, :, i, j] @ kernel_iohw[:, :, a, b]
    return out


def test_conv2d_transpose_any_layout_and_large_output_padding():
    """NHWC/HWOI and OIHW kernels run (TVM lowers only NCHW/IOHW), and an
    output_padding >= strides (accepted by Relay) gives the formula's extra rows."""
    d_np = RNG.uniform(-1, 1, (1, 3, 5, 5)).astype("float32")
    k_iohw = RNG.uniform(-1, 1, (3, 4, 3, 3)).astype("float32")
    x = relay.var("x", shape=(1, 3, 5, 5))
    x_nhwc = relay.var("x_nhwc", shape=(1, 5, 5, 3))
    w_hwoi = relay.var("w_hwoi", shape=(3, 3, 4, 3))
    w_oihw = relay.var("w_oihw", shape=(4, 3, 3, 3))
    w_iohw = relay.var("w_iohw", shape=(3, 4, 3, 3))
    outs = [
        relay.nn.conv2d_transpose(x_nhwc, w_hwoi, channels=4, kernel_size=(3, 3),
                                  strides=(2, 2), padding=(1, 1), output_padding=(1, 1),
                                  data_layout="NHWC", kernel_layout="HWOI"),
        relay.nn.conv2d_transpose(x, w_oihw, channels=4, kernel_size=(3, 3), strides=(2, 2),
                                  padding=(1, 1), kernel_layout="OIHW"),
        relay.nn.conv2d_transpose(x, w_iohw, strides=(1, 1), output_padding=(1, 1)),
        relay.nn.conv2d_transpose(x, w_iohw, strides=(2, 2), padding=(1, 1),
                                  output_padding=(3, 3)),
    ]
    types = [relay.testing.run_infer_type(o).checked_type for o in outs]
    assert types[0] == relay.TensorType((1, 10, 10, 4), "float32")
    assert types[2] == relay.TensorType((1, 4, 8, 8), "float32")
    assert types[3] == relay.TensorType((1, 4, 12, 12), "float32")
    res = _run([x, x_nhwc, w_hwoi, w_oihw, w_iohw], outs,
               [d_np, d_np.transpose(0, 2, 3, 1), k_iohw.transpose(2, 3, 1, 0),
                k_iohw.transpose(1, 0, 2, 3), k_iohw])
    np.testing.assert_allclose(res[0], _transpose_ref(d_np, k_iohw, 2, 1, 1).transpose(0, 2, 3, 1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[1], _transpose_ref(d_np, k_iohw, 2, 1, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[2], _transpose_ref(d_np, k_iohw, 1, 0, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[3], _transpose_ref(d_np, k_iohw, 2, 1, 3), rtol=1e-5, atol=1e-5)


def test_conv2d_transpose_symbolic_batch_large_output_padding_type():
    n = te.var("n")
    x = relay.var("x", relay.TensorType((n, 10, 10, 12), "float32"))
    w = relay.var("w", relay.TensorType((12, 11, 5, 5), "float32"))
    y = relay.nn.conv2d_transpose(x, w, output_padding=(1, 1), channels=11, data_layout="NHWC")
    assert relay.testing.run_infer_type(y).checked_type == \
        relay.TensorType((n, 15, 15, 11), "float32")


def test_conv3d_ndhwc_and_depthwise_channel_multiplier():
    """conv3d in NDHWC/DHWIO runs (re-laid out for the NCDHW template), and Relay's
    depthwise reading of a (C, M, k...) weight with groups == C gives C * M channels."""
    d_np = RNG.uniform(-1, 1, (1, 4, 3, 5, 5)).astype("float32")
    w_np = RNG.uniform(-1, 1, (2, 4, 3, 3, 3)).astype("float32")  # OIDHW
    m_np = RNG.uniform(-1, 1, (4, 2, 1, 1, 1)).astype("float32")  # (C, multiplier, 1, 1, 1)
    x = relay.var("x", shape=(1, 4, 3, 5, 5))
    x_ndhwc = relay.var("x_ndhwc", shape=(1, 3, 5, 5, 4))
    w_dhwio = relay.var("w_dhwio", shape=(3, 3, 3, 4, 2))
    outs = [
        relay.nn.conv3d(x_ndhwc, w_dhwio, channels=2, kernel_size=(3, 3, 3), padding=(1, 1, 1),
                        data_layout="NDHWC", kernel_layout="DHWIO"),
        relay.nn.conv3d(x, relay.const(m_np), kernel_size=(1, 1, 1), channels=8, groups=4),
    ]
    assert relay.testing.run_infer_type(outs[1]).checked_type == \
        relay.TensorType((1, 8, 3, 5, 5), "float32")
    got = _run([x, x_ndhwc, w_dhwio], outs,
               [d_np, d_np.transpose(0, 2, 3, 4, 1), w_np.transpose(2, 3, 4, 1, 0)])
    ref = tvm.topi.testing.conv3d_ncdhw_python(d_np, w_np, 1, 1)
    np.testing.assert_allclose(got[0], ref.transpose(0, 2, 3, 4, 1), rtol=1e-5, atol=1e-5)
    multiplied = d_np[:, :, None] * m_np[:, :, 0, 0, 0][None, :, :, None, None, None]
    np.testing.assert_allclose(got[1], multiplied.reshape(1, 8, 3, 5, 5), rtol=1e-5, atol=1e-6)


def test_upsampling_types_as_relay_wrote_them():
    n, c, h, w = (te.var(v) for v in "nchw")
    x = relay.var("x", relay.TensorType((n, c, h, w), "float32"))
    y = relay.nn.upsampling(x, scale_h=2, scale_w=2, method="bilinear")
    two = tvm.tirx.const(2.0, "float64")
    assert relay.testing.run_infer_type(y).checked_type == relay.TensorType(
        (n, c, tvm.tirx.Cast("int32", te.round(h * two)),
         tvm.tirx.Cast("int32", te.round(w * two))), "float32")
    d = te.var("d")
    x3 = relay.var("x3", relay.TensorType((n, c, d, 4, 6), "float32"))
    y3 = relay.nn.upsampling3d(x3, scale_d=2, scale_h=1.5, scale_w=0.5)
    assert relay.testing.run_infer_type(y3).checked_type == relay.TensorType(
        (n, c, tvm.tirx.Cast("int32", te.round(d * two)), 6, 3), "float32")
    # 5 * 0.5 = 2.5: TVM folds round() with nearbyint (half to even): 2 rows, as Relay
    x_np = RNG.uniform(-1, 1, (1, 2, 5, 5)).astype("float32")
    xs = relay.var("xs", shape=(1, 2, 5, 5))
    ys = relay.nn.upsampling(xs, scale_h=0.5, scale_w=0.5)
    assert relay.testing.run_infer_type(ys).checked_type == \
        relay.TensorType((1, 2, 2, 2), "float32")
    (out,) = _run([xs], [ys], [x_np])
    # nearest neighbour, asymmetric coordinates, 5 -> 2 (scale 5/2): rows 0 and 2
    np.testing.assert_array_equal(out, x_np[:, :, ::2, ::2][:, :, :2, :2])
