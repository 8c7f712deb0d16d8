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
(1, N, 6) detections and count).  Not converted: ``vision.proposal``.
"""
from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, topi
import tvm.topi.vision  # noqa: F401  (topi.vision.non_max_suppression)

from ..registry import register_converter
from ._utils import (dtype_of, folded_value, ints, ndim_of, scalar_operand, shape_of,
                     static_shape)


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
    dim = tvm.tirx.Var(name, "int64")
    ctx.bb.match_cast(ctx.emit(relax.op.tensor_to_shape(flat)), relax.ShapeType([dim]))
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
    return relax.op.vision.roi_align(
        inputs[0], inputs[1], ints(attrs["pooled_size"]), float(attrs["spatial_scale"]),
        sample_ratio=int(attrs.get("sample_ratio", -1)), aligned=False,
        layout=attrs.get("layout", "NCHW"), mode=attrs.get("mode", "avg"))


@register_converter("vision.roi_pool")
def _roi_pool(inputs, attrs, ctx):
    return relax.op.vision.roi_pool(inputs[0], inputs[1], ints(attrs["pooled_size"]),
                                    float(attrs["spatial_scale"]),
                                    layout=attrs.get("layout", "NCHW"))
