"""Weights passed to Relax functions become constants inside them (backend/const_args.py)."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from bmlib_relax import import_relay
from bmlib_relax.backend.const_args import bind_constant_arguments
from bmlib_relax.relay import parse

TEXT = """#[version = "0.0.5"]
def @f(%x: Tensor[(2, 3), float32], %w: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  add(%x, %w)
}
def @g(%x: Tensor[(2, 3), float32], %w: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  multiply(@f(%x, %w), %w)
}
def @main(%x: Tensor[(2, 3), float32], %a: Tensor[(2, 3), float32], %b: Tensor[(2, 3), float32]) {
  (@f(%x, %a), @g(%x, %a), @g(%x, %b))
}
"""


def _run(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return [o.numpy() for o in vm["main"](tvm.runtime.tensor(x))]


def test_only_parameters_every_call_passes_one_constant_are_bound():
    rng = np.random.default_rng(0)
    a, b, x = (rng.standard_normal((2, 3)).astype("float32") for _ in range(3))
    mod = import_relay(parse(TEXT), {"a": a, "b": b})
    bound = bind_constant_arguments(mod)
    # @g is called with a and with b: it keeps %w, and passes it on to @f, so @f's
    # %w (a from main, %w from @g) is not one constant either.
    assert [p.name for p in bound["g"].params] == ["x", "w"]
    assert [p.name for p in bound["f"].params] == ["x", "w"]
    single = import_relay(parse(TEXT.replace("@g(%x, %b)", "@g(%x, %a)")), {"a": a, "b": b})
    bound_single = bind_constant_arguments(single)
    # Now every call of @g passes a, and @g passes it on to @f: both are bound.
    assert [p.name for p in bound_single["g"].params] == ["x"]
    assert [p.name for p in bound_single["f"].params] == ["x"]
    for before, after in ((mod, bound), (single, bound_single)):
        for want, got in zip(_run(before, x), _run(after, x)):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(_run(bound, x)[2], (x + b) * b, rtol=1e-6)
