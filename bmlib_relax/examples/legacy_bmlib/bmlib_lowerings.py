# Relay-era hand-written TE lowerings for bmlib composites, in the style of
# TVM's old te_target.py: _LOWER_MAP[composite](call, inputs) -> te.Tensor,
# where `call` is the composite's root Relay call and `inputs` are tensors in
# the composite's parameter order.  On Relay these placeholders did not match
# the partition's arguments (num_args should be 8); bmlib-relax binds them to
# the partition's real arguments.
from tvm import te, topi


def _lower_reshape_conv2d_add_bn_relu(call, inputs):
    data1, data, weight, gamma, beta, moving_mean, moving_var = inputs
    bn = call.args[0].tuple_value
    conv = bn.args[0].args[1]
    bias = topi.reshape(data1, (1, data1.shape[0], 1, 1))
    out = topi.nn.conv2d_nchw(data, weight, conv.attrs.strides, conv.attrs.padding,
                              conv.attrs.dilation, out_dtype="float32")
    out = topi.add(bias, out)
    scale = te.compute(gamma.shape, lambda c: gamma[c] / te.sqrt(moving_var[c] + bn.attrs.epsilon),
                       name="bn_scale")
    out = te.compute(out.shape, lambda n, c, h, w: (out[n, c, h, w] - moving_mean[c]) * scale[c]
                     + beta[c], name="bn")
    return topi.nn.relu(out)


_LOWER_MAP = {
    "bmlib.reshape_conv2d_add_bn_relu": _lower_reshape_conv2d_add_bn_relu,
}
