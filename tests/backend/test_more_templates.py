"""Op families that used to stay on the host: each is offloaded and equals TVM's
own legalization of the same import (the plain build)."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax.relay import parse

from conftest import offloaded_partitions, run_plain

HEAD = '#[version = "0.0.5"]\n'

CASES = {
    "resize_linear": ("def @main(%x: Tensor[(1, 3, 5, 7), float32]) {"
                      " image.resize2d(%x, size=[9, 4], roi=[0f, 0f, 0f, 0f], method=\"linear\","
                      " coordinate_transformation_mode=\"half_pixel\") }", ["x"]),
    "resize_nearest_asym": ("def @main(%x: Tensor[(1, 2, 4, 4), float32]) {"
                            " image.resize2d(%x, size=[8, 8], roi=[0f, 0f, 0f, 0f],"
                            " method=\"nearest_neighbor\","
                            " coordinate_transformation_mode=\"asymmetric\","
                            " rounding_method=\"floor\") }", ["x"]),
    "resize_cubic_align": ("def @main(%x: Tensor[(1, 2, 5, 5), float32]) {"
                           " image.resize2d(%x, size=[7, 3], roi=[0f, 0f, 0f, 0f], method=\"cubic\","
                           " coordinate_transformation_mode=\"align_corners\") }", ["x"]),
    "upsampling": ("def @main(%x: Tensor[(1, 4, 3, 3), float32]) {"
                   " nn.upsampling(%x, scale_h=2f, scale_w=2f) }", ["x"]),
    "prelu": ("def @main(%x: Tensor[(2, 4, 3, 3), float32], %a: Tensor[(4), float32]) {"
              " nn.prelu(%x, %a) }", ["x", "a"]),
    "tile_repeat": ("def @main(%x: Tensor[(2, 3), float32]) {"
                    " (tile(%x, reps=[2, 2]), repeat(%x, repeats=3, axis=1)) }", ["x"]),
    "where_less": ("def @main(%x: Tensor[(3, 4), float32], %y: Tensor[(3, 4), float32]) {"
                   " where(less(%x, %y), %x, %y) }", ["x", "y"]),
    "compare_ops": ("def @main(%x: Tensor[(3, 4), float32], %y: Tensor[(3, 4), float32]) {"
                    " (greater(%x, %y), equal(%x, %x), not_equal(%x, %y), greater_equal(%x, %y),"
                    " less_equal(%x, %y)) }", ["x", "y"]),
    "take_input_indices": ("def @main(%x: Tensor[(5, 4), float32], %i: Tensor[(3), int32]) {"
                           " take(%x, %i, axis=0) }", ["x", "i"]),
    "take_const_indices": ("def @main(%x: Tensor[(5, 4), float32]) {"
                           " take(%x, meta[relay.Constant][0], axis=1) }", ["x"]),
    "conv3d": ("def @main(%x: Tensor[(1, 2, 4, 5, 5), float32], %w: Tensor[(3, 2, 3, 3, 3), float32]) {"
               " nn.conv3d(%x, %w, padding=[1, 1, 1, 1, 1, 1], channels=3, kernel_size=[3, 3, 3]) }",
               ["x", "w"]),
    "trig_round": ("def @main(%x: Tensor[(3, 4), float32]) {"
                   " (cos(%x), sin(%x), floor(%x), ceil(%x), round(%x), sign(%x)) }", ["x"]),
}


def _inputs(main):
    rng = np.random.default_rng(7)
    arrays = []
    for var in main.params:
        ty = var.type_annotation
        if ty.dtype.startswith("int"):
            arrays.append(rng.integers(-2, 7, size=ty.shape).astype(ty.dtype))  # clip mode
        else:
            arrays.append(rng.uniform(-2, 2, size=ty.shape).astype(ty.dtype))
    return arrays


@pytest.mark.parametrize("name", sorted(CASES))
def test_family_is_offloaded_and_matches_the_plain_build(name):
    body, _ = CASES[name]
    text = HEAD + body
    if "meta[relay.Constant]" in text:
        text = text.replace("meta[relay.Constant][0]", "%idx").replace(
            "def @main(%x: Tensor[(5, 4), float32])",
            "def @main(%x: Tensor[(5, 4), float32], %idx: Tensor[(2, 2), int32])")
        params = {"idx": np.array([[0, 3], [3, 1]], "int32")}
    else:
        params = {}
    module = parse(text)
    model = bmlib_relax.compile(module, params)
    assert offloaded_partitions(model.relax_module)
    report = model.report.to_dict()
    assert report["ops_host"] == {}, report["host_ops"]
    assert all(p["unscheduled_blocks"] == 0 for p in report["partitions"]), report["partitions"]
    main = parse(text)["main"]
    feed = [a for v, a in zip(main.params, _inputs(main)) if v.name not in params]
    got = model(*feed)
    want = run_plain(bmlib_relax.import_relay(parse(text), params), feed)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, list) else [want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype="float64"), np.asarray(w, dtype="float64"),
                                   rtol=1e-5, atol=1e-5)


def test_take_clips_out_of_range_indices_as_relay_does():
    text = HEAD + ("def @main(%x: Tensor[(4), float32], %i: Tensor[(3), int32]) {"
                   " take(%x, %i) }")
    model = bmlib_relax.compile(text)
    x = np.array([1, 2, 3, 4], "float32")
    np.testing.assert_array_equal(model(x, np.array([0, 9, -5], "int32")), [1, 4, 1])
