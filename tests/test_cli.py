"""The CLI's process setup: transparent huge pages for torch's CPU allocator and reuse of freed memory by
glibc's malloc by default."""

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


def test_malloc_reuses_freed_memory_for_large_blocks():
    """After the setting, a freed 64 MiB block is reused (no new memory map per large tensor); with
    FASTWEIGHTS_MALLOC_REUSE=0 glibc maps it (its default for blocks of 32 MiB or more)."""
    code = """
import ctypes, os, sys
from fastweights import cli

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
applied = cli._malloc_reuses_freed_memory()
before = libc.mallinfo2().hblks  # blocks mapped so far (by the imports)
block = libc.malloc(64 << 20)
print(applied, libc.mallinfo2().hblks - before)
"""
    import os

    for reuse, expected in (("1", ["True", "0"]), ("0", ["False", "1"])):
        env = {**os.environ, "FASTWEIGHTS_MALLOC_REUSE": reuse}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        assert out.stdout.split() == expected


def test_python_dash_m_fastweights_is_the_same_command_line(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "fastweights", "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("usage: fastweights")
    bad = subprocess.run(
        [sys.executable, "-m", "fastweights", "acl", "train", "train.max_steps=-1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bad.returncode == 2
    expected = "fastweights: error: train.max_steps: expected an int >= 0, got -1"
    assert bad.stderr.strip().splitlines()[-1] == expected
