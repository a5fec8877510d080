"""Resumable checkpoints: atomic ``latest.pt`` / ``best.pt`` and RNG-state capture.

Layout: ``<run_dir>/checkpoints/latest.pt`` (written at every save) and ``best.pt`` (written when the
save is marked best). Both are written with :func:`fastweights.io.atomic_torch_save`, so an
interrupted save never corrupts the previous checkpoint, and ``best.pt`` is written *before*
``latest.pt``: a kill between the two leaves the previous ``latest.pt``, whose recorded best score
still belongs to the ``best.pt`` it had (the resumed run redoes the step and rewrites ``best.pt``).
Unreadable files and failed writes (full disk, read-only folder) raise
:class:`~fastweights.train.run_folder.RunFolderError` naming the file and, for a damaged one,
whether the other checkpoint is usable.

Checkpoints never need code to load: they are written through :func:`~fastweights.train.safe_state.to_safe`
(numpy RNG states as tensors) and read with ``torch.load(weights_only=True)``
(:func:`~fastweights.train.safe_state.load_safe`); a file holding other pickled objects is refused
with :class:`~fastweights.train.safe_state.UnsafeFileError` naming it, unless pickles are trusted
(``--trust-pickle``).

A checkpoint ``state`` is a plain dict chosen by the training loop, typically::

    {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
     "rng": capture_rng_state(), "metrics": {...}, "config": {...}}
"""

from __future__ import annotations

import os
import random
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from fastweights.io import atomic_torch_save
from fastweights.train.run_folder import RunFolderError
from fastweights.train.safe_state import UnsafeFileError, check_safe, load_safe, to_safe

__all__ = ["CheckpointManager", "capture_rng_state", "read_checkpoint", "restore_rng_state"]

Which = Literal["latest", "best"]
_WHICH = ("latest", "best")
# torch's messages when writing a checkpoint fails inside its zip writer (e.g. a full disk)
_TORCH_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "unexpected pos", "file write failed")


class _Damaged(Exception):
    """A checkpoint file exists but cannot be decoded."""


def _read(path: Path, map_location: Any) -> dict[str, Any]:
    try:
        state = load_safe(path, map_location=map_location)
    except UnsafeFileError:
        raise
    except PermissionError as err:
        raise RunFolderError(f"checkpoint: cannot read {path} ({err.strerror or err})") from None
    except Exception as err:  # noqa: BLE001 - any other failure (EOF, bad zip, EINVAL …) means damage
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise _Damaged(f"{type(err).__name__}: {first}" if first else type(err).__name__) from None
    if not isinstance(state, dict):
        raise _Damaged(f"expected a checkpoint dict, found {type(state).__name__}")
    return state


def _check_archive(path: Path) -> None:
    """Raise :class:`_Damaged` unless ``path`` is an intact ``torch.save`` zip archive (every member's
    CRC checked; reads the file once, unpickles nothing)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except PermissionError as err:
        raise RunFolderError(f"checkpoint: cannot read {path} ({err.strerror or err})") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise _Damaged(f"{type(err).__name__}: {first}" if first else type(err).__name__) from None
    if bad is not None:
        raise _Damaged(f"member {bad} fails its CRC check")


def read_checkpoint(path: str | os.PathLike[str], *, key: str, map_location: Any = "cpu") -> dict[str, Any]:
    """A checkpoint file named by the config key ``key`` (e.g. ``train.init_from``).

    Raises:
        FileNotFoundError: naming ``key`` and the path when it does not exist.
        RunFolderError: naming ``key`` and the path when it is damaged or not a checkpoint dict.
        UnsafeFileError: naming the path when it holds pickled objects that could run code (not read).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{key}: expected a checkpoint file (e.g. RUN/checkpoints/best.pt), got {str(p)!r}"
        )
    try:
        return _read(p, map_location)
    except _Damaged as err:
        raise RunFolderError(f"{key}: {p} is damaged or not a checkpoint ({err})") from None


class CheckpointManager:
    """Save and load the checkpoints of one run folder.

    Args:
        run_dir: the run folder; checkpoints go to ``run_dir / "checkpoints"`` (created on first save).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "checkpoints"

    def path(self, which: Which = "latest") -> Path:
        """Path of the ``"latest"`` or ``"best"`` checkpoint (it may not exist).

        Raises:
            ValueError: if ``which`` is not ``"latest"`` or ``"best"``.
        """
        if which not in _WHICH:
            raise ValueError(f"which: expected one of {_WHICH}, given {which!r}")
        return self.dir / f"{which}.pt"

    def exists(self, which: Which = "latest") -> bool:
        """Whether the ``"latest"`` / ``"best"`` checkpoint file exists."""
        return self.path(which).is_file()

    def save(self, state: dict[str, Any], *, is_best: bool) -> Path:
        """Write ``state`` to ``best.pt`` when ``is_best``, then to ``latest.pt``, each atomically.

        Args:
            state: dict of tensors, numbers, strings, numpy arrays and containers of them
                (state_dicts, step, RNG states, metrics, …; :func:`~fastweights.train.safe_state.to_safe`).
            is_best: also overwrite ``best.pt`` with the same state (written first, see the module
                docstring).

        Returns:
            The path of ``latest.pt``.

        Raises:
            TypeError: if ``state`` is not a dict or holds a value that would need code to load.
            RunFolderError: if a file cannot be written (the previous one stays intact).
        """
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict, given {type(state).__name__}")
        if is_best:
            self.write("best", state)
        return self.write("latest", state)

    def write(self, which: Which, state: dict[str, Any]) -> Path:
        """Write ``state`` to the ``which`` checkpoint atomically; returns its path.

        Raises:
            RunFolderError: naming the file, when it cannot be written (permissions, full disk); the
                previous file stays intact.
        """
        path = self.path(which)
        try:
            atomic_torch_save(to_safe(state), path)
        except OSError as err:
            reason = err.strerror or str(err)
        except RuntimeError as err:
            if not any(s in str(err) for s in _TORCH_WRITE_FAILURES):
                raise
            reason = f"write failed, is the disk full? ({(str(err).strip().splitlines() or [''])[0][:120]})"
        else:
            return path
        raise RunFolderError(
            f"checkpoint: cannot write {path} ({reason}); the previous {path.name} is intact"
        )

    def load(
        self,
        which: Which = "latest",
        map_location: Any = "cpu",
        *,
        fallback_hint: Callable[[str, Path], str] | None = None,
    ) -> dict[str, Any] | None:
        """Load the ``"latest"`` or ``"best"`` checkpoint, or return ``None`` when it does not exist.

        Reads with ``torch.load(..., weights_only=True)`` (:func:`~fastweights.train.safe_state.load_safe`):
        nothing in the file runs.

        Args:
            which: ``"latest"`` or ``"best"``.
            map_location: forwarded to :func:`torch.load` (default: everything on CPU).
            fallback_hint: ``(other, other_path) -> advice`` appended to the error when the file is
                damaged and the other checkpoint reads fine (default: pass ``--checkpoint other``).

        Raises:
            ValueError: if ``which`` is invalid.
            RunFolderError: if the file is damaged (empty, truncated, zero-filled, not a checkpoint
                dict; the message says whether the other checkpoint exists and reads) or unreadable.
            UnsafeFileError: if it holds pickled objects that could run code (not read).
        """
        p = self.path(which)
        if not p.is_file():
            return None
        try:
            return _read(p, map_location)
        except _Damaged as err:
            self._raise_damaged(which, str(err), fallback_hint)
        raise AssertionError("unreachable")  # pragma: no cover

    def verify(
        self, which: Which = "latest", *, fallback_hint: Callable[[str, Path], str] | None = None
    ) -> None:
        """Check that the ``which`` checkpoint is an intact archive that loads without running code,
        without loading it (a resume checks ``latest.pt`` this way before it writes anything into the
        run folder).

        Raises:
            RunFolderError: as :meth:`load` for a damaged or unreadable file (a missing file is fine).
            UnsafeFileError: if it holds pickled objects that could run code.
        """
        p = self.path(which)
        if not p.is_file():
            return
        try:
            _check_archive(p)
        except _Damaged as err:
            self._raise_damaged(which, str(err), fallback_hint)
        check_safe(p)

    def _raise_damaged(
        self, which: Which, damage: str, fallback_hint: Callable[[str, Path], str] | None
    ) -> None:
        """The one error of a damaged checkpoint: which file, what is wrong, and whether the other reads."""
        p = self.path(which)
        other = "best" if which == "latest" else "latest"
        op = self.path(other)
        if not op.is_file():
            alt = f"there is no {other}.pt to fall back on"
        else:
            try:
                _read(op, "cpu")
            except (_Damaged, RunFolderError):
                alt = f"{op} is damaged too"
            except UnsafeFileError:
                alt = f"{op} is refused too (it holds pickled objects that could run code)"
            else:
                hint = fallback_hint or (lambda o, _: f"use it with --checkpoint {o}")
                alt = f"{op} exists and reads fine: {hint(other, op)}"
        raise RunFolderError(f"checkpoint: {p} is damaged and cannot be read ({damage}); {alt}")


def capture_rng_state() -> dict[str, Any]:
    """Snapshot the global RNGs: Python ``random``, numpy's global ``np.random``, torch CPU and CUDA.

    Returns:
        ``{"python": tuple, "numpy": tuple, "torch": ByteTensor, "torch_cuda": list[ByteTensor]}``;
        ``"torch_cuda"`` only when CUDA is available. Feed it to :func:`restore_rng_state`.
    """
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore RNG states captured by :func:`capture_rng_state`.

    Tensors are moved to CPU first (a checkpoint loaded with ``map_location="cuda"`` still works).
    A saved CUDA state is restored only when CUDA is available and the device count matches;
    otherwise it is skipped with a :class:`RuntimeWarning`.

    Raises:
        ValueError: if ``state`` lacks one of the keys ``"python"``, ``"numpy"``, ``"torch"``.
    """
    required = ("python", "numpy", "torch")
    missing = [k for k in required if k not in state]
    if missing:
        raise ValueError(f"state: expected keys {required}, given {sorted(state)} (missing {missing})")
    random.setstate(_as_tuple(state["python"]))
    np.random.set_state(state["numpy"])
    torch.set_rng_state(torch.as_tensor(state["torch"]).cpu())
    cuda_states = state.get("torch_cuda")
    if cuda_states is not None:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda_states):
            torch.cuda.set_rng_state_all([torch.as_tensor(s).cpu() for s in cuda_states])
        else:
            warnings.warn(
                f"restore_rng_state: checkpoint has CUDA RNG states for {len(cuda_states)} device(s), "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} available; not restored",
                RuntimeWarning,
                stacklevel=2,
            )


def _as_tuple(x: Any) -> Any:
    """random.setstate needs tuples; JSON-like round trips may have turned them into lists."""
    if isinstance(x, list | tuple):
        return tuple(_as_tuple(v) for v in x)
    return x
