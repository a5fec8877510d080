"""Sequence layers with one interface: ``out, state = layer(x, state=None)`` on ``[B, T, d_model]``."""

from __future__ import annotations

from fastweights.layers.attention import LinearAttentionLayer, SoftmaxAttentionLayer
from fastweights.layers.base import SequenceLayer
from fastweights.layers.deltanet import DeltaNetLayer
from fastweights.layers.feedforward import FeedForward
from fastweights.layers.lstm import LSTMLayer
from fastweights.layers.srwm import SRWMLayer

__all__ = [
    "DeltaNetLayer",
    "FeedForward",
    "LSTMLayer",
    "LinearAttentionLayer",
    "SRWMLayer",
    "SoftmaxAttentionLayer",
    "SequenceLayer",
    "make_sequence_layer",
    "SEQUENCE_LAYERS",
]

SEQUENCE_LAYERS = ("srwm", "deltanet", "linear_attention", "softmax_attention", "lstm")


def make_sequence_layer(name: str, d_model: int, num_heads: int, *, dropout: float = 0.0) -> SequenceLayer:
    """Build a sequence layer by name (one of :data:`SEQUENCE_LAYERS`).

    Raises:
        ValueError: for an unknown name.
    """
    if name == "srwm":
        return SRWMLayer(d_model, num_heads, dropout=dropout)
    if name == "deltanet":
        return DeltaNetLayer(d_model, num_heads, dropout=dropout)
    if name == "linear_attention":
        return LinearAttentionLayer(d_model, num_heads, dropout=dropout)
    if name == "softmax_attention":
        return SoftmaxAttentionLayer(d_model, num_heads, dropout=dropout)
    if name == "lstm":
        return LSTMLayer(d_model, num_heads, dropout=dropout)
    raise ValueError(f"sequence_layer: expected one of {SEQUENCE_LAYERS}, got {name!r}")
