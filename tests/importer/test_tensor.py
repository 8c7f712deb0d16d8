"""Shape/data-movement converters against numpy: Relay's special values and modes."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError
from bmlib_relax.relay import parse

from .helpers import check, import_text, ops_in, rand, relay_fn, run_relay


def _t(shape, dtype="float32"):
    return f"Tensor[({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), {dtype}]"


@pytest.mark.parametrize("newshape,expected", [
    ("[0, -1]", (2, 12)),
    ("[-1, 4]", (6, 4)),
    ("[0, 0, -2]", (2, 3, 4)),
    ("[-2]", (2, 3, 4)),
    ("[-3, 4]", (6, 4)),
    ("[0, -3]", (2, 12)),
    ("[-4, 1, 2, -2]", (1, 2, 3, 4)),
    ("[-4, -1, 2, 3, 4]", (1, 2, 3, 4)),
    ("[2, -4, 3, -1, 4]", (2, 3, 1, 4)),
    ("[24]", (24,)),
])
def test_reshape_special_values(newshape, expected):
    x = rand(2, 3, 4)
    text = relay_fn(f"%x: {_t(x.shape)}", f"reshape(%x, newshape={newshape})")
    check(text, [x], x.reshape(expected))


@pytest.mark.parametrize("shape, newshape, expected", [
    ((0, 3), "[0, 3]", (0, 3)), ((2, 0, 3), "[2, 0]", (2, 0)), ((0, 3), "[3, 0]", (3, 0)),
    ((2, 3), "[3, 2]", (3, 2))])
def test_reshape_allowzero_keeps_a_literal_zero_dim(shape, newshape, expected):
    """v0.19's InferNewShape with allowzero (ONNX's Reshape): a 0 is a dim of 0, not a
    copy of the input's dim (``(0, 3)`` to ``[3, 0]`` is ``(3, 0)``; it was refused)."""
    x = np.zeros(shape, "float32")
    text = relay_fn(f"%x: Tensor[{shape}, float32]",
                    f"reshape(%x, newshape={newshape}, allowzero=1)")
    check(text, [x], np.zeros(expected, "float32"))


@pytest.mark.parametrize("shape, newshape, message", [
    ((2, 3), "[0, 3]", r"has no elements, the input \(2, 3\) has 6"),
    ((0, 3), "[0, -1]", r"-1 cannot be inferred beside a dim of 0")])
def test_reshape_allowzero_of_a_non_empty_input_is_refused(shape, newshape, message):
    text = relay_fn(f"%x: Tensor[{shape}, float32]",
                    f"reshape(%x, newshape={newshape}, allowzero=1)")
    with pytest.raises(ConversionError, match=message):
        import_text(text)


def test_reshape_with_two_inferred_dims_is_named():
    # v0.19's InferNewShape: ICHECK "One and only one dim can be inferred" (TVM's own
    # "dim_to_infer == -1 (0 vs. -1)" before)
    text = relay_fn("%x: Tensor[(2, 3), float32]", "reshape(%x, newshape=[-1, -1])")
    with pytest.raises(ConversionError, match=r"reshape: newshape=\(-1, -1\): only one dim"):
        import_text(text)


def test_reshape_dynamic_dim_stays_symbolic():
    text = relay_fn("%x: Tensor[(?, 3, 4), float32]", "reshape(%x, newshape=[0, -1])")
    mod = import_text(text)
    assert "R.Tensor((d0, 12)" in mod["main"].script()
    x = rand(5, 3, 4)
    check(text, [x], x.reshape(5, 12))


def test_batch_flatten_form():
    x = rand(2, 3, 4, 5)
    text = relay_fn(f"%x: {_t(x.shape)}", "nn.batch_flatten(%x)")
    check(text, [x], x.reshape(2, 60))
    assert "R.reshape(x, R.shape([2, 60]))" in import_text(text)["main"].script()


@pytest.mark.parametrize("attrs,perm", [("axes=[0, 2, 3, 1]", (0, 2, 3, 1)), ("", None),
                                        ("axes=[-1, 0, 1, 2]", (3, 0, 1, 2))])
def test_transpose(attrs, perm):
    x = rand(1, 2, 3, 4)
    body = f"transpose(%x, {attrs})" if attrs else "transpose(%x)"
    text = relay_fn(f"%x: {_t(x.shape)}", body)
    check(text, [x], np.transpose(x, perm))
    assert ops_in(import_text(text)) == ["relax.permute_dims"]


@pytest.mark.parametrize("body,ref", [
    ("squeeze(%x)", lambda x: x.reshape(3, 4)),
    ("squeeze(%x, axis=[2])", lambda x: x.reshape(1, 3, 4)),
    ("squeeze(%x, axis=[0, -2])", lambda x: x.reshape(3, 4)),
    ("expand_dims(%x, axis=1, num_newaxis=2)", lambda x: x.reshape(1, 1, 1, 3, 1, 4)),
    ("expand_dims(%x, axis=-1)", lambda x: x.reshape(1, 3, 1, 4, 1)),
    ("expand_dims(%x, axis=0, num_newaxis=0)", lambda x: x),
])
def test_squeeze_expand_dims(body, ref):
    x = rand(1, 3, 1, 4)
    check(relay_fn(f"%x: {_t(x.shape)}", body), [x], ref(x))


@pytest.mark.parametrize("attrs,ref", [
    ("indices_or_sections=3, axis=1", lambda x: np.split(x, 3, axis=1)),
    ("indices_or_sections=[1, 4], axis=1", lambda x: np.split(x, [1, 4], axis=1)),
    ("indices_or_sections=[2], axis=-1", lambda x: np.split(x, [2], axis=-1)),
    ("indices_or_sections=2", lambda x: np.split(x, 2, axis=0)),
    ("indices_or_sections=1", lambda x: [x]),
])
def test_split_returns_a_tuple(attrs, ref):
    x = rand(2, 6, 4)
    parts = ref(x)
    fields = ", ".join(f"%0.{i}" for i in range(len(parts)))
    text = relay_fn(f"%x: {_t(x.shape)}", f"%0 = split(%x, {attrs});\n  ({fields},)")
    check(text, [x], parts)


def test_split_with_unresolved_metadata_value_names_it():
    text = relay_fn("%x: Tensor[(2, 6), float32]",
                    "%0 = split(%x, indices_or_sections=meta[runtime.BoxInt][0], axis=1);\n  %0.0")
    with pytest.raises(ConversionError, match=r"split: indices_or_sections=meta\[runtime.BoxInt\]"
                                              r"\[0\] has no value"):
        import_text(text)


@pytest.mark.parametrize("sections, message", [
    ("4", r"indices_or_sections=4 must divide the axis' extent 6"),
    ("1048576", r"indices_or_sections=1048576 must divide"),  # took minutes: a part each
    ("0", r"indices_or_sections=0 must be at least 1"),
    ("[4, 1]", r"indices_or_sections \[4, 1\] must be a sorted ascending list"),
    ("[2, 6]", r"split indices \[2, 6\] must lie inside the axis' extent 6"),
    ("[0, 3]", r"indices_or_sections \[0, 3\] must be a sorted ascending list of positive"),
])
def test_split_sections_are_checked_as_relay_did(sections, message):
    # Relay's SplitRel; Relax would split unevenly or make empty parts
    text = relay_fn("%x: Tensor[(2, 6), float32]",
                    f"%0 = split(%x, indices_or_sections={sections}, axis=1);\n  %0.0")
    with pytest.raises(ConversionError, match="split: " + message):
        import_text(text)


@pytest.mark.parametrize("attrs,ref", [
    ("begin=[0, 1], end=[2, 5], strides=[1, 2]", lambda x: x[0:2, 1:5:2]),
    ("begin=[3, 5], end=[0, 0], strides=[-1, -2]", lambda x: x[3:0:-1, 5:0:-2]),
    ("begin=[-1], end=[-5], strides=[-1]", lambda x: x[-1:-5:-1]),
    ("begin=[-1, -1], end=[-2147483648, -9223372036854775808], strides=[-1, -1]",
     lambda x: x[::-1, ::-1]),
    ("begin=[1], end=[100]", lambda x: x[1:100]),
    ("begin=[0, 1], end=[2]", lambda x: x[0:2, 1:]),
    ("begin=[2], end=[4], strides=[1], axes=[1]", lambda x: x[:, 2:4]),
    ('begin=[1, 0], end=[-1, -1], axes=[1, 0], slice_mode="size"', lambda x: x[:, 1:]),
    ("begin=[1, 2], end=[2, -1], slice_mode=\"size\"", lambda x: x[1:3, 2:]),
    ("begin=[0, 1], end=[-1, 3], strides=[5, 5], slice_mode=\"size\"", lambda x: x[0:, 1:4]),
])
def test_strided_slice(attrs, ref):
    x = rand(4, 6)
    check(relay_fn(f"%x: {_t(x.shape)}", f"strided_slice(%x, {attrs})"), [x], ref(x))


@pytest.mark.parametrize("attrs, message", [
    ("begin=[3], end=[0]", r"begin 3 and end 0 run against stride 1 on axis 0 \(extent 4\)"),
    ("begin=[0, 1], end=[4, 5], strides=[1, -1]", r"begin 1 and end 5 run against stride -1 "
                                                  r"on axis 1"),
    ("begin=[-1], end=[-3]", r"begin -1 and end -3 run against stride 1"),
    ("begin=[0], end=[4], strides=[0]", r"strides\[0\] is 0"),
])
def test_strided_slice_against_its_stride_is_named_at_import(attrs, message):
    # TVM's strided_slice shape refused such a range when Relay built the model
    # ("Input [Begin=3, End=0] is invalid"); bmlib stopped at codegen with it
    with pytest.raises(ConversionError, match="strided_slice: " + message):
        import_text(relay_fn("%x: Tensor[(4, 6), float32]", f"strided_slice(%x, {attrs})"))


def test_strided_slice_whose_bounds_meet_is_an_empty_axis():
    x = rand(4, 6)
    for attrs, ref in (("begin=[3], end=[3]", x[3:3]), ("begin=[10], end=[20]", x[10:20]),
                       ("begin=[0, 5], end=[4, -100], strides=[1, -2]", x[0:4, 5:-100:-2])):
        check(relay_fn("%x: Tensor[(4, 6), float32]", f"strided_slice(%x, {attrs})"), [x], ref)


@pytest.mark.parametrize("attrs,ref,rows_empty", [
    # Which bound comes first depends on the run-time length d: empty from d = 9 and 10
    # (x[6:5], x[4:5:-1]); at d = 9 x[4:4:-1] is empty too, but its bounds meet.
    ("begin=[-3], end=[5], strides=[1]", lambda x: x[-3:5], 9),
    ("begin=[4], end=[-5], strides=[-1]", lambda x: x[4:-5:-1], 10),
])
def test_strided_slice_it_cannot_size_ahead_is_checked_when_the_model_runs(
        attrs, ref, rows_empty):
    text = relay_fn("%x: Tensor[(?, 6), float32]",
                    f"strided_slice(%x, {attrs}, axes=[0])")
    model = bmlib_relax.compile(parse(text, "slices.relay"))
    for rows in (1, 4, 7, rows_empty - 1):
        x = rand(rows, 6)
        np.testing.assert_array_equal(model(x), ref(x))
    with pytest.raises(RunCheckError, match=r"^slices.relay:3:3: strided_slice: .* on axis 0 "
                                            rf"selects nothing from its {rows_empty} entries"
                                            r".*fixed size"):
        model(rand(rows_empty, 6))


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_strided_slice_of_a_symbolic_axis_empty_at_run_time(rows):
    # x[1:-1] and x[-1:1:-1] are empty for one or two rows: TVM alone sizes them
    # negative there (std::bad_alloc); the imported program gives 0 rows, as Relay did.
    x = rand(rows, 3)
    text = relay_fn("%x: Tensor[(?, 3), float32]",
                    "%0 = strided_slice(%x, begin=[1], end=[-1], strides=[1], axes=[0]);\n"
                    "  %1 = strided_slice(%x, begin=[-1], end=[1], strides=[-1], axes=[0]);\n"
                    "  (%0, %1)")
    check(text, [x], [x[1:-1], x[-1:1:-1]])


def test_strided_slice_of_a_symbolic_axis_to_its_end_needs_no_fixed_size():
    x = rand(5, 6)
    text = relay_fn("%x: Tensor[(?, 6), float32]",
                    "strided_slice(%x, begin=[-3, 4], end=[9223372036854775807, 0], "
                    "strides=[1, -1])")
    check(text, [x], x[-3:, 4:0:-1])


@pytest.mark.parametrize("attrs,ref", [
    ("axis=0", lambda x, i: np.take(x, np.clip(i, 0, 3), axis=0)),
    ("axis=1", lambda x, i: np.take(x, np.clip(i, 0, 4), axis=1)),
    ("", lambda x, i: np.take(x.reshape(-1), np.clip(i, 0, 19))),
    ('axis=1, mode="wrap"', lambda x, i: np.take(x, i, axis=1, mode="wrap")),
])
def test_take(attrs, ref):
    x = rand(4, 5)
    idx = np.array([[0, 3], [7, -1]], "int32")  # out of range: Relay clips by default
    body = f"take(%x, %i, {attrs})" if attrs else "take(%x, %i)"
    text = relay_fn(f"%x: {_t(x.shape)}, %i: Tensor[(2, 2), int32]", body)
    check(text, [x, idx], ref(x, idx))


@pytest.mark.parametrize("op,axis", [("concatenate", 0), ("concatenate", -1), ("stack", 0),
                                     ("stack", 2), ("stack", -1)])
def test_concatenate_stack(op, axis):
    a, b = rand(2, 3), rand(2, 3, seed=1)
    text = relay_fn("%a: Tensor[(2, 3), float32], %b: Tensor[(2, 3), float32]",
                    f"%0 = (%a, %b);\n  {op}(%0, axis={axis})")
    ref = np.concatenate([a, b], axis) if op == "concatenate" else np.stack([a, b], axis)
    check(text, [a, b], ref)
    if op == "concatenate":
        assert ops_in(import_text(text)) == ["relax.concat"]


@pytest.mark.parametrize("body,ref", [
    ("tile(%x, reps=[2, 1, 3])", lambda x: np.tile(x, (2, 1, 3))),
    ("repeat(%x, repeats=2, axis=1)", lambda x: np.repeat(x, 2, axis=1)),
    ("reverse(%x, axis=0)", lambda x: x[::-1]),
    ("broadcast_to(%x, shape=[4, 2, 3])", lambda x: np.broadcast_to(x, (4, 2, 3))),
])
def test_tile_repeat_broadcast(body, ref):
    x = rand(2, 3)
    check(relay_fn("%x: Tensor[(2, 3), float32]", body), [x], ref(x))


def test_broadcast_to_like_and_collapse_sum_like():
    x, y = rand(1, 3), rand(4, 3, seed=1)
    text = relay_fn("%x: Tensor[(1, 3), float32], %y: Tensor[(4, 3), float32]",
                    "%0 = broadcast_to_like(%x, %y);\n  %1 = add(%0, %y);\n"
                    "  collapse_sum_like(%1, %x)")
    check(text, [x, y], (np.broadcast_to(x, (4, 3)) + y).sum(0, keepdims=True))


@pytest.mark.parametrize("widths,value,mode", [
    (((0, 0), (1, 2), (2, 0)), 0.0, "constant"),
    (((1, 1), (0, 0), (1, 1)), 1.5, "constant"),
    (((0, 0), (1, 2), (2, 1)), 0.0, "edge"),
    (((0, 0), (1, 1), (2, 2)), 0.0, "reflect"),
])
def test_pad(widths, value, mode):
    x = rand(1, 3, 4)
    pad_width = "[" + ", ".join(f"[{a}, {b}]" for a, b in widths) + "]"
    text = relay_fn(f"%x: {_t(x.shape)}",
                    f'nn.pad(%x, {value}f, pad_width={pad_width}, pad_mode="{mode}")')
    kwargs = {"constant_values": value} if mode == "constant" else {}
    check(text, [x], np.pad(x, widths, mode=mode, **kwargs))


def test_scatter_nd_relay_index_layout():
    data = np.zeros((3, 4), "float32")
    idx = np.array([[0, 2], [1, 3]], "int64")      # (M=2 index dims, 2 updates): (0,1), (2,3)
    upd = np.array([5.0, 7.0], "float32")
    text = relay_fn("%d: Tensor[(3, 4), float32], %i: Tensor[(2, 2), int64], "
                    "%u: Tensor[(2), float32]", 'scatter_nd(%d, %i, %u, mode="update")')
    ref = data.copy()
    ref[0, 1], ref[2, 3] = 5.0, 7.0
    check(text, [data, idx, upd], ref)


def test_annotations_and_copy_are_dropped():
    x = rand(2, 2)
    text = relay_fn("%x: Tensor[(2, 2), float32]",
                    "%0 = on_device(%x, virtual_device=meta[VirtualDevice][0]);\n"
                    "  %1 = copy(%0);\n  %2 = device_copy(%1);\n  add(%2, 1f)")
    check(text, [x], x + 1)
    assert ops_in(import_text(text)) == ["relax.add"]


def test_dyn_reshape_reads_its_shape_when_the_model_runs():
    # relay.reshape(x, s) with a shape tensor is dyn.reshape: 0 copies, one -1 infers
    from bmlib_relax import relay

    x = relay.var("x", shape=(relay.Any(), 6), dtype="float32")
    s = relay.var("s", shape=(3,), dtype="int64")
    model = bmlib_relax.compile(relay.IRModule.from_expr(
        relay.Function([x, s], relay.reshape(x, s))))
    data = rand(4, 6)
    for shape, want in (([2, 3, 4], (2, 3, 4)), ([0, -1, 2], (4, 3, 2)),
                        ([-1, 2, 1], (12, 2, 1))):
        np.testing.assert_array_equal(model(data, np.array(shape, "int64")),
                                      data.reshape(want))
    with pytest.raises(RunCheckError, match=r"dyn.reshape: the new shape does not hold"):
        model(data, np.array([5, 5, 1], "int64"))
    with pytest.raises(RunCheckError, match=r"dyn.reshape: the new shape may hold"):
        model(data, np.array([-1, -1, 2], "int64"))
    # 24 elements modulo 2**64 (the int64 count wraps): a view past the data, refused
    with pytest.raises(RunCheckError, match=r"dyn.reshape: the shape describes \d+ or more"):
        model(data, np.array([(1 << 61) + 3, 8, 1], "int64"))


@pytest.mark.parametrize("mode, want", [("edge", [[0, 0, 1, 2, 3, 3]]),
                                        ("reflect", [[1, 0, 1, 2, 3, 2]])])
def test_edge_and_reflect_pads_ignore_a_run_time_pad_value(mode, want):
    # v0.19's topi pad reads the pad value in constant mode only: Relay built these
    x = np.arange(4, dtype="float32").reshape(1, 4)
    text = relay_fn("%x: Tensor[(1, 4), float32], %v: float32",
                    f'nn.pad(%x, %v, pad_width=[[0, 0], [1, 1]], pad_mode="{mode}")')
    np.testing.assert_array_equal(run_relay(text, x, np.float32(9)), want)


@pytest.mark.parametrize("body, message", [
    ("expand_dims(%x, axis=-4)", r"axis=-4 is out of range for a 2-d tensor \(\[-3, 2\]\)"),
    ("expand_dims(%x, axis=0, num_newaxis=-1)", r"num_newaxis=-1 must not be negative"),
    ("repeat(%x, repeats=0, axis=0)", r"repeats=0 must be at least 1"),
    ("tile(%x, reps=[0, 1])", r"reps=\[0, 1\]: every repetition must be positive"),
    ("reshape(%x, newshape=[-4, 2, 2, -1])", r"-4 splits input dim 0 \(6\) into 2 x 2"),
    ("reshape(%x, newshape=[0, -3])", r"-3 reads input dim 2, past the input's 2 dims"),
    ("reshape(%x, newshape=[0, 0, 0])", r"0 reads input dim 2, past the input's 2 dims"),
    ("reshape(%x, newshape=[-4])", r"-4 needs the two dims it splits into after it"),
])
def test_shapes_relay_refused_are_named(body, message):
    # v0.19's ExpandDimsRel / RepeatRel / TileRel / InferNewShape refused these; they ran
    # here (or failed with a bare "list index out of range")
    with pytest.raises(ConversionError, match=message):
        import_text(relay_fn("%x: Tensor[(6, 4), float32]", body))


@pytest.mark.parametrize("sig, body, target", [
    ("%x: Tensor[(?, 8), float32]", "broadcast_to(%x, shape=[5, 8])", None),
    ("%x: Tensor[(?, 8), float32], %y: Tensor[(?, 8), float32]", "broadcast_to_like(%x, %y)",
     (5, 8)),
])
def test_broadcast_of_a_run_time_dim_is_checked_not_read_past(sig, body, target):
    """TVM's broadcast_to decides when it builds whether a dim broadcasts: a run-time
    dim it could not relate to the target's was indexed as if equal, so 1 (or 3) rows
    broadcast to 5 read past the input and returned garbage.  Equal rows compute; a
    run-time 1 Relay broadcast is refused by name, as for every broadcasting op."""
    import bmlib_relax
    from bmlib_relax import RunCheckError

    model = bmlib_relax.compile(relay_fn(sig, body))
    like = {} if target is None else {"y": np.zeros(target, "float32")}
    x = rand(5, 8)
    np.testing.assert_array_equal(model(x=x, **like), x)
    for rows in (1, 3):
        with pytest.raises(RunCheckError, match=rf"{body.split('(')[0]}: the input has {rows} "
                                                r"entries on axis 0, the target 5"):
            model(x=rand(rows, 8), **like)


def test_broadcast_to_a_larger_rank_keeps_run_time_dims():
    import bmlib_relax

    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 8), float32]",
                                         "broadcast_to(%x, shape=[2, 3, 8])"))
    x = rand(3, 8)
    np.testing.assert_array_equal(model(x=x), np.broadcast_to(x, (2, 3, 8)))


def test_broadcast_to_a_run_time_target_runs_on_the_host():
    # the target (n, 8) is a shape bmlib's template cannot read inside a partition
    # (FuseOpsByPattern lifts it): the broadcast stays on the host and computes
    import bmlib_relax

    sig = "%x: Tensor[(?, 1), float32], %y: Tensor[(?, 8), float32]"
    model = bmlib_relax.compile(relay_fn(sig, "broadcast_to_like(%x, %y)"))
    x = rand(3, 1)
    np.testing.assert_array_equal(model(x=x, y=np.zeros((3, 8), "float32")),
                                  np.broadcast_to(x, (3, 8)))
