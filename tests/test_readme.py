"""The README's Python snippets run as written (so they cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_readme_has_the_layer_and_op_snippets():
    assert len(BLOCKS) >= 2
    assert any("SRWMLayer" in b for b in BLOCKS) and any("fastweights.ops" in b for b in BLOCKS)
    assert all("assert" in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_snippet_runs(index):
    code = compile(BLOCKS[index], f"{README}:python-block-{index + 1}", "exec")
    exec(code, {"__name__": f"readme_block_{index + 1}"})
