"""Real Relay-era BYOC tables load unchanged (issue #17).

The fixtures in ``fixtures/`` are written the way TVM v0.19's contrib tables
(``dnnl.py``, ``tensorrt.py``, ``arm_compute_lib.py``) are: the same imports,
load-time registrations, composite names, patterns and checks.  Each surface of
the compatibility layer is exercised through a table module that imports it the
way those files do; the composites found on the ResNet-18 and MobileNet goldens
are compared with what Relay's ``MergeComposite(pattern_table())`` produced on
the same bound module (worked out below from the patterns, checks and model text).
"""
from __future__ import annotations

import collections
import sys
import textwrap
from pathlib import Path

import pytest
import tvm
from tvm import relax

from bmlib_relax.backend.partition import partition_for_bmlib, resolve_patterns
from bmlib_relax.importer import RelayImporter, import_relay
from bmlib_relax.importer.provenance import op_ref
from bmlib_relax.legacy import LegacyModuleError, load_legacy_module, load_pattern_table
from bmlib_relax.legacy.compat import LegacyApiError, get_pattern_table
from bmlib_relax.relay import parse

from conftest import DATA, Golden

FIXTURES = Path(__file__).parent / "fixtures"
DNNL, TRT, ACL = (FIXTURES / f"{n}_style.py" for n in ("dnnl", "tensorrt", "acl"))


def composite_calls(mod: tvm.IRModule) -> dict[str, int]:
    """Composite name -> number of times it is called (partition functions with the same
    body are shared by several call sites, and so are composites after merging)."""
    counts: collections.Counter = collections.Counter()

    def composite_of(callee, local):
        callee = local.get(callee, callee) if isinstance(callee, relax.Var) else callee
        if isinstance(callee, relax.Function) and callee.attrs is not None and \
                "Composite" in callee.attrs:
            return str(callee.attrs["Composite"])
        return None

    def count_in(func, times):
        local = {}
        for block in getattr(func.body, "blocks", []):
            for binding in block.bindings:
                if isinstance(binding.value, relax.Function):
                    local[binding.var] = binding.value

        def visit(expr):
            if isinstance(expr, relax.Call):
                name = composite_of(expr.op, local)
                if name is not None:
                    counts[name] += times

        relax.analysis.post_order_visit(func.body, visit)

    calls: collections.Counter = collections.Counter()
    relax.analysis.post_order_visit(mod["main"], lambda e: calls.update([e.op]) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.GlobalVar) else None)
    for gvar, times in calls.items():
        count_in(mod[gvar], times)
    return dict(counts)


def partition_golden(case: str, table_path: Path) -> dict[str, int]:
    golden = Golden(DATA / case)
    mod = partition_for_bmlib(import_relay(golden.text, golden.params()),
                              patterns=load_pattern_table(table_path))
    return composite_calls(mod)


# ResNet-18 (pre-activation, 21 conv2d, 19 batch_norm, 18 relu, 8 add, dense + bias_add):
# - dnnl: relu never follows a conv or an add directly (a batch_norm is in between), so only
#   the bias-less-eltwise "dnnl.conv2d_bias" = add(conv2d, *) matches, once per add (8).
#   conv2d_bias_sum matches the 4 add(conv, add(conv, conv)) only commutatively; its predicate
#   then looks at args[0] (a conv, not the bias add) and says no.  nn.bias_add is not "add".
# - tensorrt: every op is a single-op entry; weights are bound, so conv2d/dense see constants.
RESNET18 = {
    "dnnl": {"dnnl.conv2d_bias": 8},
    "tensorrt": {"tensorrt.nn.conv2d": 21, "tensorrt.nn.batch_norm": 19,
                 "tensorrt.nn.relu": 18, "tensorrt.add": 8, "tensorrt.nn.max_pool2d": 1,
                 "tensorrt.nn.global_avg_pool2d": 1, "tensorrt.nn.batch_flatten": 1,
                 "tensorrt.nn.dense": 1, "tensorrt.nn.bias_add": 1, "tensorrt.nn.softmax": 1},
}
# MobileNet (27 conv2d of which 13 depthwise, 27 batch_norm, 27 relu, no add):
# - dnnl: nothing (no add after a conv, no relu right after a conv, bias_add is not add).
# - arm_compute_lib: conv2d (+ optional bias_add/relu, absent here), depthwise first.
MOBILENET = {
    "dnnl": {},
    "tensorrt": {"tensorrt.nn.conv2d": 27, "tensorrt.nn.batch_norm": 27,
                 "tensorrt.nn.relu": 27, "tensorrt.nn.global_avg_pool2d": 1,
                 "tensorrt.nn.batch_flatten": 1, "tensorrt.nn.dense": 1,
                 "tensorrt.nn.bias_add": 1, "tensorrt.nn.softmax": 1},
    "acl": {"arm_compute_lib.depthwise_conv2d": 13, "arm_compute_lib.conv2d": 14},
}
TABLES = {"dnnl": DNNL, "tensorrt": TRT, "acl": ACL}


@pytest.mark.parametrize("case,expected,table", [
    *[("resnet18", v, k) for k, v in RESNET18.items()],
    *[("mobilenet", v, k) for k, v in MOBILENET.items()],
])
def test_composites_match_relay_merge_composite(case, expected, table):
    assert partition_golden(case, TABLES[table]) == expected


# --------------------------------------------------------------------------- surfaces
def test_tables_register_and_are_found_by_compiler_name():
    table = load_pattern_table(DNNL)  # @register_pattern_table("dnnl")
    assert [e[0] for e in table][:4] == ["dnnl.qnn.conv2d", "dnnl.qnn.dense",
                                         "dnnl.conv2d_bias_sum_relu", "dnnl.conv2d_bias_sum"]
    assert [e[0] for e in get_pattern_table("dnnl")] == [e[0] for e in table]
    assert load_pattern_table(ACL)[0][0] == "arm_compute_lib.depthwise_conv2d"


def test_nothing_leaks_into_sys_modules_or_tvm():
    before = {k for k in sys.modules if k.startswith(("tvm.relay", "tvm._ffi"))}
    for path in TABLES.values():
        load_pattern_table(path)
    assert {k for k in sys.modules if k.startswith(("tvm.relay", "tvm._ffi"))} == before
    assert not hasattr(tvm, "relay")
    # register_func inside a table is recorded for the table, not in TVM's registry
    assert tvm.get_global_func("relay.ext.acl_style.optimize", allow_missing=True) is None


def test_register_op_attr_and_op_get_attr():
    load_pattern_table(DNNL)  # registers target.dnnl for its ops at load time
    module = RelayImporter(parse(textwrap.dedent("""
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 4), float32], %i: Tensor[(1, 4), int64]) {
          (nn.relu(%x), nn.relu(%i))
        }""")), {})
    module.run()
    relu_f32, relu_i64 = [v for v in module.provenance.views if v.op.name == "nn.relu"]
    support = op_ref("nn.relu").get_attr("target.dnnl")
    assert support(relu_f32) is True and support(relu_i64) is False  # dnnl's int64 rule
    assert op_ref("nn.relu") is op_ref("nn.relu") and str(op_ref("nn.relu")) == "nn.relu"
    assert op_ref("nn.upsampling").get_attr("target.dnnl") is None


def test_expr_functor_visitor_and_mutator_over_relay():
    dnnl = load_legacy_module(DNNL)
    golden = Golden(DATA / "mobilenet")
    main = parse(golden.text)["main"]
    assert dnnl.IsComputeIntensiveGraph().is_graph_compute_intensive(main.body)
    no_conv = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) '
                    '{ nn.relu(copy(%x)) }')["main"]
    assert not dnnl.IsComputeIntensiveGraph().is_graph_compute_intensive(no_conv.body)
    stripped = dnnl.StripCopies().visit(no_conv.body)  # ExprMutator, `op == relay.op.get`
    assert stripped.op.name == "nn.relu" and stripped.args[0] is no_conv.params[0]
    assert dnnl.count_reshape_attrs(parse(
        '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 3), float32]) '
        '{ reshape(%x, newshape=[3, 2]) }')["main"]) == [{"newshape": (3, 2)}]


def test_function_pass_and_tensorrt_target():
    trt = load_legacy_module(TRT)
    assert trt.implicit_batch() is True and trt.trt_version() == (6, 0, 1)
    mod = parse(textwrap.dedent("""
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 4), float32]) {
          %0 = nn.dropout(%x, rate=0.5f);
          nn.relu(%0.0)
        }"""))
    mod = trt.RemoveDropoutPass()(mod)  # @transform.function_pass over an ExprMutator
    assert mod["main"].body.args[0] is mod["main"].params[0]


def test_depthwise_helper_from_strategy_generic():
    acl = load_legacy_module(ACL)
    assert acl.is_depthwise_conv2d((1, 32, 8, 8), "NCHW", (32, 1, 3, 3), "OIHW", 32)
    assert not acl.is_depthwise_conv2d((1, 32, 8, 8), "NCHW", (64, 32, 3, 3), "OIHW", 1)
    assert acl.is_depthwise_conv2d((1, 8, 8, 32), "NHWC", (3, 3, 32, 1), "HWOI", 32)


def test_ffi_api_is_importable_and_names_a_missing_function():
    dnnl = load_legacy_module(DNNL)  # `from ... import _ffi_api` at load time
    with pytest.raises(LegacyApiError, match="get_optimal_layout_for_conv"):
        dnnl.optimal_conv_layout("NCHW", "OIHW")


def test_relative_import_outside_the_package_is_named(tmp_path):
    path = tmp_path / "table.py"
    path.write_text("from ....... import nothing\n")
    with pytest.raises(LegacyModuleError, match=r"table.py:1: .*ImportError"):
        load_legacy_module(path)


def test_foreign_entries_without_relax_form_are_skipped_with_a_reason():
    skipped: list = []
    resolve_patterns(load_pattern_table(TRT), skipped)
    reasons = dict(skipped)
    assert "tensorrt.nn.conv3d" not in reasons  # conv3d has a bmlib template
    assert "global_max_pool2d" in reasons["tensorrt.nn.global_max_pool2d"]
    assert "tensorrt.nn.conv2d" not in reasons


def test_tensorrt_partition_helper_on_mobilenet():
    """partition_for_tensorrt: InferType, its own @function_pass (RemoveDropout),
    RemoveUnusedFunctions, ConvertLayout (already NCHW), FoldConstant, MergeComposite,
    AnnotateTarget, MergeCompilerRegions, PartitionGraph under `with target:`.  The
    composites are the table's (same counts as above), merged into one region."""
    from bmlib_relax.legacy import partition_with_legacy_fn

    golden = Golden(DATA / "mobilenet")
    relay_mod, patterns, merge, weights = partition_with_legacy_fn(
        str(TRT), "partition_for_tensorrt", parse(golden.text), golden.params())
    assert merge is True and weights == {}  # the helper bound every weight
    mod = partition_for_bmlib(import_relay(relay_mod, weights), patterns=patterns, merge=merge)
    assert composite_calls(mod) == MOBILENET["tensorrt"]
    assert len([g for g in mod.functions if g.name_hint != "main"]) == 1


def test_register_func_and_op_attr_call_forms(tmp_path):
    path = tmp_path / "codegen_table.py"
    path.write_text(textwrap.dedent('''
        import tvm
        from tvm import relay

        @tvm.register_func("relay.ext.mine")
        def codegen(mod):
            return None

        tvm.ir.register_op_attr("nn.relu", "target.mine", lambda expr: True)
        FOUND = tvm.get_global_func("relay.ext.mine") is codegen
        MISSING = tvm.get_global_func("relay.ext.tensorrt.is_runtime_enabled", True)
        ATTR = tvm.ir.Op.get("nn.relu").get_attr("target.mine")
    '''))
    module = load_legacy_module(path)
    assert module.FOUND and module.MISSING is None and module.ATTR(None) is True
    assert tvm.get_global_func("relay.ext.mine", allow_missing=True) is None


def test_cutlass_style_helper_with_an_op_alternative():
    """partition_for_cutlass(mod) takes no params (weights bound first, as its users did);
    `(is_op("add") | is_op("nn.bias_add"))(dense, b)` matches either form.  ResNet-18's
    classifier is dense + bias_add (+ softmax, no relu): one cutlass.dense_bias."""
    from bmlib_relax.legacy import partition_with_legacy_fn

    golden = Golden(DATA / "resnet18")
    relay_mod, patterns, merge, weights = partition_with_legacy_fn(
        str(FIXTURES / "cutlass_style.py"), "partition_for_cutlass", parse(golden.text),
        golden.params())
    mod = partition_for_bmlib(import_relay(relay_mod, weights), patterns=patterns, merge=merge)
    assert composite_calls(mod) == {"cutlass.dense_bias": 1}
