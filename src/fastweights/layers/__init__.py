"""Sequence layers with one interface: ``out, state = layer(x, state=None)`` on ``[B, T, d_model]``."""

from __future__ import annotations

from typing import Any

from fastweights.layers.attention import LinearAttentionLayer, SoftmaxAttentionLayer
from fastweights.layers.base import BLOCK_FORMS, SequenceLayer, check_block
from fastweights.layers.deltanet import DeltaNetLayer
from fastweights.layers.feedforward import FeedForward
from fastweights.layers.lstm import LSTMLayer
from fastweights.layers.sr_deltanet import SRDeltaNetLayer
from fastweights.layers.srwm import SRWMLayer
from fastweights.layers.ttt import TTTLinearLayer, TTTMLPLayer

__all__ = [
    "BLOCK_FORMS",
    "DeltaNetLayer",
    "FeedForward",
    "LSTMLayer",
    "LinearAttentionLayer",
    "SRDeltaNetLayer",
    "SRWMLayer",
    "SoftmaxAttentionLayer",
    "TTTLinearLayer",
    "TTTMLPLayer",
    "SequenceLayer",
    "make_sequence_layer",
    "layer_options_for",
    "per_layer_options",
    "SEQUENCE_LAYERS",
    "check_block",
    "check_block_options",
]

# name → (class, defaults of its keyword options, further defaults of its native block form)
_REGISTRY: dict[str, tuple[type[SequenceLayer], dict[str, Any], dict[str, Any]]] = {
    "srwm": (SRWMLayer, {}, {}),
    "deltanet": (DeltaNetLayer, {}, {}),
    "sr_deltanet": (SRDeltaNetLayer, {}, {}),
    "linear_attention": (LinearAttentionLayer, {}, {}),
    "softmax_attention": (SoftmaxAttentionLayer, {}, {}),
    "lstm": (LSTMLayer, {}, {}),
    "ttt_linear": (TTTLinearLayer, {}, {"residual": True}),
    "ttt_mlp": (TTTMLPLayer, {"ttt_base_lr": 0.1}, {"residual": True}),
}
SEQUENCE_LAYERS = tuple(_REGISTRY)


def make_sequence_layer(
    name: str, d_model: int, num_heads: int, *, dropout: float = 0.0, **options: Any
) -> SequenceLayer:
    """Build a sequence layer by name (one of :data:`SEQUENCE_LAYERS`).

    ``options`` are passed to the layer's constructor (e.g. ``rope=True`` for ``"softmax_attention"``,
    ``mini_batch_size=8`` for the TTT layers) over these defaults: ``"ttt_linear"`` / ``"ttt_mlp"``
    are the TTT layers in pre-norm residual form (``residual=True``, unless ``block="pre_ln"``),
    Transformer backbone, mini-batch 16, ``ttt_base_lr`` 1.0 / 0.1 (ttt-lm-jax). ``"sr_deltanet"`` is
    SR-Delta (a DeltaNet whose projection is an SRWM; Irie et al. 2022). Every layer takes
    ``block`` (:data:`BLOCK_FORMS`: ``"native"``, its own form, or ``"pre_ln"``, the same pre-LN
    residual block ``x + Dropout(W_o · core(LN(x)))`` for all; see
    :class:`~fastweights.layers.base.SequenceLayer`).

    Raises:
        ValueError: for an unknown name or ``block``.
        TypeError: for an option the layer does not accept (named by Python).
    """
    if name not in _REGISTRY:
        raise ValueError(f"sequence_layer: expected one of {SEQUENCE_LAYERS}, got {name!r}")
    cls, defaults, native = _REGISTRY[name]
    if check_block(options.get("block", "native")) == "native":
        defaults = {**defaults, **native}
    return cls(d_model, num_heads, dropout=dropout, **{**defaults, **options})


def per_layer_options(options: dict[str, Any]) -> dict[str, Any] | None:
    """``options`` in the per-layer form (keyed by layer names), or None when they are one layer's options.

    Recipes take a layer's options either directly (``{init: modern}``, for the layer the config
    selects) or per layer name (``{srwm: {init: modern}, deltanet: {chunk_size: 32}}``, so that one
    config serves a comparison over several layers).

    Raises:
        ValueError: naming ``layer_options`` when layer names and option names are mixed, or when a
            per-layer entry is not a mapping.
    """
    names = sorted(k for k in options if k in _REGISTRY)
    if not names:
        return None
    if len(names) < len(options):
        others = sorted(k for k in options if k not in _REGISTRY)
        raise ValueError(
            "layer_options: expected options of the selected sequence layer or a mapping from layer names "
            f"to options, got layer names {names} mixed with {others}"
        )
    for name in names:
        if not isinstance(options[name], dict):
            got = options[name]
            raise ValueError(f"layer_options.{name}: expected a mapping of layer options, got {got!r}")
    return options


def layer_options_for(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options of layer ``name`` in ``options`` (either form of :func:`per_layer_options`).

    Raises:
        ValueError: as :func:`per_layer_options`.
    """
    per_layer = per_layer_options(options)
    return dict(options if per_layer is None else per_layer.get(name, {}))


def check_block_options(options: dict[str, Any], key: str = "layer_options") -> None:
    """The ``block`` entries of a ``layer_options`` mapping (either form of :func:`per_layer_options`)
    name forms of :data:`BLOCK_FORMS` (checked without building a layer).

    Raises:
        ValueError: one line naming the key (``layer_options.block`` or ``layer_options.<layer>.block``),
            the allowed forms and the value given; as :func:`per_layer_options` for a malformed mapping.
    """
    per_layer = per_layer_options(options)
    entries = {key: options} if per_layer is None else {f"{key}.{n}": o for n, o in per_layer.items()}
    for where, entry in entries.items():
        if "block" in entry:
            check_block(entry["block"], f"{where}.block")
