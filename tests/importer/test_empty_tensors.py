"""Tensors with a dim of 0: an op whose result has no elements computes nothing (TVM's
lowering failed on several: split, cumsum, upsampling, a transpose), and an op whose
result has elements but would read them from an empty axis is refused, naming it (TVM
read outside the tensor: a take, a resize, a global maximum returned garbage)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError
from conftest import offloaded_partitions

from .helpers import import_text, relay_fn


@pytest.mark.parametrize("data, body, shape", [
    ("Tensor[(2, 0), float32]", "split(%x, indices_or_sections=2, axis=1).1", (2, 0)),
    ("Tensor[(2, 0), float32]", "cumsum(%x, axis=1)", (2, 0)),
    ("Tensor[(2, 0), float32]", "transpose(%x)", (0, 2)),
    ("Tensor[(1, 2, 0, 4), float32]", "nn.upsampling(%x, scale_h=2f, scale_w=2f)", (1, 2, 0, 8)),
    ("Tensor[(2, 4, 0), float32]", "nn.layer_norm(%x, ones(shape=[0], dtype=\"float32\"), "
                                   "zeros(shape=[0], dtype=\"float32\"))", (2, 4, 0)),
    ("Tensor[(0, 3, 4, 4), float32]", "nn.conv2d(%x, ones(shape=[3, 1, 3, 3], dtype=\"float32\"),"
                                      " groups=3, channels=3, kernel_size=[3, 3], padding=[1, 1])",
     (0, 3, 4, 4)),
])
def test_a_result_without_elements_is_built_and_runs(data, body, shape):
    text = relay_fn(f"%x: {data}, %r: Tensor[(3), float32]", f"({body}, nn.relu(%r))")
    assert "R.zeros" in import_text(text).script()
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)  # the relu
    x = np.ones(tuple(int(d) for d in data[data.index("(") + 1:data.index(")")].split(",")),
                "float32")
    empty, relu = model(x, np.array([-1, 0, 2], "float32"))
    assert empty.shape == shape and empty.dtype == np.float32
    np.testing.assert_array_equal(relu, [0, 0, 2])


@pytest.mark.parametrize("data, body, message", [
    ("Tensor[(2, 0), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"), axis=1)",
     "takes along axis 1"),
    ("Tensor[(2, 0), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"), axis=1, mode=\"wrap\")",
     "takes along axis 1"),
    ("Tensor[(0, 2), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"))", "takes along axis 0"),
    ("Tensor[(1, 2, 0, 4), float32]", "image.resize2d(%x, size=[4, 4])", "resizes along axis 2"),
    ("Tensor[(2, 3, 0, 0), float32]", "nn.global_max_pool2d(%x)",
     "takes the maximum along axis 2"),
    ("Tensor[(2, 0), float32]", "nn.pad(%x, 0f, pad_width=[[0, 0], [1, 1]], pad_mode=\"edge\")",
     "a pad_mode=edge pad along axis 1"),
    ("Tensor[(2, 0), float32]", "gather(%x, ones(shape=[2, 3], dtype=\"int32\"), axis=1)",
     "gathers along axis 1"),
    ("Tensor[(0, 3), float32]", "gather_nd(%x, ones(shape=[1, 2], dtype=\"int32\"))",
     "gathers along axis 0"),
    ("Tensor[(0, 3), float32]", "adv_index((%x, ones(shape=[2], dtype=\"int32\")))",
     "indexes along axis 0"),
])
def test_reading_elements_from_an_empty_axis_is_named(data, body, message):
    with pytest.raises(ConversionError, match=message + r" of extent 0 .*no element to read") \
            as info:
        import_text(relay_fn(f"%x: {data}", body))
    assert info.value.location.startswith("snippet.relay:3:")


@pytest.mark.parametrize("updates, body", [
    ("Tensor[(2, 0), float32]",
     "scatter_elements(%x, zeros(shape=[2, 0], dtype=\"int32\"), %u, axis=1)"),
    ("Tensor[(0), float32]", "scatter_nd(%x, zeros(shape=[2, 0], dtype=\"int32\"), %u)"),
])
def test_a_scatter_of_no_update_is_its_data(updates, body):
    # TVM's lowering of both scatters divided by the empty extent ("Divide by zero")
    text = relay_fn(f"%x: Tensor[(2, 3), float32], %u: {updates}", body)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    shape = (2, 0) if "(2, 0)" in updates else (0,)
    np.testing.assert_array_equal(bmlib_relax.compile(text)(x, np.ones(shape, "float32")), x)


def test_an_empty_take_from_an_empty_axis_and_a_constant_pad_of_one_run():
    text = relay_fn("%x: Tensor[(2, 0), float32]",
                    "(take(%x, zeros(shape=[0], dtype=\"int32\"), axis=1), "
                    "nn.pad(%x, 5f, pad_width=[[0, 0], [1, 1]]))")
    taken, padded = bmlib_relax.compile(text)(np.ones((2, 0), "float32"))
    assert taken.shape == (2, 0)
    np.testing.assert_array_equal(padded, np.full((2, 2), 5, "float32"))


@pytest.mark.parametrize("params, body, shapes, message", [
    ("%x: Tensor[(?, 8), float32]", "min(%x, axis=[0])", [(None, 8)],
     r"min: reduces over axis 0, which has 0 entries in this run"),
    ("%x: Tensor[(4, ?), float32]", "max(%x, axis=[1])", [(4, None)],
     r"max: reduces over axis 1, which has 0 entries"),
    ("%x: Tensor[(2, 3, ?, 4), float32]", "nn.global_avg_pool2d(%x)", [(2, 3, None, 4)],
     r"reduces over axis 2, which has 0 entries"),
    ("%x: Tensor[(2, 3, ?, 4), float32]", "nn.global_max_pool2d(%x)", [(2, 3, None, 4)],
     r"takes the maximum along axis 2, which has 0 entries"),
    ("%x: Tensor[(2, ?), float32]", "take(%x, ones(shape=[3], dtype=\"int32\"), axis=1)",
     [(2, None)], r"takes along axis 1, which has 0 entries"),
])
def test_an_axis_empty_only_at_run_time_is_refused_in_that_run(params, body, shapes, message):
    # TVM's reduction loops initialise inside the reduced loop: over a run-time-empty
    # axis the result was the last run's (the output buffer's old contents)
    from bmlib_relax.errors import RunCheckError

    model = bmlib_relax.compile(relay_fn(params + ", %r: Tensor[(3), float32]",
                                         f"({body}, nn.relu(%r))"))
    assert offloaded_partitions(model.relax_module)

    def inputs(n):
        rng = np.random.default_rng(n)
        return [rng.random([n if d is None else d for d in s]).astype("float32")
                for s in shapes] + [np.array([-1, 0, 2], "float32")]

    first, relu = model(*inputs(5))
    np.testing.assert_array_equal(relu, [0, 0, 2])
    with pytest.raises(RunCheckError, match=message) as info:
        model(*inputs(0))
    assert "<string>:3:4: " in str(info.value)  # the op's place
    again, _ = model(*inputs(5))
    np.testing.assert_array_equal(again, first)


def test_run_checks_and_merged_partitions():
    # TVM's MergeCompositeFunctions has no rule for a run check's format string ("Do not
    # have a default for ir.StringImm"): such a function is partitioned unmerged
    from bmlib_relax.errors import RunCheckError

    text = relay_fn("%x: Tensor[(?, 8), float32], %y: Tensor[(?, 8), float32]",
                    "%0 = nn.relu(add(%x, %y));\n  (max(%0, axis=[0]), nn.softmax(%0))")
    model = bmlib_relax.compile(text, merge=True)
    assert offloaded_partitions(model.relax_module)
    x = np.random.default_rng(0).random((5, 8)).astype("float32")
    total, soft = model(x, x)
    np.testing.assert_allclose(total, (2 * x).max(axis=0), rtol=1e-5)
    with pytest.raises(RunCheckError, match="max: reduces over axis 0, which has 0 entries"):
        model(np.zeros((0, 8), "float32"), np.zeros((0, 8), "float32"))


@pytest.mark.parametrize("body, identity", [
    ("sum(%x, axis=[0])", 0.0), ("prod(%x, axis=[0])", 1.0), ("mean(%x, axis=[0])", np.nan),
    ("sum(%x, axis=[0], keepdims=True)", 0.0)])
def test_sum_prod_mean_over_an_axis_empty_at_run_time_are_computed(body, identity):
    """A sum or product over an axis that is empty in a run is its identity, a mean the
    identity over a count of 0 (NaN), as in Relay and numpy: both builds initialise a
    reduction over a run-time extent before its loop (the buffer's old contents before,
    so these were refused with a RunCheckError)."""
    import tvm
    from tvm import relax

    from bmlib_relax.compiler import compile_plain
    from bmlib_relax.relay import parse

    text = relay_fn("%x: Tensor[(?, 8), float32]", f"multiply({body}, 2f)")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)
    plain = relax.VirtualMachine(compile_plain(bmlib_relax.import_relay(parse(text), {})),
                                 tvm.cpu())
    full = np.random.default_rng(1).random((5, 8)).astype("float32") + 0.5
    empty = np.zeros((0, 8), "float32")
    for run in (lambda a: np.asarray(model(a)),
                lambda a: plain["main"](tvm.runtime.tensor(a)).numpy()):
        assert np.all(run(full) > 0)  # the buffers hold a run's values first
        got = run(empty)
        assert got.shape[-1] == 8
        np.testing.assert_array_equal(got, np.full(got.shape, 2 * identity, "float32"))


@pytest.mark.parametrize("op, want", [("any", False), ("all", True)])
def test_any_all_over_an_axis_empty_at_run_time(op, want):
    """any() of nothing is False, all() of nothing True (Relay's, numpy's); the integer
    max/min they are imported as starts from -128 / 127, which a cast to bool made True
    for both."""
    text = relay_fn("%x: Tensor[(?, 8), float32], %r: Tensor[(3), float32]",
                    f"({op}(greater(%x, 0.5f), axis=[0]), nn.relu(%r))")
    model = bmlib_relax.compile(text)
    assert offloaded_partitions(model.relax_module)  # the relu
    r = np.array([-1, 0, 2], "float32")
    x = np.full((5, 8), 0.75 if op == "any" else 0.25, "float32")
    first, _ = model(x, r)
    np.testing.assert_array_equal(first, np.full(8, op == "any"))  # the opposite of want
    got, _ = model(np.zeros((0, 8), "float32"), r)
    np.testing.assert_array_equal(got, np.full(8, want))
    np.testing.assert_array_equal(model(x[:, :], r)[0], first)


@pytest.mark.parametrize("body", [
    "nn.relu(add(nn.conv2d(%x, ones(shape=[4, 3, 5, 5], dtype=\"float32\"), kernel_size=[5, 5]), "
    "1f))",
    "nn.max_pool2d(%x, pool_size=[5, 5])",
])
def test_a_window_larger_than_a_run_time_input_is_a_run_check_error(body):
    """TVM computes the result shape from this run's dims: (3 - 5) + 1 = -1.  numpy then
    said "negative dimensions are not allowed" and named nothing."""
    from bmlib_relax import RunCheckError

    model = bmlib_relax.compile(relay_fn("%x: Tensor[(1, 3, ?, ?), float32]", body))
    assert model(np.ones((1, 3, 6, 6), "float32")).shape[2:] == (2, 2)
    with pytest.raises(RunCheckError, match=r"(conv2d|max_pool2d): its output has -1 entries "
                                            "on axis 2 in this run"):
        model(np.ones((1, 3, 3, 3), "float32"))


def test_a_returned_tensor_with_a_negative_dim_is_a_run_check_error():
    """The runtime's last line of defence, for an op no compiled-in check covers."""
    from bmlib_relax import RunCheckError
    from bmlib_relax.runtime import to_numpy

    class Negative:
        shape = (1, 4, -1, -1)

        def numpy(self):
            raise AssertionError("not reached")

    with pytest.raises(RunCheckError, match=r"a result of shape \(1, 4, -1, -1\): an op's "
                                            "output size is negative"):
        to_numpy((Negative(),))


def test_a_window_larger_than_the_input_is_caught_before_later_ops_hide_it():
    """A 5x5 max pool of a 3x3 image: TVM computed -1 output rows, every later op looped
    over nothing, and a sum after it returned zeros -- a plausible result."""
    from bmlib_relax import RunCheckError

    model = bmlib_relax.compile(relay_fn(
        "%x: Tensor[(1, 3, ?, ?), float32]",
        "%0 = nn.max_pool2d(%x, pool_size=[5, 5]);\n  sum(transpose(%0, axes=[0, 2, 3, 1]), "
        "axis=[1, 2])"))
    np.testing.assert_array_equal(model(np.ones((1, 3, 6, 6), "float32")), [[4, 4, 4]])
    with pytest.raises(RunCheckError, match=r"nn.max_pool2d: its output has -1 entries on "
                                            "axis 2 in this run: the window is larger"):
        model(np.ones((1, 3, 3, 3), "float32"))


@pytest.mark.parametrize("pad, bound", [
    ('nn.pad(%x, 0f, pad_width=[[-3, -2], [0, 0]], pad_mode="edge")', None),
    ('nn.pad(%x, 1f, pad_width=[[-3, -2], [0, 0]])', None),
    ('dyn.nn.pad(%x, %w, 0f)', np.array([[-3, -2], [0, 0]], "int64")),
])
def test_negative_pad_widths_that_cut_more_than_a_run_time_axis_are_a_run_check(pad, bound):
    """Widths [-3, -2] on a ``?`` axis of 4 rows: -1 rows.  TVM allocated the negative
    size (``std::bad_alloc``, reported as running out of 23.5 GiB); of 0 rows, a
    RunCheckError that named no op."""
    from bmlib_relax import RunCheckError

    params = "%x: Tensor[(?, 3), float32]" + (", %w: Tensor[(2, 2), int64]" if bound is not None
                                             else "")
    model = bmlib_relax.compile(relay_fn(params, f"({pad}, nn.relu(%x))"),
                                {} if bound is None else {"w": bound})
    assert offloaded_partitions(model.relax_module)  # the relu
    x = np.arange(18, dtype="float32").reshape(6, 3)
    padded, relu = model(x)
    np.testing.assert_array_equal(padded, x[3:4])
    np.testing.assert_array_equal(relu, x)
    op = pad.split("(", 1)[0]
    for rows in (4, 0):
        with pytest.raises(RunCheckError, match=rf"{op}: its output has {rows - 5} entries on "
                                                r"axis 0 in this run: its negative pad widths"):
            model(np.ones((rows, 3), "float32"))
