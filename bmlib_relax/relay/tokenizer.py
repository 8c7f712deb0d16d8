"""Tokenizer for Relay text (the format of TVM's ``mod.astext()``).

One compiled master regular expression recognises every token kind, so a
1.9 MB model dump tokenizes in a fraction of a second.  Comments never reach the
token stream, with one exception kept *beside* it: ``/* ty=... */`` comments are
recorded in :attr:`TokenStream.ty_comments` keyed by the index of the token they
follow, because the type printed after ``meta[relay.Constant][N]`` is the only
shape information an unresolved constant has.

Everything after ``#[metadata]`` is JSON, not Relay; it is returned verbatim as
:attr:`TokenStream.metadata_text`.
"""
from __future__ import annotations

import re
from itertools import repeat
from typing import NamedTuple, Optional

import numpy as np

from ..errors import ParseError

__all__ = ["Token", "TokenStream", "tokenize", "EOF"]


class Token(NamedTuple):
    """One token: ``kind`` (see :data:`_TOKEN_SPEC`), source ``text``, 1-based position."""

    kind: str
    text: str
    line: int
    col: int


EOF = "EOF"

#: First character of a %local/@global name: v0.19's IsIdentLetter without '/', because
#: TokenizeOnce tests for '/' (division, ``//``, ``/*``) before IsIdentLetter, so a name
#: never starts with one.  Inside a name every IsIdent character, '/' included, extends
#: it: ``%x//c`` is the one name ``x//c`` there too (the printer writes ``%x /* ty=``).
_NAME_START = r"[A-Za-z_]"
#: v0.19's IsIdent (tokenizer.h): ASCII letters, digits, '_' and '/'.
_NAME_CHAR = r"[A-Za-z0-9_/]"

# Order matters: earlier alternatives win at the same position.  Whitespace is
# consumed as a prefix of every match so it costs no loop iteration of its own.
_TOKEN_SPEC: tuple[tuple[str, str], ...] = (
    ("LINE_COMMENT", r"//[^\n]*"),
    # A non-nested block comment in one regex step (the common case); ``cbody``
    # is its text.  Nested comments fall back to BLOCK_COMMENT + a manual scan.
    ("COMMENT", r"/\*(?P<cbody>[^*/]*(?:(?:\*+(?!/)|/(?!\*))[^*/]*)*)\*/"),
    ("BLOCK_COMMENT", r"/\*"),
    ("METADATA", r"#\[metadata\]"),
    ("HASH", r"#\["),
    # Special float literals (inff, -inff, nanf, inff16 ...) before identifiers.  A run
    # of '-' right before the digits (or inff) belongs to the literal, as in v0.19's
    # TokenizeOnce, which counts the run: ``--2`` is +2, not ``-(-2)``.
    ("NUMBER", r"-*(?:inf|nan)f(?:16|32|64)?(?![\w.])"
               r"|-*\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z_0-9]*"),
    # %0 (graph binding), %x, %fc.weight, %input.1 -- dotted tails are resolved
    # against the scope by the parser (``%x.0`` may be a projection of ``%x``).
    # Name characters are v0.19's IsIdent: ASCII letters, digits, '_' and '/'
    # (``%gpu_0/res5_w``, TF's ``%bert/embeddings/...``); see _NAME_START.
    ("LOCAL", rf"%(?:\d+|{_NAME_START}{_NAME_CHAR}*(?:\.{_NAME_CHAR}+)*)"),
    ("GLOBAL", rf"@{_NAME_START}{_NAME_CHAR}*(?:\.{_NAME_START}{_NAME_CHAR}*)*"),
    ("STRING", r'"(?:[^"\\\n]|\\.)*"'),
    ("IDENT", r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"),
    ("PROJ", r"\.\d+"),
    ("OP", r"->|=>|==|!=|<=|>=|[()\[\]{},;:=?+\-*/<>]"),
    ("END", r"\Z"),
    ("BAD", r"."),
)

_MASTER = re.compile(r"[ \t\r\n\f\v]*(?:"
                     + "|".join(f"(?P<{name}>{pat})" for name, pat in _TOKEN_SPEC) + ")", re.S)
_NEWLINE = re.compile(r"\n")
_COMMENT_DELIM = re.compile(r"/\*|\*/")
_TY_PREFIX = re.compile(r"\s*ty=")


class TokenStream(NamedTuple):
    """Result of :func:`tokenize`.

    ``ty_comments`` maps a token index to ``(type_text, line, col)`` of the first
    ``/* ty=... */`` comment that directly follows that token.
    """

    tokens: list[Token]
    ty_comments: dict[int, tuple[str, int, int]]
    metadata_text: Optional[str]
    metadata_line: int
    lines: list[str]


def _skip_block_comment(text: str, pos: int, line: int, col: int, source_name: str,
                        lines: list[str]) -> int:
    """Return the offset just past the (possibly nested) comment opening at ``pos``."""
    depth = 1
    cur = pos + 2
    while depth:
        m = _COMMENT_DELIM.search(text, cur)
        if m is None:
            raise ParseError("unterminated comment", line, col, source_name,
                             lines[line - 1] if line - 1 < len(lines) else None)
        depth += 1 if m.group() == "/*" else -1
        cur = m.end()
    return cur


_PLAIN_KINDS = frozenset({"NUMBER", "LOCAL", "GLOBAL", "STRING", "IDENT", "PROJ", "OP",
                          "HASH"})


class _Lines:
    """Offset -> (line, column) conversion via the sorted newline offsets."""

    def __init__(self, text: str):
        self.newlines = np.array([m.start() for m in _NEWLINE.finditer(text)], dtype=np.int64)

    def positions(self, offsets: list[int]) -> tuple[list[int], list[int]]:
        offs = np.asarray(offsets, dtype=np.int64)
        before = np.searchsorted(self.newlines, offs, side="left")  # newlines before offset
        if not len(self.newlines):
            return (before + 1).tolist(), (offs + 1).tolist()
        line_start = np.where(before > 0, self.newlines[np.maximum(before - 1, 0)] + 1, 0)
        return (before + 1).tolist(), (offs - line_start + 1).tolist()

    def position(self, offset: int) -> tuple[int, int]:
        lines, cols = self.positions([offset])
        return lines[0], cols[0]


def tokenize(text: str, source_name: str = "<string>") -> TokenStream:
    """Split ``text`` into tokens; raise :class:`ParseError` on a bad character,
    an unterminated comment or string.

    The hot loop only records kind/offset/text; line and column numbers are
    computed afterwards for all tokens at once (vectorised), which keeps a
    200k-token model dump well under half a second.
    """
    lines = text.split("\n")
    where = _Lines(text)
    kinds: list[str] = []
    starts: list[int] = []
    texts: list[str] = []
    ty_raw: list[tuple[int, str, int]] = []   # (token index, type text, offset)
    metadata_text: Optional[str] = None
    metadata_offset = 0
    pos = 0
    finditer = _MASTER.finditer
    plain = _PLAIN_KINDS
    done = False
    while not done:
        done = True
        for m in finditer(text, pos):
            kind = m.lastgroup
            if kind in plain:
                start = m.start(kind)
                kinds.append(kind)
                starts.append(start)
                texts.append(text[start:m.end()])
                continue
            if kind == "COMMENT":
                if kinds:
                    tm = _TY_PREFIX.match(m.group("cbody"))
                    if tm is not None:
                        ty_raw.append((len(kinds) - 1, m.group("cbody")[tm.end():],
                                       m.start("cbody") + tm.end()))
                continue
            if kind == "LINE_COMMENT":
                continue
            if kind == "END":
                break
            start = m.start(kind)
            if kind == "BLOCK_COMMENT":  # nested comment: scan by hand, then resume
                line, col = where.position(start)
                pos = _skip_block_comment(text, start, line, col, source_name, lines)
                done = False
                break
            if kind == "METADATA":
                metadata_text = text[m.end():]
                metadata_offset = start
                break
            line, col = where.position(start)
            ch = text[start]
            if ch == '"':
                msg = "unterminated string literal"
            elif ch == "*" and text.startswith("*/", start):
                msg = "unexpected '*/' outside a comment"
            elif ch in "%@" and start + 1 < len(text) and not text[start + 1].isspace():
                # Relay's names are ASCII letters, digits, '_' and '/' (IsIdent)
                kind_name = "variable" if ch == "%" else "global"
                msg = (f"{kind_name} name {ch}{text[start + 1]!r}...: a name starts with an "
                       "ASCII letter or '_' (or is a number, for %), then letters, digits, "
                       "'_', '/' or '.'")
            else:
                msg = f"unexpected character {ch!r}"
            raise ParseError(msg, line, col, source_name, lines[line - 1])
    end_offset = len(text) if metadata_text is None else metadata_offset
    # EOF sits after the last real character (trailing blanks/comments excluded).
    eof_offset = len(text[:end_offset].rstrip()) if metadata_text is None else end_offset
    tok_lines, tok_cols = where.positions(starts + [eof_offset] + [t[2] for t in ty_raw])
    n = len(kinds)
    tokens = list(map(tuple.__new__, repeat(Token, n),
                      zip(kinds, texts, tok_lines[:n], tok_cols[:n])))
    tokens.append(Token(EOF, "", tok_lines[n], tok_cols[n]))
    ty_comments: dict[int, tuple[str, int, int]] = {}
    for (index, body, _), line, col in zip(ty_raw, tok_lines[n + 1:], tok_cols[n + 1:]):
        ty_comments.setdefault(index, (body, line, col))
    metadata_line = where.position(metadata_offset)[0] if metadata_text is not None else 0
    return TokenStream(tokens, ty_comments, metadata_text, metadata_line, lines)
