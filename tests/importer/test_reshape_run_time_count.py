"""A reshape whose element counts match only for some run-time dims checks them when
the model runs.

``reshape(%x: Tensor[(?, 4)], newshape=[3, 4])`` or ``reshape_like`` to a ``?``-shaped
operand imported as a view of the new shape: an input of another count read past its
buffer (a (1000, 4) result from 12 elements) or silently dropped its tail.  v0.19's
ReshapeRel unified the counts, and ``dyn.reshape`` here already checked them.
"""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.errors import RunCheckError

HEADER = '#[version = "0.0.5"]\n'


def test_reshape_of_a_run_time_dim_to_a_static_shape_checks_the_count():
    model = bmlib_relax.compile(HEADER + '''def @main(%x: Tensor[(?, 4), float32]) {
  reshape(%x, newshape=[3, 4])
}
''', {})
    x = np.arange(12, dtype="float32").reshape(3, 4)
    np.testing.assert_array_equal(model(x=x), x)
    for rows in (2, 10):
        with pytest.raises(RunCheckError, match=rf"reshape: the input of {rows * 4} elements "
                                                r"does not fit the new shape of 12"):
            model(x=np.zeros((rows, 4), "float32"))


def test_reshape_like_a_run_time_shape_checks_the_count():
    model = bmlib_relax.compile(HEADER + '''def @main(%x: Tensor[(2, 6), float32], %y: Tensor[(?, 4), float32]) {
  reshape_like(%x, %y)
}
''', {})
    x = np.arange(12, dtype="float32").reshape(2, 6)
    np.testing.assert_array_equal(model(x=x, y=np.zeros((3, 4), "float32")), x.reshape(3, 4))
    for rows in (2, 1000):
        with pytest.raises(RunCheckError, match=r"reshape_like: the input of 12 elements does "
                                                rf"not fit the new shape of {rows * 4}"):
            model(x=x, y=np.zeros((rows, 4), "float32"))


def test_a_reshape_whose_counts_always_match_has_no_check():
    from bmlib_relax import import_relay
    from bmlib_relax.relay import parse

    mod = import_relay(parse(HEADER + '''def @main(%x: Tensor[(?, 3, 4), float32]) {
  reshape(%x, newshape=[-1, 12])
}
'''))
    assert "assert_op" not in mod.script()
