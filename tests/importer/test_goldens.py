"""Every Relay-path golden (a real TVM Relay build's outputs) reproduced by the importer."""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax import ConversionError, import_relay
from bmlib_relax.relay import ast
from bmlib_relax.relay.analysis import post_order_list
from bmlib_relax.relay.rewrite import substitute

from conftest import DATA, Golden, parse_golden, restore_printed_scalars, run_plain

CASES = sorted(p.name for p in DATA.iterdir() if (p / "manifest.json").exists())


def _fill_unprinted_metadata(golden: Golden, module: ast.IRModule) -> ast.IRModule:
    """Supply the value ``op_take``'s text lost (printed with show_meta_data=False).

    Its indices are ``meta[relay.Constant][0]`` (3 int32 values), which no printed
    type can give back; each expected row equals exactly one input row, which gives
    the indices.  (``op_split``'s boxed ``indices_or_sections`` are recovered by the
    parser from the printed types: see ``parse_golden``.)
    """
    func = module["main"]
    mapping = {}
    for node in post_order_list(func):
        if golden.name == "op_take" and isinstance(node, ast.Constant) and node.data is None:
            (data,) = golden.inputs().values()
            (expected,) = golden.expected()
            rows = [int(np.flatnonzero((data == row).all(axis=1))[0]) for row in expected]
            mapping[node] = ast.Constant(np.array(rows, "int32"), span=node.span)
    if not mapping:
        return module
    return ast.IRModule({"main": substitute(func, mapping)})


@pytest.mark.parametrize("case", CASES)
def test_golden_matches_relay_build(case):
    golden = Golden(DATA / case)
    module = restore_printed_scalars(case, parse_golden(golden))
    params = golden.params()
    filled = _fill_unprinted_metadata(golden, module)
    if filled is not module:
        # Without the values, the import names what is missing instead of guessing.
        with pytest.raises(ConversionError, match=r"meta\[.*\]\[\d+\] has no value"):
            import_relay(module, params)
    mod = import_relay(filled, params)
    inputs = golden.inputs()
    names = [p.name for p in mod["main"].params]
    assert sorted(names) == sorted(inputs)
    out = run_plain(mod, [inputs[n] for n in names])
    outs = out if isinstance(out, list) else [out]
    expected = golden.expected()
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **golden.tolerance)
