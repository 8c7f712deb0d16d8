"""The Relay-style view maps the importer's Relax forms back to Relay names and attributes."""
from __future__ import annotations

import pytest
from tvm import relax

from bmlib_relax.backend.relay_view import relay_view
from bmlib_relax.relay.dataflow_pattern import is_op, wildcard

R = relax.op


def _view(build, shapes, hint=None):
    params = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(bb, *params))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    bindings = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    return relay_view(out, hint=hint, bindings=bindings)


def test_dense_bias_add_on_channel_axis():
    def build(bb, x, w, b):
        conv = bb.emit(R.nn.conv2d(x, w, groups=2, padding=1))
        return R.add(bb.emit(R.reshape(b, (8, 1, 1))), conv)

    hint = is_op("nn.bias_add")(is_op("nn.conv2d")(wildcard(), wildcard()), wildcard())
    view = _view(build, [(1, 4, 6, 6), (8, 2, 3, 3), (8,)], hint)
    assert (view.op.name, view.attrs.axis) == ("nn.bias_add", 1)
    conv, bias = view.args
    assert conv.op.name == "nn.conv2d" and bias.checked_type.shape == (8,)
    assert (conv.attrs.groups, conv.attrs.channels, conv.attrs.kernel_size) == (2, 8, (3, 3))
    assert conv.attrs.padding == (1, 1, 1, 1) and conv.checked_type.dtype == "float32"


@pytest.mark.parametrize("build, shapes, name, attrs", [
    (lambda bb, x, w: R.matmul(x, bb.emit(R.permute_dims(w, [1, 0]))), [(2, 8), (4, 8)],
     "nn.dense", {"units": 4}),
    (lambda bb, a, b: R.matmul(a, bb.emit(R.permute_dims(b, [0, 2, 1]))),
     [(2, 3, 8), (2, 5, 8)], "nn.batch_matmul", {"transpose_b": True}),
    (lambda bb, x: R.clip(x, -1.0, 2.0), [(2, 8)], "clip", {"a_min": -1.0, "a_max": 2.0}),
    (lambda bb, x: R.nn.leakyrelu(x, 0.25), [(2, 8)], "nn.leaky_relu", {"alpha": 0.25}),
    (lambda bb, x: R.astype(x, "float16"), [(2, 8)], "cast", {"dtype": "float16"}),
    (lambda bb, x: R.nn.adaptive_avg_pool2d(x, (1, 1)), [(1, 2, 4, 4)],
     "nn.global_avg_pool2d", {"layout": "NCHW"}),
    (lambda bb, x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(2, 8), (8,), (8,)],
     "nn.layer_norm", {"axis": -1, "epsilon": pytest.approx(1e-5)}),
    (lambda bb, x: R.permute_dims(x, [1, 0]), [(2, 8)], "transpose", {"axes": (1, 0)}),
    (lambda bb, x: R.nn.relu(x), [(2, 8)], "nn.relu", {}),
])
def test_relax_op_viewed_as_relay(build, shapes, name, attrs):
    view = _view(build, shapes)
    assert view.op.name == name
    for key, value in attrs.items():
        assert getattr(view.attrs, key) == value
    assert len(view.args) == len(shapes)  # tensor operands only; shapes/bounds are attrs


def test_unknown_attribute_names_the_op():
    view = _view(lambda bb, x: R.nn.relu(x), [(2, 8)])
    with pytest.raises(AttributeError, match=r"nn.relu has no Relay attribute 'alpha'"):
        view.attrs.alpha
