"""Config of the in-context classifier (:class:`~fastweights.models.in_context.InContextClassifier`) and the
function that builds one from it: Conv-4 → ``num_layers`` × [sequence layer, FF] → head (ACL paper §3 /
App. A; spec ``srwm_acl.md`` §2). The ``model`` section of the ``acl``, ``fewshot`` and ``sequential``
recipes."""

from __future__ import annotations

from dataclasses import dataclass

from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier

__all__ = ["ClassifierConfig", "build_classifier"]


@dataclass
class ClassifierConfig:
    """Fields of the classifier; ``sequence_layer`` is a name of ``fastweights.layers.SEQUENCE_LAYERS``."""

    sequence_layer: str = "srwm"
    num_classes: int = 5  # output units N (labels 0..N-1; N is the "unknown" query label)
    d_model: int = 256
    num_layers: int = 2
    num_heads: int = 16
    ff_factor: int = 2
    dropout: float = 0.0
    vision_dropout: float = 0.0
    channels: int = 32
    norm: str = "instance"
    pool_before_norm: bool = False


def build_classifier(m: ClassifierConfig, *, image_size: int, in_channels: int = 1) -> InContextClassifier:
    """The classifier of ``m`` for ``[B, T, in_channels, image_size, image_size]`` float images.

    Raises:
        ValueError: from the backbone or the sequence layer for a bad field (e.g. an unknown layer).
    """
    backbone = Conv4(
        in_channels,
        m.channels,
        image_size=image_size,
        norm=m.norm,
        dropout=m.vision_dropout,
        pool_before_norm=m.pool_before_norm,
    )
    return InContextClassifier(
        backbone,
        m.num_classes,
        d_model=m.d_model,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        d_ff=m.ff_factor * m.d_model,
        dropout=m.dropout,
        sequence_layer=m.sequence_layer,
    )
