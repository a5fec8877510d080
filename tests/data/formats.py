"""Writers of tiny data sets in the exact on-disk formats of the real benchmarks.

They are written independently of the loaders under test (only numpy, Pillow, h5py, csv, pickle):
Omniglot PNG folders (torchvision) and ``data.hdf5`` (torchmeta), Mini-ImageNet CSV + JPEG folder and
``mini-imagenet-cache-*.pkl``, CIFAR-100 / CIFAR-10 python pickles with ``bytes`` keys.
"""

from __future__ import annotations

import csv
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

Character = tuple[str, str, str]  # (group, alphabet, character)


def ink(seed: int, size: int = 105) -> np.ndarray:
    """A random "drawing": bool ``[size, size]`` ink mask of a few filled rectangles (unique per seed)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((size, size), dtype=bool)
    for _ in range(4):
        y, x = rng.integers(0, size - size // 4, 2)
        h, w = rng.integers(size // 12, size // 4, 2)
        mask[y : y + h, x : x + w] = True
    return mask


def write_omniglot_pngs(root: Path, chars: Sequence[Character], drawers: int = 2) -> dict[Character, list]:
    """torchvision layout ``root/omniglot-py/images_<group>/<alphabet>/<character>/<id>_<drawer>.png``:
    1-bit PNGs, black strokes on white. Returns the ink masks per character (in file-name order)."""
    masks = {}
    for n, ch in enumerate(chars):
        group, alphabet, character = ch
        folder = root / "omniglot-py" / f"images_{group}" / alphabet / character
        folder.mkdir(parents=True, exist_ok=True)
        masks[ch] = []
        for d in range(drawers):
            m = ink(1000 * n + d)
            Image.fromarray(np.where(m, 0, 255).astype(np.uint8)).convert("1").save(
                folder / f"{n:04d}_{d + 1:02d}.png"
            )
            masks[ch].append(m)
    for group in ("background", "evaluation"):  # both archives exist even if a group is not used
        (root / "omniglot-py" / f"images_{group}").mkdir(parents=True, exist_ok=True)
    return masks


def write_omniglot_hdf5(root: Path, masks: dict[Character, list]) -> Path:
    """torchmeta layout ``root/omniglot/data.hdf5``: uint8 ``[M, 105, 105]`` datasets at
    ``images_<group>/<alphabet>/<character>``, white strokes (255) on black (0)."""
    import h5py

    path = root / "omniglot" / "data.hdf5"
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for (group, alphabet, character), ms in masks.items():
            f.create_dataset(
                f"images_{group}/{alphabet}/{character}", data=np.stack(ms).astype(np.uint8) * 255
            )
    return path


def split_tree(chars: Sequence[Character]) -> dict[str, dict[str, list[str]]]:
    """``{group: {alphabet: [character, ...]}}``, the structure of the Omniglot split JSON files."""
    tree: dict[str, dict[str, list[str]]] = {}
    for group, alphabet, character in chars:
        tree.setdefault(group, {}).setdefault(alphabet, []).append(character)
    return tree


def colour_images(seed: int, n: int, size: int) -> np.ndarray:
    """Random distinct RGB images uint8 ``[n, size, size, 3]`` (channels last)."""
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def write_mini_imagenet_csv(root: Path, splits: dict[str, list[str]], per_class: int, size: int = 20) -> dict:
    """CSV layout: ``root/{split}.csv`` (``filename,label``) and JPEGs ``root/images/<wnid><nnnnnnnn>.jpg``.

    Returns ``{split: {wnid: [decoded JPEG uint8 [size, size, 3], ...]}}`` (what a decoder reads back).
    """
    (root / "images").mkdir(parents=True, exist_ok=True)
    decoded: dict[str, dict[str, list[np.ndarray]]] = {}
    for s, (split, wnids) in enumerate(splits.items()):
        decoded[split] = {}
        with open(root / f"{split}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["filename", "label"])
            for c, wnid in enumerate(wnids):
                decoded[split][wnid] = []
                for i, img in enumerate(colour_images(100 * s + c, per_class, size)):
                    name = f"{wnid}{i + 1:08d}.jpg"
                    Image.fromarray(img).save(root / "images" / name, quality=95)
                    decoded[split][wnid].append(np.asarray(Image.open(root / "images" / name).convert("RGB")))
                    w.writerow([name, wnid])
    return decoded


def write_mini_imagenet_pkl(root: Path, splits: dict[str, list[str]], per_class: int, size: int = 84) -> dict:
    """Pickle layout ``root/mini-imagenet-cache-<split>.pkl`` (split "val" written as "validation"):
    ``{"image_data": uint8 [N, size, size, 3], "class_dict": {wnid: [row, ...]}}``, classes interleaved.
    Returns ``{split: (image_data, class_dict)}``."""
    out = {}
    for s, (split, wnids) in enumerate(splits.items()):
        data = colour_images(7 + s, per_class * len(wnids), size)
        class_dict = {w: list(range(c, len(data), len(wnids))) for c, w in enumerate(wnids)}
        name = "validation" if split == "val" else split
        with open(root / f"mini-imagenet-cache-{name}.pkl", "wb") as f:
            pickle.dump({"image_data": data, "class_dict": class_dict}, f, protocol=4)
        out[split] = (data, class_dict)
    return out


def _dump_bytes_keys(path: Path, obj: dict) -> None:
    """Pickle with ``bytes`` keys and ``bytes`` strings, as CIFAR's Python 2 pickles read with
    ``encoding="bytes"`` present them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def cifar_rows(images_chw: np.ndarray) -> np.ndarray:
    """uint8 ``[N, 3, 32, 32]`` -> the ``[N, 3072]`` rows of the CIFAR pickles (R, G, B planes)."""
    return images_chw.reshape(len(images_chw), 3072)


def write_cifar100(
    root: Path,
    fine_names: list[str],
    coarse_of: dict[str, str],
    train_per_class: int = 2,
    test_per_class: int = 1,
) -> dict[str, np.ndarray]:
    """``root/cifar-100-python/{train,test,meta}`` with ``b"data"``, ``b"fine_labels"``,
    ``b"coarse_labels"``; meta ``b"fine_label_names"``, ``b"coarse_label_names"`` (sorted, as in CIFAR).

    Every image is random and distinct; returns ``{fine name: uint8 [train + test, 3, 32, 32]}``.
    """
    coarse_names = sorted(set(coarse_of.values()))
    rng = np.random.default_rng(0)
    per_class = {
        n: rng.integers(0, 256, (train_per_class + test_per_class, 3, 32, 32), dtype=np.uint8)
        for n in fine_names
    }
    folder = root / "cifar-100-python"
    for split, sl in (("train", slice(0, train_per_class)), ("test", slice(train_per_class, None))):
        imgs, fine, coarse = [], [], []
        for i, n in enumerate(fine_names):
            batch = per_class[n][sl]
            imgs.append(batch)
            fine += [i] * len(batch)
            coarse += [coarse_names.index(coarse_of[n])] * len(batch)
        order = rng.permutation(len(fine))  # classes interleaved, as in the real files
        data = cifar_rows(np.concatenate(imgs))[order]
        _dump_bytes_keys(
            folder / split,
            {
                b"filenames": [f"img_{k}.png".encode() for k in range(len(order))],
                b"batch_label": split.encode(),
                b"fine_labels": [fine[k] for k in order],
                b"coarse_labels": [coarse[k] for k in order],
                b"data": data,
            },
        )
    _dump_bytes_keys(
        folder / "meta",
        {
            b"fine_label_names": [n.encode() for n in fine_names],
            b"coarse_label_names": [n.encode() for n in coarse_names],
        },
    )
    return per_class


def write_cifar10(
    root: Path, per_batch: int = 4, test: int = 6
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``root/cifar-10-batches-py/data_batch_{1..5}``, ``test_batch`` (``b"data"``, ``b"labels"``) and
    ``batches.meta``. Returns ``(train images [N, 3, 32, 32], train labels, test images, test labels)``."""
    rng = np.random.default_rng(1)
    folder = root / "cifar-10-batches-py"
    out = []
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        n = test if name == "test_batch" else per_batch
        imgs = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, n).tolist()
        _dump_bytes_keys(
            folder / name, {b"batch_label": name.encode(), b"labels": labels, b"data": cifar_rows(imgs)}
        )
        out.append((imgs, np.array(labels)))
    _dump_bytes_keys(folder / "batches.meta", {b"label_names": [f"c{i}".encode() for i in range(10)]})
    train = out[:5]
    return (
        np.concatenate([t[0] for t in train]),
        np.concatenate([t[1] for t in train]),
        out[5][0],
        out[5][1],
    )
