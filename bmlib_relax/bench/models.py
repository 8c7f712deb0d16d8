"""The benchmarked models: where each one's Relay text, weights and inputs come from.

A model is named on the command line.  Golden names (``resnet18``,
``mobilenet``, …) read the golden's text and recipe-v1 tensors; the others are
registered here: ``resnet50`` is the corpus's ResNet-50 imported from ONNX
(NCHW, free weights filled by recipe v1), ``resnet50_tf`` the same network
imported from TensorFlow (NHWC, batch pinned to 1; ``--unpinned`` also times
it with the batch symbolic), and ``bert_layer`` a
BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, sequence 128) written
in the style of the ``transformer_block`` golden.  A path to a Relay text file
(``.relay``/``.txt``) is a model too: its first parameter the input, the others
weights (recipe v1).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..recipe import positive_variances, recipe_from_manifest, recipe_tensor


@dataclass
class BenchModel:
    name: str
    text: str
    params: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    source: str
    input_shapes: Optional[dict] = None  # pins dynamic (``?``) input dims for compile()


ModelSource = Callable[[Optional[Path], Optional[Path]], BenchModel]
_SOURCES: dict[str, ModelSource] = {}
_NEEDS_CORPUS: set[str] = set()


def model_source(name: str, needs_corpus: bool = False) -> Callable[[ModelSource], ModelSource]:
    def decorator(fn: ModelSource) -> ModelSource:
        _SOURCES[name] = fn
        if needs_corpus:
            _NEEDS_CORPUS.add(name)
        return fn

    return decorator


def default_goldens() -> Path:
    """``$BMLIB_RELAY_GOLDEN``, else the golden cases vendored in this checkout's
    ``tests/data`` (what every benchmark tool reads without ``--goldens``)."""
    env = os.environ.get("BMLIB_RELAY_GOLDEN")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "tests" / "data"


def golden_names(goldens: Path) -> list[str]:
    """The golden cases in ``goldens`` (folders with a ``manifest.json``)."""
    if not goldens.is_dir():
        return []
    return sorted(p.parent.name for p in goldens.glob("*/manifest.json"))


def model_problem(name: str, goldens: Path, corpus: Optional[Path]) -> Optional[str]:
    """Why ``load_model(name, goldens, corpus)`` cannot work, in one line, or None.

    The benchmark tools check every name before they build or time anything: a
    misspelt model used to surface as a traceback after minutes of other models."""
    if name in _SOURCES:
        if name in _NEEDS_CORPUS and corpus is None:
            return (f"model {name!r} is a Relay corpus dump: give --corpus "
                    "(or set $BMLIB_RELAY_CORPUS)")
        return None
    if (goldens / name / "manifest.json").is_file() or _is_relay_file(name):
        return None
    goldens_known = golden_names(goldens)
    where = f"goldens in {goldens}: {', '.join(goldens_known)}" if goldens_known else \
        f"no golden cases in {goldens} (--goldens or $BMLIB_RELAY_GOLDEN)"
    return (f"unknown model {name!r}: not one of {', '.join(sorted(_SOURCES))}, nor among "
            f"the {where}")


def check_model_names(parser: argparse.ArgumentParser, names: Sequence[str], goldens: Path,
                      corpus: Optional[Path]) -> None:
    """Stop with a usage error (exit status 2) naming the first model that cannot be
    loaded, before anything is built or timed."""
    for name in names:
        problem = model_problem(name, goldens, corpus)
        if problem is not None:
            parser.error(problem)


def load_model(name: str, goldens: Path, corpus: Optional[Path]) -> BenchModel:
    """The model called ``name``: a registered source, a golden folder, else a Relay
    text file (``name`` its path)."""
    if name in _SOURCES:
        return _SOURCES[name](goldens, corpus)
    if _is_relay_file(name) and not (goldens / name / "manifest.json").is_file():
        return relay_file_model(name, Path(name))
    folder = goldens / name
    manifest = json.loads((folder / "manifest.json").read_text())
    return BenchModel(name, (folder / "model.relay").read_text(),
                      recipe_from_manifest(manifest["params"], "param"),
                      recipe_from_manifest(manifest["inputs"], "input"), str(folder / "model.relay"))


def _is_relay_file(name: str) -> bool:
    return Path(name).suffix in (".relay", ".txt") and Path(name).is_file()


def _corpus_model(name: str, corpus: Optional[Path], filename: str) -> BenchModel:
    """A dump of the corpus's ``external`` folder (see :func:`relay_file_model`)."""
    if corpus is None:
        raise FileNotFoundError(f"model {name!r} needs --corpus (or $BMLIB_RELAY_CORPUS)")
    return relay_file_model(name, corpus / "external" / filename)


def relay_file_model(name: str, path: Path) -> BenchModel:
    """A Relay text file whose first ``@main`` parameter is the input and the others
    are weights (filled by recipe v1); dynamic input dims pinned to 1.  Any real-model
    dump can be benchmarked this way, e.g. the corpus's EfficientNet or SqueezeNet."""
    from ..relay import parse

    text = path.read_text()
    main = parse(text, source_name=str(path))["main"]
    data = main.params[0]
    declared = list(data.type_annotation.shape)
    shape = [d if isinstance(d, int) else 1 for d in declared]
    params = positive_variances(main, {
        v.name: recipe_tensor(v.name, v.type_annotation.shape, v.type_annotation.dtype)
        for v in main.params[1:]})
    inputs = {data.name: recipe_tensor(data.name, shape, data.type_annotation.dtype, role="input")}
    pinned = {data.name: shape} if shape != declared else None
    return BenchModel(name, text, params, inputs, str(path), pinned)


@model_source("resnet50", needs_corpus=True)
def _resnet50(goldens: Optional[Path], corpus: Optional[Path]) -> BenchModel:
    return _corpus_model("resnet50", corpus, "003_resnet50_onnx_3la.relay")


@model_source("resnet50_tf", needs_corpus=True)
def _resnet50_tf(goldens: Optional[Path], corpus: Optional[Path]) -> BenchModel:
    return _corpus_model("resnet50_tf", corpus, "002_resnet50_tf_3la.relay")


def bert_layer_text(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> str:
    """Relay text of one post-norm transformer encoder layer (BERT-base shapes by default)."""
    d = hidden // heads
    t = lambda *s: f"Tensor[({', '.join(map(str, s))}{',' if len(s) == 1 else ''}), float32]"  # noqa: E731
    params = [("x", t(1, seq, hidden))]
    for p in ("q", "k", "v", "o"):
        params += [(f"{p}_weight", t(hidden, hidden)), (f"{p}_bias", t(hidden))]
    params += [("ln1_gamma", t(hidden)), ("ln1_beta", t(hidden)),
               ("f1_weight", t(ffn, hidden)), ("f1_bias", t(ffn)),
               ("f2_weight", t(hidden, ffn)), ("f2_bias", t(hidden)),
               ("ln2_gamma", t(hidden)), ("ln2_beta", t(hidden))]
    signature = ", ".join(f"%{n}: {ty}" for n, ty in params)
    scale = 1.0 / float(np.sqrt(d))
    body = f"""
  %0 = reshape(%x, newshape=[{seq}, {hidden}]);
  %1 = nn.dense(%0, %q_weight, units=None);
  %2 = nn.bias_add(%1, %q_bias);
  %3 = reshape(%2, newshape=[{seq}, {heads}, {d}]);
  %4 = nn.dense(%0, %k_weight, units=None);
  %5 = nn.bias_add(%4, %k_bias);
  %6 = reshape(%5, newshape=[{seq}, {heads}, {d}]);
  %7 = transpose(%3, axes=[1, 0, 2]);
  %8 = transpose(%6, axes=[1, 0, 2]);
  %9 = nn.batch_matmul(%7, %8, transpose_b=True);
  %10 = multiply(%9, {scale!r}f);
  %11 = nn.dense(%0, %v_weight, units=None);
  %12 = nn.bias_add(%11, %v_bias);
  %13 = reshape(%12, newshape=[{seq}, {heads}, {d}]);
  %14 = transpose(%13, axes=[1, 0, 2]);
  %15 = nn.softmax(%10);
  %16 = transpose(%14, axes=[0, 2, 1]);
  %17 = nn.batch_matmul(%15, %16, transpose_b=True);
  %18 = transpose(%17, axes=[1, 0, 2]);
  %19 = reshape(%18, newshape=[{seq}, {hidden}]);
  %20 = nn.dense(%19, %o_weight, units=None);
  %21 = nn.bias_add(%20, %o_bias);
  %22 = add(%21, %0);
  %23 = nn.layer_norm(%22, %ln1_gamma, %ln1_beta);
  %24 = nn.dense(%23, %f1_weight, units=None);
  %25 = nn.bias_add(%24, %f1_bias);
  %26 = multiply(%25, 0.707107f);
  %27 = erf(%26);
  %28 = multiply(%25, 0.5f);
  %29 = add(1f, %27);
  %30 = multiply(%28, %29);
  %31 = nn.dense(%30, %f2_weight, units=None);
  %32 = nn.bias_add(%31, %f2_bias);
  %33 = add(%32, %23);
  %34 = nn.layer_norm(%33, %ln2_gamma, %ln2_beta);
  reshape(%34, newshape=[1, {seq}, {hidden}])
"""
    return f'#[version = "0.0.5"]\ndef @main({signature}) {{{body}}}\n'


@model_source("bert_layer")
def _bert_layer(goldens: Optional[Path], corpus: Optional[Path]) -> BenchModel:
    from ..relay import parse

    text = bert_layer_text()
    main = parse(text, source_name="bert_layer")["main"]
    params = {v.name: recipe_tensor(v.name, v.type_annotation.shape) for v in main.params[1:]}
    x = main.params[0]
    inputs = {x.name: recipe_tensor(x.name, x.type_annotation.shape, role="input")}
    return BenchModel("bert_layer", text, params, inputs, "generated: bert_layer_text()")


# ResNet-18 stages: (channels, first stride) of the two basic blocks each.
_RESNET18_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))


def resnet18_text(quantized: bool, size: int = 224, classes: int = 1000) -> str:
    """A ResNet-18-shaped network (no batch norm: conv + bias + ReLU, residual adds),
    in fp32, or quantized in the graph as the ``qnn_*`` goldens are.

    Quantized: the float input is ``qnn.quantize``d, every conv weight is
    ``qnn.quantize(param)`` (per-tensor int8; constant-folded to an int8 constant,
    like a prequantized import), each conv has an int32 bias (``qnn.quantize`` at
    the accumulator scale) and a ``qnn.requantize`` to int8 with ReLU as a clip;
    the residual is a ``qnn.add`` of two int8 tensors; the head dequantizes
    before the (float) average pool and classifier.  The same float parameters
    feed both variants, so they compute the same network.
    """
    act, wscale = 0.05, 0.01  # activation and weight scales (zero points 0)
    params: list[str] = ["%data: Tensor[(1, 3, {0}, {0}), float32]".format(size)]
    lines: list[str] = []
    counter = [0]

    def emit(expr: str) -> str:
        name = f"%{counter[0]}"
        counter[0] += 1
        lines.append(f"  {name} = {expr};")
        return name

    def conv(x: str, name: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        params.append(f"%{name}_weight: Tensor[({cout}, {cin}, {k}, {k}), float32]")
        params.append(f"%{name}_bias: Tensor[({cout}), float32]")
        attrs = (f"strides=[{stride}, {stride}], padding=[{k // 2}, {k // 2}, {k // 2}, "
                 f"{k // 2}], channels={cout}, kernel_size=[{k}, {k}]")
        if not quantized:
            y = emit(f"nn.bias_add(nn.conv2d({x}, %{name}_weight, {attrs}), %{name}_bias)")
            return emit(f"nn.relu({y})") if relu else y
        w = emit(f'qnn.quantize(%{name}_weight, {wscale}f, 0, out_dtype="int8")')
        b = emit(f'qnn.quantize(%{name}_bias, {act * wscale:.8g}f, 0, out_dtype="int32")')
        y = emit(f'qnn.conv2d({x}, {w}, 0, 0, {act}f, {wscale}f, {attrs}, '
                 f'out_dtype="int32")')
        y = emit(f"nn.bias_add({y}, {b})")
        y = emit(f'qnn.requantize({y}, {act * wscale:.8g}f, 0, {act}f, 0, out_dtype="int8")')
        return emit(f"clip({y}, a_min={0 if relu else -128}f, a_max=127f)")

    def add_relu(a: str, b: str) -> str:
        if not quantized:
            return emit(f"nn.relu(add({a}, {b}))")
        y = emit(f"qnn.add({a}, {b}, {act}f, 0, {act}f, 0, {act}f, 0)")
        return emit(f"clip({y}, a_min=0f, a_max=127f)")

    x = "%data"
    if quantized:
        x = emit(f'qnn.quantize(%data, {act}f, 0, out_dtype="int8")')
    x = conv(x, "conv1", 3, 64, 7, 2, True)
    x = emit(f"nn.max_pool2d({x}, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])")
    cin = 64
    for stage, (cout, stride) in enumerate(_RESNET18_STAGES, 1):
        for block in range(2):
            s = stride if block == 0 else 1
            name = f"layer{stage}_{block}"
            y = conv(x, f"{name}_conv1", cin, cout, 3, s, True)
            y = conv(y, f"{name}_conv2", cout, cout, 3, 1, False)
            shortcut = conv(x, f"{name}_down", cin, cout, 1, s, False) \
                if (s != 1 or cin != cout) else x
            x = add_relu(y, shortcut)
            cin = cout
    if quantized:
        x = emit(f'qnn.dequantize({x}, {act}f, 0, out_dtype="float32")')
    x = emit(f"nn.batch_flatten(nn.global_avg_pool2d({x}))")
    params.append(f"%fc_weight: Tensor[({classes}, 512), float32]")
    params.append(f"%fc_bias: Tensor[({classes}), float32]")
    lines.append(f"  nn.bias_add(nn.dense({x}, %fc_weight, units=None), %fc_bias)")
    body = "\n".join(lines)
    return f'#[version = "0.0.5"]\ndef @main({", ".join(params)}) {{\n{body}\n}}\n'


def _resnet18_model(quantized: bool) -> BenchModel:
    from ..relay import parse

    name = "resnet18_int8" if quantized else "resnet18_fp32"
    text = resnet18_text(quantized)
    main = parse(text, source_name=name)["main"]
    params = {v.name: recipe_tensor(v.name, v.type_annotation.shape) for v in main.params[1:]}
    x = main.params[0]
    inputs = {x.name: recipe_tensor(x.name, x.type_annotation.shape, role="input")}
    return BenchModel(name, text, params, inputs, f"generated: resnet18_text({quantized})")


@model_source("resnet18_int8")
def _resnet18_int8(goldens: Optional[Path], corpus: Optional[Path]) -> BenchModel:
    return _resnet18_model(True)


@model_source("resnet18_fp32")
def _resnet18_fp32(goldens: Optional[Path], corpus: Optional[Path]) -> BenchModel:
    return _resnet18_model(False)
