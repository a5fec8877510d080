"""Import state dicts written by the reference implementations (IDSIA modern-srwm / automated-cl;
test-time-training/ttt-lm-pytorch).

Key layout read from the reference modules (``layer.py``, ``model_few_shot.py``): ``conv_layers.{i}.0``
(conv) / ``.1`` (norm); ``input_proj``; ``layers.{2l}`` = SRWM sublayer with ``W_y, W_q, W_k [1,H,E,E]``,
``w_b [1,H,E,4]``, ``layer_norm``, ``out_linear``; ``layers.{2l+1}`` = FF sublayer with
``ff_layers.0`` / ``ff_layers.3`` and ``layer_norm``; ``out_layer``.
"""

from __future__ import annotations

import re

from torch import Tensor

from fastweights.layers.srwm import pack_srwm_blocks

__all__ = ["srwm_layer_from_reference", "in_context_from_reference", "lm_from_reference"]


def srwm_layer_from_reference(sd: dict[str, Tensor], prefix: str = "") -> dict[str, Tensor]:
    """Map a reference ``SRWMlayer`` state dict (keys under ``prefix``) to :class:`SRWMLayer` keys."""
    blocks = [sd[prefix + k][0] for k in ("W_y", "W_q", "W_k", "w_b")]
    return {
        "weight": pack_srwm_blocks(*blocks),
        "out_linear.weight": sd[prefix + "out_linear.weight"],
        "layer_norm.weight": sd[prefix + "layer_norm.weight"],
        "layer_norm.bias": sd[prefix + "layer_norm.bias"],
    }


def in_context_from_reference(sd: dict[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Map a reference ``CompatStatefulConvSRWMModel`` / ``ConvSRWMModel`` state dict to the keys of
    :class:`~fastweights.models.in_context.InContextClassifier` with a :class:`Conv4` backbone.

    Raises:
        KeyError: if an expected reference key is missing.
    """
    out: dict[str, Tensor] = {}
    for i in range(4):
        for part, ours in (("0", "0"), ("1", "1")):
            for p in ("weight", "bias"):
                out[f"backbone.blocks.{i}.{ours}.{p}"] = sd[f"conv_layers.{i}.{part}.{p}"]
    for p in ("weight", "bias"):
        out[f"input_proj.{p}"] = sd[f"input_proj.{p}"]
        out[f"out_layer.{p}"] = sd[f"out_layer.{p}"]
    for layer in range(num_layers):
        srwm_keys = srwm_layer_from_reference(sd, f"layers.{2 * layer}.")
        out.update({f"seq_layers.{layer}.{k}": v for k, v in srwm_keys.items()})
        ff = f"layers.{2 * layer + 1}."
        for ref, ours in (("ff_layers.0", "net.0"), ("ff_layers.3", "net.3"), ("layer_norm", "norm")):
            for p in ("weight", "bias"):
                out[f"ff_layers.{layer}.{ours}.{p}"] = sd[f"{ff}{ref}.{p}"]
    return out


def lm_from_reference(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Map a ttt-lm-pytorch ``TTTModel`` / ``TTTForCausalLM`` state dict to
    :class:`~fastweights.models.lm.LMBackbone` / :class:`~fastweights.models.lm.CausalLM` keys.

    The only difference: the block's ``layers.{i}.seq_norm`` (the RMSNorm before the TTT layer) lives
    inside our residual TTT sublayer as ``layers.{i}.seq_modeling_block.seq_norm``. Every other key
    (and a ``model.`` prefix) is kept.
    """
    pattern = re.compile(r"^((?:model\.)?layers\.\d+\.)seq_norm\.")
    return {pattern.sub(r"\1seq_modeling_block.seq_norm.", key): value for key, value in sd.items()}
