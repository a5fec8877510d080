"""Task-level view augmentation of meta-training episodes: a whole task seen in grayscale or at low
resolution (domain randomisation towards out-of-domain test sets).

This library's addition, not the ACL reference's: the ACL paper meta-trains on Omniglot + Mini-ImageNet
and tests on MNIST, a near domain. Our offline domains (FontGlyphs, EmojiImages) are far from the
grayscale split benchmarks — Split-Digits is scikit-learn's 8x8 digits enlarged, Split-FashionMNIST is
grayscale — so a meta-training task can be shown the way such a test task looks. The choice is made per
task (every support, query and first-shot image of one task of one sequence gets the same view), so a
task stays one consistent domain, as a test task is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from fastweights.checks import check_int, check_real

from .episodes import EpisodeBatch

__all__ = ["TaskAugment", "to_grayscale", "to_low_res"]

#: ITU-R BT.601 luma weights (what PIL's ``convert("L")`` uses).
LUMA = (0.299, 0.587, 0.114)


def to_grayscale(images: np.ndarray) -> np.ndarray:
    """RGB uint8 ``[..., 3, S, S]`` -> luma (BT.601) repeated to 3 channels, uint8 of the same shape."""
    w = np.asarray(LUMA, dtype=np.float32).reshape(3, 1, 1)
    luma = np.rint((images.astype(np.float32) * w).sum(axis=-3, keepdims=True)).clip(0, 255)
    return np.broadcast_to(luma.astype(np.uint8), images.shape).copy()


def to_low_res(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 ``[..., S, S]`` (any leading axes, channels included) shrunk to ``size x size``
    (antialiased bilinear) and enlarged back to ``S x S`` (bilinear): the look of a small image resized
    up, as Split-Digits' 8x8 images are. Same shape and dtype."""
    s = images.shape[-1]
    x = torch.from_numpy(np.ascontiguousarray(images)).reshape(-1, 1, s, s).float()
    small = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    back = F.interpolate(small, size=(s, s), mode="bilinear", align_corners=False)
    return back.round().clamp(0, 255).to(torch.uint8).reshape(images.shape).numpy()


@dataclass
class TaskAugment:
    """Per-task view changes of meta-training episodes (config ``train.augment``).

    Attributes:
        grayscale: probability that a task of an RGB domain is shown in grayscale (BT.601 luma repeated
            to 3 channels); ignored for grayscale domains.
        low_res: probability that a task is shown at ``low_res_size`` pixels, enlarged back to the
            model's image size.
        low_res_size: side of the low-resolution view in pixels (8: scikit-learn's digits).

    Draws come from the episode-sampling stream and only for a probability strictly between 0 and 1, so
    with both at 0 (the default) the episodes are exactly those of a run without augmentation, and a
    probability of 1 (a fixed view: ``train.val_views``) shows the same episodes as without it.

    Raises:
        ValueError: for a probability outside [0, 1] or a ``low_res_size`` below 2.
    """

    grayscale: float = 0.0
    low_res: float = 0.0
    low_res_size: int = 8

    def __post_init__(self) -> None:
        check_real("grayscale", self.grayscale, low=0.0, high=1.0)
        check_real("low_res", self.low_res, low=0.0, high=1.0)
        check_int("low_res_size", self.low_res_size, low=2)

    @staticmethod
    def _mask(p: float, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray | None:
        """Which ``(sequence, task)`` pairs get a view of probability ``p``: ``None`` at 0, all at 1
        (no draw: a fixed view, e.g. meta-validation's), else ``rng.random(shape) < p``."""
        if p <= 0:
            return None
        if p >= 1:
            return np.ones(shape, dtype=bool)
        return rng.random(shape) < p

    @property
    def active(self) -> bool:
        """Whether any view change can happen."""
        return self.grayscale > 0 or self.low_res > 0

    def apply(
        self, batches: list[EpisodeBatch], rng: np.random.Generator, *, channels: int
    ) -> list[EpisodeBatch]:
        """The batches of one domain's task positions, each ``(sequence, task)`` pair's images given
        its drawn view.

        Args:
            batches: one :class:`EpisodeBatch` per task position (batch size ``B``), as
                :meth:`~fastweights.data.episodes.EpisodeSampler.sample` returns.
            rng: the episode-sampling stream; draws ``[B, T]`` uniforms per view of probability in (0, 1).
            channels: the pool's channels (1: images ``[B, n, S, S]``; 3: ``[B, n, 3, S, S]``).

        Returns:
            New batches (labels shared, images copied where changed); ``batches`` itself when inactive.
        """
        if not self.active or not batches:
            return batches
        b, t = batches[0].batch_size, len(batches)
        gray = self._mask(self.grayscale, rng, (b, t)) if channels == 3 else None
        low = self._mask(self.low_res, rng, (b, t))

        def view(images: np.ndarray | None, i: int) -> np.ndarray | None:
            if images is None:
                return None
            out = images
            for mask, fn in ((gray, to_grayscale), (low, lambda a: to_low_res(a, self.low_res_size))):
                if mask is not None and mask[:, i].any():
                    out = out.copy() if out is images else out
                    out[mask[:, i]] = fn(out[mask[:, i]])
            return out

        return [
            replace(
                eb,
                support_images=view(eb.support_images, i),
                query_images=view(eb.query_images, i),
                first_shot_images=view(eb.first_shot_images, i),
            )
            for i, eb in enumerate(batches)
        ]
