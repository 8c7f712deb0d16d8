"""Converting a legacy Relay bmlib pipeline into a shippable Relax artifact.

One call does what ``bmlib-relax convert`` does: parse the Relay model, load its
weights, load the legacy pattern table and TE lowerings (Relay imports
redirected), import, partition, lower and verify every partition, build, write
the artifacts, and optionally check equivalence against the plain Relax build.

Files written to the output folder:

``model_relax.py``  the partitioned Relax module as TVMScript (weights lifted,
                    values in ``weights.npz``)
``model.so``        the ``export_library`` artifact; ``model.json`` its metadata
                    (signature, SHA-256 of the library and of every other file)
``report.json``     partitions, composites, arity, ops/FLOPs, inputs (declared or
                    generated), unmatched patterns, warnings and the check result
                    (``schemas/report.schema.json``)
``report.md``       the same for people
``report.html``     the graph as an inline SVG, coloured by partition / host

The folder is never half written: everything goes to a temporary folder beside
it, renamed into place at the end (see :class:`_Staging`).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from . import __version__, interrupts
from .artifacts import write_json, write_tvmscript
from .backend.partition import partition_for_bmlib, resolve_patterns
from .backend.patterns import entry_name
from .backend.target import resolve_target
from .check import compare, first_divergence
from .compiler import (CompiledModel, build_offloaded, build_verified, lower_and_verify,
                       unbound_inputs)
from .errors import ParamError
from .importer import import_relay
from .legacy import load_lowerings, load_pattern_table, partition_with_legacy_fn
from .legacy.lowerings import scoped_lowerings
from .legacy.loader import LegacyModuleError
from .preflight import (InputSpec, check_output_dir, input_file, parse_input_spec,  # noqa: F401
                        read_model_text, refuse_to_replace, require_main, source_file,
                        unique_specs)
from .progress import QUIET, Progress
from .recipe import recipe_tensor
from .relay import load_params, parse
from .relay.rewrite import with_input_types
from .report import build_report
from .report_html import write_report_html
from .runtime import exact_cast, named_outputs

# report.json is documented and validated by this JSON schema (shipped with the package).
REPORT_SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "schemas", "report.schema.json")

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


def read_model(model_path: str):
    """Parse a Relay text file (see ``preflight.read_model_text``) and require ``@main``."""
    path = os.fspath(model_path)
    return require_main(parse(read_model_text(path), source_name=path))


def _load_user_module(loader: Callable[[str], Any], path: str, kind: str) -> Any:
    """Run a user's pattern/lowering module; ``sys.exit()`` in it is a bad-input error.

    Otherwise ``SystemExit(0)`` from the user's file would end ``convert`` with
    exit code 0 and nothing written.
    """
    path = source_file(path, f"{kind} file")
    try:
        return loader(path)
    except SystemExit as exc:
        raise LegacyModuleError(f"{path}: {kind} called sys.exit({exc.code!r}) while "
                                "loading") from None


# --------------------------------------------------------------------------- output folder
class _Staging:
    """A temporary folder beside the output folder; ``publish`` renames it into place.

    Every file is written here, so a failed or interrupted conversion leaves the
    previous complete output (or nothing); with ``force`` a non-empty output is
    swapped for the new one atomically (``renameat2(RENAME_EXCHANGE)``, or two
    renames where the kernel lacks it).
    """

    def __init__(self, outdir: str):
        self.outdir = os.path.abspath(outdir)
        parent = os.path.dirname(self.outdir)
        self.created: list[str] = []
        missing = parent
        while not os.path.exists(missing):
            self.created.insert(0, missing)
            missing = os.path.dirname(missing)
        try:
            for folder in self.created:
                os.mkdir(folder)
            remove_stale_staging(self.outdir)
            self.path = tempfile.mkdtemp(prefix=_own_staging_prefix(self.outdir), dir=parent)
            mask = os.umask(0o022)
            os.umask(mask)
            os.chmod(self.path, 0o777 & ~mask)  # mkdtemp's 0700 is for temp dirs, not outputs
        except BaseException as exc:  # a signal may land between mkdtemp and its return
            self.discard()
            if isinstance(exc, OSError):
                raise ParamError(f"output folder {outdir} cannot be created: "
                                 f"{exc.strerror or exc}") from None
            raise

    def _remove_created(self) -> None:
        for folder in reversed(self.created):
            try:
                os.rmdir(folder)
            except OSError:
                break

    def discard(self) -> None:
        """Remove the staging folder (found by name: ``self.path`` may not be set yet
        when a signal interrupted ``__init__``) and the parents it created."""
        remove_own_staging(self.outdir)
        self._remove_created()

    def publish(self, force: bool, destination: Optional[str] = None) -> None:
        """Rename the staged folder to the output folder (or ``destination``)."""
        interrupts.raise_if_requested()  # stopped, even if a step swallowed the Ctrl-C
        leftover = self._move_into_place(force, destination or self.outdir)
        interrupts.note_published()
        if leftover is not None:
            shutil.rmtree(leftover, ignore_errors=True)

    def _move_into_place(self, force: bool, out: str) -> Optional[str]:
        """Rename the staged folder to ``out``; the folder now holding the previous
        output (to remove) when one was replaced."""
        if not os.path.exists(out):
            os.rename(self.path, out)
            return None
        if not os.path.isdir(out):
            raise ParamError(f"output {out} exists and is not a folder")
        if not os.listdir(out):
            os.replace(self.path, out)  # POSIX rename replaces an empty folder
            return None
        if not force:
            raise ParamError(f"output folder {out} is not empty; use --force to replace "
                             "its contents")
        refuse_to_replace(out)
        if _exchange(self.path, out):
            return self.path  # now holds the previous output
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old-",
                               dir=os.path.dirname(out))
        os.rename(out, os.path.join(old, "previous"))
        try:
            os.rename(self.path, out)
        except BaseException:
            os.rename(os.path.join(old, "previous"), out)
            raise
        return old


def _staging_prefix(outdir: str) -> str:
    """Name prefix of the staging folders of ``outdir`` (beside it, hidden); the
    creating process's id follows, so a later run can tell a dead run's folder."""
    return f".{os.path.basename(os.path.abspath(outdir))}.tmp-"


def _own_staging_prefix(outdir: str) -> str:
    return f"{_staging_prefix(outdir)}{os.getpid()}-"


def remove_own_staging(outdir: str) -> None:
    """Remove this process's staging folders of ``outdir``."""
    parent = os.path.dirname(os.path.abspath(outdir))
    prefix = _own_staging_prefix(outdir)
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


def remove_stale_staging(outdir: str) -> list[str]:
    """Remove the staging folders of ``outdir`` left by runs that were killed
    (SIGKILL, a power cut: no handler ran) -- only those whose process is gone, so
    a conversion still running into the same folder keeps its own.  Returns them."""
    parent = os.path.dirname(os.path.abspath(outdir))
    prefix = _staging_prefix(outdir)
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        pid = _staging_pid(entry.name, prefix)
        if pid is not None and entry.is_dir(follow_symlinks=False) and not _alive(pid):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _staging_pid(name: str, prefix: str) -> Optional[int]:
    """The process id in a staging folder's name (``.out.tmp-<pid>-<random>``), if any."""
    if not name.startswith(prefix):
        return None
    pid, sep, _ = name[len(prefix):].partition("-")
    return int(pid) if sep and pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def check_failed_folder(outdir: str) -> str:
    """Where a conversion whose ``--check`` failed is published instead of ``outdir``:
    the previous output stays as it was (a failed model is never shipped in its
    place), and the report of the failure can still be read."""
    return os.path.abspath(outdir).rstrip(os.sep) + ".check-failed"


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


# --------------------------------------------------------------------------- convert
@scoped_lowerings  # --lowerings apply to this conversion only
def convert(model_path: str, outdir: str, *, params: Any = None,
            patterns_path: Optional[str] = None, lowerings_path: Optional[str] = None,
            inputs: Sequence[InputSpec] = (), merge: bool = False, check: bool = False,
            target: Any = None, rtol: float = 1e-4, atol: float = 1e-4,
            progress: Progress = QUIET, force: bool = False,
            partition_fn: Optional[str] = None) -> ConversionResult:
    """Convert a Relay model file into Relax artifacts in ``outdir`` (see module doc).

    ``outdir`` must be absent or empty unless ``force``; it is replaced as a
    whole at the end, so it never holds a mix of two runs.  Named ``inputs``
    declare the model's inputs: every other parameter of ``@main`` must then be
    a weight in ``params``, else a ``ParamError`` lists the missing ones.
    ``partition_fn`` names a legacy ``partition_for_<x>(mod, params)`` of the
    ``patterns_path`` module to run instead of its table alone.
    """
    model_path, outdir = os.fspath(model_path), os.fspath(outdir)
    check_output_dir(outdir, force)
    specs = unique_specs(inputs)
    with progress.step(f"parse {os.path.basename(model_path)}"):
        module = read_model(model_path)
        specs = _in_declared_dtypes(module, specs)
        module = with_input_types(module, {n: (s.shape, s.dtype) for n, s in specs.items()
                                           if s.shape is not None})
        if isinstance(params, (str, os.PathLike)):
            params = input_file(params, "params file")
        weights = load_params(params)
        unbound_inputs(module, weights, list(specs))
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
            reference = import_relay(original, original_weights, flatten_tuple_inputs=True)
    elif patterns_path:
        with progress.step(f"load pattern table {os.path.basename(patterns_path)}"):
            patterns = _load_user_module(load_pattern_table, patterns_path, "pattern table")
    if lowerings_path:
        with progress.step(f"load lowerings {os.path.basename(lowerings_path)}"):
            _load_user_module(load_lowerings, lowerings_path, "lowerings module")
    left_out: list = []  # entries of a foreign table whose ops bmlib cannot take
    # a bad table entry is bad input: found before any build
    resolved = resolve_patterns(patterns, left_out)
    staging = None
    try:
        staging = _Staging(outdir)
        result = _convert_into(staging.path, module, weights, patterns, resolved, specs,
                               model_path,
                               merge=merge, check=check, target=target, rtol=rtol, atol=atol,
                               progress=progress, left_out=left_out, reference=reference)
        if result.check_passed is False:
            outdir = check_failed_folder(outdir)
            force = True  # an earlier failed check's folder (refused if not a conversion)
        with progress.step(f"publish {outdir}"):
            staging.publish(force, outdir)
    except BaseException:
        if staging is not None:
            staging.discard()
        else:  # interrupted before _Staging() returned (it cleans up after itself)
            remove_own_staging(outdir)
        raise
    result.outdir = outdir
    result.files = {k: os.path.join(outdir, os.path.basename(v)) for k, v in result.files.items()}
    return result


def _in_declared_dtypes(module, specs: Mapping[str, InputSpec]) -> dict[str, InputSpec]:
    """``specs`` with every ``--inputs NAME=FILE.npy`` array in the dtype ``@main``
    declares for that input, cast as ``run`` casts (only when no value changes);
    else a ``ParamError`` naming ``--inputs``.

    An array's dtype must not become the input's: a float64 file on a float32 input
    would build a float64 model that offloads nothing.  (Its shape is checked when
    the inputs are pinned: it may fill free ``?`` dims, never change a static one.)
    """
    declared = {var.name: var.type_annotation for var in module["main"].params}
    typed = {}
    for name, spec in specs.items():
        want = _numpy_dtype(getattr(declared.get(name), "dtype", None))
        if spec.data is None or want is None or spec.data.dtype == want:
            typed[name] = spec
            continue
        data = exact_cast(spec.data, str(want), name)  # the cast ``run`` applies to inputs
        if data.dtype != want:
            raise ParamError(f"--inputs {name}: the file holds {spec.data.dtype} values, but "
                             f"@main declares {name!r} as {want} and casting would change "
                             f"some of them; save the array as {want}", name)
        typed[name] = InputSpec(name, spec.shape, str(want), data)
    return typed


def _numpy_dtype(name: Optional[str]) -> Optional[np.dtype]:
    """The numpy dtype of a Relay dtype name; None when numpy has none (bfloat16)."""
    try:
        return np.dtype(name) if name else None
    except TypeError:
        return None


def _convert_into(folder: str, module, weights, patterns, resolved,
                  specs: Mapping[str, InputSpec],
                  model_path: str, *, merge: bool, check: bool, target: Any, rtol: float,
                  atol: float, progress: Progress, left_out: Sequence = (),
                  reference: Any = None) -> ConversionResult:
    """Everything after the inputs are validated, written into ``folder``;
    ``reference`` (with ``--partition-fn``): the model as given, for ``--check``."""
    with progress.step("import to Relax"):
        imported = import_relay(module, weights, flatten_tuple_inputs=True)
    target = resolve_target(target)
    with progress.step("partition for bmlib"):
        partitioned = partition_for_bmlib(imported, patterns=patterns, merge=merge,
                                          target=target)
    with progress.step("codegen"):
        lowered = lower_and_verify(partitioned, on_partition=progress.item, target=target)
    with progress.step("build"):
        executable, records = build_verified(partitioned, lowered, target)
    report = build_report(partitioned, records, target, table=resolved)
    model = CompiledModel(executable, partitioned, report)

    files = {name: os.path.join(folder, name) for name in
             ("model_relax.py", "weights.npz", "report.json", "report.md", "model.so",
              "model.json")}
    with progress.step("write TVMScript"):
        write_tvmscript(files["model_relax.py"], partitioned, weights)

    pattern_names = [entry_name(p) for p in resolved]
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
        "outputs": [],
        "merge": merge,
        **report.to_dict(),
        "declared_inputs": list(specs) or None,
        "patterns": pattern_names,
        "unmatched_patterns": [n for n in pattern_names if n not in used],
        "warnings": warnings,
        "check": None,
    }
    feed, generated = _check_inputs(model.input_specs, specs)
    data["generated_inputs"] = generated
    free = [s["name"] for s in model.input_specs if s["name"] in generated and
            not all(isinstance(d, int) for d in s["shape"])]
    if free:
        warnings.append(f"input(s) {_names(free)} have symbolic dims: the library takes any "
                        "size there; the outputs and the check are for size 1 (pin with "
                        "--inputs NAME=SHAPE:DTYPE)")
    outputs = model(*feed)
    # Output signature plus a checksum on the check inputs, so a shipped artifact can be
    # verified to reproduce them (``bmlib-relax run`` prints the same sums).
    # Nested tuples (an LSTM's (y, (h, c))) are flattened: out1.0, out1.1 ...
    named = named_outputs(outputs)
    data["outputs"] = [{"name": n, "shape": list(o.shape), "dtype": str(o.dtype),
                        "sum": _finite_sum(o)} for n, o in named]
    warnings.extend(_non_finite_warnings(named, generated))
    if report.symbolic_dims:  # FLOPs of the run on the check inputs, symbolic dims evaluated
        dims = report.dims_of_inputs(feed)
        data["flops_run"] = {"dims": dims, **report.flops_for(dims)}
    if check:
        with progress.step("check against the plain Relax build"):
            data["check"] = _check(imported if reference is None else reference, partitioned,
                                   model, feed, generated, outputs, target, rtol, atol)
    write_json(files["report.json"], data)
    with open(files["report.md"], "w") as handle:
        handle.write(render_markdown(data, str(report)))
    files["report.html"] = write_report_html(os.path.join(folder, "report.html"),
                                             partitioned, data, table=resolved)
    with progress.step("export library"):
        # Last: model.json records the SHA-256 of the library and of every file above.
        model.export_library(files["model.so"], files=[
            files[k] for k in ("model_relax.py", "weights.npz", "report.json", "report.md",
                               "report.html")])
    return ConversionResult(folder, model, data, files)


def _finite_sum(array: Any) -> Optional[float]:
    """float64 sum, or None when it is NaN/inf (JSON has no NaN; the warnings say why)."""
    total = float(np.asarray(array, np.float64).sum())
    return total if np.isfinite(total) else None


def _non_finite_warnings(named: Sequence[tuple[str, np.ndarray]],
                         generated: Sequence[str]) -> list[str]:
    """A warning per output (``named_outputs``) holding NaN/inf on the check inputs,
    naming the generated inputs that may cause it (a NaN in both builds passes the
    check, but is never a result to ship silently)."""
    found = []
    for name, array in named:
        if array.dtype.kind != "f":
            continue
        bad = int(np.count_nonzero(~np.isfinite(array)))
        if bad:
            cause = (f"; these inputs were generated, not supplied: {_names(generated)}"
                     if generated else "")
            found.append(f"output {name}: {bad} of {array.size} values are NaN or "
                         f"infinite on the check inputs{cause}")
    return found


def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _check_inputs(specs: Sequence[dict], given: Mapping[str, InputSpec]
                  ) -> tuple[list[np.ndarray], list[str]]:
    """Inputs in call order: supplied arrays where given, recipe-v1 values elsewhere.

    Also returns the names of the generated ones, which the report and the check
    name: a NaN from made-up values must not be blamed on bmlib unseen.
    """
    feed, generated = [], []
    for spec in specs:
        supplied = given.get(spec["name"])
        if supplied is not None and supplied.data is not None:
            feed.append(supplied.data)
            continue
        # A symbolic dim (a free batch) is checked at 1; the library takes any value.
        shape = [d if isinstance(d, int) else 1 for d in spec["shape"]]
        feed.append(recipe_tensor(spec["name"], shape, spec["dtype"], "input"))
        generated.append(spec["name"])
    return feed, generated


def _check(imported, partitioned, model, feed, generated, outputs, target, rtol, atol
           ) -> dict[str, Any]:
    from .compiler import compile_plain
    from .runtime import ModelRunner

    plain = ModelRunner(compile_plain(imported, target), model.input_names,
                        huge_pages=False)  # called once, as a reference
    want = plain(*feed)
    diffs = compare(outputs, want, rtol, atol)
    result: dict[str, Any] = {
        "ok": all(d.ok for d in diffs), "rtol": rtol, "atol": atol,
        "inputs": ("generated by recipe v1: " + ", ".join(generated)) if generated
        else "supplied",
        "generated_inputs": list(generated),
        "outputs": [d.to_dict() for d in diffs], "first_divergence": None,
    }
    if not result["ok"]:
        try:
            result["first_divergence"] = first_divergence(partitioned, feed, build_offloaded,
                                                          target, rtol, atol)
        except Exception as exc:  # noqa: BLE001 - the check failed either way: say so (exit 1)
            first = next((ln for ln in str(exc).splitlines() if ln.strip()), "")
            result["localisation_error"] = f"{type(exc).__name__}: {first}"
    return result


def render_markdown(data: Mapping[str, Any], table: str) -> str:
    lines = ["# bmlib-relax conversion report", "",
             f"- model: `{data['model']}`",
             f"- bmlib-relax {data['bmlib_relax_version']}, merge={data['merge']}",
             f"- target `{data.get('target', '')}`; " + ", ".join(
                 f"{k} {v}" for k, v in data.get("versions", {}).items()),
             "- inputs: " + ", ".join(f"`{i['name']}` {tuple(i['shape'])} {i['dtype']}"
                                       for i in data["inputs"]),
             "- outputs: " + ", ".join(f"`{o['name']}` {tuple(o['shape'] or ())} {o['dtype']}"
                                        for o in data.get("signature", {}).get("outputs", []))]
    if data.get("generated_inputs"):
        lines.append("- inputs generated by recipe v1 (not supplied): "
                     + ", ".join(f"`{n}`" for n in data["generated_inputs"]))
    lines.append("")
    lines += ["## Partitions", "", "| partition | composites | ops | params | PrimFunc args "
              "| unscheduled blocks |", "|---|---|---|---|---|---|"]
    for p in data["partitions"]:
        unscheduled = "; ".join([str(p["unscheduled_blocks"])] + p["unscheduled"])
        lines.append(f"| `{p['name']}` | {', '.join(p['composites'])} | "
                     f"{', '.join(o.replace('relax.', '') for o in p['ops'])} | "
                     f"{p['num_params']} | {p['num_args']} | "
                     f"{unscheduled.replace('|', '/')} |")
    lines += ["", "## Ops", "", f"- on bmlib: {_counts(data['ops_offloaded'])}",
              f"- on host: {_counts(data['ops_host'])}"]
    for key in ("flops_total", "flops_offloaded"):
        if key in data:
            lines.append(f"- {key.replace('_', ' ')}: {data[key]:,}")
    if data.get("host_ops"):
        lines += ["", "| host op | count | why it stayed on the host |", "|---|---|---|"]
        lines += [f"| {h['op'].replace('relax.', '')} | {h['count']} | {h['detail']} |"
                  for h in data["host_ops"]]
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
        elif check.get("localisation_error"):
            lines += ["", "The diverging intermediate could not be located: "
                          f"{check['localisation_error']}"]
    lines += ["", "## Report", "", "```", table, "```", ""]
    return "\n".join(lines)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k.replace('relax.', '')} x{v}" for k, v in sorted(counts.items())) or "none"
