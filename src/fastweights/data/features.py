"""Frozen-encoder features of the image sources, computed once per image and cached on disk.

A :class:`FeaturePool` is a :class:`~fastweights.data.sources.base.ClassPool` whose examples are
feature vectors instead of images: the episode sampler, the task streams and the evaluation protocols
take it unchanged, and the classifier reads the vectors through
:class:`~fastweights.models.backbones.FeatureInput` (``channels == 0`` marks features everywhere).

Cache: ``<cache>/features/<encoder>-<weights sha256[:12]>/<source>-<size>px-<key>.npz``, where the key
hashes the encoder name, its weights' SHA-256, any architecture detail the weights do not fix
(``encoder.fingerprint()``), the encoder input size, the source name and the SHA-256 of the images'
bytes (and shape), so a change of any of them is a different entry (the stale one is never read).
Features are stored as float16 (half the disk; ~3 significant digits; float32 if a value exceeds
float16's range) and returned as float32.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm.auto import tqdm

from fastweights.data.sources._cache import cache_key, default_cache_dir, load_or_build_npz
from fastweights.data.sources.base import ClassPool

__all__ = ["FeaturePool", "Encoder", "FEATURE_CACHE_VERSION", "encode_cached", "feature_pool"]

FEATURE_CACHE_VERSION = 1  # bump when the preprocessing changes: it is part of the key


class Encoder(Protocol):
    """What the cache needs of an encoder (:class:`~fastweights.models.frozen.FrozenEncoder`)."""

    name: str
    feature_dim: int
    weights_sha256: str

    def fingerprint(self) -> dict: ...

    def encode(
        self, images: np.ndarray, *, image_size: int, batch_size: int = 64, progress=None
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class FeaturePool(ClassPool):
    """A class pool of precomputed features: ``images`` holds float32 ``[C, M, F]`` feature vectors
    (the field keeps :class:`ClassPool`'s name so that samplers and streams index it alike).

    ``channels`` is 0 (features, not pixels), ``mean``/``std`` are 0/1 (features are used as they are),
    ``encoder`` names the encoder that made them. Raises ``ValueError`` naming the field on a wrong
    dtype, shape or length.
    """

    encoder: str = ""

    def __post_init__(self) -> None:
        x = self.images
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 3 or 0 in x.shape:
            got = f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}"
            raise ValueError(f"images: expected float32 features [C, M, F] with no empty axis, given {got}")
        for field in ("class_names", "alphabets"):
            n = len(getattr(self, field))
            if n != x.shape[0]:
                raise ValueError(f"{field}: expected length C = {x.shape[0]} (images.shape[0]), given {n}")
        object.__setattr__(self, "mean", 0.0)
        object.__setattr__(self, "std", 1.0)

    @property
    def channels(self) -> int:
        """0: the examples are feature vectors."""
        return 0

    @property
    def feature_dim(self) -> int:
        return int(self.images.shape[-1])


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "source"


def encode_cached(
    encoder: Encoder,
    images: np.ndarray,
    *,
    source: str,
    image_size: int,
    cache_dir: str | Path | None = None,
    batch_size: int = 64,
) -> np.ndarray:
    """Features of uint8 ``images`` ``[N, S, S]`` or ``[N, 3, S, S]`` by ``encoder`` at ``image_size``
    pixels: float32 ``[N, F]``, read from the cache when an entry with the same key exists, else computed
    (with a progress bar) and cached atomically. ``cache_dir`` defaults to ``$FASTWEIGHTS_CACHE`` (or
    ``~/.cache/fastweights``).

    Raises:
        ValueError: from the encoder for images of another layout.
    """
    images = np.ascontiguousarray(images)
    digest = hashlib.sha256(images.tobytes()).hexdigest()
    parts = {
        "version": FEATURE_CACHE_VERSION,
        "encoder": encoder.name,
        "weights": encoder.weights_sha256,
        "image_size": int(image_size),
        "source": source,
        "images": [digest, list(images.shape), str(images.dtype)],
    }
    if encoder.fingerprint():  # architecture beyond the weights (a ViT's heads)
        parts["architecture"] = encoder.fingerprint()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "features" / f"{encoder.name}-{encoder.weights_sha256[:12]}"
    path = folder / f"{_safe(source)}-{int(image_size)}px-{cache_key(parts)}.npz"

    def build() -> dict[str, np.ndarray]:
        with tqdm(
            total=len(images), desc=f"{encoder.name} features of {source}", unit="img", dynamic_ncols=True
        ) as bar:
            f = encoder.encode(images, image_size=image_size, batch_size=batch_size, progress=bar.update)
        if not np.isfinite(f).all():
            raise ValueError(
                f"model.backbone_weights: the {encoder.name} encoder gave non-finite features of {source}"
            )
        return {"features": f.astype(np.float16 if np.abs(f).max(initial=0) < 6e4 else np.float32)}

    return load_or_build_npz(path, build)["features"].astype(np.float32)


def feature_pool(
    pool: ClassPool, encoder: Encoder, *, image_size: int, cache_dir: str | Path | None = None
) -> FeaturePool:
    """``pool`` with every image replaced by its ``encoder`` features (:func:`encode_cached`, keyed by
    ``pool.name``): a :class:`FeaturePool` ``[C, M, F]`` with the same classes and names."""
    c, m = pool.num_classes, pool.examples_per_class
    flat = pool.images.reshape(c * m, *pool.images.shape[2:])
    feats = encode_cached(encoder, flat, source=pool.name, image_size=image_size, cache_dir=cache_dir)
    return FeaturePool(
        name=pool.name,
        images=feats.reshape(c, m, -1),
        class_names=list(pool.class_names),
        alphabets=list(pool.alphabets),
        mean=0.0,
        std=1.0,
        encoder=encoder.name,
    )
