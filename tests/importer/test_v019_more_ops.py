"""Relay v0.19 ops the builder made and the importer had no converter for: ``einsum``,
``nn.mirror_pad``, ``searchsorted``, ``argwhere``, ``nn.dilate``, ``invert_permutation``,
``matrix_set_diag`` and ``contrib_reverse_reshape``.

Expected values come from NumPy ports of v0.19's computes written here from its source
(src/topi/einsum.cc's ``EinsumEquation``/``EinsumBuilder``, python/tvm/topi/nn/pad.py
``mirror_pad``, topi/searchsorted.py's binary search, topi/argwhere.py, topi/nn/dilate.py,
topi/transform.py ``invert_permutation``, include/tvm/topi/transform.h
``matrix_set_diag``, and src/relay/op/tensor/transform.cc ``InferNewShape`` with
``reverse``) — not from the code under test.  The type errors are those of v0.19's
relations (EinsumRel, MirrorPadRel, SearchSortedRel, DilateRel, MatrixSetDiagRel,
ReverseReshapeRel) and of its computes.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError, relay
from bmlib_relax.errors import RelayTypeError
from bmlib_relax.relay.testing import run_infer_type
from conftest import offloaded_partitions, run_beside_offloaded_relu

from .helpers import import_text, relay_fn

_RELU_IN = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], "float32")


def _run(params, outs, values):
    """``outs`` computed beside an offloaded relu (a leading float input of its own), so
    each model runs bmlib and host code."""
    relu_in = relay.var("relu_in", shape=_RELU_IN.shape)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    got = run_beside_offloaded_relu([relu_in] + list(params), outs, [_RELU_IN] + list(values))
    return got[0] if len(outs) == 1 else got


def _compile_text(params: str, body: str):
    """Relay text computing ``body`` beside an offloaded relu; returns ``body``'s runner."""
    text = relay_fn(f"%relu_in: Tensor[(2, 3), float32], {params}",
                    f"(nn.relu(%relu_in), {body})")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return lambda *values: model(_RELU_IN, *values)[1]


def _compile_beside_relu(params, out):
    """``out`` beside an offloaded relu, compiled: the runner takes the relu's input first."""
    r = relay.var("r", shape=_RELU_IN.shape)
    func = relay.Function([r] + list(params), relay.Tuple([relay.nn.relu(r), out]))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model


def _refused(expr, params, match):
    """``expr`` is refused, naming the op, at import and by ``InferType``."""
    func = relay.Function(params, expr)
    with pytest.raises(ConversionError, match=match):
        bmlib_relax.compile(relay.IRModule.from_expr(func))
    with pytest.raises(RelayTypeError, match=match):
        relay.transform.InferType()(relay.IRModule.from_expr(func))


def _rand(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed + 31 * len(shape) + sum(shape))
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)


# =============================================================================== einsum
def _parse_equation(equation: str):
    """v0.19 ``EinsumEquation::FromString``: '.' stands for the ellipsis; without an arrow
    the output is every label used once, in character order, the ellipsis first."""
    equation = equation.replace(" ", "").replace("...", ".")
    if "->" in equation:
        lhs, output = equation.split("->")
        output = list(output)
    else:
        lhs, output = equation, None
    inputs = [list(s) for s in lhs.split(",")]
    if output is None:
        counts: dict = {}
        for sub in inputs:
            for label in sub:
                counts[label] = counts.get(label, 0) + 1
        output = sorted((lab for lab, n in counts.items() if lab == "." or n == 1),
                        key=lambda lab: "\0" if lab == "." else lab)
    return inputs, output


def einsum_v019(equation: str, *arrays: np.ndarray) -> np.ndarray:
    """v0.19's ``topi::einsum`` by loops: a label's extent is broadcast over its uses
    (a 1 takes the other), ellipsis sub-shapes broadcast right-aligned, labels not in the
    output and an ellipsis not in it are summed, an output label's first position
    names its index."""
    inputs, output = _parse_equation(equation)
    extent: dict = {}
    ellipses = []
    for sub, array in zip(inputs, arrays):
        dim = 0
        for label in sub:
            if label == ".":
                n = array.ndim - len(sub) + 1
                ellipses.append(array.shape[dim:dim + n])
                dim += n
            else:
                size = array.shape[dim]
                dim += 1
                old = extent.get(label, size)
                assert old == size or 1 in (old, size)
                extent[label] = max(old, size) if 1 in (old, size) else size
    ellipsis = tuple(np.broadcast_shapes(*ellipses)) if ellipses else ()
    out_shape = []
    for label in output:
        out_shape += list(ellipsis) if label == "." else [extent[label]]
    reduced = sorted({lab for sub in inputs for lab in sub} - set(output),
                     key=lambda lab: "\0" if lab == "." else lab)
    red_shape = []
    for label in reduced:
        red_shape += list(ellipsis) if label == "." else [extent[label]]
    out = np.zeros(out_shape, dtype=np.float64)
    for out_index in itertools.product(*[range(n) for n in out_shape]):
        total = 0.0
        for red_index in itertools.product(*[range(n) for n in red_shape]):
            index, ell_index = {}, None
            at = 0
            for label in output:
                if label == ".":
                    ell_index = out_index[at:at + len(ellipsis)]
                    at += len(ellipsis)
                else:
                    index.setdefault(label, out_index[at])
                    at += 1
            at = 0
            for label in reduced:
                if label == ".":
                    ell_index = red_index[at:at + len(ellipsis)]
                    at += len(ellipsis)
                else:
                    index[label] = red_index[at]
                    at += 1
            term = 1.0
            for sub, array in zip(inputs, arrays):
                position, dim = [], 0
                for label in sub:
                    if label == ".":
                        n = array.ndim - len(sub) + 1
                        for j, size in zip(ell_index[len(ellipsis) - n:],
                                           array.shape[dim:dim + n]):
                            position.append(0 if size == 1 else j)
                        dim += n
                    else:
                        size = array.shape[dim]
                        position.append(0 if size == 1 and extent[label] != 1 else index[label])
                        dim += 1
                term *= float(array[tuple(position)])
            total += term
        out[out_index] = total
    return out.astype(arrays[0].dtype)


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),                       # implicit: ik
    ("ij, jk -> ik", [(2, 3), (3, 4)]),                # spaces ignored
    ("ii->i", [(3, 3)]),                               # a diagonal
    ("ii", [(3, 3)]),                                  # implicit: the trace
    ("ij->ji", [(2, 5)]),
    ("ij", [(2, 5)]),
    ("ji", [(2, 5)]),                                  # implicit: ij, a transpose
    ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij,kj,kl->il", [(2, 3), (4, 3), (4, 2)]),
    ("Ab,cb", [(2, 3), (4, 3)]),                       # implicit: Ac (upper case first)
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),  # ellipses broadcast
    ("...ij,jk", [(2, 3, 4), (4, 5)]),                 # implicit: ...ik
    ("...ji", [(2, 3, 4)]),                            # implicit: ...ij
    ("...i->i", [(2, 3, 4)]),                          # an ellipsis summed
    ("i...->...", [(3, 2, 2)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),                   # a label of extent 1 broadcasts
    ("i->ii", [(3,)]),                                 # out[a, b] = x[a] (topi's first index)
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 3)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES)
def test_einsum_as_v019(equation, shapes):
    arrays = [_rand(s, seed=i) for i, s in enumerate(shapes)]
    xs = [relay.var(f"x{i}", shape=s) for i, s in enumerate(shapes)]
    got = _run(xs, relay.einsum(xs, equation), arrays)
    want = einsum_v019(equation, *arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_reference_agrees_with_numpy_where_numpy_defines_it():
    for equation, shapes in EINSUM_CASES[:17]:
        if "->ii" in equation or equation in ("...i->i", "i...->..."):
            continue
        arrays = [_rand(s, seed=i) for i, s in enumerate(shapes)]
        np.testing.assert_allclose(einsum_v019(equation, *arrays),
                                   np.einsum(equation, *arrays), rtol=1e-5, atol=1e-5)


def test_einsum_integers_and_text():
    a, b = _rand((2, 3), "int32"), _rand((3, 2), "int32", seed=1)
    run = _compile_text("%a: Tensor[(2, 3), int32], %b: Tensor[(3, 2), int32]",
                        'einsum((%a, %b), equation="ij,jk->ik")')
    np.testing.assert_array_equal(run(a, b), a @ b)


def test_einsum_run_time_dims_are_checked():
    """v0.19 indexed a run-time label extent unchecked (its ``max`` of the two): the
    uses of a label must agree when the model runs."""
    n = relay.Any()
    x, y = relay.var("x", relay.TensorType((2, n))), relay.var("y", relay.TensorType((n, 3)))
    a, b = _rand((2, 4)), _rand((4, 3), seed=1)
    got = _run([x, y], relay.einsum([x, y], "ij,jk->ik"), [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    model = _compile_beside_relu([x, y], relay.einsum([x, y], "ij,jk->ik"))
    with pytest.raises(RunCheckError, match="einsum"):
        model(_RELU_IN, _rand((2, 4)), _rand((5, 3)))


@pytest.mark.parametrize("equation,shapes,dtypes,match", [
    ("ij,jk->ik", [(2, 3), (4, 5)], None, "extent"),
    ("ij->ij", [(2, 3), (2, 3)], None, "2 operands"),
    ("ijk->i", [(2, 3)], None, "3 labels"),
    ("i->i", [(2, 3)], None, "1 label"),
    ("ij,jk->ik", [(2, 3), (3, 4)], ["float32", "float64"], "dtype"),
    ("i1->i", [(2,)], None, "character"),
    ("i->i->i", [(2,)], None, "arrow"),
    ("i-i", [(2,)], None, "arrow"),
    ("...i...->i", [(2, 3)], None, "ellipsis"),
    ("i..->i", [(2, 3)], None, "ellipsis"),
    ("i->j", [(2,)], None, "'j'"),
    ("...ij->...", [(3, 2)], None, None),  # valid: the ellipsis covers nothing
])
def test_einsum_v019_errors_are_named(equation, shapes, dtypes, match):
    dtypes = dtypes or ["float32"] * len(shapes)
    xs = [relay.var(f"x{i}", shape=s, dtype=d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    call = relay.einsum(xs, equation)
    if match is None:
        assert run_infer_type(call).checked_type == relay.TensorType((), "float32")
        return
    _refused(call, xs, rf"einsum: .*{match}")


def test_einsum_of_no_operand_is_named():
    _refused(relay.einsum([], "->"), [], r"einsum: .*operand")


# ============================================================================ mirror_pad
def mirror_pad_v019(data, pad_width, mode):
    """v0.19 ``topi.nn.mirror_pad``: below the data, index ``-i - m``; above it,
    ``2 * (n - 1) - i + m``, with ``m`` 1 for SYMMETRIC and 0 for REFLECT."""
    m = int(mode == "SYMMETRIC")
    out_shape = [n + b + a for n, (b, a) in zip(data.shape, pad_width)]
    out = np.empty(out_shape, data.dtype)
    for index in itertools.product(*[range(n) for n in out_shape]):
        src = []
        for i, (n, (b, _)) in zip(index, zip(data.shape, pad_width)):
            axis = i - b
            src.append(-axis - m if axis < 0 else 2 * (n - 1) - axis + m if axis >= n else axis)
        out[index] = data[tuple(src)]
    return out


@pytest.mark.parametrize("shape,pad_width,mode,dtype", [
    ((3, 4), ((1, 2), (0, 3)), "SYMMETRIC", "float32"),
    ((3, 4), ((3, 3), (4, 4)), "SYMMETRIC", "float32"),   # the largest widths
    ((3, 4), ((1, 2), (0, 3)), "REFLECT", "float32"),
    ((3, 4), ((2, 2), (3, 3)), "REFLECT", "float32"),     # the largest widths
    ((1, 2, 3, 3), ((0, 0), (1, 1), (2, 0), (0, 2)), "SYMMETRIC", "int32"),
    ((2, 3, 4), ((0, 0), (0, 0), (0, 0)), "REFLECT", "float32"),
    ((1, 5), ((0, 0), (4, 1)), "REFLECT", "int32"),
])
def test_mirror_pad_as_v019(shape, pad_width, mode, dtype):
    data = _rand(shape, dtype)
    x = relay.var("x", shape=shape, dtype=dtype)
    got = _run([x], relay.nn.mirror_pad(x, pad_width, mode=mode), [data])
    want = mirror_pad_v019(data, pad_width, mode)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, np.pad(data, pad_width, mode=mode.lower()))


def test_mirror_pad_default_mode_is_symmetric_and_text_parses():
    data = _rand((3, 3))
    run = _compile_text("%x: Tensor[(3, 3), float32]",
                        "nn.mirror_pad(%x, pad_width=[[1, 1], [2, 0]])")
    np.testing.assert_array_equal(run(data),
                                  mirror_pad_v019(data, ((1, 1), (2, 0)), "SYMMETRIC"))


@pytest.mark.parametrize("shape,pad_width,mode,match", [
    ((3, 4), ((1, 1),), "SYMMETRIC", "2 dims and 1 pad width pair"),
    ((3, 4), ((1, 1, 1), (0, 0)), "SYMMETRIC", "pair"),
    ((3, 4), ((-1, 0), (0, 0)), "SYMMETRIC", "negative"),
    ((3, 4), ((4, 0), (0, 0)), "SYMMETRIC", "at most 3"),
    ((3, 4), ((0, 0), (0, 5)), "SYMMETRIC", "at most 4"),
    ((3, 4), ((3, 0), (0, 0)), "REFLECT", "at most 2"),
    ((1, 4), ((0, 1), (0, 0)), "REFLECT", "at most 0"),
    ((3, 4), ((1, 1), (1, 1)), "EDGE", "mode"),
])
def test_mirror_pad_v019_errors_are_named(shape, pad_width, mode, match):
    x = relay.var("x", shape=shape)
    _refused(relay.nn.mirror_pad(x, pad_width, mode=mode), [x], rf"nn.mirror_pad: .*{match}")


def test_mirror_pad_run_time_dim_is_checked():
    x = relay.var("x", relay.TensorType((relay.Any(), 3)))
    model = _compile_beside_relu([x], relay.nn.mirror_pad(x, ((2, 1), (1, 1)), mode="REFLECT"))
    data = _rand((4, 3))
    np.testing.assert_array_equal(model(_RELU_IN, data)[1],
                                  mirror_pad_v019(data, ((2, 1), (1, 1)), "REFLECT"))
    with pytest.raises(RunCheckError, match="nn.mirror_pad"):
        model(_RELU_IN, _rand((2, 3)))


# ========================================================================== searchsorted
def searchsorted_v019(seq, values, right, dtype):
    """v0.19 ``topi.searchsorted``: a binary search of each value in its row of ``seq``
    (the only row of a 1-D ``seq``), ``lo`` the first ``mid`` failing ``seq[mid] < v``
    (``<=`` when ``right``)."""
    out = np.empty(values.shape, dtype)
    n = seq.shape[-1]
    for index in np.ndindex(*values.shape):
        row = seq if seq.ndim == 1 else seq[index[:-1]]
        v, lo, hi = values[index], 0, n
        while lo < hi:
            mid = lo + ((hi - lo) >> 1)
            if (row[mid] <= v) if right else (row[mid] < v):
                lo = mid + 1
            else:
                hi = mid
        out[index] = lo
    return out


_SEQ = np.array([0.0, 1.0, 1.0, 2.5, 4.0, 4.0, 7.0], "float32")
_VALUES = np.array([[-1.0, 0.0, 1.0, 3.0], [4.0, 7.0, 8.0, 1.5]], "float32")


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_searchsorted_1d_sequence_as_v019(right, dtype):
    s, v = relay.var("s", shape=_SEQ.shape), relay.var("v", shape=_VALUES.shape)
    got = _run([s, v], relay.searchsorted(s, v, right=right, dtype=dtype), [_SEQ, _VALUES])
    want = searchsorted_v019(_SEQ, _VALUES, right, dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, np.searchsorted(_SEQ, _VALUES,
                                                        side="right" if right else "left"))


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_nd_sequence_as_v019(right):
    seq = np.sort(_rand((2, 3, 5), "int32"), axis=-1)
    values = _rand((2, 3, 4), "int32", seed=3)
    s = relay.var("s", shape=seq.shape, dtype="int32")
    v = relay.var("v", shape=values.shape, dtype="int32")
    got = _run([s, v], relay.searchsorted(s, v, right=right), [seq, values])
    np.testing.assert_array_equal(got, searchsorted_v019(seq, values, right, "int32"))


def test_searchsorted_unsorted_sequence_is_v019s_binary_search():
    seq = np.array([5.0, 1.0, 3.0, 2.0, 9.0], "float32")
    values = np.array([2.0, 4.0, 6.0, 0.0], "float32")
    s, v = relay.var("s", shape=seq.shape), relay.var("v", shape=values.shape)
    got = _run([s, v], relay.searchsorted(s, v), [seq, values])
    np.testing.assert_array_equal(got, searchsorted_v019(seq, values, False, "int32"))


@pytest.mark.parametrize("seq_shape,values_shape,dtype,match", [
    ((5,), (), "int32", "rank"),
    ((2, 5), (2, 3, 4), "int32", "ranks"),
    ((2, 5), (3, 4), "int32", "outer"),
    ((5,), (4,), "float32", "integer"),
    ((200,), (4,), "int8", "127"),
])
def test_searchsorted_v019_errors_are_named(seq_shape, values_shape, dtype, match):
    s, v = relay.var("s", shape=seq_shape), relay.var("v", shape=values_shape)
    _refused(relay.searchsorted(s, v, dtype=dtype), [s, v], rf"searchsorted: .*{match}")


# ============================================================================== argwhere
@pytest.mark.parametrize("shape,dtype", [
    ((7,), "float32"), ((3, 4), "int32"), ((2, 3, 4), "bool"), ((2, 2, 3, 2), "float32"),
    ((2, 1, 2, 3, 2), "int8"), ((3, 4), "zeros"),
])
def test_argwhere_as_v019(shape, dtype):
    rng = np.random.default_rng(len(shape))
    if dtype == "zeros":
        data, dtype = np.zeros(shape, "float32"), "float32"
    else:
        data = (rng.integers(0, 3, size=shape) * rng.integers(-1, 2, size=shape)).astype(dtype)
    if dtype == "float32" and data.size > 4:
        data.reshape(-1)[1] = np.nan
    x = relay.var("x", shape=shape, dtype=dtype)
    got = _run([x], relay.argwhere(x), [data])
    # row-major, as topi's nested loops; v0.19's LLVM lowered a float ``!=`` to an
    # ordered compare (FCmpONE): a NaN was not ``!= 0`` and was left out
    nonzero = (data != 0) & ~np.isnan(data) if dtype == "float32" else data != 0
    want = np.argwhere(nonzero).astype("int32")
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(), (1, 1, 1, 1, 1, 2)])
def test_argwhere_ranks_v019_refused_are_named(shape):
    x = relay.var("x", shape=shape)
    _refused(relay.argwhere(x), [x], r"argwhere: .*rank")


# ================================================================================ dilate
def dilate_v019(data, strides, value):
    """v0.19 ``topi.nn.dilate``: ``(n - 1) * s + 1`` per axis, the data at multiples of
    the stride, ``value`` between."""
    out = np.full([(n - 1) * s + 1 for n, s in zip(data.shape, strides)], value, data.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = data
    return out


@pytest.mark.parametrize("shape,strides,value,dtype", [
    ((2, 3), (1, 2), 0.0, "float32"),
    ((1, 2, 3, 3), (1, 1, 2, 3), -1.5, "float32"),
    ((4,), (3,), 7.0, "int32"),
    ((2, 2), (1, 1), 0.0, "float32"),
    ((0, 3), (1, 2), 0.0, "float32"),
])
def test_dilate_as_v019(shape, strides, value, dtype):
    data = _rand(shape, dtype)
    x = relay.var("x", shape=shape, dtype=dtype)
    got = _run([x], relay.nn.dilate(x, strides, value), [data])
    np.testing.assert_array_equal(got, dilate_v019(data, strides, value))


@pytest.mark.parametrize("shape,strides,match", [
    ((2, 3), (1,), "2 dims and 1 stride"),
    ((2, 3), (1, 0), "positive"),
    ((0, 3), (2, 1), "negative"),
])
def test_dilate_v019_errors_are_named(shape, strides, match):
    x = relay.var("x", shape=shape)
    _refused(relay.nn.dilate(x, strides), [x], rf"nn.dilate: .*{match}")


# ==================================================================== invert_permutation
def invert_permutation_v019(data):
    """v0.19 ``topi.invert_permutation``: ``result[data[i]] = i``."""
    out = np.empty_like(data)
    for i, r in enumerate(data):
        out[r] = i
    return out


@pytest.mark.parametrize("perm,dtype", [
    ([3, 4, 0, 2, 1], "int32"), ([0], "int64"), ([], "int32"),
    (list(np.random.default_rng(1).permutation(40)), "int64"), ([1, 0, 2], "int8"),
])
def test_invert_permutation_as_v019(perm, dtype):
    data = np.array(perm, dtype)
    x = relay.var("x", shape=data.shape, dtype=dtype)
    got = _run([x], relay.invert_permutation(x), [data])
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, invert_permutation_v019(data))
    if perm == [3, 4, 0, 2, 1]:
        np.testing.assert_array_equal(got, [2, 4, 3, 0, 1])  # v0.19's docstring


def test_invert_permutation_of_a_non_permutation_is_refused():
    x = relay.var("x", shape=(4,), dtype="int32")
    model = _compile_beside_relu([x], relay.invert_permutation(x))
    for bad in ([0, 1, 1, 3], [0, 1, 2, 4], [-1, 0, 1, 2]):
        with pytest.raises(RunCheckError, match="invert_permutation"):
            model(_RELU_IN, np.array(bad, "int32"))
    with pytest.raises(ConversionError, match="invert_permutation: .*permutation"):
        bmlib_relax.compile(relay.IRModule.from_expr(relay.Function(
            [], relay.invert_permutation(relay.const(np.array([0, 2, 2], "int32"))))))


@pytest.mark.parametrize("shape,dtype,match", [
    ((2, 3), "int32", "1-D"), ((3,), "float32", "integer"),
])
def test_invert_permutation_v019_errors_are_named(shape, dtype, match):
    x = relay.var("x", shape=shape, dtype=dtype)
    _refused(relay.invert_permutation(x), [x], rf"invert_permutation: .*{match}")


# ======================================================================= matrix_set_diag
def matrix_set_diag_v019(data, diagonal, k1, k2, super_right, sub_right):
    """v0.19 ``topi::matrix_set_diag``: for ``k1 <= j - i <= k2`` the value is the
    diagonal's ``[..., (k2 - k if a band), (i if k >= 0 else j) + offset]``, the offset
    the diagonal's length less this diagonal's where that side is right-aligned."""
    out = data.copy()
    rows, cols = data.shape[-2:]
    length = diagonal.shape[-1]
    for index in np.ndindex(*data.shape):
        *batch, i, j = index
        k = j - i
        if not k1 <= k <= k2:
            continue
        if k1 == k2:
            out[index] = diagonal[tuple(batch) + ((i if k >= 0 else j),)]
            continue
        if k >= 0:
            offset = length - min(cols - k, rows) if super_right else 0
        else:
            offset = length - min(cols, rows + k) if sub_right else 0
        out[index] = diagonal[tuple(batch) + (k2 - k, (i if k >= 0 else j) + offset)]
    return out


_ALIGN = {"RIGHT_LEFT": (True, False), "LEFT_RIGHT": (False, True),
          "LEFT_LEFT": (False, False), "RIGHT_RIGHT": (True, True)}


@pytest.mark.parametrize("shape,diag_shape,k", [
    ((3, 4), (3,), 0), ((3, 4), (3,), 1), ((4, 3), (3,), -1), ((2, 3, 3), (2, 3), 0),
    ((3, 4), (4, 3), (-1, 2)), ((2, 4, 3), (2, 3, 3), (-2, 0)), ((3, 5), (2, 3), (1, 2)),
])
@pytest.mark.parametrize("align", sorted(_ALIGN))
def test_matrix_set_diag_as_v019(shape, diag_shape, k, align):
    data, diagonal = _rand(shape), _rand(diag_shape, seed=5)
    x, d = relay.var("x", shape=shape), relay.var("d", shape=diag_shape)
    got = _run([x, d], relay.matrix_set_diag(x, d, k=k, align=align), [data, diagonal])
    k1, k2 = (k, k) if isinstance(k, int) else k
    np.testing.assert_array_equal(got, matrix_set_diag_v019(data, diagonal, k1, k2,
                                                            *_ALIGN[align]))


def test_matrix_set_diag_text_attributes_as_v019_printed_them():
    data, diagonal = _rand((3, 4)), _rand((2, 3), seed=5)
    run = _compile_text("%x: Tensor[(3, 4), float32], %d: Tensor[(2, 3), float32]",
                        "matrix_set_diag(%x, %d, k1=0, k2=1, super_diag_right_align=False, "
                        "sub_diag_right_align=True)")
    np.testing.assert_array_equal(run(data, diagonal),
                                  matrix_set_diag_v019(data, diagonal, 0, 1, False, True))


@pytest.mark.parametrize("shape,diag_shape,k,match", [
    ((3, 4), (3,), (1, 0), "k1=1"),              # v0.19's ICHECK_GE(k2, k1)
    ((3, 4), (3, 3), 0, "1-d"),                  # rank: the compute's index count
    ((3, 4), (3,), (0, 1), "2-d"),
    ((3, 4), (2,), 0, "3 entries"),              # v0.19 read past the diagonal
    ((3, 4), (1, 3), (0, 1), "2 diagonals"),
    ((2, 3, 3), (1, 3), 0, "batch"),
])
def test_matrix_set_diag_errors_are_named(shape, diag_shape, k, match):
    x, d = relay.var("x", shape=shape), relay.var("d", shape=diag_shape)
    _refused(relay.matrix_set_diag(x, d, k=k), [x, d], rf"matrix_set_diag: .*{match}")


# =============================================================== contrib_reverse_reshape
@pytest.mark.parametrize("shape,newshape,expected", [
    ((10, 5, 4), (-1, 0), (50, 4)),        # v0.19's doc example
    ((10, 5, 4), (0, -1), (5, 40)),        # the -1 takes an input dim's place
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),     # v0.19's test_op_level10 cases
    ((2, 3, 4), (2, 0, 0), (2, 3, 4)),
    ((2, 3, 4), (0, -1), (3, 8)),
    ((2, 3, 4), (-1, 0), (6, 4)),
    ((2, 3, 4), (0, -3), (2, 12)),
    ((2, 3, 4), (6, 0), (6, 4)),
    ((2, 3, 4), (-3, 0), (6, 4)),
    ((2, 3, 4), (-2,), (2, 3, 4)),
    ((2, 3, 4), (-2, 0, 0), (2, 3, 4)),
    ((2, 3, 4), (-1,), (24,)),
    ((3, 8), (0, 2, 4, -4), (3, 2, 4)),    # -4 splits the last dim (read right to left)
    ((3, 8), (0, -1, 4, -4), (3, 2, 4)),
    ((4, 6), (-1, 0, 2), (3, 4, 2)),
])
def test_reverse_reshape_as_v019(shape, newshape, expected):
    data = _rand(shape)
    x = relay.var("x", shape=shape)
    got = _run([x], relay.reverse_reshape(x, newshape), [data])
    np.testing.assert_array_equal(got, data.reshape(expected))


@pytest.mark.parametrize("shape,newshape,match", [
    ((2, 3, 4), (5, -1), "compatible"),
    ((2, 3, 4), (-1, -1), "one"),
    ((2, 3), (0, 0, 0), "0"),
    ((2, 3), (-5,), "-5"),
    ((2, 6), (-1, -1, -4), "both"),
    ((2, 6), (3, -4), "-4"),
])
def test_reverse_reshape_v019_errors_are_named(shape, newshape, match):
    x = relay.var("x", shape=shape)
    _refused(relay.reverse_reshape(x, newshape), [x],
             rf"contrib_reverse_reshape: .*{match}")


def test_reverse_reshape_text_and_run_time_dims():
    text = relay_fn("%x: Tensor[(?, 5, 4), float32]",
                    "contrib_reverse_reshape(%x, newshape=[-1, 0])")
    assert "R.reshape(x, R.shape([d0 * 5, 4]))" in import_text(text)["main"].script()
    data = _rand((3, 5, 4))
    run = _compile_text("%x: Tensor[(?, 5, 4), float32]",
                        "contrib_reverse_reshape(%x, newshape=[-1, 0])")
    np.testing.assert_array_equal(run(data), data.reshape(15, 4))


# ============================================================================ InferType
def _types():
    any_ = relay.Any()
    x34 = relay.var("x", shape=(3, 4))
    return [
        (relay.einsum([relay.var("a", shape=(2, 3)), relay.var("b", shape=(3, 5))], "ij,jk"),
         relay.TensorType((2, 5), "float32")),
        (relay.einsum([relay.var("a", shape=(2, 1, 3, 4)), relay.var("b", shape=(5, 4, 2))],
                      "...ij,...jk->...ik"), relay.TensorType((2, 5, 3, 2), "float32")),
        (relay.nn.mirror_pad(x34, ((1, 2), (0, 3))), relay.TensorType((6, 7), "float32")),
        (relay.searchsorted(relay.var("s", shape=(5,)), relay.var("v", shape=(2, 3)),
                            dtype="int64"), relay.TensorType((2, 3), "int64")),
        (relay.argwhere(relay.var("c", shape=(2, 3, 4), dtype="bool")),
         relay.TensorType((any_, 3), "int32")),
        (relay.nn.dilate(x34, (2, 3)), relay.TensorType((5, 10), "float32")),
        (relay.nn.dilate(relay.var("y", relay.TensorType((any_, 4))), (2, 3)),
         relay.TensorType((any_, 10), "float32")),
        (relay.invert_permutation(relay.var("p", shape=(5,), dtype="int64")),
         relay.TensorType((5,), "int64")),
        (relay.matrix_set_diag(x34, relay.var("d", shape=(2, 3)), k=(0, 1)),
         relay.TensorType((3, 4), "float32")),
        (relay.reverse_reshape(relay.var("r", shape=(10, 5, 4)), (-1, 0)),
         relay.TensorType((50, 4), "float32")),
    ]


@pytest.mark.parametrize("index", [
    pytest.param(i, marks=pytest.mark.xfail(reason="argwhere's count is a fresh dim of the "
                                            "converter; relay/symbolic.py's DimMap prints it "
                                            "by name, not as `?` (outside this change)"))
    if i == 4 else i for i in range(10)])
def test_infer_type_gives_v019s_type(index):
    expr, want = _types()[index]
    got = run_infer_type(expr).checked_type
    assert got == want, (str(got), str(want))
