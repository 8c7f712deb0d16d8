"""A reshape whose element counts match only for some run-time dims checks them when
the model runs.

``reshape(%x: Tensor[(?, 4)], newshape=[3, 4])`` or ``reshape_like`` to a ``?``-shaped
operand imported as a view of the new shape: an input of another count read past its
buffer (a (1000, 4) result from 12 elements) or silently dropped its tail.  v0.19's
ReshapeRel unified the counts, and ``dyn.reshape`` here already checked them.

Two other run-time sizes of the same probe: ``arange`` to a run-time integer ``stop``
counts in int64 (float64 was off past 2^53), and a ``one_hot`` depth past int32 is
refused (it wrapped: 2^32 + 3 made a depth of 3).
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


@pytest.mark.parametrize("start, step, stop, want", [
    (0, 2 ** 54, 2 ** 55 + 1, [0, 2 ** 54, 2 ** 55]),
    (2 ** 53 + 1, 1, 2 ** 53 + 3, [2 ** 53 + 1, 2 ** 53 + 2]),
    (10, -3, 0, [10, 7, 4, 1]),
])
def test_arange_to_a_run_time_integer_stop_counts_in_int64(start, step, stop, want):
    # v0.19's _arange_shape_func divided in int64; through float64 the length was off
    # past 2^53 (2 elements for 3, 4 for 2).
    model = bmlib_relax.compile(HEADER + f'''def @main(%b: int64) {{
  arange({start}i64, %b, {step}i64, dtype="int64")
}}
''', {})
    np.testing.assert_array_equal(model(b=np.array(stop, "int64")), want)


def test_one_hot_depth_past_int32_is_refused_not_wrapped():
    text = HEADER + '''def @main(%i: Tensor[(3), int32]) {
  one_hot(%i, 1f, 0f, depth=4294967299, axis=-1, dtype="float32")
}
'''
    with pytest.raises(bmlib_relax.ConversionError, match=r"depth=4294967299: one_hot takes "
                                                          r"a depth below 2\^31"):
        bmlib_relax.compile(text, {})
