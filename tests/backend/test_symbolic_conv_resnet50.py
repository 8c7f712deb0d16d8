"""The corpus's TensorFlow ResNet-50 (NHWC, batch ``?``) compiled without pinning (#14).

One unpinned build offloads at least 90 % of the model's ops, and its outputs at
batch 1 and batch 3 equal those of builds pinned to 1 and to 3.  The whole model
(three builds, ~45 s on 2 cores) is marked slow; a sub-network of the same dump
(stem, max pool and the first bottleneck block with its projection shortcut) is
the fast check of the same claims.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.bench.models import load_model
from bmlib_relax.recipe import recipe_tensor

from conftest import corpus_dir, offloaded_partitions

INPUT = "input_tensor"
CONV_OPS = ("relax.nn.conv2d", "relax.nn.max_pool2d")


@pytest.fixture(scope="module")
def resnet50_tf():
    return load_model("resnet50_tf", None, corpus_dir())


def _first_block(text: str) -> str:
    """The dump up to the ReLU after the first residual add, returned from ``@main``
    (whose declared ``-> Tensor[(?, 1001), float32]`` no longer holds: dropped, as the
    importer checks a declared return type as Relay did)."""
    match = re.search(r"^  (%\d+) = nn\.relu\(.*/\* resnet_model/Relu_3 \*/.*$", text, re.M)
    assert match, "the dump's first bottleneck block was not found"
    head, count = re.subn(r"\) -> Tensor\[\(\?, 1001\), float32\] \{", ") {",
                          text[:match.end()], count=1)
    assert count == 1, "the dump's declared result type was not found"
    return head + f"\n  {match.group(1)}\n}}\n"


def _single(outputs):
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def _offloaded_fraction(report) -> float:
    host = sum(report.ops_host.values())
    return report.num_offloaded / (report.num_offloaded + host)


def _check_unpinned_against_pinned(text: str, params: dict, min_fraction: float):
    unpinned = bmlib_relax.compile(text, params)
    assert offloaded_partitions(unpinned.relax_module)
    assert isinstance(unpinned.report.inputs[0]["shape"][0], str)  # the batch stays free
    assert not set(unpinned.report.ops_host) & set(CONV_OPS), str(unpinned.report)
    assert _offloaded_fraction(unpinned.report) >= min_fraction, str(unpinned.report)
    assert not any(p.unscheduled for p in unpinned.report.partitions), str(unpinned.report)
    outputs = {}
    for batch in (1, 3):
        shape = (batch, 224, 224, 3)
        x = recipe_tensor(INPUT, shape, "float32", role="input")
        pinned = bmlib_relax.compile(text, params, input_shapes={INPUT: shape})
        assert offloaded_partitions(pinned.relax_module)
        got, want = _single(unpinned(x)), _single(pinned(x))
        assert got.shape == want.shape and got.shape[0] == batch
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
        outputs[batch] = got
    # Sample 0 is the same image at both batch sizes (recipe values are per element).
    np.testing.assert_allclose(outputs[3][:1], outputs[1], rtol=1e-5, atol=1e-6)
    return unpinned


def test_first_block_unpinned_matches_pinned(resnet50_tf):
    text = _first_block(resnet50_tf.text)
    model = _check_unpinned_against_pinned(text, resnet50_tf.params, 0.9)
    assert model.report.ops_offloaded["relax.nn.conv2d"] == 5


@pytest.mark.slow
def test_resnet50_tf_unpinned_offloads_90_percent_and_matches_pinned(resnet50_tf):
    model = _check_unpinned_against_pinned(resnet50_tf.text, resnet50_tf.params, 0.9)
    assert model.report.ops_offloaded["relax.nn.conv2d"] == 53
