"""Every program of the external Relay corpus, with its expected outcome stated per file.

Free parameters get recipe-v1 tensors by name: the listed inputs with role
"input", every other parameter with role "param" (weights).  ``run`` files are
imported, built with ``tvm.compile`` and executed on the CPU (outputs checked
against the Relay return type and for finiteness), and the bmlib build's outputs are
compared with the plain build's, at the recipe inputs and at 3x them.  ``bmlib_run`` files are
imported and executed through the bmlib build only: their plain, untuned build
takes 3 s (ImageNet CNNs, the long LSTM) to minutes (SSD at 1200x1200) per run on
2 cores, and the plain build of each would add 2-10 s of compiling to the suite.
``build`` (the 3D U-Net: its untuned run took over 6 minutes) is imported and
built only; ``BMLIB_CORPUS_RUN_ALL=1`` executes the plain build of every
``bmlib_run``/``build`` file as well.  Every model that imports is also built
through bmlib, and all its FLOPs and ops must be offloaded, or the report must
give the stated reason (``OFFLOAD_EXCEPTIONS``).  The other outcomes name the
error the import must raise.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
import tvm
from tvm import relax

import bmlib_relax
from bmlib_relax import ConversionError, UnsupportedOpError, import_relay
from bmlib_relax.recipe import positive_variances, recipe_tensor
from bmlib_relax.relay import ast, parse

from conftest import corpus_dir

RUN, BMLIB_RUN, BUILD, MISSING_CONSTANT, UNSUPPORTED, REJECTED = (
    "run", "bmlib_run", "build", "missing_constant", "unsupported", "rejected")

# file -> (outcome, input names, detail: error pattern for failures)
EXPECTED = {
    "001_resnet50_pytorch_3la.relay": (BMLIB_RUN, ("image",), None),
    # Dynamic batch (`?`): pinned to 1 here; unpinned in tests/backend/test_symbolic_conv_resnet50.py.
    "002_resnet50_tf_3la.relay": (BMLIB_RUN, ("input_tensor",), None),
    "003_resnet50_onnx_3la.relay": (BMLIB_RUN, ("input_tensor_0",), None),
    "004_transformer_glenside.relay": (BMLIB_RUN, ("input_1", "input_0"), None),
    "005_efficientnet_lite4_glenside.relay": (BMLIB_RUN, ("images_0",), None),
    "006_efficientnet_3la.relay": (BMLIB_RUN, ("data",), None),
    "007_yolov3_glenside.relay": (BMLIB_RUN, ("data",), None),
    "008_yolo3_dotted_names_glenside.relay": (BMLIB_RUN, ("data",), None),
    "009_ssd_resnet34_glenside.relay": (BMLIB_RUN, ("input0",), None),  # 1200x1200
    "010_unet3d_glenside.relay": (BUILD, ("input0",), None),        # 128^3 volume
    "011_resnet18_cifar_glenside.relay": (BMLIB_RUN, ("data",), None),
    "012_mobilenet_glenside.relay": (BMLIB_RUN, ("data",), None),
    "013_mobilenet_simplified_glenside.relay": (BMLIB_RUN, ("data",), None),
    "014_mobilenetv2_3la.relay": (BMLIB_RUN, ("input_0",), None),
    "015_resnet20_cifar_3la.relay": (RUN, ("data",), None),
    "016_lstm_glenside.relay": (BMLIB_RUN, ("data", "hidden0", "hidden1"), None),
    "017_lstm_model_3la.relay": (RUN, ("data", "hidden"), None),
    "018_lstm_annotated_byoc_3la.relay": (RUN, ("data", "hidden"), None),
    # A custom BYOC op (accelerator_call) has no Relax counterpart: one error, every use.
    "019_resmlp_rewritten_accel_3la.relay": (UNSUPPORTED, ("input_0",),
                                             r"1 unsupported Relay op\(s\): accelerator_call\n"
                                             r"  019_resmlp_rewritten_accel_3la.relay:11:7: "),
    "020_resmlp_3la.relay": (RUN, ("input_0",), None),
    # The dump reshapes a 276-element arange (dynamically typed `?` in Relay) to shape
    # (3,): only a static import can see that the program is wrong.
    "021_rnnt_glenside.relay": (REJECTED, ("feats", "txt", "feat_lens"),
                                r"021_rnnt_glenside.relay:12610:12: reshape: .*product "
                                r"T.int64\(276\).*product T.int64\(3\)"),
    "022_squeezenet_let_calyx.relay": (RUN, ("data",), None),
    "023_mlp_v004_calyx.relay": (RUN, ("data",), None),
    "024_resnet18_onnx_giantpandacv.relay": (BMLIB_RUN, ("input.1",), None),
    # Weights are meta[relay.Constant] with no #[metadata] section.
    "025_mnist_marvell_rfc.relay": (MISSING_CONSTANT, ("permute_input",),
                                    r"025_mnist_marvell_rfc.relay:3:34: constant: "
                                    r"meta\[relay.Constant\]\[0\] has no value"),
    "026_fused_primitive_tracne.relay": (RUN, ("data",), None),
    "027_fuzz_metadata_tracne.relay": (RUN, ("pzx", "px1", "px2", "px3", "px4", "px5", "px6",
                                             "px7"), None),
    "issues/001_apache_tvm_issue_6470_dense.relay": (RUN, ("x", "y"), None),
    "issues/002_apache_tvm_issue_13031_broadcast_argmax.relay": (RUN, ("i0",), None),
}


def _concrete(shape) -> tuple[int, ...]:
    return tuple(1 if d is None or isinstance(d, str) else int(d) for d in shape)


def _recipe(var: ast.Var, role: str):
    ty = var.type_annotation
    if isinstance(ty, ast.TupleType):
        return tuple(recipe_tensor(f"{var.name}.{i}", _concrete(f.shape), f.dtype, role)
                     for i, f in enumerate(ty.fields))
    return recipe_tensor(var.name, _concrete(ty.shape), ty.dtype, role)


def _to_vm(value):
    if isinstance(value, tuple):
        return [tvm.runtime.tensor(v) for v in value]
    return tvm.runtime.tensor(value)


def _flatten(out) -> list[np.ndarray]:
    if isinstance(out, np.ndarray):
        return [out]
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for item in out for a in _flatten(item)]


def _flat_types(ty) -> list:
    if isinstance(ty, ast.TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    return [ty]


def test_expected_outcomes_cover_the_whole_corpus():
    root = corpus_dir() / "external"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.relay"))
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file(name):
    outcome, input_names, detail = EXPECTED[name]
    path = corpus_dir() / "external" / name
    module = parse(path.read_text(), path.name)
    func = module["main"]
    names = [p.name for p in func.params]
    assert set(input_names) <= set(names)
    params = {p.name: _recipe(p, "param") for p in func.params if p.name not in input_names}
    params = positive_variances(func, params)  # as trained: no NaN channels
    if outcome in (MISSING_CONSTANT, UNSUPPORTED, REJECTED):
        error = {MISSING_CONSTANT: ConversionError, UNSUPPORTED: UnsupportedOpError,
                 REJECTED: ConversionError}[outcome]
        with pytest.raises(error) as info:
            import_relay(module, params)
        assert re.search(detail, str(info.value)), str(info.value)
        return
    mod = import_relay(module, params)
    main_params = [p.name for p in mod["main"].params]
    assert main_params == [n for n in names if n in input_names]
    run_plain = outcome == RUN or bool(os.environ.get("BMLIB_CORPUS_RUN_ALL"))
    ex = tvm.compile(mod, target="llvm") if run_plain or outcome == BUILD else None
    inputs = {p.name: _recipe(p, "input") for p in func.params if p.name in input_names}
    if run_plain:
        vm = relax.VirtualMachine(ex, tvm.cpu())
        out = vm["main"](*[_to_vm(inputs[n]) for n in main_params])
        model = _offloaded(name, module, params, input_names)
        _check_bmlib_matches_plain(name, vm, model, inputs, main_params)
    elif outcome == BMLIB_RUN:
        model = _offloaded(name, module, params, input_names)
        out = model._vm["main"](*[_to_vm(inputs[n]) for n in main_params])
    else:
        _offloaded(name, module, params, input_names)
        return
    outs = _flatten(out)
    for arr in outs:
        assert np.isfinite(arr).all()
    if func.ret_type is not None:
        types = _flat_types(func.ret_type)
        assert [a.shape for a in outs] == [_concrete(t.shape) for t in types]
        assert [str(a.dtype) for a in outs] == [t.dtype for t in types]


def _scaled(value, factor: float):
    if isinstance(value, tuple):
        return tuple(_scaled(v, factor) for v in value)
    return (value * factor).astype(value.dtype) if value.dtype.kind == "f" else value


# Models whose outputs do not depend on their inputs, and why.
INPUT_INSENSITIVE = {
    # softmax over an axis of length 1: every output is 1 or tanh(1)
    "027_fuzz_metadata_tracne.relay",
}


def _check_bmlib_matches_plain(name: str, vm, model, inputs: dict, main_params: list) -> None:
    """The bmlib build computes what the plain Relax build computes, on inputs the
    outputs depend on: the recipe inputs and the same scaled by 3 (a float output that
    does not change with them would let a broken layer pass unseen)."""
    runs = []
    for factor in (1.0, 3.0):
        feed = {n: _scaled(inputs[n], factor) for n in main_params}
        plain = _flatten(vm["main"](*[_to_vm(feed[n]) for n in main_params]))
        ours = _flatten(model(**feed))
        assert len(ours) == len(plain)
        for got, want in zip(ours, plain):
            scale = float(np.abs(want).max()) if want.size and want.dtype.kind == "f" else 0.0
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(scale, 1.0))
        runs.append(plain)
    floats = [(a, b) for a, b in zip(*runs) if a.dtype.kind == "f" and a.size]
    assert name in INPUT_INSENSITIVE or not floats or any(
        np.abs(a - b).max() > 1e-3 * max(float(np.abs(a).max()), 1e-6) for a, b in floats), \
        "no float output depends on the inputs: the comparison would prove nothing"


# Models whose FLOPs cannot all go to bmlib, with the reason the report must give.
OFFLOAD_EXCEPTIONS = {
    # float64: bmlib's templates take float32/float16
    "issues/002_apache_tvm_issue_13031_broadcast_argmax.relay": "dtype float64",
}


def _offloaded(name: str, module, params, input_names):
    """The bmlib build of a corpus model (dynamic input dims pinned to 1): every FLOP on
    bmlib, or the stated reason in the report's host_ops."""
    func = module["main"]
    pinned = {p.name: _concrete(p.type_annotation.shape) for p in func.params
              if p.name in input_names and not isinstance(p.type_annotation, ast.TupleType)
              and any(not isinstance(d, int) for d in p.type_annotation.shape)}
    model = bmlib_relax.compile(module, params,
                                input_shapes=pinned or None)
    report = model.report.to_dict()
    if name in OFFLOAD_EXCEPTIONS:
        assert any(OFFLOAD_EXCEPTIONS[name] in h["detail"] for h in report["host_ops"]), \
            report["host_ops"]
    else:
        assert report["flops_offloaded"] == report["flops_total"] > 0, report["host_ops"]
        # ops without FLOPs (casts, movement) too: nothing may stay behind but the views
        # kept on the host on purpose (a reshape alone in a partition would be a copy)
        assert all(h["reason"] == "view_on_host" for h in report["host_ops"]), \
            report["host_ops"]
    return model
