"""Every builder function has Relay v0.19's Python signature: same positional order,
keyword names and defaults (checked mechanically with ``inspect.signature``).

The table was written from TVM v0.19's ``python/tvm/relay/op/{tensor,transform,reduce,
algorithm}.py``, ``nn/nn.py``, ``image/image.py`` and ``vision/*.py``: one row per public
function, its parameter list as Relay's source spells it.
"""
import inspect

import pytest

from bmlib_relax import relay

# Relay path -> parameter list (Relay v0.19).  Left out on purpose: ``copy_shape_func``
# (a shape function, not a builder).
RELAY_SIGNATURES = [
    ("sort", "data, axis=-1, is_ascend=1"),
    ("argsort", "data, axis=-1, is_ascend=1, dtype='int32'"),
    ("topk", "data, k=1, axis=-1, ret_type='both', is_ascend=False, dtype='int32'"),
    ("searchsorted", "sorted_sequence, values, right=False, dtype='int32'"),
    ("image.resize1d", "data, size, roi=None, layout='NCW', method='linear', coordinate_transformation_mode='half_pixel', rounding_method='', cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=None"),
    ("image.resize2d", "data, size, roi=None, layout='NCHW', method='linear', coordinate_transformation_mode='half_pixel', rounding_method='', cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=None"),
    ("image.resize3d", "data, size, roi=None, layout='NCDHW', method='linear', coordinate_transformation_mode='half_pixel', rounding_method='', cubic_alpha=-0.5, cubic_exclude=0, extrapolation_value=0.0, out_dtype=None"),
    ("image.crop_and_resize", "data, boxes, box_indices, crop_size, layout, method='bilinear', extrapolation_value=0, out_dtype=None"),
    ("image.dilation2d", "data, weight, strides=(1, 1), padding=(0, 0), dilations=(1, 1), data_layout='NCHW', kernel_layout='IHW', out_dtype=''"),
    ("image.affine_grid", "data, target_shape=None"),
    ("image.grid_sample", "data, grid, method='bilinear', layout='NCHW', padding_mode='zeros', align_corners=True"),
    ("nn.conv1d", "data, weight, strides=1, padding=0, dilation=1, groups=1, channels=None, kernel_size=None, data_layout='NCW', kernel_layout='OIW', out_layout='', out_dtype=''"),
    ("nn.conv2d", "data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCHW', kernel_layout='OIHW', out_layout='', out_dtype=''"),
    ("nn.conv3d", "data, weight, strides=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCDHW', kernel_layout='OIDHW', out_layout='', out_dtype=''"),
    ("nn.contrib_conv3d_winograd_without_weight_transform", "data, weight, tile_size, strides=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCDHW', kernel_layout='OIDHW', out_layout='', out_dtype=''"),
    ("nn.conv3d_transpose", "data, weight, strides=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCDHW', kernel_layout='IODHW', out_layout='', output_padding=(0, 0, 0), out_dtype=''"),
    ("nn.conv2d_transpose", "data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCHW', kernel_layout='IOHW', out_layout='', output_padding=(0, 0), out_dtype=''"),
    ("nn.conv1d_transpose", "data, weight, strides=(1,), padding=(0,), dilation=(1,), groups=1, channels=None, kernel_size=None, data_layout='NCW', kernel_layout='IOW', out_layout='', output_padding=(0,), out_dtype=''"),
    ("nn.softmax", "data, axis=-1"),
    ("nn.fast_softmax", "data, axis=-1"),
    ("nn.log_softmax", "data, axis=-1"),
    ("nn.max_pool1d", "data, pool_size=(1,), strides=(1,), dilation=(1,), padding=(0,), layout='NCW', out_layout='', ceil_mode=False"),
    ("nn.max_pool2d", "data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout='NCHW', out_layout='', ceil_mode=False"),
    ("nn.max_pool3d", "data, pool_size=(1, 1, 1), strides=(1, 1, 1), dilation=(1, 1, 1), padding=(0, 0, 0), layout='NCDHW', out_layout='', ceil_mode=False"),
    ("nn.avg_pool1d", "data, pool_size=(1,), strides=(1,), dilation=(1,), padding=(0,), layout='NCW', out_layout='', ceil_mode=False, count_include_pad=False"),
    ("nn.avg_pool2d", "data, pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0), layout='NCHW', out_layout='', ceil_mode=False, count_include_pad=False"),
    ("nn.avg_pool3d", "data, pool_size=(1, 1, 1), strides=(1, 1, 1), dilation=(1, 1, 1), padding=(0, 0, 0), layout='NCDHW', out_layout='', ceil_mode=False, count_include_pad=False"),
    ("nn.max_pool2d_grad", "out_grad, data, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), layout='NCHW', out_layout='', ceil_mode=False"),
    ("nn.avg_pool2d_grad", "out_grad, data, pool_size=(1, 1), strides=(1, 1), padding=(0, 0), layout='NCHW', out_layout='', ceil_mode=False, count_include_pad=False"),
    ("nn.global_max_pool2d", "data, layout='NCHW', out_layout=''"),
    ("nn.global_avg_pool2d", "data, layout='NCHW', out_layout=''"),
    ("nn.upsampling", "data, scale_h=1, scale_w=1, layout='NCHW', method='nearest_neighbor', align_corners=False"),
    ("nn.upsampling3d", "data, scale_d=1, scale_h=1, scale_w=1, layout='NCDHW', method='nearest_neighbor', coordinate_transformation_mode='half_pixel'"),
    ("nn.batch_flatten", "data"),
    ("nn.bias_add", "data, bias, axis=1"),
    ("nn.matmul", "tensor_a, tensor_b, units=None, out_dtype='', transpose_a=False, transpose_b=False"),
    ("nn.dense", "data, weight, units=None, out_dtype=''"),
    ("nn.contrib_dense_pack", "data, weight, weight_layout='NC', units=None, out_dtype=''"),
    ("nn.fifo_buffer", "data, buffer, axis"),
    ("nn.relu", "data"),
    ("nn.leaky_relu", "data, alpha=0.01"),
    ("nn.prelu", "data, alpha, axis=1"),
    ("nn.pad", "data, pad_width, pad_value=0, pad_mode='constant'"),
    ("nn.dilate", "data, strides, dilation_value=0.0"),
    ("nn.mirror_pad", "data, pad_width, mode='SYMMETRIC'"),
    ("nn.lrn", "data, size=5, axis=1, bias=2, alpha=1e-05, beta=0.75"),
    ("nn.l2_normalize", "data, eps, axis=None"),
    ("nn.dropout", "data, rate=0.5"),
    ("nn.dropout_raw", "data, rate=0.5"),
    ("nn.batch_norm", "data, gamma, beta, moving_mean, moving_var, axis=1, epsilon=1e-05, center=True, scale=True"),
    ("nn.instance_norm", "data, gamma, beta, axis=1, epsilon=1e-05, center=True, scale=True"),
    ("nn.layer_norm", "data, gamma, beta, axis=-1, epsilon=1e-05, center=True, scale=True"),
    ("nn.group_norm", "data, gamma, beta, num_groups, axis=1, epsilon=1e-05, center=True, scale=True"),
    ("nn.batch_matmul", "tensor_a, tensor_b, out_dtype='', transpose_a=False, transpose_b=True"),
    ("nn.sparse_dense", "dense_mat, sparse_mat, sparse_lhs=False"),
    ("nn.sparse_transpose", "x"),
    ("nn.sparse_add", "dense_mat, sparse_mat"),
    ("nn.contrib_conv2d_winograd_without_weight_transform", "data, weight, tile_size, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCHW', kernel_layout='OIHW', out_layout='', out_dtype=''"),
    ("nn.contrib_conv2d_gemm_without_weight_transform", "data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCHW', kernel_layout='OIHW', out_layout='', out_dtype=''"),
    ("nn.contrib_conv2d_nchwc", "data, kernel, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCHW8c', kernel_layout='OIHW', out_layout='', out_dtype=''"),
    ("nn.contrib_depthwise_conv2d_nchwc", "data, kernel, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, data_layout='NCHW8c', kernel_layout='OIHW', out_layout='', out_dtype=''"),
    ("nn.contrib_conv2d_winograd_weight_transform", "weight, tile_size"),
    ("nn.contrib_conv2d_gemm_weight_transform", "weights, tile_N, tile_K"),
    ("nn.contrib_conv3d_winograd_weight_transform", "weight, tile_size"),
    ("nn.contrib_conv2d_winograd_nnpack_weight_transform", "weight, convolution_algorithm, out_dtype=''"),
    ("nn.deformable_conv2d", "data, offset, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), deformable_groups=1, groups=1, channels=None, kernel_size=None, data_layout='NCHW', kernel_layout='OIHW', out_layout='', out_dtype=''"),
    ("nn.bitpack", "data, bits=1, pack_axis=1, bit_axis=2, pack_type='uint32', name='BitPack'"),
    ("nn.bitserial_conv2d", "data, weight, strides=(1, 1), padding=(0, 0), channels=None, kernel_size=(3, 3), activation_bits=1, weight_bits=1, data_layout='NCHW', kernel_layout='OIHW', pack_dtype='uint32', out_dtype='int16', unipolar=True"),
    ("nn.bitserial_dense", "data, weight, units=None, data_bits=1, weight_bits=1, pack_dtype='uint32', out_dtype='int16', unipolar=True"),
    ("nn.cross_entropy", "predictions, targets"),
    ("nn.cross_entropy_with_logits", "predictions, targets"),
    ("nn.nll_loss", "predictions, targets, weights, reduction='mean', ignore_index=-100"),
    ("nn.depth_to_space", "data, block_size, layout='NCHW', mode='DCR'"),
    ("nn.space_to_depth", "data, block_size, layout='NCHW'"),
    ("nn.adaptive_max_pool1d", "data, output_size=None, layout='NCW', out_layout=''"),
    ("nn.adaptive_avg_pool1d", "data, output_size=None, layout='NCW', out_layout=''"),
    ("nn.adaptive_max_pool2d", "data, output_size=None, layout='NCHW', out_layout=''"),
    ("nn.adaptive_avg_pool2d", "data, output_size=None, layout='NCHW', out_layout=''"),
    ("nn.adaptive_max_pool3d", "data, output_size=None, layout='NCDHW', out_layout=''"),
    ("nn.adaptive_avg_pool3d", "data, output_size=None, layout='NCDHW', out_layout=''"),
    ("nn.global_max_pool1d", "data, layout='NCW', out_layout=''"),
    ("nn.global_avg_pool1d", "data, layout='NCW', out_layout=''"),
    ("nn.global_max_pool3d", "data, layout='NCDHW', out_layout=''"),
    ("nn.global_avg_pool3d", "data, layout='NCDHW', out_layout=''"),
    ("nn.correlation", "data1, data2, kernel_size, max_displacement, stride1, stride2, padding, is_multiply, layout"),
    ("nn.space_to_batch_nd", "data, block_shape, paddings, pad_value=0"),
    ("nn.batch_to_space_nd", "data, block_shape, crops"),
    ("nn.conv2d_backward_weight", "grad, data, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, channels=None, kernel_size=None, grad_layout='NCHW', data_layout='NCHW', kernel_layout='OIHW', out_dtype=''"),
    ("argmax", "data, axis=None, keepdims=False, exclude=False, select_last_index=False"),
    ("argmin", "data, axis=None, keepdims=False, exclude=False, select_last_index=False"),
    ("sum", "data, axis=None, keepdims=False, exclude=False"),
    ("all", "data, axis=None, keepdims=False, exclude=False"),
    ("any", "data, axis=None, keepdims=False, exclude=False"),
    ("max", "data, axis=None, keepdims=False, exclude=False"),
    ("min", "data, axis=None, keepdims=False, exclude=False"),
    ("mean", "data, axis=None, keepdims=False, exclude=False"),
    ("variance", "data, axis=None, keepdims=False, exclude=False, unbiased=False, with_mean=None"),
    ("std", "data, axis=None, keepdims=False, exclude=False, unbiased=False"),
    ("mean_variance", "data, axis=None, keepdims=False, exclude=False, unbiased=False"),
    ("mean_std", "data, axis=None, keepdims=False, exclude=False"),
    ("prod", "data, axis=None, keepdims=False, exclude=False"),
    ("logsumexp", "data, axis=None, keepdims=False"),
    ("log", "data"),
    ("log2", "data"),
    ("log10", "data"),
    ("tan", "data"),
    ("cos", "data"),
    ("cosh", "data"),
    ("sin", "data"),
    ("sinh", "data"),
    ("acos", "data"),
    ("acosh", "data"),
    ("asin", "data"),
    ("asinh", "data"),
    ("atan", "data"),
    ("atanh", "data"),
    ("exp", "data"),
    ("erf", "data"),
    ("sqrt", "data"),
    ("rsqrt", "data"),
    ("sigmoid", "data"),
    ("floor", "data"),
    ("ceil", "data"),
    ("trunc", "data"),
    ("round", "data"),
    ("abs", "data"),
    ("sign", "data"),
    ("tanh", "data"),
    ("negative", "data"),
    ("logical_not", "data"),
    ("bitwise_not", "data"),
    ("add", "lhs, rhs"),
    ("subtract", "lhs, rhs"),
    ("multiply", "lhs, rhs"),
    ("divide", "lhs, rhs"),
    ("floor_divide", "lhs, rhs"),
    ("trunc_divide", "lhs, rhs"),
    ("power", "lhs, rhs"),
    ("mod", "lhs, rhs"),
    ("floor_mod", "lhs, rhs"),
    ("trunc_mod", "lhs, rhs"),
    ("logical_and", "lhs, rhs"),
    ("logical_or", "lhs, rhs"),
    ("logical_xor", "lhs, rhs"),
    ("bitwise_and", "lhs, rhs"),
    ("bitwise_or", "lhs, rhs"),
    ("bitwise_xor", "lhs, rhs"),
    ("equal", "lhs, rhs"),
    ("not_equal", "lhs, rhs"),
    ("less", "lhs, rhs"),
    ("less_equal", "lhs, rhs"),
    ("greater", "lhs, rhs"),
    ("greater_equal", "lhs, rhs"),
    ("maximum", "lhs, rhs"),
    ("minimum", "lhs, rhs"),
    ("right_shift", "lhs, rhs"),
    ("left_shift", "lhs, rhs"),
    ("zeros", "shape, dtype"),
    ("zeros_like", "data"),
    ("ones", "shape, dtype"),
    ("ones_like", "data"),
    ("clip", "a, a_min, a_max"),
    ("fixed_point_multiply", "data, multiplier, shift"),
    ("concatenate", "data, axis"),
    ("einsum", "data, equation"),
    ("stack", "data, axis"),
    ("copy", "data"),
    ("device_copy", "data, src_device, dst_device"),
    ("shape_of", "data, dtype='int32'"),
    ("ndarray_size", "data, dtype='int32'"),
    ("isnan", "data"),
    ("isfinite", "data"),
    ("isinf", "data"),
    ("sliding_window", "data, axis, window_shape, strides"),
    ("cast", "data, dtype"),
    ("cast_like", "data, dtype_like"),
    ("reinterpret", "data, dtype"),
    ("expand_dims", "data, axis, num_newaxis=1"),
    ("transpose", "data, axes=None"),
    ("squeeze", "data, axis=None"),
    ("reshape", "data, newshape, allowzero=False"),
    ("argwhere", "condition"),
    ("scatter_elements", "data, indices, updates, axis=0, reduction='update'"),
    ("scatter_nd", "data, indices, updates, mode='update'"),
    ("reshape_like", "data, shape_like, lhs_begin=0, lhs_end=None, rhs_begin=0, rhs_end=None"),
    ("take", "data, indices, axis=None, batch_dims=0, mode='clip'"),
    ("full", "fill_value, shape=(), dtype=''"),
    ("full_like", "data, fill_value"),
    ("arange", "start, stop=None, step=None, dtype='float32'"),
    ("meshgrid", "data, indexing='ij'"),
    ("repeat", "data, repeats, axis"),
    ("tile", "data, reps"),
    ("reverse", "data, axis"),
    ("reverse_sequence", "data, seq_lengths, seq_axis=1, batch_axis=0"),
    ("where", "condition, x, y"),
    ("broadcast_to", "data, shape"),
    ("broadcast_to_like", "data, broadcast_type"),
    ("collapse_sum_like", "data, collapse_type"),
    ("collapse_sum_to", "data, shape"),
    ("split", "data, indices_or_sections, axis=0"),
    ("strided_slice", "data, begin, end, strides=None, axes=None, slice_mode='end'"),
    ("strided_set", "data, v, begin, end, strides=None"),
    ("slice_like", "data, shape_like, axes=None"),
    ("layout_transform", "data, src_layout, dst_layout"),
    ("reverse_reshape", "data, newshape"),
    ("gather", "data, axis, indices"),
    ("gather_nd", "data, indices, batch_dims=0, index_rank=None"),
    ("sequence_mask", "data, valid_length, mask_value=0, axis=0"),
    ("one_hot", "indices, on_value, off_value, depth, axis, dtype"),
    ("unravel_index", "indices, shape"),
    ("sparse_to_dense", "sparse_indices, output_shape, sparse_values, default_value=0"),
    ("matrix_set_diag", "data, diagonal, k=0, align='RIGHT_LEFT'"),
    ("adv_index", "inputs"),
    ("sparse_fill_empty_rows", "sparse_indices, sparse_values, dense_shape, default_value"),
    ("sparse_reshape", "sparse_indices, prev_shape, new_shape"),
    ("cumsum", "data, axis=None, dtype=None, exclusive=None"),
    ("cumprod", "data, axis=None, dtype=None, exclusive=None"),
    ("unique", "data, is_sorted=True, return_counts=False"),
    ("invert_permutation", "data"),
    ("stft", "data, n_fft, hop_length=None, win_length=None, window=None, normalized=False, onesided=True"),
    ("dft", "re_data, im_data, inverse=False"),
    ("trilu", "data, k, upper=True"),
    ("segment_sum", "data, segment_ids, num_segments=None"),
    ("vision.multibox_prior", "data, sizes=(1.0,), ratios=(1.0,), steps=(-1.0, -1.0), offsets=(0.5, 0.5), clip=False"),
    ("vision.multibox_transform_loc", "cls_prob, loc_pred, anchor, clip=True, threshold=0.01, variances=(0.1, 0.1, 0.2, 0.2), keep_background=False"),
    ("vision.get_valid_counts", "data, score_threshold, id_index=0, score_index=1"),
    ("vision.non_max_suppression", "data, valid_count, indices, max_output_size=-1, iou_threshold=0.5, force_suppress=False, top_k=-1, coord_start=2, score_index=1, id_index=0, return_indices=True, invalid_to_bottom=False"),
    ("vision.all_class_non_max_suppression", "boxes, scores, max_output_boxes_per_class=-1, iou_threshold=-1.0, score_threshold=-1.0, output_format='onnx'"),
    ("vision.regular_non_max_suppression", "boxes, scores, max_detections_per_class, max_detections, num_classes, iou_threshold, score_threshold"),
    ("vision.roi_align", "data, rois, pooled_size, spatial_scale, sample_ratio=-1, layout='NCHW', mode='avg'"),
    ("vision.roi_pool", "data, rois, pooled_size, spatial_scale, layout='NCHW'"),
    ("vision.proposal", "cls_prob, bbox_pred, im_info, scales, ratios, feature_stride, threshold, rpn_pre_nms_top_n, rpn_post_nms_top_n, rpn_min_size, iou_loss"),
    ("vision.yolo_reorg", "data, stride"),]

#: Builders bmlib-relax has beyond the table (ops Relay registered elsewhere).
EXTRAS = {"fast_erf", "fast_exp", "fast_tanh", "on_device", "stop_fusion", "stop_gradient",
          "checkpoint", "compiler_begin", "compiler_end", "cast_hint", "debug",
          "fixed_point_multiply_per_axis"}

_NAMESPACES = {"": relay, "nn": relay.nn, "image": relay.image, "vision": relay.vision}


def _builder(path: str):
    namespace, _, short = path.rpartition(".")
    return getattr(_NAMESPACES[namespace], short, None)


@pytest.mark.parametrize("path,params", RELAY_SIGNATURES, ids=[p for p, _ in RELAY_SIGNATURES])
def test_signature_matches_relay(path, params):
    fn = _builder(path)
    assert fn is not None, f"relay.{path} is missing"
    assert str(inspect.signature(fn)) == f"({params})"


def test_every_builder_is_in_the_table():
    table = {path for path, _ in RELAY_SIGNATURES}
    # relay.qnn.op.* signatures are checked against Relay's in tests/importer/test_qnn.py
    extra = {p for p in relay.op.registered_ops() if not p.startswith("qnn.")} - table - EXTRAS
    assert not extra, f"builders with no Relay signature to check against: {sorted(extra)}"
    assert table <= set(relay.op.registered_ops())


def test_registered_ops_names_the_relay_op_built():
    ops = relay.op.registered_ops()
    assert ops["nn.conv2d"] == "nn.conv2d"
    assert ops["nn.contrib_conv2d_nchwc"] == "nn.contrib_conv2d_NCHWc"
    assert ops["std"] == "variance"  # composed: sqrt(variance(x, mean(x)))
    x = relay.var("x", shape=(2, 3))
    assert relay.std(x).args[0].op.name == ops["std"]


def test_relay_python_logic_is_kept():
    x = relay.var("x", shape=(2, 3))
    # arange with one argument is arange(0, stop, 1)
    call = relay.arange(relay.const(5.0))
    assert [float(a.data) for a in call.args] == [0.0, 5.0, 1.0]
    # nn.pad's pad_value is an operand, given third
    pad = relay.nn.pad(x, ((0, 0), (1, 1)), 2.0)
    assert pad.args[1].data == 2.0 and pad.attrs["pad_width"] == ((0, 0), (1, 1))
    # resize2d: size is the second parameter, roi the third
    img = relay.var("img", shape=(1, 1, 4, 4))
    resize = relay.image.resize2d(img, (8, 8))
    assert resize.attrs["size"] == (8, 8) and resize.attrs["roi"] == (0.0,) * 4  # v0.19 filled it
    # variance/std compute the mean themselves (Relay's Python API)
    var = relay.variance(x, axis=1)
    assert var.op.name == "variance" and var.args[1].op.name == "mean"
    assert var.args[1].attrs["keepdims"] is True
    # a constant given for an attribute becomes its value
    assert relay.reshape(x, relay.const([3, 2])).attrs["newshape"] == (3, 2)
    # tuple-valued ops return TupleWrappers of the right size
    assert len(relay.split(x, 3, axis=1)) == 3
    assert len(relay.split(x, [1], axis=1)) == 2
    assert len(relay.vision.get_valid_counts(relay.var("d", shape=(1, 2, 6)), 0.5)) == 3
    nms = relay.vision.non_max_suppression(relay.var("d", shape=(1, 2, 6)),
                                           relay.var("c", shape=(1,), dtype="int32"),
                                           relay.var("i", shape=(1, 2), dtype="int32"),
                                           return_indices=False)
    assert isinstance(nms, relay.Call) and nms.args[3].data.dtype == "int32"


def test_required_parameters_are_required():
    x = relay.var("x", shape=(2, 3))
    with pytest.raises(TypeError):
        relay.clip(x, 0.0)  # a_max has no default in Relay
    with pytest.raises(TypeError):
        relay.reshape(x)


@pytest.mark.parametrize("sections, message", [
    (0, r"indices_or_sections=0 must be at least 1"),  # was a ZeroDivisionError
    (4, r"indices_or_sections=4 must divide the axis' extent 6"),
    ([0, 3], r"indices_or_sections \[0, 3\] must be a sorted ascending list of positive"),
    ([3, 3], r"indices_or_sections \[3, 3\] must be a sorted ascending list"),
    ([2, 6], r"split indices \[2, 6\] must lie inside the axis' extent 6")])
def test_split_type_inference_refuses_what_splitrel_did(sections, message):
    """The builder's type inference and the importer apply one SplitRel (split_problem)."""
    from bmlib_relax.errors import RelayTypeError

    x = relay.var("x", shape=(2, 6))
    call = relay.split(x, sections, axis=1)
    body = call.astuple() if hasattr(call, "astuple") else call
    with pytest.raises(RelayTypeError, match="split: " + message):
        relay.transform.InferType()(relay.IRModule.from_expr(relay.Function([x], body)))
