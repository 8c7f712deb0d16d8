# A Relay-era bmlib pattern table, kept exactly as it was written for
# tvm.relay (MergeComposite + PartitionGraph).  bmlib-relax loads it unchanged:
# the tvm.relay imports below are served by its compatibility layer.
from tvm.relay.dataflow_pattern import is_constant, is_op, is_tuple_get_item, wildcard
from tvm.relay.op.contrib.register import register_pattern_table


def _check_conv(call):
    """bmlib's conv engine only takes plain (ungrouped, undilated) NCHW convolutions."""
    relu = call
    bn = relu.args[0].tuple_value
    conv = bn.args[0].args[1]
    return (conv.attrs.groups == 1 and tuple(conv.attrs.dilation) == (1, 1)
            and conv.attrs.data_layout == "NCHW"
            and conv.checked_type.dtype == "float32")


def reshape_conv2d_add_bn_relu():
    # Variant 2 of the original table: weights written as is_constant().
    return is_op("nn.relu")(is_tuple_get_item(is_op("nn.batch_norm")(
        is_op("add")(is_op("reshape")(is_constant()), is_op("nn.conv2d")(wildcard(), is_constant())),
        is_constant(), is_constant(), is_constant(), is_constant()), 0))


@register_pattern_table("bmlib")
def pattern_table():
    return [
        ("bmlib.reshape_conv2d_add_bn_relu", reshape_conv2d_add_bn_relu(), _check_conv),
    ]
