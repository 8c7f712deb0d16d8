"""Running compiled models: in-process results of ``compile`` and shipped artifacts.

``load(path)`` needs nothing but TVM and numpy at run time: it reads an
``export_library`` artifact and its metadata file written beside it
(``d/a.so`` → ``d/a.json``: input names, shapes and dtypes, and the SHA-256 and
size of the library).  The library is verified against that hash *before* TVM
opens it, because a damaged shared object is never detected otherwise: cut
short it kills the process with SIGBUS inside ``dlopen``, and a flipped bit in
its embedded constants silently changes the results.

Every file is written atomically (a temporary file in the same folder, then
``os.replace``), so a reader sees the previous complete file or the new one.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import tvm
from tvm import relax

from . import interrupts, memory
from .deep_stack import on_deep_stack
from .dims import static_dim
from .errors import (RUN_CHECK_PREFIX, ArtifactError, DamagedSideFileWarning, ParamError,
                     RunCheckError)
from .hugepages import HugePages
from .threads import ThreadConfig

ARTIFACT_FORMAT = "bmlib-relax-artifact"
ARTIFACT_FORMAT_VERSION = 1
_HASH_CHUNK = 1 << 20
WARM_UP_WAIT_SECONDS = 60.0  # a kernel compacting memory for huge pages may be slow
MAX_METADATA_BYTES = 16 << 20  # a signature of thousands of inputs is a few hundred KB


class ModelRunner:
    """Calls a Relax VM ``main`` with arrays, by position or by input name.

    Inputs are bound **positionally** (Relay identifies variables by identity,
    and two inputs may share a name when a graph was built with the builder
    API); a keyword binds by name only when that name is unique among the
    inputs.  Inputs may be numpy arrays, ``tvm.runtime.Tensor`` objects, Python
    scalars (0-d) or nested lists.  A single output comes back as an array,
    several as a tuple.  It runs on
    ``num_threads`` threads (default: every CPU available, see :mod:`.threads`).
    After its first call its weights and activations are moved onto huge pages in
    the background (:mod:`.hugepages`; ``huge_pages=False`` or ``BMLIB_HUGE_PAGES=0``
    turns that off); :meth:`warm_up` runs once and waits for it.
    """

    def __init__(self, executable: Any, input_names: Sequence[str],
                 input_specs: Optional[Sequence[dict]] = None, device: Any = None,
                 num_threads: Optional[int] = None, huge_pages: bool = True,
                 recursive: bool = False):
        self.threads = ThreadConfig(num_threads)
        #: The model recurses (a Relay loop, a recursive global): calls run on a thread
        #: with a RECURSION_STACK_BYTES stack (see :meth:`__call__`).
        self.recursive = recursive
        self.executable = executable
        self.input_names = list(input_names)
        self.input_specs = list(input_specs or [])
        self.device = device or tvm.cpu()
        self._vm = relax.VirtualMachine(executable, self.device)
        #: Held by each call of the model (see :meth:`_call_locked`): one VM runs one
        #: call at a time.
        self.call_lock = threading.Lock()
        local_cpu = self.device.dlpack_device_type() == tvm.cpu().dlpack_device_type()  # not RPC
        self.huge_pages = HugePages(enabled=huge_pages and local_cpu)
        # @main's parameters (a tuple-typed one once, not its flattened fields) and
        # the tuple-typed ones with their flattened inputs, for calls passing nested
        # tuples (set once: every call reads them).
        self._parameters = list(dict.fromkeys(n.split(".", 1)[0] for n in self.input_names))
        self._tuple_inputs = _tuple_inputs(self.input_names)
        #: What a run allocates, when known (a compiled model knows it, see
        #: :mod:`.memory`): a call that cannot fit is refused before it starts.
        self.memory_needs: Optional[memory.MemoryNeeds] = None
        #: The memory this process may use (read once, when the model is made).
        self.memory_limit = memory.memory_limit() if local_cpu else None

    def _expand_tuple_values(self, args: Sequence[Any], kwargs: dict) -> tuple[list, dict]:
        """Nested tuples / lists given for tuple-typed parameters, as Relay's VM took them
        (``model((a, b), c)``, ``model(t=(a, b))``), as the flat inputs the build takes.
        Positional values count by parameter when one of them is such a nesting."""
        groups, tops = self._tuple_inputs, self._parameters
        if not groups:
            return list(args), kwargs

        def expand(top: str, value: Any) -> dict:
            flat = [leaf for _, leaf in _nested_items(value, top)]
            if len(flat) != len(groups[top]):
                raise ParamError(f"input {top!r} is a tuple of {len(groups[top])} tensor(s) "
                                 f"({', '.join(groups[top])}); got {len(flat)}", top)
            return dict(zip(groups[top], flat))

        nested = len(args) <= len(tops) and any(
            tops[i] in groups and isinstance(v, (list, tuple)) for i, v in enumerate(args))
        out_kwargs: dict = {}
        out_args = list(args)
        if nested:
            out_args = []
            for top, value in zip(tops, args):
                if top in groups:
                    out_kwargs.update(expand(top, value))
                else:
                    out_kwargs[top] = value
        for name, value in kwargs.items():
            if name in groups and isinstance(value, (list, tuple)):
                out_kwargs.update(expand(name, value))
            else:
                out_kwargs[name] = value
        return out_args, out_kwargs

    def _arrange(self, args: Sequence[Any], kwargs: dict) -> list[np.ndarray]:
        args, kwargs = self._expand_tuple_values(args, kwargs)
        names = self.input_names
        if len(args) > len(names):
            raise ParamError(f"model takes {len(names)} input(s) ({', '.join(names)}), "
                             f"got {len(args)}")
        values: dict[int, Any] = dict(enumerate(args))
        for name, value in kwargs.items():
            positions = [i for i, n in enumerate(names) if n == name]
            if not positions:
                raise ParamError(f"unknown input {name!r} (inputs: {', '.join(names)})", name)
            if len(positions) > 1:
                raise ParamError(
                    f"input name {name!r} is ambiguous: inputs {positions} of the model are "
                    f"all called {name!r}; pass the inputs positionally", name)
            if positions[0] in values:
                raise ParamError(f"input {name!r} given twice", name)
            values[positions[0]] = value
        missing = [n for i, n in enumerate(names) if i not in values]
        if missing:
            raise ParamError(f"missing input {missing[0]!r}", missing[0])
        specs = self.input_specs if len(self.input_specs) == len(names) else [None] * len(names)
        arrays = [as_input_array(values[i], names[i], spec) for i, spec in enumerate(specs)]
        for spec, array in zip(specs, arrays):
            if spec is not None:
                _check_input(spec, array)
        _check_symbolic_dims([s for s in specs if s is not None], arrays)
        return arrays

    def __call__(self, *args: Any, **kwargs: Any):
        arrays = self._arrange(args, kwargs)
        memory.check_fits(self.memory_needs, self.memory_limit)  # before any allocation
        try:
            return self._call_locked(arrays)
        except AssertionError as exc:
            raise as_run_check_error(exc) from None
        except RuntimeError as exc:  # TVM's errors
            if memory.is_allocation_failure(exc):
                raise memory.allocation_error(self.memory_needs, self.memory_limit) from None
            shape_error = _vm_shape_error(exc)
            if shape_error is not None:
                raise shape_error from None
            raise

    def _call_locked(self, arrays: list[np.ndarray]) -> Any:
        """One run under :attr:`call_lock`, from the inputs' copy onto the device to the
        outputs' copy back, with every device tensor of the call released inside it.

        A Relax VM keeps its frames, registers and storage pools in the VM object: two
        threads calling one VM at once read each other's registers (a thread got the
        other's result, a raw TypeError / InternalError, a segmentation fault).  TVM's
        Relay executors were no safer, but nothing said so; calls of one model are
        serialized instead (each runs on every CPU anyway, on the pool of the thread
        that calls, see :mod:`.threads`).  An RPC model's lock is its session's: the
        session is one socket, and a remote tensor's copy or release is a message on it.
        """
        with self.call_lock:
            tensors = result = None
            try:
                tensors = [tvm.runtime.tensor(a, self.device) for a in arrays]
                if self.recursive:
                    result = on_deep_stack(lambda: self._run(tensors))
                else:
                    result = self._run(tensors)
                return to_numpy(result)
            finally:
                tensors = result = None  # noqa: F841 - released while the lock is held

    def _run(self, tensors: list) -> Any:
        self.threads.apply()  # TVM's thread settings belong to the calling thread
        if self.huge_pages.pending:  # the first call records what to place
            return self.huge_pages.run_recording(self._vm, tensors)
        return self._vm["main"](*tensors)

    def warm_up(self, *args: Any, **kwargs: Any):
        """Call the model once and wait until its memory is placed (huge pages; at most
        ``WARM_UP_WAIT_SECONDS``, then it goes on in the background): what a benchmark
        does before it times ``_vm["main"]``.  Takes the inputs as a call does (so no
        option of its own); returns the outputs."""
        outputs = self(*args, **kwargs)
        self.huge_pages.wait(WARM_UP_WAIT_SECONDS)
        return outputs




_MATCH_CAST = re.compile(r"(?:fn=([^,\s]+), [^()]*?)?param=([^,\s]+), annotation=(.*?)\)"
                         r"\s*match_cast error,\s*([^\n]*)")


_RETURN_CAST = re.compile(r"fn=([^,\s]+), loc=return, annotation=(.*?)\)\s*match_cast error,"
                          r"\s*([^\n]*)")


def _vm_shape_error(exc: RuntimeError) -> Optional[Exception]:
    """The VM's check of a parameter against its function's annotation (``match_cast
    error``) as the project's error; None for any other error.

    In ``main`` the parameter is a model input (a dim written as a formula no other
    input fixes): a ``ParamError`` naming it.  In another function (``@f(%a: Tensor[(3,
    4)])`` called with a run-time dim of an input) the input reached a function that
    declares another shape: a ``RunCheckError`` naming the function and its parameter."""
    returned = _RETURN_CAST.search(str(exc))
    if returned is not None:
        function, annotation, detail = returned.groups()
        return RunCheckError(
            f"@{function}: its result in this run does not match its declared "
            f"{annotation}: {detail.strip()} (the type comes from the program's annotations, "
            "e.g. a loop's or recursive function's declared result, and the value computed "
            "has another shape)")
    match = _MATCH_CAST.search(str(exc))
    if match is None:
        return None
    function, name, annotation, detail = match.groups()
    if function in (None, "main"):
        return ParamError(f"input {name!r} does not match {annotation}: {detail.strip()}",
                          name)
    return RunCheckError(f"@{function}: its parameter {name!r} is called with a value that "
                         f"does not match its declared {annotation}: {detail.strip()} (the "
                         "model's inputs reach it with another shape)")


def as_run_check_error(exc: AssertionError) -> BaseException:
    """A failed ``assert_op`` of ours (its message starts with ``RUN_CHECK_PREFIX``) as a
    ``RunCheckError`` carrying that message alone; any other assertion unchanged."""
    text = str(exc)
    start = text.find(RUN_CHECK_PREFIX)
    if start < 0:
        return exc
    return RunCheckError(text[start + len(RUN_CHECK_PREFIX):].splitlines()[0])




def as_input_array(value: Any, name: str, spec: Optional[dict] = None) -> np.ndarray:
    """``value`` as a C-contiguous numpy array (0-d stays 0-d), or a ``ParamError``.

    A ``tvm.runtime.Tensor`` is read back with ``.numpy()``; a Python scalar or
    (nested) list takes the input's declared dtype; a ragged list or an object
    array is refused instead of reaching the VM as ``dtype object``.
    """
    if isinstance(value, tvm.runtime.Tensor):
        value = value.numpy()
    value = _torch_tensor_as_numpy(value, name)
    if isinstance(value, (np.ndarray, np.generic)):
        array = exact_cast(np.asarray(value), spec.get("dtype") if spec else None, name)
    else:
        try:
            array = np.array(value)
        except (ValueError, TypeError) as exc:
            raise ParamError(f"input {name!r}: cannot make an array of the given "
                             f"{type(value).__name__} (ragged or non-numeric): {exc}",
                             name) from None
        dtype = spec.get("dtype") if spec else None
        if array.dtype != object and dtype and array.dtype != np.dtype(dtype):
            # Python numbers take the input's dtype, but never change value: 1.5 does
            # not become an integer 1 (2.0 is 2), 300 does not wrap to 44 in an int8
            # input, 1e300 does not become inf in a float32 one.
            cast = exact_cast(array, dtype, name)
            if cast.dtype != np.dtype(dtype):
                raise ParamError(f"input {name!r}: {array.dtype} values given for a {dtype} "
                                 "input, and some would change in the cast", name)
            array = cast
    if array.dtype == object:
        raise ParamError(f"input {name!r}: got an array of Python objects (a ragged list?); "
                         "give a numeric array", name)
    return np.require(array, requirements="C")  # unlike ascontiguousarray, keeps 0-d


def _torch_tensor_as_numpy(value: Any, name: str) -> Any:
    """A ``torch.Tensor`` as numpy data, detached from autograd and copied off its
    device: inference takes a tensor that ``requires_grad`` (a model's parameters, an
    activation of a training graph), where ``np.array(tensor)`` raised torch's bare
    RuntimeError.  Anything else is returned as it is (torch is never imported here)."""
    if not type(value).__module__.startswith("torch") or not hasattr(value, "detach"):
        return value
    try:
        return value.detach().cpu().resolve_conj().resolve_neg().numpy()
    except (RuntimeError, TypeError) as exc:  # e.g. bfloat16, which numpy has no dtype for
        raise ParamError(f"input {name!r}: cannot read the torch tensor ({value.dtype}) as a "
                         f"numpy array: {str(exc).splitlines()[0]}", name) from None


def exact_cast(array: np.ndarray, dtype: Optional[str], name: str) -> np.ndarray:
    """``array`` in the input's ``dtype`` when every value survives the cast.

    Relay's executors copied an array of another dtype into the input
    (``float16`` data into a ``float32`` input, ``int64`` pool data into a
    ``float16`` one); that copy is kept, but only where it cannot change a
    value: safe casts always, a float-to-float cast when no value becomes
    infinite, any other numeric cast only when every value round-trips (``2.0``
    into ``int32``; not ``1.5``, not ``300`` into ``int8``, not ``255`` from ``uint8``
    into ``int8``, whose bits would read -1).  Anything else stays
    a ``ParamError`` from the shape/dtype check.
    """
    if not dtype or array.dtype == object or array.dtype == np.dtype(dtype):
        return array
    target = np.dtype(dtype)
    if np.can_cast(array.dtype, target, "safe"):
        return array.astype(target)
    if array.dtype.kind not in "biuf" or target.kind not in "biuf":
        return array
    with np.errstate(all="ignore"):
        cast = array.astype(target)
        if array.dtype.kind == "f" and target.kind == "f":  # rounding, as a float literal
            kept = bool(np.all(np.isfinite(cast) | ~np.isfinite(array)))
        elif array.dtype.kind in "iu" and target.kind in "iu":
            # by value: uint8 255 into int8 round-trips bit for bit but becomes -1
            info = np.iinfo(target)
            kept = array.size == 0 or (int(array.min()) >= info.min and
                                       int(array.max()) <= info.max)
        else:  # integers, int <-> float: every value must come back unchanged
            kept = bool(np.all(cast.astype(array.dtype) == array))
    return cast if kept else array


def _check_input(spec: dict, array: np.ndarray) -> None:
    want_shape = [d if isinstance(d, int) else None for d in spec.get("shape", [])]
    shape_ok = len(want_shape) == array.ndim and all(
        w is None or w == s for w, s in zip(want_shape, array.shape))
    if not shape_ok or str(array.dtype) != spec.get("dtype", str(array.dtype)):
        raise ParamError(
            f"input {spec['name']!r}: expected shape {tuple(spec['shape'])} dtype "
            f"{spec['dtype']}, got shape {array.shape} dtype {array.dtype}", spec["name"])


def _check_symbolic_dims(specs: Sequence[dict], arrays: Sequence[np.ndarray]) -> None:
    """A symbolic dim (``n``) shared by several inputs takes one value in a call: the
    first input fixes it, a later one that disagrees is a ``ParamError`` naming both
    (the VM would stop on a bare ``match_cast`` check)."""
    seen: dict[str, tuple[int, str]] = {}
    for spec, array in zip(specs, arrays):
        for axis, (dim, size) in enumerate(zip(spec.get("shape") or [], array.shape)):
            if not isinstance(dim, str) or not dim.isidentifier():
                continue
            if dim in seen and seen[dim][0] != size:
                raise ParamError(
                    f"input {spec['name']!r}: dim {axis} is the symbolic dim {dim}, which is "
                    f"{size} here but {seen[dim][0]} in input {seen[dim][1]!r}", spec["name"])
            seen.setdefault(dim, (int(size), spec["name"]))
    _check_dim_formulas(specs, arrays, seen)


def _check_dim_formulas(specs: Sequence[dict], arrays: Sequence[np.ndarray],
                        seen: dict[str, tuple[int, str]]) -> None:
    """A dim written as a formula of symbolic dims (``n * 2``) must be its value for the
    dims the other inputs fix: the VM would stop on a bare ``match_cast`` check.  A
    formula of a dim no input fixes, or one outside that grammar, is left to the VM
    (:func:`_vm_shape_error` still names the input)."""
    formulas = [(spec, axis, dim, size) for spec, array in zip(specs, arrays)
                for axis, (dim, size) in enumerate(zip(spec.get("shape") or [], array.shape))
                if isinstance(dim, str) and not dim.isidentifier()]
    if not formulas:
        return
    from .flops import evaluate_flops_text

    values = {name: size for name, (size, _) in seen.items()}
    for spec, axis, dim, size in formulas:
        try:
            want = evaluate_flops_text(dim, values)
        except (KeyError, ValueError, ZeroDivisionError):
            continue
        if want != size:
            bound = ", ".join(f"{n} = {seen[n][0]} from input {seen[n][1]!r}"
                              for n in sorted(seen) if re.search(rf"\b{n}\b", dim))
            raise ParamError(f"input {spec['name']!r}: dim {axis} is {dim} = {want} ({bound}), "
                             f"got {size}", spec["name"])


def symbolic_dims_of(specs: Sequence[dict], arrays: Sequence[Any]) -> dict[str, int]:
    """``{name: size}`` of the symbolic dims (``"n"``) that ``arrays`` fix, by their specs."""
    found: dict[str, int] = {}
    for spec, array in zip(specs, arrays):
        for dim, size in zip(spec.get("shape") or [], getattr(array, "shape", ())):
            if isinstance(dim, str) and dim.isidentifier():
                found.setdefault(dim, int(size))
    return found


def to_numpy(value: Any):
    if hasattr(value, "numpy"):
        shape = tuple(int(d) for d in value.shape)
        if any(d < 0 for d in shape):
            # TVM computed a result shape from this run's dims and got a negative one
            # (a conv or pool window larger than a run-time-sized input): numpy would say
            # "negative dimensions are not allowed" without naming anything.
            raise RunCheckError(f"a result of shape {shape}: an op's output size is "
                                "negative for this run's input shapes (e.g. a conv or pool "
                                "window larger than the input)")
        return value.numpy()
    return tuple(to_numpy(v) for v in value)


def _tuple_inputs(input_names: Sequence[str]) -> dict[str, list[str]]:
    """``{parameter: its flattened inputs}`` for the tuple-typed parameters of the Relay
    ``@main`` (``%t`` -> inputs ``t.0``, ``t.1.0`` ...); empty if it has none."""
    groups: dict[str, list[str]] = {}
    for name in input_names:
        groups.setdefault(name.split(".", 1)[0], []).append(name)
    return {top: members for top, members in groups.items()
            if members != [top] and top not in input_names}


def named_outputs(outputs: Any) -> list[tuple[str, np.ndarray]]:
    """A model's outputs as ``[(name, array)]``: ``out0``, ``out1`` ... and, for an output
    that is itself a tuple (an LSTM's ``(y, (h, c))``), ``out1.0``, ``out1.1`` ...

    Every place that lists, saves or compares outputs uses these names, so a nested
    result is never handed to code that expects an array.
    """
    if not isinstance(outputs, (tuple, list)):
        return [("out0", np.asarray(outputs))]
    return [(name, np.asarray(leaf)) for i, v in enumerate(outputs)
            for name, leaf in _nested_items(v, f"out{i}")]


def _nested_items(value: Any, name: str) -> list[tuple[str, Any]]:
    """The leaves of nested tuples / lists with their paths (``name.1.0``), in order."""
    if not isinstance(value, (tuple, list)):
        return [(name, value)]
    return [item for i, v in enumerate(value) for item in _nested_items(v, f"{name}.{i}")]


def input_specs(func: relax.Function) -> list[dict]:
    """``[{name, shape, dtype}]`` of a Relax function's parameters (symbolic dims as str:
    a name ``"n"``, or a formula of names such as ``"n * 2"``, see :func:`dim_text`).

    A parameter that is no tensor of known rank and dtype is a ``ConversionError`` naming
    it: a model's inputs are arrays (a Relay ``@main``'s tuple parameters are flattened
    before they get here; a Relax module's ``R.Tuple`` / ``R.Shape`` / ``R.Prim`` /
    ``R.Object`` parameter, or an ``R.Tensor`` without shape or dtype, used to end in a
    bare AttributeError, RuntimeError or InternalError)."""
    return [_param_spec(param) for param in func.params]


_PARAM_KINDS = {"TupleType": "a tuple (R.Tuple)", "ShapeType": "a shape (R.Shape)",
                "PrimType": "a scalar (R.Prim)", "ObjectType": "an object (R.Object)",
                "AnyType": "an object (R.Object)", "FuncType": "a function (R.Callable)"}


def _param_spec(param: Any) -> dict:
    from .errors import ConversionError

    ty, name = param.ty, param.name
    if not isinstance(ty, relax.TensorType):
        kind = _PARAM_KINDS.get(type(ty).__name__, f"a {type(ty).__name__}")
        raise ConversionError(f"main parameter {name!r} is {kind}; a compiled model takes "
                              "tensor inputs only (R.Tensor with a shape and dtype)")
    dtype = None if ty.dtype is None else str(ty.dtype)
    if dtype in (None, "", "None", "void"):
        raise ConversionError(f"main parameter {name!r} is a tensor without a dtype; give it "
                              "one (R.Tensor(shape, \"float32\"))")
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        rank = "unknown rank" if ty.ndim < 0 else f"rank {ty.ndim} but no shape"
        raise ConversionError(f"main parameter {name!r} is a tensor of {rank}; give it a "
                              "shape, with names for the dims that vary (R.Tensor((\"n\", "
                              "3), dtype))")
    return {"name": name, "shape": [dim_text(d) for d in shape.values], "dtype": dtype}


def dim_text(dim: Any) -> Any:
    """A shape dim as the metadata records it: an int, a symbolic dim's name, or a
    formula of names in the grammar :func:`~.flops.evaluate_flops_text` reads (``n * 2``,
    not TVM's ``n * T.int64(2)``)."""
    if static_dim(dim) is not None:
        return static_dim(dim)
    return re.sub(r"T\.int(?:32|64)\((-?\d+)\)", r"\1", str(dim))


# --------------------------------------------------------------------------- files
def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def metadata_path(library_path: str) -> str:
    """The metadata file of a library: ``d/a.so`` → ``d/a.json`` (one per artifact)."""
    return os.path.splitext(os.fspath(library_path))[0] + ".json"


def atomic_write(path: str, write: Callable[[str], Any], suffix: str = "") -> None:
    """Call ``write(tmp)`` for a temporary path beside ``path``, then rename it over ``path``.

    ``suffix`` keeps the extension a writer dispatches on (``export_library``
    picks the container format from it).
    """
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=suffix or ".tmp",
                                   dir=folder)
    os.close(handle)
    try:
        write(tmp)
        # mkstemp makes the file 0600; give it the mode a plain open() would have.
        os.chmod(tmp, (0o777 if os.access(tmp, os.X_OK) else 0o666) & ~_umask())
        with open(tmp, "rb") as written:  # on disk before the rename makes it visible
            os.fsync(written.fileno())
        interrupts.raise_if_requested()  # stopped, even if a step swallowed the Ctrl-C
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: str, data: Any) -> str:
    def write(tmp: str) -> None:
        with open(tmp, "w") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")

    atomic_write(path, write)
    return path


# TVM logs a "Scope Saving:" / "Scope Loaded:" warning per dynamically sized allocation
# when it saves / loads a VM executable (src/runtime/vm/executable.cc): noise about no
# problem of the model (108 lines each for the TF ResNet-50 with a symbolic batch).
_VM_SCOPE_NOISE = re.compile(rb"executable\.cc:\d+: Warning: Scope (Saving|Loaded):")


@contextlib.contextmanager
def _native_lines_dropped(noise: "re.Pattern[bytes]") -> Iterator[None]:
    """Run the block with file descriptor 2 captured (C++ log lines bypass
    ``sys.stderr``), then pass on every captured line ``noise`` does not match."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to filter
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured:
                if not noise.search(line):
                    os.write(2, line)


def export_artifact(executable: Any, path: str, specs: Sequence[dict],
                    outputs: Sequence[dict] = (), files: Sequence[str] = (),
                    flops: Optional[dict] = None, recursive: bool = False,
                    largest_tensor: Optional[memory.TensorNeed] = None) -> str:
    """Write ``executable`` to the library ``path`` and its metadata beside it.

    Both are written atomically, the library first: a crash in between leaves a
    library whose hash does not match the old metadata, which ``load`` refuses.
    ``files`` are further files of the artifact (e.g. ``model_relax.py``) whose
    SHA-256 is recorded too.  ``flops`` (``{"total", "offloaded"}``: counts or
    formulas of the symbolic dims, see :mod:`.flops`) lets ``load`` report the FLOPs
    of a run; ``recursive`` marks a model whose calls need a deep stack
    (``ModelRunner.recursive``); ``largest_tensor``, the largest tensor a run certainly
    allocates, lets the loaded model refuse a call that cannot fit (:mod:`.memory`).
    Returns the metadata path.
    """
    path = os.fspath(path)
    check_export_path(path)
    suffix = os.path.splitext(path)[1] or ".so"
    with _native_lines_dropped(_VM_SCOPE_NOISE):
        atomic_write(path, executable.export_library, suffix=suffix)
    folder = os.path.dirname(os.path.abspath(path))
    data = {
        "format": ARTIFACT_FORMAT, "format_version": ARTIFACT_FORMAT_VERSION,
        "library": os.path.basename(path), "size": os.path.getsize(path),
        "sha256": file_sha256(path),
        "files": {os.path.relpath(f, folder): file_sha256(f) for f in files},
        "inputs": list(specs), "outputs": list(outputs),
    }
    if flops is not None:
        data["flops"] = {k: str(v) for k, v in flops.items()}
    if recursive:  # its calls need a deep stack (ModelRunner.recursive)
        data["recursive"] = True
    if largest_tensor is not None:
        data["largest_tensor"] = memory.need_record(largest_tensor)
    data["metadata_sha256"] = metadata_digest(data)
    return write_json_atomic(metadata_path(path), data)


def check_export_path(path: str) -> None:
    """An ``ArtifactError`` before anything is written when ``path`` cannot take a library
    and its metadata: no file name, a folder that does not exist, a folder itself, a
    library whose metadata path is the library (``d/model.json``), or a metadata path
    that holds another file -- another artifact's metadata (``d/a.tar`` beside ``d/a.so``:
    both are described by ``d/a.json``) or a JSON file that is no artifact metadata at all.
    Each of these used to be a bare OSError, or a silently destroyed file."""
    if not path or os.path.basename(path) in ("", ".", ".."):
        raise ArtifactError(f"{path!r}: no library file name to export to", path)
    if os.path.isdir(path):
        raise ArtifactError(f"{path}: is a directory; give a library file name inside it "
                            "(e.g. model.so)", path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ArtifactError(f"{path}: folder {folder} does not exist", path)
    meta = metadata_path(path)
    if os.path.abspath(meta) == os.path.abspath(path):
        raise ArtifactError(f"{path}: a library named like its own metadata file; use a "
                            "library extension such as .so or .tar", path)
    if not os.path.lexists(meta):
        return
    try:
        with open(meta, encoding="utf-8") as handle:
            existing = json.load(handle)
    except (OSError, ValueError, RecursionError):
        existing = None
    if not isinstance(existing, dict) or existing.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{path}: its metadata would replace {meta}, which is not a "
                            "bmlib-relax artifact's metadata; export elsewhere", meta)
    if existing.get("library") != os.path.basename(path):
        raise ArtifactError(f"{path}: {meta} describes another artifact "
                            f"({existing.get('library')!r}); exporting here would orphan it",
                            meta)


def metadata_digest(data: dict) -> str:
    """SHA-256 of the metadata's own fields (canonical JSON, this key left out): the
    input signature is checked like the library, so a damaged ``model.json`` cannot
    give a model a wrong signature."""
    body = {k: v for k, v in data.items() if k != "metadata_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode("utf-8")).hexdigest()


def read_metadata(library_path: str) -> dict:
    """The validated metadata of a library (``ArtifactError`` naming the file otherwise)."""
    meta_path = metadata_path(library_path)
    _check_metadata_file(library_path, meta_path)
    size = os.path.getsize(meta_path)
    if size > MAX_METADATA_BYTES:
        raise ArtifactError(f"{meta_path}: metadata is {size:,} bytes, more than an artifact's "
                            f"signature can need ({MAX_METADATA_BYTES:,})", meta_path)
    try:
        with open(meta_path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{meta_path}: metadata is not valid JSON: {exc}", meta_path) from None
    except (ValueError, RecursionError) as exc:
        from .preflight import json_problem  # only here: load() imports no more modules

        # Python's decoder cannot hold it: nested deeper than it recurses, or a number of
        # more digits than int() reads (a bare ValueError, once an internal error)
        raise ArtifactError(f"{meta_path}: metadata is not valid JSON: {json_problem(exc)}",
                            meta_path) from None
    except OSError as exc:
        raise ArtifactError(f"{meta_path}: cannot read metadata: {exc}", meta_path) from None
    problems = _metadata_problems(data)
    if problems:
        raise ArtifactError(f"{meta_path}: bad artifact metadata: {problems}", meta_path)
    if data.get("metadata_sha256") != metadata_digest(data):
        raise ArtifactError(f"{meta_path}: metadata was changed or damaged after it was "
                            "written (its SHA-256 does not match); export the model again",
                            meta_path)
    return data


def _check_metadata_file(library_path: str, meta_path: str) -> None:
    """An ``ArtifactError`` unless the metadata beside ``library_path`` is a regular
    file: a folder, a symbolic link loop or a FIFO is said to be one (they used to be
    reported as missing), an absent file makes the library no artifact of ours."""
    if os.path.isfile(meta_path):
        return
    from .preflight import unresolvable_link  # only here: load() imports no more modules

    if os.path.isdir(meta_path):
        raise ArtifactError(f"{library_path}: its metadata file {meta_path} is a directory, "
                            "expected the JSON file export_library writes", meta_path)
    link = unresolvable_link(meta_path)
    if link is not None:
        raise ArtifactError(f"{library_path}: its metadata file {meta_path} is {link}",
                            meta_path)
    if os.path.exists(meta_path):
        raise ArtifactError(f"{library_path}: its metadata file {meta_path} is not a regular "
                            "file", meta_path)
    raise ArtifactError(f"{library_path}: not a bmlib-relax artifact: its metadata file "
                        f"{meta_path} is missing", meta_path)


def _metadata_problems(data: Any) -> str:
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    if data.get("format") != ARTIFACT_FORMAT:
        return (f"'format' is {data.get('format')!r}, expected {ARTIFACT_FORMAT!r} (written "
                "by an older bmlib-relax or another tool? export the model again)")
    sha = data.get("sha256")
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        return "'sha256' is not a hex SHA-256 digest"
    if not isinstance(data.get("size"), int) or isinstance(data.get("size"), bool):
        return "'size' is not an integer"
    inputs = data.get("inputs")
    if not isinstance(inputs, list):
        return "'inputs' is not a list"
    for index, spec in enumerate(inputs):
        if not (isinstance(spec, dict) and isinstance(spec.get("name"), str)
                and isinstance(spec.get("dtype"), str) and isinstance(spec.get("shape"), list)
                and all((isinstance(d, int) and d >= 0 or isinstance(d, str))
                        and not isinstance(d, bool) for d in spec["shape"])):
            return f"inputs[{index}] is not {{name: str, shape: [int|str], dtype: str}}"
        try:
            np.dtype(spec["dtype"])
        except TypeError:
            if spec["dtype"] != "bfloat16":
                return f"inputs[{index}] has unknown dtype {spec['dtype']!r}"
    return memory.record_problem(data.get("largest_tensor"))


def verify_library(library_path: str, metadata: dict) -> None:
    """Size and SHA-256 of the library against its metadata, before anything opens it."""
    size = os.path.getsize(library_path)
    if size != metadata["size"]:
        raise ArtifactError(f"{library_path}: library is {size} bytes but its metadata "
                            f"{metadata_path(library_path)} records {metadata['size']} "
                            "(truncated or replaced)", library_path)
    digest = file_sha256(library_path)
    if digest != metadata["sha256"]:
        raise ArtifactError(f"{library_path}: SHA-256 {digest[:16]}... does not match the "
                            f"{metadata['sha256'][:16]}... recorded in "
                            f"{metadata_path(library_path)} (damaged or replaced)", library_path)
    check_elf_extent(library_path)


def check_elf_extent(library_path: str) -> None:
    """Every segment and section an ELF library declares lies inside the file.

    ``dlopen`` maps a library's segments from the file; a library cut short (its
    metadata rewritten to match, or a copy that stopped early) maps pages past the end
    of the file, and the process dies with SIGBUS on first touch instead of an error.
    A file that is no ELF (another platform's library) is left to the loader."""
    import struct

    size = os.path.getsize(library_path)
    with open(library_path, "rb") as f:
        ident = f.read(64)
        if ident[:4] != b"\x7fELF":
            return

        def damaged(what: str) -> ArtifactError:
            return ArtifactError(f"{library_path}: damaged library: {what} (the file has "
                                 f"{size} bytes)", library_path)

        if len(ident) < 52 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise damaged("ELF header cut short or of unknown class")
        wide = ident[4] == 2
        order = "<" if ident[5] == 1 else ">"
        if wide:
            if len(ident) < 64:
                raise damaged("ELF header cut short")
            phoff, shoff = struct.unpack_from(order + "QQ", ident, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", ident, 0x36)
        else:
            phoff, shoff = struct.unpack_from(order + "II", ident, 0x1C)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", ident, 0x2A)

        def table(offset: int, entsize: int, count: int, what: str) -> bytes:
            if offset + entsize * count > size:
                raise damaged(f"its {what} table (byte offset {offset}, {count} entries) "
                              "ends past the end of the file")
            f.seek(offset)
            return f.read(entsize * count)

        headers = table(phoff, phentsize, phnum, "program header")
        for i in range(phnum):
            at = i * phentsize
            if wide:
                offset, filesz = struct.unpack_from(order + "Q16xQ", headers, at + 8)
            else:
                offset, filesz = struct.unpack_from(order + "I8xI", headers, at + 4)
            if offset + filesz > size:
                raise damaged(f"segment {i} (byte offset {offset}, {filesz} bytes) ends past "
                              "the end of the file")
        if shnum == 0:
            return
        sections = table(shoff, shentsize, shnum, "section header")
        for i in range(shnum):
            at = i * shentsize
            if wide:
                sh_type, offset, sh_size = struct.unpack_from(order + "4xI16xQQ", sections, at)
            else:
                sh_type, offset, sh_size = struct.unpack_from(order + "4xI8xII", sections, at)
            if sh_type != 8 and offset + sh_size > size:  # 8: SHT_NOBITS (.bss)
                raise damaged(f"section {i} (byte offset {offset}, {sh_size} bytes) ends "
                              "past the end of the file")


def warn_damaged_side_files(library_path: str, metadata: dict) -> list[str]:
    """A :class:`~bmlib_relax.errors.DamagedSideFileWarning` for each file the metadata
    records beside the library (``files``: the Relax source, its weights, the reports)
    that is there but no longer has its recorded SHA-256; returns their paths.  A file
    that is absent is no damage (a deployment may ship the library and its metadata
    only); a record that is no ``{name: digest}`` of plain names inside the artifact's
    folder is an ``ArtifactError`` (the metadata's own digest held, so it was written
    so)."""
    files = metadata.get("files", {})
    if not isinstance(files, dict):
        raise ArtifactError(f"{metadata_path(library_path)}: 'files' is not an object",
                            metadata_path(library_path))
    folder = os.path.dirname(os.path.abspath(library_path))
    damaged = []
    for name, digest in sorted(files.items()):
        if not isinstance(name, str) or not isinstance(digest, str) or \
                os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
            raise ArtifactError(f"{metadata_path(library_path)}: 'files' entry {name!r} is "
                                "not a file of the artifact's folder with its digest",
                                metadata_path(library_path))
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        if file_sha256(path) != digest:
            damaged.append(path)
            warnings.warn(DamagedSideFileWarning(
                f"{path}: SHA-256 differs from the one {metadata_path(library_path)} "
                "records: changed or damaged after export (the library itself is intact "
                "and loads; a model rebuilt from this file would not be the exported "
                "one)", path), stacklevel=3)
    return damaged


# TVM 0.27 never frees what ``tvm.runtime.load_module`` reads from a library: the
# executable, every weight constant in it, stays alive after the last reference to the
# module goes (each load of a ResNet-18 artifact grew the process by ~56 MB).  A process
# that loads the same artifact again -- a server reloading its model, a test suite --
# reuses the module of the first load instead: the same library bytes (the SHA-256 that
# verify_library has just checked), each LoadedModel still with a VM of its own.  This
# holds no more memory than TVM already keeps.
_LOADED_LIBRARIES: dict[str, Any] = {}
_LOADED_LIBRARIES_LOCK = threading.Lock()


def _load_library(path: str, sha256: str, identity: tuple):
    """``tvm.runtime.load_module(path)``, once per library content (see above), of
    exactly the bytes ``sha256`` names.

    ``dlopen`` hands back the library it already opened under a path, whatever that
    path holds now: a model exported again to the same path and loaded again in the
    same process ran the old code, while the hash check described the new file.  A
    path this process already opened with other content is therefore loaded from a
    private copy named by its content (:func:`_content_named_copy`).  ``identity``
    (:func:`file_identity` before the hash was taken) must still hold after the load:
    a library replaced in between is refused rather than run unverified.
    """
    with _LOADED_LIBRARIES_LOCK:
        module = _LOADED_LIBRARIES.get(sha256)
        if module is not None:
            return module
        load_path = os.path.abspath(path)
        if _OPENED_PATHS.get(load_path, sha256) != sha256:
            load_path = _content_named_copy(path, sha256)
        try:
            with _native_lines_dropped(_VM_SCOPE_NOISE):
                module = tvm.runtime.load_module(load_path)
        except Exception as exc:  # noqa: BLE001 - the hash matched, so the file is what was written
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                         type(exc).__name__)
            raise ArtifactError(f"{path}: TVM cannot load the library: {first}", path) from None
        _OPENED_PATHS[load_path] = sha256
        if load_path == os.path.abspath(path) and file_identity(path) != identity:
            raise ArtifactError(f"{path}: the library was replaced while it was being loaded; "
                                "load it again", path)
        _LOADED_LIBRARIES[sha256] = module
        return module


#: The library content (SHA-256) each path this process handed to ``load_module`` held
#: then: ``dlopen`` keeps answering that path with it.
_OPENED_PATHS: dict[str, str] = {}
_PRIVATE_COPIES: list[str] = []  # the folder of content-named copies, once made


def file_identity(path: str) -> tuple:
    """What changes when a file is replaced or rewritten (device, inode, size, mtime)."""
    info = os.stat(path)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _content_named_copy(path: str, sha256: str) -> str:
    """A private copy of the library ``path``, named by its SHA-256 (a name ``dlopen``
    never saw with other content), checked against ``sha256`` as it is written; removed
    when the process exits."""
    if not _PRIVATE_COPIES:
        folder = tempfile.mkdtemp(prefix="bmlib-relax-libraries-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _PRIVATE_COPIES.append(folder)
    copy = os.path.join(_PRIVATE_COPIES[0], sha256 + (os.path.splitext(path)[1] or ".so"))
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as source, open(copy, "wb") as target:
            for chunk in iter(lambda: source.read(_HASH_CHUNK), b""):
                digest.update(chunk)
                target.write(chunk)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot copy the library to load it again: {exc}",
                            path) from None
    if digest.hexdigest() != sha256:
        os.unlink(copy)
        raise ArtifactError(f"{path}: the library was replaced while it was being loaded; "
                            "load it again", path)
    return copy


class LoadedModel(ModelRunner):
    """A model loaded from an ``export_library`` artifact, verified before it is opened."""

    def __init__(self, path: str, device: Any = None, num_threads: Optional[int] = None):
        if os.path.isdir(path):
            raise ArtifactError(f"{path}: is a directory, not an artifact library", path)
        if not os.path.exists(path):
            from .preflight import missing_file_message

            raise ArtifactError(missing_file_message(path, "artifact"), path)
        self.path = path
        self.metadata = read_metadata(path)
        identity = file_identity(path)  # the file the hash below describes
        verify_library(path, self.metadata)
        warn_damaged_side_files(path, self.metadata)
        module = _load_library(path, self.metadata["sha256"], identity)
        specs = list(self.metadata["inputs"])
        super().__init__(module, [s["name"] for s in specs], specs, device, num_threads,
                         recursive=self.metadata.get("recursive") is True)
        self.memory_needs = memory.needs_from_record(self.metadata.get("largest_tensor"))

    def flops(self, *args: Any, **kwargs: Any) -> Optional[dict[str, int]]:
        """``{"total", "offloaded", "dims"}`` of one run on these inputs, the formulas of
        the artifact's metadata evaluated at the symbolic dims the inputs fix (None for
        an artifact written without FLOPs)."""
        from .flops import evaluate_flops_text

        record = self.metadata.get("flops")
        if not isinstance(record, dict):
            return None
        dims = symbolic_dims_of(self.input_specs, self._arrange(args, kwargs))
        try:
            counts = {k: evaluate_flops_text(str(record[k]), dims)
                      for k in ("total", "offloaded")}
        except (KeyError, ValueError) as exc:
            raise ArtifactError(f"{self.path}: FLOPs in its metadata cannot be evaluated: "
                                f"{exc}", self.path) from None
        return {**counts, "dims": dims}


def load(path: str, device: Any = None, num_threads: Optional[int] = None,
         remote: Any = None) -> ModelRunner:
    """Load a model artifact written by ``export_library`` / ``bmlib-relax convert``.

    Raises ``ArtifactError`` when the metadata beside it is missing or malformed,
    or the library's size or SHA-256 differs from what the metadata records.
    ``num_threads``: default ``$TVM_NUM_THREADS``, else every CPU available.
    ``remote``: a ``tvm.rpc`` session; the artifact is uploaded and run there
    (:mod:`bmlib_relax.rpc`), ``device`` defaulting to the remote CPU.
    """
    if remote is not None:
        from .rpc import load_remote

        return load_remote(path, remote, device)
    return LoadedModel(os.fspath(path), device, num_threads)
