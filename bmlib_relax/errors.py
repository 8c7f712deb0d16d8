"""Exceptions raised by bmlib-relax.

Every error a user can meet derives from :class:`BmlibError` and names the place
it is about: a ``file:line:column`` for text, an op name for conversion, a
parameter name for weights, a partition name for the backend.  The CLI catches
exactly this family and turns it into a one-line message and exit code 2.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence


class BmlibError(Exception):
    """Base class of all bmlib-relax errors."""


class ParseError(BmlibError, ValueError):
    """Malformed Relay text.

    Carries ``line`` and ``column`` (1-based), ``source_name`` and the offending
    source line; ``str()`` shows ``file:line:column: message``, the line and a caret.
    """

    def __init__(self, message: str, line: int, column: int, source_name: str = "<string>",
                 source_line: Optional[str] = None):
        self.message = message
        self.line = line
        self.column = column
        self.source_name = source_name
        self.source_line = source_line
        super().__init__(self._format())

    def _format(self) -> str:
        text = f"{self.source_name}:{self.line}:{self.column}: {self.message}"
        if self.source_line is not None:
            line = self.source_line.rstrip("\n")
            caret_col = max(self.column - 1, 0)
            # Keep very long lines (minified dumps) readable around the caret.
            if len(line) > 160:
                start = max(caret_col - 80, 0)
                line = line[start:start + 160]
                caret_col -= start
            text += f"\n    {line}\n    {' ' * caret_col}^"
        return text


class UnsupportedOpError(BmlibError, NotImplementedError):
    """One or more Relay ops (or constructs) the importer cannot convert.

    ``ops`` lists ``(name, location)`` pairs, every unsupported use in the module,
    so a user sees the whole gap at once rather than one op per attempt.
    """

    def __init__(self, ops: Sequence[tuple[str, Optional[str]]], what: str = "op"):
        self.ops = list(ops)
        names = sorted({name for name, _ in self.ops})
        lines = [f"{len(names)} unsupported Relay {what}(s): {', '.join(names)}"]
        for name, where in self.ops[:50]:
            lines.append(f"  {where or '<unknown location>'}: {name}")
        if len(self.ops) > 50:
            lines.append(f"  ... and {len(self.ops) - 50} more")
        super().__init__("\n".join(lines))


class ConversionError(BmlibError, ValueError):
    """A supported op used with attributes or inputs the importer cannot express."""

    def __init__(self, message: str, op: Optional[str] = None, location: Optional[str] = None):
        self.op = op
        self.location = location
        prefix = f"{location}: " if location else ""
        where = f"{op}: " if op else ""
        super().__init__(f"{prefix}{where}{message}")


class RelayTypeError(ConversionError):
    """Relay type checking failed (``relay.transform.InferType``): names the call (op and
    ``file:line:column`` when the program was parsed), as Relay's type errors did."""


class ParamError(BmlibError, ValueError):
    """A missing, unexpected, mis-shaped or mis-typed parameter; names the parameter."""

    def __init__(self, message: str, name: Optional[str] = None):
        self.name = name
        super().__init__(message)


class ArtifactError(BmlibError, ValueError):
    """A model artifact that is missing, damaged or not an artifact; names the file.

    Raised before TVM opens a library whose size or SHA-256 differs from its
    metadata (a truncated shared object would kill the process with SIGBUS).
    """

    def __init__(self, message: str, path: Optional[str] = None):
        self.path = path
        super().__init__(message)


class LegacyApiError(BmlibError, ValueError):
    """A ported TVM v0.19 script or legacy pattern table used a TVM/Relay API this project
    cannot serve that way (``relay.build``'s graph JSON, a Relay C++ global function, ...);
    ``api`` names the call, the message what to use instead where there is something."""

    def __init__(self, message: str, api: Optional[str] = None):
        self.api = api
        super().__init__(message)


class UnsupportedPassError(BmlibError):
    """A Relay pass with no faithful equivalent here, or applied to what it cannot
    rewrite (names the pass)."""


class UserCodeError(BmlibError):
    """User code run by bmlib-relax (a pattern check function, ...) raised or called
    ``sys.exit()``; the message names the user function and what it raised.

    It takes a message only, so TVM's FFI can rebuild it when it crosses a callback
    (registered with ``tvm_ffi.register_error`` where such callbacks are made).
    """


# Checks compiled into a model (``relax.op.assert_op``) start their message with this,
# so that a run that fails one raises :class:`RunCheckError`, not TVM's bare error.
RUN_CHECK_PREFIX = "bmlib-relax run check: "


class RunCheckError(BmlibError, ValueError):
    """A check compiled into the model failed at run time: the inputs make an op's
    result one the model cannot compute (e.g. an empty slice of a run-time-sized axis);
    the message names the op and its ``file:line:column``."""


class RunMemoryError(BmlibError, MemoryError):
    """A run needs more memory than this process may have (see :mod:`.memory`): names
    the partition or op, its Relay ``file:line:column`` (``location``) and the sizes."""

    def __init__(self, message: str, location: Optional[str] = None):
        self.location = location
        super().__init__(message)


class CodegenError(BmlibError, RuntimeError):
    """The bmlib codegen could not lower a partition (names it and the op)."""


class ParamFormatError(ParamError):
    """A malformed weights payload: ``.params`` bytes, ``.npz`` archive or ``#[metadata]``.

    ``source`` is the file (or ``<bytes>``), ``name`` the parameter / member / metadata
    entry concerned (``None`` when the damage precedes every name; ``kind`` says which,
    for the message) and ``offset`` the byte offset where the problem was found
    (``None`` when it is not about bytes).
    """

    def __init__(self, message: str, name: Optional[str] = None, offset: Optional[int] = None,
                 source: Optional[str] = None, kind: str = "parameter"):
        self.offset = offset
        self.source = source
        where = f"{source}: " if source else ""
        what = f"{kind} {name!r}: " if name is not None else ""
        at = f" (at byte {offset})" if offset is not None else ""
        super().__init__(f"{where}{what}{message}{at}", name)


class ArityMismatchError(CodegenError):
    """A bmlib PrimFunc whose parameter count differs from its call site.

    This is the Relax twin of Relay's ``num_args should be 8``; the verifier
    raises it at compile time, naming the partition, instead of letting the
    runtime assert fire.
    """

    def __init__(self, partition: str, expected: int, actual: int, detail: str = ""):
        self.partition = partition
        self.expected = expected
        self.actual = actual
        msg = (f"partition {partition!r}: PrimFunc takes {actual} arguments but its call "
               f"passes {expected} (inputs + outputs)")
        if detail:
            msg += f"; {detail}"
        super().__init__(msg)


class SignatureMismatchError(ArityMismatchError):
    """A bmlib PrimFunc with the right number of parameters but one of the wrong
    shape or dtype (a lowering that changed an output's shape, say): it would
    write past a buffer or read garbage at run time, so it fails at build time."""

    def __init__(self, partition: str, count: int, position: int, role: str,
                 expected: str, actual: str):
        self.partition = partition
        self.expected = self.actual = count  # the counts agree, one argument does not
        self.position = position
        CodegenError.__init__(
            self, f"partition {partition!r}: PrimFunc argument {position} ({role}) is "
                  f"{actual} but the partition function declares {expected}")


class UnboundShapeVarError(CodegenError):
    """A partition whose shapes use a symbolic dim that no parameter's shape holds as a
    whole dim (an output-only ``m``, or ``n`` only inside ``2 * n``): the PrimFunc takes
    its symbolic dims from its input buffers, so it could not know that dim."""

    def __init__(self, partition: str, role: str, shape: str, var: str):
        self.partition = partition
        self.role = role
        self.var = var
        super().__init__(
            f"partition {partition!r}: {role} has shape {shape}, whose symbolic dim {var} "
            "is not a dim of any parameter; a bmlib PrimFunc binds its symbolic dims from "
            "its parameters' shapes only")


class TargetError(BmlibError, ValueError):
    """A target TVM 0.27 would refuse or misread; the message spells the dict form."""

    def __init__(self, message: str, target: Optional[str] = None):
        self.target = target
        super().__init__(message)


class BundleError(BmlibError, ValueError):
    """A golden bundle that is missing a file, damaged (SHA-256 differs from its
    manifest) or malformed; names the bundle and the file."""

    def __init__(self, message: str, path: Optional[str] = None):
        self.path = path
        super().__init__(message)


class SuspiciousWeightWarning(UserWarning):
    """A weight whose values make an op's results NaN for some entries, as no trained
    model's would: a batch_norm variance below ``-epsilon`` (its square root is NaN,
    which a following relu or clip turns into a plausible 0 or 6).  Relay computed the
    same; the weights are damaged, or bound to the wrong parameter.  ``param`` and
    ``location`` (``file:line:column``) name it."""

    def __init__(self, message: str, param: Optional[str] = None,
                 location: Optional[str] = None):
        self.param = param
        self.location = location
        super().__init__(message)


class DamagedSideFileWarning(UserWarning):
    """A file an artifact's metadata records beside its library (``model_relax.py``,
    ``weights.npz``, the reports) is no longer what was written: its SHA-256 differs.
    The library itself was verified and runs; a model rebuilt from the damaged source
    would not be the one exported.  ``path`` names the file."""

    def __init__(self, message: str, path: Optional[str] = None):
        self.path = path
        super().__init__(message)


class UnusedLoweringWarning(UserWarning):
    """A legacy lowering (``lowerings=``, ``--lowerings``' ``_LOWER_MAP``) names no
    composite of the pattern table: a typo leaves the composite it meant to the
    templates (Relay-era codegens failed on the missing key).  ``name`` is the key."""

    def __init__(self, message: str, name: Optional[str] = None):
        self.name = name
        super().__init__(message)


class RecoveredMetadataWarning(UserWarning):
    """Attribute values that Relay text printed as ``meta[runtime.BoxInt][N]`` (the
    ``#[metadata]`` section omitted) were recovered from the printed ``/* ty=... */``
    types.  ``recoveries`` lists one :class:`~bmlib_relax.relay.meta_recovery.Recovery`
    (location, op, attribute, reference, value) per recovered attribute, so a caller
    can check what was filled in; the message names each ``file:line:column`` and op.
    """

    def __init__(self, message: str, recoveries: Sequence[object] = ()):
        self.recoveries = list(recoveries)
        super().__init__(message)


def format_locations(spans: Iterable[object]) -> str:
    return ", ".join(str(s) for s in spans if s is not None)
