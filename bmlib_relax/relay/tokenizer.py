"""Tokenizer for Relay text (the format of TVM's ``mod.astext()``).

One compiled master regular expression recognises every token kind, so a
1.9 MB model dump tokenizes in a fraction of a second.  No rule repeats a group:
Python's ``re`` keeps a backtracking record per repetition of one (hundreds of bytes
per input byte on a long string, comment or dotted name), so the rare token a
character-class rule cannot take whole -- a string with escapes, a comment holding
'*', a dotted name with a stray dot -- goes to a small linear hand scan instead.

Comments never reach the token stream, with one exception kept *beside* it:
``/* ty=... */`` comments are recorded in :attr:`TokenStream.ty_comments` keyed by
the index of the token they follow, because the type printed after
``meta[relay.Constant][N]`` is the only shape information an unresolved constant has.

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
#: Characters of a whole dotted %local/@global name; an identifier's segment.
_LOCAL_RUN = r"[A-Za-z0-9_/.]"
_IDENT_SEGMENT = r"[A-Za-z_]\w*"
_IDENT_FAST_SEGMENTS = 4

#: A dotted name is checked with a lookahead over one character class instead of a
#: group inside ``*`` (``(?:\.seg)*``): Python's ``re`` keeps a backtracking record per
#: repetition of a group, ~200 bytes per input byte on a ``a.a.a...`` name, while a
#: repeated character class costs nothing.  ``(?!RUN*\.(?!NEXT))`` refuses a run of
#: name characters and dots that holds a "bad dot" (one not followed by a character that
#: may start the next segment); only then does the hand scan in _dotted_name_end run.
#: Used for %local and @global only: they start with a sigil outside the run, so each
#: run is scanned by one such lookahead at most.
def _dotted(first: str, run: str, next_char: str) -> str:
    return rf"{first}(?!{run}*\.(?!{next_char})){run}*"


# Order matters: earlier alternatives win at the same position.  Whitespace is
# consumed as a prefix of every match so it costs no loop iteration of its own.
# No rule repeats a group (see _dotted): the *_SLOW rules hand the rare token that
# the fast rule refuses to a linear hand scan in tokenize().
_TOKEN_SPEC: tuple[tuple[str, str], ...] = (
    ("LINE_COMMENT", r"//[^\n]*"),
    # A block comment without '*' inside in one regex step (the common case, e.g.
    # ``/* ty=... */``); ``cbody`` is its text.  ``(?<!/)``: in ``/* a/*/`` the '/*'
    # opens a nested comment.  Other comments: BLOCK_COMMENT + _scan_block_comment.
    ("COMMENT", r"/\*(?P<cbody>[^*]*)(?<!/)\*/"),
    ("BLOCK_COMMENT", r"/\*"),
    ("METADATA", r"#\[metadata\]"),
    ("HASH", r"#\["),
    # Special float literals (inff, -inff, nanf, inff16 ...) before identifiers.  A run
    # of '-' right before the digits (or inff) belongs to the literal, as in v0.19's
    # TokenizeOnce, which counts the run: ``--2`` is +2, not ``-(-2)``.
    # ``(?<!-)``: tried only at the start of a run of '-' -- inside it the literal fails
    # exactly when it failed at the start (same run end), and trying it at each '-'
    # rescans the run: quadratic, ~3 min for 120 kB of '-'.
    ("NUMBER", r"(?<!-)(?:-*(?:inf|nan)f(?:16|32|64)?(?![\w.])"
               r"|-*\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z_0-9]*)"),
    # %0 (graph binding), %x, %fc.weight, %input.1 -- dotted tails are resolved
    # against the scope by the parser (``%x.0`` may be a projection of ``%x``).
    # Name characters are v0.19's IsIdent: ASCII letters, digits, '_' and '/'
    # (``%gpu_0/res5_w``, TF's ``%bert/embeddings/...``); see _NAME_START.  A segment
    # after a dot is one or more IsIdent characters.
    ("LOCAL", r"%(?:\d+|" + _dotted(_NAME_START, _LOCAL_RUN, _NAME_CHAR) + ")"),
    # @f, @a.b: a segment after a dot starts like a name.
    ("GLOBAL", "@" + _dotted(_NAME_START, _LOCAL_RUN, _NAME_START)),
    # A string without escapes in one step; others (and unterminated ones) are scanned
    # by _string_end: '"', then characters other than '"', '\\' and newline, or a
    # backslash and any one character, then '"'.
    ("STRING", r'"[^"\\\n]*"'),
    ("STRING_SLOW", r'"'),
    # Op and attribute names, ``nn.conv2d``, ``relay.Constant``: \w (Unicode) runs
    # joined by dots, each segment after a dot starting with an ASCII letter or '_'.
    # Up to _IDENT_FAST_SEGMENTS segments in nested optional groups (bounded memory);
    # longer names fail the final lookahead and go to NAME_SLOW.  Not _dotted: an
    # identifier may start inside a run (``a.1a.1a``: IDENT, PROJ, IDENT ...), and
    # scanning the rest of the run from each of them would be quadratic.
    ("IDENT", _IDENT_SEGMENT
              + rf"(?:\.{_IDENT_SEGMENT}" * (_IDENT_FAST_SEGMENTS - 1)
              + ")?" * (_IDENT_FAST_SEGMENTS - 1) + r"(?!\w|\.[A-Za-z_])"),
    # A LOCAL/GLOBAL with a bad dot in its run, or an IDENT of more segments.
    ("NAME_SLOW", r"[%@]?[A-Za-z_]"),
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


def _scan_block_comment(text: str, pos: int, line: int, col: int, source_name: str,
                        lines: list[str]) -> tuple[int, bool]:
    """Return the offset just past the (possibly nested) comment opening at ``pos``, and
    whether it was flat (no nested ``/*``): a flat one may be a ``/* ty=... */``.

    Only delimiters are searched for (str-level scan, no repetition in the regex), so a
    comment of any length costs no memory beyond its offsets.
    """
    depth = 1
    cur = pos + 2
    flat = True
    search = _COMMENT_DELIM.search
    while depth:
        m = search(text, cur)
        if m is None:
            raise ParseError("unterminated comment", line, col, source_name,
                             lines[line - 1] if line - 1 < len(lines) else None)
        if m.group() == "/*":
            depth += 1
            flat = False
        else:
            depth -= 1
        cur = m.end()
    return cur, flat


def _record_ty(ty_raw: list[tuple[int, str, int]], n_tokens: int, text: str,
               body_start: int, body_end: int) -> None:
    """Keep a flat comment's text ``text[body_start:body_end]`` if it is ``ty=...``."""
    if n_tokens:
        tm = _TY_PREFIX.match(text, body_start, body_end)
        if tm is not None:
            ty_raw.append((n_tokens - 1, text[tm.end():body_end], tm.end()))


#: What a string literal's scan stops at: an escape (backslash + any one character,
#: newline included), its closing '"' or a newline, which ends it unterminated.
_STRING_STOP = re.compile(r'\\.|["\n]', re.S)


def _string_end(text: str, start: int) -> int:
    r"""Offset just past the string literal whose '"' is at ``start``; -1 if unterminated.

    The literal is '"', then characters other than '"', backslash and newline or a
    backslash with any one character after it (newline included), then '"' -- the
    language of ``"(?:[^"\\\n]|\\.)*"``, which as one regex costs ~400 bytes of
    backtracking record per character.  Here finditer skips plain characters and
    yields escapes, the closing quote or a newline; a backslash at the very end of the
    text escapes nothing and is skipped too, leaving the literal unterminated.
    """
    for m in _STRING_STOP.finditer(text, start + 1):
        stop = text[m.start()]
        if stop == '"':
            return m.end()
        if stop == "\n":
            return -1
    return -1


#: Per first character of a NAME_SLOW token: its kind, and where it ends -- at the
#: first character outside its run of name characters and dots, or at the first "bad
#: dot" (one the next segment cannot start after).
_DOTTED_ENDS = {
    "%": ("LOCAL", re.compile(rf"[^A-Za-z0-9_/.]|\.(?!{_NAME_CHAR})")),
    "@": ("GLOBAL", re.compile(rf"[^A-Za-z0-9_/.]|\.(?!{_NAME_START})")),
}
_IDENT_END = ("IDENT", re.compile(r"[^\w.]|\.(?![A-Za-z_])"))


def _dotted_name_end(text: str, start: int) -> tuple[str, int]:
    r"""Kind and end offset of the LOCAL/GLOBAL/IDENT at ``start`` that its fast rule
    refused (a bad dot in its run, or a long identifier): the longest ``seg(?:\.seg)*``,
    as the grouped rule matched it greedily.  The search stops at the name's end, so
    the scan costs the length of the name.
    """
    kind, end = _DOTTED_ENDS.get(text[start], _IDENT_END)
    m = end.search(text, start + 1)
    return kind, len(text) if m is None else m.start()


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
                _record_ty(ty_raw, len(kinds), text, m.start("cbody"), m.end("cbody"))
                continue
            if kind == "LINE_COMMENT":
                continue
            if kind == "END":
                break
            start = m.start(kind)
            # The rare tokens the fast rules leave to a hand scan: scan, then resume.
            if kind == "BLOCK_COMMENT":
                line, col = where.position(start)
                pos, flat = _scan_block_comment(text, start, line, col, source_name, lines)
                if flat:
                    _record_ty(ty_raw, len(kinds), text, start + 2, pos - 2)
                done = False
                break
            if kind == "NAME_SLOW":
                kind, pos = _dotted_name_end(text, start)
            elif kind == "STRING_SLOW":
                kind, pos = "STRING", _string_end(text, start)
            if kind in plain and pos >= 0:
                kinds.append(kind)
                starts.append(start)
                texts.append(text[start:pos])
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
