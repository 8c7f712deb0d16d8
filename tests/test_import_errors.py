"""Bad input gets a clear error naming the place: text location, op, param."""
from __future__ import annotations

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import ConversionError, ParamError, ParseError, UnsupportedOpError
from bmlib_relax.examples import seed
from bmlib_relax.relay import parse

UNKNOWN_OP = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.frobnicate(%0, level=3);
  %2 = nn.relu(%1);
  nn.frobnicate(%2)
}
"""


def test_unknown_op_lists_every_use_with_location():
    with pytest.raises(UnsupportedOpError) as info:
        bmlib_relax.import_relay(parse(UNKNOWN_OP, "model.relay"))
    message = str(info.value)
    assert message.startswith("1 unsupported Relay op(s): nn.frobnicate")
    assert "model.relay:4:8: nn.frobnicate" in message
    assert "model.relay:6:3: nn.frobnicate" in message
    assert [name for name, _ in info.value.ops] == ["nn.frobnicate", "nn.frobnicate"]


def test_missing_paren_is_a_parse_error_with_location():
    text = seed.SEED_RELAY.replace("nn.conv2d(%data, %weight, padding=[0, 0, 0, 0])",
                                   "nn.conv2d(%data, %weight, padding=[0, 0, 0, 0]")
    with pytest.raises(ParseError) as info:
        bmlib_relax.compile(text, seed.seed_params())
    assert info.value.line == 4
    assert "expected ')'" in info.value.message
    assert str(info.value).startswith("<string>:4:")


def test_extra_param_is_named():
    params = dict(seed.seed_params(), bogus=np.zeros(3, "float32"))
    with pytest.raises(ParamError, match="'bogus' is not an input"):
        bmlib_relax.compile(seed.SEED_RELAY, params)


def test_misshaped_param_names_both_shapes():
    params = dict(seed.seed_params(), gamma=np.zeros((64,), "float32"))
    with pytest.raises(ParamError) as info:
        bmlib_relax.compile(seed.SEED_RELAY, params)
    assert str(info.value) == ("parameter 'gamma': expected shape (128,) dtype float32, "
                               "got shape (64,) dtype float32")


def test_mistyped_param_names_dtypes():
    params = dict(seed.seed_params(), gamma=np.zeros((128,), "float64"))
    with pytest.raises(ParamError, match="'gamma'.*dtype float32.*dtype float64"):
        bmlib_relax.compile(seed.SEED_RELAY, params)


def test_missing_input_at_call_time_is_named():
    model = bmlib_relax.compile(seed.SEED_RELAY, seed.seed_params())
    with pytest.raises(ParamError, match="missing input 'data'"):
        model()


def test_unresolved_meta_constant_is_named():
    text = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  add(%x, meta[relay.Constant][0] /* ty=Tensor[(2), float32] */)
}
"""
    with pytest.raises(ConversionError, match=r"<string>:3:11: .*meta\[relay.Constant\]\[0\] has no value"):
        bmlib_relax.import_relay(parse(text))


@pytest.mark.parametrize("body", [
    "reshape(%x, newshape=[7])",                                          # in a dataflow block
    "if (%c) { reshape(%x, newshape=[7]) } else { %x }",                  # in a branch scope
])
def test_a_failed_import_leaves_no_tvm_warning_on_stderr(body, capfd):
    # The error is the whole message: TVM's BlockBuilder used to add "destroyed with
    # remaining blocks!" on stderr when the importer's builder went away.
    import gc

    text = ('#[version = "0.0.5"]\n'
            f"def @main(%c: bool, %x: Tensor[(2, 3), float32]) {{ {body} }}\n")
    with pytest.raises(ConversionError, match="reshape"):
        bmlib_relax.import_relay(parse(text, "bad.relay"))
    gc.collect()
    assert "remaining blocks" not in capfd.readouterr().err


@pytest.mark.parametrize("name", ["model.relay", "  resnet18.txt\n", "EXISTING"])
def test_a_file_name_given_as_text_is_named(name, tmp_path, monkeypatch):
    # a str is Relay text: compile("model.relay") used to fail as an unsupported op
    import bmlib_relax
    from bmlib_relax import ParseError

    if name == "EXISTING":
        monkeypatch.chdir(tmp_path)
        (tmp_path / "weights_model").write_text("fn () { 0f }")
        name = "weights_model"
    with pytest.raises(ParseError, match=r"is a file name, not Relay text: .*pathlib.Path"):
        bmlib_relax.compile(name)


def test_a_path_to_a_relay_file_compiles(tmp_path):
    import bmlib_relax
    from pathlib import Path

    path = tmp_path / "model.relay"
    path.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n'
                    "  nn.relu(%x)\n}\n")
    np.testing.assert_array_equal(bmlib_relax.compile(Path(path))(x=np.array([-1, 2], "float32")),
                                  [0, 2])
