"""The ops added to the builder compute what Relay computed (numpy / ``tvm.topi.testing``
references), built with ``relay.*`` and run through ``bmlib_relax.compile``.

Many ops share one compile (each compile costs about a second): every test builds a
function returning a tuple, with an element-wise op in it that bmlib offloads.
"""
import numpy as np
import pytest
import scipy.special
import tvm.topi.testing

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import UnsupportedOpError
from conftest import offloaded_partitions

RNG = np.random.default_rng(7)


def _run(outputs, inputs):
    """Compile ``fn(inputs) -> (relu(inputs[0]), *outputs)``; assert offload; run."""
    params = [v for v, _ in inputs]
    first = params[0]
    func = relay.Function(params, relay.Tuple([relay.nn.relu(first)] + list(outputs)))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    results = model(*[value for _, value in inputs])
    np.testing.assert_allclose(results[0], np.maximum(inputs[0][1], 0), rtol=1e-6)
    return results[1:]


def test_indexing_scans_and_reductions():
    x_np = RNG.uniform(-1, 1, (3, 4)).astype("float32")
    idx_np = RNG.integers(0, 3, (2, 4)).astype("int64")
    nd_np = np.array([[0, 2], [1, 3]], dtype="int64")  # Relay: index tuple first
    b_np = RNG.integers(0, 2, (3, 4)).astype("bool")
    i_np = np.array([7, -7, 9, -9], dtype="int32")
    flat_np = np.array([5, 11, 0], dtype="int32")
    x = relay.var("x", shape=(3, 4))
    idx = relay.var("idx", shape=(2, 4), dtype="int64")
    nd = relay.var("nd", shape=(2, 2), dtype="int64")
    b = relay.var("b", shape=(3, 4), dtype="bool")
    i = relay.var("i", shape=(4,), dtype="int32")
    flat = relay.var("flat", shape=(3,), dtype="int32")
    dup = relay.concatenate([x, x], axis=1)  # ties for select_last_index
    outs = _run([
        relay.gather(x, 0, idx),
        relay.gather_nd(x, nd),
        relay.cumsum(x, axis=1),
        relay.cumprod(x, axis=0, exclusive=True),
        relay.all(b, axis=1),
        relay.any(b, axis=0, keepdims=True),
        relay.logsumexp(x, axis=1),
        relay.variance(x, axis=1, unbiased=True),
        relay.std(x),
        relay.argmax(dup, axis=1, select_last_index=True),
        relay.argmin(x, axis=(0, 1), keepdims=True),
        relay.trilu(x, 1, upper=False),
        relay.mod(i, relay.const(4, "int32")),
        relay.unravel_index(flat, relay.const([3, 4], "int32")),
    ], [(x, x_np), (idx, idx_np), (nd, nd_np), (b, b_np), (i, i_np), (flat, flat_np)])
    dup_np = np.concatenate([x_np, x_np], axis=1)
    expected = [
        np.take_along_axis(x_np, idx_np, axis=0),
        x_np[nd_np[0], nd_np[1]],
        np.cumsum(x_np, axis=1),
        np.concatenate([np.ones((1, 4), "float32"), np.cumprod(x_np, axis=0)[:-1]]),
        b_np.all(axis=1),
        b_np.any(axis=0, keepdims=True),
        scipy.special.logsumexp(x_np, axis=1),
        x_np.var(axis=1, ddof=1),
        x_np.std(),
        (dup_np.shape[1] - 1 - np.argmax(dup_np[:, ::-1], axis=1)).astype("int32"),
        np.argmin(x_np).reshape(1, 1).astype("int32"),
        np.tril(x_np, 1),
        np.fmod(i_np, 4),
        np.stack(np.unravel_index(flat_np, (3, 4))).astype("int32"),
    ]
    for got, want in zip(outs, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _depth_to_space(x, b, mode):
    """out[n, c, h*b + i, w*b + j] from the input channel Relay's mode names."""
    n, c, h, w = x.shape
    out = np.zeros((n, c // (b * b), h * b, w * b), x.dtype)
    for i in range(b):
        for j in range(b):
            for k in range(c // (b * b)):
                src = (i * b + j) * (c // (b * b)) + k if mode == "DCR" else k * b * b + i * b + j
                out[:, k, i::b, j::b] = x[:, src]
    return out


def _space_to_depth(x, b):
    n, c, h, w = x.shape
    out = np.zeros((n, c * b * b, h // b, w // b), x.dtype)
    for i in range(b):
        for j in range(b):
            out[:, (i * b + j) * c:(i * b + j + 1) * c] = x[:, :, i::b, j::b]
    return out


def test_spatial_rearrangements_and_norms():
    x_np = RNG.uniform(0, 1, (1, 8, 4, 4)).astype("float32")
    s_np = RNG.uniform(0, 1, (2, 4, 6, 3)).astype("float32")
    w_np = RNG.uniform(0, 1, (1, 2, 6)).astype("float32")
    v_np = RNG.uniform(0, 1, (1, 2, 2, 2, 2)).astype("float32")
    x = relay.var("x", shape=(1, 8, 4, 4))
    s = relay.var("s", shape=(2, 4, 6, 3))
    w = relay.var("w", shape=(1, 2, 6))
    v = relay.var("v", shape=(1, 2, 2, 2, 2))
    pv_np = np.array([-3.5], "float32")
    pv = relay.var("pv", shape=(1,))
    s2b = relay.nn.space_to_batch_nd(s, [2, 2], [[0, 0], [1, 1]])
    outs = _run([
        relay.nn.depth_to_space(x, 2),
        relay.nn.depth_to_space(x, 2, mode="CRD"),
        relay.nn.space_to_depth(x, 2),
        s2b,
        relay.nn.batch_to_space_nd(s2b, [2, 2], [[0, 0], [1, 1]]),
        relay.vision.yolo_reorg(x, 2),
        relay.nn.lrn(x, size=3, axis=1, bias=1.0, alpha=0.5, beta=0.75),
        relay.nn.l2_normalize(x, 1e-3, axis=[1]),
        relay.nn.global_avg_pool1d(w),
        relay.nn.global_max_pool1d(w),
        relay.image.resize1d(w, (9,)),
        relay.image.resize3d(v, (3, 4, 4), method="nearest_neighbor",
                             coordinate_transformation_mode="asymmetric"),
        relay.nn.upsampling3d(v, 2, 2, 2),
        relay.nn.pad(w, ((0, 0), (0, 0), (1, 2)), relay.sum(pv)),  # a run-time pad value
    ], [(x, x_np), (s, s_np), (w, w_np), (v, v_np), (pv, pv_np)])
    testing = tvm.topi.testing
    padded = np.pad(s_np, [(0, 0), (0, 0), (1, 1), (0, 0)])  # numpy-only reference
    s2b_np = padded.reshape(2, 2, 2, 4, 2, 3).transpose(2, 4, 0, 1, 3, 5).reshape(8, 2, 4, 3)
    expected = [
        _depth_to_space(x_np, 2, "DCR"),
        _depth_to_space(x_np, 2, "CRD"),
        _space_to_depth(x_np, 2),
        s2b_np,
        s_np,
        testing.reorg_python(x_np, 2),
        testing.lrn_python(x_np, 3, 1, 1.0, 0.5, 0.75),
        testing.l2_normalize_python(x_np, 1e-3, (1,)),
        w_np.mean(axis=2, keepdims=True),
        w_np.max(axis=2, keepdims=True),
        testing.resize1d_python(w_np, (9 / 6,), "NCW", "linear", "half_pixel"),
        testing.resize3d_python(v_np, (1.5, 2, 2), "NCDHW", "nearest_neighbor", "asymmetric"),
        testing.resize3d_python(v_np, (2, 2, 2), "NCDHW", "nearest_neighbor", "half_pixel"),
        np.pad(w_np, ((0, 0), (0, 0), (1, 2)), constant_values=-3.5),
    ]
    for got, want in zip(outs, expected):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_vision_and_topi_backed_ops():
    data = relay.var("data", shape=(1, 3, 4, 5))
    rois_np = np.array([[0, 0.0, 0.0, 3.0, 3.0], [0, 1.0, 1.0, 4.0, 3.0]], dtype="float32")
    rois = relay.var("rois", shape=(2, 5))
    d_np = RNG.uniform(0, 1, (1, 3, 4, 5)).astype("float32")
    outs = _run([
        relay.vision.multibox_prior(data, sizes=(0.3, 0.2), ratios=(1.0, 2.0),
                                    steps=(-1.0, -1.0), offsets=(0.5, 0.5), clip=True),
        relay.vision.roi_align(data, rois, (2, 2), 1.0, sample_ratio=2),
        relay.sliding_window(data, 1, [3, 2, 2], [1, 2, 2]),
        relay.reinterpret(data, "int32"),
    ], [(data, d_np), (rois, rois_np)])
    anchors = outs[0]
    assert anchors.shape == (1, 4 * 5 * 3, 4)
    # The first anchor of pixel (0, 0): centre (0.5/5, 0.5/4), half size 0.3*4/5/2 x 0.3/2.
    np.testing.assert_allclose(anchors[0, 0], [0, 0, 0.1 + 0.12, 0.125 + 0.15], atol=1e-6)
    ref = tvm.topi.testing.roi_align_nchw_python(d_np, rois_np, (2, 2), 1.0, 2)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-4, atol=1e-5)
    assert outs[2].shape == (1, 1, 2, 2, 3, 2, 2)
    np.testing.assert_array_equal(outs[2][0, 0, 1, 1], d_np[0, :, 2:4, 2:4])
    np.testing.assert_array_equal(outs[3], d_np.view("int32"))


def test_op_with_no_relax_counterpart_fails_at_import_not_at_build():
    x = relay.var("x", shape=(1, 2, 4, 4))
    call = relay.nn.fifo_buffer(x, x, axis=2)
    assert call.op.name == "nn.fifo_buffer"  # built fine
    with pytest.raises(UnsupportedOpError, match="nn.fifo_buffer"):
        bmlib_relax.compile(relay.IRModule.from_expr(relay.Function([x], call)))


@pytest.mark.parametrize("build, op", [
    (lambda x, s, k: relay.zeros(s, "float32"), "dyn.zeros"),
    (lambda x, s, k: relay.ones(s, "float32"), "dyn.ones"),
    (lambda x, s, k: relay.full(relay.const(1.0), s, "float32"), "dyn.full"),
    (lambda x, s, k: relay.reshape(x, s), "dyn.reshape"),
    (lambda x, s, k: relay.broadcast_to(x, s), "dyn.broadcast_to"),
    (lambda x, s, k: relay.tile(x, s), "dyn.tile"),
    (lambda x, s, k: relay.strided_slice(x, s, s), "dyn.strided_slice"),
    (lambda x, s, k: relay.topk(x, k, ret_type="indices"), "dyn.topk"),
])
def test_a_run_time_shape_or_size_makes_the_dyn_op_as_relay_did(build, op):
    # Relay's builder turned an expression where a shape / size goes into the dyn.*
    # op; the expression never becomes an attribute (which failed later as a TypeError).
    x = relay.var("x", shape=(2, 6), dtype="float32")
    s = relay.var("s", shape=(2,), dtype="int64")
    k = relay.var("k", shape=(), dtype="int32")
    call = build(x, s, k)
    assert call.op.name == op
    assert all(not isinstance(v, relay.ast.Expr) for v in call.attrs.values())
    assert op in relay.op.DYNAMIC_FORMS
    func = relay.Function(relay.analysis.free_vars(call), call)
    if op in ("dyn.zeros", "dyn.ones", "dyn.full", "dyn.reshape"):
        bmlib_relax.compile(relay.IRModule.from_expr(func))  # imported (test_create, ...)
    else:  # converted once the operand is known at import (tests/importer/test_dynamic.py)
        with pytest.raises(bmlib_relax.ConversionError,
                           match=op.replace(".", r"\.") + ": its .* known only when"):
            bmlib_relax.compile(relay.IRModule.from_expr(func))
    # constants and lists keep the static op
    static = {"dyn.zeros": lambda: relay.zeros((2, 3), "float32"),
              "dyn.reshape": lambda: relay.reshape(x, relay.const(np.array([3, 4]))),
              "dyn.topk": lambda: relay.topk(x, relay.const(2), ret_type="indices")}
    if op in static:
        assert static[op]().op.name == op[4:]
