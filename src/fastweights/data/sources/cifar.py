"""CIFAR-10 and CIFAR-100 from the python-pickle batches of a local folder.

- CIFAR-100: ``<root>/cifar-100-python/{train,test,meta}``; ``train``/``test`` hold ``b"data"`` uint8
  ``[N, 3072]`` (R, G, B planes of 32x32, row-major), ``b"fine_labels"`` and ``b"coarse_labels"``;
  ``meta`` holds ``b"fine_label_names"`` and ``b"coarse_label_names"``. Turned into the few-shot pools
  FC100 (Oreshkin et al. 2018, split by superclass) and CIFAR-FS (Bertinetto et al. 2019), train and
  test images merged (600 per class), with the packaged split lists (``data/splits/cifar100``).
- CIFAR-10: ``<root>/cifar-10-batches-py/data_batch_{1..5}`` and ``test_batch`` (``b"data"``,
  ``b"labels"``) -> a :class:`SplitDataset`.

Nothing is ever downloaded. Keys may be ``bytes`` (as written by the original Python 2 pickles read
with ``encoding="bytes"``) or ``str``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ._decode import load_pickle
from ._pools import PoolParts, make_pools, stack_classes
from ._resize import resize_bilinear
from ._splits import SPLIT_NAMES, read_split
from .base import ClassPool, LabeledImages, SplitDataset, image_stats

__all__ = ["load_cifar100_pools", "load_cifar10", "CIFAR100_BENCHMARKS"]

CIFAR100_BENCHMARKS = {"fc100": "FC100", "cifar_fs": "CIFAR-FS"}


def _require(path: Path, layout: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: expected this file ({layout}), found none")
    return path


def _batch(path: Path, label_keys: tuple[str, ...], layout: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """uint8 images ``[N, 3, 32, 32]`` and int64 label arrays of one pickled CIFAR batch."""
    data = load_pickle(_require(path, layout))
    raw = data.get("data")
    labels = [data.get(k) for k in label_keys]
    ok = isinstance(raw, np.ndarray) and raw.dtype == np.uint8 and raw.ndim == 2 and raw.shape[1] == 3072
    ok = ok and all(isinstance(lab, (list, np.ndarray)) and len(lab) == len(raw) for lab in labels)
    if not ok:
        given = {k: getattr(v, "shape", type(v).__name__) for k, v in data.items()}
        raise ValueError(
            f"{path}: expected a dict with 'data' uint8 [N, 3072] and {', '.join(map(repr, label_keys))} "
            f"(N labels each), given {given}"
        )
    return raw.reshape(-1, 3, 32, 32), [np.asarray(lab, dtype=np.int64) for lab in labels]


def _resize_chw(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 ``[N, 3, H, W]`` -> ``[N, 3, size, size]`` (bilinear)."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return np.ascontiguousarray(images)
    return resize_bilinear(images.transpose(0, 2, 3, 1), size).transpose(0, 3, 1, 2).copy()


def _names(meta: dict[str, Any], key: str, count: int, path: Path) -> list[str]:
    names = meta.get(key)
    if not isinstance(names, list) or len(names) != count or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: expected {key!r} as a list of {count} names, given {names!r:.200}")
    return names


def _cifar100_classes(benchmark: str) -> dict[str, list[tuple[str, str | None]]]:
    """``{split: [(superclass, fine class or None = all of the superclass), ...]}`` of the packaged lists."""
    folder = {"fc100": "cifar100/fc100", "cifar_fs": "cifar100/cifar-fs"}[benchmark]
    out = {}
    for split in SPLIT_NAMES:
        items = read_split(folder, split)
        out[split] = [(i, None) if isinstance(i, str) else (str(i[0]), str(i[1])) for i in items]
    return out


def _members(super_of: dict[str, str], sup: str, cls: str | None, where: str) -> list[str]:
    """The fine classes a split-list entry stands for: all of superclass ``sup`` (``cls=None``, FC100,
    sorted by name) or ``[cls]`` after checking that it belongs to ``sup`` (CIFAR-FS)."""
    if cls is None:
        members = sorted(n for n, s in super_of.items() if s == sup)
        if not members:
            raise ValueError(f"{where}: expected images of superclass {sup!r}, given none")
        return members
    if super_of.get(cls) != sup:
        given = f"superclass {super_of[cls]!r}" if cls in super_of else "no such class"
        raise ValueError(f"{where}: expected class {cls!r} of superclass {sup!r}, given {given}")
    return [cls]


def load_cifar100_pools(
    root: str | os.PathLike, benchmark: str = "fc100", *, image_size: int = 32
) -> dict[str, ClassPool]:
    """FC100 (``benchmark="fc100"``) or CIFAR-FS (``"cifar_fs"``) pools ``{"train", "val", "test"}``.

    Reads ``<root>/cifar-100-python/{train,test,meta}`` (see the module docstring). Each pool holds RGB
    uint8 ``images`` ``[C, 600, 3, image_size, image_size]`` (channels first; per class the 500 train
    images then the 100 test images, resized bilinearly when ``image_size != 32``), ``class_names`` =
    fine class names and ``alphabets`` = their superclasses; ``mean``/``std`` are the per-channel train
    statistics. Splits: FC100 12 / 4 / 4 superclasses (60 / 20 / 20 classes), CIFAR-FS 64 / 16 / 20
    classes (packaged lists). Raises ``FileNotFoundError`` naming the expected path of a missing file;
    ``ValueError`` for an unknown ``benchmark``, a malformed pickle, a listed (super)class absent from
    ``meta`` or under another superclass, or splits sharing a class or an identical image.
    """
    if benchmark not in CIFAR100_BENCHMARKS:
        raise ValueError(f"benchmark: expected one of {sorted(CIFAR100_BENCHMARKS)}, given {benchmark!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 4 <= image_size <= 512:
        raise ValueError(f"image_size: expected an int in [4, 512], given {image_size!r}")
    folder = Path(root) / "cifar-100-python"
    layout = f"CIFAR-100 python version: {folder}/{{train,test,meta}}"
    meta_path = _require(folder / "meta", layout)
    parts = [_batch(folder / s, ("fine_labels", "coarse_labels"), layout) for s in ("train", "test")]
    images = np.concatenate([p[0] for p in parts])
    fine, coarse = (np.concatenate([p[1][i] for p in parts]) for i in (0, 1))
    meta = load_pickle(meta_path)
    fine_names = _names(meta, "fine_label_names", 100, meta_path)
    coarse_names = _names(meta, "coarse_label_names", 20, meta_path)
    for key, labels, count in (("fine_labels", fine, 100), ("coarse_labels", coarse, 20)):
        if labels.size and (labels.min() < 0 or labels.max() >= count):
            raise ValueError(
                f"{folder}: expected {key} in [0, {count}), given [{labels.min()}, {labels.max()}]"
            )
    super_of = {fine_names[f]: coarse_names[c] for f, c in zip(fine.tolist(), coarse.tolist(), strict=True)}
    pool_parts = {}
    for split, wanted in _cifar100_classes(benchmark).items():
        names = [
            n for sup, cls in wanted for n in _members(super_of, sup, cls, f"{folder} ({benchmark} {split})")
        ]
        per_class = [images[fine == fine_names.index(n)] for n in names]
        stacked = stack_classes(CIFAR100_BENCHMARKS[benchmark], per_class, names)
        c, m = stacked.shape[:2]
        stacked = _resize_chw(stacked.reshape(c * m, 3, 32, 32), image_size)
        stacked = stacked.reshape(c, m, 3, image_size, image_size)
        pool_parts[split] = PoolParts(stacked, names, [super_of[n] for n in names], names)
    return make_pools(CIFAR100_BENCHMARKS[benchmark], pool_parts)


def load_cifar10(root: str | os.PathLike, *, image_size: int = 32) -> SplitDataset:
    """CIFAR-10 as a :class:`SplitDataset` named "CIFAR-10" (50,000 train / 10,000 test, 10 classes).

    Reads ``<root>/cifar-10-batches-py/data_batch_1`` ... ``data_batch_5`` and ``test_batch`` (pickled
    dicts with ``b"data"`` uint8 ``[N, 3072]`` and ``b"labels"``). Images RGB uint8
    ``[N, 3, image_size, image_size]`` (channels first, resized bilinearly when ``image_size != 32``),
    labels int64 ``[N]``; ``mean``/``std`` are the per-channel train statistics. Raises
    ``FileNotFoundError`` naming the expected path of a missing batch file, ``ValueError`` for a
    malformed batch or a bad ``image_size``.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 4 <= image_size <= 512:
        raise ValueError(f"image_size: expected an int in [4, 512], given {image_size!r}")
    folder = Path(root) / "cifar-10-batches-py"
    layout = f"CIFAR-10 python version: {folder}/data_batch_{{1..5}}, {folder}/test_batch"
    splits = {}
    for split, files in (("train", [f"data_batch_{i}" for i in range(1, 6)]), ("test", ["test_batch"])):
        batches = [_batch(folder / f, ("labels",), layout) for f in files]
        imgs = _resize_chw(np.concatenate([b[0] for b in batches]), image_size)
        splits[split] = LabeledImages(imgs, np.concatenate([b[1][0] for b in batches]))
    labels = np.concatenate([splits["train"].labels, splits["test"].labels])
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{folder}: expected labels in [0, 10), given [{labels.min()}, {labels.max()}]")
    mean, std = image_stats(splits["train"].images, 3)
    return SplitDataset("CIFAR-10", splits["train"], splits["test"], 10, mean, std)
