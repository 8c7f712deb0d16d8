"""Seeded semantic fuzzing of the whole pipeline: small, well-typed Relay programs with a
number, a dtype, a string attribute or a list mutated, then parse -> compile -> run.

Every case must end in outputs or a :class:`~bmlib_relax.errors.BmlibError` naming what
is wrong -- never another exception (a raw TVM error) or a crash.  Mutations keep the
text parseable, so they reach type checking, the templates and the build (the parser's
own fuzzing is ``relay/test_relay_fuzz.py``).  Cases that found bugs when this was run
for hours (a process abort on ``divide(%x, 0f)``, integer division by a constant 0, an
average over an empty axis, mixed-dtype products, a million-section split) have unit
tests of their own; this keeps looking for the next one.

Budget: ``BMLIB_FUZZ_SECONDS`` (default 1.5 s) and at least ``MIN_CASES`` cases; change the
seed with ``BMLIB_FUZZ_SEED``.  A failure prints the seed, the case and the program.
"""
from __future__ import annotations

import os
import random
import re
import time

import numpy as np

import bmlib_relax
from bmlib_relax.errors import BmlibError
from bmlib_relax.relay import parse

FUZZ_SECONDS = float(os.environ.get("BMLIB_FUZZ_SECONDS", "1.5"))
SEED = int(os.environ.get("BMLIB_FUZZ_SEED", "20261202"))
MIN_CASES = 12
MAX_INPUT_ELEMENTS = 1 << 20

PROGRAMS = [
    """def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(8, 4, 3, 3), float32],
          %b: Tensor[(8), float32]) {
  %0 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0])
}""",
    """def @main(%x: Tensor[(2, 16), float32], %w: Tensor[(8, 16), float32]) {
  %0 = nn.dense(%x, %w, units=8);
  %1 = divide(%0, 2f);
  %2 = mean(%1, axis=[1], keepdims=True);
  nn.softmax(subtract(%1, %2), axis=-1)
}""",
    """def @main(%x: Tensor[(1, 8, 4, 4), float32]) {
  %0 = split(%x, indices_or_sections=2, axis=1);
  %1 = concatenate((%0.1, %0.0), axis=1);
  %2 = reshape(%1, newshape=[1, 8, 16]);
  %3 = transpose(%2, axes=[0, 2, 1]);
  nn.global_avg_pool2d(reshape(%3, newshape=[1, 16, 2, 4]))
}""",
    """def @main(%x: Tensor[(2, 12), float32]) {
  %0 = qnn.quantize(%x, 0.05f, 3, out_dtype="int8", axis=1);
  %1 = qnn.requantize(%0, 0.05f, 3, 0.1f, -2, rounding="TONEAREST", out_dtype="int8");
  qnn.dequantize(%1, 0.1f, -2, out_dtype="float32")
}""",
    """def @main(%x: Tensor[(1, 3, 8, 8), float32], %g: Tensor[(3), float32],
          %be: Tensor[(3), float32], %m: Tensor[(3), float32], %v: Tensor[(3), float32]) {
  %0 = nn.batch_norm(%x, %g, %be, %m, %v, epsilon=1e-05f);
  %1 = nn.avg_pool2d(%0.0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
  %2 = strided_slice(%1, begin=[0, 1], end=[1, 3], strides=[1, 1], axes=[0, 1]);
  clip(%2, a_min=-1f, a_max=1f)
}""",
]
_NUMBER = re.compile(r"(?<![\w.%])-?\d+(?:\.\d+)?(?:e-?\d+)?f?(?![\w.])")
_STRING = re.compile(r'="([^"]*)"')
_LIST = re.compile(r"\[([-\d, ]+)\]")
_DTYPE = re.compile(r"\b(float32|int8)\b")
_STRINGS = ["NCHW", "NHWC", "HWIO", "OIHW", "", "int32", "float16", "bogus", "NCHW16c",
            "uint8", "bool", "UPWARD"]
_NUMBERS = [0, -1, 1, 2, 3, 7, 1 << 20, 1 << 31]
_DTYPES = ["float16", "int8", "uint8", "int32", "int64", "bool", "float64"]


def mutate(program: str, rng: random.Random) -> str:
    """One mutation in the body (the signature keeps its types, so inputs stay feedable)."""
    cut = program.index("{")
    head, body = program[:cut], program[cut:]
    kind = rng.randrange(4)
    matches = {0: _NUMBER, 1: _STRING, 2: _LIST, 3: _DTYPE}[kind].finditer(body)
    matches = list(matches)
    if not matches:
        return program
    m = rng.choice(matches)
    if kind == 0:
        text = m.group(0)
        new = rng.choice(["0f", "-1f", "inff", "nanf", "1e30f"]) if text.endswith("f") \
            else str(rng.choice(_NUMBERS + [int(text) + 1, int(text) * 2]))
        return head + body[:m.start()] + new + body[m.end():]
    if kind == 1:
        return head + body[:m.start(1)] + rng.choice(_STRINGS) + body[m.end(1):]
    if kind == 2:
        items = [x for x in m.group(1).split(", ") if x]
        if items and rng.random() < 0.5:
            del items[rng.randrange(len(items))]
        elif items:
            items.insert(rng.randrange(len(items)), rng.choice(items))
        return head + body[:m.start(1)] + ", ".join(items) + body[m.end(1):]
    return head + body[:m.start()] + rng.choice(_DTYPES) + body[m.end():]


def compile_and_run(program: str) -> None:
    module = parse('#[version = "0.0.5"]\n' + program, "fuzz.relay")
    model = bmlib_relax.compile(module, num_threads=1)
    inputs = {}
    for param in module["main"].params:
        shape = tuple(int(d) for d in param.type_annotation.shape)
        if int(np.prod(shape)) > MAX_INPUT_ELEMENTS:
            return
        rng = np.random.default_rng(len(inputs))
        inputs[param.name] = (rng.random(shape) * 4 - 2).astype(param.type_annotation.dtype)
    model(**inputs)


def test_seed_programs_compile_and_run():
    for program in PROGRAMS:  # the mutations start from programs that work
        compile_and_run(program)


def test_mutated_programs_end_in_outputs_or_a_bmlib_error():
    rng = random.Random(SEED)
    deadline = time.monotonic() + FUZZ_SECONDS
    cases = errors = 0
    while cases < MIN_CASES or time.monotonic() < deadline:
        program = mutate(rng.choice(PROGRAMS), rng)
        try:
            compile_and_run(program)
        except BmlibError:
            errors += 1
        except Exception as exc:  # a reproducer, not just the exception
            raise AssertionError(
                f"case {cases} (BMLIB_FUZZ_SEED={SEED}) raised {type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[-1][:500] if str(exc).strip() else ''}"
                f"\n--- program ---\n{program}") from exc
        cases += 1
    assert cases >= MIN_CASES
