"""Decoding of image files and pickles from a local data folder, with errors that name the file."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

__all__ = ["read_image", "load_pickle", "GRAY_MODES"]

#: PIL modes of grayscale images (``read_image(path, rgb=None)`` keeps them grayscale)
GRAY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


def read_image(path: Path, *, rgb: bool | None) -> np.ndarray:
    """Decode an image file to uint8 ``[H, W]`` (``rgb=False``, PIL mode ``"L"``) or channels-last
    ``[H, W, 3]`` (``rgb=True``, mode ``"RGB"``); ``rgb=None``: grayscale files (:data:`GRAY_MODES`) as
    ``[H, W]``, every other file as ``[H, W, 3]`` (an alpha channel dropped).

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file when Pillow
    cannot decode it.
    """
    try:
        with Image.open(path) as img:
            if rgb is None:
                rgb = img.mode not in GRAY_MODES
            return np.asarray(img.convert("RGB" if rgb else "L"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: expected an image file, found none") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise ValueError(
            f"{path}: expected an image Pillow can decode, given an unreadable file ({err})"
        ) from None


# Globals a pickle of plain containers + numpy arrays needs (all protocols, Python 2 and 3 writers).
_NUMPY_NAMES = {"_reconstruct", "ndarray", "dtype", "_frombuffer", "scalar"}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that builds numpy arrays and builtin containers but refuses any other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module.split(".")[0] == "numpy" and name in _NUMPY_NAMES) or (module, name) == (
            "_codecs",
            "encode",
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed (only numpy arrays)")


def _str_keys(value: Any) -> Any:
    """``bytes`` (a Python 2 ``str`` read with ``encoding="bytes"``) -> ``str``, in dicts and lists too."""
    if isinstance(value, bytes):
        return value.decode("latin1")
    if isinstance(value, dict):
        return {_str_keys(k): _str_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_str_keys(v) for v in value]
    return value


def load_pickle(path: Path) -> dict[str, Any]:
    """A pickled ``dict`` of numpy arrays, lists and strings, with ``str`` keys.

    Python 2 pickles (CIFAR) are read with ``encoding="bytes"``; ``bytes`` keys and ``bytes`` strings
    in lists (e.g. CIFAR's ``b"fine_label_names"``) become ``str``. Only numpy arrays and builtin
    containers are built (any other global is refused), so a file cannot run code.
    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file when it is not
    such a pickle.
    """
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: expected a pickle file, found none") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise ValueError(
            f"{path}: expected a pickled dict of numpy arrays, given an unreadable file ({err})"
        ) from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a pickled dict, given {type(obj).__name__}")
    return _str_keys(obj)
