"""Checkpoint contents that load without running code: ``torch.load(..., weights_only=True)`` only.

Unpickling an arbitrary object can run arbitrary code (its ``__reduce__`` names any callable), and run
folders are files people share. A checkpoint written by this library holds nothing but what PyTorch's
restricted ``weights_only`` unpickler rebuilds itself: tensors, ``dict`` / ``OrderedDict`` / ``list`` /
``tuple`` / ``set``, ``str`` / ``bytes`` / ``int`` / ``float`` / ``complex`` / ``bool`` / ``None``,
``torch.Size`` / ``torch.dtype`` / ``torch.device``. Numpy arrays and scalars (numpy's RNG state, an
environment's counters) are stored as a tagged dict holding their bytes as a ``uint8`` tensor, their
dtype string and shape (:func:`to_safe`) and rebuilt on read (:func:`from_safe`).

:func:`load_safe` reads a ``torch.save`` file this way. Files of earlier versions of the library hold
numpy arrays as pickled numpy objects: they are read with numpy's array reconstruction allowed and
nothing else (PyTorch's documented allowlist for numpy arrays). Any other global in a file (e.g.
``posix.system``, a class) refuses it with :class:`UnsafeFileError`, naming the file and the globals,
unless the caller trusts pickles (:func:`trusting_pickles`, the CLI's ``--trust-pickle``: a warning, then
a full unpickle).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

__all__ = [
    "UnsafeFileError",
    "check_safe",
    "from_safe",
    "load_safe",
    "pickles_trusted",
    "to_safe",
    "trusting_pickles",
    "unsafe_globals",
]

log = logging.getLogger(__name__)

_TAG = "__numpy__"
_KINDS = "biufc"  # bool, signed / unsigned int, float, complex: plain bytes, no Python objects
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device)
# what files of earlier versions pickled besides tensors: numpy arrays (RNG states) and scalars
_NUMPY_GLOBALS = {
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray.scalar",
    "numpy.core.multiarray.scalar",
    "numpy.ndarray",
    "numpy.dtype",
}
_trusted = False


class UnsafeFileError(ValueError):
    """A file holds pickled Python objects whose loading could run code; it was not read. The CLI prints
    the message as one line ``fastweights: error: …`` (exit 2)."""


def to_safe(obj: Any, where: str = "state") -> Any:
    """``obj`` with every numpy array / scalar replaced by a tagged dict of tensors and strings, so that
    ``torch.load(weights_only=True)`` reads it back; everything else is kept as is.

    Raises:
        TypeError: naming the place in ``obj`` (``where``, e.g. ``state['rng']['numpy'][1]``) of a value
            the restricted loader could not rebuild (a class instance, a function, an object array).
    """
    if isinstance(obj, np.ndarray | np.generic):
        arr = np.asarray(obj)
        if arr.dtype.kind not in _KINDS:
            raise TypeError(f"{where}: a numpy array of dtype {arr.dtype} cannot be stored safely")
        data = torch.from_numpy(np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.uint8).copy())
        meta = {"dtype": arr.dtype.str, "shape": list(arr.shape), "scalar": isinstance(obj, np.generic)}
        return {_TAG: {**meta, "data": data}}
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN:
        return obj
    if type(obj) in (dict, OrderedDict):
        return type(obj)((k, to_safe(v, f"{where}[{k!r}]")) for k, v in obj.items())
    if type(obj) in (list, tuple):
        return type(obj)(to_safe(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if type(obj) in (set, frozenset):
        return obj  # members are hashable plain values
    raise TypeError(
        f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be stored in a checkpoint that "
        "loads without running code (store tensors, numbers, strings and containers of them)"
    )


def from_safe(obj: Any) -> Any:
    """The inverse of :func:`to_safe`: tagged dicts back to numpy arrays / scalars (dtype and bytes
    exact); other values unchanged.

    Raises:
        ValueError: for a tag whose dtype is not a plain numeric one or whose bytes do not fill its shape.
    """
    if type(obj) in (dict, OrderedDict):
        if set(obj) == {_TAG}:
            return _numpy(obj[_TAG])
        return type(obj)((k, from_safe(v)) for k, v in obj.items())
    if type(obj) in (list, tuple):
        return type(obj)(from_safe(v) for v in obj)
    return obj


def _numpy(tag: Any) -> np.ndarray | np.generic:
    try:
        dtype = np.dtype(str(tag["dtype"]))
        if dtype.kind not in _KINDS:
            raise ValueError(f"dtype {dtype}")
        arr = np.frombuffer(tag["data"].numpy().tobytes(), dtype=dtype).reshape(tag["shape"]).copy()
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"a stored numpy value is malformed ({err})") from None
    return arr[()] if tag.get("scalar") else arr


@contextlib.contextmanager
def trusting_pickles(trust: bool = True) -> Iterator[None]:
    """Within the block, :func:`load_safe` unpickles files it would refuse (after a warning line): for
    your own run folders written by an earlier version of the library, never for files from others."""
    global _trusted
    before, _trusted = _trusted, trust
    try:
        yield
    finally:
        _trusted = before


def pickles_trusted() -> bool:
    """Whether a :func:`trusting_pickles` block (the CLI's ``--trust-pickle``) is active."""
    return _trusted


def unsafe_globals(path: str | os.PathLike[str]) -> list[str]:
    """The globals (``module.name``) a ``torch.save`` file's pickle refers to that ``weights_only``
    loading does not allow, read without unpickling anything (empty for a file of this library)."""
    try:
        return sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path))))
    except Exception:  # noqa: BLE001 - not a readable archive: the caller's load reports the damage
        return []


def check_safe(path: str | os.PathLike[str], *, what: str = "checkpoint") -> None:
    """Refuse ``path`` as :func:`load_safe` would, without loading it (an intact file's pickle is scanned
    for globals; nothing runs): for callers that must fail before they write anything.

    Raises:
        UnsafeFileError: naming ``path`` and the globals, unless pickles are trusted.
    """
    found = unsafe_globals(path)
    if found and not set(found) <= _NUMPY_GLOBALS:
        _refuse_unless_trusted(path, found, what)


def _refuse_unless_trusted(path: str | os.PathLike[str], found: list[str], what: str) -> None:
    if _trusted:
        return
    listed = ", ".join(g for g in found if g not in _NUMPY_GLOBALS)
    raise UnsafeFileError(
        f"{what}: {path} holds pickled Python objects ({listed}) whose loading could run code, which a "
        "fastweights file never needs; it was not read. If you wrote it yourself with an earlier "
        "version, pass --trust-pickle; never for a file from someone else"
    )


def load_safe(path: str | os.PathLike[str], *, map_location: Any = "cpu", what: str = "checkpoint") -> Any:
    """Read a ``torch.save`` file without running code from it, then :func:`from_safe`.

    Raises:
        UnsafeFileError: naming ``path`` and the globals it refers to, when it holds objects other than
            tensors, containers, numbers, strings and numpy arrays (and pickles are not trusted).
        Exception: whatever :func:`torch.load` raises for a damaged file (callers report damage).
    """
    try:
        return from_safe(torch.load(path, map_location=map_location, weights_only=True))
    except pickle.UnpicklingError:
        found = unsafe_globals(path)
        if not found:
            raise
    if set(found) <= _NUMPY_GLOBALS:  # an earlier version's numpy RNG state: numpy's arrays only
        multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
        allowed = [np.ndarray, np.dtype, multiarray._reconstruct, multiarray.scalar]
        allowed += [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location=map_location, weights_only=True)
    _refuse_unless_trusted(path, found, what)
    log.warning(
        "--trust-pickle: unpickling %s (it holds %s): only for files you wrote yourself",
        path,
        ", ".join(found),
    )
    return torch.load(path, map_location=map_location, weights_only=False)
