"""Reductions, ``topk`` and ``unique`` where v0.19's type relation, kernel and the Relax
build disagreed (a probe against v0.19's reduce.cc / topi sources).

Each case here answered silently before: ``mean`` of bool wrote int64 values under a bool
type; ``topk`` with k above a run-time axis length returned uninitialised memory;
``unique`` merged NaNs v0.19 kept apart; ``axis=[]`` reduced nothing where v0.19 typed a
full reduction; a repeated axis, ``all`` of floats, an arg-reduction or variance over no
axis and a scan of a scalar ran where v0.19 refused them.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, RunCheckError

from .helpers import check, import_text, relay_fn


def refused(params: str, body: str, match: str) -> None:
    with pytest.raises(ConversionError, match=match):
        import_text(relay_fn(params, body))


@pytest.mark.parametrize("body", ["mean(%x, axis=[1])",
                                  "variance(%x, mean(%x, axis=[1], keepdims=True), axis=[1])"])
def test_mean_and_variance_of_bool_are_refused(body):
    refused("%x: Tensor[(2, 3), bool]", body, "of a bool tensor")


def test_topk_k_above_a_run_time_axis_length_is_a_run_check():
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(?, 3), float32]", "topk(%x, k=3, axis=0)"))
    with pytest.raises(RunCheckError, match="k=3 is more than the 2 entries on axis 0"):
        model(np.array([[3, 1, 2], [0, 5, 5]], "float32"))
    x = np.array([[3, 1, 2], [0, 5, 5], [1, 1, 9]], "float32")
    values, indices = model(x)
    np.testing.assert_array_equal(values, -np.sort(-x, axis=0))
    np.testing.assert_array_equal(np.take_along_axis(x, indices, 0), values)


def test_unique_with_nan_is_a_run_check_and_without_runs():
    model = bmlib_relax.compile(relay_fn("%x: Tensor[(4), float32]", "unique(%x)"))
    with pytest.raises(RunCheckError, match="every NaN as a distinct value"):
        model(np.array([1, np.nan, np.nan, 1], "float32"))
    values, _, inverse, num_unique = model(np.array([3, 1, 3, 2], "float32"))
    assert int(num_unique[0]) == 3
    np.testing.assert_array_equal(values[:3], [1, 2, 3])
    np.testing.assert_array_equal(inverse, [2, 0, 2, 1])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "bool"])
def test_unique_of_a_dtype_v019_could_not_sort_is_refused(dtype):
    refused(f"%x: Tensor[(4), {dtype}]", "unique(%x)", f"takes no {dtype} data")


@pytest.mark.parametrize("body", ["sum(%x, axis=[])", "mean(%x, axis=[])", "max(%x, axis=[])",
                                  "argmax(%x, axis=[])"])
def test_an_explicit_empty_axis_list_is_refused(body):
    refused("%x: Tensor[(2, 3), float32]", body, r"axis=\[\]: v0.19 typed")


def test_exclude_with_an_empty_axis_list_reduces_every_axis():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    check(relay_fn("%x: Tensor[(2, 3), float32]", "sum(%x, axis=[], exclude=True)"), [x],
          np.array(x.sum(), "float32"))


def test_a_repeated_axis_is_reduced_once_with_keepdims_and_refused_otherwise():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    params = "%x: Tensor[(2, 3), float32]"
    check(relay_fn(params, "sum(%x, axis=[1, -1], keepdims=True)"), [x],
          x.sum(1, keepdims=True))
    refused(params, "sum(%x, axis=[1, -1])", "axis 1 is listed twice")
    refused(params, "mean(%x, axis=[1, 1], keepdims=True)", "axis 1 is listed twice")
    refused(params, "argmax(%x, axis=[1, 1])", "axis 1 is listed twice")


@pytest.mark.parametrize("params, body, match", [
    ("%x: Tensor[(2, 3), float32]", "all(%x)", "all of a float32 tensor"),
    ("%x: Tensor[(2, 3), int32]", "any(%x, axis=[0])", "any of a int32 tensor"),
    ("%x: float32", "argmax(%x)", "reduces no axis"),
    ("%x: Tensor[(2, 3), float32]", "argmin(%x, axis=[0, 1], exclude=True)", "reduces no axis"),
    ("%x: float32", "variance(%x, %x)", "reduces no axis"),
    ("%x: float32", "cumsum(%x)", "of a 0-d tensor"),
])
def test_what_v019_refused_to_type_is_refused(params, body, match):
    refused(params, body, match)
