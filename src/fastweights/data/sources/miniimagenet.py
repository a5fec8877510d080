"""Mini-ImageNet (Vinyals et al. 2016) from a local folder, with the Ravi & Larochelle 2017 split.

Two on-disk layouts are read (Vinyals et al. 2016; Ravi & Larochelle 2017 split); nothing is downloaded:

- CSV + images: ``<root>/{train,val,test}.csv`` (header ``filename,label``, rows like
  ``n0153282900000005.jpg,n01532829``) and the JPEGs in ``<root>/images/``;
- pickle cache: ``<root>/mini-imagenet-cache-{train,val,test}.pkl`` (val also ``-validation.pkl``),
  each a dict with ``image_data`` uint8 ``[N, 84, 84, 3]`` and ``class_dict`` (wnid -> list of row
  indices).

``<root>`` may also hold these files in a ``mini-imagenet/`` or ``miniimagenet/`` subfolder.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from ._cache import cache_key, default_cache_dir, files_fingerprint, load_or_build_npz
from ._decode import load_pickle, read_image
from ._pools import PoolParts, make_pools, stack_classes
from ._resize import resize_bilinear, resize_image
from ._splits import SPLIT_NAMES
from .base import ClassPool

__all__ = ["load_mini_imagenet"]

CACHE_VERSION = 1
_SUBFOLDERS = ("", "mini-imagenet", "miniimagenet")
_PKL_NAMES = {"train": ("train",), "val": ("val", "validation"), "test": ("test",)}


def _csv_paths(folder: Path) -> dict[str, Path] | None:
    paths = {s: folder / f"{s}.csv" for s in SPLIT_NAMES}
    return paths if all(p.is_file() for p in paths.values()) and (folder / "images").is_dir() else None


def _pkl_paths(folder: Path) -> dict[str, Path] | None:
    out = {}
    for split, names in _PKL_NAMES.items():
        found = [folder / f"mini-imagenet-cache-{n}.pkl" for n in names]
        found = [p for p in found if p.is_file()]
        if not found:
            return None
        out[split] = found[0]
    return out


def _layout_error(root: Path) -> FileNotFoundError:
    where = ", ".join(str(root / s) if s else str(root) for s in _SUBFOLDERS)
    return FileNotFoundError(
        f"Mini-ImageNet: expected in one of [{where}] either train.csv, val.csv, test.csv (header "
        "'filename,label') with the JPEGs in images/, or mini-imagenet-cache-train.pkl, "
        "mini-imagenet-cache-val.pkl (or -validation.pkl) and mini-imagenet-cache-test.pkl; found neither"
    )


def _read_csv(path: Path) -> dict[str, list[str]]:
    """``{label: [filename, ...]}`` in file order (labels in order of first appearance)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0]] != ["filename", "label"]:
        raise ValueError(
            f"{path}: expected the header 'filename,label', given {rows[0] if rows else 'nothing'}"
        )
    out: dict[str, list[str]] = {}
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != 2 or not row[0] or not row[1]:
            raise ValueError(f"{path}:{n}: expected a row 'filename,label', given {row!r}")
        out.setdefault(row[1], []).append(row[0])
    if not out:
        raise ValueError(f"{path}: expected at least one 'filename,label' row, given none")
    return out


def _decode_csv_split(images_dir: Path, classes: dict[str, list[str]], size: int) -> np.ndarray:
    per_class = [
        np.stack([resize_image(read_image(images_dir / f, rgb=True), size) for f in files]).transpose(
            0, 3, 1, 2
        )
        for files in classes.values()
    ]
    return stack_classes("Mini-ImageNet", per_class, list(classes))


def _from_csv(
    folder: Path, paths: dict[str, Path], size: int, cache_path: Path | None
) -> dict[str, tuple[np.ndarray, list[str]]]:
    classes = {s: _read_csv(p) for s, p in paths.items()}
    images_dir = folder / "images"
    files = [images_dir / f for c in classes.values() for fs in c.values() for f in fs]
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(
                f"Mini-ImageNet: expected the image {f} listed in {folder}/*.csv (CSV layout: "
                "<root>/{train,val,test}.csv + <root>/images/<filename>), found none"
            )
    key = cache_key({"v": CACHE_VERSION, "size": size, "files": files_fingerprint([*paths.values(), *files])})

    def build() -> dict[str, np.ndarray]:
        return {f"{s}_images": _decode_csv_split(images_dir, classes[s], size) for s in SPLIT_NAMES}

    arrays = load_or_build_npz(None if cache_path is None else cache_path / f"mini_imagenet-{key}.npz", build)
    return {s: (arrays[f"{s}_images"], list(classes[s])) for s in SPLIT_NAMES}


def _from_pickle(path: Path, size: int) -> tuple[np.ndarray, list[str]]:
    data = load_pickle(path)
    images, class_dict = data.get("image_data"), data.get("class_dict")
    if (
        not isinstance(images, np.ndarray)
        or images.dtype != np.uint8
        or images.ndim != 4
        or images.shape[-1] != 3
        or not isinstance(class_dict, dict)
    ):
        given = {k: getattr(v, "shape", type(v).__name__) for k, v in data.items()}
        raise ValueError(
            f"{path}: expected a dict with 'image_data' uint8 [N, H, W, 3] and 'class_dict' "
            f"(wnid -> list of indices), given {given}"
        )
    wnids = sorted(class_dict)
    per_class = []
    for wnid in wnids:
        idx = np.asarray(class_dict[wnid], dtype=np.int64)
        if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= len(images):
            raise ValueError(
                f"{path}: expected class_dict[{wnid!r}] to be indices in [0, {len(images)}), given "
                f"{class_dict[wnid]!r:.100}"
            )
        per_class.append(resize_bilinear(images[idx], size).transpose(0, 3, 1, 2))
    return stack_classes("Mini-ImageNet", per_class, wnids), wnids


def load_mini_imagenet(
    root: str | os.PathLike,
    *,
    image_size: int = 84,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
) -> dict[str, ClassPool]:
    """Mini-ImageNet few-shot pools ``{"train", "val", "test"} -> ClassPool`` (64 / 16 / 20 classes).

    Each pool holds RGB uint8 ``images`` ``[C, 600, 3, image_size, image_size]`` (channels first,
    resized bilinearly), ``class_names`` = ``alphabets`` = WordNet ids (CSV order, or sorted for the
    pickles); ``mean``/``std`` are the per-channel train statistics (3-tuples). Layouts (see the module
    docstring; the CSV layout is preferred when both are present): ``<root>/{train,val,test}.csv`` +
    ``<root>/images/``, or ``<root>/mini-imagenet-cache-{train,val|validation,test}.pkl``, in ``<root>``
    or its ``mini-imagenet/``/``miniimagenet/`` subfolder. Decoding ~60k JPEGs takes minutes, so the
    CSV layout's arrays are cached as npz in ``cache_dir`` (default ``$FASTWEIGHTS_CACHE`` or
    ``~/.cache/fastweights``; ``cache=False`` disables it), keyed by the size and the paths, sizes and
    modification times of the CSVs and images. Pickles are read directly (they hold decoded arrays;
    only numpy arrays and builtin containers are unpickled).

    Raises ``FileNotFoundError`` naming the expected layouts and paths when no layout is found or a
    listed image is missing; ``ValueError`` for a malformed CSV, pickle or image, classes with different
    image counts, a bad ``image_size``, or splits that share a class or an identical image.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 4 <= image_size <= 512:
        raise ValueError(f"image_size: expected an int in [4, 512], given {image_size!r}")
    root = Path(root)
    cache_path = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) if cache else None
    for sub in _SUBFOLDERS:
        folder = root / sub if sub else root
        if (csvs := _csv_paths(folder)) is not None:
            splits = _from_csv(folder, csvs, image_size, cache_path)
            break
        if (pkls := _pkl_paths(folder)) is not None:
            splits = {s: _from_pickle(p, image_size) for s, p in pkls.items()}
            break
    else:
        raise _layout_error(root)
    parts = {s: PoolParts(images, names, names, list(names)) for s, (images, names) in splits.items()}
    return make_pools("Mini-ImageNet", parts)
