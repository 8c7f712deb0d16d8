"""The README's Python examples run as written (docs that run)."""
from __future__ import annotations

import re

import pytest

from conftest import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
# Self-contained examples start with their imports; fragments (e.g. loading an artifact
# produced by the walk-through) are covered by the CLI tests instead.
RUNNABLE = [b for b in BLOCKS if b.startswith(("import", "from"))
            and "out/model.so" not in b]


def test_readme_has_runnable_examples():
    assert len(RUNNABLE) >= 2


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_readme_example_runs(index, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(RUNNABLE[index], f"README.md example {index}", "exec"), {})
