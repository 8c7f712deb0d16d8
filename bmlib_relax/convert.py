"""Converting a legacy Relay bmlib pipeline into a shippable Relax artifact.

One call does what ``bmlib-relax convert`` does: parse the Relay model, load its
weights, load the legacy pattern table and TE lowerings (Relay imports
redirected), import, partition, lower and verify every partition, build, write
the artifacts, and optionally check equivalence against the plain Relax build.

Files written to the output folder:

``model_relax.py``  the partitioned Relax module as TVMScript (weights lifted,
                    values in ``weights.npz``)
``model.so``        the ``export_library`` artifact; ``model.json`` its signature
``report.json``     partitions, composites, arity, ops/FLOPs, unmatched patterns,
                    warnings and the check result (``schemas/report.schema.json``)
``report.md``       the same for people
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from . import __version__
from .artifacts import write_json, write_tvmscript
from .backend.partition import partition_for_bmlib, resolve_patterns
from .backend.target import resolve_target
from .check import compare, first_divergence
from .compiler import CompiledModel, build_offloaded, build_verified, lower_and_verify
from .errors import ParamError
from .importer import import_relay
from .legacy import load_lowerings, load_pattern_table, partition_with_legacy_fn
from .progress import QUIET, Progress
from .recipe import recipe_tensor
from .relay import load_params, parse
from .relay.rewrite import with_input_types
from .report import build_report
from .runtime import write_signature

# report.json is documented and validated by this JSON schema (shipped with the package).
REPORT_SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "schemas", "report.schema.json")


@dataclass
class InputSpec:
    """A model input given on the command line: a shape/dtype or an array."""

    name: str
    shape: Optional[tuple[int, ...]] = None
    dtype: Optional[str] = None
    data: Optional[np.ndarray] = None


def parse_input_spec(text: str) -> InputSpec:
    """``name=1,3,224,224:float32`` (recipe values) or ``name=file.npy`` (given values)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ParamError(f"bad --inputs spec {text!r}: expected name=shape:dtype or "
                         "name=file.npy")
    if rest.endswith(".npy"):
        if not os.path.exists(rest):
            raise ParamError(f"input {name!r}: file not found: {rest}", name)
        data = np.load(rest, allow_pickle=False)
        return InputSpec(name, tuple(data.shape), str(data.dtype), data)
    shape_text, _, dtype = rest.partition(":")
    try:
        shape = tuple(int(d) for d in shape_text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise ParamError(f"bad --inputs spec {text!r}: shape {shape_text!r} is not a "
                         "comma-separated list of integers", name) from None
    if dtype:
        try:
            np.dtype(dtype)
        except TypeError:
            raise ParamError(f"bad --inputs spec {text!r}: unknown dtype {dtype!r}", name) from None
    return InputSpec(name, shape, dtype or None)


@dataclass
class ConversionResult:
    outdir: str
    model: CompiledModel
    report: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)

    @property
    def check_passed(self) -> Optional[bool]:
        check = self.report.get("check")
        return None if check is None else bool(check["ok"])


def convert(model_path: str, outdir: str, *, params: Any = None,
            patterns_path: Optional[str] = None, lowerings_path: Optional[str] = None,
            inputs: Sequence[InputSpec] = (), merge: bool = False, check: bool = False,
            target: Any = None, rtol: float = 1e-4, atol: float = 1e-4,
            progress: Progress = QUIET, partition_fn: Optional[str] = None) -> ConversionResult:
    """Convert a Relay model file into Relax artifacts in ``outdir`` (see module doc)."""
    if not os.path.exists(model_path):
        raise ParamError(f"model file not found: {model_path}")
    specs = {s.name: s for s in inputs}
    with progress.step(f"parse {os.path.basename(model_path)}"):
        with open(model_path, encoding="utf-8") as handle:
            module = parse(handle.read(), source_name=model_path)
        module = with_input_types(module, {n: (s.shape, s.dtype) for n, s in specs.items()
                                           if s.shape is not None})
        weights = load_params(params)
    patterns = None
    reference = None  # with --partition-fn: the model as given, for --check
    if partition_fn:
        if not patterns_path:
            raise ParamError(f"--partition-fn {partition_fn} needs --patterns FILE.py "
                             "(the module that defines it)")
        with progress.step(f"run {partition_fn} from {os.path.basename(patterns_path)}"):
            original, original_weights = module, weights
            module, patterns, merge_regions, weights = partition_with_legacy_fn(
                patterns_path, partition_fn, module, weights)
            merge = merge or merge_regions
        if check:
            reference = import_relay(original, original_weights)
    elif patterns_path:
        with progress.step(f"load pattern table {os.path.basename(patterns_path)}"):
            patterns = load_pattern_table(patterns_path)
    if lowerings_path:
        with progress.step(f"load lowerings {os.path.basename(lowerings_path)}"):
            load_lowerings(lowerings_path)
    with progress.step("import to Relax"):
        imported = import_relay(module, weights)
    target = resolve_target(target)
    with progress.step("partition for bmlib"):
        left_out: list = []
        resolved = resolve_patterns(patterns, left_out)
        partitioned = partition_for_bmlib(imported, patterns=patterns, merge=merge,
                                          target=target)
    with progress.step("codegen"):
        lowered = lower_and_verify(partitioned, on_partition=progress.item, target=target)
    with progress.step("build"):
        executable, records = build_verified(partitioned, lowered, target)
    report = build_report(partitioned, records)
    model = CompiledModel(executable, partitioned, report)

    os.makedirs(outdir, exist_ok=True)
    files = {}
    with progress.step(f"write artifacts to {outdir}"):
        files["model_relax.py"] = os.path.join(outdir, "model_relax.py")
        write_tvmscript(files["model_relax.py"], partitioned, weights)
        files["model.so"] = os.path.join(outdir, "model.so")
        model.export_library(files["model.so"])
        files["model.json"] = write_signature(outdir, model.input_specs)

    pattern_names = [_pattern_name(p) for p in resolved]
    used = {c for p in report.partitions for c in p.composites}
    warnings = []
    if left_out:
        warnings.append(f"{len(left_out)} pattern(s) of the table left out (their ops have no "
                        f"Relax form or no bmlib template; they stay on the host): "
                        f"{', '.join(name for name, _ in left_out)}")
    if not report.partitions:
        warnings.append("nothing was offloaded to bmlib: no pattern matched")
    data = {
        "bmlib_relax_version": __version__,
        "model": os.path.abspath(model_path),
        "inputs": model.input_specs,
        "outputs": [],
        "merge": merge,
        **report.to_dict(),
        "patterns": pattern_names,
        "unmatched_patterns": [n for n in pattern_names if n not in used],
        "warnings": warnings,
        "check": None,
    }
    feed = _check_inputs(model.input_specs, specs)
    outputs = model(**feed)
    # Output signature plus a checksum on the check inputs, so a shipped artifact can be
    # verified to reproduce them (``bmlib-relax run`` prints the same sums).
    data["outputs"] = [{"shape": list(o.shape), "dtype": str(o.dtype),
                        "sum": float(np.asarray(o, np.float64).sum())}
                       for o in (outputs if isinstance(outputs, tuple) else [outputs])]
    if check:
        with progress.step("check against the plain Relax build"):
            data["check"] = _check(imported if reference is None else reference, partitioned, model, feed, outputs,
                                   target, rtol, atol)
    files["report.json"] = os.path.join(outdir, "report.json")
    write_json(files["report.json"], data)
    files["report.md"] = os.path.join(outdir, "report.md")
    with open(files["report.md"], "w") as handle:
        handle.write(render_markdown(data, str(report)))
    return ConversionResult(outdir, model, data, files)


def _pattern_name(entry: Any) -> str:
    return str(entry[0]) if isinstance(entry, tuple) else str(entry.name)


def _check_inputs(specs: Sequence[dict], given: Mapping[str, InputSpec]) -> dict[str, np.ndarray]:
    """Supplied arrays where given, recipe-v1 inputs (by name) elsewhere."""
    feed = {}
    for spec in specs:
        supplied = given.get(spec["name"])
        if supplied is not None and supplied.data is not None:
            feed[spec["name"]] = supplied.data
            continue
        if not all(isinstance(d, int) for d in spec["shape"]):
            raise ParamError(f"input {spec['name']!r} has dynamic shape {spec['shape']}; "
                             "give one with --inputs name=shape:dtype", spec["name"])
        feed[spec["name"]] = recipe_tensor(spec["name"], spec["shape"], spec["dtype"], "input")
    return feed


def _check(imported, partitioned, model, feed, outputs, target, rtol, atol) -> dict[str, Any]:
    from .compiler import compile_plain
    from .runtime import ModelRunner

    plain = ModelRunner(compile_plain(imported, target), model.input_names)
    want = plain(**feed)
    diffs = compare(outputs, want, rtol, atol)
    result: dict[str, Any] = {
        "ok": all(d.ok for d in diffs), "rtol": rtol, "atol": atol,
        "inputs": "supplied or recipe v1",
        "outputs": [d.to_dict() for d in diffs], "first_divergence": None,
    }
    if not result["ok"]:
        arrays = [feed[n] for n in model.input_names]
        result["first_divergence"] = first_divergence(partitioned, arrays, build_offloaded,
                                                      target, rtol, atol)
    return result


def render_markdown(data: Mapping[str, Any], table: str) -> str:
    lines = ["# bmlib-relax conversion report", "",
             f"- model: `{data['model']}`",
             f"- bmlib-relax {data['bmlib_relax_version']}, merge={data['merge']}",
             "- inputs: " + ", ".join(f"`{i['name']}` {tuple(i['shape'])} {i['dtype']}"
                                       for i in data["inputs"]), ""]
    lines += ["## Partitions", "", "| partition | composites | ops | params | PrimFunc args |",
              "|---|---|---|---|---|"]
    for p in data["partitions"]:
        lines.append(f"| `{p['name']}` | {', '.join(p['composites'])} | "
                     f"{', '.join(o.replace('relax.', '') for o in p['ops'])} | "
                     f"{p['num_params']} | {p['num_args']} |")
    lines += ["", "## Ops", "", f"- on bmlib: {_counts(data['ops_offloaded'])}",
              f"- on host: {_counts(data['ops_host'])}"]
    for key in ("flops_total", "flops_offloaded"):
        if key in data:
            lines.append(f"- {key.replace('_', ' ')}: {data[key]:,}")
    lines += ["", "## Patterns", "", f"- table: {', '.join(data['patterns'])}",
              f"- unmatched: {', '.join(data['unmatched_patterns']) or 'none'}"]
    if data["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in data["warnings"]]
    check = data.get("check")
    if check is not None:
        lines += ["", "## Equivalence check", "",
                  f"Against the plain Relax build (rtol {check['rtol']}, atol {check['atol']}): "
                  f"**{'PASS' if check['ok'] else 'FAIL'}**", "",
                  "| output | max abs | max rel | ok |", "|---|---|---|---|"]
        for o in check["outputs"]:
            lines.append(f"| {o['name']} | {o['max_abs']:.3g} | {o['max_rel']:.3g} | {o['ok']} |")
        div = check.get("first_divergence")
        if div:
            lines += ["", f"First diverging intermediate: `{div['binding']}` from "
                          f"{div['producer']} (max abs {div['max_abs']:.3g})"]
    lines += ["", "## Report", "", "```", table, "```", ""]
    return "\n".join(lines)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k.replace('relax.', '')} x{v}" for k, v in sorted(counts.items())) or "none"
