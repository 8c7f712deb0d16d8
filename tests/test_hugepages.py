"""Weights placed on huge pages after a model's first call (structure only, never timing).

The placement may only change how memory is mapped: outputs stay identical, a
kernel that refuses costs nothing but a count in the report, and nothing happens
when it is turned off or cannot work.
"""
from __future__ import annotations

import ctypes
import errno
import struct
import sys

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import hugepages, relay
from bmlib_relax.hugepages import HUGE_PAGE_BYTES, blocks_to_collapse

from conftest import offloaded_partitions

MB = 1 << 20
UNITS, FEATURES = 2048, 512  # a 4 MiB weight: at least one whole 2 MiB block


def _dense_model(**kwargs):
    x = relay.var("x", shape=(1, FEATURES), dtype="float32")
    w = relay.var("w", shape=(UNITS, FEATURES), dtype="float32")
    weight = np.random.default_rng(0).standard_normal((UNITS, FEATURES)).astype("float32")
    model = bmlib_relax.compile(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))),
                                {"w": weight}, **kwargs)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    data = np.random.default_rng(1).standard_normal((1, FEATURES)).astype("float32")
    return model, data, np.maximum(data @ weight.T, 0)


def _huge_page_fraction(address: int, size: int) -> float:
    """Share of the present pages in [address, address + size) that are part of a
    transparent huge page (``/proc/kpageflags`` bit 22), or skip when unreadable."""
    try:
        pagemap = open("/proc/self/pagemap", "rb")
        flags = open("/proc/kpageflags", "rb")
    except OSError as exc:
        pytest.skip(f"page flags are not readable here: {exc}")
    huge = present = 0
    with pagemap, flags:
        for page in range(address >> 12, (address + size - 1 >> 12) + 1):
            pagemap.seek(page * 8)
            entry = struct.unpack("<Q", pagemap.read(8))[0]
            frame = entry & ((1 << 55) - 1)
            if not entry >> 63 or not frame:
                continue
            present += 1
            flags.seek(frame * 8)
            huge += struct.unpack("<Q", flags.read(8))[0] >> 22 & 1
    if not present:
        pytest.skip("page frames are hidden (no CAP_SYS_ADMIN)")
    return huge / present


# ----------------------------------------------------------------- which blocks
def test_blocks_cover_the_union_of_ranges_once():
    base = 64 * HUGE_PAGE_BYTES
    ranges = [(base + MB, 3 * MB),          # half of block 0, all of block 1
              (base + 2 * MB, 1 * MB),      # inside the first range: counted once
              (base + 5 * MB + MB // 2, MB // 4)]  # an eighth of block 2
    assert blocks_to_collapse(ranges) == [base, base + HUGE_PAGE_BYTES]
    assert blocks_to_collapse(ranges, min_coverage=MB // 4) == \
        [base, base + HUGE_PAGE_BYTES, base + 2 * HUGE_PAGE_BYTES]
    assert blocks_to_collapse([(base, 0)]) == []


def test_neighbouring_small_tensors_add_up_to_a_block():
    base = 8 * HUGE_PAGE_BYTES
    ranges = [(base + i * MB // 4, MB // 4) for i in range(8)]  # 8 x 256 KiB, back to back
    assert blocks_to_collapse(ranges, min_coverage=HUGE_PAGE_BYTES) == [base]


class _FakeVM:
    """A VM whose ``main`` hands the instrument the given tensors, as calls would."""

    def __init__(self, *calls):
        self.calls, self.instrument = calls, None

    def set_instrument(self, function):
        self.instrument = function

    def __getitem__(self, name):
        def main(*inputs):
            for args in self.calls if self.instrument else ():
                self.instrument(None, "call", True, None, *args)
                self.instrument(None, "call", False, None, *args)
            return "result"
        return main


def test_recording_keeps_big_tensors_once_and_leaves_out_the_inputs(monkeypatch):
    import tvm

    monkeypatch.delenv(hugepages.ENV_HUGE_PAGES, raising=False)
    monkeypatch.setattr(hugepages, "unavailable_reason", lambda *a: None)
    advised = []
    monkeypatch.setattr(hugepages, "_madvise",
                        lambda: lambda address, length, advice: advised.append(address) or 0)
    big = tvm.runtime.tensor(np.zeros((3 << 18,), "float32"))       # 3 MiB
    other = tvm.runtime.tensor(np.zeros((1 << 18,), "float32"))     # 1 MiB
    small = tvm.runtime.tensor(np.zeros((16,), "float32"))
    user_input = tvm.runtime.tensor(np.zeros((1 << 20,), "float32"))  # 4 MiB, but an input
    places = hugepages.HugePages()
    vm = _FakeVM((user_input, big, small), (big, other, "not a tensor"))
    assert places.run_recording(vm, [user_input]) == "result"
    assert vm.instrument is None  # taken off again
    report = places.wait(timeout=60)
    assert (report.tensors, report.tensor_bytes) == (2, 4 * MB)
    assert hugepages.tensor_range(big) == (np.from_dlpack(big).__array_interface__["data"][0],
                                           3 * MB)
    address, size = hugepages.tensor_range(user_input)
    assert not [a for a in advised if address <= a and a + HUGE_PAGE_BYTES <= address + size]
    assert places.run_recording(vm, [user_input]) == "result" and vm.instrument is None
    assert places.wait() is report  # recorded once


# ----------------------------------------------------------------- in a model
@pytest.mark.skipif(hugepages.unavailable_reason() is not None,
                    reason=f"huge pages unavailable: {hugepages.unavailable_reason()}")
def test_first_call_places_the_weight_on_huge_pages_and_changes_no_output(monkeypatch):
    monkeypatch.delenv(hugepages.ENV_HUGE_PAGES, raising=False)
    model, data, want = _dense_model()
    assert model.huge_pages.pending
    first = model(data)
    second = model(data)  # may run while the collapse is under way
    report = model.huge_pages.wait(timeout=120)
    assert report is not None and report.skipped is None, report
    assert report.blocks >= 1 and report.tensor_bytes >= UNITS * FEATURES * 4
    assert report.collapsed + sum(report.refused.values()) == report.blocks
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(first, second) and np.array_equal(first, model(data))
    if report.collapsed == 0:  # only for want of huge pages, never for a bad range
        assert set(report.refused) <= {"ENOMEM", "EAGAIN"}, report.summary()
        pytest.skip(f"the kernel had no huge page to give: {report.summary()}")
    # The weight as the partition sees it (packed at compile time): the largest tensor
    # any call touches; a whole 2 MiB block inside it is now one huge page.
    weight = max(_touched_tensors(model, data), key=lambda t: np.from_dlpack(t).nbytes)
    start = np.from_dlpack(weight).__array_interface__["data"][0]
    inner = -start % HUGE_PAGE_BYTES + start
    assert _huge_page_fraction(inner, HUGE_PAGE_BYTES) == 1.0


def _touched_tensors(model, data):
    import tvm

    touched = []

    def record(func, name, before_run, ret_value, *args):
        if before_run:
            touched.extend(a for a in args if isinstance(a, tvm.runtime.Tensor))
        return 0

    model._vm.set_instrument(record)
    try:
        model._vm["main"](tvm.runtime.tensor(data))
    finally:
        model._vm.set_instrument(None)
    return touched


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(hugepages.ENV_HUGE_PAGES, "0")
    model, data, want = _dense_model()
    assert not model.huge_pages.pending
    np.testing.assert_allclose(model.warm_up(data), want, rtol=1e-5, atol=1e-5)
    assert "turned off" in model.huge_pages.wait().skipped


def test_a_refusing_kernel_costs_a_count_not_an_error(monkeypatch):
    monkeypatch.delenv(hugepages.ENV_HUGE_PAGES, raising=False)
    monkeypatch.setattr(hugepages, "unavailable_reason", lambda *a: None)
    calls = []

    def refuse(address, length, advice):
        calls.append((address % HUGE_PAGE_BYTES, length, advice))
        ctypes.set_errno(errno.EAGAIN)
        return -1

    monkeypatch.setattr(hugepages, "_madvise", lambda: refuse)
    model, data, want = _dense_model()
    np.testing.assert_allclose(model.warm_up(data), want, rtol=1e-5, atol=1e-5)
    report = model.huge_pages.report
    assert report.collapsed == 0 and report.refused == {"EAGAIN": report.blocks} != {}
    assert calls and all(c == (0, HUGE_PAGE_BYTES, hugepages.MADV_COLLAPSE) for c in calls)
    assert "refused: " in report.summary() and "EAGAIN" in report.summary()


def test_nothing_is_tried_where_huge_pages_are_disabled(tmp_path, monkeypatch):
    monkeypatch.delenv(hugepages.ENV_HUGE_PAGES, raising=False)
    never = tmp_path / "enabled"
    never.write_text("always madvise [never]\n")
    assert "disabled" in hugepages.unavailable_reason(str(never))
    monkeypatch.setattr(hugepages, "unavailable_reason", lambda *a: "THP [never]")
    monkeypatch.setattr(hugepages, "_madvise", lambda: pytest.fail("madvise was called"))
    model, data, want = _dense_model()
    np.testing.assert_allclose(model.warm_up(data), want, rtol=1e-5, atol=1e-5)
    assert model.huge_pages.report.skipped == "THP [never]"
    assert "not used" in model.huge_pages.report.summary()


def test_a_model_that_asked_for_none_is_left_alone(monkeypatch):
    from bmlib_relax.runtime import ModelRunner

    model, data, want = _dense_model()
    plain = ModelRunner(model.executable, model.input_names, huge_pages=False)
    assert not plain.huge_pages.pending
    np.testing.assert_allclose(plain(data), want, rtol=1e-5, atol=1e-5)
    assert plain.huge_pages.wait().skipped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")
def test_a_block_of_unmapped_memory_is_refused_and_counted():
    """A real madvise on a block nothing is mapped at fails (ENOMEM) and is only counted."""
    report = hugepages.collapse([(0x10000 * HUGE_PAGE_BYTES, HUGE_PAGE_BYTES)])
    assert report.blocks == 1 and report.collapsed == 0
    assert set(report.refused) <= {"ENOMEM", "EINVAL", "EFAULT"}, report.refused


@pytest.mark.skipif(hugepages.unavailable_reason() is not None,
                    reason=f"huge pages unavailable: {hugepages.unavailable_reason()}")
def test_a_loaded_artifact_places_its_deserialised_weights_too(tmp_path, monkeypatch):
    """``load`` reads the constants back into TVM's own allocations: the same placement."""
    monkeypatch.delenv(hugepages.ENV_HUGE_PAGES, raising=False)
    model, data, want = _dense_model()
    model.export_library(tmp_path / "dense.so")
    loaded = bmlib_relax.load(tmp_path / "dense.so")
    assert loaded.huge_pages.pending
    np.testing.assert_allclose(loaded.warm_up(data), want, rtol=1e-5, atol=1e-5)
    report = loaded.huge_pages.report
    assert report.skipped is None and report.tensor_bytes >= UNITS * FEATURES * 4, report
    assert report.collapsed + sum(report.refused.values()) == report.blocks >= 1
