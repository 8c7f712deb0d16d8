"""Relay op level 3 behaviour (TVM v0.19's ``test_op_level3.py`` area), own tests.

Oracles: numpy; each compile asserts bmlib offloaded something.
"""
import numpy as np
import pytest
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from conftest import offloaded_partitions, run_beside_offloaded_relu as _run

RNG = np.random.default_rng(3)


def test_transpose_prints_axes_none_and_reverses():
    n, t = te.var("n"), te.var("t")
    x = relay.var("x", relay.TensorType((n, t, 100), "float32"))
    y = relay.transpose(x)
    assert "transpose(%x, axes=None)" in y.astext()
    assert relay.testing.run_infer_type(y).checked_type == \
        relay.TensorType((100, t, n), "float32")
    x2 = relay.var("x2", shape=(2, 3, 4))
    x2_np = RNG.uniform(-1, 1, (2, 3, 4)).astype("float32")
    (out,) = _run([x2], [relay.transpose(x2)], [x2_np])
    np.testing.assert_array_equal(out, x2_np.transpose())


def test_split_types_as_relay_wrote_them():
    d1, d2, d3 = te.var("d1"), te.var("d2"), te.var("d3")
    x = relay.var("x", relay.TensorType((d1, d2, d3), "float32"))

    def split_type(*args, **kwargs):
        return relay.testing.run_infer_type(relay.split(x, *args, **kwargs).astuple()).checked_type

    assert split_type(4, axis=2) == relay.TupleType(
        [relay.TensorType((d1, d2, d3 // 4), "float32")] * 4)
    assert split_type(np.array([2, 4, 7]).astype("int64").tolist(), axis=1) == relay.TupleType([
        relay.TensorType((d1, 2, d3), "float32"), relay.TensorType((d1, 2, d3), "float32"),
        relay.TensorType((d1, 3, d3), "float32"), relay.TensorType((d1, d2 - 7, d3), "float32")])
    s = relay.var("s", shape=(5, 4))
    with pytest.raises(bmlib_relax.errors.RelayTypeError, match="split.*divide"):
        relay.testing.run_infer_type(relay.split(s, 3, axis=1).astuple())


def test_reshape_like_ranges_and_symbolic_lhs():
    n, w = te.var("n"), te.var("w")
    x = relay.var("x", relay.TensorType((n, 2, 3, w), "float32"))
    y = relay.var("y", relay.TensorType((1, 8, 8), "float32"))
    assert relay.testing.run_infer_type(relay.reshape_like(x, y)).checked_type == \
        relay.TensorType((1, 8, 8), "float32")
    a = relay.var("a", shape=(1, 2, 3, 4))
    b = relay.var("b", shape=(2, 3, 4, 1, 6))
    a_np = RNG.uniform(-1, 1, (1, 2, 3, 4)).astype("float32")
    b_np = np.zeros((2, 3, 4, 1, 6), "float32")
    outs = [relay.reshape_like(a, b, rhs_end=3), relay.reshape_like(a, b, rhs_begin=2),
            relay.reshape_like(a, relay.var("c", shape=(1, 6, 5)), lhs_begin=1, lhs_end=3,
                               rhs_begin=1, rhs_end=2)]
    types = [relay.testing.run_infer_type(o).checked_type.shape for o in outs]
    assert types == [(2, 3, 4), (4, 1, 6), (1, 6, 4)]
    c = outs[2].args[1]
    got = _run([a, b, c], outs, [a_np, b_np, np.zeros((1, 6, 5), "float32")])
    for out, shape in zip(got, types):
        np.testing.assert_array_equal(out, a_np.reshape(shape))
    with pytest.raises(bmlib_relax.errors.RelayTypeError, match="sizes differ"):
        relay.testing.run_infer_type(relay.reshape_like(a, relay.var("z", shape=(5,))))


def test_meshgrid_scalars_sparse_to_dense_vectors_reverse_sequence_message():
    v = relay.var("v", shape=(3,))
    s = relay.var("s", shape=())
    idx = relay.var("idx", shape=(3,), dtype="int64")
    vals = relay.var("vals", shape=(3,))
    v_np = np.array([1, 2, 3], "float32")
    grids = relay.meshgrid([v, s], indexing="ij")
    dense = relay.sparse_to_dense(idx, [5], vals, relay.const(0.5))
    got = _run([v, s, idx, vals], [grids[0], grids[1], dense],
               [v_np, np.float32(7), np.array([0, 1, 4]), np.array([3, 4, 5], "float32")])
    np.testing.assert_array_equal(got[0], v_np.reshape(3, 1))
    np.testing.assert_array_equal(got[1], np.full((3, 1), 7, "float32"))
    np.testing.assert_array_equal(got[2], [3, 4, 0.5, 0.5, 5])
    data = relay.var("data", shape=(4, 4), dtype="int32")
    lengths = relay.var("lengths", shape=(5,), dtype="int32")
    with pytest.raises(bmlib_relax.errors.BmlibError,
                       match="For reverse_sequnece seq_lengths size should match with dimension "
                             "of batch axis, but got dimension of batch_axis = 4, and seq_length "
                             "size = 5"):
        relay.testing.run_infer_type(relay.reverse_sequence(data, lengths, 1, 0))


def test_trilu_with_a_runtime_k():
    """Relay's trilu takes k as a tensor: a k known only at run time works too."""
    x = relay.var("x", shape=(3, 4))
    k = relay.var("k", shape=(), dtype="int64")
    x_np = RNG.uniform(1, 2, (3, 4)).astype("float32")
    func = relay.Function([x, k], relay.Tuple([relay.nn.relu(x), relay.trilu(x, k),
                                               relay.trilu(x, k, upper=False)]))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    for k_value in (-1, 0, 2):
        _, upper, lower = model(x_np, np.int64(k_value))
        np.testing.assert_array_equal(upper, np.triu(x_np, k_value))
        np.testing.assert_array_equal(lower, np.tril(x_np, k_value))


def _sparse_reshape_ref(indices, prev_shape, new_shape):
    new_shape = np.array(new_shape)
    if (new_shape == -1).any():
        new_shape[new_shape == -1] = np.prod(prev_shape) // np.prod(new_shape[new_shape != -1])
    flat = np.ravel_multi_index(indices.T, prev_shape) if len(indices) else np.zeros(0, "int64")
    out = np.stack(np.unravel_index(flat, new_shape), axis=1) if len(indices) else \
        np.zeros((0, len(new_shape)), indices.dtype)
    return out.astype(indices.dtype), new_shape


@pytest.mark.parametrize("dynamic", [False, True])
def test_sparse_reshape_static_and_dynamic(dynamic):
    indices_np = np.array([[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [1, 2, 3]], "int32")
    prev_np, new_np = np.array([2, 3, 6], "int32"), np.array([9, -1], "int32")
    any_ = relay.Any()
    indices = relay.var("indices", shape=(any_, any_) if dynamic else (5, 3), dtype="int32")
    prev = relay.var("prev", shape=(any_,) if dynamic else (3,), dtype="int32")
    new = relay.var("new", shape=(any_,) if dynamic else (2,), dtype="int32")
    out = relay.sparse_reshape(indices, prev, new)
    ty = relay.testing.run_infer_type(out.astuple()).checked_type
    assert [f.dtype for f in ty.fields] == ["int32", "int32"]
    x = relay.var("x", shape=(2,))
    got = _run([x, indices, prev, new], [out[0], out[1]],
               [np.ones(2, "float32"), indices_np, prev_np, new_np])
    want_indices, want_shape = _sparse_reshape_ref(indices_np, prev_np, new_np)
    np.testing.assert_array_equal(got[0], want_indices)
    np.testing.assert_array_equal(got[1], want_shape)


def _scatter_ref(data, indices, updates, axis, reduction):
    out = data.copy()
    for index in np.ndindex(*indices.shape):
        target = list(index)
        target[axis] = indices[index]
        if reduction == "add":
            out[tuple(target)] += updates[index]
        else:
            out[tuple(target)] = updates[index]
    return out


def test_scatter_elements_of_dynamic_4d_shape_compiles_quickly_and_right():
    """4-d scatter_elements with ``?`` dims (TVM's n-d lowering took LLVM minutes):
    negative indices, add and update, one compile."""
    any4 = [relay.Any()] * 4
    d = relay.var("d", relay.TensorType(any4, "float32"))
    i = relay.var("i", relay.TensorType(any4, "int64"))
    u = relay.var("u", relay.TensorType(any4, "float32"))
    x = relay.var("x", shape=(2,))  # static: offloaded (dynamic ops stay on the host here)
    func = relay.Function([x, d, i, u], relay.Tuple([
        relay.nn.relu(x), relay.scatter_elements(d, i, u, 1, "add"),
        relay.scatter_elements(d, i, u, -1)]))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    d_np = RNG.uniform(-1, 1, (2, 3, 4, 5)).astype("float32")
    u_np = RNG.uniform(-1, 1, (2, 3, 4, 3)).astype("float32")
    i_np = np.broadcast_to(np.array([0, -1, 2]), (2, 3, 4, 3)).astype("int64")  # distinct per row
    _, added, updated = model(np.ones(2, "float32"), d_np, i_np, u_np)
    np.testing.assert_allclose(added, _scatter_ref(d_np, np.where(i_np < 0, i_np + 3, i_np),
                                                   u_np, 1, "add"), rtol=1e-6)
    np.testing.assert_allclose(updated, _scatter_ref(d_np, np.where(i_np < 0, i_np + 5, i_np),
                                                     u_np, 3, "update"), rtol=1e-6)


def _stft_ref(signal, n_fft, hop, window, onesided):
    rows = n_fft // 2 + 1 if onesided else n_fft
    frames = (signal.shape[-1] - n_fft) // hop + 1
    k = np.arange(n_fft)
    out = np.zeros((signal.shape[0], rows, frames, 2))
    for m in range(frames):
        seg = signal[:, m * hop:m * hop + n_fft] * window
        for w in range(rows):
            out[:, w, m, 0] = (seg * np.cos(2 * np.pi * w * k / n_fft)).sum(-1)
            out[:, w, m, 1] = -(seg * np.sin(2 * np.pi * w * k / n_fft)).sum(-1)
    return out


def test_stft_static_dynamic_normalized_and_1d():
    sig_np = RNG.uniform(-1, 1, (2, 9)).astype("float32")
    win_np = np.array([1, 2, 3], "float32")
    sig = relay.var("sig", shape=(2, 9))
    win = relay.var("win", shape=(3,))
    dyn = relay.var("dyn", relay.TensorType([relay.Any(), relay.Any()], "float32"))
    one = relay.var("one", shape=(9,))
    outs = [relay.stft(sig, 3, 3, 3, win, False, True),
            relay.stft(dyn, 3, 2, 3, win, True, False),
            relay.stft(one, 4)]  # Relay's defaults: hop 1, window of ones
    got = _run([sig, win, dyn, one], outs, [sig_np, win_np, sig_np, sig_np[0]])
    np.testing.assert_allclose(got[0], _stft_ref(sig_np, 3, 3, win_np, True), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(got[1], _stft_ref(sig_np, 3, 2, win_np, False) / np.sqrt(3),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[2], _stft_ref(sig_np[:1], 4, 1, np.ones(4), True)[0],
                               rtol=1e-4, atol=1e-4)


def _segment_sum_ref(data, ids, rows):
    out = np.zeros((rows,) + data.shape[1:], data.dtype)
    for i, s in enumerate(ids):
        out[s] += data[i]
    return out


def test_segment_sum_and_runtime_arange():
    """segment_sum with num_segments given, and with max(ids) + 1 rows known only at run
    time (also with ``?`` dims); arange with a run-time stop."""
    data_np = RNG.uniform(-1, 1, (5, 2, 3)).astype("float32")
    ids_np = np.array([2, 0, 2, 1, 0], "int64")
    data = relay.var("data", shape=(5, 2, 3))
    ids = relay.var("ids", shape=(5,), dtype="int64")
    dyn = relay.var("dyn", relay.TensorType([relay.Any()] * 3, "float32"))
    dyn_ids = relay.var("dyn_ids", relay.TensorType([relay.Any()], "int64"))
    stop = relay.var("stop", shape=(), dtype="int32")
    outs = [relay.segment_sum(data, ids, 4), relay.segment_sum(data, ids),
            relay.segment_sum(dyn, dyn_ids),
            relay.arange(relay.const(1, "int32"), stop, relay.const(2, "int32"), dtype="int32")]
    assert "scatter_elements" in outs[1].astext()
    assert relay.testing.run_infer_type(outs[1]).checked_type.dtype == "float32"
    got = _run([data, ids, dyn, dyn_ids, stop], outs,
               [data_np, ids_np, data_np, ids_np[:4], np.int32(8)])
    np.testing.assert_allclose(got[0], _segment_sum_ref(data_np, ids_np, 4), rtol=1e-6)
    np.testing.assert_allclose(got[1], _segment_sum_ref(data_np, ids_np, 3), rtol=1e-6)
    np.testing.assert_allclose(got[2], _segment_sum_ref(data_np, ids_np[:4], 3), rtol=1e-6)
    np.testing.assert_array_equal(got[3], [1, 3, 5, 7])


@pytest.mark.parametrize("is_sorted", [True, False])
def test_unique_padded_outputs(is_sorted):
    x_np = np.array([4, 1, 4, 3, 1, 9, 3, 4], "int32")
    x = relay.var("x", shape=(8,), dtype="int32")
    f = relay.var("f", shape=(2,))
    out = relay.unique(x, is_sorted, True)
    got = _run([f, x], [out[i] for i in range(5)], [np.ones(2, "float32"), x_np])
    values, first, inverse, counts = np.unique(x_np, return_index=True, return_inverse=True,
                                               return_counts=True)
    if not is_sorted:  # order of first occurrence
        order = np.argsort(first)
        values, first, counts = values[order], first[order], counts[order]
        inverse = np.argsort(order)[inverse]
    k = int(got[3][0])
    assert k == len(values) and all(g.shape == (8,) for i, g in enumerate(got) if i != 3)
    np.testing.assert_array_equal(got[0][:k], values)
    np.testing.assert_array_equal(got[1][:k], first)
    np.testing.assert_array_equal(got[2], inverse)
    np.testing.assert_array_equal(got[4][:k], counts)
    dyn = relay.var("dyn", relay.TensorType([relay.Any()], "int32"))
    ty = relay.testing.run_infer_type(relay.unique(dyn).astuple()).checked_type
    assert ty.fields[3] == relay.TensorType((1,), "int32")
    with pytest.raises(bmlib_relax.errors.ConversionError, match="unique.*dynamic length"):
        bmlib_relax.compile(relay.Function([dyn], relay.unique(dyn).astuple()))


@pytest.mark.parametrize("body", ["unravel_index(%i, (3, 4))", "take((%x, %x), %i)",
                                  "add((%x, %x), %x)"])
def test_a_tuple_where_the_op_takes_a_tensor_is_named(body):
    # Relay's type relations refused these; the converters failed on the tuple's type
    # ("'TupleType' object has no attribute 'shape'")
    from bmlib_relax import ConversionError

    with pytest.raises(ConversionError, match=r"argument \d \(\w+\) is a tuple; this op "
                                              r"takes a tensor there"):
        bmlib_relax.compile('#[version = "0.0.5"]\n'
                            'def @main(%x: Tensor[(3, 4), float32], %i: Tensor[(3), int64]) '
                            f'{{ {body} }}')
