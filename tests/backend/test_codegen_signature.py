"""The ``relax.ext.bmlib`` codegen checks every PrimFunc against its partition function.

On the Relax-native path (``partition_for_bmlib`` → ``RunCodegen`` →
``tvm.compile``, no ``bmlib_relax.compile``) nothing else compares the built
PrimFunc with the call: a lowering that added an output or changed a shape
would build and fail only at run time.  These tests break a template on
purpose and expect the build itself to fail, naming the partition.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, te, topi

from bmlib_relax import partition_for_bmlib
from bmlib_relax.backend.templates.registry import TEMPLATES, get_template
from bmlib_relax.compiler import lower_and_verify
from bmlib_relax.errors import ArityMismatchError, CodegenError, SignatureMismatchError

from conftest import offloaded_partitions
from helpers import make_module, run, run_plain


def _relu_module():
    return make_module(lambda x: relax.op.nn.relu(x), [(1, 4, 6, 6)])


def _plain_native_build(mod):
    """The Relax-native path the README names, without bmlib_relax.compile."""
    partitioned = partition_for_bmlib(mod)
    assert offloaded_partitions(partitioned)
    with_ext = relax.transform.RunCodegen()(partitioned)
    return partitioned, tvm.compile(with_ext, target="llvm")


@pytest.fixture
def patched_relu(monkeypatch):
    """Replace the relu template for one test (restored afterwards)."""
    original = get_template("relax.nn.relu")

    def patch(fn):
        monkeypatch.setitem(TEMPLATES._entries, "relax.nn.relu", fn)

    yield original, patch


def test_native_path_builds_and_matches_plain():
    mod, arrays = _relu_module()
    _, executable = _plain_native_build(mod)
    np.testing.assert_allclose(run(executable, arrays)[0], run_plain(mod, arrays)[0])


def test_template_adding_an_output_fails_the_native_build(patched_relu):
    original, patch = patched_relu

    def relu_with_extra_output(call, inputs, ctx):
        out = original(call, inputs, ctx)
        return out, topi.identity(out)

    patch(relu_with_extra_output)
    mod, _ = _relu_module()
    with pytest.raises(ArityMismatchError) as info:
        _plain_native_build(mod)
    err = info.value
    assert err.partition.startswith("fused_relax_nn_relu")
    assert (err.expected, err.actual) == (2, 3)
    assert "declares 1 parameter(s) and 1 output(s), the PrimFunc has 2 output buffer(s)" \
        in str(err)


def test_template_with_a_wrong_output_shape_fails_the_native_build(patched_relu):
    original, patch = patched_relu

    def relu_wrong_shape(call, inputs, ctx):
        out = original(call, inputs, ctx)
        return te.compute((1, 4, 6, 5), lambda n, c, y, x: out[n, c, y, x], name="cut")

    patch(relu_wrong_shape)
    mod, _ = _relu_module()
    with pytest.raises(SignatureMismatchError) as info:
        _plain_native_build(mod)
    message = str(info.value)
    assert info.value.partition.startswith("fused_relax_nn_relu")
    assert "argument 1 (output 0) is (1, 4, 6, 5) float32" in message
    assert "declares (1, 4, 6, 6) float32" in message


def test_template_with_a_wrong_output_dtype_fails_the_native_build(patched_relu):
    original, patch = patched_relu
    patch(lambda call, inputs, ctx: topi.cast(original(call, inputs, ctx), "float16"))
    mod, _ = _relu_module()
    with pytest.raises(SignatureMismatchError, match=r"\(output 0\) is \(1, 4, 6, 6\) float16"):
        _plain_native_build(mod)


def test_template_adding_an_output_fails_lower_and_verify_too(patched_relu):
    """The compile() path checks the same thing before it reaches RunCodegen."""
    original, patch = patched_relu
    patch(lambda call, inputs, ctx: (original(call, inputs, ctx),) * 2)
    mod, _ = _relu_module()
    with pytest.raises(ArityMismatchError, match="fused_relax_nn_relu"):
        lower_and_verify(partition_for_bmlib(mod))


def test_other_codegen_errors_keep_their_type_through_run_codegen(patched_relu):
    _, patch = patched_relu

    def broken(call, inputs, ctx):
        raise ctx.error("no luck")

    patch(broken)
    mod, _ = _relu_module()
    with pytest.raises(CodegenError, match="op relax.nn.relu: no luck"):
        _plain_native_build(mod)
