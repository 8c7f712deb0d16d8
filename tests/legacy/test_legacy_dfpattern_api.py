"""The rest of Relay's DFPattern API, translated to Relax DPL and used to partition."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.backend.legacy_patterns import PatternTranslationError, translate
from bmlib_relax.relay.dataflow_pattern import (
    dominates, has_dtype, is_constant, is_expr, is_op, is_tuple, is_tuple_get_item, is_var,
    wildcard,
)

MODEL = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32], %b: Tensor[(4), float32]) {
  %0 = nn.dense(%x, %w, units=4);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  %3 = (%2, %2);
  %4 = concatenate(%3, axis=1);
  nn.leaky_relu(%4, alpha=0.1f)
}
"""
RNG = np.random.default_rng(7)
PARAMS = {"w": RNG.standard_normal((4, 8)).astype("float32"),
          "b": RNG.standard_normal(4).astype("float32")}
X = RNG.standard_normal((2, 8)).astype("float32")


def reference(x):
    y = np.maximum(x @ PARAMS["w"].T + PARAMS["b"], 0)
    y = np.concatenate([y, y], axis=1)
    return np.where(y > 0, y, 0.1 * y)


def composites(model) -> list[str]:
    return sorted(c for p in model.report.to_dict()["partitions"] for c in p["composites"])


def compile_with(*entries):
    model = bmlib_relax.compile(MODEL, PARAMS, patterns=list(entries))
    np.testing.assert_allclose(model(X), reference(X), rtol=1e-5, atol=1e-5)
    return model


def test_optional_matches_with_and_without_the_tail():
    dense = is_op("nn.dense")(wildcard(), is_constant())
    with_bias = dense.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
    model = compile_with(("bmlib.dense_opt_bias", is_op("nn.relu")(with_bias)))
    assert composites(model) == ["bmlib.dense_opt_bias"]
    (part,) = model.report.to_dict()["partitions"]
    assert part["ops"].count("relax.matmul") == 1 and "relax.add" in part["ops"]


def test_alternatives_and_attributes():
    act = is_op("nn.relu")(wildcard()) | is_op("nn.leaky_relu")(wildcard()).has_attr({"alpha": 0.1})
    model = compile_with(("bmlib.act", act))
    assert composites(model) == ["bmlib.act", "bmlib.act"]


def test_attribute_mismatch_leaves_op_on_host():
    model = compile_with(("bmlib.leaky", is_op("nn.leaky_relu")(wildcard()).has_attr({"alpha": 0.2})))
    assert composites(model) == []
    assert model.report.to_dict()["ops_host"].get("relax.nn.leakyrelu") == 1


def test_tuple_and_types():
    cat = is_op("concatenate")(is_tuple([wildcard(), wildcard()]))
    typed = cat.has_type(relay.TensorType((2, 8), "float32"))
    model = compile_with(("bmlib.cat", typed))
    assert composites(model) == ["bmlib.cat"]
    wrong = cat.has_shape((2, 9))
    assert composites(compile_with(("bmlib.cat", wrong))) == []
    assert composites(compile_with(("bmlib.relu", has_dtype("float32", is_op("nn.relu")(wildcard()))))) \
        == ["bmlib.relu"]


def test_var_pattern_names_the_input():
    model = compile_with(("bmlib.dense_x", is_op("nn.dense")(is_var("x"), wildcard())))
    assert composites(model) == ["bmlib.dense_x"]
    assert composites(compile_with(("bmlib.dense_y", is_op("nn.dense")(is_var("y"), wildcard())))) == []


@pytest.mark.parametrize("pattern, message", [
    (dominates(wildcard(), wildcard(), wildcard()), "dominates(...) has no Relax DPL equivalent"),
    (is_expr(relay.var("x")), "is_expr(Var) cannot match the imported Relax program"),
    (is_op("nn.relu"), "is_op('nn.relu') must be called with its arguments"),
])
def test_untranslatable_patterns_say_why(pattern, message):
    with pytest.raises(PatternTranslationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        translate(pattern)


def test_tuple_get_item_any_index():
    bn = is_op("nn.batch_norm")(wildcard(), wildcard(), wildcard(), wildcard(), wildcard())
    assert "TupleGetItemPattern" in type(translate(is_tuple_get_item(bn))).__name__


def test_is_expr_of_a_constant_matches_by_value():
    scaled = is_op("multiply")(wildcard(), is_expr(relay.const(0.5)))
    text = MODEL.replace("nn.leaky_relu(%4, alpha=0.1f)", "multiply(%4, 0.5f)")
    model = bmlib_relax.compile(text, PARAMS, patterns=[("bmlib.half", scaled)])
    assert composites(model) == ["bmlib.half"]
    other = is_op("multiply")(wildcard(), is_expr(relay.const(0.25)))
    model = bmlib_relax.compile(text, PARAMS, patterns=[("bmlib.quarter", other)])
    assert composites(model) == []
