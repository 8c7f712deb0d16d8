"""Detection ops (``vision.*``).

Forms: ``vision.multibox_prior`` -> a constant (its anchors depend only on the
input's static shape and the attributes); ``vision.get_valid_counts``,
``vision.non_max_suppression``, ``vision.all_class_non_max_suppression``,
``vision.roi_align``, ``vision.roi_pool`` -> the ``relax.op.vision`` op of the
same name, with Relay's defaults spelled out where Relax's differ (``roi_align``
is not "aligned").  Scalar thresholds, which Relay passes as constant operands,
must be constants, except NMS's ``max_output_size``: a run-time value takes TOPI's
compute.  ``vision.multibox_transform_loc`` is composed of Relax ops (Relax's op of
that name is TFLite's, with other outputs: (boxes, scores) instead of Relay's
(1, N, 6) detections and count).  ``vision.proposal`` (gone from TOPI 0.27) is a TE
compute of its own, run on the host.
"""
from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, topi

from ..registry import register_converter
from ..run_checks import emit_tensor_check, none_hold
from ._utils import (check_index_values, dtype_of, folded_value, ints, ndim_of, run_time_dims,
                     scalar_operand, shape_of, static_shape)


def multibox_prior_anchors(height: int, width: int, sizes, ratios, steps, offsets,
                           clip: bool) -> np.ndarray:
    """Relay's ``vision.multibox_prior`` boxes ``[1, H*W*(S+R-1), 4]`` (xmin, ymin, xmax, ymax)."""
    sizes, ratios = list(sizes), list(ratios)
    per_pixel = len(sizes) + len(ratios) - 1
    step_h = steps[0] if steps[0] > 0 else 1.0 / height
    step_w = steps[1] if steps[1] > 0 else 1.0 / width
    half_sizes = []
    for k in range(per_pixel):
        if k < len(sizes):
            half_sizes.append((sizes[k] * height / width / 2.0, sizes[k] / 2.0))
        else:
            ratio = math.sqrt(ratios[k - len(sizes) + 1])
            half_sizes.append((sizes[0] * height / width * ratio / 2.0, sizes[0] / ratio / 2.0))
    out = np.zeros((height, width, per_pixel, 4), dtype="float64")
    centers_h = (np.arange(height) + offsets[0]) * step_h
    centers_w = (np.arange(width) + offsets[1]) * step_w
    for k, (half_w, half_h) in enumerate(half_sizes):
        out[:, :, k, 0] = centers_w[None, :] - half_w
        out[:, :, k, 1] = centers_h[:, None] - half_h
        out[:, :, k, 2] = centers_w[None, :] + half_w
        out[:, :, k, 3] = centers_h[:, None] + half_h
    out = out.reshape(1, -1, 4)
    return np.clip(out, 0.0, 1.0) if clip else out


@register_converter("vision.multibox_prior")
def _multibox_prior(inputs, attrs, ctx):
    dims = static_shape(inputs[0], ctx)
    anchors = multibox_prior_anchors(
        dims[2], dims[3], [float(v) for v in attrs.get("sizes", (1.0,))],
        [float(v) for v in attrs.get("ratios", (1.0,))],
        [float(v) for v in attrs.get("steps", (-1.0, -1.0))],
        [float(v) for v in attrs.get("offsets", (0.5, 0.5))], bool(attrs.get("clip", False)))
    dtype = dtype_of(inputs[0])
    return relax.const(anchors.astype(dtype), dtype)


@register_converter("vision.get_valid_counts")
def _get_valid_counts(inputs, attrs, ctx):
    data, threshold = inputs
    return relax.op.vision.get_valid_counts(
        data, float(scalar_operand(threshold, ctx, "score_threshold")),
        int(attrs.get("id_index", 0)), int(attrs.get("score_index", 1)))


def runtime_scalar(expr, ctx, name: str):
    """A 0-d/1-element integer tensor known only at run time as a TIR int32 expression:
    its value becomes a shape (``tensor_to_shape``) matched to a fresh symbolic dim, which
    a TE compute (``call_te``) then takes as an argument."""
    flat = ctx.emit(relax.op.reshape(relax.op.astype(expr, "int64"), [1]))
    dim, = run_time_dims(flat, [name], ctx)
    return tvm.tirx.Cast("int32", dim)


@register_converter("vision.multibox_transform_loc")
def _multibox_transform_loc(inputs, attrs, ctx):
    """Relay's SSD decode (not Relax's TFLite op of that name): per anchor the best class
    (from class 1 unless ``keep_background``; below ``threshold`` it is background), the
    anchor moved by the centre-size offsets scaled by ``variances``; rows
    ``[class, score, xmin, ymin, xmax, ymax]`` of the kept anchors first, in anchor order,
    then rows of -1 (Relay left those rows unwritten); and the kept count per batch."""
    emit = ctx.emit
    cls_prob, loc_pred, anchor = inputs
    classes, anchors = shape_of(cls_prob)[1:]
    keep = bool(attrs.get("keep_background", False))
    start = 0 if keep else 1
    if not isinstance(classes, int) or classes <= start:
        raise ctx.error(f"multibox_transform_loc needs a static class count > {start}")
    dtype = dtype_of(loc_pred)
    probs = cls_prob if start == 0 else emit(relax.op.strided_slice(cls_prob, [1], [1],
                                                                    [classes]))
    score = emit(relax.op.max(probs, axis=[1]))
    cls_id = emit(relax.op.add(relax.op.astype(emit(relax.op.argmax(probs, axis=1)), "int32"),
                               relax.const(start, "int32")))
    below = emit(relax.op.logical_and(
        relax.op.greater(cls_id, relax.const(0, "int32")),
        relax.op.less(score, relax.const(float(attrs.get("threshold", 0.01)),
                                         dtype_of(cls_prob)))))
    cls_id = emit(relax.op.where(below, relax.const(0, "int32"), cls_id))
    valid = emit(relax.op.greater_equal(cls_id, relax.const(0 if keep else 1, "int32")))
    label = emit(relax.op.astype(relax.op.subtract(cls_id, relax.const(start, "int32")),
                                 dtype))

    def part(tensor, i):
        return emit(relax.op.strided_slice(tensor, [2], [i], [i + 1]))

    loc = emit(relax.op.reshape(loc_pred, [shape_of(loc_pred)[0], anchors, 4]))
    left, top, right, bottom = (part(anchor, i) for i in range(4))
    px, py, pw, ph = (part(loc, i) for i in range(4))
    vx, vy, vw, vh = (relax.const(float(v), dtype)
                      for v in attrs.get("variances", (0.1, 0.1, 0.2, 0.2)))
    half = relax.const(0.5, dtype)
    aw, ah = emit(relax.op.subtract(right, left)), emit(relax.op.subtract(bottom, top))
    ax = emit(relax.op.multiply(relax.op.add(left, right), half))
    ay = emit(relax.op.multiply(relax.op.add(top, bottom), half))
    ox = emit(relax.op.add(relax.op.multiply(relax.op.multiply(px, vx), aw), ax))
    oy = emit(relax.op.add(relax.op.multiply(relax.op.multiply(py, vy), ah), ay))
    ow = emit(relax.op.multiply(relax.op.multiply(relax.op.exp(relax.op.multiply(pw, vw)), aw),
                                half))
    oh = emit(relax.op.multiply(relax.op.multiply(relax.op.exp(relax.op.multiply(ph, vh)), ah),
                                half))
    corners = [emit(relax.op.subtract(ox, ow)), emit(relax.op.subtract(oy, oh)),
               emit(relax.op.add(ox, ow)), emit(relax.op.add(oy, oh))]
    if attrs.get("clip", True):
        corners = [emit(relax.op.clip(c, 0.0, 1.0)) for c in corners]
    rows = emit(relax.op.concat(
        [emit(relax.op.expand_dims(label, [2])),
         emit(relax.op.expand_dims(relax.op.astype(score, dtype), [2]))] + corners, axis=2))
    rows = emit(relax.op.where(emit(relax.op.expand_dims(valid, [2])), rows,
                               relax.const(-1.0, dtype)))
    # Kept anchors first, in anchor order: sort by (not kept, anchor index).
    position = emit(relax.op.arange(0, anchors, 1, "int32"))
    key = emit(relax.op.where(valid, position,
                              relax.op.add(position, relax.const(anchors, "int32"))))
    order = emit(relax.op.argsort(key, axis=1, dtype="int64"))
    order = emit(relax.op.broadcast_to(emit(relax.op.expand_dims(order, [2])),
                                       shape_of(rows)))
    out = emit(relax.op.gather_elements(rows, order, axis=1))
    count = emit(relax.op.sum(relax.op.astype(valid, "int32"), axis=[1]))
    return relax.Tuple([out, count])


@register_converter("vision.non_max_suppression")
def _non_max_suppression(inputs, attrs, ctx):
    data, valid_count, indices, max_output_size, iou_threshold = inputs
    options = dict(
        iou_threshold=float(scalar_operand(iou_threshold, ctx, "iou_threshold")),
        force_suppress=bool(attrs.get("force_suppress", False)),
        top_k=int(attrs.get("top_k", -1)), coord_start=int(attrs.get("coord_start", 2)),
        score_index=int(attrs.get("score_index", 1)), id_index=int(attrs.get("id_index", 0)),
        return_indices=bool(attrs.get("return_indices", True)),
        invalid_to_bottom=bool(attrs.get("invalid_to_bottom", False)))
    if not options["return_indices"] and ndim_of(indices) != 2:
        # The indices only feed the returned indices; Relay's relation took any tensor here
        # (scripts pass the detections themselves), Relax's op wants (N, M).
        indices = relax.op.zeros(shape_of(data)[:2], "int32")
    limit = folded_value(max_output_size, ctx)
    if limit is not None and limit.size == 1:
        return relax.op.vision.non_max_suppression(
            data, valid_count, indices, max_output_size=int(limit.reshape(())), **options)
    # Relay takes the limit as a tensor operand: a run-time value goes to TOPI's compute.
    limit = runtime_scalar(max_output_size, ctx, "max_output_size")
    return ctx.bb.call_te(topi.vision.non_max_suppression, data, valid_count, indices,
                          limit, primfunc_name_hint="non_max_suppression", **options)


@register_converter("vision.all_class_non_max_suppression")
def _all_class_nms(inputs, attrs, ctx):
    boxes, scores, max_boxes, iou_threshold, score_threshold = inputs
    return relax.op.vision.all_class_non_max_suppression(
        boxes, scores, max_boxes, iou_threshold, score_threshold,
        attrs.get("output_format", "onnx"))


@register_converter("vision.roi_align")
def _roi_align(inputs, attrs, ctx):
    _check_roi_batch_indices(inputs, ctx)
    return relax.op.vision.roi_align(
        inputs[0], inputs[1], ints(attrs["pooled_size"]), float(attrs["spatial_scale"]),
        sample_ratio=int(attrs.get("sample_ratio", -1)), aligned=False,
        layout=attrs.get("layout", "NCHW"), mode=attrs.get("mode", "avg"))


@register_converter("vision.roi_pool")
def _roi_pool(inputs, attrs, ctx):
    _check_roi_batch_indices(inputs, ctx)
    return relax.op.vision.roi_pool(inputs[0], inputs[1], ints(attrs["pooled_size"]),
                                    float(attrs["spatial_scale"]),
                                    layout=attrs.get("layout", "NCHW"))


def _check_roi_batch_indices(inputs, ctx) -> None:
    """Column 0 of each ROI is the index of its image in the batch (a float, truncated as
    TOPI casts it): out of range, TOPI pools from beside the data."""
    data, rois = inputs[0], inputs[1]
    # a NaN coordinate passes TOPI's bounds tests (they compare false) and pools a
    # plausible value from the image's edge; a NaN batch index casts to anything
    emit_tensor_check(ctx, none_hold(relax.op.logical_not(relax.op.isfinite(rois))),
                      "the ROIs hold a NaN or infinite value in this run")
    first = relax.op.strided_slice(rois, axes=[1], begin=[0], end=[1])
    check_index_values(ctx.emit(relax.op.astype(first, "int64")), shape_of(data)[:1], ctx,
                       "the ROIs' batch indices (column 0)")


# ---------------------------------------------------------------------- vision.proposal
def proposal_anchors(scales, ratios, stride: int) -> np.ndarray:
    """Relay's (Faster R-CNN) base anchors ``[len(ratios) * len(scales), 4]``: anchor ``k``
    has ratio ``ratios[k // len(scales)]`` and scale ``scales[k % len(scales)]``, centred
    on a ``stride``-sized cell, sides rounded as Caffe's ``generate_anchors`` did."""
    side = float(stride)
    centre = 0.5 * (side - 1.0)
    boxes = []
    for ratio in ratios:
        for scale in scales:
            width = math.floor(math.sqrt(math.floor(side * side / ratio)) + 0.5) * scale
            height = math.floor(width / scale * ratio + 0.5) * scale
            boxes.append((centre - 0.5 * (width - 1.0), centre - 0.5 * (height - 1.0),
                          centre + 0.5 * (width - 1.0), centre + 0.5 * (height - 1.0)))
    return np.array(boxes, dtype="float32")


def _proposal_compute(cls_prob, bbox_pred, im_info, anchors, stride, iou_threshold,
                      pre_nms_top_n, post_nms_top_n, min_size, iou_loss):
    """TE compute of Relay's ``vision.proposal`` (see :func:`_proposal`)."""
    from tvm import te
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    batch, _, height, width = (int(d) for d in cls_prob.shape)
    count = int(anchors.shape[0])
    boxes = height * width * count
    pre = min(pre_nms_top_n, boxes) if pre_nms_top_n > 0 else boxes
    one, half, f32 = tvm.tirx.const(1.0, "float32"), tvm.tirx.const(0.5, "float32"), "float32"

    def predicted(b, i):
        """[x1, y1, x2, y2, score] of box ``i`` = ((h * W) + w) * A + k of batch ``b``."""
        k, w, h = i % count, (i // count) % width, i // (count * width)
        x1 = anchors[k, 0] + (w * stride).astype(f32)
        y1 = anchors[k, 1] + (h * stride).astype(f32)
        x2 = anchors[k, 2] + (w * stride).astype(f32)
        y2 = anchors[k, 3] + (h * stride).astype(f32)
        dx, dy, dw, dh = (bbox_pred[b, k * 4 + j, h, w] for j in range(4))
        if iou_loss:
            px1, py1, px2, py2 = x1 + dx, y1 + dy, x2 + dw, y2 + dh
        else:
            bw, bh = x2 - x1 + one, y2 - y1 + one
            cx, cy = dx * bw + x1 + half * (bw - one), dy * bh + y1 + half * (bh - one)
            pw, ph = te.exp(dw) * bw, te.exp(dh) * bh
            px1, py1 = cx - half * (pw - one), cy - half * (ph - one)
            px2, py2 = cx + half * (pw - one), cy + half * (ph - one)
        im_h, im_w, im_scale = im_info[b, 0], im_info[b, 1], im_info[b, 2]

        def clamp(v, hi):
            return te.max(te.min(v, hi - one), tvm.tirx.const(0.0, f32))

        px1, px2 = clamp(px1, im_w), clamp(px2, im_w)
        py1, py2 = clamp(py1, im_h), clamp(py2, im_h)
        outside = tvm.tirx.any(h >= (im_h / float(stride)).astype("int32"),
                               w >= (im_w / float(stride)).astype("int32"))
        score = tvm.tirx.Select(outside, tvm.tirx.const(-1.0, f32),
                                cls_prob[b, count + k, h, w])
        least = im_scale * float(min_size)
        small = tvm.tirx.any(px2 - px1 + one < least, py2 - py1 + one < least)
        grow = tvm.tirx.Select(small, least * half, tvm.tirx.const(0.0, f32))
        score = tvm.tirx.Select(small, tvm.tirx.const(-1.0, f32), score)
        return [px1 - grow, py1 - grow, px2 + grow, py2 + grow, score]

    def field(b, i, c):
        values = predicted(b, i)
        out = values[4]
        for j in range(3, -1, -1):
            out = tvm.tirx.Select(c == j, values[j], out)
        return out

    bbox = te.compute((batch, boxes, 5), field, name="proposal_boxes")
    score = te.compute((batch, boxes), lambda b, i: bbox[b, i, 4], name="proposal_scores")
    order = topi.argsort(score, axis=1, is_ascend=False, dtype="int32")
    ranked = te.compute((batch, pre, 5), lambda b, i, c: bbox[b, order[b, i], c],
                        name="proposal_ranked")

    def area(buf, b, i):
        return (buf[b, i, 2] - buf[b, i, 0] + one) * (buf[b, i, 3] - buf[b, i, 1] + one)

    def suppress_and_collect(ranked_buf, removed_buf, out_buf):
        """Greedy NMS over the ranked boxes (no score test: every ranked box takes part),
        then the kept boxes, in rank order and cycled until ``post_nms_top_n`` rows."""
        with IRBuilder() as ib:
            src = T.buffer_proxy(ranked_buf)
            removed = T.buffer_proxy(removed_buf)
            out = T.buffer_proxy(out_buf)
            with T.serial(0, batch) as b:
                with T.serial(0, pre) as i:
                    removed[b, i] = T.int32(0)
                with T.serial(0, pre) as l:
                    with T.serial(0, pre) as i:
                        with T.If(tvm.tirx.all(i > l, removed[b, l] == 0)):
                            with T.Then():
                                iw = te.max(tvm.tirx.const(0.0, f32),
                                            te.min(src[b, l, 2], src[b, i, 2])
                                            - te.max(src[b, l, 0], src[b, i, 0]) + one)
                                ih = te.max(tvm.tirx.const(0.0, f32),
                                            te.min(src[b, l, 3], src[b, i, 3])
                                            - te.max(src[b, l, 1], src[b, i, 1]) + one)
                                inter = iw * ih
                                union = area(src, b, l) + area(src, b, i) - inter
                                with T.If(inter / union > float(iou_threshold)):
                                    with T.Then():
                                        removed[b, i] = T.int32(1)
                kept_buf = T.alloc_buffer((1,), "int32", scope="local")
                kept = T.buffer_proxy(kept_buf)
                filled_buf = T.alloc_buffer((1,), "int32", scope="local")
                filled = T.buffer_proxy(filled_buf)
                kept[0] = T.int32(0)
                filled[0] = T.int32(0)
                with T.serial(0, post_nms_top_n) as r:
                    with T.serial(0, 5) as c:
                        out[b * post_nms_top_n + r, c] = tvm.tirx.const(0.0, f32)
                with T.serial(0, pre) as i:
                    with T.If(removed[b, i] == 0):
                        with T.Then():
                            kept[0] = kept[0] + 1
                with T.If(kept[0] > 0):
                    with T.Then():
                        with T.serial(0, (post_nms_top_n + kept[0] - 1) // kept[0]) as _:
                            with T.serial(0, pre) as i:
                                with T.If(tvm.tirx.all(filled[0] < post_nms_top_n,
                                                       removed[b, i] == 0)):
                                    with T.Then():
                                        row = b * post_nms_top_n + filled[0]
                                        out[row, 0] = b.astype(f32)
                                        with T.serial(0, 4) as c:
                                            out[row, c + 1] = src[b, i, c]
                                        filled[0] = filled[0] + 1
            return ib.get()

    _, out = te.extern([(batch, pre), (batch * post_nms_top_n, 5)], [ranked],
                       lambda ins, outs: suppress_and_collect(ins[0], outs[0], outs[1]),
                       dtype=["int32", f32], name="proposal_nms")
    return out


@register_converter("vision.proposal")
def _proposal(inputs, attrs, ctx):
    """Relay's Faster R-CNN region proposal (TOPI 0.27 no longer has it): anchors moved by
    the deltas and clipped to the image, boxes outside the valid feature map or smaller than
    ``rpn_min_size * scale`` scored -1 (the small ones also grown), the
    ``rpn_pre_nms_top_n`` best (stable order) through a greedy NMS with Caffe's +1 box
    areas, and the first ``rpn_post_nms_top_n`` survivors per batch (cycled when fewer) as
    ``[batch, x1, y1, x2, y2]``."""
    cls_prob, bbox_pred, im_info = inputs
    static_shape(cls_prob, ctx, "cls_prob")
    if any(dtype_of(x) != "float32" for x in inputs):
        raise ctx.error("vision.proposal takes float32 inputs")
    stride = int(attrs["feature_stride"])
    anchors = proposal_anchors([float(s) for s in attrs["scales"]],
                               [float(r) for r in attrs["ratios"]], stride)
    if 2 * len(anchors) != shape_of(cls_prob)[1]:
        raise ctx.error(f"cls_prob has {shape_of(cls_prob)[1]} channels; the "
                        f"{len(anchors)} anchors need {2 * len(anchors)}")
    return ctx.bb.call_te(
        _proposal_compute, cls_prob, bbox_pred, im_info, relax.const(anchors, "float32"),
        stride, float(attrs["threshold"]), int(attrs["rpn_pre_nms_top_n"]),
        int(attrs["rpn_post_nms_top_n"]), float(attrs["rpn_min_size"]),
        bool(attrs["iou_loss"]), primfunc_name_hint="vision_proposal")
