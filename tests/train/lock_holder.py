"""A real second process holding a run folder's lock (for the lock tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

_HOLDER = textwrap.dedent(
    """
    import sys
    from fastweights.train.run_folder import run_lock
    with run_lock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.read()
    """
)


def hold_in_subprocess(folder: Path) -> subprocess.Popen:
    """Start a process that holds ``run_lock(folder)`` until its stdin is closed (then ``wait()`` it)."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc
