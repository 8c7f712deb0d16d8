"""Entry points used the way TVM / tvmc users use them (probe p21).

* one model called from several Python threads at once: the Relax VM keeps its frames
  and registers in the VM object, so unlocked concurrent calls returned the other
  thread's result, raised raw TypeError / InternalError, or crashed the process;
* a model re-exported to the same path and loaded again in one process: ``dlopen``
  handed back the library it had already opened under that path, so the old model ran
  while ``load`` had verified the new file;
* golden bundles of a model with a nested tuple output: Relay's graph executor flattened
  it (``record_relay_golden.py`` saves ``get_output(i)``), ``verify`` did not.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from tvm.script import ir as I, relax as R, tirx as T

import bmlib_relax
from bmlib_relax import relay

from conftest import offloaded_partitions

N = 32


def _mlp():
    """tanh(dense(relu(dense(x, w)), w)): two offloadable denses, big enough that two
    overlapping calls of the VM really interleave."""
    x = relay.var("x", shape=(N, N), dtype="float32")
    w = relay.var("w", shape=(N, N), dtype="float32")
    hidden = relay.nn.relu(relay.nn.dense(x, w))
    return relay.Function([x, w], relay.tanh(relay.nn.dense(hidden, w)))


def _mlp_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """nn.dense(x, w) is x @ w.T (Relay's definition)."""
    return np.tanh(np.maximum(x @ w.T, 0) @ w.T)


@pytest.fixture(scope="module")
def mlp():
    model = bmlib_relax.compile(_mlp(), {})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    return model


def hammer(model, inputs: list, references: list, calls: int = 150) -> list[str]:
    """Each input set called ``calls`` times from its own thread, all threads at once;
    the problems seen (a wrong result, an exception), empty when every call was right."""
    problems: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(inputs))

    def worker(k: int) -> None:
        start.wait()
        for _ in range(calls):
            try:
                got = model(*inputs[k])
                if not np.allclose(got, references[k], rtol=1e-5, atol=1e-5):
                    other = any(np.allclose(got, r, rtol=1e-5, atol=1e-5)
                                for j, r in enumerate(references) if j != k)
                    problem = "another thread's result" if other else "wrong values"
                else:
                    continue
            except Exception as exc:  # noqa: BLE001 - what the test looks for
                problem = f"{type(exc).__name__}: {str(exc)[:200]}"
            with lock:
                problems.append(f"thread {k}: {problem}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return problems


def _mlp_inputs(count: int = 2) -> tuple[list, list]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, N)) * 0.2).astype("float32")
    inputs = [(rng.standard_normal((N, N)).astype("float32"), w) for _ in range(count)]
    return inputs, [_mlp_reference(x, w) for x, w in inputs]


def test_two_threads_share_one_compiled_model(mlp):
    inputs, references = _mlp_inputs()
    assert hammer(mlp, inputs, references) == []


def test_two_threads_share_one_loaded_model(mlp, tmp_path):
    mlp.export_library(tmp_path / "mlp.so")
    loaded = bmlib_relax.load(tmp_path / "mlp.so")
    again = bmlib_relax.load(tmp_path / "mlp.so")  # the same library, a VM of its own
    inputs, references = _mlp_inputs()
    assert hammer(loaded, inputs, references) == []
    assert hammer(again, inputs[:1], references[:1], calls=1) == []
    # two models of one library, each called from its own thread
    problems: list = []
    runs = [threading.Thread(target=lambda m=m, k=k: problems.extend(
        hammer(m, inputs[k:k + 1], references[k:k + 1]))) for k, m in enumerate([loaded, again])]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert problems == []


# --------------------------------------------------------------------- re-export
def _unary(op):
    x = relay.var("x", shape=(2, 3), dtype="float32")
    return relay.Function([x], op(x))


def test_reexport_to_the_same_path_loads_the_new_library(tmp_path):
    """dlopen returns the library already open under a path: the second load must still
    run the file it verified."""
    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    relu = bmlib_relax.compile(_unary(relay.nn.relu))
    assert offloaded_partitions(relu.relax_module), "nothing was offloaded"
    relu.export_library(tmp_path / "z.so")
    np.testing.assert_array_equal(bmlib_relax.load(tmp_path / "z.so")(x), np.maximum(x, 0))
    bmlib_relax.compile(_unary(relay.negative)).export_library(tmp_path / "z.so")
    negative = bmlib_relax.load(tmp_path / "z.so")
    np.testing.assert_array_equal(negative(x), -x)
    # and back: the first model's bytes at that path again
    relu.export_library(tmp_path / "z.so")
    np.testing.assert_array_equal(bmlib_relax.load(tmp_path / "z.so")(x), np.maximum(x, 0))
    np.testing.assert_array_equal(negative(x), -x)  # the earlier model is untouched


# --------------------------------------------------------------------- verify
NESTED = '''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.relu(%x);
  %1 = add(%x, 1f);
  (%0, (%1, %0))
}'''


def test_verify_flattens_nested_tuple_outputs(tmp_path):
    """v0.19's graph executor numbered the leaves of ``(a, (b, c))`` as outputs 0, 1, 2
    (``record_relay_golden.py`` saves ``get_output(i)``); verify reads them so."""
    from bmlib_relax.verify_bundle import verify_bundle, write_bundle

    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    write_bundle(tmp_path / "nested", NESTED, {}, {"x": x},
                 [np.maximum(x, 0), x + 1, np.maximum(x, 0)])
    result = verify_bundle(tmp_path / "nested")
    assert result.ok, result.summary()
    assert [o["name"] for o in result.outputs] == ["out0", "out1", "out2"]
    # a wrong leaf is still found, by its flat name
    write_bundle(tmp_path / "wrong", NESTED, {}, {"x": x},
                 [np.maximum(x, 0), x + 2, np.maximum(x, 0)])
    result = verify_bundle(tmp_path / "wrong")
    assert not result.ok and "out1 differs" in result.problem, result.summary()


@pytest.mark.parametrize("edit, field", [
    ({"format_version": "1.0"}, '"format_version" is \'1.0\''),
    ({"tolerance": {"rtol": "tight"}}, '"tolerance"."rtol" is \'tight\''),
    ({"tolerance": "1e-4"}, '"tolerance" is \'1e-4\''),
    ({"tolerance": {"rtol": -1e-4, "atol": 1e-4}}, '"tolerance"."rtol" is -0.0001'),
    ({"tolerance": {"rtol": 1e-4, "atol": -1}}, '"tolerance"."atol" is -1'),
])
def test_verify_names_a_bad_manifest_field(tmp_path, capsys, edit, field):
    """A hand-edited manifest is damaged input (exit 2, the field named), not an internal
    error (exit 3)."""
    import json

    from bmlib_relax.cli import main
    from bmlib_relax.verify_bundle import write_bundle

    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    folder = write_bundle(tmp_path / "b", NESTED, {}, {"x": x},
                          [np.maximum(x, 0), x + 1, np.maximum(x, 0)])
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(edit)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder / 'manifest.json'}: {field}"), err


# --------------------------------------------------------------------- inputs
def test_torch_tensor_that_requires_grad_is_an_input():
    torch = pytest.importorskip("torch")
    model = bmlib_relax.compile(_unary(relay.nn.relu))
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_(True)
    np.testing.assert_array_equal(model(x), np.maximum(x.detach().numpy(), 0))
    np.testing.assert_array_equal(model(x=torch.nn.Parameter(x.detach() * 2)),
                                  np.maximum(x.detach().numpy() * 2, 0))


# --------------------------------------------------------------------- Relax modules in
@I.ir_module
class TupleParam:
    @R.function
    def main(t: R.Tuple(R.Tensor((2,), "float32"), R.Tensor((2,), "float32"))):
        return R.add(t[0], t[1])


@I.ir_module
class ShapeParam:
    @R.function
    def main(x: R.Tensor(("n",), "float32"), s: R.Shape(["n"])):
        return R.nn.relu(x)


@I.ir_module
class PrimParam:
    @R.function
    def main(x: R.Tensor((2,), "float32"), k: R.Prim("float32")):
        return R.nn.relu(x)


@I.ir_module
class ObjectParam:
    @R.function
    def main(x: R.Object):
        return x


@I.ir_module
class NoDtype:
    @R.function
    def main(x: R.Tensor((2,))):
        return R.nn.relu(x)


@I.ir_module
class UnknownRank:
    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=-1)):
        return R.nn.relu(x)


@I.ir_module
class RankNoShape:
    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=2)):
        return R.nn.relu(x)


@pytest.mark.parametrize("mod, message", [
    (TupleParam, "main parameter 't' is a tuple"),
    (ShapeParam, "main parameter 's' is a shape"),
    (PrimParam, "main parameter 'k' is a scalar"),
    (ObjectParam, "main parameter 'x' is an object"),
    (NoDtype, "main parameter 'x' is a tensor without a dtype"),
    (UnknownRank, "main parameter 'x' is a tensor of unknown rank"),
    (RankNoShape, "main parameter 'x' is a tensor of rank 2 but no shape"),
])
def test_relax_main_parameters_a_model_cannot_take(mod, message):
    from bmlib_relax.errors import ConversionError

    with pytest.raises(ConversionError, match=message):
        bmlib_relax.compile(mod)


@I.ir_module
class DenseRelu:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), w: R.Tensor((4, 3), "float32")):
        with R.dataflow():
            y = R.matmul(x, R.permute_dims(w))
            z = R.nn.relu(y)
            R.output(z)
        return z


W = (np.arange(12, dtype="float32").reshape(4, 3) / 10 - 0.5)


@pytest.mark.parametrize("value, got", [
    (W.T.copy(), "got shape (3, 4) dtype float32"),
    (W.astype("float64"), "got shape (4, 3) dtype float64"),
    (W.astype(">f4"), "got shape (4, 3) dtype >f4"),
    (W.astype("int64"), "got shape (4, 3) dtype int64"),
    (np.float32(1), "got shape () dtype float32"),
])
def test_relax_params_are_checked_as_relay_params_are(value, got):
    """The Relay path's words (``relay.params.check_param``), not TVM's raw errors."""
    with pytest.raises(bmlib_relax.ParamError) as info:
        bmlib_relax.compile(DenseRelu, params={"w": value})
    assert str(info.value) == f"parameter 'w': expected shape (4, 3) dtype float32, {got}"
    assert info.value.name == "w"


def test_relax_params_bound():
    model = bmlib_relax.compile(DenseRelu, params={"w": W})
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    np.testing.assert_allclose(model(x), np.maximum(x @ W.T, 0), rtol=1e-6, atol=1e-6)


@I.ir_module
class FormulaDim:
    @R.function
    def main(x: R.Tensor(("n", 3), "float32"), y: R.Tensor(("n * 2", 3), "float32")):
        n = T.int64()
        z = R.reshape(y, R.shape([n, 2, 3]))
        return R.add(R.nn.relu(x), R.sum(z, axis=[1]))


def test_a_dim_written_as_a_formula_is_checked():
    model = bmlib_relax.compile(FormulaDim)
    assert offloaded_partitions(model.relax_module), "nothing was offloaded"
    assert model.input_specs[1]["shape"] == ["n * 2", 3]
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    y = np.arange(12, dtype="float32").reshape(4, 3)
    np.testing.assert_allclose(model(x, y), np.maximum(x, 0) + y.reshape(2, 2, 3).sum(1),
                               rtol=1e-6)
    for rows in (5, 2):
        with pytest.raises(bmlib_relax.ParamError,
                           match=rf"input 'y': dim 0 is n \* 2 = 4 \(n = 2 from input 'x'\), "
                                 rf"got {rows}"):
            model(x, np.ones((rows, 3), "float32"))


@I.ir_module
class ScaleBy:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), k: R.Tensor((), "float32")):
        return R.nn.relu(R.multiply(x, k))


def test_a_0d_relax_param_stays_0d():
    """np.ascontiguousarray made a 0-d weight shape (1,), which broadcast silently."""
    model = bmlib_relax.compile(ScaleBy, params={"k": np.float32(-2)})
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(model(x), np.maximum(x * -2, 0))
    assert model.input_names == ["x"]


# --------------------------------------------------------------------- tvmc-style options
def test_input_shapes_follow_tvmc_grammar():
    """v0.19 tvmc/shape_parser.py: spaces after the colon and inside the brackets, a dim
    <= 0 is dynamic (relay.Any()), items found between commas too."""
    from bmlib_relax.cli_tvmc import parse_input_shapes

    assert parse_input_shapes("x: [5,3]") == [("x", (5, 3))]
    assert parse_input_shapes("x:[5, 3],y:[1]") == [("x", (5, 3)), ("y", (1,))]
    assert parse_input_shapes("x:[-1,3] y:[0]  a/b.c:0:[ 2 ]") == [
        ("x", (None, 3)), ("y", (None,)), ("a/b.c:0", (2,))]


@pytest.mark.parametrize("text, message", [
    ("x:[5,,3]", "'x' has an empty dim in [5,,3]"),
    ("x:[5,3,]", "'x' has an empty dim in [5,3,]"),
    ("x:[1.5]", "'x' has non-integer dims [1.5]"),
    ("x:[1] x:[2]", "input 'x' is given twice"),
    ("x:[1]]", "at character 6"),
])
def test_malformed_input_shapes_are_refused(text, message):
    from bmlib_relax.cli_tvmc import parse_input_shapes

    with pytest.raises(bmlib_relax.ParamError) as info:
        parse_input_shapes(text)
    assert message in str(info.value)


def test_convert_with_dynamic_input_shapes(tmp_path, capsys):
    """Every dim -1: the input is named and keeps its declared shape (tvmc's Relay frontend
    used --input-shapes for the input names); a partly dynamic pin is refused."""
    from bmlib_relax.cli import main

    (tmp_path / "m.relay").write_text(
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(?, 3), float32], %w: Tensor[(4, 3), float32]) {\n"
        "  nn.relu(nn.dense(%x, %w))\n}\n")
    np.savez(tmp_path / "w.npz", w=W)
    assert main(["convert", str(tmp_path / "m.relay"), "--params", str(tmp_path / "w.npz"),
                 "--input-shapes", "x:[-1,-1]", "-q", "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    model = bmlib_relax.load(tmp_path / "out" / "model.so")
    assert model.input_specs[0]["shape"][1] == 3 and isinstance(
        model.input_specs[0]["shape"][0], str)
    x = np.linspace(-1, 1, 15, dtype="float32").reshape(5, 3)
    np.testing.assert_allclose(model(x), np.maximum(x @ W.T, 0), rtol=1e-6, atol=1e-6)
    assert main(["convert", str(tmp_path / "m.relay"), "--params", str(tmp_path / "w.npz"),
                 "--input-shapes", "x:[-1,3]", "-q", "-o", str(tmp_path / "out2")]) == 2
    assert capsys.readouterr().err.startswith(
        "error: input 'x': --input-shapes gives dynamic dims (-1 or 0) beside static ones")


def test_run_refuses_an_input_given_twice(tmp_path, capsys):
    from bmlib_relax.cli import main

    model = bmlib_relax.compile(_unary(relay.nn.relu))
    model.export_library(tmp_path / "relu.so")
    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    np.savez(tmp_path / "in.npz", x=x)
    np.save(tmp_path / "x.npy", -x)
    assert main(["run", str(tmp_path / "relu.so"), "-i", str(tmp_path / "in.npz"),
                 "--input", f"x={tmp_path / 'x.npy'}"]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: input 'x' is given twice: by -i {tmp_path / 'in.npz'} and by --input x=")
    assert main(["run", str(tmp_path / "relu.so"), "-i", str(tmp_path / "in.npz"),
                 "-o", str(tmp_path / "o.npz")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["out0"], np.maximum(x, 0))


def test_torch_weights_that_require_grad_are_params():
    # a torch module's parameters require grad: params took them through numpy(), which
    # raised torch's bare RuntimeError
    torch = pytest.importorskip("torch")
    text = ('#[version = "0.0.5"]\n'
            "def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(2, 3), float32]) {\n"
            "  add(%x, %w)\n}")
    w = torch.full((2, 3), 1.5, requires_grad=True)
    model = bmlib_relax.compile(text, {"w": w})
    np.testing.assert_array_equal(model(x=np.ones((2, 3), "float32")), np.full((2, 3), 2.5))
