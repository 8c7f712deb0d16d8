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
from typing import NamedTuple, Optional

from ..errors import ParseError

__all__ = ["Token", "TokenStream", "tokenize", "EOF"]


class Token(NamedTuple):
    """One token: ``kind`` (see :data:`_TOKEN_SPEC`), source ``text``, 1-based position."""

    kind: str
    text: str
    line: int
    col: int


EOF = "EOF"

# Order matters: earlier alternatives win at the same position.
_TOKEN_SPEC: tuple[tuple[str, str], ...] = (
    ("WS", r"[ \t\r\n\f\v]+"),
    ("LINE_COMMENT", r"//[^\n]*"),
    ("BLOCK_COMMENT", r"/\*"),
    ("METADATA", r"#\[metadata\]"),
    ("HASH", r"#\["),
    # Special float literals (inff, -inff, nanf, inff16 ...) before identifiers.
    ("NUMBER", r"-?(?:inf|nan)f(?:16|32|64)?(?![\w.])"
               r"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z_0-9]*"),
    # %0 (graph binding), %x, %fc.weight, %input.1 -- dotted tails are resolved
    # against the scope by the parser (``%x.0`` may be a projection of ``%x``).
    ("LOCAL", r"%(?:\d+|[A-Za-z_][\w]*(?:\.\w+)*)"),
    ("GLOBAL", r"@[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*"),
    ("STRING", r'"(?:[^"\\\n]|\\.)*"'),
    ("IDENT", r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*"),
    ("PROJ", r"\.\d+"),
    ("OP", r"->|=>|==|!=|<=|>=|[()\[\]{},;:=?+\-*/<>]"),
    ("BAD", r"."),
)

_MASTER = re.compile("|".join(f"(?P<{name}>{pat})" for name, pat in _TOKEN_SPEC), re.S)
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


def tokenize(text: str, source_name: str = "<string>") -> TokenStream:
    """Split ``text`` into tokens; raise :class:`ParseError` on a bad character,
    an unterminated comment or string."""
    lines = text.split("\n")
    tokens: list[Token] = []
    append = tokens.append
    ty_comments: dict[int, tuple[str, int, int]] = {}
    metadata_text: Optional[str] = None
    metadata_line = 0
    match = _MASTER.match
    pos = 0
    n = len(text)
    line = 1
    line_start = 0
    while pos < n:
        m = match(text, pos)
        kind = m.lastgroup
        end = m.end()
        if kind == "WS":
            nl = text.count("\n", pos, end)
            if nl:
                line += nl
                line_start = text.rfind("\n", pos, end) + 1
            pos = end
            continue
        col = pos - line_start + 1
        if kind == "LINE_COMMENT":
            pos = end
            continue
        if kind == "BLOCK_COMMENT":
            end = _skip_block_comment(text, pos, line, col, source_name, lines)
            body = text[pos + 2:end - 2]
            if tokens and (len(tokens) - 1) not in ty_comments:
                tm = _TY_PREFIX.match(body)
                if tm:
                    start = pos + 2 + tm.end()
                    ty_comments[len(tokens) - 1] = (
                        body[tm.end():], line, start - line_start + 1)
            nl = text.count("\n", pos, end)
            if nl:
                line += nl
                line_start = text.rfind("\n", pos, end) + 1
            pos = end
            continue
        if kind == "METADATA":
            metadata_text = text[end:]
            metadata_line = line
            break
        if kind == "BAD":
            ch = text[pos]
            if ch == '"':
                msg = "unterminated string literal"
            elif ch == "*" and text.startswith("*/", pos):
                msg = "unexpected '*/' outside a comment"
            else:
                msg = f"unexpected character {ch!r}"
            raise ParseError(msg, line, col, source_name, lines[line - 1])
        append(Token(kind, m.group(kind), line, col))
        pos = end
    append(Token(EOF, "", line, pos - line_start + 1))
    return TokenStream(tokens, ty_comments, metadata_text, metadata_line, lines)
