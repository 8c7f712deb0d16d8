"""Reductions: axis / keepdims / exclude, and argmax's int32 result."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import run_beside_offloaded_relu

from .helpers import check, import_text, rand, relay_fn, run_relay

X = "%x: Tensor[(2, 3, 4, 5), float32]"
NP = {"mean": np.mean, "sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("op", sorted(NP))
@pytest.mark.parametrize("attrs,axis,keepdims", [
    ("", None, False),
    ("axis=[1]", (1,), False),
    ("axis=[2, 3], keepdims=True", (2, 3), True),
    ("axis=[-1, 0]", (0, 3), False),
    ("axis=[1], exclude=True", (0, 2, 3), False),
    ("axis=[0, 1], keepdims=True, exclude=True", (2, 3), True),
])
def test_reduce(op, attrs, axis, keepdims):
    x = rand(2, 3, 4, 5, low=0.5, high=1.5)
    body = f"{op}(%x, {attrs})" if attrs else f"{op}(%x)"
    check(relay_fn(X, body), [x], NP[op](x, axis=axis, keepdims=keepdims), rtol=1e-4,
          atol=1e-5)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("attrs,axis,keepdims", [
    ("axis=[1]", 1, False), ("axis=[-1], keepdims=True", 3, True), ("", None, False),
])
def test_arg_reduce_is_int32(op, attrs, axis, keepdims):
    x = rand(2, 3, 4, 5)
    body = f"{op}(%x, {attrs})" if attrs else f"{op}(%x)"
    ref = getattr(np, op)(x, axis=axis, keepdims=keepdims).astype("int32")
    out = check(relay_fn(X, body), [x], ref)
    assert out.dtype == np.int32


@pytest.mark.parametrize("body", [
    "mean(%x, axis=[2])", "mean(%x)", "nn.global_avg_pool2d(%x)",
    "nn.adaptive_avg_pool2d(%x, output_size=[1, 1])",
    "variance(%x, mean(%x, axis=[2], keepdims=True), axis=[2])",
])
def test_an_average_over_an_empty_axis_is_named(body):
    # its divisor is a constant 0, which TVM's build refuses (Relay's stopped there too)
    from bmlib_relax import ConversionError
    with pytest.raises(ConversionError, match=r"averages over axis \d of extent 0") as info:
        import_text(relay_fn("%x: Tensor[(1, 8, 0, 7), float32]", body))
    assert info.value.location.startswith("snippet.relay:3:")


def test_an_average_of_a_non_empty_axis_of_an_empty_tensor_runs():
    x = np.ones((1, 8, 0, 7), "float32")
    check(relay_fn("%x: Tensor[(1, 8, 0, 7), float32]", "mean(%x, axis=[1])"), [x],
          x.mean(axis=1))


def test_an_unbiased_variance_of_one_element_is_named():
    from bmlib_relax import ConversionError
    body = "variance(%x, mean(%x, axis=[1], keepdims=True), axis=[1], unbiased=True)"
    with pytest.raises(ConversionError, match=r"unbiased variance over 1 element"):
        import_text(relay_fn("%x: Tensor[(3, 1), float32]", body))


EMPTY = "%x: Tensor[(3, 0, 4), float32]"


@pytest.mark.parametrize("op, attrs, axis, keepdims", [
    ("sum", "axis=[1]", 1, False), ("sum", "", None, False),
    ("prod", "axis=[1], keepdims=True", 1, True), ("sum", "axis=[0], exclude=True", (1, 2), False),
])
def test_a_sum_or_product_over_an_empty_axis_is_its_identity(op, attrs, axis, keepdims):
    # TVM's reduction loops initialise inside the loop over the reduced axis: over an
    # empty axis the result was the output buffer's old contents (4.5e33 on bmlib)
    from bmlib_relax import relay

    module = import_text(relay_fn(EMPTY, f"{op}(%x, {attrs})" if attrs else f"{op}(%x)"))
    assert f"R.{op}" not in module.script()  # no reduction left to run over nothing
    x = np.ones((3, 0, 4), "float32")
    y = relay.var("y", shape=(3, 0, 4))
    kwargs = {"axis": [1] if axis == 1 else [0] if axis == (1, 2) else None,
              "keepdims": keepdims, **({"exclude": True} if axis == (1, 2) else {})}
    [out] = run_beside_offloaded_relu([relay.var("r", shape=(4,)), y],
                                      [getattr(relay, op)(y, **kwargs)],
                                      [rand(4), x])
    np.testing.assert_array_equal(out, getattr(np, op)(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("op, expected", [("all", True), ("any", False)])
def test_all_and_any_of_an_empty_axis(op, expected):
    text = relay_fn("%x: Tensor[(2, 0), bool]", f"{op}(%x, axis=[1])")
    out = run_relay(text, np.ones((2, 0), bool))
    assert out.dtype == bool and out.tolist() == [expected, expected]


@pytest.mark.parametrize("body", ["max(%x, axis=[1])", "min(%x)", "argmax(%x, axis=[1])",
                                  "argmin(%x, axis=[0, 2], exclude=True)"])
def test_an_extremum_of_an_empty_axis_is_named(body):
    # no identity to return (numpy refuses too; Relay returned -3.4e38 or an index -1)
    from bmlib_relax import ConversionError
    with pytest.raises(ConversionError, match=r"reduces over axis 1 of extent 0 .*"
                                              r"of no element has no value") as info:
        import_text(relay_fn(EMPTY, body))
    assert info.value.location.startswith("snippet.relay:3:")
