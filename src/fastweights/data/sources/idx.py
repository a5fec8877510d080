"""IDX files (the MNIST / Fashion-MNIST format) and train/test datasets stored in them."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from ._cache import cache_key, default_cache_dir, files_fingerprint, load_or_build_npz
from ._resize import resize_bilinear
from .base import LabeledImages, SplitDataset, pixel_stats

__all__ = ["read_idx", "load_idx_dataset", "IDX_FILES"]

# IDX type code -> big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
CACHE_VERSION = 1  # bump when the decoded arrays change for the same files and size


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (raw, or gzip-compressed, detected by content) into a native-endian array.

    Header: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
    0x0E float64), the number of dimensions, then one big-endian uint32 per dimension.
    Raises ``FileNotFoundError`` if the file is missing and ``ValueError`` (with the path, expected
    and given values) on a bad magic number, a truncated header or a wrong data length.
    """
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise ValueError(f"{path}: expected a valid gzip stream, given a corrupt one ({err})") from None
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise ValueError(
            f"{path}: expected an IDX magic number 00 00 <type in {known}> <ndim >= 1>, "
            f"given {raw[:4].hex(' ') or 'an empty file'}"
        )
    dtype, ndim = np.dtype(_IDX_DTYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: expected a {header}-byte header for {ndim} dims, given {len(raw)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"{path}: expected {expected} data bytes for shape {shape} and dtype {dtype.name}, "
            f"given {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _locate(folder: Path, torchvision_name: str | None) -> tuple[dict[str, Path | None], list[Path]]:
    """The IDX files of the first candidate folder holding all four, else of ``folder``; the candidates."""
    candidates = [folder, folder / "raw"] + ([folder / torchvision_name / "raw"] if torchvision_name else [])
    for cand in candidates:
        paths = {key: _find(cand, stem) for key, stem in IDX_FILES.items()}
        if all(p is not None for p in paths.values()):
            return paths, candidates
    return {key: _find(folder, stem) for key, stem in IDX_FILES.items()}, candidates


def load_idx_dataset(
    folder: str | os.PathLike = "/usr/share/datasets/fashion-mnist",
    *,
    name: str = "Fashion-MNIST",
    image_size: int = 32,
    torchvision_name: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
) -> SplitDataset:
    """A train/test :class:`SplitDataset` from the four standard IDX files in ``folder``.

    Expects ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
    ``t10k-labels-idx1-ubyte`` (each raw or ``.gz``) in ``folder``, ``folder/raw`` or, with
    ``torchvision_name`` (e.g. ``"MNIST"``, ``"FashionMNIST"``), torchvision's
    ``folder/<torchvision_name>/raw``; the first folder holding all four is used. Images (uint8
    ``[N, 28, 28]`` for MNIST-like sets, white on black) are resized bilinearly to ``image_size`` (as
    torchvision's ``Resize(32)`` in automated-cl's MNIST transforms); labels become int64;
    ``num_classes = max label + 1``; ``mean``/``std`` are the train pixel statistics of the resized
    images. The default is Debian's ``dataset-fashion-mnist`` package (Split-FashionMNIST meta-test
    set, ``docs/results.md``).
    The decoded and resized arrays are cached in ``cache_dir`` (default ``$FASTWEIGHTS_CACHE`` or
    ``~/.cache/fastweights``) as ``idx-<name>-<key>.npz``, the key made of the image size and the four
    files' paths, sizes and modification times (a changed file is decoded again); ``cache=False``
    decodes every time and writes nothing. Fashion-MNIST's 70,000 images take ~3 s to decode and
    resize, ~0.1 s to read back.
    Raises ``FileNotFoundError`` listing the expected files and the folders searched, ``ValueError`` on
    malformed files (see :func:`read_idx`), mismatched image/label counts or a bad ``image_size``.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 4 <= image_size <= 512:
        raise ValueError(f"image_size: expected an int in [4, 512], given {image_size!r}")
    paths, searched = _locate(Path(folder), torchvision_name)
    missing = [IDX_FILES[k] for k, p in paths.items() if p is None]
    if missing:
        found = "none" if len(missing) == len(IDX_FILES) else f"all but {', '.join(missing)} in {folder}"
        hint = ""
        if name == "Fashion-MNIST":
            hint = (
                "; run `apt-get install dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist)"
            )
        raise FileNotFoundError(
            f"{name}: expected the IDX files {', '.join(IDX_FILES.values())} (raw or .gz) in one of "
            f"{', '.join(map(str, searched))}, found {found}{hint}"
        )
    files = [p for p in paths.values() if p is not None]
    key = cache_key({"v": CACHE_VERSION, "size": image_size, "files": files_fingerprint(files)})
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    arrays = load_or_build_npz(
        folder / f"idx-{name}-{key}.npz" if cache else None, lambda: _decode(paths, image_size)
    )
    splits = {s: LabeledImages(arrays[f"{s}_images"], arrays[f"{s}_labels"]) for s in ("train", "test")}
    num_classes = int(max(splits["train"].labels.max(initial=0), splits["test"].labels.max(initial=0))) + 1
    mean, std = pixel_stats(splits["train"].images)
    return SplitDataset(name, splits["train"], splits["test"], num_classes, mean, std)


def _decode(paths: dict[str, Path | None], image_size: int) -> dict[str, np.ndarray]:
    """``{train,test}_{images,labels}``: the IDX files of ``paths`` read, checked and resized."""
    arrays = {}
    for split in ("train", "test"):
        images, labels = read_idx(paths[f"{split}_images"]), read_idx(paths[f"{split}_labels"])
        if images.ndim != 3 or images.dtype != np.uint8:
            raise ValueError(
                f"{paths[f'{split}_images']}: expected uint8 images [N, H, W], "
                f"given {images.dtype} {images.shape}"
            )
        if labels.ndim != 1 or len(labels) != len(images):
            raise ValueError(
                f"{paths[f'{split}_labels']}: expected {len(images)} labels [N], given shape {labels.shape}"
            )
        if labels.size and labels.min() < 0:
            raise ValueError(f"{paths[f'{split}_labels']}: expected labels >= 0, given {labels.min()}")
        arrays[f"{split}_images"] = resize_bilinear(images, image_size)
        arrays[f"{split}_labels"] = labels.astype(np.int64)
    return arrays
