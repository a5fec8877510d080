"""Resumable checkpoints: atomic ``latest.pt`` / ``best.pt`` and RNG-state capture.

Layout: ``<run_dir>/checkpoints/latest.pt`` (written at every save) and ``best.pt`` (written when the
save is marked best). Both are written with :func:`fastweights.io.atomic_torch_save`, so an
interrupted save never corrupts the previous checkpoint.

A checkpoint ``state`` is a plain dict chosen by the training loop, typically::

    {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
     "rng": capture_rng_state(), "metrics": {...}, "config": {...}}
"""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from fastweights.io import atomic_torch_save

__all__ = ["CheckpointManager", "capture_rng_state", "restore_rng_state"]

Which = Literal["latest", "best"]
_WHICH = ("latest", "best")


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
        """Write ``state`` to ``latest.pt`` (and also ``best.pt`` when ``is_best``), atomically.

        Args:
            state: picklable dict (state_dicts, step, RNG states, metrics, …).
            is_best: also overwrite ``best.pt`` with the same state.

        Returns:
            The path of ``latest.pt``.

        Raises:
            TypeError: if ``state`` is not a dict.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict, given {type(state).__name__}")
        latest = self.path("latest")
        atomic_torch_save(state, latest)
        if is_best:
            atomic_torch_save(state, self.path("best"))
        return latest

    def load(self, which: Which = "latest", map_location: Any = "cpu") -> dict[str, Any] | None:
        """Load the ``"latest"`` or ``"best"`` checkpoint, or return ``None`` when it does not exist.

        Uses ``torch.load(..., weights_only=False)`` because checkpoints hold RNG states (Python tuples,
        numpy arrays) besides tensors. Unpickling can execute code: only load checkpoints this library
        wrote itself (your own run folders), never files from untrusted sources.

        Args:
            which: ``"latest"`` or ``"best"``.
            map_location: forwarded to :func:`torch.load` (default: everything on CPU).

        Raises:
            ValueError: if ``which`` is invalid or the file does not hold a dict.
        """
        p = self.path(which)
        if not p.is_file():
            return None
        state = torch.load(p, map_location=map_location, weights_only=False)
        if not isinstance(state, dict):
            raise ValueError(f"{p}: expected a checkpoint dict, given {type(state).__name__}")
        return state


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
