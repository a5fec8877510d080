"""N-way K-shot episodes from a :class:`~fastweights.data.sources.base.ClassPool`.

Semantics of torchmeta's task sampling (Deleu et al. 2019; replaced here): N distinct classes per task drawn
uniformly without replacement (all classes of the tasks of one sequence are distinct), a fresh
uniformly random class -> label assignment per task, disjoint per-class example slices in the order
first-shot (1), support (K), query (Q), and demonstrations of different classes interleaved at random.
Optional Omniglot-style class augmentation: the 0/90/180/270° rotations of a class are 4 classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastweights.checks import check_count

from .sources.base import ClassPool

__all__ = ["EpisodeBatch", "EpisodeSampler"]


@dataclass
class EpisodeBatch:
    """B independent few-shot tasks (uint8 images as in the pool; labels int64).

    ``support_images [B, N*K, S, S]`` / ``support_labels [B, N*K]``: classes interleaved at random;
    ``query_images [B, N*Q, S, S]`` / ``query_labels [B, N*Q]``: shuffled;
    ``first_shot_images [B, N, S, S]`` / ``first_shot_labels [B, N]``: one extra example per class,
    disjoint from support and query, shuffled (None unless requested).
    Images of an RGB pool have a channel axis before the pixels: ``[B, N*K, 3, S, S]`` etc.
    """

    support_images: np.ndarray
    support_labels: np.ndarray
    query_images: np.ndarray
    query_labels: np.ndarray
    first_shot_images: np.ndarray | None = None
    first_shot_labels: np.ndarray | None = None

    @property
    def batch_size(self) -> int:
        return int(self.support_labels.shape[0])


def _random_subsets(rng: np.random.Generator, shape: tuple[int, ...], n: int, k: int) -> np.ndarray:
    """``k`` distinct values of ``range(n)`` in random order, for every index: int64 ``shape + (k,)``."""
    keys = rng.random((*shape, n))
    if k < n:
        idx = np.argpartition(keys, k - 1, axis=-1)[..., :k]
    else:
        idx = np.broadcast_to(np.arange(n), keys.shape)
    order = np.argsort(np.take_along_axis(keys, idx, axis=-1), axis=-1)
    return np.take_along_axis(idx, order, axis=-1).astype(np.int64)


class EpisodeSampler:
    """Sample batches of task sequences from ``pool`` (see :meth:`sample`).

    ``rotations=True`` makes the 0/90/180/270° rotations of every class 4 distinct classes
    (``4 * C`` classes; rotated at sampling time with ``np.rot90`` on the two pixel axes,
    counter-clockwise; no copy of the pool), as the Omniglot class augmentation of Santoro et al.
    2016. Works for grayscale ``[C, M, S, S]`` and RGB ``[C, M, 3, S, S]`` pools, and for pools of
    features ``[C, M, F]`` (:class:`~fastweights.data.features.FeaturePool`; no rotations).
    """

    def __init__(self, pool: ClassPool, *, rotations: bool = False) -> None:
        if not isinstance(pool, ClassPool):
            raise ValueError(f"pool: expected a ClassPool, given {type(pool).__name__}")
        if rotations and pool.channels == 0:
            raise ValueError(
                f"rotations: expected False for pool {pool.name!r} of features (rotations turn images), "
                "given True"
            )
        self.pool = pool
        self.rotations = bool(rotations)

    @property
    def num_classes(self) -> int:
        """Number of classes episodes draw from (``4 * C`` with rotations)."""
        return self.pool.num_classes * (4 if self.rotations else 1)

    def _gather(self, base: np.ndarray, rot: np.ndarray, ex: np.ndarray) -> np.ndarray:
        """Images ``pool.images[base, ex]`` rotated by ``rot * 90°``; index arrays of equal shape."""
        imgs = self.pool.images[base, ex]
        if self.rotations:
            for r in (1, 2, 3):
                sel = rot == r
                if sel.any():
                    imgs[sel] = np.rot90(imgs[sel], k=r, axes=(-2, -1))
        return imgs

    def sample(
        self,
        rng: np.random.Generator,
        *,
        batch_size: int,
        num_tasks: int,
        n_way: int,
        k_shot: int,
        n_query: int,
        label_space: int | None = None,
        first_shot: bool = False,
    ) -> list[EpisodeBatch]:
        """Draw ``batch_size`` sequences of ``num_tasks`` N-way K-shot tasks; one batch per task position.

        Returns a list of ``num_tasks`` :class:`EpisodeBatch` with support ``[B, N*K, S, S]``,
        query ``[B, N*Q, S, S]`` and, if ``first_shot``, first-shot ``[B, N, S, S]`` images
        (``[B, *, 3, S, S]`` for an RGB pool).
        Within each of the B sequences the ``num_tasks * n_way`` classes are distinct. Each task
        maps its N classes to ``rng.permutation(label_space or n_way)[:n_way]`` (so a 2-way task
        can use labels from 0..4 of a 5-way head); support, query and first-shot examples of a
        class are distinct examples of the pool. Fully determined by the state of ``rng``.
        Raises ``ValueError`` (argument, expected, given) when ``n_way * num_tasks`` exceeds the
        number of classes, ``k_shot + n_query (+1)`` exceeds the examples per class, or an
        argument is out of range.
        """
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng: expected a numpy.random.Generator, given {type(rng).__name__}")
        b = check_count("batch_size", batch_size, 1)
        t = check_count("num_tasks", num_tasks, 1)
        n = check_count("n_way", n_way, 1)
        k = check_count("k_shot", k_shot, 1)
        q = check_count("n_query", n_query, 0)
        space = n if label_space is None else check_count("label_space", label_space, n)
        f = 1 if first_shot else 0
        c, m = self.num_classes, self.pool.examples_per_class
        if n * t > c:
            raise ValueError(
                f"n_way * num_tasks: expected <= {c} classes in pool {self.pool.name!r}"
                f"{' (with rotations)' if self.rotations else ''}, given {n} * {t} = {n * t}"
            )
        if k + q + f > m:
            raise ValueError(
                f"k_shot + n_query{' + 1 (first_shot)' if f else ''}: expected <= {m} examples per class, "
                f"given {k} + {q}{' + 1' if f else ''} = {k + q + f}"
            )
        classes = _random_subsets(rng, (b,), c, n * t).reshape(b, t, n)
        base, rot = classes % self.pool.num_classes, classes // self.pool.num_classes
        examples = _random_subsets(rng, (b, t, n), m, k + q + f)  # slices: first-shot | support | query
        labels = _random_subsets(rng, (b, t), space, n)  # labels[b, t, slot]
        bi, ti = np.arange(b)[:, None, None], np.arange(t)[None, :, None]

        def split(count: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
            order = _random_subsets(rng, (b, t), n * count, n * count)  # interleaving permutation
            slot, shot = order // count, order % count
            ex = examples[bi, ti, slot, offset + shot]
            imgs = self._gather(base[bi, ti, slot], rot[bi, ti, slot], ex)
            return imgs, labels[bi, ti, slot]

        fs_imgs, fs_labels = split(1, 0) if f else (None, None)
        s_imgs, s_labels = split(k, f)
        q_imgs, q_labels = split(q, f + k)
        c_ = np.ascontiguousarray
        return [
            EpisodeBatch(
                support_images=c_(s_imgs[:, i]),
                support_labels=c_(s_labels[:, i]),
                query_images=c_(q_imgs[:, i]),
                query_labels=c_(q_labels[:, i]),
                first_shot_images=None if fs_imgs is None else c_(fs_imgs[:, i]),
                first_shot_labels=None if fs_labels is None else c_(fs_labels[:, i]),
            )
            for i in range(t)
        ]
