"""ONNX Runtime and OpenVINO as the benchmark's CPU references.

Both run the ONNX graph that :mod:`.onnx_export` emits from the same Relay
program and weights bmlib compiles, configured the way a user deploying for
latency would: all graph optimisations on, fp32 arithmetic, one inference at a time, and the
same number of threads as the bmlib run.  Each runner is a callable taking the
model's inputs as numpy arrays (in the Relay parameter order) and returning the
outputs as numpy arrays.  Both packages are optional (``pip install
"bmlib-relax[bench]"``); :func:`available_runtimes` says which are installed.
"""
from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

Runner = Callable[..., list]


def available_runtimes() -> list[str]:
    """The reference runtimes whose Python packages are installed."""
    names = []
    if importlib.util.find_spec("onnxruntime") is not None:
        names.append("onnxruntime")
    if importlib.util.find_spec("openvino") is not None:
        names.append("openvino")
    return names


def onnxruntime_runner(model_bytes: bytes, input_names: Sequence[str], threads: int) -> Runner:
    """An ONNX Runtime CPU session: ``threads`` intra-op threads, sequential execution."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    names = list(input_names)

    def run(*arrays: np.ndarray) -> list:
        return session.run(None, dict(zip(names, arrays)))

    return run


def openvino_runner(model_bytes: bytes, input_names: Sequence[str], threads: int) -> Runner:
    """An OpenVINO CPU model compiled for latency with ``threads`` inference threads."""
    import openvino as ov

    core = ov.Core()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as f:
            f.write(model_bytes)
        model = core.read_model(path)
        compiled = core.compile_model(model, "CPU", {
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": int(threads),
            "NUM_STREAMS": 1,
            # fp32 like the other columns: on AMX/AVX512-BF16 hosts OpenVINO would
            # otherwise run in bf16 (about 1e-2 off, and not the same arithmetic).
            "INFERENCE_PRECISION_HINT": "f32",
        })
    request = compiled.create_infer_request()
    names = list(input_names)

    def run(*arrays: np.ndarray) -> list:
        result = request.infer(dict(zip(names, arrays)))
        return [np.asarray(result[out]) for out in compiled.outputs]

    return run


RUNNERS: dict[str, Callable[[bytes, Sequence[str], int], Runner]] = {
    "onnxruntime": onnxruntime_runner,
    "openvino": openvino_runner,
}


def make_runner(name: str, model_bytes: bytes, input_names: Sequence[str], threads: int) -> Any:
    """The runner of reference runtime ``name`` (``onnxruntime`` or ``openvino``)."""
    return RUNNERS[name](model_bytes, input_names, threads)
