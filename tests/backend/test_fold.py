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


def test_folding_nans_out_of_weights_is_a_suspicious_weight_warning(recwarn):
    """The SimplifyInference form of a batch_norm whose variance has a negative entry:
    sqrt makes its channel NaN, the relu after it a plausible 0.  ``nn.batch_norm``'s own
    check never sees this form; the folder names the Relay call that made the NaNs."""
    import pytest

    from bmlib_relax.errors import SuspiciousWeightWarning
    from bmlib_relax.relay import parse

    params = dict(PARAMS, var=PARAMS["var"].copy())
    params["var"][5] = -3.0
    with pytest.warns(SuspiciousWeightWarning, match=r"^bn.relay:6:\d+: sqrt of constants "
                                                     r"\(weights\) gives NaN in 1 of 8 "
                                                     r"entries \(first at index 5\)") as info:
        fold_constants(bmlib_relax.import_relay(parse(SIMPLIFIED_BN, "bn.relay"), params))
    assert [w.message.location for w in info if
            isinstance(w.message, SuspiciousWeightWarning)][0].startswith("bn.relay:6:")
    recwarn.clear()
    fold_constants(bmlib_relax.import_relay(parse(SIMPLIFIED_BN, "bn.relay"), PARAMS))
    assert not [w for w in recwarn if isinstance(w.message, SuspiciousWeightWarning)]
    nan = dict(params, var=np.full(8, np.nan, "float32"))  # NaNs in, NaNs out: no new news
    fold_constants(bmlib_relax.import_relay(parse(SIMPLIFIED_BN, "bn.relay"), nan))
    assert not [w for w in recwarn if isinstance(w.message, SuspiciousWeightWarning)]


def test_recipe_variances_found_by_use_are_made_positive():
    """Benchmarks and the corpus tests fill weights by recipe, which knows variances by
    name only: the one under ``sqrt(add(%var, eps))`` is found by its use."""
    from bmlib_relax.recipe import positive_variances
    from bmlib_relax.relay import parse

    negative = dict(PARAMS, var=-np.abs(PARAMS["var"]))
    fixed = positive_variances(parse(SIMPLIFIED_BN)["main"], negative)
    assert (fixed["var"] > 0).all() and fixed["var"].dtype == np.float32
    for name in ("w", "mean", "gamma"):
        assert fixed[name] is negative[name]
    assert (negative["var"] < 0).all()  # the caller's dict is left as it was
