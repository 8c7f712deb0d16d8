"""Creation ops: zeros/ones(_like), full, arange (constant operands, also through a cast)."""
from __future__ import annotations

import numpy as np
import pytest

from .helpers import check, rand, relay_fn


def test_like_ops_and_full():
    x = rand(2, 3)
    text = relay_fn("%x: Tensor[(2, 3), float32]",
                    "%0 = zeros_like(%x);\n  %1 = ones_like(%x);\n"
                    '  %2 = full(1.5f, shape=[2, 3], dtype="float32");\n'
                    '  %3 = zeros(shape=[2, 3], dtype="float32");\n  (%0, %1, %2, %3)')
    check(text, [x], [np.zeros_like(x), np.ones_like(x), np.full((2, 3), 1.5, "float32"),
                      np.zeros((2, 3), "float32")])


def test_arange_with_constant_and_cast_operands():
    text = relay_fn("%x: Tensor[(5), int64]",
                    '%0 = cast(5, dtype="int64");\n'
                    '  %1 = arange(0i64, %0, 1i64, dtype="int64");\n  add(%1, %x)')
    x = np.arange(5, dtype="int64")
    check(text, [x], np.arange(5) + x)
    text = relay_fn("%x: Tensor[(4), float32]",
                    '%0 = arange(1f, 3f, 0.5f, dtype="float32");\n  add(%0, %x)')
    check(text, [np.zeros(4, "float32")], np.arange(1, 3, 0.5, dtype="float32"))


def test_dyn_zeros_ones_full_take_their_shape_when_the_model_runs():
    # relay.zeros(s) with a shape tensor `s` is dyn.zeros (Relay's builder, and ours)
    import bmlib_relax
    from bmlib_relax import RunCheckError, relay

    s = relay.var("s", shape=(3,), dtype="int32")
    x = relay.var("x", shape=(relay.Any(), 4), dtype="float32")
    out = relay.Tuple([relay.zeros(s, "float32"), relay.ones(s, "int32"),
                       relay.full(relay.const(2.5), s, "float32"),
                       relay.ndarray_size(x, dtype="int64")])
    model = bmlib_relax.compile(relay.IRModule.from_expr(relay.Function([s, x], out)))
    zeros, ones, full, size = model(np.array([2, 3, 1], "int32"), np.ones((5, 4), "float32"))
    np.testing.assert_array_equal(zeros, np.zeros((2, 3, 1), "float32"))
    np.testing.assert_array_equal(ones, np.ones((2, 3, 1), "int32"))
    np.testing.assert_array_equal(full, np.full((2, 3, 1), 2.5, "float32"))
    assert size.dtype == np.int64 and int(size) == 20
    with pytest.raises(RunCheckError, match=r"dyn.zeros: dim 1 of the shape is -3"):
        model(np.array([2, -3, 1], "int32"), np.ones((5, 4), "float32"))


@pytest.mark.parametrize("shape", [[(1 << 62) + 1, 4], [1 << 40, 1 << 40], [1 << 31, 1 << 31]])
def test_a_run_time_shape_whose_size_would_wrap_is_refused(shape):
    """TVM counts a tensor's bytes in int64: 2**62 + 1 rows of 4 float32 are 16 bytes
    after the wrap, and the op then wrote past them (a corrupted heap, the process
    killed); 2**80 elements wrapped to none and returned a tensor no one can read."""
    import bmlib_relax
    from bmlib_relax import RunCheckError, relay

    s = relay.var("s", shape=(2,), dtype="int64")
    model = bmlib_relax.compile(relay.IRModule.from_expr(relay.Function(
        [s], relay.sum(relay.zeros(s, "float32"), axis=[1]))))
    with pytest.raises(RunCheckError, match=r"dyn.zeros: the shape describes \d+ or more "
                                            r"float32 elements: TVM's int64 size arithmetic"):
        model(np.array(shape, "int64"))
    np.testing.assert_array_equal(model(np.array([3, 2], "int64")), np.zeros(3, "float32"))


@pytest.mark.parametrize("operands, message", [
    ("3f, 3f, 1f", r"arange\(3.0, 3.0, 1.0\) has no elements"),
    ("5f, 3f, 1f", r"arange\(5.0, 3.0, 1.0\) has no elements"),
    ("0f, 3f, 0f", "arange step is 0"),
])
def test_a_constant_arange_without_elements_is_refused_as_v019_did(operands, message):
    """v0.19's ArangeRel: ``ceil((stop - start) / step)`` must be more than 0."""
    import bmlib_relax

    with pytest.raises(bmlib_relax.ConversionError, match=message):
        bmlib_relax.compile(relay_fn("", f'arange({operands}, dtype="float32")'))
    check(relay_fn("", 'arange(5f, 3f, -1f, dtype="float32")'), [], np.array([5, 4], "float32"))
