"""Fuzzing shipped artifacts: any damage to a library or its metadata ends in the
library loading unchanged or an ``ArtifactError`` — never another exception, a
signal or a different model.  Bounded (about a second) in the default run;
``BMLIB_FUZZ_SECONDS`` makes it longer, ``BMLIB_FUZZ_SEED`` picks the seed."""
from __future__ import annotations

import json
import os
import random
import time

import numpy as np
import pytest

import bmlib_relax
from bmlib_relax import relay
from bmlib_relax.errors import ArtifactError

SECONDS = float(os.environ.get("BMLIB_FUZZ_SECONDS", "1.5"))
SEED = int(os.environ.get("BMLIB_FUZZ_SEED", "20261201"))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    x = relay.var("x", shape=(1, 8), dtype="float32")
    w = relay.var("w", shape=(4, 8), dtype="float32")
    model = bmlib_relax.compile(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))),
                                {"w": np.arange(32, dtype="float32").reshape(4, 8) / 32})
    folder = tmp_path_factory.mktemp("fuzz_artifact")
    model.export_library(folder / "m.so")
    feed = np.linspace(-1, 1, 8, dtype="float32").reshape(1, 8)
    return folder, (folder / "m.so").read_bytes(), (folder / "m.json").read_bytes(), model(feed)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    buf = bytearray(data)
    if kind == 0 and buf:  # flip bits
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # cut short
        del buf[rng.randrange(len(buf) + 1):]
    elif kind == 2:  # insert junk
        at = rng.randrange(len(buf) + 1)
        buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:  # overwrite a run
        at = rng.randrange(max(len(buf), 1))
        buf[at:at + 8] = bytes(rng.randrange(256) for _ in range(8))
    return bytes(buf)


def _json_mutations(text: bytes, rng: random.Random) -> bytes:
    """Structural damage to the metadata: drop, retype or replace a field."""
    data = json.loads(text)
    key = rng.choice(sorted(data))
    choice = rng.randrange(4)
    if choice == 0:
        del data[key]
    elif choice == 1:
        data[key] = rng.choice([None, 1, -1, "x", [], {}, 2 ** 70, True])
    elif choice == 2 and isinstance(data.get("inputs"), list) and data["inputs"]:
        data["inputs"][0][rng.choice(["name", "shape", "dtype"])] = rng.choice(
            [None, 7, "float99", [-1], [[1]], {}])
    else:
        data["sha256"] = "".join(rng.choice("0123456789abcdef") for _ in range(64))
    return json.dumps(data).encode()


@pytest.mark.parametrize("target", ["library", "metadata-bytes", "metadata-json"])
def test_damaged_artifacts_load_unchanged_or_raise_artifact_error(artifact, target, tmp_path):
    folder, library, metadata, expected = artifact
    rng = random.Random(f"{SEED}-{target}")
    deadline = time.monotonic() + SECONDS
    cases = 0
    while time.monotonic() < deadline or cases < 5:
        cases += 1
        so, meta = library, metadata
        if target == "library":
            so = _mutate(library, rng)
        elif target == "metadata-bytes":
            meta = _mutate(metadata, rng)
        else:
            meta = _json_mutations(metadata, rng)
        case = tmp_path / f"case{cases}"
        case.mkdir()
        (case / "m.so").write_bytes(so)
        (case / "m.json").write_bytes(meta)
        try:
            model = bmlib_relax.load(case / "m.so")
        except ArtifactError:
            continue
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"seed {SEED} case {cases} ({target}): {type(exc).__name__}: {exc}")
        # Loaded: the library must be the one written, and compute the same.
        assert so == library, f"seed {SEED} case {cases}: a damaged library loaded"
        feed = np.linspace(-1, 1, 8, dtype="float32").reshape(1, 8)
        np.testing.assert_array_equal(model(feed), expected)
