"""A long token costs memory linear in its length, with a small constant.

Python's ``re`` keeps a backtracking record for every repetition of a group, so
the old STRING / COMMENT / IDENT / LOCAL / GLOBAL rules (an alternation or group
inside ``*``) spent 150-400 bytes per input byte: a 2 MB string literal took
~800 MB and a 20 MB one died with a raw MemoryError inside parse().  Each case
below tokenizes or parses a ~2 MB token under ``tracemalloc`` and allows at most
:data:`BYTES_PER_INPUT_BYTE` of peak growth per input byte.

The fix must not change the accepted language (v0.19's tokenizer.h, as the
tokenizer implemented it before): :func:`test_same_tokens_as_the_grouped_rules`
compares against the grouped rules on small inputs, where their cost is harmless.
The decoding of a literal's escapes had the same flaw (a repeated group over a run of
``\\xHH``) and is checked the same way.
"""
from __future__ import annotations

import random
import re
import time
import tracemalloc
from typing import Callable

import pytest

from bmlib_relax.errors import ParseError
from bmlib_relax.relay import parser as P
from bmlib_relax.relay import tokenizer as T
from bmlib_relax.relay.parser import parse
from bmlib_relax.relay.tokenizer import tokenize

N = 2_000_000
#: Escape-dense strings are scanned one escape at a time; tracemalloc's per-allocation
#: bookkeeping makes that slow, so they are shorter (the old rule's cost per byte was
#: the same at any length).
N_ESCAPES = 500_000
BYTES_PER_INPUT_BYTE = 50
HEADER = '#[version = "0.0.5"]\n'
SIG = "def @main(%x: Tensor[(2), float32]) {\n"


def _peak_growth(fn: Callable[[], object]) -> tuple[int, object, float]:
    """Run ``fn`` under tracemalloc: (peak growth in bytes, result or exception, seconds)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        try:
            result: object = fn()
        except Exception as exc:  # noqa: BLE001 -- the caller checks what it got
            result = exc
        seconds = time.perf_counter() - t0
        return tracemalloc.get_traced_memory()[1] - before, result, seconds
    finally:
        tracemalloc.stop()


def _check_bound(text: str, fn: Callable[[], object]) -> object:
    growth, result, seconds = _peak_growth(fn)
    assert growth < BYTES_PER_INPUT_BYTE * len(text), (
        f"{growth / len(text):.0f} bytes per input byte (result {type(result).__name__})")
    assert not isinstance(result, MemoryError)
    return result


def _relu_with_attr(value_text: str) -> str:
    return HEADER + SIG + f'  nn.relu(%x, s="{value_text}")\n}}\n'


# ------------------------------------------------------------------ string literals
def test_long_string_attribute_parses_in_linear_memory():
    text = _relu_with_attr("a" * N)
    mod = _check_bound(text, lambda: parse(text))
    assert not isinstance(mod, Exception), mod
    assert mod["main"].body.attrs["s"] == "a" * N


def test_long_string_of_escapes_tokenizes_in_linear_memory():
    # Every character is an escape (``\"`` and ``\\``): the worst case for a scanner
    # that handles escapes one at a time.
    body = '\\"\\\\' * (N_ESCAPES // 4)
    text = _relu_with_attr(body)
    stream = _check_bound(text, lambda: tokenize(text))
    assert not isinstance(stream, Exception), stream
    assert [t.text for t in stream.tokens if t.kind == "STRING"][-1] == f'"{body}"'
    assert parse(text)["main"].body.attrs["s"] == '"\\' * (N_ESCAPES // 4)


def test_long_run_of_hex_escapes_decodes_in_linear_memory():
    # A run of ``\xHH`` is the UTF-8 of non-ASCII text; the decoder once matched the
    # whole run with a repeated group (about 40 bytes per input byte while decoding).
    body = "\\xC3\\xA9" * (N_ESCAPES // 8)
    text = _relu_with_attr(body)
    growth, mod, _ = _peak_growth(lambda: parse(text))
    assert not isinstance(mod, Exception), mod
    # Decoding needs the decoded text, its pieces and the bytes of the pending run.
    assert growth < 15 * len(text), f"{growth / len(text):.0f} bytes per input byte"
    assert mod["main"].body.attrs["s"] == "\u00e9" * (N_ESCAPES // 8)


#: The decoder as it was, a repeated group over a run of ``\xHH`` escapes: the
#: reference for what each literal means.
_GROUPED_ESCAPE = re.compile(r"((?:\\x[0-9a-fA-F]{2})+)|\\(u[0-9a-fA-F]{4}|.)", re.S)


def _grouped_unescape(body: str) -> object:
    def one(m: re.Match) -> str:
        if m.group(1) is not None:
            return bytes.fromhex(m.group(1).replace("\\x", "")).decode("utf-8")
        code = m.group(2)
        return chr(int(code[1:], 16)) if len(code) == 5 else P._ESCAPES.get(code, code)
    try:
        return _GROUPED_ESCAPE.sub(one, body)
    except UnicodeDecodeError:
        return ValueError


def _unescape_outcome(body: str) -> object:
    try:
        return P._unescape(body)
    except ValueError:
        return ValueError


@pytest.mark.parametrize("body", [
    "\\x41\\u00e9", "\\x44\\n\\x45", "\\xC3\\xA9\\xC3", "\\xC3 \\xA9", "\\x4", "\\xZZ",
    "\\u00e", "\\", "a\\", "\\q", "\\x\\x41", "\\xC3\\xA9x\\xE2\\x82\\xAC"])
def test_escapes_decode_as_the_grouped_rule(body):
    assert _unescape_outcome(body) == _grouped_unescape(body)


def test_escapes_decode_as_the_grouped_rule_on_random_text():
    rng = random.Random(23)
    alphabet = ["\\", "x", "u", "4", "1", "C3", "A9", "0", "n", '"', "a", "F", "\\x",
                "\\xC3\\xA9", "\\u00e9", "\\x44", "\n"]
    for _ in range(20000):
        body = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert _unescape_outcome(body) == _grouped_unescape(body), repr(body)


def test_bad_utf8_in_a_long_run_is_named_briefly():
    body = "\\x41" * 1000 + "\\xC3\\x41" + "\\x41" * 100_000
    with pytest.raises(ValueError, match=r"byte 1000 of a run of 101002") as info:
        P._unescape(body)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("body", ["a" * N, "ab\\\"" * (N_ESCAPES // 4)], ids=["plain", "escapes"])
@pytest.mark.parametrize("tail", ["", "\n}\n", '\\'], ids=["eof", "newline", "backslash-eof"])
def test_long_unterminated_string_is_a_parse_error(body, tail):
    text = HEADER + SIG + '  nn.relu(%x, s="' + body + tail
    err = _check_bound(text, lambda: tokenize(text))
    assert isinstance(err, ParseError), err
    assert (err.message, err.line, err.column) == ("unterminated string literal", 3, 17)


# ------------------------------------------------------------------ block comments
def test_long_flat_comment_of_stars_parses_in_linear_memory():
    text = HEADER + "/*" + "*a" * (N // 2) + "*/\n" + SIG + "  %x\n}\n"
    mod = _check_bound(text, lambda: parse(text))
    assert not isinstance(mod, Exception), mod


def test_long_nested_comment_parses_in_linear_memory():
    text = HEADER + SIG + "  %x /* a /* " + "*a/a" * (N // 4) + " */ b */\n}\n"
    mod = _check_bound(text, lambda: parse(text))
    assert not isinstance(mod, Exception), mod


def test_long_unterminated_comment_is_a_parse_error():
    text = HEADER + SIG + "  %x /*" + "*a" * (N // 2)
    err = _check_bound(text, lambda: tokenize(text))
    assert isinstance(err, ParseError), err
    assert (err.message, err.line, err.column) == ("unterminated comment", 3, 6)


def test_ty_comment_with_a_star_is_still_recorded():
    # Not the common /* ty=... */ (no '*' inside), so it takes the slow comment path.
    text = "%x /* ty=Tensor[(2), float32] * */ %y"
    stream = tokenize(text)
    assert stream.ty_comments == {0: ("Tensor[(2), float32] * ", 1, text.index("Tensor") + 1)}


# ------------------------------------------------------------------ dotted names
@pytest.mark.parametrize("sigil,kind", [("", "IDENT"), ("%", "LOCAL"), ("@", "GLOBAL")])
def test_long_dotted_name_is_one_token_in_linear_memory(sigil, kind):
    name = sigil + "a" + ".a" * (N // 2)
    text = name + "(%x)"
    stream = _check_bound(text, lambda: tokenize(text))
    assert not isinstance(stream, Exception), stream
    assert [(t.kind, t.text) for t in stream.tokens[:2]] == [(kind, name), ("OP", "(")]


@pytest.mark.parametrize("sigil,kind", [("", "IDENT"), ("%", "LOCAL"), ("@", "GLOBAL")])
def test_long_dotted_name_ends_at_its_first_bad_dot(sigil, kind):
    # a.a....a..a : the name stops before the '.' that no name character follows.
    name = sigil + "a" + ".a" * (N // 2)
    text = name + "..a"
    err = _check_bound(text, lambda: tokenize(text))
    assert isinstance(err, ParseError), err
    assert (err.message, err.line, err.column) == ("unexpected character '.'", 1,
                                                   len(name) + 1)


def test_long_dotted_local_in_a_model_is_a_parse_error():
    text = HEADER + SIG + "  %x" + ".a" * (N // 2) + "\n}\n"
    err = _check_bound(text, lambda: parse(text))
    assert isinstance(err, ParseError), err
    assert (err.line, err.column) == (3, 3)
    assert err.message.startswith("undefined variable %x.a.a")


# ------------------------------------------------------------------ linear time
@pytest.mark.parametrize("text", [
    "a.1" * 50_000,            # IDENT PROJ IDENT PROJ ... inside one run of [\w.]
    "@" + "a.1" * 50_000,      # the same after a @global that stops at the first bad dot
    "a.b.c.d.e " * 30_000,      # identifiers longer than the one-step rule
    "%a.b.c.d.e.f " * 30_000,   # long dotted locals, as PyTorch names them
    "-" * 50_000,              # a run of '-' that no number follows: OP '-' each
    "-" * 50_000 + "1",        # ... and one that ends in a number: NUMBER
], ids=["ident-proj-run", "global-then-run", "long-idents", "long-locals", "dashes",
        "dashes-number"])
def test_many_tokens_in_one_run_take_linear_time(text):
    # Each token may cost its own length, never the rest of the run (that was minutes).
    t0 = time.perf_counter()
    stream = tokenize(text)
    assert time.perf_counter() - t0 < 1.0
    assert stream.tokens[-1].kind == "EOF"


# ------------------------------------------------------------------ same language
#: The token rules as they were before the memory fix (a group inside ``*``).
_GROUPED_SPEC = dict(T._TOKEN_SPEC)
_GROUPED_SPEC.update({
    "NUMBER": r"-*(?:inf|nan)f(?:16|32|64)?(?![\w.])"
              r"|-*\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z_0-9]*",
    "COMMENT": r"/\*(?P<cbody>[^*/]*(?:(?:\*+(?!/)|/(?!\*))[^*/]*)*)\*/",
    "LOCAL": r"%(?:\d+|[A-Za-z_][A-Za-z0-9_/]*(?:\.[A-Za-z0-9_/]+)*)",
    "GLOBAL": r"@[A-Za-z_][A-Za-z0-9_/]*(?:\.[A-Za-z_][A-Za-z0-9_/]*)*",
    "STRING": r'"(?:[^"\\\n]|\\.)*"',
    "IDENT": r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*",
})
_GROUPED_ORDER = ("LINE_COMMENT", "COMMENT", "BLOCK_COMMENT", "METADATA", "HASH", "NUMBER",
                  "LOCAL", "GLOBAL", "STRING", "IDENT", "PROJ", "OP", "END", "BAD")
_GROUPED_MASTER = re.compile(
    r"[ \t\r\n\f\v]*(?:" + "|".join(f"(?P<{k}>{_GROUPED_SPEC[k]})" for k in _GROUPED_ORDER)
    + ")", re.S)


def _outcome(text: str):
    try:
        s = tokenize(text)
    except ParseError as e:
        return ("error", e.message, e.line, e.column)
    return s.tokens, s.ty_comments, s.metadata_text, s.metadata_line


def _grouped_outcome(text: str, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(T, "_MASTER", _GROUPED_MASTER)
        return _outcome(text)


CURATED = [
    'a.b.c.d', 'a.b.1', 'a..b', 'a.', 'a.é', 'aé.b', 'nn.conv2d(%x)', 'a.b.c.d.e.1.f',
    '%a.1.b', '%a.1.', '%a..b', '%a./b', '%a.b/c.d', '%0.1', '%x//c', '%/a', '%.a', '%1a.b',
    '@a.b', '@a.1', '@a..b', '@a.b.c.d.e', '@a./b', '@a.b/c', '@é',
    '"a"', '"a\\"b"', '"a\\\\"b', '"a\\\nb"', '"a\nb"', '"a', '"a\\', '"\\x41\\u00e9"',
    '"a" "b\\"" "c', '"\\"', '""',
    '/**/', '/***/', '/* a/*/', '/*/ x */', '/* a */* b */', '/* ** / */ x', '/*/',
    '/* /* */ */ x', '/* /* */', '/* a * b */', '/* a **/', '%x /* ty=T */ /* ty=U */',
    '%x /* ty=T*/ %y /*ty=/U */', '%x /* /* ty=T */ */', '/* ty=T */ %x', '*/',
    '%x /* ty=T /* */ */', 'a // c /* \n b', 'a.b #[metadata]\n{"x": 1}', '-- 2', 'inff.a',
    '---1', '-->1', '1e--5', '- -1', '-/**/-1', '--inff', 'a.b.c.d.e.1',
    '@a.b.c.d.e.f', '%a.b.c.d.e.f.1', 'a.b.c.d.é', 'aé.bé.cé.dé.e.f',
]


@pytest.mark.parametrize("text", CURATED)
def test_same_tokens_as_the_grouped_rules(text, monkeypatch):
    assert _outcome(text) == _grouped_outcome(text, monkeypatch)


def test_same_tokens_as_the_grouped_rules_on_random_text(monkeypatch):
    rng = random.Random(19)
    alphabet = ['a', 'b', '_', '1', '.', '..', '%', '@', '"', '\\', '*', '/', '/*', '*/',
                '\n', ' ', 'é', 'ty=', '(', '-']
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        assert _outcome(text) == _grouped_outcome(text, monkeypatch), repr(text)
