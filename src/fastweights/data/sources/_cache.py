"""The on-disk cache of decoded data sets: its folder, atomic writes and npz load-or-build."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from fastweights.io import atomic_write_with

__all__ = ["default_cache_dir", "files_fingerprint", "cache_key", "load_or_build_npz"]

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$FASTWEIGHTS_CACHE`` if set, else ``~/.cache/fastweights``."""
    env = os.environ.get("FASTWEIGHTS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "fastweights"


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
        atomic_write_with(path, lambda f: np.savez(f, **arrays), mode=0o644)
        log.info("cached %s", path)
    return arrays
