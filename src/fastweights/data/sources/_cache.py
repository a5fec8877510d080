"""The on-disk cache of decoded data sets: its folder, atomic writes and npz load-or-build."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["default_cache_dir", "atomic_write", "files_fingerprint", "cache_key", "load_or_build_npz"]

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$FASTWEIGHTS_CACHE`` if set, else ``~/.cache/fastweights``."""
    env = os.environ.get("FASTWEIGHTS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "fastweights"


def atomic_write(path: Path, write: Callable[[Any], None], mode: str) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file of the same folder, then rename it.

    Readers never see a partial file; on any error the temporary file is removed and ``path`` keeps
    its old content. The file is made readable by everyone (the cache is meant to be shared).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def files_fingerprint(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """``(absolute path, size, mtime_ns)`` of every file, in the given order (changes when a file does).

    Raises ``FileNotFoundError`` naming the first missing file.
    """
    out = []
    for p in paths:
        st = os.stat(p)
        out.append((str(Path(p).resolve()), int(st.st_size), int(st.st_mtime_ns)))
    return out


def cache_key(parts: object) -> str:
    """A 16-hex-digit key for any JSON-serialisable description of what a cache entry holds."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def load_or_build_npz(path: Path | None, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays of the npz file ``path`` if it is readable, else ``build()`` saved atomically to ``path``.

    ``path=None`` disables the cache (always builds, writes nothing). Arrays must not need pickle
    (numeric or fixed-width unicode). An unreadable (corrupt, truncated) file is rebuilt with a warning.
    """
    if path is not None and path.exists():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            log.warning("ignoring unreadable cache %s (%s); rebuilding", path, err)
    arrays = build()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f: np.savez(f, **arrays), "wb")
        log.info("cached %s", path)
    return arrays
