#!/usr/bin/env python3
"""Record a golden bundle of a Relay model on the OLD stack (TVM 0.8 - 0.19, with Relay).

Copy this one file to the machine where your Relay pipeline still runs.  It needs
only that TVM and numpy (no bmlib-relax), and Python 3.7 or newer.  It builds the
model with ``relay.build`` (your opt level, optionally your own BYOC partitioning
first), runs it with the graph executor and writes a *golden bundle*:

    OUT/model.relay    mod.astext(show_meta_data=True) - the Relay text, graph
                       constants in its ``#[metadata]`` section; the weights stay
                       parameters of @main
    OUT/model.params   the weights, relay.save_param_dict bytes
    OUT/inputs.npz     the inputs used, by @main parameter name
    OUT/outputs.npz    the Relay outputs, out0, out1, ... in order
    OUT/manifest.json  format, TVM version, target, opt level, BYOC hook, tolerance,
                       input/param/output signatures, SHA-256 of every file above

On the new machine, ``bmlib-relax verify OUT`` (or ``pytest --bmlib-golden DIR``)
compiles the bundle with bmlib-relax and compares with ``outputs.npz``.

Usage::

    python record_relay_golden.py model.relay --params model.params --seed 0 -o bundle/
    python record_relay_golden.py model.relay --params w.npz --inputs in.npz -o bundle/
    python record_relay_golden.py my_model.py -o bundle/      # my_model.py defines mod, params
    python record_relay_golden.py model.relay --params w.params --seed 0 \\
        --byoc my_backend.py:partition_for_mybackend --opt-level 3 -o bundle/

``MODEL`` is Relay text (what ``mod.astext()`` printed) or a Python file whose
top level defines ``mod`` (an IRModule) and ``params`` (a dict of arrays).  Inputs
are every parameter of @main that is not a weight: read from ``--inputs x.npz``
or generated from ``--seed`` (numpy ``RandomState``: floats uniform in [-1, 1),
integers in [0, 10), bool 0/1).  ``--byoc FILE.py:FUNC`` calls ``FUNC(mod, params)``
before the build (your ``partition_for_*``); it returns the module to build (or a
``(mod, params)`` pair).  ``model.relay`` is always the module *before* that hook:
it is what bmlib-relax imports.

Relay APIs used - all present, with these signatures, from TVM 0.8 through 0.19:

* ``tvm.relay.fromtext(text)`` (falls back to ``tvm.parser.fromtext``)
* ``tvm.relay.transform.InferType()``, ``mod["main"].params``,
  ``Var.name_hint``, ``Var.checked_type`` (``.shape``, ``.dtype``)
* ``IRModule.astext(show_meta_data=True)``
* ``tvm.relay.load_param_dict(bytes)``, ``tvm.relay.save_param_dict(dict)``
* ``tvm.transform.PassContext(opt_level=N)``
* ``tvm.relay.build(mod, target=TARGET, params=PARAMS)``
* ``tvm.contrib.graph_executor.GraphModule(lib["default"](dev))`` with
  ``set_input``, ``run``, ``get_num_outputs``, ``get_output``
* ``tvm.nd.array``, ``tvm.cpu(0)``, ``NDArray.numpy()`` (``asnumpy()`` before 0.8)
* ``tvm.__version__``

Exit codes: 0 written, 2 bad input (missing file, no ``mod`` in the Python file,
an input missing from ``--inputs``, a dynamic input shape without ``--inputs``).
"""
from __future__ import print_function

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import sys

import numpy as np

BUNDLE_FORMAT = "bmlib-golden-bundle"
BUNDLE_VERSION = 1
BUNDLE_FILES = ("model.relay", "model.params", "inputs.npz", "outputs.npz")


class RecordError(Exception):
    """Bad input to the recorder (reported as one line, exit code 2)."""


# ----------------------------------------------------------------------------- helpers
def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def to_numpy(value):
    """An NDArray (any TVM 0.x) or array-like as a numpy array."""
    if hasattr(value, "numpy"):
        return value.numpy()
    if hasattr(value, "asnumpy"):
        return value.asnumpy()
    return np.asarray(value)


def load_python_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_relay_text(relay, text):
    fromtext = getattr(relay, "fromtext", None)
    if fromtext is None:  # very old layouts kept the parser in tvm.parser
        import tvm.parser  # noqa: F401

        fromtext = sys.modules["tvm.parser"].fromtext
    return fromtext(text)


def load_model(path, params_path, relay):
    """(mod, params) from Relay text (+ weights file) or a Python file."""
    if not os.path.isfile(path):
        raise RecordError("model file not found: %s" % path)
    params = {}
    if path.endswith(".py"):
        module = load_python_file(path, "user_model")
        if not hasattr(module, "mod"):
            raise RecordError("%s defines no 'mod' (and 'params')" % path)
        mod = module.mod
        if not hasattr(mod, "functions"):  # a relay.Function: wrap it as @main
            import tvm

            mod = tvm.IRModule.from_expr(mod)
        params = dict(getattr(module, "params", None) or {})
    else:
        with open(path) as handle:
            mod = parse_relay_text(relay, handle.read())
    if params_path:
        params.update(load_params(params_path, relay))
    return mod, {k: to_numpy(v) for k, v in params.items()}


def load_params(path, relay):
    if not os.path.isfile(path):
        raise RecordError("params file not found: %s" % path)
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    with open(path, "rb") as handle:
        return dict(relay.load_param_dict(bytearray(handle.read())))


def tensor_signature(var):
    """(name, shape or None when dynamic, dtype) of a typed @main parameter."""
    ty = var.checked_type
    shape = []
    for dim in ty.shape:
        try:
            shape.append(int(dim))
        except (TypeError, ValueError):
            shape.append(None)  # relay.Any
    return var.name_hint, shape, str(ty.dtype)


def seeded_input(rng, shape, dtype):
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.randint(0, 2, size=shape).astype(dtype)
    if kind in "iu":
        return rng.randint(0, 10, size=shape).astype(dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def make_inputs(signatures, inputs_path, seed):
    """Inputs by name: from the .npz (checked against @main) or generated from ``seed``."""
    given = {}
    if inputs_path:
        if not os.path.isfile(inputs_path):
            raise RecordError("inputs file not found: %s" % inputs_path)
        with np.load(inputs_path, allow_pickle=False) as npz:
            given = {k: npz[k] for k in npz.files}
    rng = np.random.RandomState(seed)
    inputs = {}
    for name, shape, dtype in signatures:
        if name in given:
            inputs[name] = np.ascontiguousarray(given[name]).astype(dtype, copy=False)
            continue
        if inputs_path and seed is None:
            raise RecordError("input %r is not in %s (it has: %s)"
                              % (name, inputs_path, ", ".join(sorted(given)) or "nothing"))
        if any(d is None for d in shape):
            raise RecordError("input %r has a dynamic shape %s: give its values with --inputs"
                              % (name, shape))
        inputs[name] = seeded_input(rng, shape, dtype)
    unknown = sorted(set(given) - set(inputs))
    if unknown:
        raise RecordError("%s has arrays that are no input of @main: %s"
                          % (inputs_path, ", ".join(unknown)))
    return inputs


def apply_byoc(spec, mod, params):
    """Run the user's partitioning hook ``FILE.py:FUNC`` (or ``module:FUNC``)."""
    location, _, func_name = spec.rpartition(":")
    if not location or not func_name:
        raise RecordError("--byoc expects FILE.py:FUNCTION, got %r" % spec)
    if location.endswith(".py"):
        if not os.path.isfile(location):
            raise RecordError("--byoc file not found: %s" % location)
        module = load_python_file(location, "user_byoc")
    else:
        module = importlib.import_module(location)
    func = getattr(module, func_name, None)
    if func is None:
        raise RecordError("--byoc: %s has no function %r" % (location, func_name))
    result = func(mod, params)
    if isinstance(result, tuple):
        return result[0], result[1]
    return result, params


# ----------------------------------------------------------------------------- record
def record(model_path, outdir, params_path=None, inputs_path=None, seed=None,
           target="llvm", opt_level=3, byoc=None, rtol=1e-4, atol=1e-4):
    """Build, run and write the bundle; returns the manifest (a dict)."""
    import tvm
    from tvm import relay
    from tvm.contrib import graph_executor

    mod, params = load_model(model_path, params_path, relay)
    mod = relay.transform.InferType()(mod)
    weights = [tensor_signature(v) for v in mod["main"].params if v.name_hint in params]
    signatures = [tensor_signature(v) for v in mod["main"].params
                  if v.name_hint not in params]
    if inputs_path is None and seed is None:
        seed = 0
    inputs = make_inputs(signatures, inputs_path, seed)
    relay_text = mod.astext(show_meta_data=True)  # before any user pass: bmlib imports this

    build_mod, build_params = mod, params
    if byoc:
        build_mod, build_params = apply_byoc(byoc, mod, dict(params))
    with tvm.transform.PassContext(opt_level=opt_level):
        lib = relay.build(build_mod, target=target, params=build_params)
    dev = tvm.cpu(0)
    runner = graph_executor.GraphModule(lib["default"](dev))
    for name, value in inputs.items():
        runner.set_input(name, tvm.nd.array(value))
    runner.run()
    outputs = [to_numpy(runner.get_output(i)) for i in range(runner.get_num_outputs())]

    if not os.path.isdir(outdir):
        os.makedirs(outdir)
    with open(os.path.join(outdir, "model.relay"), "w") as handle:
        handle.write(relay_text)
    blob = relay.save_param_dict({k: tvm.nd.array(v) for k, v in params.items()})
    with open(os.path.join(outdir, "model.params"), "wb") as handle:
        handle.write(bytes(blob))
    np.savez(os.path.join(outdir, "inputs.npz"), **inputs)
    np.savez(os.path.join(outdir, "outputs.npz"),
             **dict(("out%d" % i, o) for i, o in enumerate(outputs)))

    manifest = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_VERSION,
        "name": os.path.basename(os.path.normpath(outdir)),
        "recorded_with": {
            "tvm_version": str(tvm.__version__),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "script": os.path.basename(__file__),
        },
        "target": str(target),
        "opt_level": int(opt_level),
        "byoc": byoc,
        "seed": seed,
        "tolerance": {"rtol": float(rtol), "atol": float(atol)},
        "inputs": [{"name": n, "shape": list(inputs[n].shape), "dtype": str(inputs[n].dtype)}
                   for n, _, _ in signatures],
        "params": [{"name": n, "shape": s, "dtype": d} for n, s, d in weights],
        "outputs": [{"name": "out%d" % i, "shape": list(o.shape), "dtype": str(o.dtype)}
                    for i, o in enumerate(outputs)],
        "files": dict((f, sha256_of(os.path.join(outdir, f))) for f in BUNDLE_FILES),
    }
    with open(os.path.join(outdir, "manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    return manifest


def build_parser():
    parser = argparse.ArgumentParser(
        description="Record a golden bundle of a Relay model (run on TVM 0.8-0.19).")
    parser.add_argument("model", help="Relay text file, or a .py file defining mod, params")
    parser.add_argument("-o", "--output", required=True, help="bundle folder to write")
    parser.add_argument("--params", help="weights: .params (save_param_dict) or .npz")
    parser.add_argument("--inputs", help=".npz of input arrays by name")
    parser.add_argument("--seed", type=int, default=None,
                        help="generate the inputs not in --inputs from this seed "
                             "(default 0 without --inputs)")
    parser.add_argument("--target", default="llvm", help="relay.build target (default llvm)")
    parser.add_argument("--opt-level", type=int, default=3, help="PassContext opt level")
    parser.add_argument("--byoc", metavar="FILE.py:FUNC",
                        help="your partitioning hook, called as FUNC(mod, params)")
    parser.add_argument("--rtol", type=float, default=1e-4, help="tolerance to verify with")
    parser.add_argument("--atol", type=float, default=1e-4, help="tolerance to verify with")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        manifest = record(args.model, args.output, params_path=args.params,
                          inputs_path=args.inputs, seed=args.seed, target=args.target,
                          opt_level=args.opt_level, byoc=args.byoc, rtol=args.rtol,
                          atol=args.atol)
    except RecordError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    print("recorded %s: %d input(s), %d output(s), TVM %s, target %s -> %s"
          % (manifest["name"], len(manifest["inputs"]), len(manifest["outputs"]),
             manifest["recorded_with"]["tvm_version"], manifest["target"], args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
