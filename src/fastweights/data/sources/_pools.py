"""Turn decoded per-split arrays into :class:`ClassPool` objects, checking that the splits are disjoint."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .base import ClassPool, image_stats

__all__ = ["PoolParts", "check_disjoint", "make_pools", "stack_classes"]


@dataclass(frozen=True)
class PoolParts:
    """One split before validation: uint8 ``images`` ``[C, M, S, S]`` or ``[C, M, 3, S, S]``, and per
    class a display name, a group (alphabet / superclass) and a unique id used for the disjointness check."""

    images: np.ndarray
    class_names: list[str]
    alphabets: list[str]
    class_ids: list[Hashable]


def _describe(split: str, name: str) -> str:
    return f"{split}:{name}"


def check_disjoint(dataset: str, parts: Mapping[str, PoolParts], max_listed: int = 5) -> None:
    """Raise ``ValueError`` if two splits share a class id or an image.

    Images are compared by the sha1 of their bytes (exact duplicates after decoding and resizing).
    The message names the data set and up to ``max_listed`` overlapping classes as ``split:class``.
    """
    seen_ids: dict[Hashable, tuple[str, str]] = {}
    clashes: list[str] = []
    for split, p in parts.items():
        for cid, name in zip(p.class_ids, p.class_names, strict=True):
            other = seen_ids.setdefault(cid, (split, name))
            if other[0] != split:
                clashes.append(f"{_describe(*other)} = {_describe(split, name)}")
    if clashes:
        raise ValueError(
            f"{dataset}: expected disjoint classes across splits, given {len(clashes)} shared: "
            + ", ".join(clashes[:max_listed])
        )
    seen: dict[bytes, tuple[str, str]] = {}
    for split, p in parts.items():
        flat = p.images.reshape(p.images.shape[0], p.images.shape[1], -1)
        for c, name in enumerate(p.class_names):
            for row in flat[c]:
                other = seen.setdefault(hashlib.sha1(row.tobytes()).digest(), (split, name))
                if other[0] != split:
                    pair = f"{_describe(*other)} ~ {_describe(split, name)}"
                    if pair not in clashes:
                        clashes.append(pair)
    if clashes:
        raise ValueError(
            f"{dataset}: expected no image in two splits, given identical images in the classes "
            + ", ".join(clashes[:max_listed])
            + (f" (and {len(clashes) - max_listed} more pairs)" if len(clashes) > max_listed else "")
        )


def make_pools(
    dataset: str, parts: Mapping[str, PoolParts], stats_split: str = "train"
) -> dict[str, ClassPool]:
    """``{split: ClassPool named "<dataset>/<split>"}`` after :func:`check_disjoint`.

    Every pool is normalised with the pixel statistics of the ``stats_split`` images (train statistics
    for all splits, as a fixed input normalisation; per channel for RGB), or with its own statistics if
    that split is absent. Raises ``ValueError`` from :func:`check_disjoint` or :class:`ClassPool`.
    """
    check_disjoint(dataset, parts)
    pools = {}
    for split, p in parts.items():
        ref = parts.get(stats_split, p).images
        mean, std = image_stats(ref, 1 if ref.ndim == 4 else 3)
        pools[split] = ClassPool(f"{dataset}/{split}", p.images, p.class_names, p.alphabets, mean, std)
    return pools


def stack_classes(dataset: str, per_class: Sequence[np.ndarray], names: Sequence[str]) -> np.ndarray:
    """Stack per-class image arrays ``[M_c, ...]`` into ``[C, M, ...]``.

    Raises ``ValueError`` naming the data set and the classes whose counts differ from the first one's
    (a pool needs the same number M of examples in every class).
    """
    if not per_class:
        raise ValueError(f"{dataset}: expected at least one class, given none")
    counts = [len(a) for a in per_class]
    odd = [f"{n} ({m})" for n, m in zip(names, counts, strict=True) if m != counts[0]]
    if odd:
        raise ValueError(
            f"{dataset}: expected the same number of images in every class ({counts[0]}, as "
            f"{names[0]}), given " + ", ".join(odd[:5]) + (" ..." if len(odd) > 5 else "")
        )
    return np.stack(per_class)
