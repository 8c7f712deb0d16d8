"""Recursive-descent parser for Relay text (``#[version = "0.0.5"]``).

Reads what TVM's ``mod.astext()`` printed -- modules of ``def @name(...) {...}``
and ``type`` declarations, bare expressions, old v0.0.4 ``fn`` dumps -- into the
:mod:`bmlib_relax.relay.ast` node classes without TVM's Relay.

Design notes (why the code looks the way it does):

* Graph bindings ``%3 = e;`` are *names*, not ``Let`` nodes: a later ``%3`` is the
  very same object, so the result is a DAG exactly like TVM's in-memory IR.
* Sequences of ``let``/graph bindings are parsed in a loop and the ``Let`` nodes
  built afterwards, so A-normal-form dumps with thousands of chained ``let`` do
  not recurse.  Real nesting (parentheses, calls, closures) is bounded by
  :data:`MAX_NESTING`; beyond it a :class:`ParseError` is raised instead of a
  ``RecursionError``.
* ``%name.1`` is ambiguous (ONNX names like ``%input.1`` vs the projection
  ``%x.1``); it is resolved against the scope: the whole name if bound, else the
  longest bound prefix followed by numeric projections.
* Scopes follow v0.19's ScopeStack, whose ``insert`` kept the *first* binding of a
  name in one scope: such a second binding (a repeated parameter, pattern variable
  or ``%N``, or a body's first ``let`` reusing a parameter) is a :class:`ParseError`
  here rather than a silently ignored binding; shadowing in a nested scope is fine.
* Every syntax error is a :class:`ParseError` naming what was expected.
"""
from __future__ import annotations

import gc
import math
import re
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Union

import numpy as np

from ..errors import ParseError, RecoveredMetadataWarning
from . import ast as A
from .meta_recovery import BOX_KIND_PREFIX, Recovery, box_refs, recover_attrs
from .tokenizer import EOF, Token, TokenStream, tokenize

__all__ = ["parse", "fromtext", "parse_expr", "parse_type", "MAX_NESTING"]

#: Deepest allowed nesting of expressions/types/patterns/attribute lists
#: (counted once per nested expression, type, pattern or list).
MAX_NESTING = 1000
# Python frames used per nesting level is < 10; keep headroom above that.
_RECURSION_LIMIT = MAX_NESTING * 12 + 2000

_KEYWORDS = frozenset({
    "fn", "let", "if", "else", "match", "def", "type", "extern", "free_var", "meta",
})

#: Binary operators of the (v0.0.4-era) infix syntax: token -> (precedence, op name).
_BINOPS: dict[str, tuple[int, str]] = {
    "*": (4, "multiply"), "/": (4, "divide"),
    "+": (3, "add"), "-": (3, "subtract"),
    "<": (2, "less"), ">": (2, "greater"), "<=": (2, "less_equal"), ">=": (2, "greater_equal"),
    "==": (1, "equal"), "!=": (1, "not_equal"),
}

_NUMBER_RE = re.compile(
    r"(?P<sign>-*)(?:(?P<special>inf|nan)|(?P<int>\d+)(?P<frac>\.\d+)?(?P<exp>[eE][+-]?\d+)?)"
    r"(?P<suffix>[A-Za-z_]\w*)?\Z")

#: Literal suffix -> dtype.
_SUFFIX_DTYPES: dict[str, str] = {
    "f": "float32", "f16": "float16", "f32": "float32", "f64": "float64",
    "i": "int32", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
}

_DTYPE_RE = re.compile(
    r"(?:bool|u?int(?:1|4|8|16|32|64)|float(?:8|16|32|64)|bfloat16|handle|void"
    r"|e4m3_float8|e5m2_float8|float8_e4m3fn|float8_e5m2|custom\[\w+\]\d+)(?:x\d+)?\Z")

_VERSION_RE = re.compile(r"\s*v0\.0\.(\d+)[ \t]*(?=\n|$)")

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "0": "\0",
            "b": "\b", "f": "\f"}
#: One escape of a string literal.  A run of ``\xHH`` is collected by the caller rather
#: than by a repeated group here: ``re`` keeps backtracking state per repetition of a
#: group (about 40 bytes per input byte on a long run of escapes).
_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.S)

#: ``%a.1.2`` may name a variable ``a.1`` -- at most this many trailing numeric
#: segments are tried as part of a variable name before they must be projections.
_MAX_NUMERIC_NAME_PARTS = 8

_CLOSERS = {"(": ")", "[": "]", "{": "}"}

#: Digits allowed in an index (tuple projection, ``meta[...][N]``, ``%x.N``):
#: more than any real index, few enough that ``int()`` never meets Python's
#: int-string limit (4300 digits) on a literal of thousands of digits.
_MAX_INDEX_DIGITS = 18


def _unescape(body: str) -> str:
    """Decode the escapes of a string literal (``\\n``, ``\\"``, ``\\xC3\\xA9``, ``\\u00e9``).

    v0.19's printer writes strings with support::StrEscape: ``\\"``, ``\\\\``, ``\\t``,
    ``\\r``, ``\\n`` and ``\\xHH`` for every other byte outside ' '..'~'; this is its
    inverse.  (v0.19's own tokenizer kept the text between the quotes verbatim -- its
    TODO, apache/tvm#6153 -- so "caf\\xC3\\xA9" stayed those 12 characters there; the
    decoded value is the attribute the printer was given, which is what the text means.)
    Raises ``ValueError`` when ``\\xHH`` bytes are not UTF-8.
    """
    if "\\" not in body:
        return body
    pieces: list[str] = []
    hex_run = bytearray()
    run_end = -1  # where the pending run of \xHH escapes ended
    pos = 0
    for m in _ESCAPE_RE.finditer(body):
        start, code = m.start(), m.group(1)
        is_hex = len(code) == 3 and code[0] == "x"
        if hex_run and (start != run_end or not is_hex):
            pieces.append(_decode_hex_run(hex_run))
            hex_run.clear()
        pieces.append(body[pos:start])
        pos = m.end()
        if is_hex:
            # The printer's StrEscape wrote each byte of the UTF-8 value outside
            # ' '..'~' as \xHH, so a run of them is the UTF-8 encoding of the text.
            hex_run.append(int(code[1:], 16))
            run_end = pos
        elif len(code) == 5:
            pieces.append(chr(int(code[1:], 16)))
        else:
            pieces.append(_ESCAPES.get(code, code))
    if hex_run:
        pieces.append(_decode_hex_run(hex_run))
    pieces.append(body[pos:])
    return "".join(pieces)


def _decode_hex_run(raw: bytearray) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        shown = "".join(f"\\x{b:02X}" for b in raw[max(0, err.start - 8):err.end + 8])
        raise ValueError(
            f"the \\x escapes are not UTF-8 text (byte {err.start} of a run of "
            f"{len(raw)}: ...{shown}...)") from None


def _literal_sign(m: re.Match) -> int:
    """-1 for an odd run of '-' before a literal, as v0.19's TokenizeOnce counted it."""
    return -1 if len(m.group("sign")) % 2 else 1


def _float_literal_value(m: re.Match) -> float:
    """The double a float literal denotes (v0.19 ParseNumber: stod, then the sign)."""
    special = m.group("special")
    if special:
        magnitude = float(special)
    else:
        magnitude = float(m.group("int") + (m.group("frac") or "") + (m.group("exp") or ""))
    return magnitude * _literal_sign(m)


#: dtypes written without their bits, which Relay's parser read as TVM's
#: ``String2DLDataType`` does: 32 bits (``def @main(%n: int)`` in its own tests).
_BARE_DTYPES = {"int": "int32", "uint": "uint32", "float": "float32"}


def _tvm_dtype_name(name: str) -> str:
    """A dtype as TVM 0.27 spells it: ``int`` is ``int32`` (``String2DLDataType``), and
    v0.19's ``e4m3_float8``/``e5m2_float8`` are ``float8_e4m3fn``/``float8_e5m2``."""
    from .metadata import canonical_dtype_name

    return canonical_dtype_name(_BARE_DTYPES.get(name, name))


def is_dtype(name: str) -> bool:
    """True if ``name`` is a scalar dtype such as ``float32`` or ``int8``."""
    return _DTYPE_RE.match(name) is not None


@contextmanager
def _parsing() -> Iterator[None]:
    """Run a parse with recursion headroom and the cyclic GC paused.

    The recursion limit is raised so MAX_NESTING (not Python) bounds the depth.
    The GC is paused because a model dump allocates ~10^6 small acyclic objects
    (tokens, nodes, spans); generational collections triggered by them cost as
    much time as the parse itself and can free nothing.
    """
    old = sys.getrecursionlimit()
    if old < _RECURSION_LIMIT:
        sys.setrecursionlimit(_RECURSION_LIMIT)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()
        if old < _RECURSION_LIMIT:
            sys.setrecursionlimit(old)


def _describe(tok: Token) -> str:
    if tok.kind == EOF:
        return "end of input"
    return repr(tok.text) if len(tok.text) <= 40 else repr(tok.text[:37] + "...")


class _Parser:
    """Parser state over one token stream.  One method per grammar rule."""

    def __init__(self, stream: TokenStream, source_name: str,
                 metadata: Optional[dict[str, Any]] = None):
        self.toks = stream.tokens + [stream.tokens[-1]] * 4
        self.ty_comments = stream.ty_comments
        self.lines = stream.lines
        self.source = source_name
        self.metadata = metadata
        self.pos = 0
        self.depth = 0
        self.scopes: list[dict[str, A.Expr]] = [{}]
        # The binding token of each name of ``scopes`` (parallel to it), for the message
        # refusing a second binding in one scope (see :meth:`bind`).
        self.bind_sites: list[dict[str, Token]] = [{}]
        # ``free_var`` declarations: one table for the whole parse, searched after every
        # scope, as v0.19's ScopeStack::free_vars.
        self.free_vars: dict[str, A.Var] = {}
        # The token binding each graph number of the current definition (see
        # :meth:`bind_value`).
        self.graph_sites: dict[str, Token] = {}
        # Every graph binding (``%3 = ...``) of the current definition, scopes closed
        # or not: TVM's printer numbers them once per module and names a node where it
        # first prints it, which may be inside an ``if`` branch the node is used after
        # (Relay's parser kept one flat table and resolved such a use to that node).
        self.graph_bindings: dict[str, A.Expr] = {}
        self.type_scopes: list[dict[str, A.TypeVar]] = [{}]
        self.globals: dict[str, A.GlobalVar] = {}
        self.constructors: dict[str, A.Constructor] = {}
        self.ctor_defs: dict[str, A.ConstructorDef] = {}
        self.type_defs: dict[str, A.TypeData] = {}
        self.prescanned: dict[int, int] = {}  # token index of 'type' -> index after decl
        self.literal_cache: dict[str, np.ndarray] = {}
        self.line_offset = 0   # used when parsing text embedded in a comment
        self.col_offset = 0
        # meta[runtime.Box*] attribute values seen, those recovered from printed
        # types (no #[metadata]), and why the others could not be (by location).
        self.box_refs_seen = 0
        self.recoveries: list[Recovery] = []
        self.unrecovered: dict[str, str] = {}

    # ------------------------------------------------------------------ helpers
    def peek(self, k: int = 0) -> Token:
        # The token list is padded with EOF tokens, so small look-aheads never overrun.
        return self.toks[self.pos + k]

    def next(self) -> Token:
        tok = self.toks[self.pos]
        if tok.kind != EOF:
            self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        return self.toks[self.pos].text == text

    def accept(self, text: str) -> bool:
        if self.toks[self.pos].text == text:
            self.pos += 1
            return True
        return False

    def expect(self, text: str, what: str = "") -> Token:
        tok = self.toks[self.pos]
        if tok.text == text and tok.kind != "STRING":
            self.pos += 1
            return tok
        raise self.error_expected(f"'{text}'" + (f" {what}" if what else ""), tok)

    def error(self, message: str, tok: Optional[Token] = None) -> ParseError:
        tok = tok or self.peek()
        line, col = tok.line, tok.col
        if self.line_offset:
            col = col + self.col_offset - 1 if line == 1 else col
            line += self.line_offset - 1
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return ParseError(message, line, col, self.source, src)

    def error_expected(self, what: str, tok: Token, context: str = "") -> ParseError:
        if tok.kind == EOF:
            where = context or f"looking for {what}"
            return self.error(f"unexpected end of input while {where}", tok)
        return self.error(f"expected {what}, got {_describe(tok)}", tok)

    def span(self, tok: Token) -> A.Span:
        if self.line_offset:
            col = tok.col + self.col_offset - 1 if tok.line == 1 else tok.col
            return A.Span(tok.line + self.line_offset - 1, col, self.source)
        return A.Span(tok.line, tok.col, self.source)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"nesting too deep (more than {MAX_NESTING} levels)")

    def leave(self) -> None:
        self.depth -= 1

    # ------------------------------------------------------------------ scopes
    def lookup(self, name: str) -> Optional[A.Expr]:
        """Innermost binding of ``name``, then a ``free_var`` (v0.19 ScopeStack::Lookup)."""
        for scope in reversed(self.scopes):
            e = scope.get(name)
            if e is not None:
                return e
        return self.free_vars.get(name)

    def push_scope(self) -> None:
        self.scopes.append({})
        self.bind_sites.append({})

    def pop_scope(self) -> None:
        self.scopes.pop()
        self.bind_sites.pop()

    def bind(self, name: str, value: A.Expr, tok: Token, what: str) -> None:
        """Bind ``name`` in the innermost scope, refusing a second binding there.

        v0.19's ScopeStack::Add is ``unordered_map::insert``, which keeps the *first*
        binding: a repeated parameter, pattern variable, or a function's first ``let``
        reusing a parameter's name was silently ignored, every use meaning the first
        one.  TVM's printer never writes that, so rather than pick a meaning the text
        does not show, it is an error.  Shadowing in a nested scope stays legal.
        """
        self.check_unbound(name, tok, what)
        self.scopes[-1][name] = value
        self.bind_sites[-1][name] = tok

    def check_unbound(self, name: str, tok: Token, what: str) -> None:
        """Raise if ``name`` is already bound in the innermost scope (see :meth:`bind`)."""
        site = self.bind_sites[-1].get(name)
        if site is not None:
            raise self.rebinding_error(what, name, site, tok)

    def rebinding_error(self, what: str, name: str, site: Union[A.Span, Token],
                        tok: Token) -> ParseError:
        if isinstance(site, Token):
            site = self.span(site)
        return self.error(
            f"{what} %{name} rebinds a name already bound in the same scope at {site}; "
            "Relay's parser kept the first binding and ignored this one, so the text "
            "would not mean what it shows: rename one of them", tok)

    def lookup_type_var(self, name: str) -> Optional[A.TypeVar]:
        for scope in reversed(self.type_scopes):
            tv = scope.get(name)
            if tv is not None:
                return tv
        return None

    def global_var(self, name: str, tok: Token) -> A.GlobalVar:
        gv = self.globals.get(name)
        if gv is None:
            gv = self.globals[name] = A.GlobalVar(name, span=self.span(tok))
        return gv

    # ------------------------------------------------------------------ module
    def parse_version(self) -> None:
        """Skip ``#[version = "0.0.5"]``."""
        if self.peek().text != "#[":
            return
        self.next()
        key = self.next()
        if key.text != "version":
            raise self.error(f"expected 'version' after '#[', got {_describe(key)}", key)
        self.expect("=", "after 'version'")
        ver = self.next()
        if ver.kind != "STRING":
            raise self.error_expected("a version string", ver)
        self.expect("]", "to close version attribute")

    def parse_module(self) -> tuple[dict[str, A.Function], dict[str, A.TypeData]]:
        self.parse_version()
        self.prescan_type_defs()
        functions: dict[str, A.Function] = {}
        while self.peek().kind != EOF:
            tok = self.peek()
            if tok.text == "def" and tok.kind == "IDENT":
                name, func = self.parse_def()
                if name in functions:
                    raise self.error(f"duplicate definition of global function @{name}", tok)
                functions[name] = func
            elif tok.text in ("type", "extern") and tok.kind == "IDENT":
                after = self.prescanned.get(self.pos)
                if after is None:  # not a well-placed declaration: report why
                    self.parse_type_def()
                    after = self.pos
                self.pos = after
            elif not functions and self.pos_is_first_item():
                body = self.parse_seq()
                if self.peek().kind != EOF:
                    raise self.error_expected("end of input", self.peek())
                if isinstance(body, A.Function):
                    functions["main"] = body
                else:
                    from .analysis import free_vars
                    functions["main"] = A.Function(tuple(free_vars(body)), body,
                                                   span=body.span)
            else:
                raise self.error(
                    f"expected 'def', 'type' or end of input, got {_describe(tok)}", tok)
        return functions, self.type_defs

    def pos_is_first_item(self) -> bool:
        """A bare expression is only allowed as the whole module (besides types)."""
        for i in range(self.pos):
            if self.toks[i].text == "def" and self.toks[i].kind == "IDENT":
                return False
        return True

    def prescan_type_defs(self) -> None:
        """Parse all top-level ``type`` declarations first: constructors may be
        used (in ``def`` bodies) before the declaration that introduces them."""
        depth = 0
        i = self.pos
        toks = self.toks
        save = self.pos
        while i < len(toks):
            tok = toks[i]
            t = tok.text
            if tok.kind == "OP":
                if t in "([{":
                    depth += 1
                elif t in ")]}":
                    depth -= 1
            elif depth == 0 and tok.kind == "IDENT" and (
                    t == "type" or (t == "extern" and toks[i + 1].text == "type")):
                self.pos = i
                self.parse_type_def()
                self.prescanned[i] = self.pos
                i = self.pos
                continue
            i += 1
        self.pos = save

    def parse_type_def(self) -> A.TypeData:
        """``type Name[A, B] { Ctor(T, ...), ... }`` or ``extern type Name[A]``."""
        start = self.peek()
        is_extern = self.accept("extern")
        self.expect("type")
        name_tok = self.next()
        if name_tok.kind != "IDENT" or name_tok.text in _KEYWORDS:
            raise self.error_expected("a type name", name_tok)
        name = name_tok.text
        if name in self.type_defs:
            raise self.error(f"duplicate definition of type {name}", name_tok)
        if name in self.constructors:
            raise self.error(f"type {name} has the same name as a constructor", name_tok)
        type_params = self.parse_type_params() if self.at("[") else ()
        self.type_scopes.append({tv.name: tv for tv in type_params})
        # Register first so recursive types (List[A] inside List) resolve.
        ctors: list[A.ConstructorDef] = []
        if not is_extern:
            self.expect("{", f"to open the body of type {name}")
            while not self.at("}"):
                ctors.append(self.parse_constructor_def(name))
                if not self.accept(","):
                    break
            self.expect("}", f"to close the body of type {name}")
        self.type_scopes.pop()
        data = A.TypeData(name, type_params, tuple(ctors), span=self.span(start))
        self.type_defs[name] = data
        return data

    def parse_constructor_def(self, type_name: str) -> A.ConstructorDef:
        tok = self.next()
        if tok.kind != "IDENT" or tok.text in _KEYWORDS:
            raise self.error_expected(f"a constructor of type {type_name}", tok)
        name = tok.text
        if name in self.constructors:
            raise self.error(f"duplicate constructor {name}", tok)
        if name in self.type_defs:
            raise self.error(f"constructor {name} has the same name as a type", tok)
        inputs: list[A.Type] = []
        if self.accept("("):
            while not self.at(")"):
                inputs.append(self.parse_type())
                if not self.accept(","):
                    break
            self.expect(")", f"to close the inputs of constructor {name}")
        self.constructors[name] = A.Constructor(name, span=self.span(tok))
        cdef = A.ConstructorDef(name, tuple(inputs), span=self.span(tok))
        self.ctor_defs[name] = cdef
        return cdef

    def parse_type_params(self) -> tuple[A.TypeVar, ...]:
        self.expect("[")
        params: list[A.TypeVar] = []
        while not self.at("]"):
            tok = self.next()
            if tok.kind != "IDENT":
                raise self.error_expected("a type parameter name", tok)
            params.append(A.TypeVar(tok.text))
            if not self.accept(","):
                break
        self.expect("]", "to close type parameters")
        return tuple(params)

    def parse_def(self) -> tuple[str, A.Function]:
        """``def @name[T](params) -> Ret { body }``."""
        def_tok = self.expect("def")
        name_tok = self.next()
        if name_tok.kind != "GLOBAL":
            raise self.error_expected("a global name like @main after 'def'", name_tok)
        name = name_tok.text[1:]
        self.global_var(name, name_tok)
        self.graph_bindings = {}
        self.graph_sites = {}
        func = self.parse_function_rest(def_tok, f"@{name}")
        return name, func

    # ------------------------------------------------------------------ functions
    def parse_function_rest(self, start: Token, what: str) -> A.Function:
        """Everything after ``fn``/``def @name``: type params, params, ret type, body."""
        type_params = self.parse_type_params() if self.at("[") else ()
        self.type_scopes.append({tv.name: tv for tv in type_params})
        self.push_scope()
        self.expect("(", f"to open the parameter list of {what}")
        params: list[A.Var] = []
        attrs: dict[str, Any] = {}
        while not self.at(")"):
            tok = self.peek()
            if tok.kind == "LOCAL":
                var = self.parse_var_decl()
                params.append(var)
                self.bind(var.name, var, tok, "parameter")
            elif tok.kind == "IDENT" and self.peek(1).text == "=":
                key, value = self.parse_attr()
                attrs[key] = value
            else:
                raise self.error_expected(
                    f"a parameter or ')' to close the parameter list of {what}", tok,
                    f"parsing the parameter list of {what}")
            if not self.accept(","):
                break
        self.expect_close(")", f"the parameter list of {what}")
        ret_type = None
        if self.accept("->"):
            ret_type = self.parse_type()
        self.expect("{", f"to open the body of {what}")
        body = self.parse_seq()
        self.expect_close("}", f"the body of {what}")
        self.pop_scope()
        self.type_scopes.pop()
        return A.Function(tuple(params), body, ret_type, type_params, A.Attrs(attrs),
                          span=self.span(start))

    def expect_close(self, closer: str, what: str) -> Token:
        tok = self.peek()
        if tok.text == closer and tok.kind == "OP":
            return self.next()
        if tok.kind == EOF:
            raise self.error(f"unexpected end of input while parsing {what}", tok)
        raise self.error(f"expected '{closer}' to close {what}, got {_describe(tok)}", tok)

    def parse_var_decl(self) -> A.Var:
        """``%x``, ``%x: T``, ``%x: T {attrs}`` (a binder, not a use)."""
        tok = self.next()
        if tok.kind != "LOCAL":
            raise self.error_expected("a variable like %x", tok)
        # TVM printed param attributes after the type; newer printers before it.
        attrs = self.parse_var_attrs(tok)
        ty = self.parse_type() if self.accept(":") else None
        if not attrs:
            attrs = self.parse_var_attrs(tok)
        return A.Var(tok.text[1:], ty, A.Attrs(attrs) if attrs else A.EMPTY_ATTRS,
                     span=self.span(tok))

    def parse_var_attrs(self, var_tok: Token) -> dict[str, Any]:
        """Optional ``{key=value, ...}`` after a parameter name or type."""
        attrs: dict[str, Any] = {}
        if self.at("{") and self.peek(1).kind == "IDENT" and self.peek(2).text == "=":
            self.next()
            while not self.at("}"):
                key, value = self.parse_attr()
                attrs[key] = value
                if not self.accept(","):
                    break
            self.expect_close("}", f"the attributes of {var_tok.text}")
        return attrs

    # ------------------------------------------------------------------ sequences
    def parse_seq(self) -> A.Expr:
        """``(let %x = e; | %N = e; | free_var %x: T; | { seq } | e;)* e`` -- iterative.

        Scoping as v0.19's ParseExpr/ParseBindingExpr: only the *first* ``let`` of the
        sequence binds in the enclosing scope (with the function's parameters or the
        match arm's pattern variables), so only it may clash (:meth:`bind`); each
        ``let`` then pushes a fresh scope, so later ones shadow freely.
        """
        lets: list[tuple[A.Var, A.Expr, A.Span]] = []
        scope = self.scopes[-1]
        first_let = True
        while True:
            tok = self.peek()
            if tok.kind == "IDENT" and tok.text == "let":
                self.next()
                var_tok = self.peek()
                if var_tok.kind != "LOCAL":
                    raise self.error_expected("a variable like %x after 'let'", var_tok)
                var = self.parse_var_decl()
                if first_let:
                    self.bind(var.name, var, var_tok, "let")
                    first_let = False
                self.expect("=", f"after 'let {var_tok.text}'")
                scope[var.name] = var  # let-bound closures may call themselves
                value = self.parse_expr()
                self.expect_semicolon("let binding")
                lets.append((var, value, self.span(tok)))
                continue
            if tok.kind == "LOCAL" and self.peek(1).text == "=":
                self.bind_value(tok, scope)
                continue
            if tok.kind == "IDENT" and tok.text == "free_var":
                self.next()
                var_tok = self.peek()
                var = self.parse_var_decl()
                self.bind_free_var(var, var_tok)
                self.accept(";")
                continue
            if tok.kind == "OP" and tok.text == "{":
                expr = self.parse_block_expr()
            else:
                expr = self.parse_expr()
            if self.at(";"):
                semi = self.next()
                if self.peek().kind == EOF or self.at("}") or self.at(")"):
                    break
                lets.append((A.Var("_", span=self.span(semi)), expr, self.span(semi)))
                continue
            break
        for var, value, span in reversed(lets):
            expr = A.Let(var, value, expr, span=span)
        return expr

    def bind_value(self, tok: Token, scope: dict[str, A.Expr]) -> None:
        """``%N = e;`` (a graph binding) or ``%name = e;`` (older dumps): name ``e``.

        v0.19's AddGraphBinding inserted into one flat table, keeping the first ``%N``;
        TVM's printer numbers nodes once per module, so a number bound twice in one
        definition (in any scope of it) is refused, like a name bound twice in one
        scope (:meth:`bind`).  Each ``def`` starts afresh: this project's printer
        numbers per definition (v0.19 would have resolved a reused number in a later
        ``def`` to the first definition's node, which no printer means).
        """
        name = tok.text[1:]
        is_graph = name.isdecimal()
        if is_graph:
            site = self.graph_sites.get(name)
            if site is not None:
                raise self.rebinding_error("graph binding", name, site, tok)
            self.graph_sites[name] = tok
        else:
            self.check_unbound(name, tok, "binding")
        self.pos += 2
        value = self.parse_expr()
        self.expect_semicolon(f"binding of {tok.text}")
        scope[name] = value
        self.bind_sites[-1][name] = tok
        if is_graph:
            self.graph_bindings[name] = value

    def bind_free_var(self, var: A.Var, tok: Token) -> None:
        """``free_var %x: T``: one table per parse, looked up after every scope (v0.19
        ScopeStack::AddFreeVar, an ``insert`` too: a repeated name is refused)."""
        first = self.free_vars.get(var.name)
        if first is not None:
            raise self.rebinding_error("free_var", var.name, first.span, tok)
        self.free_vars[var.name] = var

    def parse_block_expr(self) -> A.Expr:
        """``{ seq }`` as a statement, in a new scope (v0.19 ParseExpr, case kLCurly)."""
        self.enter()
        self.next()
        self.push_scope()
        body = self.parse_seq()
        self.pop_scope()
        self.expect_close("}", "block")
        self.leave()
        return body

    def expect_semicolon(self, what: str) -> None:
        tok = self.peek()
        if tok.text == ";":
            self.next()
            return
        if tok.kind == EOF:
            raise self.error(f"unexpected end of input while parsing {what}: expected ';'", tok)
        raise self.error(f"expected ';' after {what}, got {_describe(tok)}", tok)

    # ------------------------------------------------------------------ expressions
    def parse_expr(self) -> A.Expr:
        """Infix expression with precedence climbing (iterative over operators)."""
        self.enter()
        operands = [self.parse_unary()]
        ops: list[Token] = []
        while True:
            tok = self.peek()
            info = _BINOPS.get(tok.text) if tok.kind == "OP" else None
            if info is None:
                break
            self.next()
            while ops and _BINOPS[ops[-1].text][0] >= info[0]:
                self.reduce_binop(operands, ops)
            ops.append(tok)
            operands.append(self.parse_unary())
        while ops:
            self.reduce_binop(operands, ops)
        self.leave()
        return operands[0]

    def reduce_binop(self, operands: list[A.Expr], ops: list[Token]) -> None:
        tok = ops.pop()
        rhs = operands.pop()
        lhs = operands.pop()
        op = A.Op(_BINOPS[tok.text][1], span=self.span(tok))
        operands.append(A.Call(op, (lhs, rhs), span=self.span(tok)))

    def parse_unary(self) -> A.Expr:
        minus: list[Token] = []
        while self.at("-") and self.peek().kind == "OP":
            minus.append(self.next())
        expr = self.parse_postfix()
        for tok in reversed(minus):
            if isinstance(expr, A.Constant) and expr.data is not None and expr.data.ndim == 0 \
                    and expr.data.dtype != np.bool_:
                expr = A.Constant(self.negate_literal(expr.data, tok), span=self.span(tok))
            else:
                expr = A.Call(A.Op("negative", span=self.span(tok)), (expr,),
                              span=self.span(tok))
        return expr

    def parse_postfix(self) -> A.Expr:
        start = self.peek()
        expr = self.parse_atom()
        while True:
            tok = self.peek()
            if tok.kind == "PROJ":
                self.next()
                index = self.index_value(tok.text[1:], tok, "tuple index")
                expr = A.TupleGetItem(expr, index, span=self.span(tok))
            elif tok.text == "(" and tok.kind == "OP":
                expr = self.parse_call(expr, start)
            else:
                return expr

    def callee_name(self, expr: A.Expr) -> str:
        if isinstance(expr, (A.Op, A.Constructor)):
            return expr.name
        if isinstance(expr, A.GlobalVar):
            return "@" + expr.name
        if isinstance(expr, A.Var):
            return "%" + expr.name
        return "function"

    def parse_call(self, callee: A.Expr, start: Token) -> A.Call:
        """``callee(arg, ..., key=value, ...)``; trailing comma allowed."""
        self.next()
        args: list[A.Expr] = []
        attrs: dict[str, Any] = {}
        boxes_before = self.box_refs_seen
        while True:
            tok = self.peek()
            if tok.text == ")" and tok.kind == "OP":
                break
            if tok.kind == EOF:
                raise self.error("unexpected end of input while parsing call arguments", tok)
            if tok.kind == "IDENT" and self.peek(1).text == "=" and self.peek(1).kind == "OP":
                key, value = self.parse_attr()
                attrs[key] = value
            else:
                args.append(self.parse_expr())
            if not self.accept(","):
                tok = self.peek()
                if tok.text == ")":
                    break
                if tok.kind == EOF:
                    raise self.error("unexpected end of input while parsing call arguments",
                                     tok)
                raise self.error(f"expected ')' to close call to {self.callee_name(callee)}, "
                                 f"got {_describe(tok)}", tok)
        self.next()
        if self.box_refs_seen != boxes_before and isinstance(callee, A.Op):
            attrs = self.recover_boxed_attrs(callee.name, attrs, start)
        return A.Call(callee, tuple(args), A.Attrs(attrs) if attrs else A.EMPTY_ATTRS,
                      span=self.span(start))

    def recover_boxed_attrs(self, op_name: str, attrs: dict[str, Any],
                            start: Token) -> dict[str, Any]:
        """Fill ``meta[runtime.Box*]`` attribute values the metadata section would
        have held from the call's ``/* ty=... */`` comment (see :mod:`.meta_recovery`).

        Called right after the call's ``)``, the token its type comment follows.
        """
        counts = self.metadata.get("counts", {}) if self.metadata is not None else {}
        if all(ref.kind in counts for value in attrs.values() for ref in box_refs(value)):
            return attrs  # the #[metadata] section has them; the importer reads them
        location = str(self.span(start))
        filled, recoveries, reason = recover_attrs(
            op_name, attrs, self.ty_comment_type(self.pos - 1), location)
        self.recoveries.extend(recoveries)
        if reason is not None:
            self.unrecovered[location] = reason
        return filled

    def parse_atom(self) -> A.Expr:
        tok = self.peek()
        kind = tok.kind
        if kind == "LOCAL":
            self.next()
            return self.resolve_local(tok)
        if kind == "IDENT":
            return self.parse_ident_atom(tok)
        if kind == "NUMBER":
            self.next()
            return A.Constant(self.number_array(tok), span=self.span(tok))
        if kind == "GLOBAL":
            self.next()
            return self.global_var(tok.text[1:], tok)
        if kind == "OP" and tok.text == "(":
            return self.parse_paren()
        if kind == EOF:
            raise self.error("unexpected end of input while parsing an expression", tok)
        raise self.error(f"expected an expression, got {_describe(tok)}", tok)

    def parse_ident_atom(self, tok: Token) -> A.Expr:
        text = tok.text
        if text == "fn":
            self.next()
            return self.parse_function_rest(tok, "fn")
        if text == "if":
            return self.parse_if()
        if text == "match":
            return self.parse_match()
        if text == "meta":
            return self.parse_meta_expr()
        if text in ("True", "False"):
            self.next()
            return A.Constant(np.array(text == "True"), span=self.span(tok))
        if text in ("ref", "ref_read", "ref_write") and self.peek(1).text == "(":
            return self.parse_ref(tok)
        if text in _KEYWORDS:
            raise self.error(f"unexpected keyword '{text}'", tok)
        self.next()
        ctor = self.constructors.get(text)
        if ctor is not None:
            return ctor
        return A.Op(text, span=self.span(tok))

    def resolve_local(self, tok: Token) -> A.Expr:
        """``%name`` use: whole name if bound, else ``prefix`` + numeric projections."""
        name = tok.text[1:]
        expr = self.lookup(name)
        if expr is None and name.isdecimal():
            expr = self.graph_bindings.get(name)  # bound in a closed scope (see __init__)
        if expr is not None:
            return expr
        if "." in name:
            parts = name.split(".")
            first_digit = len(parts)  # parts[first_digit:] are all numeric
            while first_digit > 1 and parts[first_digit - 1].isdecimal():
                first_digit -= 1
            # Longest bound prefix first; a name never ends in more than a few
            # numeric segments, which keeps ``%x.0.0.0...`` linear.
            lowest = max(first_digit, 1)
            for cut in range(min(len(parts) - 1, lowest + _MAX_NUMERIC_NAME_PARTS), lowest - 1, -1):
                base = self.lookup(".".join(parts[:cut]))
                if base is not None:
                    span = self.span(tok)
                    for p in parts[cut:]:
                        base = A.TupleGetItem(base, self.index_value(p, tok, "tuple index"),
                                              span=span)
                    return base
        raise self.error(f"undefined variable {tok.text}{self.slash_hint(name)}", tok)

    def slash_hint(self, name: str) -> str:
        """Why ``%x/...`` is one (unknown) name when ``%x`` is bound: '/' is a name
        character in Relay (v0.19 IsIdent), so ``%x/%y`` or ``%x//c`` need a blank."""
        head = name.split("/", 1)[0]
        if head == name or self.lookup(head) is None:
            return ""
        return (f" ('/' continues a name, as in Relay: write a blank after %{head} "
                "before a division or a comment)")

    def parse_paren(self) -> A.Expr:
        """``()``, ``(e)``, ``(e,)``, ``(a, b, ...)``."""
        open_tok = self.next()
        if self.accept(")"):
            return A.Tuple((), span=self.span(open_tok))
        fields: list[A.Expr] = []
        trailing = False
        while True:
            self.push_scope()
            fields.append(self.parse_seq())
            self.pop_scope()
            if self.accept(","):
                trailing = True
                if self.at(")"):
                    break
                trailing = False
                continue
            break
        self.expect_close(")", "parenthesised expression" if len(fields) == 1 and not trailing
                          else "tuple")
        if len(fields) == 1 and not trailing:
            return fields[0]
        return A.Tuple(tuple(fields), span=self.span(open_tok))

    def parse_block(self, what: str) -> A.Expr:
        """``{ seq }`` in a new scope."""
        self.expect("{", f"to open {what}")
        self.push_scope()
        body = self.parse_seq()
        self.pop_scope()
        self.expect_close("}", what)
        return body

    def parse_if(self) -> A.If:
        tok = self.next()
        self.expect("(", "after 'if'")
        self.push_scope()
        cond = self.parse_seq()
        self.pop_scope()
        self.expect_close(")", "the condition of 'if'")
        then = self.parse_block("the then-branch of 'if'")
        self.expect("else", "after the then-branch of 'if'")
        other = self.parse_block("the else-branch of 'if'")
        return A.If(cond, then, other, span=self.span(tok))

    def parse_ref(self, tok: Token) -> A.Expr:
        self.next()
        self.next()  # '('
        first = self.parse_expr()
        if tok.text == "ref_write":
            self.expect(",", "between the arguments of ref_write")
            second = self.parse_expr()
            self.accept(",")
            self.expect_close(")", "call to ref_write")
            return A.RefWrite(first, second, span=self.span(tok))
        self.accept(",")
        self.expect_close(")", f"call to {tok.text}")
        if tok.text == "ref":
            return A.RefCreate(first, span=self.span(tok))
        return A.RefRead(first, span=self.span(tok))

    # ------------------------------------------------------------------ match
    def parse_match(self) -> A.Match:
        tok = self.next()
        complete = not self.accept("?")
        data = self.parse_expr()  # usually parenthesised: match (%x) / match (%a, %b)
        self.expect("{", "to open the clauses of 'match'")
        clauses: list[A.Clause] = []
        while not self.at("}"):
            clauses.append(self.parse_clause())
            if not self.accept(","):
                break
        self.expect_close("}", "the clauses of 'match'")
        return A.Match(data, tuple(clauses), complete, span=self.span(tok))

    def parse_clause(self) -> A.Clause:
        start = self.peek()
        self.push_scope()
        lhs = self.parse_pattern()
        self.expect("=>", "after a match pattern")
        if self.at("{"):
            self.next()
            rhs = self.parse_seq()
            self.expect_close("}", "the body of a match clause")
        else:
            rhs = self.parse_seq()
        self.pop_scope()
        return A.Clause(lhs, rhs, span=self.span(start))

    def parse_pattern(self) -> A.Pattern:
        self.enter()
        tok = self.peek()
        if tok.text == "_":
            self.next()
            pat: A.Pattern = A.PatternWildcard(span=self.span(tok))
        elif tok.kind == "LOCAL":
            var = self.parse_var_decl()
            self.bind(var.name, var, tok, "pattern variable")
            pat = A.PatternVar(var, span=self.span(tok))
        elif tok.text == "(":
            self.next()
            pats: list[A.Pattern] = []
            while not self.at(")"):
                pats.append(self.parse_pattern())
                if not self.accept(","):
                    break
            self.expect_close(")", "tuple pattern")
            pat = A.PatternTuple(tuple(pats), span=self.span(tok))
        elif tok.kind == "IDENT":
            self.next()
            ctor = self.constructors.get(tok.text)
            if ctor is None:
                raise self.error(f"unknown constructor {tok.text} in pattern", tok)
            pats = []
            if self.accept("("):
                while not self.at(")"):
                    pats.append(self.parse_pattern())
                    if not self.accept(","):
                        break
                self.expect_close(")", f"pattern {tok.text}(...)")
            pat = A.PatternConstructor(ctor, tuple(pats), span=self.span(tok))
        else:
            raise self.error_expected("a pattern", tok, "parsing a match pattern")
        self.leave()
        return pat

    # ------------------------------------------------------------------ literals / meta
    def index_value(self, digits: str, tok: Token, what: str) -> int:
        """``digits`` (already matched as decimal digits) as an int, bounded in length."""
        if len(digits.lstrip("0")) > _MAX_INDEX_DIGITS:
            raise self.error(f"{what} {digits[:20]}... is too large "
                             f"({len(digits)} digits)", tok)
        return int(digits)

    def number_array(self, tok: Token) -> np.ndarray:
        """Typed literal -> read-only 0-d numpy array (range-checked, no ``eval``).

        Equal literals share one array: dumps repeat ``1f``/``0`` thousands of times.
        """
        arr = self.literal_cache.get(tok.text)
        if arr is None:
            arr = self.literal_cache[tok.text] = self.make_number(tok)
            arr.flags.writeable = False
        return arr

    def make_number(self, tok: Token) -> np.ndarray:
        m = _NUMBER_RE.match(tok.text)
        if m is None:
            raise self.error(f"invalid numeric literal {tok.text!r}", tok)
        suffix = m.group("suffix")
        is_float_syntax = bool(m.group("frac") or m.group("exp") or m.group("special"))
        if suffix is None:
            if m.group("special"):
                raise self.error(f"invalid numeric literal {tok.text!r}", tok)
            dtype = "float32" if is_float_syntax else None
        else:
            dtype = _SUFFIX_DTYPES.get(suffix)
            if dtype is None:
                raise self.error(f"invalid literal suffix '{suffix}'", tok)
        sign = _literal_sign(m)
        if dtype is None or not dtype.startswith("float"):
            if is_float_syntax:
                raise self.error(f"invalid integer literal {tok.text!r}", tok)
            digits = m.group("int").lstrip("0")
            if len(digits) > 20:  # beyond every integer dtype (and int()'s str limit)
                raise self.error(f"integer literal {_describe(tok)} out of range "
                                 f"({len(m.group('int'))} digits)", tok)
            value = sign * int(m.group("int"))
            if dtype is None:
                dtype = "int32" if -2**31 <= value < 2**31 else "int64"
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise self.error(f"integer literal {tok.text} out of range for {dtype}", tok)
            return np.array(value, dtype=dtype)
        value = _float_literal_value(m)
        if not math.isfinite(value) and not m.group("special"):
            raise self.error(f"float literal {_describe(tok)} out of range for {dtype}", tok)
        if math.isfinite(value) and abs(value) > float(np.finfo(dtype).max):
            raise self.error(f"float literal {_describe(tok)} out of range for {dtype}", tok)
        if dtype == "float16":
            # v0.19 FloatImmToNDArray: __gnu_f2h_ieee(static_cast<float>(value)) -- the
            # double is rounded to float32 first, then to float16 (double rounding).
            return np.array(np.float32(value), dtype=dtype)
        return np.array(value, dtype=dtype)

    def negate_literal(self, data: np.ndarray, tok: Token) -> np.ndarray:
        """``-c`` for a scalar literal ``c``, refusing what would wrap around.

        (Relay had no unary minus: a '-' run folded into the literal, see the
        tokenizer; ``- -2147483648`` must not silently stay -2147483648.)
        """
        if data.dtype.kind in "iu":
            value = -int(data)
            info = np.iinfo(data.dtype)
            if not info.min <= value <= info.max:
                raise self.error(f"negated literal {value} out of range for {data.dtype}", tok)
            return np.array(value, dtype=data.dtype)
        return np.negative(data)

    def attr_number(self, tok: Token) -> Union[int, float]:
        """Attribute numbers stay Python ``int``/``float`` (double precision)."""
        arr = self.number_array(tok)
        if arr.dtype.kind != "f":
            return int(arr)
        return _float_literal_value(_NUMBER_RE.match(tok.text))

    def parse_meta_ref(self) -> tuple[str, int, Token, Token]:
        """``meta[kind][index]`` -> (kind, index, first token, last token)."""
        start = self.expect("meta")
        self.expect("[", "after 'meta'")
        kind_tok = self.next()
        if kind_tok.kind != "IDENT":
            raise self.error_expected("a metadata kind like relay.Constant", kind_tok)
        self.expect_close("]", "metadata kind")
        self.expect("[", f"after meta[{kind_tok.text}]")
        idx_tok = self.next()
        if idx_tok.kind != "NUMBER" or not idx_tok.text.isdecimal():
            raise self.error_expected("a metadata index", idx_tok)
        end = self.expect_close("]", "metadata index")
        kind, index = kind_tok.text, self.index_value(idx_tok.text, idx_tok, "metadata index")
        self.check_meta(kind, index, kind_tok)
        return kind, index, start, end

    def check_meta(self, kind: str, index: int, tok: Token) -> None:
        """Reject refs that no metadata table could hold (TVM's metatable keys are
        type keys: dotted ``relay.Constant`` or CamelCase ``VirtualDevice``)."""
        if self.metadata is not None:
            counts = self.metadata.get("counts", {})
            if kind in counts and index >= counts[kind]:
                raise self.error(
                    f"meta[{kind}][{index}] out of range: the metadata section has "
                    f"{counts[kind]} {kind} entries", tok)
            if kind in counts:
                return
        if "." not in kind and not kind[:1].isupper():
            raise self.error(f"unknown metadata kind '{kind}' in meta[{kind}][{index}]", tok)

    def parse_meta_expr(self) -> A.Expr:
        kind, index, start, end = self.parse_meta_ref()
        if kind != "relay.Constant":
            return A.MetaRef(kind, index, span=self.span(start))
        data = None
        if self.metadata is not None:
            consts = self.metadata.get("constants", [])
            if index < len(consts):
                data = consts[index]
            if data is None:
                raise self.missing_constant_error(index, start)
        ty = self.ty_comment_type(self.pos - 1)
        if data is not None and isinstance(ty, A.TensorType):
            self.check_meta_constant_type(index, data, ty, start)
        return A.Constant(data, index, ty, span=self.span(start))

    def check_meta_constant_type(self, index: int, data: np.ndarray, ty: A.TensorType,
                                 tok: Token) -> None:
        """The ``/* ty=... */`` v0.19 printed beside a meta constant is its checked type,
        i.e. the array's own dtype and shape: a disagreement means the ``#[metadata]``
        array was decoded (or edited) into something else -- e.g. DLDataType code 6
        read as bool although v0.19 wrote float8 e4m3 with it -- so it is refused here
        rather than computed with."""
        from .metadata import canonical_dtype_name

        dtype_ok = str(data.dtype) == canonical_dtype_name(ty.dtype)
        shape_ok = len(ty.shape) == data.ndim and all(
            not isinstance(want, int) or want == got for want, got in zip(ty.shape, data.shape))
        if dtype_ok and shape_ok:
            return
        dims = ", ".join("?" if d is None else str(d) for d in ty.shape)
        printed = f"Tensor[({dims}{',' if len(ty.shape) == 1 else ''}), {ty.dtype}]"
        raise self.error(
            f"meta[relay.Constant][{index}] is a {data.dtype} tensor of shape "
            f"{tuple(data.shape)} in the #[metadata] section (tvm_version "
            f"{self.metadata.get('tvm_version', '?')}), but its printed type is {printed}",
            tok)

    def missing_constant_error(self, index: int, tok: Token) -> ParseError:
        """``meta[relay.Constant][N]`` with a #[metadata] section that lacks its value.

        v0.19 refused both at parse time: ParseMetaRef ("no entry in the meta table for
        `relay.Constant`") and LoadJSON of a Constant node without ``data`` ("cannot
        find field data").
        """
        ref = f"meta[relay.Constant][{index}]"
        if "relay.Constant" not in self.metadata.get("counts", {}):
            why = "the #[metadata] section has no relay.Constant list"
        else:
            why = ("its relay.Constant node in the #[metadata] section has no 'data' "
                   "entry (no array)")
        return self.error(f"{ref} has no value: {why}", tok)

    def ty_comment_type(self, tok_index: int) -> Optional[A.Type]:
        """Parse the ``/* ty=... */`` comment after token ``tok_index``, if any."""
        entry = self.ty_comments.get(tok_index)
        if entry is None:
            return None
        text, line, col = entry
        try:
            return parse_type(text, self.source, line, col, self.type_scopes[-1],
                              allow_trailing=True)
        except ParseError:
            return None  # a malformed comment is still just a comment

    def parse_attr(self) -> tuple[str, Any]:
        key = self.next()
        self.expect("=", f"after attribute name {key.text}")
        value = self.parse_attr_value()
        if key.text.endswith("dtype") and isinstance(value, str):
            value = _tvm_dtype_name(value)  # cast(%x, dtype="e4m3_float8")
        return key.text, value

    def parse_attr_value(self) -> Any:
        """Attribute value: number, string, bool, None, identifier, list, meta ref."""
        tok = self.peek()
        kind = tok.kind
        if kind == "NUMBER":
            self.next()
            return self.attr_number(tok)
        if kind == "STRING":
            self.next()
            try:
                return _unescape(tok.text[1:-1])
            except ValueError as exc:
                raise self.error(f"string literal {_describe(tok)}: {exc}", tok) from None
        if kind == "OP" and tok.text in ("[", "("):
            return self.parse_attr_sequence(tok)
        if kind == "IDENT":
            if tok.text == "meta":
                kind_, index, _, _ = self.parse_meta_ref()
                if kind_.startswith(BOX_KIND_PREFIX):
                    self.box_refs_seen += 1
                return A.MetaRef(kind_, index, span=self.span(tok))
            self.next()
            if tok.text in ("True", "False"):
                return tok.text == "True"
            if tok.text in ("None", "nullptr"):
                return None
            return tok.text
        if kind == "OP" and tok.text == "-" and self.peek(1).kind == "NUMBER":
            self.next()
            value = self.parse_attr_value()
            return -value
        if kind == EOF:
            raise self.error("unexpected end of input while parsing an attribute value", tok)
        raise self.error(f"expected an attribute value, got {_describe(tok)}", tok)

    def parse_attr_sequence(self, tok: Token) -> Any:
        """``[v, ...]`` -> tuple; ``(v)`` -> ``v`` itself, as v0.19's ParseAttributeValue
        (case kOpenParen: ``Bracket`` around one value).  ``()``, ``(v,)`` and
        ``(a, b)``, which Relay refused, stay tuples as before."""
        self.next()
        self.enter()
        closer = _CLOSERS[tok.text]
        items: list[Any] = []
        comma = False
        while not self.at(closer):
            items.append(self.parse_attr_value())
            comma = self.accept(",")
            if not comma:
                break
        self.expect_close(closer, "list" if closer == "]" else "tuple")
        self.leave()
        if closer == ")" and len(items) == 1 and not comma:
            return items[0]
        return tuple(items)

    # ------------------------------------------------------------------ types
    def parse_type(self) -> A.Type:
        self.enter()
        tok = self.next()
        text = tok.text
        if tok.kind == "OP" and text == "(":
            fields: list[A.Type] = []
            while not self.at(")"):
                fields.append(self.parse_type())
                if not self.accept(","):
                    break
            self.expect_close(")", "tuple type")
            ty: A.Type = A.TupleType(tuple(fields))
        elif tok.kind != "IDENT":
            if tok.kind == EOF:
                raise self.error("unexpected end of input while parsing a type", tok)
            raise self.error(f"expected a type, got {_describe(tok)}", tok)
        elif text == "Tensor":
            ty = self.parse_tensor_type()
        elif text == "fn":
            ty = self.parse_func_type()
        elif text == "_":
            ty = A.IncompleteType()
        elif text == "Ref" and self.at("["):
            self.next()
            inner = self.parse_type()
            self.expect_close("]", "type")
            ty = A.RefType(inner)
        elif is_dtype(text) or text in _BARE_DTYPES:
            ty = A.TensorType((), _tvm_dtype_name(text))
        else:
            tv = self.lookup_type_var(text)
            if tv is not None:
                ty = tv
            else:
                args: list[A.Type] = []
                if self.accept("["):
                    while not self.at("]"):
                        args.append(self.parse_type())
                        if not self.accept(","):
                            break
                    self.expect_close("]", "type")
                ty = A.TypeCall(text, tuple(args))
        self.leave()
        return ty

    def parse_tensor_type(self) -> A.TensorType:
        """``Tensor[(d0, ?, n), dtype]`` (the ``Tensor`` token is consumed)."""
        self.expect("[", "after 'Tensor'")
        dims: list[Union[int, str, None]] = []
        if self.accept("("):
            while not self.at(")"):
                dims.append(self.parse_dim())
                if not self.accept(","):
                    break
            self.expect_close(")", "tensor shape")
        else:
            dims.append(self.parse_dim())
        self.expect(",", "between tensor shape and dtype")
        dtype_tok = self.next()
        if dtype_tok.kind != "IDENT" or not (is_dtype(dtype_tok.text) or
                                             dtype_tok.text in _BARE_DTYPES):
            raise self.error_expected("a dtype like float32", dtype_tok)
        self.expect_close("]", "type")
        return A.TensorType(tuple(dims), _tvm_dtype_name(dtype_tok.text))

    def parse_dim(self) -> Union[int, str, None]:
        tok = self.peek()
        if tok.text == "?":
            self.next()
            return None
        if tok.kind == "NUMBER":
            self.next()
            value = self.number_array(tok)
            if value.dtype.kind not in "iu":
                raise self.error(f"tensor dimension must be an integer, got {tok.text}", tok)
            return int(value)
        if tok.kind == "IDENT":
            if tok.text == "meta":
                kind, index, _, _ = self.parse_meta_ref()
                return f"meta[{kind}][{index}]"
            self.next()
            return tok.text
        raise self.error_expected("a dimension (integer, '?' or name)", tok,
                                  "parsing a tensor shape")

    def parse_func_type(self) -> A.FuncType:
        type_params = self.parse_type_params() if self.at("[") else ()
        self.type_scopes.append({tv.name: tv for tv in type_params})
        self.expect("(", "after 'fn' in a function type")
        params: list[A.Type] = []
        while not self.at(")"):
            params.append(self.parse_type())
            if not self.accept(","):
                break
        self.expect_close(")", "function type parameters")
        ret = self.parse_type() if self.accept("->") else None
        self.type_scopes.pop()
        return A.FuncType(tuple(params), ret, type_params)


# ---------------------------------------------------------------------- entry points
def _prepare(text: str, source_name: str) -> tuple[_Parser, TokenStream]:
    if not isinstance(text, str):
        raise TypeError(f"Relay text must be str, not {type(text).__name__}")
    m = _VERSION_RE.match(text)
    if m:  # v0.0.4 header line: blank it out, keeping offsets
        text = " " * m.end() + text[m.end():]
    stream = tokenize(text, source_name)
    metadata = None
    if stream.metadata_text is not None:
        from .metadata import parse_metadata
        try:
            metadata = parse_metadata(stream.metadata_text)
        except ValueError as exc:
            raise ParseError(f"invalid #[metadata] section: {exc}", stream.metadata_line, 1,
                             source_name, stream.lines[stream.metadata_line - 1]) from None
    return _Parser(stream, source_name, metadata), stream


#: Recovered values listed in a :class:`RecoveredMetadataWarning` message (all are
#: in its ``recoveries``).
_MAX_LISTED_RECOVERIES = 20


def _warn_recovered(parser: _Parser) -> None:
    """One warning per parse for every boxed value recovered from a printed type."""
    found = parser.recoveries
    if not found:
        return
    lines = [f"{len(found)} attribute value(s) printed as meta[runtime.Box*] without a "
             "#[metadata] section were recovered from the printed /* ty=... */ types:"]
    lines += [f"  {r}" for r in found[:_MAX_LISTED_RECOVERIES]]
    if len(found) > _MAX_LISTED_RECOVERIES:
        lines.append(f"  ... and {len(found) - _MAX_LISTED_RECOVERIES} more")
    warnings.warn(RecoveredMetadataWarning("\n".join(lines), found), stacklevel=3)


def _module_metadata(parser: _Parser) -> dict[str, Any]:
    metadata = dict(parser.metadata) if parser.metadata is not None else {}
    if parser.unrecovered:  # read by the importer to say why a value is missing
        metadata["unrecovered_boxes"] = dict(parser.unrecovered)
    return metadata


def parse(text: str, source_name: str = "<string>") -> A.IRModule:
    """Parse a Relay module (``#[version = "0.0.5"]`` + ``def``/``type``
    items + optional ``#[metadata]``); a bare expression or old-style top-level
    ``fn`` becomes ``@main``."""
    with _parsing():
        parser, _ = _prepare(text, source_name)
        functions, types = parser.parse_module()
    _warn_recovered(parser)
    return A.IRModule(functions, types, _module_metadata(parser), source_name)


fromtext = parse


def parse_expr(text: str, source_name: str = "<string>") -> A.Expr:
    """Parse a bare Relay expression (``let`` chains, graph bindings allowed)."""
    with _parsing():
        parser, _ = _prepare(text, source_name)
        parser.parse_version()
        expr = parser.parse_seq()
        if parser.peek().kind != EOF:
            raise parser.error_expected("end of input", parser.peek())
    _warn_recovered(parser)
    return expr


def parse_type(text: str, source_name: str = "<string>", line: int = 1, col: int = 1,
               type_vars: Optional[dict[str, A.TypeVar]] = None,
               allow_trailing: bool = False) -> A.Type:
    """Parse a Relay type such as ``Tensor[(1, ?), float32]`` (used for
    ``/* ty=... */`` comments; ``line``/``col`` place errors in the outer file)."""
    stream = tokenize(text, source_name)
    parser = _Parser(stream, source_name)
    parser.line_offset, parser.col_offset = line, col
    if type_vars:
        parser.type_scopes = [dict(type_vars)]
    with _parsing():
        ty = parser.parse_type()
        if parser.peek().kind != EOF and not allow_trailing:
            raise parser.error_expected("end of type", parser.peek())
    return ty
