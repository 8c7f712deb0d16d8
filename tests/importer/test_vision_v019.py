"""Detection and 3-D resize ops as TVM v0.19's Relay computed them.

Expected values come from NumPy (float64) ports of v0.19's TOPI written here from its
source (python/tvm/topi/vision/nms.py ``hybrid_nms`` / ``hybrid_rearrange_*`` /
``_nms_loop``, rcnn/roi_pool.py, ssd/multibox.py, image/resize.py) — not from the code
under test.  TVM 0.27's TOPI, which the project lowers with, changed these in places.
"""
from __future__ import annotations

import numpy as np
import pytest

from bmlib_relax import ConversionError, import_relay, relay

from conftest import run_beside_offloaded_relu


# ------------------------------------------------------------------ v0.19 NMS (NumPy port)
def _corners(box):
    return (min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]),
            max(box[1], box[3]))


def _iou(a, b) -> float:
    """v0.19's IoU: 0 when the union is not positive."""
    al, at, ar, ab = _corners(a)
    bl, bt, br, bb = _corners(b)
    w = max(0.0, min(ar, br) - max(al, bl))
    h = max(0.0, min(ab, bb) - max(at, bt))
    union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - w * h
    return 0.0 if union <= 0 else w * h / union


def nms_v019(data, valid_count, indices, max_output_size=-1, iou_threshold=0.5,
             force_suppress=False, top_k=-1, coord_start=2, score_index=1, id_index=0,
             return_indices=True, invalid_to_bottom=False):
    """v0.19 ``topi.vision.non_max_suppression`` (CPU): a stable descending sort of the
    first ``valid_count`` scores, ``hybrid_nms``, then ``hybrid_rearrange_*``."""
    data = np.asarray(data, "float64")
    batch, num, length = data.shape
    out = np.full_like(data, -1.0)
    picked = np.full((batch, num), -1, "int64")
    for i in range(batch):
        count = int(valid_count[i])
        if iou_threshold > 0:
            order = sorted(range(count), key=lambda j: -data[i, j, score_index])
            keep = top_k if 0 < top_k < count else count
            for j in range(keep):
                out[i, j], picked[i, j] = data[i, order[j]], order[j]
            kept = 0
            for j in range(count):
                if kept == max_output_size:
                    out[i, j], picked[i, j] = -1, -1
                elif out[i, j, score_index] > 0:
                    box = out[i, j, coord_start:coord_start + 4]
                    valid = True
                    for k in range(j):
                        if not (valid and out[i, k, score_index] > 0
                                and (id_index < 0 or out[i, k, id_index] >= 0)):
                            continue
                        if not (force_suppress or id_index < 0
                                or out[i, j, id_index] == out[i, k, id_index]):
                            continue
                        if _iou(box, out[i, k, coord_start:coord_start + 4]) >= iou_threshold:
                            valid = False
                    if valid:
                        kept += 1
                    else:
                        out[i, j], picked[i, j] = -1, -1
        else:
            out[i, :count], picked[i, :count] = data[i, :count], np.arange(count)
        if return_indices:
            for j in range(count):
                if picked[i, j] >= 0:
                    picked[i, j] = indices[i, picked[i, j]]
    if return_indices:
        result = np.full((batch, num), -1, "int32")
        counts = np.zeros((batch, 1), "int32")
        for i in range(batch):
            found = [v for v in picked[i] if v >= 0]
            result[i, :len(found)] = found
            counts[i, 0] = len(found)
        return result, counts
    if invalid_to_bottom:
        moved = np.full_like(out, -1.0)
        for i in range(batch):
            rows = [r for r in out[i] if r[0] >= 0]  # column 0, whatever score_index is
            moved[i, :len(rows)] = rows
        return moved
    return out


_DATA = np.array([[[0, 0.8, 1, 20, 25, 45], [1, 0.7, 30, 60, 50, 80], [0, 0.4, 4, 21, 19, 40],
                   [2, 0.9, 35, 61, 52, 79], [1, 0.5, 100, 60, 70, 110]]], "float32")


def _run_nms(data, valid_count, max_output_size, runtime_max=False, indices=None, **attrs):
    data = np.asarray(data, "float32")
    batch, num, _ = data.shape
    indices = np.tile(np.arange(num, dtype="int32"), (batch, 1)) if indices is None else indices
    x = relay.var("x", shape=data.shape)
    vc = relay.var("vc", shape=(batch,), dtype="int32")
    idx = relay.var("idx", shape=(batch, num), dtype="int32")
    params, values = [x, vc, idx], [data, np.asarray(valid_count, "int32"), indices]
    if runtime_max:
        limit = relay.var("limit", shape=(), dtype="int32")
        params.append(limit)
        values.append(np.array(max_output_size, "int32"))
    else:
        limit = relay.const(max_output_size, "int32")
    z = relay.vision.non_max_suppression(x, vc, idx, limit, **attrs)
    outs = [z[0], z[1]] if attrs.get("return_indices", True) else [z]
    got = run_beside_offloaded_relu(params, outs, values)
    want = nms_v019(data, valid_count, indices, max_output_size, **attrs)
    return got, want


def _assert_nms(got, want):
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w)
    else:
        np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-6)


_NMS_CASES = {
    # (A) iou_threshold <= 0: no sort, no suppression, rows as they are
    "iou_zero": (_DATA, [5], -1, dict(iou_threshold=0.0)),
    "iou_zero_boxes": (_DATA, [4], -1, dict(iou_threshold=0.0, return_indices=False)),
    # (B) max_output_size 0 keeps none
    "max_zero": (_DATA, [5], 0, {}),
    # (C) scores <= 0 inside valid_count are kept, in sorted order
    "non_positive_scores": (None, [5], -1, {}),
    # (D) a class -1 box never suppresses, even under force_suppress
    "class_minus_one": (None, [5], -1, dict(force_suppress=True)),
    # (E) invalid_to_bottom moves rows by column 0
    "to_bottom_by_column_0": (None, [5], -1, dict(id_index=-1, return_indices=False,
                                                  invalid_to_bottom=True)),
    # cases that already matched: keep them matching
    "default": (_DATA, [5], -1, {}),
    "max_one": (_DATA, [5], 1, {}),
    "max_two": (_DATA, [5], 2, {}),
    "top_k": (_DATA, [5], -1, dict(top_k=2)),
    "top_k_boxes": (_DATA, [5], -1, dict(top_k=3, return_indices=False)),
    "valid_count_short": (_DATA, [3], -1, dict(force_suppress=True, return_indices=False)),
    "ties_and_zero_area": (np.array([[[0, 0.5, 0, 0, 1, 1], [0, 0.5, 0, 0, 1, 1],
                                      [0, 0.5, 2, 2, 2, 2], [0, 0.5, 2, 2, 2, 2],
                                      [0, 0.7, 0, 0, 1, 1]]], "float32"), [5], -1, {}),
    "score_index_0": (_DATA[:, :, [1, 0, 2, 3, 4, 5]], [5], -1,
                      dict(score_index=0, id_index=1, return_indices=False)),
    "batch_of_two": (np.concatenate([_DATA, _DATA[:, ::-1]]), [5, 2], 2,
                     dict(force_suppress=True)),
}


def _case_data(name):
    data, valid_count, limit, attrs = _NMS_CASES[name]
    if name == "non_positive_scores":
        data = _DATA.copy()
        data[0, 2, 1], data[0, 4, 1] = 0.0, -0.3
    elif name in ("class_minus_one", "to_bottom_by_column_0"):
        data = _DATA.copy()
        data[0, 3, 0] = -1
    return data, valid_count, limit, attrs


@pytest.mark.parametrize("name", sorted(_NMS_CASES))
def test_nms_computes_v019_hybrid_nms(name):
    data, valid_count, limit, attrs = _case_data(name)
    got, want = _run_nms(data, valid_count, limit, **attrs)
    _assert_nms(got, want)


def test_nms_v019_findings_have_the_expected_shape():
    # the port itself, against the values worked out by hand from v0.19's source
    idx = np.arange(5)[None]
    assert nms_v019(_DATA, [5], idx, iou_threshold=0.0)[0].tolist() == [[0, 1, 2, 3, 4]]
    assert nms_v019(_DATA, [5], idx, 0)[1].tolist() == [[0]]
    data = _DATA.copy()
    data[0, 2, 1], data[0, 4, 1] = 0.0, -0.3
    assert nms_v019(data, [5], idx)[0].tolist() == [[3, 0, 1, 2, 4]]
    data = _DATA.copy()
    data[0, 3, 0] = -1
    assert nms_v019(data, [5], idx, force_suppress=True)[0].tolist() == [[3, 0, 1, 4, 2]]


@pytest.mark.parametrize("limit", [0, 1, -1])
def test_nms_run_time_max_output_size_as_v019(limit):
    got, want = _run_nms(_DATA, [5], limit, runtime_max=True)
    _assert_nms(got, want)


def test_nms_indices_map_through_the_indices_operand():
    indices = np.array([[4, 3, 2, 1, 0]], "int32")
    got, want = _run_nms(_DATA, [4], -1, indices=indices)
    _assert_nms(got, want)


# ------------------------------------------------------- v0.19 all-class NMS (NumPy port)
def acnms_v019(boxes, scores, max_per_class, iou_threshold, score_threshold):
    """v0.19 ``all_class_non_max_suppression``: per (batch, class) a stable descending
    sort, the boxes above ``score_threshold``, ``_nms_loop`` (a limit <= 0 is none; only
    boxes with a positive score are suppressed).  Returns the kept (box, score) lists."""
    batch, classes, num = scores.shape
    kept = {}
    for b in range(batch):
        for c in range(classes):
            order = sorted(range(num), key=lambda j: -scores[b, c, j])
            ranked = [float(scores[b, c, j]) for j in order]
            count = sum(1 for v in ranked if v > score_threshold)
            limit = max_per_class if max_per_class > 0 else count
            chosen = []
            if iou_threshold > 0:
                for j in range(count):
                    if len(chosen) >= limit:
                        break
                    if ranked[j] > -1.0:
                        chosen.append((order[j], ranked[j]))
                        for k in range(j + 1, count):
                            if ranked[k] > 0 and _iou(boxes[b, order[j]],
                                                      boxes[b, order[k]]) >= iou_threshold:
                                ranked[k] = -1.0
            kept[b, c] = chosen
    return kept


_BOXES = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11], [5, 5, 6, 6]]], "float32")
_SCORES = np.array([[[0.9, 0.8, 0.7, 0.1], [0.1, 0.6, 0.5, 0.6]]], "float32")


def _run_acnms(limit, fmt="onnx"):
    bx = relay.var("bx", shape=_BOXES.shape)
    sc = relay.var("sc", shape=_SCORES.shape)
    z = relay.vision.all_class_non_max_suppression(
        bx, sc, relay.const(limit, "int64"), relay.const(0.5, "float32"),
        relay.const(0.2, "float32"), output_format=fmt)
    outs = [z[i] for i in range(2 if fmt == "onnx" else 3)]
    return run_beside_offloaded_relu([bx, sc], outs, [_BOXES, _SCORES])


@pytest.mark.parametrize("limit", [0, -1, 1, 2, 9])
def test_all_class_nms_onnx_as_v019(limit):
    indices, count = _run_acnms(limit)
    kept = acnms_v019(_BOXES, _SCORES, limit, 0.5, 0.2)
    rows = [[b, c, i] for (b, c), chosen in sorted(kept.items()) for i, _ in chosen]
    # v0.19's AllClassNMSRel: (batch * classes * boxes, 3) rows, the selected ones first
    assert indices.shape == (1 * 2 * 4, 3) and indices.dtype == np.int64
    assert count.tolist() == [len(rows)]
    np.testing.assert_array_equal(indices[:len(rows)], rows)


@pytest.mark.parametrize("limit", [0, 1])
def test_all_class_nms_tensorflow_as_v019(limit):
    indices, scores, count = _run_acnms(limit, "tensorflow")
    kept = acnms_v019(_BOXES, _SCORES, limit, 0.5, 0.2)
    rows = [[c, i] for c in range(2) for i, _ in kept[0, c]]
    values = [s for c in range(2) for _, s in kept[0, c]]
    assert indices.shape == (1, 8, 2) and scores.shape == (1, 8)
    assert count.tolist() == [len(rows)]
    np.testing.assert_array_equal(indices[0, :len(rows)], rows)
    np.testing.assert_allclose(scores[0, :len(rows)], values, rtol=1e-6)


def test_all_class_nms_box_count_mismatch_is_named():
    bx = relay.var("bx", shape=(1, 5, 4))
    sc = relay.var("sc", shape=(1, 2, 6))
    z = relay.vision.all_class_non_max_suppression(bx, sc, relay.const(2, "int64"),
                                                   relay.const(0.5), relay.const(0.1))
    with pytest.raises(ConversionError, match="all_class_non_max_suppression"):
        _import([bx, sc], z.astuple())


# ------------------------------------------------------------------------------ roi_pool
def _round_half_away(v: float) -> int:
    return int(np.sign(v) * np.floor(abs(v) + 0.5))


def roi_pool_v019(data, rois, pooled, scale):
    """v0.19 ``topi.vision.rcnn.roi_pool_nchw``: corners ``round(x * scale)`` (llvm.round,
    halves away from zero), bins ``floor``/``ceil`` of ``i * bin`` clamped to the image,
    an empty bin 0."""
    n, c, height, width = data.shape
    ph, pw = pooled
    out = np.zeros((len(rois), c, ph, pw), data.dtype)
    for r, roi in enumerate(rois):
        w0, h0, w1, h1 = (_round_half_away(float(np.float32(v) * np.float32(scale)))
                          for v in roi[1:])
        roi_h, roi_w = max(h1 - h0 + 1, 1), max(w1 - w0 + 1, 1)
        bin_h, bin_w = roi_h / ph, roi_w / pw
        for i in range(ph):
            for j in range(pw):
                hs = min(max(int(np.floor(i * bin_h)) + h0, 0), height)
                he = min(max(int(np.ceil((i + 1) * bin_h)) + h0, 0), height)
                ws = min(max(int(np.floor(j * bin_w)) + w0, 0), width)
                we = min(max(int(np.ceil((j + 1) * bin_w)) + w0, 0), width)
                if he > hs and we > ws:
                    out[r, :, i, j] = data[int(roi[0]), :, hs:he, ws:we].max(axis=(1, 2))
    return out


@pytest.mark.parametrize("rois", [[[0, -1.5, -1.5, 1.0, 1.0]], [[0, -0.5, -2.5, 2.5, 1.5]],
                                  [[0, 0.5, 1.5, 3.0, 3.0]]])
def test_roi_pool_rounds_negative_halves_away_from_zero(rois):
    data = np.arange(16, dtype="float32").reshape(1, 1, 4, 4)
    rois = np.array(rois, "float32")
    d = relay.var("d", shape=data.shape)
    r = relay.var("r", shape=rois.shape)
    got, = run_beside_offloaded_relu(
        [d, r], [relay.vision.roi_pool(d, r, pooled_size=(2, 2), spatial_scale=1.0)],
        [data, rois])
    np.testing.assert_array_equal(got, roi_pool_v019(data, rois, (2, 2), 1.0))


# ------------------------------------------------------------------------- upsampling3d
def test_upsampling3d_nearest_align_corners_takes_halves_away_from_zero():
    # 2 -> 3 with align_corners reads source 0.5 at output 1: llvm.round -> pixel 1
    data = np.arange(8, dtype="float32").reshape(1, 1, 2, 2, 2)
    x = relay.var("x", shape=data.shape)
    z = relay.nn.upsampling3d(x, scale_d=1.5, scale_h=1.5, scale_w=1.5,
                              method="nearest_neighbor",
                              coordinate_transformation_mode="align_corners")
    got, = run_beside_offloaded_relu([x], [z], [data])
    rows = [_round_half_away(o * (2 - 1) / (3 - 1)) for o in range(3)]
    assert rows == [0, 1, 1]
    np.testing.assert_array_equal(got, data[:, :, rows][:, :, :, rows][:, :, :, :, rows])


@pytest.mark.parametrize("build", [
    lambda x: relay.image.resize3d(x, size=(1, 1, 5), method="nearest_neighbor",
                                   coordinate_transformation_mode="align_corners"),
    lambda x: relay.image.resize3d(x, size=(1, 2, 5), method="linear",
                                   coordinate_transformation_mode="align_corners"),
    lambda x: relay.nn.upsampling3d(x, 1, 2, 2, method="trilinear",
                                    coordinate_transformation_mode="align_corners"),
])
def test_3d_resize_align_corners_to_a_unit_dim_is_named(build):
    x = relay.var("x", shape=(1, 1, 1, 2, 3))
    with pytest.raises(ConversionError, match="division by zero"):
        _import([x], build(x))


# ------------------------------------------------------------------------------ proposal
@pytest.mark.parametrize("cls_shape, bbox_shape, info_shape, message", [
    ((1, 2, 2, 2), (1, 4, 2, 2), (1, 2), "im_info"),  # v0.19's ProposalRel: 3 columns
    ((1, 2, 2, 2), (1, 1, 2, 2), (1, 3), "bbox_pred"),  # fewer than 4 * anchors channels
    ((1, 2, 2, 2), (1, 4, 1, 2), (1, 3), "bbox_pred"),  # fewer rows than cls_prob
    ((2, 2, 2, 2), (1, 4, 2, 2), (2, 3), "bbox_pred"),  # a smaller batch
    ((2, 2, 2, 2), (2, 4, 2, 2), (1, 3), "im_info"),
])
def test_proposal_shapes_v019_refused_are_named(cls_shape, bbox_shape, info_shape, message):
    a = relay.var("a", shape=cls_shape)
    b = relay.var("b", shape=bbox_shape)
    c = relay.var("c", shape=info_shape)
    z = relay.vision.proposal(a, b, c, scales=(1.0,), ratios=(1.0,), feature_stride=4,
                              threshold=0.5, rpn_pre_nms_top_n=4, rpn_post_nms_top_n=2,
                              rpn_min_size=1, iou_loss=False)
    with pytest.raises(ConversionError, match=message):
        _import([a, b, c], z)


# -------------------------------------------------------------- multibox_transform_loc
def multibox_classes_v019(cls_prob, keep_background, threshold=0.01):
    """v0.19 ``hybrid_multibox_transform_loc``: per anchor ``score = -1, id = 0``, then
    ``if temp > score: id = k``, ``score = max(temp, score)`` (a NaN never wins);
    below ``threshold`` the anchor is background (id 0)."""
    _, classes, anchors = cls_prob.shape
    out = []
    for j in range(anchors):
        score, cid = -1.0, 0
        for k in range(0 if keep_background else 1, classes):
            temp = float(cls_prob[0, k, j])
            if temp > score:
                cid, score = k, temp
        if cid > 0 and score < threshold:
            cid = 0
        out.append((cid, score))
    return out


@pytest.mark.parametrize("keep_background", [False, True])
def test_multibox_transform_loc_skips_nan_probabilities(keep_background):
    cls = np.array([[[0.1, 0.1, 0.1, np.nan], [0.6, np.nan, 0.2, np.nan],
                     [np.nan, 0.3, -5.0, np.nan]]], "float32")
    loc = np.zeros((1, 16), "float32")
    anchors = np.array([[[0.1, 0.1, 0.3, 0.3]] * 4], "float32")
    a, b, c = (relay.var("a", shape=cls.shape), relay.var("b", shape=loc.shape),
               relay.var("c", shape=anchors.shape))
    z = relay.vision.multibox_transform_loc(a, b, c, keep_background=keep_background)
    # the anchors first: the helper's relu runs on them (a NaN's relu is bmlib's to decide)
    out, count = run_beside_offloaded_relu([c, a, b], [z[0], z[1]], [anchors, cls, loc])
    start = 0 if keep_background else 1
    kept = [(cid - start, score) for cid, score in multibox_classes_v019(cls, keep_background)
            if cid >= start and (keep_background or cid > 0)]
    assert count.tolist() == [len(kept)]
    np.testing.assert_allclose(out[0, :len(kept), :2], np.array(kept, "float32"), rtol=1e-6)


# ------------------------------------------------------------------ refused shapes/attrs
def _import(params, body):
    return import_relay(relay.IRModule.from_expr(relay.Function(params, body)))


@pytest.mark.parametrize("layout, kernel_layout, kernel", [
    ("NCHW", "HWI", (2, 3, 2)), ("NHWC", "HWI", (2, 3, 2))])
def test_dilation2d_kernel_layout_v019_refused_is_named(layout, kernel_layout, kernel):
    shape = (1, 2, 6, 7) if layout == "NCHW" else (1, 6, 7, 2)
    x, k = relay.var("x", shape=shape), relay.var("k", shape=kernel)
    z = relay.image.dilation2d(x, k, data_layout=layout, kernel_layout=kernel_layout)
    if kernel_layout == {"NCHW": "IHW", "NHWC": "HWI"}[layout]:
        _import([x, k], z)
    else:
        with pytest.raises(ConversionError, match="kernel_layout"):
            _import([x, k], z)


def test_dilation2d_non_positive_dilation_is_named():
    x, k = relay.var("x", shape=(1, 2, 6, 7)), relay.var("k", shape=(2, 3, 2))
    with pytest.raises(ConversionError, match="dilation should be positive"):
        _import([x, k], relay.image.dilation2d(x, k, dilations=(0, 1)))


def test_multibox_prior_of_3d_data_is_named():
    a = relay.var("a", shape=(1, 4, 4))
    with pytest.raises(ConversionError, match="multibox_prior: .*4-D"):
        _import([a], relay.vision.multibox_prior(a))


def test_yolo_reorg_channels_not_divisible_is_named():
    a = relay.var("a", shape=(1, 3, 4, 4))
    with pytest.raises(ConversionError, match="yolo_reorg"):
        _import([a], relay.vision.yolo_reorg(a, 2))


@pytest.mark.parametrize("grid_shape", [(1, 1, 2, 2), (1, 3, 2, 2)])
def test_grid_sample_grid_of_other_channels_is_named(grid_shape):
    a, g = relay.var("a", shape=(1, 2, 4, 4)), relay.var("g", shape=grid_shape)
    with pytest.raises(ConversionError, match="grid"):
        _import([a, g], relay.image.grid_sample(a, g))


def test_nms_valid_count_past_the_anchors_is_a_run_check():
    # v0.19 sorted and copied beside the rows (undefined); refused when the model runs
    import bmlib_relax
    from bmlib_relax.errors import RunCheckError

    x = relay.var("x", shape=_DATA.shape)
    vc = relay.var("vc", shape=(1,), dtype="int32")
    idx = relay.var("idx", shape=(1, 5), dtype="int32")
    z = relay.vision.non_max_suppression(x, vc, idx, relay.const(-1, "int32"))
    model = bmlib_relax.compile(relay.IRModule.from_expr(relay.Function([x, vc, idx],
                                                                        z.astuple())))
    with pytest.raises(RunCheckError, match="valid_count is outside"):
        model(_DATA, np.array([7], "int32"), np.arange(5, dtype="int32")[None])
