"""Templates for the integer ops of imported QNN arithmetic (issue #18).

The importer writes Relay's QNN canonicalization as plain Relax ops; the ones
no other family covers are the fixed-point requantize shifts
(``left_shift``/``right_shift`` in int64; ``where(x >= 0, ...)`` for
``TONEAREST`` and quantize's ``round`` are in :mod:`.select` and
:mod:`.elemwise`).  Each is TOPI's own element-wise compute, so the integer
semantics are TVM's (arithmetic right shift, round half to even), the same as
the plain build's.
"""
from __future__ import annotations

from tvm import topi

from ._utils import elementwise_template
from .registry import register_template

_ELEMENTWISE = {
    "relax.left_shift": topi.left_shift,
    "relax.right_shift": topi.right_shift,
}



for _name, _fn in _ELEMENTWISE.items():
    register_template(_name)(elementwise_template(_fn))
