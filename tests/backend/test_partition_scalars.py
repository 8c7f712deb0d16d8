"""Scalar arguments bound into bmlib partitions (``backend/partition_scalars.py``) in a
module that also holds TIR PrimFuncs: the ops TVM has no Relax operator for are
imported through ``call_te`` (``sliding_window``, ``reinterpret``,
``image.crop_and_resize`` ...), and the rewrite of the partitions' call sites must pass
those PrimFuncs by (it visited them as Relax functions: a raw TVM ``InternalError``
stopped the compile of any such model with a scalar-taking partition)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax.relay import parse
from conftest import offloaded_partitions

from importer.helpers import relay_fn


@pytest.mark.parametrize("te_op, reference", [
    ("sliding_window(%x, axis=0, window_shape=[2], strides=[2])", lambda x: x.reshape(2, 2)),
    ("reinterpret(%x, dtype=\"int32\")", lambda x: x.view("int32")),
])
def test_a_te_lowered_op_beside_a_partition_with_scalar_arguments(te_op, reference):
    text = relay_fn("%x: Tensor[(4), float32], %y: Tensor[(4), float32]",
                    f"({te_op}, add(%y, 1f), multiply(%y, 3f))")
    model = bmlib_relax.compile(parse(text, "scalars.relay"))
    assert offloaded_partitions(model.relax_module)
    assert any(isinstance(f, tvm.tirx.PrimFunc)
               for f in model.relax_module.functions.values())
    x, y = np.arange(4, dtype="float32"), np.array([1, -2, 3, 0.5], "float32")
    te_out, added, multiplied = model(x, y)
    np.testing.assert_array_equal(te_out, reference(x))
    np.testing.assert_array_equal(added, y + 1)
    np.testing.assert_array_equal(multiplied, y * 3)
