"""``relay.build``, ``relay.create_executor`` and ``tvm.contrib.graph_executor`` for scripts
ported from TVM v0.19 by swapping their imports.

A v0.19 script built with ``lib = relay.build(mod, target, params=params)`` and ran
``m = graph_executor.GraphModule(lib["default"](dev))`` with ``set_input`` / ``run`` /
``get_output``, or evaluated with ``relay.create_executor(kind, mod).evaluate()(x)``.
Here both build with :func:`bmlib_relax.compile` (bmlib offload, a Relax VM) and keep
v0.19's calling conventions: results are ``tvm.runtime.Tensor`` objects (``.numpy()``),
a tuple result is a (nested) list, and a graph module's outputs are the result's
tensors flattened in order.  What has no counterpart in a Relax build — the graph JSON,
``graph_executor.create(graph_json, lib, dev)``, tuple-unpacking ``relay.build``'s
result, a device other than the CPU — is a :class:`~bmlib_relax.errors.LegacyApiError`
naming the call.

``bmlib_relax.relay.build`` / ``create_executor`` are this module's functions (loaded
on first use, so the front door does not import the backend).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np
import tvm

from .errors import LegacyApiError, ParamError, TargetError
from .relay import ast
from .relay.analysis import free_vars
from .runtime import ModelRunner, named_outputs

EXECUTOR_KINDS = ("debug", "graph", "vm", "aot")

#: The functions a v0.19 graph executor module exposed by name (``m["run"]()``).
GRAPH_MODULE_FUNCTIONS = ("set_input", "run", "get_output", "get_input", "get_num_outputs",
                          "get_num_inputs", "get_input_index", "get_input_info",
                          "set_input_zero_copy", "set_output_zero_copy", "load_params",
                          "share_params")


def _the_one(value: Any, what: str, many: str) -> Any:
    """``value``, or the single entry of a list/tuple of them (v0.19 took one per target);
    several are a ``TargetError`` (``many`` says what they are)."""
    if not isinstance(value, (list, tuple)):
        return value
    if len(value) != 1:
        raise TargetError(f"{what}: {many} {value!r}; bmlib-relax builds for and runs on "
                          "one CPU", str(value))
    return value[0]


def _cpu_device(device: Any, what: str) -> Any:
    """``device`` (or the one of a list) if it is the CPU."""
    device = _the_one(device, what, "several devices")
    if device is None:
        return tvm.cpu(0)
    if getattr(device, "dlpack_device_type", None) is None or \
            device.dlpack_device_type() != tvm.cpu().dlpack_device_type():
        raise TargetError(f"{what}: device {device} is not the CPU; bmlib-relax builds and "
                          "runs on the CPU (bmlib_relax.rpc for a remote one)", str(device))
    return device


def _single_target(target: Any, what: str) -> Any:
    """v0.19's target argument (a string, ``Target``, dict or list of targets) as the one
    CPU target :func:`bmlib_relax.compile` takes; ``None`` is the current ``with
    tvm.target.Target(...)`` scope's target, else the host CPU."""
    if isinstance(target, Mapping) and "kind" not in target:  # {device: target}
        target = list(target.values())
    target = _the_one(target, what, "heterogeneous targets")
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    return target


def _not_a_relay_module(value: Any, what: str) -> None:
    """Raise the ``LegacyApiError`` for a ``value`` that is not a Relay module.  A ported
    script's ``tvm.IRModule.from_expr(f)`` / ``mod = tvm.IRModule(); mod["main"] = f``
    is the common case: TVM 0.27's ``IRModule`` holds no Relay function (``from_expr``
    fails in TVM's FFI, the item assignment is silently dropped), so say which to use."""
    if isinstance(value, tvm.IRModule):
        held = ", ".join(gv.name_hint for gv in value.functions) or "nothing"
        raise LegacyApiError(
            f"{what}: got a tvm.IRModule (holding {held}); TVM 0.27's IRModule cannot hold "
            "Relay functions (mod['main'] = f is dropped) — build the module with "
            "relay.IRModule.from_expr(f) or relay.IRModule({'main': f}) from bmlib_relax, "
            "or give a Relax module to bmlib_relax.compile", what)
    raise LegacyApiError(f"{what} takes a Relay IRModule or Function; got "
                         f"{type(value).__name__}", what)


def _params_of(main: Optional[ast.Function], params: Optional[Mapping[str, Any]]) -> Any:
    """The entries of ``params`` that name a parameter of ``main``.  v0.19's
    BindParamsByName skipped the others (a script passes ``params=`` again after a BYOC
    partition already bound them); a misspelt weight stays a parameter, so the run
    still refuses it unset."""
    if params is None or main is None:
        return params
    names = {p.name_hint for p in main.params}
    return {name: value for name, value in params.items() if name in names}


def _compile(mod: Any, params: Any, target: Any) -> ModelRunner:
    from .compiler import compile as bmlib_compile  # the entry point above this shim

    return bmlib_compile(mod, params, target=target)


def _output_count(runner: ModelRunner) -> Optional[int]:
    """How many tensors a run returns, flattened (None when the runner does not say)."""
    report = getattr(runner, "report", None)
    specs = (report.signature or {}).get("outputs") if report is not None else None
    if specs is None:
        specs = getattr(runner, "metadata", {}).get("outputs")
    return len(specs) if isinstance(specs, list) else None


def _as_tensor(value: Any) -> Any:
    if isinstance(value, tvm.runtime.Tensor):
        return value
    return tvm.runtime.tensor(np.asarray(value, order="C"))  # keeps a 0-d array 0-d


def _argument_value(value: Any) -> Any:
    """An executor argument as an array: a Relay ``Constant`` (``relay.const(0)``, which
    v0.19's interpreter took as it is) gives its data."""
    return value.data if isinstance(value, ast.Constant) else value


def _owned_input(value: Any, name: str) -> Any:
    """A copy of ``value`` the executor owns, as v0.19's ``set_input`` copied into its own
    input buffer: refilling the caller's array afterwards does not change the input, and
    ``get_input(i)`` returns this buffer, so ``get_input(i).copyfrom(a)`` sets it."""
    try:
        if isinstance(value, tvm.runtime.Tensor):
            return tvm.runtime.tensor(value.numpy())
        return tvm.runtime.tensor(np.array(value, order="C"))
    except Exception as err:  # noqa: BLE001 - any unconvertible value gets one named error
        raise ParamError(f"set_input: input {name!r} cannot be a tensor "
                         f"({type(value).__name__}: {err})", name) from None


def _as_v019_result(value: Any) -> Any:
    """A model's numpy result as v0.19's executors returned it: a tensor, or a (nested)
    list of tensors for a tuple."""
    if isinstance(value, (tuple, list)):
        return [_as_v019_result(v) for v in value]
    return _as_tensor(value)


@dataclass(frozen=True)
class BenchmarkResult:
    """Seconds per run of each repeat, with v0.19's summary fields."""

    results: tuple

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __str__(self) -> str:
        """v0.19's summary table, which tutorials print."""
        ms = [v * 1000 for v in (self.mean, self.median, self.max, self.min, self.std)]
        return ("Execution time summary:\n" +
                " ".join(f"{h:^12}" for h in ("mean (ms)", "median (ms)", "max (ms)",
                                               "min (ms)", "std (ms)")) + "\n" +
                " ".join(f"{v:^12.4f}" for v in ms))


class _GraphState:
    """The inputs set and outputs of the last run, shared by every ``GraphModule`` that
    wraps the same executor module (as v0.19's wrappers shared one C++ module)."""

    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.inputs: dict[int, Any] = {}
        self.outputs: Optional[list] = None
        self.output_buffers: dict[int, Any] = {}  # set_output_zero_copy's tensors


class GraphModule:
    """``tvm.contrib.graph_executor.GraphModule``: inputs set by index or name, ``run``,
    outputs fetched by index.

    Wraps what ``relay.build(...)["default"](dev)`` returns, another ``GraphModule``, or
    a model from :func:`bmlib_relax.compile` / :func:`bmlib_relax.load`.  Unlike v0.19's
    graph executor, ``run`` refuses to start while an input is unset (v0.19 read the
    input buffer's stale contents).
    """

    def __init__(self, module: Any):
        if isinstance(module, GraphModule):
            self._state = module._state
        elif isinstance(module, ModelRunner):
            self._state = _GraphState(module)
        else:
            raise LegacyApiError(
                f"GraphModule wraps what relay.build(...)['default'](dev), bmlib_relax.compile "
                f"or bmlib_relax.load returned; got {type(module).__name__}", "GraphModule")
        self.module = self

    @property
    def _names(self) -> list[str]:
        return self._state.runner.input_names

    def _index(self, key: Union[int, str], what: str) -> int:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not 0 <= key < len(self._names):
                raise ParamError(f"{what}: input index {key} out of range (the model has "
                                 f"{len(self._names)} input(s))", str(key))
            return int(key)
        positions = [i for i, n in enumerate(self._names) if n == key]
        if not positions:
            raise ParamError(f"{what}: could not find {key!r} in the model's inputs "
                             f"({', '.join(self._names)})", str(key))
        if len(positions) > 1:
            raise ParamError(f"{what}: input name {key!r} is ambiguous (inputs {positions}); "
                             "use its index", str(key))
        return positions[0]

    def set_input(self, key: Union[int, str, None] = None, value: Any = None,
                  **params: Any) -> None:
        """Set an input by index or name; keyword inputs by name.  As in v0.19, a
        keyword that names no input (a weight already built into the library by
        ``relay.build(..., params=params)``) is skipped."""
        if key is not None:
            position = self._index(key, "set_input")
            self._state.inputs[position] = _owned_input(value, self._names[position])
        for name, array in params.items():
            if name in self._names:
                self._state.inputs[self._index(name, "set_input")] = _owned_input(array, name)

    def run(self, **input_dict: Any) -> None:
        """Run on the inputs set (after setting ``input_dict``)."""
        if input_dict:
            self.set_input(**input_dict)
        missing = [n for i, n in enumerate(self._names) if i not in self._state.inputs]
        if missing:
            raise ParamError(f"run: input {missing[0]!r} was not set (set_input)", missing[0])
        args = [self._state.inputs[i] for i in range(len(self._names))]
        outputs = self._state.runner(*args)
        self._state.outputs = [array for _, array in named_outputs(outputs)]
        for index, buffer in self._state.output_buffers.items():
            if index < len(self._state.outputs):
                buffer.copyfrom(self._state.outputs[index])

    def set_input_zero_copy(self, key: Union[int, str, None] = None, value: Any = None,
                            **params: Any) -> None:
        """v0.19's ``set_input_zero_copy``: the tensor itself is the input (not a copy), so
        writing into it before a run changes what the run reads."""
        if key is not None:
            self._state.inputs[self._index(key, "set_input_zero_copy")] = _as_tensor(value)
        for name, array in params.items():
            if name in self._names:
                self._state.inputs[self._index(name, "set_input_zero_copy")] = \
                    _as_tensor(array)

    def set_output_zero_copy(self, index: int, value: Any) -> None:
        """v0.19's ``set_output_zero_copy``: each run writes output ``index`` into the
        tensor ``value`` (here copied into it after the run)."""
        if not isinstance(value, tvm.runtime.Tensor):
            raise ParamError(f"set_output_zero_copy: output {index} takes a tvm tensor, got "
                             f"{type(value).__name__}", str(index))
        self._state.output_buffers[int(index)] = value

    def load_params(self, params_bytes: bytes) -> None:
        """v0.19's ``load_params``: the inputs named in a ``save_param_dict`` blob are set
        (names that are no input, e.g. weights built in, are skipped as v0.19 did)."""
        try:
            params = tvm.runtime.load_param_dict(bytearray(params_bytes))
        except Exception as err:  # noqa: BLE001 - a damaged blob gets one named error
            raise ParamError(f"load_params: not a parameter blob ({err})",
                             "load_params") from None
        self.set_input(**params)

    def share_params(self, other: Any, params_bytes: bytes) -> None:
        """v0.19's ``share_params``: the inputs in ``params_bytes`` (shared there, set
        here: each executor owns its inputs)."""
        self.load_params(params_bytes)

    def time_evaluator(self, func_name: str, dev: Any = None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: int = 0, **kwargs: Any) -> Callable:
        """v0.19's ``module.time_evaluator("run", dev, number, repeat)``: a function whose
        call times ``run`` and returns a :class:`BenchmarkResult` (``.results``,
        ``.mean``)."""
        def evaluate(*args: Any) -> BenchmarkResult:
            return self.benchmark(dev, func_name, repeat=repeat, number=number,
                                  min_repeat_ms=min_repeat_ms)

        return evaluate

    def get_num_outputs(self) -> int:
        count = _output_count(self._state.runner)
        if count is None:
            if self._state.outputs is None:
                raise LegacyApiError("get_num_outputs: this model's output count is known "
                                     "after its first run", "get_num_outputs")
            count = len(self._state.outputs)
        return count

    def get_num_inputs(self) -> int:
        return len(self._names)

    def get_output(self, index: int, out: Any = None) -> Any:
        """Output ``index`` of the last run as a tensor (copied into ``out`` if given)."""
        if self._state.outputs is None:
            raise LegacyApiError("get_output: the model has not run yet (call run())",
                                 "get_output")
        if not 0 <= index < len(self._state.outputs):
            raise ParamError(f"get_output: output index {index} out of range (the model "
                             f"has {len(self._state.outputs)} output(s))", str(index))
        array = self._state.outputs[index]
        if out is None:
            return tvm.runtime.tensor(array)
        out.copyfrom(array)
        return out

    def get_input(self, index: Union[int, str], out: Any = None) -> Any:
        """The buffer of input ``index`` (or name): what was set, or zeros of its declared
        shape before (which then becomes the input, as v0.19's buffer was)."""
        position = self._index(index, "get_input")
        if position in self._state.inputs:
            tensor = self._state.inputs[position]
        else:
            spec = self._state.runner.input_specs[position]
            if not all(isinstance(d, int) for d in spec["shape"]):
                raise LegacyApiError(f"get_input: input {spec['name']!r} has a symbolic "
                                     f"shape {spec['shape']} and has not been set",
                                     "get_input")
            # v0.19 handed out the input buffer itself, so ``get_input(i).copyfrom(a)``
            # is how scripts fill an input: keep the buffer handed out as the input.
            tensor = tvm.runtime.tensor(np.zeros(spec["shape"], spec["dtype"]))
            self._state.inputs[position] = tensor
        if out is None:
            return tensor
        out.copyfrom(tensor)
        return out

    def get_input_index(self, name: str) -> int:
        """The index of input ``name``, or -1 (as v0.19's C++ executor answered)."""
        return self._names.index(name) if name in self._names else -1

    def get_input_info(self) -> tuple[dict, dict]:
        """``({name: shape}, {name: dtype})`` of the inputs."""
        specs = self._state.runner.input_specs
        return ({s["name"]: tuple(s["shape"]) for s in specs},
                {s["name"]: s["dtype"] for s in specs})

    def benchmark(self, device: Any = None, func_name: str = "run", repeat: int = 5,
                  number: int = 5, min_repeat_ms: Optional[float] = None,
                  end_to_end: bool = False, **kwargs: Any) -> BenchmarkResult:
        """Seconds per ``run`` in each of ``repeat`` repeats of ``number`` runs (a repeat
        runs more often until it lasts ``min_repeat_ms``).  Inputs and outputs cross
        from and to numpy in every run, as with ``end_to_end=True`` in v0.19."""
        if func_name != "run":
            raise LegacyApiError(f"benchmark: only 'run' can be timed, not {func_name!r}",
                                 "benchmark")
        if kwargs:
            self.set_input(**kwargs)
        self.run()  # warm up (and check the inputs)
        results = []
        for _ in range(max(1, repeat)):
            runs, start = 0, time.perf_counter()
            while True:
                for _ in range(max(1, number)):
                    self.run()
                runs += max(1, number)
                elapsed = time.perf_counter() - start
                if not min_repeat_ms or elapsed * 1e3 >= min_repeat_ms:
                    break
            results.append(elapsed / runs)
        return BenchmarkResult(tuple(results))

    def __getitem__(self, name: str) -> Callable:
        """``m["run"]()`` / ``m["set_input"](...)``: v0.19's packed functions by name."""
        if name not in GRAPH_MODULE_FUNCTIONS:
            raise LegacyApiError(f"graph executor module has no function {name!r} "
                                 f"(it has {', '.join(GRAPH_MODULE_FUNCTIONS)})", str(name))
        return getattr(self, name)

    get_function = __getitem__


def create(graph_json_str: str, libmod: Any, device: Any) -> GraphModule:
    """v0.19's ``graph_executor.create(graph_json, lib, dev)``: a Relax build has no graph
    JSON, so this is refused."""
    raise LegacyApiError("graph_executor.create(graph_json, lib, dev): a bmlib-relax build has "
                         "no graph JSON; use GraphModule(lib['default'](dev))",
                         "graph_executor.create")


class GraphExecutorFactoryModule:
    """What ``relay.build`` returned: ``lib[mod_name](dev)`` makes a graph executor module;
    ``export_library`` writes an artifact that :func:`bmlib_relax.load` reads back.

    The weights passed as ``params`` are built into the library, so ``get_params()`` is
    empty (v0.19 returned the constants its graph executor still had to be given).
    """

    def __init__(self, model: ModelRunner, ir_mod: Any, target: Any, mod_name: str):
        self.model = model
        self.ir_mod = ir_mod
        self.target = target
        self.libmod_name = mod_name
        self.report = getattr(model, "report", None)

    def __getitem__(self, name: str) -> Callable[..., GraphModule]:
        if name != self.libmod_name:
            raise LegacyApiError(f"the built module has no function {name!r} (it was built "
                                 f"as {self.libmod_name!r}: lib[{self.libmod_name!r}](dev))",
                                 str(name))

        def create_module(*devices: Any) -> GraphModule:
            _cpu_device(list(devices) if len(devices) != 1 else devices[0], name)
            return GraphModule(self.model)

        return create_module

    def __iter__(self):
        raise LegacyApiError("graph_json, lib, params = relay.build(...): a bmlib-relax build "
                             "has no graph JSON; use lib = relay.build(...) and "
                             "GraphModule(lib['default'](dev))", "relay.build")

    def export_library(self, file_name: str, fcompile: Any = None, addons: Any = None,
                       **kwargs: Any) -> str:
        """Write the library and its metadata (read back with :func:`bmlib_relax.load`)."""
        return self.model.export_library(file_name)

    def get_lib(self) -> ModelRunner:
        return self.model

    def get_params(self) -> dict:
        return {}

    @property
    def lib(self) -> ModelRunner:
        """v0.19's ``lib.lib``: the compiled library (here the model)."""
        return self.model

    @property
    def params(self) -> dict:
        return self.get_params()

    @property
    def graph_json(self) -> str:
        return self.get_graph_json()

    def get_graph_json(self) -> str:
        raise LegacyApiError("get_graph_json(): a bmlib-relax build is a Relax VM executable, "
                             "it has no graph JSON", "get_graph_json")

    get_executor_config = get_graph_json

    def get_devices(self) -> list:
        return []


def build(ir_mod: Any, target: Any = None, target_host: Any = None, executor: Any = None,
          runtime: Any = None, workspace_memory_pools: Any = None,
          constant_memory_pools: Any = None, params: Optional[Mapping[str, Any]] = None,
          mod_name: str = "default") -> GraphExecutorFactoryModule:
    """``relay.build``: compile ``ir_mod`` (a module, or a function as in v0.19's deprecated
    form) with ``params`` bound as weights, for one CPU ``target`` (``None``: the target
    in scope, else the host CPU).  ``executor``/``runtime`` choices do not change the
    result: it is always a Relax VM build."""
    if not isinstance(ir_mod, (ast.IRModule, ast.Function)):
        _not_a_relay_module(ir_mod, "relay.build")
    target = _single_target(target, "relay.build")
    main = ir_mod if isinstance(ir_mod, ast.Function) else ir_mod.functions.get("main")
    model = _compile(ir_mod, _params_of(main, params), target)
    return GraphExecutorFactoryModule(model, ir_mod, target, mod_name)


class Executor:
    """What ``relay.create_executor`` returned: ``evaluate()`` compiles ``mod["main"]`` and
    gives a function; ``evaluate(expr)`` compiles a function or a global of the module,
    or computes a closed expression's value right away."""

    def __init__(self, kind: str, mod: ast.IRModule, device: Any, target: Any):
        self.kind = kind
        self.mod = mod
        self.device = device
        self.target = target

    def _module_with_main(self, main: ast.Function) -> ast.IRModule:
        functions = {name: f for name, f in self.mod.functions.items() if name != "main"}
        functions["main"] = main
        return ast.IRModule(functions, self.mod.type_definitions, self.mod.metadata)

    def _make_executor(self, main: Optional[ast.Function]) -> Callable[..., Any]:
        if main is None:
            if "main" not in self.mod.functions:
                raise LegacyApiError("evaluate(): the executor's module has no @main (pass "
                                     "mod= to create_executor or an expression to evaluate)",
                                     "evaluate")
            module = self.mod
        else:
            module = self._module_with_main(main)
        model = _compile(module, None, self.target)

        # (a tuple-typed input's fields are named "x.0", "x.1": "x" is given)
        names = set(model.input_names) | {n.split(".", 1)[0] for n in model.input_names}

        def run(*args: Any, **kwargs: Any) -> Any:
            # v0.19's Executor looked up only the function's parameters in ``kwargs``, and
            # took a Relay constant as an argument (its value)
            known = {name: _argument_value(value) for name, value in kwargs.items()
                     if name in names}
            return _as_v019_result(model(*[_argument_value(a) for a in args], **known))

        run.model = model  # for a caller that wants the offload report
        return run

    def evaluate(self, expr: Optional[ast.Expr] = None,
                 binds: Optional[Mapping[ast.Var, Any]] = None) -> Any:
        if binds:
            for var, value in reversed(list(binds.items())):
                if not isinstance(value, ast.Expr):
                    value = ast.Constant(np.array(value.numpy() if hasattr(value, "numpy")
                                                  else value))
                expr = ast.Let(var, value, expr)
        if expr is None:
            return self._make_executor(None)
        if isinstance(expr, ast.GlobalVar):
            name = expr.name_hint
            if name not in self.mod.functions:
                raise LegacyApiError(f"evaluate(@{name}): the module has no such global",
                                     f"@{name}")
            return self._make_executor(self.mod.functions[name])
        unbound = free_vars(expr)
        if unbound:
            raise LegacyApiError(f"evaluate(): the expression has free variable(s) "
                                 f"{', '.join('%' + v.name_hint for v in unbound)} (bind them "
                                 "with binds= or evaluate a Function)", "evaluate")
        if isinstance(expr, ast.Function):
            return self._make_executor(expr)
        return self._make_executor(ast.Function((), expr))()


def create_executor(kind: str = "debug", mod: Optional[ast.IRModule] = None,
                    device: Any = None, target: Any = "llvm",
                    params: Optional[Mapping[str, Any]] = None) -> Executor:
    """``relay.create_executor``: every ``kind`` (``debug``, ``graph``, ``vm``, ``aot``)
    compiles with bmlib offload; results are tensors, tuples lists of them."""
    if kind not in EXECUTOR_KINDS:
        raise LegacyApiError(f"unknown execution strategy {kind!r} (one of "
                             f"{', '.join(EXECUTOR_KINDS)})", str(kind))
    device = _cpu_device(device, "create_executor")
    target = _single_target(target, "create_executor")
    if mod is not None and not isinstance(mod, ast.IRModule):
        _not_a_relay_module(mod, "create_executor")
    mod = mod if mod is not None else ast.IRModule()
    if params is not None:
        from .relay.params import bind_params_by_name

        mod = ast.IRModule.from_expr(bind_params_by_name(mod["main"],
                                                         _params_of(mod["main"], params)))
    return Executor(kind, mod, device, target)


__all__ = ["build", "create_executor", "create", "GraphModule", "GraphExecutorFactoryModule",
           "Executor", "BenchmarkResult"]
