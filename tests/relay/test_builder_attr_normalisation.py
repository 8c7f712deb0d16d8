"""The builder stores call attributes as TVM v0.19's Python builders passed them to
``_make.*``: an int ``strides``/``kernel_size``/``dilation``/``pool_size`` becomes one
value per spatial axis, ``padding`` goes through ``get_pad_tuple1d/2d/3d``
(``python/tvm/relay/op/nn/utils.py``), a reduction's int ``axis`` becomes ``[axis]``
(``op/reduce.py``), ``squeeze``/``reshape``/``broadcast_to`` take an int as a one-element
list (``op/transform.py``), ``strided_slice`` defaults ``strides`` to ``[1]``, ``resize``
defaults ``roi`` to zeros (``op/image/image.py``) ...

Pattern ``has_attr``, legacy check functions (``len(call.attrs.padding) == 4``), the
printer and the importer all read those values, so they must be v0.19's.  The expected
values below restate v0.19's rules; the compile tests check numerics against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.relay.dataflow_pattern import is_op, wildcard
from conftest import offloaded_partitions, run_beside_offloaded_relu

X1 = relay.var("x1", shape=(1, 2, 9))
W1 = relay.var("w1", shape=(3, 2, 3))
X2 = relay.var("x2", shape=(1, 2, 9, 9))
W2 = relay.var("w2", shape=(3, 2, 3, 3))
X3 = relay.var("x3", shape=(1, 2, 5, 5, 5))
W3 = relay.var("w3", shape=(3, 2, 3, 3, 3))
T = relay.var("t", shape=(2, 3, 4))


def _attrs(expr):
    call = expr.astuple() if hasattr(expr, "astuple") else expr
    return dict(call.attrs)


# (builder call, attributes v0.19 stored for it; only the listed keys are compared)
CASES = [
    # nn.py conv1d: int kernel_size/strides/dilation -> 1-tuples, get_pad_tuple1d
    (lambda: relay.nn.conv1d(X1, W1, strides=2, padding=1, dilation=1, kernel_size=3),
     {"strides": (2,), "padding": (1, 1), "dilation": (1,), "kernel_size": (3,)}),
    (lambda: relay.nn.conv1d(X1, W1, padding=(2,)), {"padding": (2, 2)}),
    (lambda: relay.nn.conv1d(X1, W1, padding=(1, 2)), {"padding": (1, 2)}),
    # conv2d: 2-tuples, get_pad_tuple2d (2 values -> top, left, bottom, right)
    (lambda: relay.nn.conv2d(X2, W2, padding=(1, 1), strides=1),
     {"padding": (1, 1, 1, 1), "strides": (1, 1)}),
    (lambda: relay.nn.conv2d(X2, W2, padding=1, dilation=2, kernel_size=3),
     {"padding": (1, 1, 1, 1), "dilation": (2, 2), "kernel_size": (3, 3)}),
    (lambda: relay.nn.conv2d(X2, W2, padding=(1, 2)), {"padding": (1, 2, 1, 2)}),
    (lambda: relay.nn.conv2d(X2, W2, padding=[0, 1, 2, 3]), {"padding": (0, 1, 2, 3)}),
    (lambda: relay.nn.conv2d(X2, W2), {"padding": (0, 0, 0, 0)}),  # default (0, 0) too
    # conv3d: 3-tuples, get_pad_tuple3d
    (lambda: relay.nn.conv3d(X3, W3, padding=1, strides=2, dilation=1, kernel_size=3),
     {"padding": (1,) * 6, "strides": (2, 2, 2), "dilation": (1, 1, 1),
      "kernel_size": (3, 3, 3)}),
    (lambda: relay.nn.conv3d(X3, W3, padding=(0, 1, 2)), {"padding": (0, 1, 2, 0, 1, 2)}),
    (lambda: relay.nn.conv3d(X3, W3), {"padding": (0,) * 6}),
    # conv2d_transpose: only padding (v0.19 passed strides etc. through)
    (lambda: relay.nn.conv2d_transpose(X2, W2, padding=1, strides=(2, 2)),
     {"padding": (1, 1, 1, 1), "strides": (2, 2)}),
    (lambda: relay.nn.conv2d_transpose(X2, W2), {"padding": (0, 0, 0, 0)}),
    (lambda: relay.nn.conv3d_transpose(X3, W3, strides=2, padding=1, kernel_size=3),
     {"strides": (2, 2, 2), "padding": (1,) * 6, "kernel_size": (3, 3, 3)}),
    (lambda: relay.nn.contrib_conv2d_winograd_without_weight_transform(X2, W2, 4, padding=1),
     {"padding": (1, 1, 1, 1)}),
    (lambda: relay.nn.deformable_conv2d(X2, X2, W2, padding=(1, 0)),
     {"padding": (1, 0, 1, 0)}),
    (lambda: relay.nn.conv2d_backward_weight(X2, X2, strides=2, padding=1, kernel_size=3),
     {"strides": (2, 2), "padding": (1, 1, 1, 1), "kernel_size": (3, 3)}),
    (lambda: relay.nn.bitserial_conv2d(X2, W2, padding=1), {"padding": (1, 1, 1, 1)}),
    (lambda: relay.nn.correlation(X2, X2, 1, 1, 1, 1, 2, True, "NCHW"), {"padding": (2, 2)}),
    # pools
    (lambda: relay.nn.max_pool1d(X1, pool_size=2, strides=2, dilation=1, padding=1),
     {"pool_size": (2,), "strides": (2,), "dilation": (1,), "padding": (1, 1)}),
    (lambda: relay.nn.max_pool2d(X2, pool_size=2, strides=2, dilation=1, padding=1),
     {"pool_size": (2, 2), "strides": (2, 2), "dilation": (1, 1), "padding": (1, 1, 1, 1)}),
    (lambda: relay.nn.avg_pool2d(X2, pool_size=(3, 3)), {"padding": (0, 0, 0, 0)}),
    (lambda: relay.nn.avg_pool1d(X1, pool_size=3), {"pool_size": (3,), "padding": (0, 0)}),
    (lambda: relay.nn.avg_pool3d(X3, pool_size=2, padding=(0, 1, 0)),
     {"pool_size": (2, 2, 2), "padding": (0, 1, 0, 0, 1, 0)}),
    (lambda: relay.nn.max_pool3d(X3, pool_size=2), {"padding": (0,) * 6}),
    (lambda: relay.nn.adaptive_avg_pool1d(X1, output_size=1), {"output_size": (1,)}),
    # reduce.py: axis = [axis] if isinstance(axis, int)
    (lambda: relay.sum(T, axis=1), {"axis": (1,)}),
    (lambda: relay.max(T, axis=-1, keepdims=True), {"axis": (-1,)}),
    (lambda: relay.min(T, 0), {"axis": (0,)}),
    (lambda: relay.mean(T, axis=(0, 2)), {"axis": (0, 2)}),
    (lambda: relay.prod(T, axis=2), {"axis": (2,)}),
    (lambda: relay.all(relay.var("b", shape=(2, 3), dtype="bool"), axis=1), {"axis": (1,)}),
    (lambda: relay.any(relay.var("b", shape=(2, 3), dtype="bool"), axis=0), {"axis": (0,)}),
    (lambda: relay.argmax(T, axis=1), {"axis": (1,)}),
    (lambda: relay.argmin(T, axis=2, select_last_index=True), {"axis": (2,)}),
    (lambda: relay.variance(T, axis=1), {"axis": (1,)}),
    # transform.py
    (lambda: relay.squeeze(relay.var("s", shape=(2, 1, 3)), axis=1), {"axis": (1,)}),
    (lambda: relay.reshape(T, 24), {"newshape": (24,)}),
    (lambda: relay.reverse_reshape(T, 24), {"newshape": (24,)}),
    (lambda: relay.broadcast_to(relay.var("v", shape=(1,)), 5), {"shape": (5,)}),
    (lambda: relay.strided_slice(T, [0], [1]), {"strides": (1,)}),
    (lambda: relay.strided_slice(T, [0], [1], strides=[]), {"strides": (1,)}),
    (lambda: relay.stft(relay.var("s", shape=(2, 32)), 8), {"hop_length": 2, "win_length": 8}),
    (lambda: relay.stft(relay.var("s", shape=(2, 32)), 8, 4), {"hop_length": 4}),
    (lambda: relay.dft(T, T, None).astuple(), {"inverse": False}),
    # image.py: roi defaults to zeros
    (lambda: relay.image.resize1d(X1, (18,)), {"roi": (0.0, 0.0)}),
    (lambda: relay.image.resize2d(X2, (18, 18)), {"roi": (0.0,) * 4}),
    (lambda: relay.image.resize3d(X3, (6, 6, 6)), {"roi": (0.0,) * 6}),
    # qnn.py: get_pad_tuple2d
    (lambda: relay.qnn.op.conv2d(X2, W2, relay.const(0), relay.const(0), relay.const(1.0),
                                 relay.const(1.0), (3, 3), 3, padding=1),
     {"padding": (1, 1, 1, 1)}),
    (lambda: relay.qnn.op.conv2d_transpose(X2, W2, relay.const(0), relay.const(0),
                                           relay.const(1.0), relay.const(1.0), padding=(1, 2)),
     {"padding": (1, 2, 1, 2)}),
    (lambda: relay.qnn.op.conv2d_transpose(X2, W2, relay.const(0), relay.const(0),
                                           relay.const(1.0), relay.const(1.0)),
     {"padding": (0, 0, 0, 0)}),
]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_attribute_values_are_v019s(index):
    build, expected = CASES[index]
    attrs = _attrs(build())
    assert {k: attrs.get(k, "<missing>") for k in expected} == expected, attrs


@pytest.mark.parametrize("build, message", [
    (lambda: relay.nn.conv2d(X2, W2, padding=(1, 2, 3)), "2 or 4"),
    (lambda: relay.nn.conv2d(X2, W2, padding=(1,)), "2 or 4"),
    (lambda: relay.nn.conv1d(X1, W1, padding=(1, 2, 3)), "1 or 2"),
    (lambda: relay.nn.conv3d(X3, W3, padding=(1, 2)), "3 or 6"),
    (lambda: relay.nn.max_pool2d(X2, padding="SAME"), "padding"),
    (lambda: relay.qnn.op.conv2d(X2, W2, relay.const(0), relay.const(0), relay.const(1.0),
                                 relay.const(1.0), (3, 3), 3, padding=(1,)), "2 or 4"),
])
def test_padding_v019_refused_is_refused(build, message):
    """get_pad_tuple*d raised ValueError for a padding of any other length."""
    with pytest.raises(ValueError, match=message):
        build()


def test_composed_reductions_use_axis_lists():
    """logsumexp / mean_variance made their max / sum / mean / squeeze with ``[axis]``."""
    out = relay.logsumexp(T, axis=1)
    assert out.attrs["axis"] == (1,)                 # squeeze(out_x, [1])
    mean, var = relay.mean_variance(T, axis=2).astuple().fields
    assert mean.attrs["axis"] == (2,) and var.attrs["axis"] == (2,)
    assert mean.args[0].attrs["axis"] == (2,)


def test_stft_default_window_is_v019s_ones():
    """v0.19 stft: ``window = _make.ones([n_fft], "int32")`` when none is given."""
    window = relay.stft(relay.var("s", shape=(2, 32)), 8).args[1]
    assert window.op.name == "ones"
    assert dict(window.attrs) == {"shape": (8,), "dtype": "int32"}


def test_normalised_defaults_for_attribute_fallback():
    """What a builder call lacking an attribute holds in v0.19: the signature default after
    the builder's rewrites (conv1d's ``strides=1`` is ``[1]``), for readers that fall back
    to defaults (``normalise_attrs``)."""
    from bmlib_relax.relay.op._make import normalise_attrs

    assert normalise_attrs("nn.conv1d", {"strides": 1, "padding": 0, "dilation": 1,
                                         "groups": 1}) == \
        {"strides": (1,), "padding": (0, 0), "dilation": (1,), "groups": 1}
    assert normalise_attrs("sum", {"axis": None}) == {"axis": None}
    assert normalise_attrs("stft", {"hop_length": None}) == {"hop_length": None}


def test_printed_like_v019():
    """v0.19's text (non-default fields): padding=[1, 1, 1, 1], a default padding of 4 zeros,
    axis=[1]."""
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    body = relay.Tuple([relay.nn.conv2d(x, w, padding=1), relay.nn.conv2d(x, w),
                        relay.sum(x, axis=1), relay.nn.max_pool2d(x, pool_size=2)])
    text = relay.IRModule.from_expr(relay.Function([x, w], body)).astext()
    assert "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])" in text
    assert "nn.conv2d(%x, %w, padding=[0, 0, 0, 0])" in text
    assert "sum(%x, axis=[1])" in text
    assert "nn.max_pool2d(%x, pool_size=[2, 2], padding=[0, 0, 0, 0])" in text
    assert relay.analysis.structural_equal(relay.parse(text),
                                           relay.IRModule.from_expr(relay.Function([x, w], body)))


def test_has_attr_and_check_functions_see_v019_values():
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    conv = relay.nn.conv2d(x, w, padding=(1, 1), strides=1)
    pattern = is_op("nn.conv2d")(wildcard(), wildcard())
    assert pattern.has_attr({"padding": [1, 1, 1, 1]}).match(conv)
    assert not pattern.has_attr({"padding": [1, 1]}).match(conv)
    assert pattern.has_attr({"strides": [1, 1]}).match(conv)
    assert len(conv.attrs.padding) == 4
    total = relay.sum(x, axis=1)
    assert is_op("sum")(wildcard()).has_attr({"axis": [1]}).match(total)
    assert not is_op("sum")(wildcard()).has_attr({"axis": 1}).match(total)


def test_legacy_pattern_table_offloads_builder_conv():
    """A Relay-era table: has_attr on the 4-value padding and a check on its length."""
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    mod = relay.IRModule.from_expr(relay.Function([x, w], relay.nn.relu(
        relay.nn.conv2d(x, w, padding=1))))
    rng = np.random.default_rng(3)
    wv = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    xv = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    seen = []

    def check(call):
        seen.append(call.args[0].attrs.padding)
        return len(call.args[0].attrs.padding) == 4

    xp = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    want = np.zeros((1, 4, 8, 8))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 8, j:j + 8], wv[:, :, i, j])
    want = np.maximum(want, 0)
    for entry in [("bmlib.conv_relu", is_op("nn.relu")(conv.has_attr({"padding": [1, 1, 1, 1]}))),
                  ("bmlib.conv_relu", is_op("nn.relu")(conv), check)]:
        model = bmlib_relax.compile(mod, {"w": wv}, patterns=[entry])
        assert offloaded_partitions(model.relax_module), entry[0]
        np.testing.assert_allclose(model(xv), want, rtol=1e-4, atol=1e-4)
    assert seen and all(tuple(p) == (1, 1, 1, 1) for p in seen)


def _conv_ref(x, w, strides, pads, dilation):
    """N-d cross-correlation over (N, C, *S) with per-side padding (before..., after...)."""
    nd = x.ndim - 2
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(pads[:nd], pads[nd:])))
    k = w.shape[2:]
    out_sp = [(x.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    out = np.zeros((x.shape[0], w.shape[0], *out_sp))
    for kidx in np.ndindex(*k):
        sl = tuple(slice(kidx[i] * dilation[i], kidx[i] * dilation[i]
                         + strides[i] * (out_sp[i] - 1) + 1, strides[i]) for i in range(nd))
        out += np.einsum("nc...,oc->no...", x[(slice(None), slice(None)) + sl],
                         w[(slice(None), slice(None)) + kidx])
    return out


def test_normalised_builder_models_compute_the_same():
    """Int strides / padding / pool sizes / axes compile and compute as Relay defined them."""
    rng = np.random.default_rng(5)
    v1, k1 = rng.standard_normal((1, 2, 9), "float32"), rng.standard_normal((3, 2, 3), "float32")
    v2 = rng.standard_normal((1, 2, 9, 9), "float32")
    k2 = rng.standard_normal((3, 2, 3, 3), "float32")
    v3 = rng.standard_normal((1, 2, 5, 5, 5), "float32")
    k3 = rng.standard_normal((3, 2, 3, 3, 3), "float32")
    vt = rng.standard_normal((2, 3, 4), "float32")
    outs = run_beside_offloaded_relu(
        [X2, W2, X1, W1, X3, W3, T],
        [relay.nn.conv2d(X2, W2, strides=2, padding=1, dilation=1),
         relay.nn.conv1d(X1, W1, strides=2, padding=1),
         relay.nn.conv3d(X3, W3, strides=2, padding=(1, 0, 1)),
         relay.nn.max_pool2d(X2, pool_size=3, strides=2, padding=1),
         relay.nn.avg_pool1d(X1, pool_size=2, strides=2, padding=1, count_include_pad=True),
         relay.sum(T, axis=1), relay.argmax(T, axis=2), relay.squeeze(relay.sum(
             T, axis=1, keepdims=True), axis=1)],
        [v2, k2, v1, k1, v3, k3, vt])
    np.testing.assert_allclose(outs[0], _conv_ref(v2, k2, (2, 2), (1,) * 4, (1, 1)),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1], _conv_ref(v1, k1, (2,), (1, 1), (1,)),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[2], _conv_ref(v3, k3, (2, 2, 2), (1, 0, 1, 1, 0, 1),
                                                  (1, 1, 1)), rtol=1e-4, atol=1e-4)
    padded = np.pad(v2, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want_pool = np.stack([np.stack([padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3))
                                    for j in range(5)], -1) for i in range(5)], -2)
    np.testing.assert_allclose(outs[3], want_pool, rtol=1e-6)
    p1 = np.pad(v1, ((0, 0), (0, 0), (1, 1)))
    np.testing.assert_allclose(outs[4], np.stack([p1[:, :, 2 * i:2 * i + 2].mean(-1)
                                                  for i in range(5)], -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[5], vt.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outs[6], vt.argmax(axis=2))
    np.testing.assert_allclose(outs[7], vt.sum(axis=1), rtol=1e-5, atol=1e-6)
