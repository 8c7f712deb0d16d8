"""A legacy Relay pattern table forms the composites TVM v0.19's MergeComposite formed.

v0.19's ``PatternGrouper::VisitExprs`` (src/relay/ir/dataflow_matcher.cc) visits the
graph from the outputs back and tries the whole pattern at each root not yet grouped,
an ``AltPattern`` left then right at that root; ``MergeComposite``
(src/relay/transforms/merge_composite.cc) applies the entries one after another, and
the partitioner calls an entry's check once per group, on its root, in post order.
The expected composites below are worked out by hand from those rules; the numerical
references are NumPy evaluations of the Relay programs.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.relay.dataflow_pattern import is_constant, is_op, wildcard

from conftest import offloaded_partitions

RNG = np.random.default_rng(21)


def composites(model) -> list[tuple[str, list[str]]]:
    """(composite names, ops) of every partition call, sorted: a partition shared by
    several call sites counts once per call."""
    found = []
    for part in model.report.to_dict()["partitions"]:
        found += [(",".join(part["composites"]), sorted(part["ops"]))] * part["calls"]
    return sorted(found)


def host_ops(model) -> dict[str, int]:
    return {op: n for op, n in model.report.ops_host.items() if n}


def conv2d_same(x, w):
    """NCHW/OIHW 3x3 convolution, stride 1, padding 1 (Relay's nn.conv2d), in float64."""
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, width = x.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], h, width))
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, ky:ky + h, kx:kx + width], w[:, :, ky, kx])
    return out


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def assert_offloaded(model):
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"


# --------------------------------------------------------------------------- .optional tails
def acl_conv_pattern():
    """arm_compute_lib.py / tensorrt.py style: conv2d(*, const)[+bias_add(const)][+relu]."""
    pattern = is_op("nn.conv2d")(wildcard(), is_constant())
    pattern = pattern.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
    return pattern.optional(is_op("nn.relu"))


@pytest.mark.parametrize("merge", [False, True])
def test_optional_tails_join_the_composite(merge):
    """conv2d -> bias_add -> relu: at the relu (visited first) the pattern's right branch
    matches all three, so v0.19 built one conv2d+bias_add+relu composite."""
    x = relay.var("x", shape=(1, 3, 6, 6))
    w, b = relay.var("w", shape=(4, 3, 3, 3)), relay.var("b", shape=(4,))
    out = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
    mod = relay.IRModule.from_expr(relay.Function([x, w, b], out))
    params = {"w": RNG.standard_normal((4, 3, 3, 3)).astype("float32"),
              "b": RNG.standard_normal(4).astype("float32")}
    roots = []

    def check(call):
        roots.append(call.op.name)
        return True

    model = bmlib_relax.compile(mod, params, merge=merge,
                                patterns=[("arm_compute_lib.conv2d", acl_conv_pattern(), check)])
    assert_offloaded(model)
    ((name, ops),) = composites(model)
    assert name == "arm_compute_lib.conv2d"
    assert ops.count("relax.nn.conv2d") == 1 and "relax.add" in ops and "relax.nn.relu" in ops
    assert host_ops(model) == {}
    assert roots == ["nn.relu"]  # one group, checked once, at its root
    data = RNG.standard_normal((1, 3, 6, 6)).astype("float32")
    expected = np.maximum(conv2d_same(data, params["w"]) + params["b"][None, :, None, None], 0)
    np.testing.assert_allclose(model(data), expected, rtol=1e-4, atol=1e-4)


def test_optional_tail_where_it_is_present_only():
    """relu(conv1) -> conv2 -> sigmoid with conv2d(*, const).optional(relu): the relu root
    takes conv1 (conv2d+relu), conv2 stays a conv2d composite; the check sees the roots in
    post order (the relu, then conv2)."""
    x = relay.var("x", shape=(1, 3, 6, 6))
    w1, w2 = relay.var("w1", shape=(3, 3, 3, 3)), relay.var("w2", shape=(3, 3, 3, 3))
    hidden = relay.nn.relu(relay.nn.conv2d(x, w1, padding=(1, 1)))
    out = relay.sigmoid(relay.nn.conv2d(hidden, w2, padding=(1, 1)))
    mod = relay.IRModule.from_expr(relay.Function([x, w1, w2], out))
    params = {n: RNG.standard_normal((3, 3, 3, 3)).astype("float32") for n in ("w1", "w2")}
    roots = []

    def check(call):
        roots.append(call.op.name)
        return True

    pattern = is_op("nn.conv2d")(wildcard(), is_constant()).optional(is_op("nn.relu"))
    model = bmlib_relax.compile(mod, params, patterns=[("bmlib.conv_relu", pattern, check)])
    assert_offloaded(model)
    assert composites(model) == [("bmlib.conv_relu", ["relax.nn.conv2d"]),
                                 ("bmlib.conv_relu", ["relax.nn.conv2d", "relax.nn.relu"])]
    assert host_ops(model) == {"relax.sigmoid": 1}
    assert roots == ["nn.relu", "nn.conv2d"]
    data = RNG.standard_normal((1, 3, 6, 6)).astype("float32")
    expected = sigmoid(conv2d_same(np.maximum(conv2d_same(data, params["w1"]), 0), params["w2"]))
    np.testing.assert_allclose(model(data), expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- overlapping matches
def add_chain():
    """a1 = x + y; a2 = a1 + y*y; a3 = a2 + sigmoid(y); relu(a3)."""
    x, y = relay.var("x", shape=(2, 3)), relay.var("y", shape=(2, 3))
    a1 = relay.add(x, y)
    a2 = relay.add(a1, relay.multiply(y, y))
    a3 = relay.add(a2, relay.sigmoid(y))
    return relay.IRModule.from_expr(relay.Function([x, y], relay.nn.relu(a3)))


def add_chain_reference(x, y):
    return np.maximum(x + y + y * y + sigmoid(y), 0)


ADD_ADD = is_op("add")(is_op("add")(wildcard(), wildcard()), wildcard())


def test_overlapping_matches_are_grouped_from_the_output_back():
    """add(add(*, *), *) matches at a2 and at a3; v0.19 reached a3 first and grouped
    {a2, a3}, leaving a1 alone (the partition reads a1, y*y and sigmoid(y))."""
    second_operands = []

    def check(call):
        second_operands.append(call.args[1].op.name)  # a3's is sigmoid, a2's multiply
        return True

    model = bmlib_relax.compile(add_chain(), {}, patterns=[("bmlib.add_add", ADD_ADD, check)])
    assert_offloaded(model)
    assert composites(model) == [("bmlib.add_add", ["relax.add", "relax.add"])]
    assert host_ops(model) == {"relax.add": 1, "relax.multiply": 1, "relax.sigmoid": 1,
                               "relax.nn.relu": 1}
    assert second_operands == ["sigmoid"]
    (call,) = [b.value for b in model.relax_module["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.GlobalVar)]
    assert len(call.args) == 3  # a1, y*y, sigmoid(y): the first add is outside
    x, y = (RNG.standard_normal((2, 3)).astype("float32") for _ in range(2))
    np.testing.assert_allclose(model(x, y), add_chain_reference(x, y), rtol=1e-5, atol=1e-5)


def test_a_rejected_group_frees_its_nodes():
    """README: a match rejected by its check frees its nodes (v0.19 kept a2 claimed and
    formed nothing): the check says no at a3, then a2 groups {a1, a2}."""
    second_operands = []

    def check(call):
        second_operands.append(call.args[1].op.name)
        return call.args[1].op.name != "sigmoid"

    model = bmlib_relax.compile(add_chain(), {}, patterns=[("bmlib.add_add", ADD_ADD, check)])
    assert_offloaded(model)
    assert composites(model) == [("bmlib.add_add", ["relax.add", "relax.add"])]
    assert second_operands == ["sigmoid", "multiply"]
    (call,) = [b.value for b in model.relax_module["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.GlobalVar)]
    assert len(call.args) == 3  # x, y, y*y: the first two adds are inside
    x, y = (RNG.standard_normal((2, 3)).astype("float32") for _ in range(2))
    np.testing.assert_allclose(model(x, y), add_chain_reference(x, y), rtol=1e-5, atol=1e-5)


def test_entries_apply_one_after_another():
    """MergeComposite applies the table in order: a single-add entry first takes every add
    (from the output back), so the add(add) entry after it finds nothing."""
    single = is_op("add")(wildcard(), wildcard())
    model = bmlib_relax.compile(add_chain(), {}, patterns=[("bmlib.add", single),
                                                           ("bmlib.add_add", ADD_ADD)])
    assert_offloaded(model)
    assert composites(model) == [("bmlib.add", ["relax.add"])] * 3
    model = bmlib_relax.compile(add_chain(), {}, patterns=[("bmlib.add_add", ADD_ADD),
                                                           ("bmlib.add", single)])
    assert composites(model) == [("bmlib.add", ["relax.add"]),
                                 ("bmlib.add_add", ["relax.add", "relax.add"])]
    x, y = (RNG.standard_normal((2, 3)).astype("float32") for _ in range(2))
    np.testing.assert_allclose(model(x, y), add_chain_reference(x, y), rtol=1e-5, atol=1e-5)
