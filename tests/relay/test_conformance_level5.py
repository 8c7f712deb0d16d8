"""Relay op-level-5 behaviour (image, vision) as TVM v0.19's Relay had it: result types
(incl. symbolic dims) and values against ``tvm.topi.testing`` / numpy references."""
import numpy as np
import pytest
import tvm.topi.testing
from tvm import te

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import RelayTypeError
from bmlib_relax.relay.testing import run_infer_type
from conftest import offloaded_partitions

RNG = np.random.default_rng(5)


def _run(outputs, inputs):
    """Compile ``fn(inputs) -> (relu(inputs[0]), *outputs)``; assert offload; run."""
    params = [v for v, _ in inputs]
    func = relay.Function(params, relay.Tuple([relay.nn.relu(params[0])] + list(outputs)))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model(*[value for _, value in inputs])[1:]


def test_resize_defaults_follow_relays_python_api():
    # rounding_method="" (the Python default) lets nearest neighbour floor unless
    # align_corners; align_corners on a 1-D resize is well defined (no 0/0 on a unit dim).
    x_np = RNG.uniform(size=(1, 2, 4, 4)).astype("float32")
    w_np = RNG.uniform(size=(2, 3, 5)).astype("float32")
    x = relay.var("x", shape=x_np.shape)
    w = relay.var("w", shape=w_np.shape)
    cases = [
        (relay.image.resize2d(x, (8, 8), None, "NCHW", "nearest_neighbor",
                              coordinate_transformation_mode="asymmetric"),
         testing_ref := tvm.topi.testing.resize2d_python(x_np, (2, 2), "NCHW",
                                                         "nearest_neighbor", "asymmetric")),
        (relay.image.resize2d(x, (8, 8), None, "NCHW", "nearest_neighbor",
                              coordinate_transformation_mode="half_pixel"),
         tvm.topi.testing.resize2d_python(x_np, (2, 2), "NCHW", "nearest_neighbor",
                                          "half_pixel")),
        (relay.image.resize1d(w, (15,), None, "NCW", "linear",
                              coordinate_transformation_mode="align_corners"),
         tvm.topi.testing.resize1d_python(w_np, (3,), "NCW", "linear", "align_corners")),
        (relay.image.resize1d(w, (15,), None, "NCW", "cubic",
                              coordinate_transformation_mode="align_corners"),
         tvm.topi.testing.resize1d_python(w_np, (3,), "NCW", "cubic", "align_corners")),
    ]
    assert testing_ref.shape == (1, 2, 8, 8)
    assert 'rounding_method=""' in cases[0][0].astext()
    outs = _run([c for c, _ in cases], [(x, x_np), (w, w_np)])
    for got, (_, want) in zip(outs, cases):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_parsed_resize_without_rounding_method_rounds():
    # Relay's C++ attribute default (what a text without the attribute means) is "round".
    mod = relay.parse("""
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 5), float32]) {
  %0 = nn.relu(%x);
  image.resize1d(%0, size=[3], roi=[0f, 0f], method="nearest_neighbor",
                 coordinate_transformation_mode="asymmetric")
}""")
    model = bmlib_relax.compile(mod)
    x_np = np.arange(5, dtype="float32").reshape(1, 1, 5)
    # asymmetric: output 1 reads source 1.67, which "round" and "floor" take differently.
    want = tvm.topi.testing.resize1d_python(x_np, (3 / 5,), "NCW", "nearest_neighbor",
                                            "asymmetric", rounding_method="round")
    floor = tvm.topi.testing.resize1d_python(x_np, (3 / 5,), "NCW", "nearest_neighbor",
                                             "asymmetric", rounding_method="floor")
    assert not np.array_equal(want, floor)
    np.testing.assert_allclose(model(x_np), want)


def test_resize_to_a_symbolic_size_type_checks():
    n, c, h, w = te.var("n"), te.var("c"), te.var("h"), te.var("w")
    th, tw = te.var("th"), te.var("tw")
    x = relay.var("x", relay.TensorType((n, c, h, w), "int8"))
    assert run_infer_type(relay.image.resize2d(x, (th, tw))).checked_type == \
        relay.TensorType((n, c, th, tw), "int8")
    v = relay.var("v", relay.TensorType((n, c, w), "int8"))
    assert run_infer_type(relay.image.resize1d(v, (tw,))).checked_type == \
        relay.TensorType((n, c, tw), "int8")


def test_dilation2d_reads_the_first_two_strides_and_dilations():
    n = te.var("n")
    x = relay.var("x", relay.TensorType((n, 10, 24, 24), "float32"))
    w = relay.var("w", relay.TensorType((10, 8, 8), "float32"))
    y = relay.image.dilation2d(x, w, strides=[1, 1, 1, 1], dilations=[1, 1, 1, 1],
                               padding=[0, 0, 0, 0])
    assert run_infer_type(y).checked_type == relay.TensorType((n, 10, 17, 17), "float32")


def _deformable(layout, groups=1):
    shape = {"NCHW": (1, 4, 6, 6), "NHWC": (1, 6, 6, 4)}[layout]
    data = relay.var("data", shape=shape)
    offset, kernel = relay.var("offset"), relay.var("kernel")  # types follow from the call
    expr = relay.nn.deformable_conv2d(
        data, offset, kernel, strides=(1, 1), padding=(1, 1), dilation=(1, 1),
        data_layout=layout, kernel_layout={"NCHW": "OIHW", "NHWC": "HWIO"}[layout],
        kernel_size=(3, 3), deformable_groups=2, groups=groups, channels=4)
    return relay.Function([data, offset, kernel], expr), shape


def test_deformable_conv2d_infers_offset_and_weight_types():
    func, _ = _deformable("NHWC", groups=2)
    call = run_infer_type(func).body
    assert call.checked_type == relay.TensorType((1, 6, 6, 4), "float32")
    assert call.args[1].checked_type == relay.TensorType((1, 6, 6, 36), "float32")
    assert call.args[2].checked_type == relay.TensorType((3, 3, 2, 4), "float32")
    func, _ = _deformable("NCHW")
    call = run_infer_type(func).body
    assert call.args[1].checked_type == relay.TensorType((1, 36, 6, 6), "float32")
    assert call.args[2].checked_type == relay.TensorType((4, 4, 3, 3), "float32")


def test_deformable_conv2d_nhwc_with_inferred_input_types_runs():
    func, shape = _deformable("NHWC")
    data = RNG.uniform(size=shape).astype("float32")
    offset = RNG.uniform(size=(1, 6, 6, 36)).astype("float32")
    kernel = RNG.uniform(size=(3, 3, 4, 4)).astype("float32")
    (got,) = _run([func.body], list(zip(func.params, (data, offset, kernel))))
    want = tvm.topi.testing.deformable_conv2d_nhwc_python(
        data, offset, kernel, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
        deformable_groups=2, groups=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_depth_and_space_rearrangements_in_nhwc():
    x_np = RNG.uniform(size=(1, 2, 2, 8)).astype("float32")
    x = relay.var("x", shape=x_np.shape)
    d2s = relay.nn.depth_to_space(x, 2, "NHWC", "CRD")
    s2d = relay.nn.space_to_depth(x, 2, "NHWC")
    assert run_infer_type(d2s).checked_type == relay.TensorType((1, 4, 4, 2), "float32")
    assert run_infer_type(s2d).checked_type == relay.TensorType((1, 1, 1, 32), "float32")
    # ONNX's definitions, written on the NHWC array directly (topi.testing's references
    # call np.reshape(newshape=), gone in numpy 2.4).
    want_d2s = x_np.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(1, 4, 4, 2)
    want_s2d = x_np.reshape(1, 1, 2, 1, 2, 8).transpose(0, 1, 3, 2, 4, 5).reshape(1, 1, 1, 32)
    got_d2s, got_s2d = _run([d2s, s2d], [(x, x_np)])
    np.testing.assert_allclose(got_d2s, want_d2s)
    np.testing.assert_allclose(got_s2d, want_s2d)


def test_get_valid_counts_prints_relays_score_threshold_attribute():
    x = relay.var("x", shape=(1, 5, 6))
    text = relay.vision.get_valid_counts(x, 0.5).astext()
    assert "score_threshold=None" in text and "0.5f" in text  # the operand holds the value
    assert "score_threshold" in relay.parse(text)["main"].body.attrs


def test_non_max_suppression_with_a_run_time_output_limit():
    n = te.var("n")
    data = relay.var("data", relay.TensorType((n, 3, 6), "float32"))
    count = relay.var("count", relay.TensorType((n,), "int32"))
    indices = relay.var("indices", relay.TensorType((n, 3), "int32"))
    limit = relay.var("limit", relay.TensorType((), "int32"))
    nms = relay.vision.non_max_suppression(data, count, indices, limit, return_indices=False)
    with_indices = relay.vision.non_max_suppression(data, count, indices, limit).astuple()
    assert run_infer_type(nms).checked_type == relay.TensorType((n, 3, 6), "float32")
    assert run_infer_type(with_indices).checked_type == relay.TupleType(
        [relay.TensorType((n, 3), "int32"), relay.TensorType((n, 1), "int32")])

    func = relay.Function([data, count, indices, limit],
                          relay.Tuple([relay.nn.relu(data), nms]))
    model = bmlib_relax.compile(relay.IRModule.from_expr(func))
    assert offloaded_partitions(model.relax_module)
    boxes = np.array([[[0, 0.9, 0, 0, 10, 10],      # kept
                       [0, 0.8, 1, 1, 11, 11],      # IoU 0.68 with the first: suppressed
                       [0, 0.7, 20, 20, 30, 30]]],  # disjoint: kept unless over the limit
                     dtype="float32")
    args = (boxes, np.array([3], "int32"), np.array([[0, 1, 2]], "int32"))
    gone = [-1.0] * 6
    _, unlimited = model(*args, np.array(-1, "int32"))
    np.testing.assert_allclose(unlimited[0], [boxes[0, 0], gone, boxes[0, 2]])
    _, limited = model(*args, np.array(1, "int32"))
    np.testing.assert_allclose(limited[0], [boxes[0, 0], gone, gone])


def _multibox_transform_loc_ref(cls_prob, loc_pred, anchor, clip, threshold, variances,
                                keep_background):
    """Relay's SSD decode, one anchor at a time (rows past the count: -1 here)."""
    batch, classes, anchors = cls_prob.shape
    out = -np.ones((batch, anchors, 6), "float32")
    count = np.zeros(batch, "int32")
    start = 0 if keep_background else 1
    for b in range(batch):
        for j in range(anchors):
            k = start + int(np.argmax(cls_prob[b, start:, j]))
            score = cls_prob[b, k, j]
            if k > 0 and score < threshold:
                k = 0
            if not keep_background and k == 0:
                continue
            al, at, ar, ab = anchor[0, j]
            px, py, pw, ph = loc_pred[b, 4 * j:4 * j + 4]
            aw, ah = ar - al, ab - at
            ox, oy = px * variances[0] * aw + (al + ar) / 2, py * variances[1] * ah + (at + ab) / 2
            ow, oh = np.exp(pw * variances[2]) * aw / 2, np.exp(ph * variances[3]) * ah / 2
            box = np.array([ox - ow, oy - oh, ox + ow, oy + oh])
            box = np.clip(box, 0, 1) if clip else box
            out[b, count[b]] = [k - start, score, *box]
            count[b] += 1
    return out, count


def test_multibox_transform_loc_decodes_and_compacts_like_relay():
    cls_np = RNG.uniform(size=(2, 3, 5)).astype("float32")
    cls_np[0, 1:, 1] = 0.001  # below the threshold: background, dropped unless kept
    cls_np[1, 0, 3] = 5.0     # background is best: only picked when it is kept
    loc_np = RNG.uniform(-0.5, 0.5, size=(2, 20)).astype("float32")
    anchor_np = np.sort(RNG.uniform(-0.2, 1.2, size=(1, 5, 2, 2)), axis=2) \
        .transpose(0, 1, 3, 2).reshape(1, 5, 4).astype("float32")  # (l, t, r, b), l<r, t<b
    cls_prob = relay.var("cls_prob", shape=cls_np.shape)
    loc_pred = relay.var("loc_pred", shape=loc_np.shape)
    anchor = relay.var("anchor", shape=anchor_np.shape)
    settings = [dict(keep_background=False), dict(keep_background=True, clip=False,
                                                  threshold=0.05, variances=(0.2, 0.2, 0.1, 0.1))]
    outputs = []
    for kw in settings:
        outputs += list(relay.vision.multibox_transform_loc(cls_prob, loc_pred, anchor, **kw))
    # Relay's SSD scripts pass the detections as NMS's (unused) indices too.
    outputs.append(relay.vision.non_max_suppression(outputs[0], outputs[1], outputs[0],
                                                    iou_threshold=1.0, return_indices=False))
    got = _run(outputs, [(cls_prob, cls_np), (loc_pred, loc_np), (anchor, anchor_np)])
    # Nothing overlaps fully: NMS only sorts each batch's kept rows by score.
    for b, n in enumerate(got[1]):
        rows = got[0][b, :n]
        np.testing.assert_allclose(got[4][b, :n], rows[np.argsort(-rows[:, 1], kind="stable")])
        assert (got[4][b, n:] == -1).all()
    for i, kw in enumerate(settings):
        want_rows, want_count = _multibox_transform_loc_ref(
            cls_np, loc_np, anchor_np, kw.get("clip", True), kw.get("threshold", 0.01),
            kw.get("variances", (0.1, 0.1, 0.2, 0.2)), kw["keep_background"])
        np.testing.assert_array_equal(got[2 * i + 1], want_count)
        np.testing.assert_allclose(got[2 * i], want_rows, rtol=1e-5, atol=1e-6)
    assert got[1].tolist() == [4, 5] and got[3].tolist() == [5, 5]
    assert got[2][1, 3, 0] == 0.0  # kept background: class 0


def test_deformable_conv2d_with_a_wrong_offset_is_a_type_error():
    data = relay.var("data", shape=(1, 4, 6, 6))
    offset = relay.var("offset", shape=(1, 18, 6, 6))  # deformable_groups=2 needs 36
    expr = relay.nn.deformable_conv2d(data, offset, relay.var("kernel"), padding=(1, 1),
                                      kernel_size=(3, 3), deformable_groups=2, channels=4)
    with pytest.raises(RelayTypeError, match="nn.deformable_conv2d.*offset"):
        run_infer_type(expr)


def _proposal_ref(cls_prob, bbox_pred, im_info, scales, ratios, stride, threshold, pre_n,
                  post_n, min_size, iou_loss):
    """Relay's Faster R-CNN proposal, box by box in numpy."""
    batch, _, height, width = cls_prob.shape
    base = []
    for ratio in ratios:
        for scale in scales:
            w = np.floor(np.sqrt(np.floor(stride * stride / ratio)) + 0.5) * scale
            h = np.floor(w / scale * ratio + 0.5) * scale
            c = (stride - 1) / 2
            base.append((c - (w - 1) / 2, c - (h - 1) / 2, c + (w - 1) / 2, c + (h - 1) / 2))
    count = len(base)
    out = np.zeros((batch * post_n, 5), "float32")
    for b in range(batch):
        im_h, im_w, im_scale = im_info[b]
        boxes = []
        for h in range(height):
            for w in range(width):
                for k in range(count):
                    x1, y1, x2, y2 = np.array(base[k]) + [w * stride, h * stride] * 2
                    d = bbox_pred[b, 4 * k:4 * k + 4, h, w]
                    if iou_loss:
                        box = [x1 + d[0], y1 + d[1], x2 + d[2], y2 + d[3]]
                    else:
                        bw, bh = x2 - x1 + 1, y2 - y1 + 1
                        cx, cy = d[0] * bw + x1 + (bw - 1) / 2, d[1] * bh + y1 + (bh - 1) / 2
                        pw, ph = np.exp(d[2]) * bw, np.exp(d[3]) * bh
                        box = [cx - (pw - 1) / 2, cy - (ph - 1) / 2, cx + (pw - 1) / 2,
                               cy + (ph - 1) / 2]
                    box = [min(max(v, 0), lim - 1) for v, lim in zip(box, [im_w, im_h] * 2)]
                    score = cls_prob[b, count + k, h, w]
                    if h >= int(im_h / stride) or w >= int(im_w / stride):
                        score = -1
                    least = im_scale * min_size
                    if box[2] - box[0] + 1 < least or box[3] - box[1] + 1 < least:
                        box = [box[0] - least / 2, box[1] - least / 2, box[2] + least / 2,
                               box[3] + least / 2]
                        score = -1
                    boxes.append(box + [score])
        boxes = np.array(boxes, "float32")
        ranked = boxes[np.argsort(-boxes[:, 4], kind="stable")][:pre_n]
        removed = np.zeros(len(ranked), bool)
        for i in range(len(ranked)):
            if removed[i]:
                continue
            for j in range(i + 1, len(ranked)):
                a, c = ranked[i], ranked[j]
                iw = max(0, min(a[2], c[2]) - max(a[0], c[0]) + 1)
                ih = max(0, min(a[3], c[3]) - max(a[1], c[1]) + 1)
                union = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + \
                    (c[2] - c[0] + 1) * (c[3] - c[1] + 1) - iw * ih
                if iw * ih / union > threshold:
                    removed[j] = True
        kept = ranked[~removed]
        for r in range(post_n):
            out[b * post_n + r] = [b, *kept[r % len(kept), :4]]
    return out


@pytest.mark.parametrize("iou_loss", [False, True])
def test_proposal_matches_relays_region_proposal(iou_loss):
    attrs = dict(scales=(1.0, 2.0), ratios=(0.5, 1.0), feature_stride=8, threshold=0.6,
                 rpn_pre_nms_top_n=20, rpn_post_nms_top_n=25, rpn_min_size=6,
                 iou_loss=iou_loss)
    cls_np = RNG.uniform(size=(2, 8, 4, 5)).astype("float32")
    bbox_np = RNG.uniform(-0.6, 0.6, size=(2, 16, 4, 5)).astype("float32")
    info_np = np.array([[32, 40, 1.0], [24, 40, 1.5]], "float32")  # batch 1: rows 3+ outside
    cls_prob, bbox_pred, im_info = (relay.var(n, shape=a.shape) for n, a in
                                    (("cls_prob", cls_np), ("bbox_pred", bbox_np),
                                     ("im_info", info_np)))
    proposal = relay.vision.proposal(cls_prob, bbox_pred, im_info, **attrs)
    assert run_infer_type(proposal).checked_type == relay.TensorType((50, 5), "float32")
    (got,) = _run([proposal], [(cls_prob, cls_np), (bbox_pred, bbox_np), (im_info, info_np)])
    want = _proposal_ref(cls_np, bbox_np, info_np, attrs["scales"], attrs["ratios"], 8, 0.6,
                         20, 25, 6, iou_loss)  # < 25 survive: rows cycle
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
