"""``relay.vision.*``: detection ops with Relay v0.19's Python signatures
(``python/tvm/relay/op/vision/``).  Scalar thresholds given as numbers become
constant operands with Relay's dtypes, and tuple-valued ops return a
:class:`TupleWrapper`, as Relay's Python API did."""
from __future__ import annotations

from .. import ast
from ..builder import const
from ..type_infer import register_type_relation
from ._make import TupleWrapper, as_expr, define_ops, registered

TABLE = {
    "multibox_prior": ("data, sizes=(1.0,), ratios=(1.0,), steps=(-1.0, -1.0), "
                       "offsets=(0.5, 0.5), clip=False", "data"),
    "multibox_transform_loc": ("cls_prob, loc_pred, anchor, clip=True, threshold=0.01, "
                               "variances=(0.1, 0.1, 0.2, 0.2), keep_background=False",
                               "cls_prob loc_pred anchor", {"tuple_size": 2}),
    "roi_align": ("data, rois, pooled_size, spatial_scale, sample_ratio=-1, layout='NCHW', "
                  "mode='avg'", "data rois"),
    "roi_pool": ("data, rois, pooled_size, spatial_scale, layout='NCHW'", "data rois"),
    "proposal": ("cls_prob, bbox_pred, im_info, scales, ratios, feature_stride, threshold, "
                 "rpn_pre_nms_top_n, rpn_post_nms_top_n, rpn_min_size, iou_loss",
                 "cls_prob bbox_pred im_info"),
    "yolo_reorg": ("data, stride", "data"),
}

__all__ = define_ops(globals(), "vision.", TABLE)


def _scalar(value, dtype: str) -> ast.Expr:
    return value if isinstance(value, ast.Expr) else const(value, dtype)


@registered("vision.get_valid_counts")
def get_valid_counts(data, score_threshold, id_index=0, score_index=1):
    """Relay ``vision.get_valid_counts``: (valid_count, out_tensor, out_indices)."""
    call = ast.Call(ast.Op("vision.get_valid_counts"),
                    (as_expr(data, "get_valid_counts data"), _scalar(score_threshold, "float32")),
                    # Relay's GetValidCountsAttrs keeps an (unset) score_threshold field,
                    # which its printer shows: the threshold itself is the operand.
                    ast.Attrs({"score_threshold": None, "id_index": id_index,
                               "score_index": score_index}))
    return TupleWrapper(call, 3)


@registered("vision.non_max_suppression")
def non_max_suppression(data, valid_count, indices, max_output_size=-1, iou_threshold=0.5,
                        force_suppress=False, top_k=-1, coord_start=2, score_index=1,
                        id_index=0, return_indices=True, invalid_to_bottom=False):
    """Relay ``vision.non_max_suppression`` (a TupleWrapper when ``return_indices``)."""
    operands = (as_expr(data, "nms data"), as_expr(valid_count, "nms valid_count"),
                as_expr(indices, "nms indices"), _scalar(max_output_size, "int32"),
                _scalar(iou_threshold, "float32"))
    attrs = {"force_suppress": bool(force_suppress), "top_k": top_k,
             "coord_start": coord_start, "score_index": score_index, "id_index": id_index,
             "return_indices": bool(return_indices), "invalid_to_bottom": bool(invalid_to_bottom)}
    call = ast.Call(ast.Op("vision.non_max_suppression"), operands, ast.Attrs(attrs))
    return TupleWrapper(call, 2) if return_indices else call


@registered("vision.all_class_non_max_suppression")
def all_class_non_max_suppression(boxes, scores, max_output_boxes_per_class=-1,
                                  iou_threshold=-1.0, score_threshold=-1.0,
                                  output_format="onnx"):
    """Relay ``vision.all_class_non_max_suppression``: 2 fields (onnx) or 3 (tensorflow)."""
    operands = (as_expr(boxes, "nms boxes"), as_expr(scores, "nms scores"),
                _scalar(max_output_boxes_per_class, "int32"), _scalar(iou_threshold, "float32"),
                _scalar(score_threshold, "float32"))
    call = ast.Call(ast.Op("vision.all_class_non_max_suppression"), operands,
                    ast.Attrs({"output_format": output_format}))
    return TupleWrapper(call, 2 if output_format == "onnx" else 3)


@registered("vision.regular_non_max_suppression")
def regular_non_max_suppression(boxes, scores, max_detections_per_class, max_detections,
                                num_classes, iou_threshold, score_threshold):
    """Relay ``vision.regular_non_max_suppression``: (boxes, classes, scores, count)."""
    attrs = {"max_detections_per_class": max_detections_per_class,
             "max_detections": max_detections, "num_classes": num_classes,
             "iou_threshold": iou_threshold, "score_threshold": score_threshold}
    call = ast.Call(ast.Op("vision.regular_non_max_suppression"),
                    (as_expr(boxes, "nms boxes"), as_expr(scores, "nms scores")),
                    ast.Attrs(attrs))
    return TupleWrapper(call, 4)


__all__ += ["get_valid_counts", "non_max_suppression", "all_class_non_max_suppression",
            "regular_non_max_suppression"]


@register_type_relation("vision.yolo_reorg")
def _yolo_reorg_type(arg_types, attrs, call):
    """(N, C, H, W) -> (N, C*s*s, H/s, W/s), symbolic dims included (Relay's YoloReorgRel)."""
    data = arg_types[0]
    n, c, h, w = data.shape
    s = int(attrs["stride"])

    def div(d):
        return None if d is None else (d // s if isinstance(d, int) else d // s)

    chans = None if c is None else c * s * s
    return ast.TensorType((n, chans, div(h), div(w)), data.dtype)


@register_type_relation("vision.multibox_transform_loc")
def _multibox_transform_loc_type(arg_types, attrs, call):
    """(detections (N, anchors, 6), valid count (N,) int32), as Relay's MultiBoxTransformLocRel."""
    cls_prob = arg_types[0]
    batch, _, anchors = cls_prob.shape
    return ast.TupleType((ast.TensorType((batch, anchors, 6), cls_prob.dtype),
                          ast.TensorType((batch,), "int32")))


@register_type_relation("vision.proposal")
def _proposal_type(arg_types, attrs, call):
    """(N * rpn_post_nms_top_n, 5) boxes, as Relay's ProposalRel."""
    cls_prob = arg_types[0]
    batch = cls_prob.shape[0]
    rows = batch * int(attrs["rpn_post_nms_top_n"]) if isinstance(batch, int) else None
    return ast.TensorType((rows, 5), cls_prob.dtype)


@register_type_relation("vision.non_max_suppression")
def _non_max_suppression_type(arg_types, attrs, call):
    """Relay's NMSRel: the data's type, or (indices (N, M) int32, count (N, 1) int32) when
    ``return_indices``; the limit and threshold may be run-time tensors."""
    data = arg_types[0]
    if not isinstance(data, ast.TensorType) or len(data.shape) != 3:
        raise ValueError(f"the data must be 3-D, got {data}")
    count = arg_types[1]
    if not isinstance(count, ast.TensorType) or len(count.shape) != 1:
        raise ValueError(f"the valid count must be 1-D, got {count}")
    if not attrs.get("return_indices", True):
        return data
    batch, anchors = data.shape[0], data.shape[1]
    return ast.TupleType((ast.TensorType((batch, anchors), "int32"),
                          ast.TensorType((batch, 1), "int32")))
