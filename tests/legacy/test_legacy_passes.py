"""``relay.transform`` as partition helpers use it: real rewrites with Relay's semantics,
recorded partitioning passes, named errors for the rest."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from bmlib_relax.importer import import_relay
from bmlib_relax.legacy.compat import compat_modules
from bmlib_relax.legacy.passes import (PartitionPlan, UnsupportedPassError, plan_of,
                                       run_partition_fn)
from bmlib_relax.relay import ast, parse
from bmlib_relax.relay.analysis import post_order_list

from conftest import run_plain

MODEL = textwrap.dedent("""
    #[version = "0.0.5"]
    def @main(%x: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(4, 4, 1, 1), float32],
              %b: Tensor[(4), float32], %g: Tensor[(4), float32], %be: Tensor[(4), float32],
              %m: Tensor[(4), float32], %v: Tensor[(4), float32]) {
      %0 = nn.conv2d(%x, %w, padding=[0, 0, 0, 0]);
      %1 = nn.bias_add(%0, %b);
      %2 = nn.batch_norm(%1, %g, %be, %m, %v, epsilon=1e-3f);
      %3 = nn.dropout(%2.0);
      nn.relu(%3.0)
    }""")


@pytest.fixture(scope="module")
def transform():
    return compat_modules()["tvm.relay.transform"]


def weights():
    rng = np.random.default_rng(3)
    return {"w": rng.standard_normal((4, 4, 1, 1)).astype("float32"),
            "b": rng.standard_normal(4).astype("float32"),
            "g": (rng.random(4) + 0.5).astype("float32"),
            "be": rng.standard_normal(4).astype("float32"),
            "m": rng.standard_normal(4).astype("float32"),
            "v": (rng.random(4) + 0.5).astype("float32")}


def ops(mod):
    return [n.op.name for n in post_order_list(mod["main"]) if isinstance(n, ast.Call)]


def test_rewrites_keep_the_numbers_and_use_relays_ops(transform):
    params = weights()
    x = np.random.default_rng(4).standard_normal((1, 4, 5, 5)).astype("float32")
    want = run_plain(import_relay(MODEL, params), [x])
    mod = parse(MODEL)
    mod["main"] = transform.bind_params_by_name(mod["main"], params)
    mod = transform.Sequential([transform.CanonicalizeOps(), transform.InferType(),
                                transform.SimplifyInference(), transform.FoldConstant()])(mod)
    # bias_add -> add(x, expand_dims(b)); batch_norm -> multiply/add; dropout gone;
    # the computations on weights are folded into (4, 1, 1) constants.
    assert ops(mod) == ["nn.conv2d", "add", "multiply", "add", "nn.relu"]
    consts = [n for n in post_order_list(mod["main"]) if isinstance(n, ast.Constant)]
    assert sorted(c.data.shape for c in consts) == [(4, 1, 1)] * 3 + [(4, 4, 1, 1)]
    got = run_plain(import_relay(mod), [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert plan_of(mod).passes == ["CanonicalizeOps", "InferType", "SimplifyInference",
                                   "FoldConstant"]


def test_fold_constant_names_an_op_it_cannot_fold(transform):
    mod = parse('#[version = "0.0.5"]\ndef @main() { nn.softmax(meta[relay.Constant][0]) }\n'
                '#[metadata]\n' + _META_CONSTANT)
    with pytest.raises(UnsupportedPassError, match="FoldConstant: cannot fold nn.softmax"):
        transform.FoldConstant()(mod)


_META_CONSTANT = """{
  "root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "keys": ["relay.Constant"],
  "data": [2]}, {"type_key": "Array", "data": [3]}, {"type_key": "relay.Constant",
  "attrs": {"_checked_type_": "0", "data": "0", "span": "0", "virtual_device_": "0"}}],
  "b64ndarrays": ["P6G0lvBAXt0AAAAAAAAAAAEAAAAAAAAAAQAAAAIgAQACAAAAAAAAAAgAAAAAAAAAAACAPwAAAEA="],
  "attrs": {"tvm_version": "0.8.0"}
}"""


def test_convert_layout_only_where_nothing_changes(transform):
    nchw = parse(MODEL)
    assert transform.ConvertLayout({"nn.conv2d": ["NCHW", "default"]})(nchw) is nchw
    nhwc = parse(textwrap.dedent("""
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 5, 5, 4), float32], %w: Tensor[(1, 1, 4, 4), float32]) {
          nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="HWIO")
        }"""))
    with pytest.raises(UnsupportedPassError, match=r"ConvertLayout: nn.conv2d in layout "
                                                   r"NHWC/HWIO would need converting"):
        transform.ConvertLayout({"nn.conv2d": ["NCHW", "default"]})(nhwc)


def test_unsupported_passes_are_named_where_they_are_created(transform):
    with pytest.raises(UnsupportedPassError, match=r"relay.transform.AlterOpLayout has no "
                                                   r"faithful equivalent"):
        transform.AlterOpLayout()


def test_partitioning_passes_are_recorded(transform):
    table = [("x.relu", object())]

    def partition_for_x(mod, params):
        seq = transform.Sequential([transform.MergeComposite(table),
                                    transform.AnnotateTarget(["x"]),
                                    transform.MergeCompilerRegions(),
                                    transform.PartitionGraph()])
        with transform.PassContext(opt_level=3):
            return seq(mod)

    mod, patterns, merge = run_partition_fn(partition_for_x, parse(MODEL), {})
    assert patterns[0] == table[0] and merge is True
    assert isinstance(plan_of(mod), PartitionPlan) and plan_of(mod).annotate == ["x"]


def test_a_helper_that_offloads_nothing_says_so(transform):
    def partition_for_x(mod, params):
        return transform.InferType()(mod)

    with pytest.raises(UnsupportedPassError, match=r"ran no MergeComposite/AnnotateTarget.*"
                                                   r"passes run: InferType"):
        run_partition_fn(partition_for_x, parse(MODEL), {})


def test_a_helper_that_does_not_partition_says_so(transform):
    def partition_for_x(mod, params):
        return transform.MergeComposite([("x.relu", object())])(mod)

    with pytest.raises(UnsupportedPassError, match=r"ran no PartitionGraph"):
        run_partition_fn(partition_for_x, parse(MODEL), {})


def test_module_pass_decorator(transform):
    seen = []

    @transform.module_pass(opt_level=0)
    def count_functions(mod, ctx):
        seen.append((len(mod.functions), ctx.opt_level))
        return mod

    with transform.PassContext(opt_level=3):
        count_functions(parse(MODEL))
    assert seen == [(1, 3)]


def test_tvm_ir_structural_equality_compares_relay_nodes():
    """Legacy scripts check rewrites with ``tvm.ir.(assert_)structural_equal``: over Relay
    nodes it is Relay's equality (binders matched, free vars by identity by default); over
    TVM objects TVM's own."""
    ir = compat_modules()["tvm.ir"]
    from bmlib_relax import relay

    x, y = relay.var("x", shape=(2,)), relay.var("y", shape=(2,))
    assert ir.structural_equal(relay.add(x, x), relay.add(x, x))
    assert not ir.structural_equal(relay.add(x, x), relay.add(x, y))
    assert ir.structural_equal(relay.add(x, x), relay.add(y, y), map_free_vars=True)
    assert ir.structural_equal(relay.Function([x], relay.nn.relu(x)),
                               relay.Function([y], relay.nn.relu(y)))
    with pytest.raises(ValueError, match="StructuralEqual"):
        ir.assert_structural_equal(relay.add(x, x), relay.multiply(x, x))
    import tvm

    assert ir.structural_equal(tvm.tirx.const(3), tvm.tirx.const(3))
    with pytest.raises(ValueError):
        ir.assert_structural_equal(tvm.tirx.const(3), tvm.tirx.const(4))
