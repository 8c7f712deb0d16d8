# Variant 1 of the Relay-era bmlib table: every operand a wildcard.  On Relay
# this one built, then failed at run time with
#   tvmgen_default_bmlib_main_0: num_args should be 8
from tvm.relay.dataflow_pattern import is_op, is_tuple_get_item, wildcard


def pattern_table():
    pattern = is_op("nn.relu")(is_tuple_get_item(is_op("nn.batch_norm")(
        is_op("add")(is_op("reshape")(wildcard()), is_op("nn.conv2d")(wildcard(), wildcard())),
        wildcard(), wildcard(), wildcard(), wildcard()), 0))
    return [("bmlib.reshape_conv2d_add_bn_relu", pattern)]
