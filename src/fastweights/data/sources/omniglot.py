"""Omniglot (Lake et al. 2015) from a local folder, with the Vinyals et al. 2016 character split.

Two on-disk layouts are read (Lake et al. 2015's ``images_*`` folders, torchmeta's ``data.hdf5``); nothing
is ever downloaded:

- torchvision: ``<root>/omniglot-py/images_background/<alphabet>/<character>/*.png`` and
  ``<root>/omniglot-py/images_evaluation/...`` (the unzipped ``images_background.zip`` /
  ``images_evaluation.zip``: 105x105 PNGs, black strokes on white);
- torchmeta: ``<root>/omniglot/data.hdf5`` with uint8 datasets
  ``images_background|images_evaluation/<alphabet>/<character>`` of shape ``[20, 105, 105]``, white
  strokes (255) on black (0), i.e. already inverted.

Both give white ink on black, like every source of this project. The Vinyals split (1028 / 172 / 423
characters) is by character, not by alphabet (Gurmukhi straddles train and test). The rotation class
augmentation is a sampler option (``EpisodeSampler(rotations=True)``), not stored copies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ._cache import cache_key, default_cache_dir, files_fingerprint, load_or_build_npz
from ._decode import read_image
from ._pools import PoolParts, make_pools, stack_classes
from ._resize import resize_image
from ._splits import SPLIT_NAMES, read_split
from .base import ClassPool

__all__ = ["load_omniglot", "omniglot_split", "GROUPS"]

GROUPS = ("background", "evaluation")  # -> folders / HDF5 groups "images_background", "images_evaluation"
CACHE_VERSION = 1
Character = tuple[str, str, str]  # (group, alphabet, character)


def omniglot_split(split: str) -> list[Character]:
    """The Vinyals et al. split ``split`` ("train", "val", "test") as ``(group, alphabet, character)``
    triples in file order (group = Omniglot archive, "background" or "evaluation")."""
    return _characters(read_split("omniglot", split), f"omniglot/{split}.json")


def _characters(tree: object, where: str) -> list[Character]:
    """Flatten ``{group: {alphabet: [character, ...]}}``; ``ValueError`` naming ``where`` otherwise."""
    out: list[Character] = []
    ok = isinstance(tree, Mapping) and set(tree) <= set(GROUPS)
    for group, alphabets in tree.items() if ok else ():
        if not isinstance(alphabets, Mapping):
            ok = False
            break
        for alphabet, chars in alphabets.items():
            if not isinstance(chars, list) or not all(isinstance(c, str) for c in chars):
                ok = False
                break
            out.extend((group, alphabet, c) for c in chars)
    if not ok:
        raise ValueError(
            f"{where}: expected {{'background'|'evaluation': {{alphabet: [character, ...]}}}}, "
            f"given {tree!r:.200}"
        )
    return out


def _layout_error(root: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"Omniglot: expected in {root} either the torchvision folders "
        f"{root / 'omniglot-py' / 'images_background'}/<alphabet>/<character>/*.png and "
        f"{root / 'omniglot-py' / 'images_evaluation'}/... (unzipped images_background.zip and "
        f"images_evaluation.zip), or the torchmeta file {root / 'omniglot' / 'data.hdf5'} "
        "(groups images_background|images_evaluation/<alphabet>/<character>, uint8 [20, 105, 105]); "
        "found neither"
    )


def _png_files(base: Path, chars: list[Character]) -> list[list[Path]]:
    out = []
    for group, alphabet, character in chars:
        folder = base / f"images_{group}" / alphabet / character
        files = sorted(folder.glob("*.png")) if folder.is_dir() else []
        if not files:
            raise FileNotFoundError(
                f"Omniglot: expected the PNG drawings of character {alphabet}/{character} in {folder} "
                f"(torchvision layout <root>/omniglot-py/images_{group}/<alphabet>/<character>/*.png), "
                "found none"
            )
        out.append(files)
    return out


def _read_pngs(files: list[list[Path]], size: int, names: list[str]) -> np.ndarray:
    per_class = [
        np.stack([resize_image(255 - read_image(f, rgb=False), size) for f in fs]) for fs in files
    ]  # PNGs are black strokes on white: invert to white ink on black before resizing
    return stack_classes("Omniglot", per_class, names)


def _read_hdf5(path: Path, chars: list[Character], size: int, names: list[str]) -> np.ndarray:
    import h5py

    per_class = []
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise ValueError(f"{path}: expected an HDF5 file, given an unreadable one ({err})") from None
    with f:
        for group, alphabet, character in chars:
            key = f"images_{group}/{alphabet}/{character}"
            data = f.get(key)
            if not isinstance(data, h5py.Dataset) or data.dtype != np.uint8 or data.ndim != 3:
                given = "nothing" if data is None else f"{getattr(data, 'dtype', 'a group')} {data.shape}"
                raise ValueError(
                    f"{path}: expected a uint8 dataset [M, H, W] at {key} (torchmeta Omniglot layout, "
                    f"white strokes on black), given {given}"
                )
            per_class.append(np.stack([resize_image(img, size) for img in data[()]]))
    return stack_classes("Omniglot", per_class, names)


def load_omniglot(
    root: str | os.PathLike,
    *,
    image_size: int = 28,
    splits: Mapping[str, Mapping[str, Mapping[str, list[str]]]] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
) -> dict[str, ClassPool]:
    """Omniglot few-shot pools ``{"train", "val", "test"} -> ClassPool`` from a local folder.

    Each pool holds uint8 ``images`` ``[C, 20, image_size, image_size]`` (white ink on black; every
    drawing of a character, resized bilinearly from 105x105), ``class_names`` ``"<alphabet>/<character>"``
    and ``alphabets``; ``mean``/``std`` are the train pixel statistics (floats). Layouts (checked in
    this order): torchvision ``<root>/omniglot-py/images_{background,evaluation}/<alphabet>/<character>/
    *.png`` (black on white, inverted here) or torchmeta ``<root>/omniglot/data.hdf5`` (already white on
    black). ``splits`` maps split names to ``{"background"|"evaluation": {alphabet: [character, ...]}}``
    (default: the packaged Vinyals split, 1028 / 172 / 423 characters); characters present on disk but
    not listed are ignored. Decoded arrays are cached as npz in ``cache_dir`` (default
    ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``; ``cache=False`` disables it), keyed by the size,
    split lists and the paths, sizes and modification times of the source files.

    Raises ``FileNotFoundError`` naming the expected layout and paths when the folder, a character
    folder or its PNGs are missing; ``ValueError`` for a malformed HDF5 file or split list, unreadable
    PNGs, characters with different drawing counts, a bad ``image_size``, or splits that share a
    character or an identical image.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 4 <= image_size <= 512:
        raise ValueError(f"image_size: expected an int in [4, 512], given {image_size!r}")
    root = Path(root)
    trees = {s: read_split("omniglot", s) for s in SPLIT_NAMES} if splits is None else dict(splits)
    chars = {s: _characters(t, f"splits[{s!r}]") for s, t in trees.items()}
    png_base, h5_path = root / "omniglot-py", root / "omniglot" / "data.hdf5"
    png = all((png_base / f"images_{g}").is_dir() for g in GROUPS)
    if png:
        files = {s: _png_files(png_base, c) for s, c in chars.items()}
        sources = [f for fs in files.values() for per in fs for f in per]
    elif h5_path.is_file():
        files, sources = {}, [h5_path]
    else:
        raise _layout_error(root)
    names = {s: [f"{a}/{c}" for _, a, c in cs] for s, cs in chars.items()}

    def build() -> dict[str, np.ndarray]:
        if png:
            return {f"{s}_images": _read_pngs(files[s], image_size, names[s]) for s in chars}
        return {f"{s}_images": _read_hdf5(h5_path, chars[s], image_size, names[s]) for s in chars}

    key = cache_key(
        {"v": CACHE_VERSION, "size": image_size, "splits": chars, "files": files_fingerprint(sources)}
    )
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    arrays = load_or_build_npz(folder / f"omniglot-{key}.npz" if cache else None, build)
    parts = {
        s: PoolParts(arrays[f"{s}_images"], names[s], [a for _, a, _ in cs], list(cs))
        for s, cs in chars.items()
    }
    return make_pools("Omniglot", parts)
