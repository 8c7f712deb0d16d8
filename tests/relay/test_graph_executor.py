"""``relay.build`` / ``relay.create_executor`` / ``graph_executor.GraphModule`` as a v0.19
script used them, after swapping ``from tvm import relay`` for ``from bmlib_relax import
relay`` (and ``tvm.contrib.graph_executor`` for ``bmlib_relax.relay.graph_executor``).

Expected values are numpy evaluations of the model's definition; each build is checked to
have offloaded something to bmlib first.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import LegacyApiError, ParamError, TargetError
from bmlib_relax.relay import graph_executor

from conftest import offloaded_partitions

RNG = np.random.default_rng(24)
W = RNG.standard_normal((4, 3)).astype("float32")
B = RNG.standard_normal(4).astype("float32")
X = RNG.standard_normal((2, 3)).astype("float32")


def dense_model():
    """``data -> (relu(dense(data, w) + b), (sum(y, 1), y * 2))``: a nested tuple result."""
    data = relay.var("data", shape=(2, 3))
    w = relay.var("w", shape=(4, 3))
    b = relay.var("b", shape=(4,))
    y = relay.nn.bias_add(relay.nn.dense(data, w), b)
    out = relay.Tuple([relay.nn.relu(y),
                       relay.Tuple([relay.sum(y, axis=1), relay.multiply(y, relay.const(2.0))])])
    return relay.IRModule.from_expr(relay.Function([data, w, b], out))


def reference(x: np.ndarray) -> list[np.ndarray]:
    y = x @ W.T + B
    return [np.maximum(y, 0), y.sum(1), y * 2]


@pytest.fixture(scope="module")
def lib():
    built = relay.build(dense_model(), target="llvm", params={"w": W, "b": B})
    assert offloaded_partitions(built.get_lib().relax_module)
    return built


def test_build_then_graph_module_set_input_run_get_output(lib):
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    assert (module.get_num_inputs(), module.get_num_outputs()) == (1, 3)
    module.set_input("data", X)
    module.run()
    for index, expected in enumerate(reference(X)):
        got = module.get_output(index)
        assert isinstance(got, tvm.runtime.Tensor)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    # by index, through the packed-function names, and run(**inputs)
    x2 = X * -3
    module["set_input"](0, tvm.runtime.tensor(x2))
    module["run"]()
    np.testing.assert_allclose(module["get_output"](2).numpy(), reference(x2)[2], rtol=1e-5)
    module.run(data=X)
    np.testing.assert_allclose(module.get_output(0).numpy(), reference(X)[0], rtol=1e-5,
                               atol=1e-5)


def test_get_output_copies_into_out_and_wrappers_share_one_module(lib):
    runtime_module = lib["default"](tvm.cpu(0))
    first, second = graph_executor.GraphModule(runtime_module), \
        graph_executor.GraphModule(runtime_module)
    first.set_input("data", X)
    second.run()  # the input set through the other wrapper (one module, as in v0.19)
    out = tvm.runtime.tensor(np.zeros((2,), "float32"))
    assert first.get_output(1, out) is out
    np.testing.assert_allclose(out.numpy(), reference(X)[1], rtol=1e-5)


def test_inputs_info_index_and_get_input(lib):
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    assert module.get_input_info() == ({"data": (2, 3)}, {"data": "float32"})
    assert (module.get_input_index("data"), module.get_input_index("w")) == (0, -1)
    np.testing.assert_array_equal(module.get_input("data").numpy(), np.zeros((2, 3)))
    module.set_input(data=X)
    np.testing.assert_array_equal(module.get_input(0).numpy(), X)


def test_set_input_copies_and_get_input_is_the_input_buffer(lib):
    """v0.19 copied the value into the executor's own buffer at ``set_input`` and
    ``get_input`` returned that buffer: refilling a staging array afterwards changes
    nothing, and ``get_input(i).copyfrom(a)`` sets the input."""
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    staging = X.copy()
    module.set_input("data", staging)
    staging[:] = 7.0
    module.run()
    np.testing.assert_allclose(module.get_output(1).numpy(), reference(X)[1], rtol=1e-5, atol=1e-5)
    tensor = tvm.runtime.tensor(X)
    module.set_input(0, tensor)
    tensor.copyfrom(np.full((2, 3), 9.0, "float32"))
    module.get_input("data").copyfrom(X * 2)
    module.run()
    np.testing.assert_allclose(module.get_output(1).numpy(), reference(X * 2)[1], rtol=1e-5,
                               atol=1e-5)
    fresh = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    fresh.get_input(0).copyfrom(X)  # filling the buffer before any set_input
    fresh.run()
    np.testing.assert_allclose(fresh.get_output(1).numpy(), reference(X)[1], rtol=1e-5)
    with pytest.raises(ParamError, match="'data' cannot be a tensor"):
        module.set_input("data", object())


def test_weights_given_to_set_input_are_skipped_and_unset_inputs_refused(lib):
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    module.set_input(w=np.zeros((4, 3), "float32"))  # built in: skipped, as in v0.19
    with pytest.raises(ParamError, match="'data' was not set"):
        module.run()
    module.set_input(w=np.zeros((4, 3), "float32"), data=X)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), reference(X)[0], rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(ParamError, match="could not find 'dat'"):
        module.set_input("dat", X)
    with pytest.raises(ParamError, match="out of range"):
        module.get_output(3)


def test_what_a_relax_build_does_not_have_is_refused_by_name(lib):
    with pytest.raises(LegacyApiError, match="no graph JSON"):
        graph, built, params = lib
    with pytest.raises(LegacyApiError, match="no graph JSON"):
        lib.get_graph_json()
    with pytest.raises(LegacyApiError, match="no graph JSON"):
        graph_executor.create("{}", lib, tvm.cpu(0))
    with pytest.raises(LegacyApiError, match="no function 'main'"):
        lib["main"]
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    with pytest.raises(LegacyApiError, match="has not run yet"):
        module.get_output(0)
    with pytest.raises(LegacyApiError, match="no function 'debug_get_output'"):
        module["debug_get_output"]
    with pytest.raises(TargetError, match="not the CPU"):
        lib["default"](tvm.device("cuda", 0))
    with pytest.raises(LegacyApiError, match="IRModule or Function"):
        relay.build(relay.add(relay.var("x", shape=(1,)), relay.const(1.0)))
    with pytest.raises(LegacyApiError, match="no graph JSON"):
        lib.graph_json


def test_a_tvm_irmodule_and_targets_this_machine_cannot_run_are_refused_by_name():
    """A ported script's ``mod = tvm.IRModule(); mod["main"] = f`` (TVM 0.27 drops the
    Relay function) and a GPU, C or cross-compiling target (which failed deep in TVM)."""
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule()
    mod["main"] = relay.Function([x], relay.nn.relu(x))
    with pytest.raises(LegacyApiError, match=r"got a tvm.IRModule \(holding nothing\).*"
                                             r"relay.IRModule.from_expr"):
        relay.build(mod, "llvm")
    with pytest.raises(LegacyApiError, match="create_executor: got a tvm.IRModule"):
        relay.create_executor("vm", mod=mod)
    func = relay.Function([x], relay.nn.relu(x))
    for target, message in [("cuda", "target cuda: not supported"),
                            ("c", "target c: not supported"),
                            ("llvm -mtriple=aarch64-linux-gnu", "cross-compiling for aarch64")]:
        with pytest.raises(TargetError, match=message):
            relay.build(func, target)
        with pytest.raises(TargetError, match=message):
            bmlib_relax.compile(relay.IRModule.from_expr(func), target=target)


def test_params_and_keywords_that_name_no_parameter_are_skipped_as_v019():
    """v0.19's BindParamsByName skipped names that are no parameter (a script passes
    ``params=`` again after a BYOC partition bound them) and its executor looked up only
    the parameters in keyword arguments."""
    data = relay.var("data", shape=(2, 3))
    w = relay.var("w", shape=(4, 3))
    bound = relay.IRModule.from_expr(relay.bind_params_by_name(
        relay.Function([data, w], relay.nn.dense(data, w)), {"w": W}))
    module = graph_executor.GraphModule(
        relay.build(bound, "llvm", params={"w": W, "stale": B})["default"](tvm.cpu(0)))
    module.run(data=X)
    np.testing.assert_allclose(module.get_output(0).numpy(), X @ W.T, rtol=1e-5, atol=1e-5)
    run = relay.create_executor("vm", mod=bound, params={"w": W}).evaluate()
    np.testing.assert_allclose(run(X, w=W, extra=X).numpy(), X @ W.T, rtol=1e-5, atol=1e-5)


def test_the_rest_of_v019s_graph_module_api(lib):
    """``time_evaluator`` (through ``.module``), ``print(benchmark)``'s summary table,
    ``set_input_zero_copy`` (the tensor is the input), ``set_output_zero_copy``,
    ``load_params`` from a ``save_param_dict`` blob, and the factory's ``lib`` /
    ``params``."""
    module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    module.set_input(data=X)
    timed = module.module.time_evaluator("run", tvm.cpu(0), number=1, repeat=2)()
    assert len(timed.results) == 2 and timed.mean > 0
    summary = str(module.benchmark(tvm.cpu(0), number=1, repeat=2)).splitlines()
    assert summary[0] == "Execution time summary:" and summary[1].split() == [
        "mean", "(ms)", "median", "(ms)", "max", "(ms)", "min", "(ms)", "std", "(ms)"]
    assert len(summary[2].split()) == 5
    tensor = tvm.runtime.tensor(X)
    module.set_input_zero_copy("data", tensor)
    tensor.copyfrom(X * 3)  # zero copy: the run reads the tensor as it is now
    out = tvm.runtime.tensor(np.zeros(2, "float32"))
    module.set_output_zero_copy(1, out)
    module.run()
    np.testing.assert_allclose(out.numpy(), reference(X * 3)[1], rtol=1e-5, atol=1e-5)
    module.load_params(tvm.runtime.save_param_dict({"data": X * 2, "w": W}))
    module.run()
    np.testing.assert_allclose(module.get_output(1).numpy(), reference(X * 2)[1], rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(ParamError, match="load_params: not a parameter blob"):
        module.load_params(b"not a blob")
    assert lib.lib is lib.get_lib() and lib.params == {}


def test_export_library_loads_back_into_a_graph_module(lib, tmp_path):
    lib.export_library(str(tmp_path / "deploy.so"))
    module = graph_executor.GraphModule(bmlib_relax.load(str(tmp_path / "deploy.so")))
    module.run(data=X)
    assert module.get_num_outputs() == 3
    np.testing.assert_allclose(module.get_output(2).numpy(), reference(X)[2], rtol=1e-5)


def test_build_of_a_function_binds_its_params_and_takes_the_target_in_scope():
    """v0.19's deprecated form: a Function with params; ``target=None`` is the target of
    the enclosing ``with Target(...)``."""
    data = relay.var("data", shape=(2, 3))
    w = relay.var("w", shape=(4, 3))
    func = relay.Function([data, w], relay.nn.relu(relay.nn.dense(data, w)))
    with tvm.target.Target("llvm"):
        built = relay.build(func, params={"w": W})
    assert str(built.target.kind) == "llvm"
    assert offloaded_partitions(built.get_lib().relax_module)
    module = graph_executor.GraphModule(built["default"](tvm.cpu(0)))
    module.run(data=X)
    np.testing.assert_allclose(module.get_output(0).numpy(), np.maximum(X @ W.T, 0),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["graph", "vm"])
def test_create_executor_evaluate_returns_tensors_and_lists(kind):
    run = relay.create_executor(kind, mod=dense_model(), params={"w": W, "b": B}).evaluate()
    assert offloaded_partitions(run.model.relax_module)
    result = run(X)
    assert isinstance(result, list) and isinstance(result[1], list)
    flat = [result[0], result[1][0], result[1][1]]
    for got, expected in zip(flat, reference(X)):
        assert isinstance(got, tvm.runtime.Tensor)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    # keyword arguments by parameter name, as v0.19's _convert_args took them
    np.testing.assert_allclose(run(data=X)[0].numpy(), reference(X)[0], rtol=1e-5, atol=1e-5)


def test_evaluate_an_expression_a_function_a_global_and_binds():
    executor = relay.create_executor()  # "debug", as in v0.19
    value = executor.evaluate(relay.nn.relu(relay.const(np.array([-1.0, 2.0], "float32"))))
    assert isinstance(value, tvm.runtime.Tensor)
    np.testing.assert_array_equal(value.numpy(), [0.0, 2.0])

    x = relay.var("x", shape=(3,))
    double = relay.Function([x], relay.add(x, x))
    np.testing.assert_array_equal(
        executor.evaluate(double)(np.arange(3, dtype="float32")).numpy(), [0, 2, 4])

    mod = relay.IRModule.from_expr(relay.Function([x], relay.negative(x)))
    mod["double"] = double
    np.testing.assert_array_equal(
        relay.create_executor("vm", mod=mod).evaluate(mod.get_global_var("double"))(
            np.ones(3, "float32")).numpy(), [2, 2, 2])

    y = relay.var("y", shape=(2,))
    bound = executor.evaluate(relay.multiply(y, relay.const(3.0)),
                              binds={y: np.array([1.0, 2.0], "float32")})
    np.testing.assert_array_equal(bound.numpy(), [3.0, 6.0])


def test_evaluate_takes_relay_constants_as_arguments():
    """v0.19's interpreter took a ``relay.const`` argument as its value."""
    i, j = relay.var("i", shape=(), dtype="int32"), relay.var("j", shape=(), dtype="int32")
    equal = relay.create_executor().evaluate(relay.Function([i, j], relay.equal(i, j)))
    assert bool(equal(relay.const(3, "int32"), relay.const(3, "int32")).numpy())
    assert not bool(equal(relay.const(3, "int32"), j=relay.const(4, "int32")).numpy())


def test_executor_refusals_name_the_problem():
    with pytest.raises(LegacyApiError, match="unknown execution strategy 'jit'"):
        relay.create_executor("jit")
    with pytest.raises(TargetError, match="not the CPU"):
        relay.create_executor("graph", device=tvm.device("cuda", 0))
    with pytest.raises(TargetError, match="heterogeneous"):
        relay.create_executor("graph", target={"cpu": "llvm", "cuda": "cuda"})
    y = relay.var("y", shape=(2,))
    with pytest.raises(LegacyApiError, match="free variable.*%y"):
        relay.create_executor().evaluate(relay.negative(y))
    with pytest.raises(LegacyApiError, match="no @main"):
        relay.create_executor().evaluate()
