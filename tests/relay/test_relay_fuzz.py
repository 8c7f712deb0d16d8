"""Seeded mutation fuzzing of the parser over the shared corpus.

Every mutated program must end in a parsed module/expression or a ParseError --
never another exception, a RecursionError or a hang.  Programs that still
parse must also print and read back to a structurally equal program.
"""
from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest

from bmlib_relax.errors import ParseError
from bmlib_relax.relay.analysis import structural_equal
from bmlib_relax.relay.parser import parse, parse_expr
from bmlib_relax.relay.printer import astext

SEED = 20240611
CASES_PER_FILE = 12
MAX_FILE_BYTES = 24_000
_PIECES = re.compile(r"\s+|%?[\w.]+|/\*|\*/|->|=>|.", re.S)
_NOISE = ["(", ")", "[", "]", "{", "}", ",", ";", "=", "%", "@", "meta", "fn", "let",
          "if", "else", "match", "type", "def", "/*", "*/", "//", "\"", "#[", "-", ".0",
          "1f7", "1e", "inff", "?", "_", "\x00", "\u00e9", "\n", "Tensor[", "%0", "1.5i8"]


def _corpus_files() -> list[Path]:
    root = os.environ.get("BMLIB_RELAY_CORPUS")
    if not root:
        return []
    files = sorted(Path(root).rglob("*.relay"))
    return [p for p in files if p.stat().st_size <= MAX_FILE_BYTES]


def _mutate(text: str, rng: random.Random) -> str:
    pieces = _PIECES.findall(text)
    if not pieces:
        return text
    op = rng.randrange(7)
    i = rng.randrange(len(pieces))
    if op == 0:  # delete a run of tokens
        del pieces[i:i + rng.randint(1, 4)]
    elif op == 1:  # duplicate a token
        pieces.insert(i, pieces[i])
    elif op == 2:  # swap two tokens
        j = rng.randrange(len(pieces))
        pieces[i], pieces[j] = pieces[j], pieces[i]
    elif op == 3:  # truncate
        return "".join(pieces[:i])
    elif op == 4:  # inject syntax noise
        pieces.insert(i, rng.choice(_NOISE))
    elif op == 5:  # inject random characters
        pieces.insert(i, "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randint(1, 6))))
    else:  # deep nesting
        opener = rng.choice(["(", "[", "{", "f(", "fn () {", "if (", "(1, ", "-"])
        pieces.insert(i, opener * rng.choice([10, 900, 1100, 5000]))
    return "".join(pieces)


def _check(text: str, is_expr: bool) -> None:
    fn = parse_expr if is_expr else parse
    try:
        result = fn(text, "<fuzz>")
    except ParseError:
        return
    printed = astext(result)
    again = fn(printed, "<printed>")
    assert structural_equal(result, again), printed[:1000]


def test_fuzz_corpus_mutations():
    files = _corpus_files()
    if not files:
        pytest.skip("BMLIB_RELAY_CORPUS is not set")
    rng = random.Random(SEED)
    start = time.monotonic()
    cases = 0
    for path in files:
        original = path.read_text()
        is_expr = "#[version" not in original and not re.search(r"^\s*(def|type)\b", original,
                                                                 re.M)
        for _ in range(CASES_PER_FILE):
            text = original
            for _ in range(rng.randint(1, 3)):
                text = _mutate(text, rng)
            case_start = time.monotonic()
            try:
                _check(text, is_expr)
            except Exception as exc:  # report the reproducer, not just the exception
                raise AssertionError(f"{path.name}: {type(exc).__name__}: {exc}\n"
                                     f"--- input ---\n{text[:3000]}") from exc
            assert time.monotonic() - case_start < 5, f"{path.name}: slow case"
            cases += 1
    assert cases >= 2000
    assert time.monotonic() - start < 120


@pytest.mark.parametrize("text", [
    "(" * 50000, "[" * 50000, "{" * 50000, "f(" * 50000, "fn () {" * 20000,
    "if (True) {" * 20000, "f(a=" + "[" * 50000, "def @main(%x: " + "(" * 50000,
    "match (1) {" + "(" * 50000, "-" * 100000 + "1", "%x" + ".0" * 100000,
    "let %x = 1; " * 30000 + "%x", "/*" * 50000, "\"" + "a" * 100000,
], ids=lambda text: f"{text[:10]!r}...x{len(text)}")
def test_pathological_inputs_raise_parse_error_or_parse(text):
    for fn in (parse, parse_expr):
        try:
            fn(text)
        except ParseError:
            pass
