"""A compile leaves nothing of itself behind once its model is dropped.

Passes written as Python ``PyExprMutator`` subclasses live partly in TVM objects, and
Python's garbage collector cannot see a reference cycle that runs through one.  The
twin rebuilders of the layout passes held their ``Substitute`` mutator, whose lookup
was a method of the rebuilder: every compile kept its rebuilder -- the BlockBuilder and
every weight constant it made -- for the life of the process (ResNet-18: ~100 MB a
compile, found in a process that compiled models in a loop).
"""
from __future__ import annotations

import collections
import gc
import weakref

import bmlib_relax
from bmlib_relax.backend import blocked_layout
from bmlib_relax.backend.layout import convert_nhwc_to_nchw
from bmlib_relax.backend.fold import fold_constants
from bmlib_relax.backend.target import resolve_target
from bmlib_relax.importer import provenance
from bmlib_relax.relay import parse

from conftest import offloaded_partitions

from test_layout import NHWC, PARAMS, X


def _live_project_objects() -> collections.Counter:
    gc.collect()
    counts = collections.Counter()
    for obj in gc.get_objects():
        module = getattr(type(obj), "__module__", None)
        if isinstance(module, str) and module.startswith("bmlib_relax") and \
                not isinstance(obj, type):
            counts[f"{module}.{type(obj).__qualname__}"] += 1
    return counts


def test_compiling_again_and_again_keeps_no_pass_objects(monkeypatch):
    # Without the bounded cache of recent imports' Relay views (its own test covers it).
    monkeypatch.setattr(provenance, "_RECENT", collections.deque(maxlen=0))
    model = bmlib_relax.compile(NHWC, PARAMS)
    assert offloaded_partitions(model.relax_module)
    model(X)
    del model
    before = _live_project_objects()
    for _ in range(2):
        model = bmlib_relax.compile(NHWC, PARAMS)
        model(X)
        del model
    grown = _live_project_objects() - before
    assert not grown, f"left alive by compile: {dict(grown)}"


def test_a_twin_rebuilder_is_freed_after_its_run():
    func = fold_constants(convert_nhwc_to_nchw(bmlib_relax.import_relay(parse(NHWC), PARAMS)))
    rebuilder = blocked_layout._BlockedConverter(func["main"], resolve_target(None))
    assert rebuilder.run() is not None  # it converted something (and substituted)
    gone = weakref.ref(rebuilder)
    del rebuilder
    gc.collect()
    assert gone() is None
