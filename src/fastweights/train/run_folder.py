"""Run-folder safety: nothing a user has is ever destroyed.

- :func:`run_lock`: an exclusive lock on a folder for the lifetime of one writer (``train``, ``eval``,
  ``export``): ``fcntl.flock`` on ``<folder>/.lock``, which holds the writer's PID so a second writer's
  error names it. Re-entrant within a process; released on exit and on exceptions (and by the OS when
  the process dies, even under ``kill -9``).
- :func:`output_folder`: the lock plus :func:`check_output_dir`, the rule that no command writes into
  a folder holding another run (or into its own source) unless the user passes ``--force``.
- :func:`locks_run_dir` / :func:`locks_eval_output`: decorators that wrap a recipe's ``train`` /
  ``evaluate`` in the lock (and, for ``evaluate``, the output rule).
- :func:`remove_stale_temporaries`: the ``.<name>.*.tmp`` files that killed atomic writes leave behind.
- :func:`check_writable`: a run folder can be written, tried before anything in it is changed.
- :class:`OutputClaims`: the files a command (``compare``) wrote into a folder the user may share with
  it, recorded by content, so that it replaces only its own files (never a file the user put there
  or edited since) unless ``--force``.

A folder *holds a run* when it has one of :data:`RUN_MARKERS`; the lock file itself is ignored.
Locking is POSIX-only (``fcntl``); elsewhere :func:`run_lock` does not lock.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from fastweights.io import atomic_write_json

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CLAIMS_NAME",
    "STAGING_PREFIX",
    "LOCK_NAME",
    "OutputClaims",
    "RUN_MARKERS",
    "RunFolderError",
    "check_output_dir",
    "check_writable",
    "folder_contents",
    "holds_lock",
    "locks_eval_output",
    "locks_run_dir",
    "output_folder",
    "refuse_occupied",
    "remove_stale_temporaries",
    "run_lock",
]

LOCK_NAME = ".lock"
RUN_MARKERS = ("config.yaml", "checkpoints", "metrics.jsonl", "results.json", "model.safetensors")

F = TypeVar("F", bound=Callable[..., Any])


class RunFolderError(ValueError):
    """A run folder cannot be used as asked: in use by another process, holding another run, damaged
    checkpoints, unwritable. The message names the folder or file and what to do; the CLI prints it as
    ``fastweights: error: …``."""


def folder_contents(folder: Path) -> tuple[list[str], list[str]]:
    """``(run markers present, other entries)`` of ``folder`` (both sorted; the lock file is ignored;
    empty lists for a missing folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return [], []
    names = sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME)
    markers = [n for n in names if n in RUN_MARKERS]
    return markers, [n for n in names if n not in RUN_MARKERS]


def refuse_occupied(run_dir: Path, markers: list[str], others: list[str], force_does: str) -> None:
    """Refuse a fresh run (no ``--resume``, no ``--force``) in a folder that is not new or empty.

    Args:
        markers, others: :func:`folder_contents` of ``run_dir``.
        force_does: what ``--force`` would do instead, for the message (e.g. ``"train into it"``).

    Raises:
        FileExistsError: ``run_dir`` holds a run (naming its markers; pass ``--resume`` or ``--force``).
        RunFolderError: ``run_dir`` holds other files (naming up to five).
    """
    if markers:
        raise FileExistsError(
            f"run_dir: {run_dir} already holds a run ({', '.join(markers)}); pass --resume to continue it, "
            "--force to start over, or choose another folder"
        )
    if others:
        raise RunFolderError(
            f"run_dir: {run_dir} is not empty ({', '.join(others[:5])}); choose a new or empty folder, "
            f"or pass --force to {force_does}"
        )


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … ({len(names)} entries)" if len(names) > limit else "")


def _is_eval_output_of(folder: Path, source: Path, purpose: str = "eval") -> bool:
    """Whether ``folder`` holds only an earlier ``eval --out`` of ``source`` (its ``results.json``
    names ``source`` as ``run.run_dir`` and it has no config or checkpoints), which a new evaluation may
    replace; ``purpose="stream"``: an earlier ``acl stream --out`` of the model ``source`` (its
    ``results.json`` names it as ``stream.model``)."""
    markers, _ = folder_contents(folder)
    if "config.yaml" in markers or "checkpoints" in markers or "results.json" not in markers:
        return False
    try:
        results = json.loads((folder / "results.json").read_text())
        recorded = results["stream"]["model"] if purpose == "stream" else results["run"]["run_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(recorded, str) and _same(Path(recorded), source)


def check_output_dir(
    out_dir: Path, *, source: Path, force: bool, purpose: Literal["eval", "export", "stream"]
) -> None:
    """Refuse to write ``eval --out`` / ``export`` / ``acl stream --out`` results into ``out_dir`` unless
    it is new or empty.

    Allowed without ``force``: a missing or empty folder; for ``purpose="eval"`` also ``source``
    itself (results belong in the run folder) and an earlier evaluation of ``source`` written with
    ``--out`` (so ``make demo`` can be rerun); for ``purpose="stream"`` (``source``: the model folder) an
    earlier ``acl stream`` output of the same model, never the model folder itself.

    Raises:
        RunFolderError: naming ``out_dir`` and what it holds (the source run itself, another run's
            files, or other files), when ``force`` is False.
    """
    out_dir, source = Path(out_dir), Path(source)
    if force:
        return
    if _same(out_dir, source):
        if purpose == "eval":
            return
        if purpose == "export":
            what, doing = "source run folder", "exporting into it would replace its checkpoints"
        else:
            what, doing = "model folder", "`acl stream` would put its results.json and report among its files"
        raise RunFolderError(
            f"out_dir: {out_dir} is the {what} itself; {doing}; choose another folder (or pass --force)"
        )
    markers, others = folder_contents(out_dir)
    if not markers and not others:
        return
    if purpose in ("eval", "stream") and _is_eval_output_of(out_dir, source, purpose):
        return
    if markers:
        raise RunFolderError(
            f"out_dir: {out_dir} already holds a run ({_listing(markers + others)}); choose a new or "
            "empty folder, or pass --force to overwrite it"
        )
    raise RunFolderError(
        f"out_dir: {out_dir} is not empty ({_listing(others)}); choose a new or empty folder, or pass "
        "--force to write into it"
    )


@dataclass
class _Held:
    fd: int
    count: int
    created: bool  # the folder did not exist


_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


def holds_lock(folder: Path) -> bool:
    """Whether this process holds the :func:`run_lock` of ``folder``."""
    with _HELD_GUARD:
        return os.path.realpath(folder) in _HELD


def _lock_holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        if text:
            return f"PID {int(text)}"
    return "an unknown PID"


def _acquire(folder: Path) -> _Held:
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunFolderError(f"{folder}: cannot write in this folder ({err.strerror or err})") from None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise RunFolderError(
                f"{folder}: in use by another fastweights process ({holder}, lock file "
                f"{folder / LOCK_NAME}); wait for it to finish or stop it"
            ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as err:
        os.close(fd)
        raise RunFolderError(f"{folder}: cannot write {LOCK_NAME} ({err.strerror or err})") from None
    return _Held(fd, 1, created)


def _release(folder: Path, held: _Held) -> None:
    # The lock file is removed while still locked: a writer that opened it before fails to lock it, one
    # that opens the path afterwards creates a new file, so no lock file outlives its writer.
    with contextlib.suppress(OSError):
        (folder / LOCK_NAME).unlink()
    if fcntl is not None:
        fcntl.flock(held.fd, fcntl.LOCK_UN)
    os.close(held.fd)
    if held.created:  # a folder this writer created and left empty (e.g. a refused config): remove it
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def run_lock(folder: Path) -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (created if missing) for the ``with`` block.

    Re-entrant within one process. The lock file exists only while held (a stale one left by an older
    version is reused); a folder this call created and the block left empty is removed on exit.

    Raises:
        RunFolderError: if another process holds the lock (naming its PID) or the folder is not
            writable (read-only, missing permissions).
    """
    folder = Path(folder)
    key = os.path.realpath(folder)
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
    if held is None:
        held = _acquire(folder)
        with _HELD_GUARD:
            _HELD[key] = held
    try:
        yield folder
    finally:
        with _HELD_GUARD:
            held.count -= 1
            last = held.count == 0
            if last:
                del _HELD[key]
        if last:
            _release(folder, held)


@contextlib.contextmanager
def output_folder(
    out_dir: Path, *, source: Path, force: bool, purpose: Literal["eval", "export", "stream"]
) -> Iterator[Path]:
    """:func:`run_lock` of ``out_dir``, then :func:`check_output_dir` under the lock.

    Raises:
        RunFolderError: from either.
    """
    with run_lock(out_dir) as folder:
        check_output_dir(folder, source=source, force=force, purpose=purpose)
        yield folder


def locks_run_dir(fn: F) -> F:
    """Decorate a recipe's ``train(cfg, run_dir, …)``: the whole call holds ``run_lock(run_dir)``, so
    the resume checks, the config/command writes and the training loop see no second writer. Under
    torchrun only rank 0 takes the lock (the other ranks never write into the folder)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from fastweights.train.distributed import world

        if not world().main:
            return fn(*args, **kwargs)
        run_dir = Path(sig.bind(*args, **kwargs).arguments["run_dir"])
        with run_lock(run_dir):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def locks_eval_output(fn: F) -> F:
    """Decorate a recipe's ``evaluate(run_dir, *, out_dir=None, force=False, …)``: the call holds the
    lock of its output folder (``out_dir``, default ``run_dir``), which must pass
    :func:`check_output_dir` with ``purpose="eval"``."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        run_dir = Path(bound.arguments["run_dir"])
        out = bound.arguments.get("out_dir")
        target = Path(out) if out is not None else run_dir
        with output_folder(target, source=run_dir, force=bool(bound.arguments.get("force")), purpose="eval"):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Delete the ``.<name>.*.tmp`` files of interrupted atomic writes in ``run_dir`` and
    ``run_dir/checkpoints`` (call it holding the folder's lock); returns what was removed."""
    removed = []
    for folder in (Path(run_dir), Path(run_dir) / "checkpoints"):
        if not folder.is_dir():
            continue
        for p in folder.glob(".*.tmp"):
            if p.is_file():
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                removed.append(p)
    return removed


def check_writable(folder: Path, *, appended: tuple[str, ...] = ("metrics.jsonl",), doing: str) -> None:
    """Refuse to start writing into ``folder`` when a write would fail part-way: ``folder`` and every
    folder below it must take a new file (one is created and removed in each: the real test, which
    also holds for root, read-only mounts and immutable folders, unlike permission bits), and the files
    ``appended`` (written in place, e.g. the training log) must open for writing. Call it holding the
    folder's lock, before anything in it is changed.

    Args:
        appended: files (relative to ``folder``) that are extended in place rather than replaced.
        doing: what the caller was about to do, for the message (e.g. ``"--resume"``).

    Raises:
        RunFolderError: naming the folder or file that cannot be written and the reason; nothing was
            changed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    folders = [Path(top) for top, _, _ in os.walk(folder)]  # symbolic links are not followed
    for sub in folders:
        try:
            fd, probe = tempfile.mkstemp(prefix=".write-probe.", suffix=".tmp", dir=sub)
        except OSError as err:
            raise RunFolderError(
                f"run_dir: cannot {doing} {folder}: cannot write into {sub} ({err.strerror or err}); "
                "nothing was changed"
            ) from None
        os.close(fd)
        os.unlink(probe)
    for name in appended:
        path = folder / name
        if not path.is_file():
            continue
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as err:
            raise RunFolderError(
                f"run_dir: cannot {doing} {folder}: cannot write {path} ({err.strerror or err}); "
                "nothing was changed"
            ) from None


#: the record of :class:`OutputClaims` in the folder it covers
CLAIMS_NAME = ".fastweights-outputs.json"
#: the name prefix of :meth:`OutputClaims.staging` folders (one left by a killed command is removed)
STAGING_PREFIX = ".fastweights-staging-"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class OutputClaims:
    """The output files a command wrote into ``folder``, recorded by content (SHA-256) in
    ``folder/.fastweights-outputs.json``: the command may replace a file it wrote (and nobody changed
    since), never a file the user put there or edited, unless it is told to (``--force``).

    Outputs are written into a staging folder first (:meth:`staging`) and moved into ``folder`` by
    :meth:`publish`, which checks every name before it moves any, so a refusal changes nothing. Use it
    holding ``run_lock(folder)``.

    Args:
        folder: the output folder (it need not exist yet).
        command: the command, for messages (e.g. ``"compare"``).
    """

    def __init__(self, folder: Path, command: str) -> None:
        self.folder = Path(folder)
        self.command = command

    @property
    def record_path(self) -> Path:
        """The record file."""
        return self.folder / CLAIMS_NAME

    def _read(self) -> dict[str, list[str]]:
        try:
            files = json.loads(self.record_path.read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # missing or damaged: nothing is claimed
        if not isinstance(files, dict):
            return {}
        return {k: [h for h in v if isinstance(h, str)] for k, v in files.items() if isinstance(v, list)}

    def _write(self, files: dict[str, list[str]]) -> None:
        atomic_write_json(self.record_path, {"written_by": f"fastweights {self.command}", "files": files})

    def unclaimed(self, names: list[str]) -> list[str]:
        """The ``names`` (paths relative to the folder) that exist but are not files this command wrote
        as they are now: another file, or its file changed since."""
        record = self._read()
        out = []
        for name in names:
            path = self.folder / name
            if not (path.exists() or path.is_symlink()):
                continue  # nothing in the way
            if path.is_symlink() or not path.is_file() or _sha256(path) not in record.get(name, []):
                out.append(name)
        return out

    def check(self, names: list[str], *, force: bool) -> None:
        """Refuse (unless ``force``) when one of ``names`` holds a file this command did not write.

        Raises:
            RunFolderError: naming the first such file, the others' count and ``--force``.
        """
        if force:
            return
        refused = self.unclaimed(names)
        if refused:
            more = f" (and {len(refused) - 1} more: {', '.join(refused[1:4])})" if len(refused) > 1 else ""
            raise RunFolderError(
                f"{self.folder / refused[0]}: not written by `{self.command}` (another file, or changed "
                f"since it was written){more}; `{self.command}` would replace it: move it away, or pass "
                "--force to overwrite it"
            )

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A new staging folder inside ``folder`` (removed on exit) to write the outputs into, for
        :meth:`publish`; staging folders of killed commands are removed first."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.folder.glob(STAGING_PREFIX + "*"):
            shutil.rmtree(old, ignore_errors=True)
        path = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.folder))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def publish(self, staged: Path, *, force: bool) -> list[Path]:
        """Move every file of the staging folder ``staged`` to the same place in ``folder`` and record
        it as this command's; returns the paths written.

        Every name is checked first (:meth:`check`), so a refusal moves nothing. The record accepts both
        the old and the new content while the files are moved (a kill in between leaves files that are
        all still claimed).

        Raises:
            RunFolderError: a file the command did not write is in the way (without ``force``).
            OSError: naming the file, when moving fails.
        """
        staged = Path(staged)
        names = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
        self.check(names, force=force)
        new = {name: _sha256(staged / name) for name in names}
        record = self._read()
        self._write({**record, **{n: sorted({*record.get(n, []), h}) for n, h in new.items()}})
        out = []
        for name in names:
            dest = self.folder / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / name, dest)
            out.append(dest)
        self._write({**record, **{n: [h] for n, h in new.items()}})
        return out
