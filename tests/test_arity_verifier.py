"""The arity verifier catches a PrimFunc whose signature differs from its call."""
from __future__ import annotations

import pytest
from tvm import relax

import bmlib_relax
from bmlib_relax.backend import codegen
from bmlib_relax.backend.partition import resolve_patterns
from bmlib_relax.compiler import lower_and_verify
from bmlib_relax.errors import ArityMismatchError
from bmlib_relax.examples import seed
from bmlib_relax.relay import parse


def _partitioned(bind_constants: bool):
    imported = bmlib_relax.import_relay(parse(seed.SEED_RELAY), seed.seed_params())
    patterns = resolve_patterns([(seed.COMPOSITE_NAME, seed.pattern_all_wildcards())])
    return relax.transform.FuseOpsByPattern(patterns, bind_constants=bind_constants,
                                            annotate_codegen=True)(imported)


class RelayStyleLowerer(codegen.PartitionLowerer):
    """Lowers like the Relay-era bmlib codegen: from the inner composite.

    It makes one placeholder per composite parameter and one per constant bound
    inside the composite, which is not what the partition is called with.
    """

    def lowered_function(self):
        return next(b.value for b in self.func.body.blocks[0].bindings
                    if isinstance(b.value, relax.Function))

    def signature(self):
        composite = self.lowered_function()
        self.constant_vars = [(c, relax.Var(f"const{i}", c.ty))
                              for i, c in enumerate(_constants(composite))]
        return list(composite.params) + [var for _, var in self.constant_vars]

    def _eval(self, expr, env):
        for const, var in getattr(self, "constant_vars", []):
            if expr.same_as(const):
                return env[var]
        return super()._eval(expr, env)


def test_relay_style_signature_is_rejected_before_build(monkeypatch):
    """Rebuild Relay's mistake with the weights bound into the composite.

    The partition is called with one argument (``data``) plus one output, but
    the Relay-style lowering makes 1 + 6 constant placeholders plus the output:
    the verifier must name the partition and both counts at compile time.
    """
    mod = _partitioned(bind_constants=True)
    monkeypatch.setattr(codegen, "PartitionLowerer", RelayStyleLowerer)
    with pytest.raises(ArityMismatchError) as info:
        lower_and_verify(mod)
    err = info.value
    assert err.partition.startswith("fused_relax_reshape")
    assert (err.expected, err.actual) == (2, 8)
    assert f"partition {err.partition!r}: PrimFunc takes 8 arguments but its call passes 2" \
        in str(err)


def _constants(func):
    found = []

    def visit(expr):
        if type(expr).__name__ == "GenericConst":
            found.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return found


def test_partition_signature_matches_call_by_construction():
    mod = _partitioned(bind_constants=False)
    lowered = lower_and_verify(mod)
    ((prim, record),) = lowered.values()
    assert record.num_args == len(prim.params) == 8
