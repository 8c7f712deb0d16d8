"""Type inference of the Relay builder on inputs its Python rules were not written for:
a type error naming the op, as Relay's C++ relations gave, never a raw Python error or
a shape with a negative or fractional dim (found by fuzzing the builder API)."""
from __future__ import annotations

import pytest

from bmlib_relax import relay
from bmlib_relax.errors import RelayTypeError


def _infer(body, *params):
    body = body.astuple() if hasattr(body, "astuple") else body
    mod = relay.IRModule.from_expr(relay.Function(list(params), body))
    return relay.transform.InferType()(mod)["main"].body.checked_type


X = relay.var("x", shape=(4, 6))
IMAGE = relay.var("image", shape=(1, 4, 8, 8))
BOGUS = relay.var("b", shape=(2,), dtype="bogus")
HUGE = relay.var("h", shape=(2**63,))
FRACTIONAL = relay.var("f", shape=(1.5, 3))
SQUARE = relay.var("s", shape=(2**40, 2**40))


@pytest.mark.parametrize("op, build, params, message", [
    # raw Python errors of the rules before
    ("nn.conv2d", lambda: relay.nn.conv2d(IMAGE, relay.var("w"), kernel_size=3, channels=4,
                                          groups=0), [IMAGE], "cannot infer the type of an "
                                                              "argument"),  # ZeroDivisionError
    ("split", lambda: relay.split(relay.Tuple([X, X]), 2), [X], "TupleType"),  # AttributeError
    ("nn.upsampling", lambda: relay.nn.upsampling(IMAGE, scale_h=float("inf"), scale_w=2),
     [IMAGE], "infinity"),                                                    # OverflowError
    ("nn.relu", lambda: relay.nn.relu(BOGUS), [BOGUS], "unknown dtype"),     # TVM's ValueError
    ("nn.relu", lambda: relay.nn.relu(HUGE), [HUGE], None),                  # TVM's TypeError
    ("reshape", lambda: relay.reshape(SQUARE, [-1]), [SQUARE], "past int64"),  # was (0,)
    # shapes with a negative or fractional dim before
    ("arange", lambda: relay.arange(relay.const(5.0), relay.const(0.0), relay.const(1.0)), [],
     r"arange\(5.0, 0.0, 1.0\) has no elements"),  # v0.19's ArangeRel: more than 0
    ("nn.pad", lambda: relay.nn.pad(X, [(-5, -5), (0, 0)]), [X], r"negative dim -6"),
    ("repeat", lambda: relay.repeat(X, -1, 0), [X], r"repeats=-1 must be at least 1"),
    ("nn.relu", lambda: relay.nn.relu(FRACTIONAL), [FRACTIONAL], r"non-integer dim 1.5"),
])
def test_degenerate_inputs_are_type_errors_naming_the_op(op, build, params, message):
    with pytest.raises(RelayTypeError, match=message) as info:
        _infer(build(), *params)
    assert info.value.op == op


def test_a_dim_written_as_a_name_infers_through_expressions():
    """``Tensor[(n, 6)]`` (a name, as the parser reads it) through ops whose result dims
    are expressions of it: the name could not be rebuilt into one (AttributeError)."""
    mod = relay.parse('#[version = "0.0.5"]\n'
                      'def @main(%x: Tensor[(n, 6), float32]) { reshape(%x, newshape=[-1]) }')
    (dim,) = relay.transform.InferType()(mod)["main"].body.checked_type.shape
    assert "n" in str(dim) and "6" in str(dim)
    image = relay.var("image", shape=("n", 4, 8, 8))
    conv = relay.nn.conv2d(image, relay.var("w", shape=(4, 4, 3, 3)), padding=1)
    assert _infer(conv, image).shape == ("n", 4, 8, 8)
