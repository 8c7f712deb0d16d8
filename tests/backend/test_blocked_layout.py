"""The blocked layout (issue #15): activations stay NCHW{b}c between bmlib partitions.

``partition_for_bmlib`` runs the static fp32 convolutions (and the layout-agnostic
ops between them) on channel-blocked twins (``backend/blocked_layout.py``): the
value one conv partition hands the next is 5-D NCHW{b}c, no pack or layout
conversion runs between them, and the NCHW value is made once, where an op
needs it.  Every case checks the offload, that no schedule rule was rolled back,
and the outputs against TVM's plain build of the unpartitioned module.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.blocked_layout import ENV_SWITCH, blocked_constant
from bmlib_relax.compiler import lower_and_verify

from conftest import offloaded_partitions
from helpers import check_offloaded_run, composite_names, make_module

R = relax.op
BLOCKED = re.compile(r"NCHW\d+c")


def _bn(x, channels, seed):
    rng = np.random.default_rng(seed)
    gamma, beta, mean = (relax.const(rng.uniform(0.5, 1.5, channels).astype("float32"))
                         for _ in range(3))
    var = relax.const(rng.uniform(0.5, 2.0, channels).astype("float32"))
    return relax.TupleGetItem(R.nn.batch_norm(x, gamma, beta, mean, var, axis=1,
                                              training=False), 0)


def _resnet_like(x, w1, w2, w3, w4, wd):
    """stem conv+bn+relu, max pool, a residual block (bn after the add), a strided
    conv, global average pool and a classifier."""
    a = R.nn.relu(_bn(R.nn.conv2d(x, w1, strides=2, padding=1), 24, 0))
    a = R.nn.max_pool2d(a, pool_size=3, strides=2, padding=1)
    b = R.nn.relu(_bn(R.nn.conv2d(a, w2, padding=1), 24, 1))
    c = R.nn.relu(_bn(R.add(R.nn.conv2d(b, w3, padding=1), a), 24, 2))
    d = R.nn.relu(R.nn.conv2d(c, w4, strides=2, padding=1))
    pooled = R.reshape(R.mean(d, axis=[2, 3], keepdims=True), [1, 40])
    return R.matmul(pooled, R.permute_dims(wd))


RESNET_LIKE = (_resnet_like, (1, 3, 16, 16),
               [(24, 3, 3, 3), (24, 24, 3, 3), (24, 24, 3, 3), (40, 24, 3, 3), (10, 40)])


def _partition_calls(mod: tvm.IRModule) -> list[tuple[str, relax.Call, relax.Var]]:
    """(partition name, call, bound var) of every bmlib partition call in ``main``."""
    bmlib = set(offloaded_partitions(mod))
    calls = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar) and \
                    value.op.name_hint in bmlib:
                calls.append((value.op.name_hint, value, binding.var))
    return calls


def _ops_of(func: relax.Function) -> list[str]:
    names = []
    relax.analysis.post_order_visit(
        func, lambda e: names.append(e.op.name)
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return names


def _host_ops(mod: tvm.IRModule) -> list[str]:
    return [op for op in _ops_of(mod["main"])]




def test_blocked_layout_survives_between_partitions():
    """The must-show: conv partitions hand each other 5-D NCHW{b}c tensors, and
    nothing converts or packs between them."""
    build, shape, weights = RESNET_LIKE
    mod, arrays = make_module(build, [shape], weights)
    partitioned = partition_for_bmlib(mod)
    calls = _partition_calls(partitioned)
    produced = {var: len(call.ty.shape.values) for _, call, var in calls}
    conv_calls = [(name, call) for name, call, _ in calls
                  if "relax.nn.conv2d" in _ops_of(partitioned[name])]
    assert len(conv_calls) == 4
    for name, call in conv_calls:
        assert len(call.ty.shape.values) == 5, (name, call.ty)  # the result: NCHW{ob}c
    # Every conv but the first reads another partition's blocked result directly.
    fed = [(name, call) for name, call in conv_calls if call.args[0] in produced]
    assert len(fed) == 3
    assert all(produced[call.args[0]] == 5 for _, call in fed)
    # Layout conversions: one, at the classifier edge; none on the host.
    transforms = [name for name, _, _ in calls
                  if "relax.layout_transform" in _ops_of(partitioned[name])]
    assert len(transforms) == 1
    assert not {"relax.layout_transform", "relax.permute_dims", "relax.nn.conv2d"} & \
        set(_host_ops(partitioned))
    # Inside the partitions: only the first conv (reading the NCHW input) packs.
    lowered = lower_and_verify(partitioned)
    packing = [name for name, (prim, _) in lowered.items()
               if "bmlib_data_pack" in prim.script() or "bmlib_unpack" in prim.script()]
    assert packing == [conv_calls[0][0]]
    check_offloaded_run(mod, partitioned, arrays)


def test_opt_out_gives_the_nchw_graph(monkeypatch):
    build, shape, weights = RESNET_LIKE
    mod, _ = make_module(build, [shape], weights)
    assert BLOCKED.search(partition_for_bmlib(mod).script())
    assert not BLOCKED.search(partition_for_bmlib(mod, blocked_layout=False).script())
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert not BLOCKED.search(partition_for_bmlib(mod).script())
    monkeypatch.delenv(ENV_SWITCH)
    model = bmlib_relax.compile(mod, blocked_layout=False)
    assert offloaded_partitions(model.relax_module)
    assert not BLOCKED.search(model.relax_module.script())


def _dw_block(stride, channels):
    def build(x, w1, w2, w3):
        a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
        b = R.clip(R.nn.conv2d(a, w2, strides=stride, padding=1, groups=channels), 0, 6)
        return R.nn.relu(R.nn.conv2d(b, w3))
    return build


def _mixed_blocks(x, w1, w2, w3):
    """A depthwise conv of the input (block of the channels) plus a 1x1 conv of it
    (block of two vectors): the add converts one operand."""
    return R.nn.conv2d(R.nn.relu(R.add(R.nn.conv2d(x, w1, padding=1, groups=32),
                                       R.nn.conv2d(x, w2))), w3, padding=1)


def _dilated_avg(x, w1, w2):
    a = R.nn.conv2d(x, w1, padding=2, dilation=2)
    a = R.nn.avg_pool2d(a, pool_size=3, strides=1, padding=1, count_include_pad=False)
    a = R.sigmoid(R.multiply(a, relax.const(np.float32(0.5))))
    return R.nn.conv2d(a, w2, strides=2, padding=[0, 1, 1, 0])


def _flat_pixels(x, w1, w2):
    """7x7 outputs (no whole row tiles): the flat-pixel conv, blocked in and out;
    adaptive average pool on the blocked result."""
    a = R.nn.relu(R.nn.conv2d(x, w1, padding=1))
    return R.nn.adaptive_avg_pool2d(R.nn.conv2d(a, w2, padding=1), [1, 1])


def _bn_not_after_conv(x, w1, w2):
    """batch_norm after a pool: a per-channel scale and shift on the twin."""
    a = R.nn.max_pool2d(R.nn.conv2d(x, w1, padding=1), pool_size=2, strides=2)
    return R.nn.conv2d(R.nn.relu(_bn(a, 40, 3)), w2, padding=1)


def _fire(x, w1, w2, w3, w4):
    """SqueezeNet's fire module: a channel concat of two convs, then a conv."""
    s = R.nn.relu(R.nn.conv2d(x, w1))
    both = R.concat([R.nn.relu(R.nn.conv2d(s, w2)), R.nn.relu(R.nn.conv2d(s, w3, padding=1))],
                    axis=1)
    return R.nn.conv2d(both, w4)


CASES = {
    "fire module (channel concat)": (_fire, (1, 16, 9, 9),
                                     [(16, 16, 1, 1), (32, 16, 1, 1), (32, 16, 3, 3),
                                      (16, 64, 1, 1)]),
    "depthwise 24ch stride 2": (_dw_block(2, 24), (1, 3, 10, 10),
                                [(24, 3, 3, 3), (24, 1, 3, 3), (40, 24, 1, 1)]),
    "depthwise 32ch stride 1": (_dw_block(1, 32), (1, 16, 8, 8),
                                [(32, 16, 3, 3), (32, 1, 3, 3), (64, 32, 1, 1)]),
    "mixed blocks in an add": (_mixed_blocks, (1, 32, 8, 8),
                               [(32, 1, 3, 3), (32, 32, 1, 1), (24, 32, 3, 3)]),
    "dilation, avg pool, scalar, asymmetric padding": (_dilated_avg, (1, 3, 12, 12),
                                                       [(24, 3, 3, 3), (40, 24, 3, 3)]),
    "flat pixels 7x7": (_flat_pixels, (1, 16, 7, 7), [(32, 16, 3, 3), (64, 32, 3, 3)]),
    "batch_norm after a pool": (_bn_not_after_conv, (1, 3, 8, 8),
                                [(40, 3, 3, 3), (24, 40, 3, 3)]),
    "resnet-like": RESNET_LIKE,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_blocked_chains_match_the_plain_build(case):
    build, shape, weights = CASES[case]
    mod, arrays = make_module(build, [shape], weights)
    partitioned = partition_for_bmlib(mod)
    assert BLOCKED.search(partitioned.script())
    check_offloaded_run(mod, partitioned, arrays)


@pytest.mark.parametrize("case", ["resnet-like", "mixed blocks in an add"])
def test_merged_blocked_partitions(case):
    build, shape, weights = CASES[case]
    mod, arrays = make_module(build, [shape], weights)
    partitioned = partition_for_bmlib(mod, merge=True)
    assert BLOCKED.search(partitioned.script())
    check_offloaded_run(mod, partitioned, arrays)


def test_a_lone_conv_keeps_nchw():
    """One conv gains nothing from the blocked layout (it would be converted back
    right away): its partition packs and unpacks inside, as before."""
    mod, _ = make_module(lambda x, w: R.nn.relu(R.nn.conv2d(x, w, padding=1)),
                         [(1, 16, 8, 8)], [(32, 16, 3, 3)])
    assert not BLOCKED.search(partition_for_bmlib(mod).script())


def test_symbolic_batch_is_left_alone():
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((n, 8, 8, 8), "float32"))
    w1 = relax.const(np.ones((16, 8, 3, 3), "float32"))
    w2 = relax.const(np.ones((16, 16, 3, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(R.nn.relu(R.nn.conv2d(x, w1, padding=1)))
            out = bb.emit_output(R.nn.conv2d(a, w2, padding=1))
        bb.emit_func_output(out)
    partitioned = partition_for_bmlib(bb.get())
    assert offloaded_partitions(partitioned)
    assert not BLOCKED.search(partitioned.script())


@pytest.mark.parametrize("shape, ok", [((), True), ((1, 8, 1, 1), True), ((8, 1, 1), True),
                                       ((8,), False), ((1, 8, 2, 1), False)])
def test_only_per_channel_constants_are_reblocked(shape, ok):
    array = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    blocked = blocked_constant(array, 8, 4)
    assert (blocked is not None) == ok
    if ok and array.size == 8:
        np.testing.assert_array_equal(blocked.reshape(2, 4).reshape(-1), np.arange(8))


@pytest.mark.parametrize("case", ["mixed blocks in an add", "depthwise 24ch stride 2",
                                  "flat pixels 7x7"])
def test_float16_chains_are_blocked_too(case):
    build, shape, weights = CASES[case]
    mod, arrays = make_module(build, [shape], weights, dtype="float16")
    partitioned = partition_for_bmlib(mod)
    assert BLOCKED.search(partitioned.script())
    check_offloaded_run(mod, partitioned, arrays, rtol=2e-2)


@pytest.mark.parametrize("pool_size, strides, padding, fast", [
    (3, 2, 1, True), (2, 2, 0, True), (3, 1, [0, 1, 2, 1], True), ((1, 3), 1, [0, 1], True),
    (2, 1, 2, False)])  # padding >= window: TOPI's pool on the blocked layout
def test_max_pool_on_blocked_data(pool_size, strides, padding, fast):
    def build(x, w1, w2):
        a = R.nn.conv2d(x, w1, padding=1)
        # relu: a window of padding only is -inf (padding >= window)
        return R.nn.conv2d(R.nn.relu(R.nn.max_pool2d(a, pool_size, strides, padding)), w2,
                           padding=1)

    mod, arrays = make_module(build, [(1, 3, 9, 11)], [(24, 3, 3, 3), (16, 24, 3, 3)])
    partitioned = partition_for_bmlib(mod)
    scripts = [prim.script() for prim, _ in lower_and_verify(partitioned).values()]
    assert any('"bmlib.max_pool2d_blocked"' in s for s in scripts) == fast
    check_offloaded_run(mod, partitioned, arrays)


def test_residual_add_joins_the_conv_epilogue():
    """conv → add(shortcut) → batch_norm scale/shift → relu is one partition; the
    shortcut is read by the conv's epilogue (no add partition)."""
    build, shape, weights = RESNET_LIKE
    mod, arrays = make_module(build, [shape], weights)
    partitioned = partition_for_bmlib(mod)
    names = composite_names(partitioned)
    assert "bmlib.conv2d_residual_chain4" in names, names
    # batch_norm right after a conv is folded into its weights and a bias.
    assert "bmlib.conv2d_bias_relu" in names, names
    assert not any("relax.nn.batch_norm" in _ops_of(f) for f in partitioned.functions.values()
                   if isinstance(f, relax.Function))
    assert not any(n in ("bmlib.add", "bmlib.elemwise_chain2", "bmlib.elemwise_chain3")
                   for n in names), names
    # Off the blocked layout the graph (and its composites) is the old one.
    assert not any("residual" in n for n in
                   composite_names(partition_for_bmlib(mod, blocked_layout=False)))
    check_offloaded_run(mod, partitioned, arrays)


def test_nhwc_models_run_blocked_after_the_nchw_conversion():
    """A TF-style NHWC graph: backend/layout.py makes it NCHW, then this pass blocks it."""
    from test_layout import X, _imported

    partitioned = partition_for_bmlib(_imported())
    assert BLOCKED.search(partitioned.script())
    check_offloaded_run(_imported(), partitioned, [X], rtol=1e-5)
