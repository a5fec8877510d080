"""Crash-safe file output, the one module every writer of the package uses: atomic writes (bytes, text,
JSON, ``torch.save``, matplotlib figures, or any ``write(file)`` callback) and an append-only JSON-lines
log.

Atomic writes go to a temporary file in the destination folder, are flushed and ``fsync``-ed, and then
moved over the destination with :func:`os.replace` (atomic on POSIX and Windows for paths on the same
file system). A reader therefore sees either the old file or the complete new one, never a partial
write; if writing fails, the old file is left untouched, the temporary file is removed and the
``OSError`` (e.g. ``PermissionError``, ENOSPC) names the destination.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_torch_save",
    "atomic_write_with",
    "atomic_save_figure",
    "read_json",
    "JsonlLogger",
    "read_jsonl",
    "PathLike",
]

PathLike = str | os.PathLike[str]  # a path argument: str or os.PathLike


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once: os.umask can only be queried by setting it, which is racy with threads.
_UMASK = _current_umask()


def _fsync_dir(folder: Path) -> None:
    """Persist a rename by syncing its folder (POSIX only; silently skipped where unsupported)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _atomic_binary(path: PathLike, *, mode: int | None = None) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces ``path`` atomically when the block exits without error.

    ``mode``: file permissions of the result (default: ``0o666`` minus the umask).
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as err:
        raise _naming(err, dest) from err
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, (0o666 & ~_UMASK) if mode is None else mode)  # mkstemp creates 0600
        os.replace(tmp, dest)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and err.errno is not None:
            raise _naming(err, dest) from err
        raise
    _fsync_dir(dest.parent)


def _naming(err: OSError, dest: Path) -> OSError:
    """The same error (same subclass: ``PermissionError``, ENOSPC ``OSError`` …) naming the destination
    instead of the temporary file."""
    return OSError(err.errno, err.strerror, str(dest)) if err.errno is not None else err


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, creating parent folders.

    Raises:
        TypeError: if ``data`` is not bytes-like.
        OSError: on file-system errors (the previous file, if any, is left intact).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data: expected bytes, given {type(data).__name__}")
    with _atomic_binary(path) as f:
        f.write(data)


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (UTF-8 by default, no newline translation)."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, given {type(text).__name__}")
    atomic_write_bytes(path, text.encode(encoding))


def _json_default(obj: Any) -> Any:
    """Convert numpy / torch scalars and arrays and paths to JSON-native types."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def atomic_write_json(path: PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON (indent 2, key order preserved, trailing newline) atomically.

    numpy/torch scalars and arrays and ``os.PathLike`` values are converted to plain JSON types.
    NaN/Inf floats are written as ``NaN``/``Infinity`` (Python's json default).

    Raises:
        TypeError: if ``obj`` contains a value that cannot be serialised (nothing is written).
    """
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"
    atomic_write_text(path, text)


def read_json(path: PathLike, what: str = "JSON") -> Any:
    """The JSON document in ``path`` (``NaN``/``Infinity`` read back as floats).

    Args:
        what: what the file should hold, for the error (e.g. ``"the results of `cl-baselines run`"``).

    Raises:
        FileNotFoundError: naming ``path`` when it does not exist.
        ValueError: one line naming ``path`` when it is damaged: not UTF-8 text or not valid JSON (e.g.
            a truncated copy), with where the JSON stops making sense.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: not found; expected {what}")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{p}: damaged, expected {what} (byte {err.start} is not UTF-8 text)") from None
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{p}: damaged (truncated or edited?), expected {what}; invalid JSON at line {err.lineno} "
            f"column {err.colno}: {err.msg}"
        ) from None


def atomic_torch_save(obj: Any, path: PathLike) -> None:
    """``torch.save(obj, path)`` atomically: a crash or error mid-save leaves the old file intact."""
    with _atomic_binary(path) as f:
        torch.save(obj, f)


def atomic_write_with(path: PathLike, write: Any, *, mode: int | None = None) -> None:
    """Write ``path`` atomically through ``write(binary_file)`` (e.g. ``lambda f: np.savez(f, **arrays)``).

    Args:
        mode: permissions of the written file (default ``0o666`` minus the umask; the data cache
            passes ``0o644`` so it can be shared).

    Raises:
        OSError: on file-system errors (the previous file, if any, is left intact).
    """
    with _atomic_binary(path, mode=mode) as f:
        write(f)


def atomic_save_figure(fig: Any, path: PathLike, *, dpi: int = 120) -> Path:
    """Save a matplotlib ``Figure`` as PNG at ``path`` atomically (rendered in memory first); returns
    ``path`` as a :class:`~pathlib.Path`."""
    import io as _io

    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


class JsonlLogger:
    """Append-only JSON-lines log (one JSON object per line), e.g. ``runs/<name>/metrics.jsonl``.

    Each :meth:`log` call writes one line and flushes it, so a crash loses at most the line being
    written. When opening an existing file whose last line is incomplete (an interrupted run), that
    partial line is truncated away before appending, so resumed runs never glue a new record onto it.

    Use as a context manager or call :meth:`close`.

    Args:
        path: log file; parent folders are created.
        fsync: also ``os.fsync`` after every record (slower; survives power loss, not only crashes).
        keep_bytes: first truncate the file to this many bytes (a resumed run passes the :attr:`size`
            recorded in its checkpoint, dropping the records written after it); ``None`` keeps it all.

    Raises:
        ValueError: if ``keep_bytes`` is negative or larger than the file (records were lost).
    """

    def __init__(self, path: PathLike, *, fsync: bool = False, keep_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep_bytes is not None:
            size = self.path.stat().st_size if self.path.exists() else 0
            if not 0 <= keep_bytes <= size:
                raise ValueError(
                    f"{self.path}: expected at least {keep_bytes} bytes of records (as checkpointed), "
                    f"found {size}; the log was shortened or replaced"
                )
            if keep_bytes < size:
                os.truncate(self.path, keep_bytes)
        _drop_partial_last_line(self.path)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")

    @property
    def size(self) -> int:
        """Bytes in the file after the last complete record (what :meth:`log` has flushed).

        Raises:
            ValueError: if the logger was closed.
        """
        if self._file is None:
            raise ValueError(f"JsonlLogger({str(self.path)!r}) is closed")
        return os.fstat(self._file.fileno()).st_size

    def log(self, **record: Any) -> None:
        """Append ``record`` as one JSON line and flush.

        Raises:
            TypeError: if a value is not JSON serialisable (nothing is written).
            ValueError: if the logger was closed.
            OSError: naming the log file, if writing fails (a partial line is dropped when the log
                is reopened).
        """
        if self._file is None:
            raise ValueError(f"JsonlLogger({str(self.path)!r}) is closed")
        line = json.dumps(record, default=_json_default)
        try:
            self._file.write(line + "\n")
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())
        except OSError as err:  # e.g. a full disk: name the log, not a file descriptor
            raise _naming(err, self.path) from err

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JsonlLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _drop_partial_last_line(path: Path) -> None:
    """Truncate ``path`` after its last newline if it does not end with one."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Scan backwards in blocks for the last newline.
        pos, block = size, 1 << 16
        cut = 0
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            chunk = f.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                cut = start + idx + 1
                break
            pos = start
        f.truncate(cut)


def read_jsonl(path: PathLike) -> list[dict[str, Any]]:
    """Read a JSON-lines file into a list of dicts.

    Blank lines are skipped. A final line that is not valid JSON (a run interrupted mid-write) is
    dropped with a :class:`RuntimeWarning`.

    Args:
        path: the file. ``NaN``/``Infinity`` values are read back as floats.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a line other than the last is not valid JSON, or a line is not a JSON object.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: expected an existing JSON-lines file, given {str(p)!r}")
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    records: list[dict[str, Any]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines):
                warnings.warn(
                    f"{p}: ignoring truncated last line {n} ({e.msg})", RuntimeWarning, stacklevel=2
                )
                break
            raise ValueError(f"{p}: line {n}: expected a JSON object, given invalid JSON ({e.msg})") from e
        if not isinstance(rec, dict):
            raise ValueError(f"{p}: line {n}: expected a JSON object, given {type(rec).__name__}")
        records.append(rec)
    return records
