"""``nn.sparse_dense``: a pruned model's sparse weights, as v0.19's Relay computed them.

``sparse_dense(D, S)`` is ``D @ as_dense(S)^T`` (``sparse_lhs``: ``as_dense(S) @ D^T``),
``S`` in CSR (1-d data) or BSR (``(nnz, bs_r, bs_c)`` blocks) with ``indices`` /
``indptr`` as scipy defines them.  The references below build ``as_dense`` entry by entry
from that definition; the op was an unsupported op before.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, relay
from conftest import offloaded_partitions

from .helpers import relay_fn

RNG = np.random.default_rng(77)


def _as_dense(data, indices, indptr, columns):
    """The matrix a CSR / BSR triple stores (entries of one position add up)."""
    rows, cols = data.shape[1:] if data.ndim == 3 else (1, 1)
    out = np.zeros(((len(indptr) - 1) * rows, columns), "float32")
    for row in range(len(indptr) - 1):
        for k in range(indptr[row], indptr[row + 1]):
            block = data[k] if data.ndim == 3 else np.full((1, 1), data[k])
            out[row * rows:(row + 1) * rows, indices[k] * cols:(indices[k] + 1) * cols] += block
    return out


def _random_sparse(rows, block_rows, block_cols, column_blocks, density=0.4):
    data, indices, indptr = [], [], [0]
    for _ in range(rows):
        picked = np.flatnonzero(RNG.random(column_blocks) < density)
        indices.extend(picked.tolist())
        data.extend(RNG.standard_normal((len(picked), block_rows, block_cols)))
        indptr.append(len(indices))
    data = np.array(data, "float32").reshape(-1, block_rows, block_cols)
    if block_rows == block_cols == 1:
        data = data.reshape(-1)
    return data, np.array(indices, "int32"), np.array(indptr, "int32")


def _text(data, indices, indptr, sparse_lhs=False, x_shape=(3, 8)):
    def ty(a):
        return f"Tensor[({', '.join(map(str, a.shape))}{',' if a.ndim == 1 else ''}), {a.dtype}]"

    attr = ", sparse_lhs=True" if sparse_lhs else ""
    return relay_fn(f"%x: Tensor[{x_shape}, float32], %d: {ty(data)}, %i: {ty(indices)}, "
                    f"%p: {ty(indptr)}", f"nn.relu(nn.sparse_dense(%x, %d, %i, %p{attr}))")


@pytest.mark.parametrize("block, sparse_lhs", [((1, 1), False), ((2, 2), False),
                                               ((1, 1), True), ((2, 4), True)])
def test_sparse_dense_of_bound_weights_is_a_dense_product_on_bmlib(block, sparse_lhs):
    data, indices, indptr = _random_sparse(5, *block, column_blocks=8 // block[1])
    model = bmlib_relax.compile(_text(data, indices, indptr, sparse_lhs),
                                {"d": data, "i": indices, "p": indptr})
    assert offloaded_partitions(model.relax_module)
    x = RNG.standard_normal((3, 8)).astype("float32")
    weight = _as_dense(data, indices, indptr, 8)
    want = weight @ x.T if sparse_lhs else x @ weight.T
    np.testing.assert_allclose(model(x), np.maximum(want, 0), rtol=1e-5, atol=1e-5)


def test_the_builder_takes_the_sparse_matrix_as_a_namedtuple_or_a_tuple():
    csr = namedtuple("CSR", "data indices indptr")
    data, indices, indptr = _random_sparse(4, 1, 1, column_blocks=8)
    x = relay.var("x", shape=(3, 8))
    weight = _as_dense(data, indices, indptr, 8)
    xs = RNG.standard_normal((3, 8)).astype("float32")
    for sparse in (csr(*map(relay.const, (data, indices, indptr))),
                   tuple(map(relay.const, (data, indices, indptr)))):
        call = relay.nn.sparse_dense(x, sparse)
        assert len(call.args) == 4  # v0.19's MakeSparseDense: dense, data, indices, indptr
        typed = relay.transform.InferType()(relay.IRModule.from_expr(call))["main"]
        assert typed.body.checked_type == relay.TensorType((3, 4))
        np.testing.assert_allclose(bmlib_relax.compile(relay.Function([x], call))(xs),
                                   xs @ weight.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    ({"i": np.array([0, 9], "int32")}, r"indices\[1\] is 9: outside the 8 column block"),
    ({"p": np.array([0, 2, 1], "int32")}, r"indptr\[2\] is 1: indptr must rise"),
    ({"p": np.array([0, 1, 3], "int32")}, r"indptr\[2\] is 3: .* at most the 2 stored"),
])
def test_a_sparse_matrix_that_reads_outside_its_arrays_is_refused(change, message):
    # topi's loops read data/indices at whatever indptr and indices said: past the end
    arrays = {"d": np.array([1.0, 2.0], "float32"), "i": np.array([0, 3], "int32"),
              "p": np.array([0, 1, 2], "int32")}
    arrays.update(change)
    with pytest.raises(ConversionError, match=message):
        bmlib_relax.compile(_text(arrays["d"], arrays["i"], arrays["p"]), arrays)


def test_a_sparse_operand_known_only_at_run_time_is_refused_by_name():
    data, indices, indptr = _random_sparse(3, 1, 1, column_blocks=8)
    with pytest.raises(ConversionError, match=r"nn.sparse_dense: the sparse operand .* is "
                                              r"known only when the model runs"):
        bmlib_relax.compile(_text(data, indices, indptr))


def test_sparse_add_of_bound_weights_adds_the_dense_matrix():
    data, indices, indptr = _random_sparse(3, 1, 1, column_blocks=8)
    text = relay_fn(f"%x: Tensor[(3, 8), float32], %d: Tensor[({data.size},), float32], "
                    f"%i: Tensor[({indices.size},), int32], %p: Tensor[(4,), int32]",
                    "nn.relu(nn.sparse_add(%x, %d, %i, %p))")
    model = bmlib_relax.compile(text, {"d": data, "i": indices, "p": indptr})
    assert offloaded_partitions(model.relax_module)
    x = RNG.standard_normal((3, 8)).astype("float32")
    np.testing.assert_allclose(model(x), np.maximum(x + _as_dense(data, indices, indptr, 8), 0),
                               rtol=1e-6)
    with pytest.raises(ConversionError, match=r"indptr has 3 entries for the dense operand's "
                                              r"3 rows"):
        bmlib_relax.compile(text.replace("%p: Tensor[(4,)", "%p: Tensor[(3,)"),
                            {"d": data, "i": indices, "p": indptr[:3]})


def test_sparse_transpose_of_a_bound_square_matrix():
    # v0.19's topi placed each row's entries in the transposed rows in row order
    data, indices, indptr = _random_sparse(5, 1, 1, column_blocks=5, density=0.5)
    ty = f"Tensor[({data.size},), float32], %i: Tensor[({data.size},), int32], " \
         f"%p: Tensor[(6,), int32]"
    text = relay_fn(f"%x: Tensor[(2, 5), float32], %d: {ty}",
                    "%0 = nn.sparse_transpose(%d, %i, %p);\n"
                    "  nn.relu(nn.sparse_dense(%x, %0.0, %0.1, %0.2))")
    model = bmlib_relax.compile(text, {"d": data, "i": indices, "p": indptr})
    assert offloaded_partitions(model.relax_module)
    x = RNG.standard_normal((2, 5)).astype("float32")
    transposed = _as_dense(data, indices, indptr, 5).T
    np.testing.assert_allclose(model(x), np.maximum(x @ transposed.T, 0), rtol=1e-5,
                               atol=1e-6)
    arrays = relay.nn.sparse_transpose(tuple(map(relay.const, (data, indices, indptr))))
    out = bmlib_relax.compile(relay.Function([], arrays.astuple()))()
    t_data, t_indices, t_indptr = out
    assert [a.dtype for a in out] == [np.float32, np.int32, np.int32]
    np.testing.assert_array_equal(_as_dense(t_data, t_indices, t_indptr, 5), transposed)
    for row in range(5):
        assert list(t_indices[t_indptr[row]:t_indptr[row + 1]]) == \
            sorted(t_indices[t_indptr[row]:t_indptr[row + 1]])
