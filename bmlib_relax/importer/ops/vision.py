"""Detection ops (``vision.*``).

Forms: ``vision.multibox_prior`` -> a constant (its anchors depend only on the
input's static shape and the attributes); ``vision.get_valid_counts``,
``vision.roi_align`` -> the ``relax.op.vision`` op of the same name, with Relay's
defaults spelled out where Relax's differ (``roi_align`` is not "aligned");
``vision.roi_pool`` -> Relax's op on ROIs whose corners are already scaled and rounded
as v0.19 rounded them.  ``vision.non_max_suppression`` and
``vision.all_class_non_max_suppression`` are v0.19's TOPI algorithms (hybrid_nms,
_nms_loop) ported as TIR loops run on the host: TVM 0.27's rewrites differ in places.
NMS's ``iou_threshold`` must be a constant; its ``max_output_size`` and the all-class
op's thresholds and limit may be run-time values.  ``vision.multibox_transform_loc`` is
composed of Relax ops (Relax's op of that name is TFLite's, with other outputs: (boxes,
scores) instead of Relay's (1, N, 6) detections and count).  ``vision.proposal`` (gone
from TOPI 0.27) is a TE compute of its own, run on the host.
"""
from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax, topi

from ..registry import register_converter
from ..run_checks import emit_tensor_check, none_hold
from ._utils import (check_index_values, dtype_of, ints, ndim_of, round_half_away, scalar_operand,
                     shape_of, static_shape)


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
    if len(dims) != 4:
        # v0.19's MultiboxPriorRel: "Input data should be 4D: [batch, channel, height, width]"
        raise ctx.error(f"expects 4-D (batch, channel, height, width) data, got shape "
                        f"{tuple(dims)}")
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
    # v0.19's hybrid loop: score = -1, id = 0; per class ``id = k if p > score``, ``score =
    # max(p, score)`` (select(p > score)): a NaN or a p <= -1 never wins
    floor = relax.const(-1.0, dtype_of(cls_prob))
    probs = emit(relax.op.where(relax.op.greater(probs, floor), probs, floor))
    score = emit(relax.op.max(probs, axis=[1]))
    cls_id = emit(relax.op.add(relax.op.astype(emit(relax.op.argmax(probs, axis=1)), "int32"),
                               relax.const(start, "int32")))
    cls_id = emit(relax.op.where(relax.op.greater(score, floor), cls_id,
                                 relax.const(0, "int32")))
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
    """v0.19's ``topi.vision.non_max_suppression`` (``hybrid_nms`` then
    ``hybrid_rearrange_*``), as a TIR loop of its own on the host: TVM 0.27's rewrite
    differs (see :func:`_nms_v019_compute`)."""
    data, valid_count, indices, max_output_size, iou_threshold = inputs
    if ndim_of(data) != 3 or ndim_of(valid_count) != 1:
        raise ctx.error("takes 3-D data and a 1-D valid_count (v0.19's NMSRel)")
    if dtype_of(data) != "float32":
        # v0.19 sorted the scores with tvm.contrib.sort.argsort_nms: float32 only
        raise ctx.error(f"takes float32 data, got {dtype_of(data)} (v0.19's argsort_nms "
                        "sorted float32 scores only)")
    options = dict(
        iou_threshold=float(scalar_operand(iou_threshold, ctx, "iou_threshold")),
        force_suppress=bool(attrs.get("force_suppress", False)),
        top_k=int(attrs.get("top_k", -1)), coord_start=int(attrs.get("coord_start", 2)),
        score_index=int(attrs.get("score_index", 1)), id_index=int(attrs.get("id_index", 0)),
        return_indices=bool(attrs.get("return_indices", True)),
        invalid_to_bottom=bool(attrs.get("invalid_to_bottom", False)))
    _check_nms_columns(shape_of(data)[2], options, ctx)
    if not options["return_indices"] and ndim_of(indices) != 2:
        # The indices only feed the returned indices; Relay's relation took any tensor here
        # (scripts pass the detections themselves).
        indices = ctx.emit(relax.op.zeros(shape_of(data)[:2], "int32"))
    elif ndim_of(indices) != 2:
        raise ctx.error("indices must be 2-D (batch, num_anchors) to map the kept boxes")
    _check_valid_counts(valid_count, shape_of(data)[1], ctx)
    # Relay takes the limit as a tensor operand (a constant or a run-time value)
    limit = ctx.emit(relax.op.reshape(relax.op.astype(max_output_size, "int32"), [1]))
    return ctx.bb.call_te(_nms_v019_compute, data, valid_count, indices, limit,
                          primfunc_name_hint="non_max_suppression", **options)


def _check_nms_columns(length, options, ctx) -> None:
    """The columns NMS reads must exist (v0.19 read beside the row otherwise)."""
    if not isinstance(length, int):
        return
    used = [options["score_index"], options["coord_start"] + 3]
    if options["id_index"] >= 0:
        used.append(options["id_index"])
    if min(options["score_index"], options["coord_start"]) < 0 or max(used) >= length:
        raise ctx.error(f"score_index={options['score_index']}, coord_start="
                        f"{options['coord_start']}, id_index={options['id_index']} read "
                        f"columns past the {length} of each box")


def _check_valid_counts(valid_count, num_anchors, ctx) -> None:
    """A valid count outside [0, num_anchors] made v0.19 sort and copy beside the rows."""
    if not isinstance(num_anchors, int):
        return
    count = relax.op.astype(valid_count, "int64")
    outside = relax.op.logical_or(relax.op.less(count, relax.const(0, "int64")),
                                  relax.op.greater(count, relax.const(num_anchors, "int64")))
    emit_tensor_check(ctx, none_hold(outside),
                      f"a valid_count is outside [0, {num_anchors}] in this run")


def _if(cond, then, otherwise=None):
    """``if cond: then() else: otherwise()`` in the TIR being built."""
    from tvm.script.ir_builder import tirx as T

    with T.If(cond):
        with T.Then():
            then()
        if otherwise is not None:
            with T.Else():
                otherwise()


def _i32(value):
    """``value`` (a dim, an int64 or int32 load) as an int32 TIR expression."""
    return tvm.tirx.Cast("int32", value) if not isinstance(value, int) else \
        tvm.tirx.IntImm("int32", value)


def _local_int(value=0):
    """A one-element local int32 buffer (a mutable scalar of the TIR being built)."""
    from tvm.script.ir_builder import tirx as T

    buf = T.buffer_proxy(T.alloc_buffer((1,), "int32", scope="local"))
    buf[0] = T.int32(value)
    return buf


def _stable_sort_descending(score, order, row, count) -> None:
    """``order[row, :count]`` = positions ``0..count-1`` by descending ``score(j)``, equal
    scores in position order: v0.19's CPU sorts were ``std::stable_sort`` with
    ``CompareDescend`` (``a > b``).  An insertion sort: the tensors are small."""
    from tvm.script.ir_builder import tirx as T

    with T.serial(0, count) as j:
        slot, moving = _local_int(), _local_int(1)
        slot[0] = j
        with T.serial(0, j) as t:
            m = j - 1 - t

            def shift():
                order[row, m + 1] = order[row, m]
                slot[0] = m

            def stop():
                moving[0] = T.int32(0)
            _if(tvm.tirx.all(moving[0] == 1, score(j) > score(order[row, m])), shift, stop)
        order[row, slot[0]] = j


def _nms_v019_compute(data, valid_count, indices, limit, iou_threshold, force_suppress,
                      top_k, coord_start, score_index, id_index, return_indices,
                      invalid_to_bottom):
    """v0.19's ``non_max_suppression`` (python/tvm/topi/vision/nms.py).  Where TVM 0.27's
    rewrite differs, this follows v0.19: with ``iou_threshold <= 0`` nothing is sorted or
    suppressed (rows copied as they are); ``max_output_size == 0`` keeps no box (only a
    negative one is no limit); a box whose score is not positive is kept, unsuppressed
    and unsuppressing (``elif score > 0`` only skips its IoU test); a box of class < 0
    never suppresses; ``invalid_to_bottom`` moves the rows whose column 0 is >= 0."""
    from tvm import te
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    batch, anchors, length = data.shape
    dtype = data.dtype
    minus_one = tvm.tirx.const(-1.0, dtype)
    zero = tvm.tirx.const(0.0, dtype)
    threshold = tvm.tirx.const(iou_threshold, dtype)

    def corners(buf, i, j):
        x1, y1 = buf[i, j, coord_start], buf[i, j, coord_start + 1]
        x2, y2 = buf[i, j, coord_start + 2], buf[i, j, coord_start + 3]
        return te.min(x1, x2), te.min(y1, y2), te.max(x1, x2), te.max(y1, y2)

    def iou(buf, i, j, k):
        """``hybrid_nms``'s IoU of rows ``j`` and ``k`` (0 when the union is not > 0)."""
        al, at, ar, ab = corners(buf, i, j)
        bl, bt, br, bb = corners(buf, i, k)
        w = te.max(zero, te.min(ar, br) - te.max(al, bl))
        h = te.max(zero, te.min(ab, bb) - te.max(at, bt))
        area = h * w
        union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - area
        return tvm.tirx.Select(union <= zero, zero, area / union)

    def nms(src_buf, vc_buf, idx_buf, limit_buf, order_buf, picked_buf, out_buf):
        src, vcs, idx = T.buffer_proxy(src_buf), T.buffer_proxy(vc_buf), T.buffer_proxy(idx_buf)
        most = T.buffer_proxy(limit_buf)[0]
        order, picked, out = (T.buffer_proxy(b) for b in (order_buf, picked_buf, out_buf))

        def clear(i, j):
            with T.serial(0, length) as c:
                out[i, j, c] = minus_one
            picked[i, j] = T.int32(-1)

        def copy(i, j, source_row):
            with T.serial(0, length) as c:
                out[i, j, c] = src[i, source_row, c]
            picked[i, j] = source_row

        def suppress(i, count):
            kept = _local_int()
            with T.serial(0, count) as j:
                def test_box():
                    valid = _local_int(1)
                    with T.serial(0, j) as k:
                        checks = [valid[0] == 1, out[i, k, score_index] > zero]
                        if id_index >= 0:
                            checks.append(out[i, k, id_index] >= zero)
                            if not force_suppress:
                                checks.append(out[i, j, id_index] == out[i, k, id_index])
                        _if(tvm.tirx.all(*checks),
                            lambda: _if(iou(out, i, j, k) >= threshold,
                                        lambda: valid.__setitem__(0, T.int32(0))))
                    _if(valid[0] == 0, lambda: clear(i, j),
                        lambda: kept.__setitem__(0, kept[0] + 1))
                _if(kept[0] == most, lambda: clear(i, j),
                    lambda: _if(out[i, j, score_index] > zero, test_box))

        with IRBuilder() as ib:
            with T.serial(0, batch) as i:
                count = tvm.tirx.min(tvm.tirx.max(_i32(vcs[i]), 0), _i32(anchors))
                if iou_threshold > 0:
                    _stable_sort_descending(lambda j: src[i, j, score_index], order, i, count)
                    keep = te.min(count, top_k) if top_k > 0 else count
                    with T.serial(0, keep) as j:
                        copy(i, j, order[i, j])
                    with T.serial(0, count - keep) as j:
                        clear(i, j + keep)
                    suppress(i, count)
                else:
                    with T.serial(0, count) as j:
                        copy(i, j, j)
                with T.serial(0, _i32(anchors) - count) as j:
                    clear(i, j + count)
                if return_indices:
                    with T.serial(0, count) as j:
                        _if(picked[i, j] >= 0,
                            lambda: picked.__setitem__((i, j), _i32(idx[i, picked[i, j]])))
            return ib.get()

    shapes = [(batch, anchors), (batch, anchors), (batch, anchors, length)]
    _, picked, out = te.extern(
        shapes, [data, valid_count, indices, limit],
        lambda ins, outs: nms(*ins, *outs), dtype=["int32", "int32", dtype], name="hybrid_nms")
    if return_indices:
        return _rearrange_indices_v019(picked)
    if invalid_to_bottom:
        return _rearrange_boxes_v019(out)
    return out


def _rearrange_indices_v019(picked):
    """v0.19's ``hybrid_rearrange_indices_out``: the kept indices (>= 0) first, then -1,
    and their count; an index beyond +-num_anchors also adds a 0 after it, as v0.19's
    did (kept inside the row here, where v0.19 wrote past it)."""
    from tvm import te
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    batch, anchors = picked.shape
    size = _i32(anchors)

    def rearrange(src_buf, out_buf, count_buf):
        src, out, counts = (T.buffer_proxy(b) for b in (src_buf, out_buf, count_buf))
        with IRBuilder() as ib:
            with T.serial(0, batch) as i:
                found = _local_int()

                def put(value):
                    _if(found[0] < size, lambda: out.__setitem__((i, found[0]), value))
                    found[0] = found[0] + 1
                with T.serial(0, anchors) as j:
                    value = src[i, j]
                    _if(value >= 0, lambda: put(value))
                    _if(tvm.tirx.any(value > size, value < -size),
                        lambda: put(T.int32(0)))
                    _if(j >= found[0], lambda: out.__setitem__((i, j), T.int32(-1)))
                counts[i, 0] = found[0]
            return ib.get()

    return list(te.extern([(batch, anchors), (batch, 1)], [picked],
                          lambda ins, outs: rearrange(ins[0], *outs),
                          dtype=["int32", "int32"], name="rearrange_indices_out"))


def _rearrange_boxes_v019(boxes):
    """v0.19's ``hybrid_rearrange_box_out``: rows whose column 0 is >= 0 first (column 0,
    whatever ``score_index`` is), then rows of -1."""
    from tvm import te
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    batch, anchors, length = boxes.shape
    minus_one = tvm.tirx.const(-1.0, boxes.dtype)

    def rearrange(src_buf, out_buf):
        src, out = T.buffer_proxy(src_buf), T.buffer_proxy(out_buf)
        with IRBuilder() as ib:
            with T.serial(0, batch) as i:
                found = _local_int()
                with T.serial(0, anchors) as j:
                    def move():
                        with T.serial(0, length) as c:
                            out[i, found[0], c] = src[i, j, c]
                        found[0] = found[0] + 1

                    def clear():
                        with T.serial(0, length) as c:
                            out[i, j, c] = minus_one
                    _if(src[i, j, 0] >= tvm.tirx.const(0.0, boxes.dtype), move)
                    _if(j >= found[0], clear)
            return ib.get()

    return te.extern([boxes.shape], [boxes], lambda ins, outs: rearrange(ins[0], outs[0]),
                     dtype=[boxes.dtype], name="rearrange_box_out")


@register_converter("vision.all_class_non_max_suppression")
def _all_class_nms(inputs, attrs, ctx):
    """v0.19's ``topi.vision.all_class_non_max_suppression`` as a TIR loop of its own (see
    :func:`_all_class_nms_v019_compute`): Relax's op (TVM 0.27) takes a limit <= 0 as
    "keep none" and trims the ONNX rows to the count."""
    boxes, scores, max_boxes, iou_threshold, score_threshold = inputs
    fmt = attrs.get("output_format", "onnx")
    if fmt not in ("onnx", "tensorflow"):
        raise ctx.unsupported_attr("output_format", fmt)
    if ndim_of(boxes) != 3 or ndim_of(scores) != 3:
        raise ctx.error("takes 3-D boxes (batch, boxes, 4) and 3-D scores "
                        "(batch, classes, boxes) (v0.19's AllClassNMSRel)")
    (batch, count, corners), (score_batch, _, score_count) = shape_of(boxes), shape_of(scores)
    for what, a, b in (("batch", batch, score_batch), ("box count", count, score_count),
                       ("box size", corners, 4)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ctx.error(f"boxes {tuple(shape_of(boxes))} and scores "
                            f"{tuple(shape_of(scores))} differ in their {what}")
    if not dtype_of(scores).startswith("float") or not dtype_of(boxes).startswith("float"):
        raise ctx.error("takes float boxes and scores")

    def one(expr, dtype):
        return ctx.emit(relax.op.reshape(relax.op.astype(expr, dtype), [1]))

    results = ctx.emit(ctx.bb.call_te(
        _all_class_nms_v019_compute, boxes, scores, one(max_boxes, "int64"),
        one(iou_threshold, "float32"), one(score_threshold, "float32"), fmt,
        primfunc_name_hint="all_class_non_max_suppression"))
    # the first _ACNMS_SCRATCH results are the compute's working tensors
    return relax.Tuple([relax.TupleGetItem(results, k)
                        for k in range(_ACNMS_SCRATCH, _ACNMS_SCRATCH + (2 if fmt == "onnx"
                                                                         else 3))])


#: working tensors ahead of the results of :func:`_all_class_nms_v019_compute` (returned
#: as results: TVM 0.27's buffer flattening fails on them as the extern's internals)
_ACNMS_SCRATCH = 5


def _all_class_nms_v019_compute(boxes, scores, limit, iou_threshold, score_threshold,
                                output_format):
    """v0.19's all-class NMS (python/tvm/topi/vision/nms.py, nms_util.py): per batch and
    class a stable descending sort of the scores, the count above ``score_threshold``
    (its binary search), ``_nms_loop`` with ``max_output_size = limit if limit > 0 else
    the count`` (no limit), boxes with a positive score suppressed when their IoU with a
    kept one is >= ``iou_threshold``; then the rows collected.  ONNX: ``(batch * classes *
    boxes, 3)`` rows ``[batch, class, box]`` and their total (v0.19's AllClassNMSRel
    shape; the rows past the total, which v0.19 left unwritten, are 0).  TensorFlow:
    ``(batch, classes * boxes, 2)`` ``[class, box]``, their scores, and the count per
    batch, the rest 0 as v0.19 wrote them."""
    from tvm import te
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    batch, classes, num = scores.shape
    groups = batch * classes
    dtype = scores.dtype

    def overlap(box, b, j, k):
        """nms_util's ``calculate_overlap`` of boxes ``j`` and ``k`` of batch ``b``."""
        def edges(i):
            x1, y1, x2, y2 = (box[b, i, c] for c in range(4))
            return te.min(x1, x2), te.min(y1, y2), te.max(x1, x2), te.max(y1, y2)
        al, at, ar, ab = edges(j)
        bl, bt, br, bb = edges(k)
        zero = tvm.tirx.const(0.0, boxes.dtype)
        w = te.max(zero, te.min(ar, br) - te.max(al, bl))
        h = te.max(zero, te.min(ab, bb) - te.max(at, bt))
        area = h * w
        union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - area
        return tvm.tirx.Select(union <= zero, zero, area / union).astype("float32")

    def per_class(box, score, most, iou, threshold, order, ranked, chosen, chosen_score,
                  found, g):
        b, c = g // classes, g % classes
        _stable_sort_descending(lambda j: score[b, c, j], order, g, _i32(num))
        with T.serial(0, num) as j:
            ranked[g, j] = score[b, c, order[g, j]]
        low, high = _local_int(), _local_int()
        high[0] = _i32(num)
        with T.While(low[0] < high[0]):
            mid = (low[0] + high[0]) >> 1
            _if(ranked[g, mid].astype("float32") > threshold,
                lambda: low.__setitem__(0, mid + 1), lambda: high.__setitem__(0, mid))
        count = low[0]
        size = tvm.tirx.Select(most > 0, tvm.tirx.min(most, tvm.tirx.Cast("int64", num)),
                               tvm.tirx.Cast("int64", count)).astype("int32")
        kept = _local_int()
        found[g] = T.int32(0)

        def suppress_after(j):
            chosen[g, kept[0]] = order[g, j]
            chosen_score[g, kept[0]] = ranked[g, j].astype("float32")
            kept[0] = kept[0] + 1
            with T.serial(0, count - j - 1) as t:
                k = j + 1 + t
                _if(tvm.tirx.all(ranked[g, k] > tvm.tirx.const(0.0, dtype),
                                 overlap(box, b, order[g, j], order[g, k]) >= iou),
                    lambda: ranked.__setitem__((g, k), tvm.tirx.const(-1.0, dtype)))

        def run():
            with T.serial(0, count) as j:
                _if(tvm.tirx.all(ranked[g, j] > tvm.tirx.const(-1.0, dtype), kept[0] < size),
                    lambda: suppress_after(j))
            found[g] = kept[0]
        _if(tvm.tirx.all(iou > tvm.tirx.const(0.0, "float32"), count > 0), run)

    def body(box_buf, score_buf, limit_buf, iou_buf, threshold_buf, *out_bufs):
        box, score = T.buffer_proxy(box_buf), T.buffer_proxy(score_buf)
        most = T.buffer_proxy(limit_buf)[0]
        iou, threshold = T.buffer_proxy(iou_buf)[0], T.buffer_proxy(threshold_buf)[0]
        order, ranked, chosen, chosen_score, found, *outs = (T.buffer_proxy(b)
                                                            for b in out_bufs)
        with IRBuilder() as ib:
            with T.seq_scope():
                with T.serial(0, groups) as g:
                    per_class(box, score, most, iou, threshold, order, ranked, chosen,
                              chosen_score, found, g)
                if output_format == "onnx":
                    _collect_onnx(outs, chosen, found, batch, classes, num)
                else:
                    _collect_tensorflow(outs, chosen, chosen_score, found, batch, classes,
                                        num)
            return ib.get()

    scratch = [(groups, num), (groups, num), (groups, num), (groups, num), (groups,)]
    scratch_types = ["int32", dtype, "int32", "float32", "int32"]
    if output_format == "onnx":
        shapes, types = [(groups * num, 3), (1,)], ["int64", "int64"]
    else:
        shapes = [(batch, classes * num, 2), (batch, classes * num), (batch,)]
        types = ["int64", "float32", "int64"]
    results = te.extern(scratch + shapes, [boxes, scores, limit, iou_threshold, score_threshold],
                        lambda ins, outs: body(*ins, *outs), dtype=scratch_types + types,
                        name="all_class_nms")
    assert len(scratch) == _ACNMS_SCRATCH
    return list(results)


def _collect_onnx(outs, chosen, found, batch, classes, num) -> None:
    """v0.19's ``_collect_selected_indices_ir``: the kept boxes of (batch 0, class 0),
    (0, 1), ... as ``[batch, class, box]`` rows; the total in ``outs[1]``."""
    from tvm.script.ir_builder import tirx as T

    rows, total = outs
    with T.serial(0, batch * classes * num) as r:
        with T.serial(0, 3) as c:
            rows[r, c] = T.int64(0)
    offset = _local_int()
    with T.serial(0, batch * classes) as g:
        with T.serial(0, found[g]) as j:
            rows[offset[0] + j, 0] = (g // classes).astype("int64")
            rows[offset[0] + j, 1] = (g % classes).astype("int64")
            rows[offset[0] + j, 2] = chosen[g, j].astype("int64")
        offset[0] = offset[0] + found[g]
    total[0] = offset[0].astype("int64")


def _collect_tensorflow(outs, chosen, chosen_score, found, batch, classes, num) -> None:
    """v0.19's ``_collect_selected_indices_and_scores_ir``: per batch the kept
    ``[class, box]`` of each class in turn and their scores, then zeros; the count."""
    from tvm.script.ir_builder import tirx as T

    rows, values, totals = outs
    with T.serial(0, batch) as b:
        with T.serial(0, classes * num) as r:
            rows[b, r, 0] = T.int64(0)
            rows[b, r, 1] = T.int64(0)
            values[b, r] = T.float32(0.0)
        offset = _local_int()
        with T.serial(0, classes) as c:
            g = b * classes + c
            with T.serial(0, found[g]) as j:
                rows[b, offset[0] + j, 0] = c.astype("int64")
                rows[b, offset[0] + j, 1] = chosen[g, j].astype("int64")
                values[b, offset[0] + j] = chosen_score[g, j]
            offset[0] = offset[0] + found[g]
        totals[b] = offset[0].astype("int64")


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
    return relax.op.vision.roi_pool(inputs[0], _roi_corners_rounded(inputs[1], attrs, ctx),
                                    ints(attrs["pooled_size"]), 1.0,
                                    layout=attrs.get("layout", "NCHW"))


def _roi_corners_rounded(rois, attrs, ctx) -> relax.Expr:
    """The ROIs with their corners scaled and rounded as v0.19's roi_pool_nchw did,
    ``te.round(x * spatial_scale)`` = llvm.round (halves away from zero: -1.5 -> -2),
    for a pool at scale 1: TVM 0.27's rounds with ``floor(x + 0.5)`` (-1.5 -> -1), which
    leaves the whole numbers given here as they are."""
    dtype = dtype_of(rois)
    index = relax.op.strided_slice(rois, axes=[1], begin=[0], end=[1])
    corners = relax.op.strided_slice(rois, axes=[1], begin=[1], end=[5])
    scaled = relax.op.multiply(corners, relax.const(float(attrs["spatial_scale"]), dtype))
    return ctx.emit(relax.op.concat([index, round_half_away(scaled, ctx)], axis=1))


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


def _check_proposal_operands(cls_prob, bbox_pred, im_info, anchors: int, ctx) -> None:
    """v0.19's ProposalRel: 4-D cls_prob and bbox_pred, im_info of shape (batch, 3)
    (height, width, scale).  Its compute then read bbox_pred's ``4 * anchors`` channels
    and im_info's row of each batch at cls_prob's positions: a smaller operand was read
    beside its buffer, refused here."""
    if ndim_of(bbox_pred) != 4 or ndim_of(im_info) != 2:
        raise ctx.error(f"takes a 4-D bbox_pred and a 2-D im_info (v0.19's ProposalRel), got "
                        f"{ndim_of(bbox_pred)}-D and {ndim_of(im_info)}-D")
    batch, _, height, width = shape_of(cls_prob)
    info = static_shape(im_info, ctx, "im_info")
    if info[1] != 3:
        raise ctx.error(f"im_info has shape {tuple(info)}: its rows must be "
                        "(height, width, scale), 3 values (v0.19's ProposalRel)")
    if info[0] < batch:
        raise ctx.error(f"im_info has {info[0]} rows for a batch of {batch}")
    need = (batch, 4 * anchors, height, width)
    have = static_shape(bbox_pred, ctx, "bbox_pred")
    if any(h < n for h, n in zip(have, need)):
        raise ctx.error(f"bbox_pred has shape {tuple(have)}: the {anchors} anchors of a "
                        f"{tuple(shape_of(cls_prob))} cls_prob read {need} of it")


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
    _check_proposal_operands(cls_prob, bbox_pred, im_info, len(anchors), ctx)
    return ctx.bb.call_te(
        _proposal_compute, cls_prob, bbox_pred, im_info, relax.const(anchors, "float32"),
        stride, float(attrs["threshold"]), int(attrs["rpn_pre_nms_top_n"]),
        int(attrs["rpn_post_nms_top_n"]), float(attrs["rpn_min_size"]),
        bool(attrs["iou_loss"]), primfunc_name_hint="vision_proposal")
