"""CITATION.cff is Citation File Format 1.2.0 with the three papers the library implements as references,
and agrees with pyproject.toml, LICENSE and the README."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
CFF = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# the papers: title -> (arXiv id, reference implementation)
PAPERS = {
    "A Modern Self-Referential Weight Matrix That Learns to Modify Itself": (
        "2202.05780",
        "https://github.com/IDSIA/modern-srwm",
    ),
    "Metalearning Continual Learning Algorithms": ("2312.00276", "https://github.com/IDSIA/automated-cl"),
    "Learning to (Learn at Test Time): RNNs with Expressive Hidden States": (
        "2407.04620",
        "https://github.com/test-time-training/ttt-lm-pytorch",
    ),
}


def _is_author(entry: object) -> bool:
    """A CFF person (``family-names`` or ``given-names``) or entity (``name``), with string values."""
    if not isinstance(entry, dict) or not entry:
        return False
    named = any(isinstance(entry.get(k), str) and entry[k].strip() for k in ("name", "family-names"))
    return named and all(isinstance(v, str) for v in entry.values())


def test_citation_has_the_required_cff_keys():
    assert CFF["cff-version"] == "1.2.0"
    for key in ("message", "title"):
        assert isinstance(CFF[key], str) and CFF[key].strip(), key
    assert isinstance(CFF["authors"], list) and CFF["authors"] and all(map(_is_author, CFF["authors"]))
    assert CFF["type"] == "software"


def test_citation_agrees_with_pyproject_and_license():
    assert str(CFF["version"]) == PROJECT["version"]
    assert CFF["license"] == PROJECT["license"] == "MIT"
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    holder = CFF["authors"][0]["name"]
    assert f"Copyright (c) 2026 {holder}\n" in license_text


@pytest.mark.parametrize("title", sorted(PAPERS))
def test_citation_references_each_paper_with_its_code(title):
    (ref,) = [r for r in CFF["references"] if r["title"] == title]
    arxiv, code = PAPERS[title]
    assert isinstance(ref["type"], str) and isinstance(ref["year"], int)
    assert ref["authors"] and all(map(_is_author, ref["authors"]))
    assert ref["url"] == f"https://arxiv.org/abs/{arxiv}"
    assert {"type": "other", "value": f"arXiv:{arxiv}", "description": "arXiv preprint"} in ref["identifiers"]
    assert ref["repository-code"] == code
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert title in readme and f"https://arxiv.org/abs/{arxiv}" in readme and code in readme


def test_citation_lists_only_those_papers():
    assert sorted(r["title"] for r in CFF["references"]) == sorted(PAPERS)
