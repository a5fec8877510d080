"""Config of the in-context classifier (:class:`~fastweights.models.in_context.InContextClassifier`) and the
function that builds one from it: Conv-4 → ``num_layers`` × [sequence layer, FF] → head (ACL paper §3 /
App. A). The ``model`` section of the ``acl``, ``fewshot`` and ``sequential``
recipes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from fastweights.checks import check_choice, check_int, check_ints, check_real
from fastweights.layers import (
    SEQUENCE_LAYERS,
    check_block_options,
    layer_options_for,
    make_sequence_layer,
    per_layer_options,
)
from fastweights.models.backbones import NORMS, Conv4, FeatureInput
from fastweights.models.frozen import parse_backbone
from fastweights.models.in_context import InContextClassifier

__all__ = [
    "ClassifierConfig",
    "build_classifier",
    "check_conv4_backbone",
    "check_label_space",
    "check_layer_options",
]


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
    #: factor on the initial weights of the input projection's label columns (1 = the reference)
    label_init_scale: float = 1.0
    #: factor on the input projection's initial weights and bias (1 = the reference)
    input_init_scale: float = 1.0
    #: extra keyword options of the sequence layers: options of ``sequence_layer`` ({init: modern}), or
    #: options per layer name ({srwm: {init: modern}}; only ``sequence_layer``'s entry is used);
    #: ``block``: native (default, each layer's own form) or pre_ln (the same ``x + W_o·core(LN(x))``
    #: block for every layer, so that comparing layers compares only their cores)
    layer_options: dict[str, Any] = field(default_factory=dict)
    #: "conv4" (trained with the sequence part), or "frozen:<name>": a frozen pretrained encoder of
    #: fastweights.models.frozen.FROZEN_ENCODERS whose cached features replace Conv-4 (ACL paper App. A.8;
    #: the acl recipe only)
    backbone: str = "conv4"
    backbone_weights: str = ""  # weights file of a frozen encoder that needs one (vit_b16)
    backbone_image_size: int = 64  # images are resized to this many pixels for a frozen encoder

    def __post_init__(self) -> None:
        """Check every field without building a model (``ValueError`` naming the field)."""
        check_choice("sequence_layer", self.sequence_layer, SEQUENCE_LAYERS)
        if parse_backbone(self.backbone) is None and self.backbone_weights:
            raise ValueError(
                "backbone_weights: expected '' for backbone 'conv4' (a frozen encoder's file), "
                f"got {self.backbone_weights!r}"
            )
        check_int("backbone_image_size", self.backbone_image_size, low=16, high=1024)
        check_ints(self, ("num_classes", "d_model", "num_layers", "num_heads", "ff_factor", "channels"))
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={self.num_heads}, got {self.d_model}"
            )
        check_real("dropout", self.dropout, 0, 1, high_open=True)
        check_real("vision_dropout", self.vision_dropout, 0, 1, high_open=True)
        check_choice("norm", self.norm, NORMS)
        check_real("label_init_scale", self.label_init_scale, 0.0, low_open=True)
        check_real("input_init_scale", self.input_init_scale, 0.0, low_open=True)
        if not isinstance(self.layer_options, dict):
            got = self.layer_options
            raise ValueError(f"layer_options: expected a mapping of layer options, got {got!r}")
        check_block_options(self.layer_options)
        per_layer = per_layer_options(self.layer_options)
        if per_layer is None:
            check_layer_options(self.sequence_layer, self.d_model, self.num_heads, self.layer_options)
        else:
            for name, options in per_layer.items():
                check_layer_options(name, self.d_model, self.num_heads, options, key=f"layer_options.{name}")

    def sequence_layer_options(self) -> dict[str, Any]:
        """The keyword options of ``sequence_layer`` that ``layer_options`` sets (either form)."""
        return layer_options_for(self.sequence_layer, self.layer_options)


def check_layer_options(
    name: str, d_model: int, num_heads: int, options: Any, *, key: str = "layer_options"
) -> None:
    """``options`` are keyword options a ``name`` sequence layer accepts (checked by building one).

    Raises:
        ValueError: naming ``key`` when it is not a mapping or the layer refuses an option.
    """
    if not isinstance(options, dict):
        raise ValueError(f"{key}: expected a mapping of layer options, got {options!r}")
    if not options:
        return
    if "dropout" in options:
        raise ValueError(f"{key}: 'dropout' is set by model.dropout; expected other options")
    try:
        make_sequence_layer(name, d_model, num_heads, **options)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{key}: {sorted(options)} not accepted by {name!r}: {err}") from None


def check_conv4_backbone(m: ClassifierConfig, recipe: str) -> None:
    """A recipe that trains its backbone refuses a frozen encoder (an ``acl`` option).

    Raises:
        ValueError: naming ``model.backbone`` unless it is ``"conv4"``.
    """
    if m.backbone != "conv4":
        raise ValueError(
            f"model.backbone: expected 'conv4' for the {recipe} recipe (frozen encoders are an acl option), "
            f"got {m.backbone!r}"
        )


def check_label_space(num_classes: int, ways: dict[str, list[int]]) -> None:
    """Every ``n_way`` a recipe asks for fits the classifier's ``num_classes`` outputs.

    Args:
        ways: config key → the n_way values it sets (e.g. ``{"train.n_way": [5]}``).

    Raises:
        ValueError: naming the first key whose value exceeds ``model.num_classes``.
    """
    for key, values in ways.items():
        if any(w > num_classes for w in values):
            got = values[0] if len(values) == 1 else values
            raise ValueError(f"{key}: expected <= model.num_classes={num_classes}, got {got}")


def build_classifier(
    m: ClassifierConfig,
    *,
    image_size: int,
    in_channels: int = 1,
    feature_dim: int | None = None,
    encoder_sha256: str | None = None,
) -> InContextClassifier:
    """The classifier of ``m`` for ``[B, T, in_channels, image_size, image_size]`` float images, or with
    a frozen backbone (``m.backbone = "frozen:<name>"``) for its ``feature_dim``-d cached features
    ``[B, T, feature_dim]`` (:class:`~fastweights.models.backbones.FeatureInput`, recording
    ``encoder_sha256``, the encoder's weights hash).

    Raises:
        ValueError: from the backbone or the sequence layer for a bad field (e.g. an unknown layer), or
            when a frozen backbone comes without ``feature_dim``.
    """
    if parse_backbone(m.backbone) is not None:
        if feature_dim is None:
            raise ValueError(f"backbone: {m.backbone!r} needs the encoder's feature_dim, got None")
        backbone: nn.Module = FeatureInput(feature_dim, encoder_sha256)
    else:
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
        label_init_scale=m.label_init_scale,
        input_init_scale=m.input_init_scale,
        layer_options=m.sequence_layer_options(),
    )
