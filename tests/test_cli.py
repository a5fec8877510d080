"""The CLI's process setup: transparent huge pages for torch's CPU allocator by default."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastweights import cli


@pytest.mark.parametrize(
    ("mode", "user", "expected"),
    [
        ("always [madvise] never\n", None, "1"),
        ("[always] madvise never\n", None, "1"),
        ("always madvise [never]\n", None, None),  # THP off in the kernel: torch would only warn
        ("always [madvise] never\n", "0", "0"),  # the user's choice wins
        (None, None, None),  # no THP support (no such file)
    ],
)
def test_huge_pages_by_default(tmp_path, monkeypatch, mode, user, expected):
    setting = tmp_path / "enabled"
    if mode is not None:
        setting.write_text(mode)
    monkeypatch.setattr(cli, "_THP_MODE", setting)
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    if user is not None:
        monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", user)
    cli._huge_pages_by_default()
    assert cli.os.environ.get("THP_MEM_ALLOC_ENABLE") == expected


def test_main_sets_it_before_torch_is_imported(tmp_path):
    """c10 reads the variable once, at torch's first allocation: main must set it before anything
    imports torch (its argument parser imports the recipes)."""
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    code = f"""
import os, sys
from pathlib import Path
os.environ.pop("THP_MEM_ALLOC_ENABLE", None)
from fastweights import cli

def parser():
    print("torch" in sys.modules, os.environ.get("THP_MEM_ALLOC_ENABLE"))
    raise SystemExit(0)

cli._parser, cli._THP_MODE = parser, Path({str(setting)!r})
cli.main([])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "1"]
