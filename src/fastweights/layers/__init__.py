"""Sequence layers with one interface: ``out, state = layer(x, state=None)`` on ``[B, T, d_model]``."""

from __future__ import annotations

from fastweights.layers.attention import LinearAttentionLayer, SoftmaxAttentionLayer
from fastweights.layers.base import SequenceLayer
from fastweights.layers.deltanet import DeltaNetLayer
from fastweights.layers.feedforward import FeedForward
from fastweights.layers.lstm import LSTMLayer
from fastweights.layers.sr_deltanet import SRDeltaNetLayer
from fastweights.layers.srwm import SRWMLayer
from fastweights.layers.ttt import TTTLinearLayer, TTTMLPLayer

__all__ = [
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
    "SEQUENCE_LAYERS",
]

SEQUENCE_LAYERS = (
    "srwm",
    "deltanet",
    "sr_deltanet",
    "linear_attention",
    "softmax_attention",
    "lstm",
    "ttt_linear",
    "ttt_mlp",
)


def make_sequence_layer(name: str, d_model: int, num_heads: int, *, dropout: float = 0.0) -> SequenceLayer:
    """Build a sequence layer by name (one of :data:`SEQUENCE_LAYERS`).

    ``"sr_deltanet"`` is SR-Delta (a DeltaNet whose projection is an SRWM; Irie et al. 2022).
    ``"ttt_linear"`` / ``"ttt_mlp"`` are the TTT layers in pre-norm residual form
    (``residual=True``), Transformer backbone, mini-batch 16, ``ttt_base_lr`` 1.0 / 0.1 (ttt-lm-jax).

    Raises:
        ValueError: for an unknown name.
    """
    if name == "srwm":
        return SRWMLayer(d_model, num_heads, dropout=dropout)
    if name == "deltanet":
        return DeltaNetLayer(d_model, num_heads, dropout=dropout)
    if name == "sr_deltanet":
        return SRDeltaNetLayer(d_model, num_heads, dropout=dropout)
    if name == "linear_attention":
        return LinearAttentionLayer(d_model, num_heads, dropout=dropout)
    if name == "softmax_attention":
        return SoftmaxAttentionLayer(d_model, num_heads, dropout=dropout)
    if name == "lstm":
        return LSTMLayer(d_model, num_heads, dropout=dropout)
    if name == "ttt_linear":
        return TTTLinearLayer(d_model, num_heads, residual=True, dropout=dropout)
    if name == "ttt_mlp":
        return TTTMLPLayer(d_model, num_heads, residual=True, dropout=dropout, ttt_base_lr=0.1)
    raise ValueError(f"sequence_layer: expected one of {SEQUENCE_LAYERS}, got {name!r}")
