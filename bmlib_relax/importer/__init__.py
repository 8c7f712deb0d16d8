"""Relay AST → high-level Relax (``relax.op.*`` calls in a dataflow block)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import tvm

from ..deep_stack import on_deep_stack, recursion_limit
from ..errors import ConversionError, ParamError, ParseError
from ..relay import ast
from ..relay.params import ParamsLike, load_params
from .converter import ConvertContext, RelayImporter
from .registry import register_converter, supported_ops

RelayLike = Union[str, "os.PathLike[str]", ast.IRModule, ast.Function]


def as_relay_module(relay_mod: RelayLike) -> ast.IRModule:
    """Accept Relay text, a path to a Relay text file (a ``pathlib.Path``: a ``str`` is
    always text), a parsed module or a function (wrapped as ``@main``).  A file's
    errors are located in it (``model.relay:3:8``)."""
    if isinstance(relay_mod, ast.IRModule):
        return relay_mod
    if isinstance(relay_mod, ast.Function):
        return ast.IRModule.from_expr(relay_mod)
    if isinstance(relay_mod, str):
        from ..relay import parse

        _refuse_a_file_name(relay_mod)
        return parse(relay_mod)
    if isinstance(relay_mod, os.PathLike):
        from ..relay import parse

        path = Path(relay_mod)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ParamError(f"{path}: cannot read the Relay file: {reason}", str(path)) \
                from None
        return parse(text, str(path))
    raise TypeError(f"expected Relay text, a path to a Relay file, a relay IRModule or a "
                    f"Function, "
                    f"got {type(relay_mod).__name__}")


# What Relay text files are called; a str that is only such a name is no program.
_RELAY_FILE_SUFFIXES = (".relay", ".rly", ".txt", ".ir", ".tvm")


def _refuse_a_file_name(text: str) -> None:
    """A ``str`` is Relay text, so ``compile("model.relay")`` parsed the name as the
    expression ``model.relay`` (an op) and failed far from the mistake: name it."""
    name = text.strip()
    if not name or any(c.isspace() or c in "(){}%@=" for c in name):
        return
    if name.lower().endswith(_RELAY_FILE_SUFFIXES) or os.path.isfile(name):
        raise ParseError(f"{name!r} is a file name, not Relay text: a str is always read "
                         f"as text; pass pathlib.Path({name!r}) (or open(...).read())",
                         1, 1, "<string>", text)


#: Python frames the import may nest (on the deep stack's thread): about 16 000 nested
#: if/let/function bodies.  Measured on its 1 GiB stack with room to spare.
IMPORT_RECURSION_LIMIT = 100_000


#: Nesting (:func:`~bmlib_relax.relay.analysis.nesting_depth`) past which a program is
#: imported and compiled on the deep stack's thread; shallower ones, every real model,
#: stay on the caller's thread.
SHALLOW_NESTING = 48


def nests_deeply(module: ast.IRModule) -> bool:
    """Whether ``module`` nests past :data:`SHALLOW_NESTING` (any of its functions)."""
    from ..relay.analysis import nesting_depth

    return any(nesting_depth(f) > SHALLOW_NESTING for f in module.functions.values()
               if isinstance(f, ast.Function))


def import_relay(relay_mod: RelayLike, params: ParamsLike = None, *,
                 entry: str = "main", flatten_tuple_inputs: bool = False) -> tvm.IRModule:
    """Import a Relay program into a Relax ``IRModule`` (weights bound as constants).

    This is the plain path, usable without bmlib: ``tvm.compile`` the result.
    A tuple-typed input is a Relax tuple parameter, or with ``flatten_tuple_inputs``
    one tensor parameter per field (``t.0``, ``t.1.0``, ...).
    """
    module = as_relay_module(relay_mod)
    importer = RelayImporter(module, load_params(params),
                             flatten_tuple_inputs=flatten_tuple_inputs)

    def run() -> tvm.IRModule:
        with recursion_limit(IMPORT_RECURSION_LIMIT):
            return importer.run(entry)

    try:
        # The importer follows if/let/function bodies recursively, a few frames per
        # level through TVM's FFI: on the main thread's stack 400 nested ifs crashed
        # the process once the recursion limit allowed them.
        return on_deep_stack(run) if nests_deeply(module) else run()
    except RecursionError:
        raise ConversionError(
            f"the program nests too deeply to import (if/let/function bodies inside each "
            f"other past {IMPORT_RECURSION_LIMIT:,} Python frames, about "
            f"{IMPORT_RECURSION_LIMIT // 6:,} levels); flatten the nesting (a chain of "
            "ifs choosing values can be a where/select)") from None


__all__ = ["import_relay", "as_relay_module", "nests_deeply", "register_converter", "supported_ops",
           "ConvertContext", "RelayImporter"]
