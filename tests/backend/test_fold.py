"""Computations on weights are folded with NumPy before the built-in table partitions."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax.backend.fold import fold_constants
from bmlib_relax.examples import seed

# SimplifyInference-style batch_norm: the scale/shift is computed from weights in the graph.
SIMPLIFIED_BN = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 6, 6), float32], %w: Tensor[(8, 8, 3, 3), float32],
          %var: Tensor[(8), float32], %mean: Tensor[(8), float32], %gamma: Tensor[(8), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = add(%var, 1e-05f);
  %2 = sqrt(%1);
  %3 = divide(1f, %2);
  %4 = multiply(%3, %gamma);
  %5 = expand_dims(%4, axis=1, num_newaxis=2);
  %6 = multiply(%0, %5);
  %7 = negative(%mean);
  %8 = multiply(%7, %4);
  %9 = expand_dims(%8, axis=1, num_newaxis=2);
  %10 = add(%6, %9);
  nn.relu(%10)
}
"""
RNG = np.random.default_rng(3)
PARAMS = {"w": RNG.standard_normal((8, 8, 3, 3)).astype("float32"),
          "var": (RNG.random(8) + 0.5).astype("float32"),
          "mean": RNG.standard_normal(8).astype("float32"),
          "gamma": RNG.standard_normal(8).astype("float32")}
X = RNG.standard_normal((1, 8, 6, 6)).astype("float32")


def op_calls(mod) -> list[str]:
    names = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: names.append(e.op.name)
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return names


def run(mod):
    ex = tvm.compile(mod, target="llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(X)).numpy()


def test_weight_chains_fold_to_constants_with_identical_results():
    imported = bmlib_relax.import_relay(SIMPLIFIED_BN, PARAMS)
    folded = fold_constants(imported)
    assert sorted(op_calls(folded)) == ["relax.add", "relax.multiply", "relax.nn.conv2d",
                                        "relax.nn.relu"]
    assert len(op_calls(imported)) == 12
    np.testing.assert_allclose(run(folded), run(imported), rtol=1e-6, atol=1e-6)


def test_inputs_are_never_folded():
    imported = bmlib_relax.import_relay(SIMPLIFIED_BN)  # weights stay inputs
    assert op_calls(fold_constants(imported)) == op_calls(imported)


def test_builtin_table_offloads_the_folded_graph():
    model = bmlib_relax.compile(SIMPLIFIED_BN, PARAMS)
    report = model.report.to_dict()
    assert report["ops_host"] == {}
    # conv2d, add, relu: nothing left computing on weights, and the per-channel
    # scale folded into the conv weight (conv_fold)
    assert sum(report["ops_offloaded"].values()) == 3
    assert "multiply" not in report["ops_offloaded"] and "relax.multiply" not in report["ops_offloaded"]
    plain = run(bmlib_relax.import_relay(SIMPLIFIED_BN, PARAMS))
    np.testing.assert_allclose(model(X), plain, rtol=1e-5, atol=1e-5)


def test_legacy_tables_see_the_unfolded_graph():
    """Relay's MergeComposite saw reshape(constant): legacy variant 2 must still match."""
    model = bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params(),
                                patterns=[(seed.COMPOSITE_NAME, seed.pattern_constant_weights())])
    (part,) = model.report.to_dict()["partitions"]
    assert part["ops"][0] == "relax.reshape"
