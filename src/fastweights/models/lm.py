"""Causal language model whose sequence layers are TTT / DeltaNet / SRWM / softmax-attention layers.

Architecture (Sun et al., "Learning to (Learn at Test Time)", arXiv 2407.04620, §3 and Appendix; the
reference ``ttt.py`` of ttt-lm-pytorch, ``Block`` / ``TTTModel`` / ``TTTForCausalLM``):

- embedding → ``num_layers`` pre-norm residual blocks → final RMSNorm → ``lm_head`` (tied to the
  embedding by default, as in the reference);
- block: [Mamba backbone only: ``h ← h + CausalConv(RMSNorm(h))``, depthwise, kernel 4, bias]
  → ``h ← h + SequenceLayer(RMSNorm(h))`` → ``h ← h + SwiGLU(RMSNorm(h))``;
- backbones: ``"transformer"`` (the sequence layer where attention would be) and ``"mamba"`` (TTT only: the
  pre-conv above, shared Q/K projection with two depthwise convs, and an output gate inside the TTT
  layer);
- initialisation: every ``nn.Linear`` / ``nn.Embedding`` ~ N(0, ``initializer_range``), biases 0.

The TTT layers are the reference's residual form exactly (``x + TTT(RMSNorm(x))``). The library's
other layers (:mod:`fastweights.layers`) are residual sublayers already and are used as they are:
softmax attention (causal, Llama-style RoPE on absolute positions, KV cache), DeltaNet and linear
attention as ``x + out(Layer(LayerNorm(x)))``; the SRWM keeps its reference placement
``LayerNorm(x) + out(SRWM(x))`` (not pre-norm) and SR-Delta ``x + out(Layer(x))`` (no norm). These are
the layers' native block forms; ``layer_options: {block: pre_ln}`` gives every sequence layer the same
``x + out(Layer(LayerNorm(x)))`` block (the TTT layers then use a LayerNorm instead of the RMSNorm), so
that comparing layers compares only their cores (:class:`fastweights.layers.base.SequenceLayer`).

The config's field names are the library's vocabulary, shared with the classifier recipes
(``d_model``, ``num_layers``, ``num_heads``, ``d_ff``, ``sequence_layer``, ``layer_options``); the
reference's Hugging Face names (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``intermediate_size``) and the former ``mixer`` / ``mixer_options`` are read as deprecated spellings
(:attr:`LMConfig.DEPRECATED_FIELDS`).

State dict keys equal the reference ``TTTForCausalLM`` (``model.layers.{i}.seq_modeling_block.*``,
``model.layers.{i}.mlp.{gate,up,down}_proj``, ``model.layers.{i}.conv.{norm,conv}``, ``ffn_norm``,
``model.norm``, ``model.embed_tokens``, ``lm_head``) except that the TTT sublayer's norm is
``seq_modeling_block.seq_norm`` (reference: ``layers.{i}.seq_norm``); see
:func:`fastweights.models.convert.lm_from_reference`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fastweights.checks import check_int, check_real, is_int, is_real
from fastweights.config import rename_deprecated
from fastweights.io import atomic_write_bytes, atomic_write_json
from fastweights.layers import (
    SEQUENCE_LAYERS,
    SequenceLayer,
    check_block_options,
    layer_options_for,
    make_sequence_layer,
    per_layer_options,
)
from fastweights.layers.base import check_layer_input
from fastweights.layers.conv import causal_depthwise_conv
from fastweights.ops.masking import check_attention_mask, zero_padding
from fastweights.train.modes import eval_mode

__all__ = [
    "LMConfig",
    "LM_PRESETS",
    "LMBackbone",
    "LMCache",
    "CausalLM",
    "SwiGLU",
    "generate",
    "BACKBONES",
]

BACKBONES = ("auto", "transformer", "mamba")
# layer options the config sets from its own fields; not allowed in ``layer_options``
_TYPED_OPTIONS = {
    "mini_batch_size",
    "ttt_base_lr",
    "rope_theta",
    "share_qk",
    "use_gate",
    "conv_kernel",
    "residual",
    "dropout",
    "rope",
}


_TTT_LAYERS = ("ttt_linear", "ttt_mlp")
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
MODEL_TYPE = "fastweights_lm"
HF_MODEL_TYPE = "fastweights"  # the same model as a Hugging Face folder (fastweights.hf, the [hf] extra)


@dataclass
class LMConfig:
    """Hyper-parameters of :class:`CausalLM` (field names shared with the classifier recipes' ``model``
    section; the TTT paper's Hugging Face names map as ``hidden_size`` → ``d_model``,
    ``num_hidden_layers`` → ``num_layers``, ``num_attention_heads`` → ``num_heads``,
    ``intermediate_size`` → ``d_ff``).

    ``sequence_layer`` is a name of ``fastweights.layers.SEQUENCE_LAYERS``; ``backbone = "auto"`` is
    ``"mamba"`` for the TTT layers (the paper's (M) models) and ``"transformer"`` for the others;
    ``ttt_base_lr = None`` means the reference default for the layer (1.0 for TTT-Linear, 0.1 for
    TTT-MLP); ``layer_options`` are extra keyword options of the sequence layer. :meth:`from_dict` (and so
    ``config.json`` of :meth:`CausalLM.from_pretrained`) also reads the deprecated spellings of
    :attr:`DEPRECATED_FIELDS`, with a warning on stderr.
    """

    #: deprecated field name → its new name (read by :meth:`from_dict` and :meth:`preset` for one release)
    DEPRECATED_FIELDS: ClassVar[dict[str, str]] = {
        "hidden_size": "d_model",
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "intermediate_size": "d_ff",
        "mixer": "sequence_layer",
        "mixer_options": "layer_options",
    }

    vocab_size: int = 256
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    d_ff: int = 352
    sequence_layer: str = "ttt_linear"
    backbone: str = "auto"
    mini_batch_size: int = 16
    ttt_base_lr: float | None = None
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    conv_kernel: int = 4
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    #: factor on the token embeddings entering the first block (1 = the TTT reference; Vaswani et al.
    #: 2017 §3.4 use sqrt(d_model)): with N(0, initializer_range) embeddings a layer that reads the raw
    #: stream (the SRWM) starts with near-uniform softmax keys/queries
    embedding_scale: float = 1.0
    dropout: float = 0.0
    #: extra keyword options of the sequence layer (either for ``sequence_layer`` or per layer name);
    #: ``block``: native (default, each layer's own form) or pre_ln (the same ``x + W_o·core(LN(x))``
    #: block for every layer)
    layer_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> LMConfig:
        """Check every field; returns ``self``.

        Raises:
            ValueError: naming the first bad field, the expected value and what was given.
        """
        for name in (
            "vocab_size",
            "d_model",
            "num_layers",
            "num_heads",
            "d_ff",
            "mini_batch_size",
            "conv_kernel",
        ):
            check_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={self.num_heads}, got {self.d_model}"
            )
        if self.sequence_layer not in SEQUENCE_LAYERS:
            raise ValueError(
                f"sequence_layer: expected one of {SEQUENCE_LAYERS}, got {self.sequence_layer!r}"
            )
        head_dim = self.d_model // self.num_heads
        if self.sequence_layer in (*_TTT_LAYERS, "softmax_attention") and head_dim % 2:
            raise ValueError(
                f"d_model / num_heads: expected an even head dim for RoPE (sequence_layer "
                f"{self.sequence_layer!r}), got {self.d_model} / {self.num_heads} = {head_dim}"
            )
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone: expected one of {BACKBONES}, got {self.backbone!r}")
        if self.backbone == "mamba" and self.sequence_layer not in _TTT_LAYERS:
            raise ValueError(
                f"backbone: 'mamba' (shared Q/K convs and gate) exists only for {_TTT_LAYERS}; "
                f"use backbone='transformer' for sequence_layer={self.sequence_layer!r}"
            )
        if not is_real(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: expected a number in [0, 1), got {self.dropout!r}")
        for name in ("rope_theta", "rms_norm_eps", "initializer_range", "embedding_scale"):
            check_real(name, getattr(self, name), low=0, low_open=True)
        if self.ttt_base_lr is not None and (
            not is_real(self.ttt_base_lr) or not 0 < self.ttt_base_lr < math.inf
        ):
            raise ValueError(f"ttt_base_lr: expected None or a finite number > 0, got {self.ttt_base_lr!r}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"tie_word_embeddings: expected a bool, got {self.tie_word_embeddings!r}")
        if not isinstance(self.layer_options, dict):
            raise ValueError(f"layer_options: expected a dict, got {self.layer_options!r}")
        per_layer = per_layer_options(self.layer_options)
        entries = [self.layer_options] if per_layer is None else list(per_layer.values())
        typed = sorted(set().union(*entries) & _TYPED_OPTIONS)
        if typed:
            raise ValueError(
                f"layer_options: {typed} are set by the config itself (fields or backbone); "
                f"expected other options, e.g. {{'chunk_size': 32}}"
            )
        check_block_options(self.layer_options)
        return self

    def sequence_layer_options(self) -> dict[str, Any]:
        """The keyword options of ``sequence_layer`` that ``layer_options`` sets (either form)."""
        return layer_options_for(self.sequence_layer, self.layer_options)

    @property
    def resolved_backbone(self) -> str:
        """``backbone`` with ``"auto"`` resolved (``"mamba"`` for TTT layers, else ``"transformer"``)."""
        if self.backbone != "auto":
            return self.backbone
        return "mamba" if self.sequence_layer in _TTT_LAYERS else "transformer"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with ``model_type`` (the content of ``config.json``)."""
        return {"model_type": MODEL_TYPE, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "config") -> LMConfig:
        """Inverse of :meth:`to_dict`; deprecated field names (:attr:`DEPRECATED_FIELDS`, e.g. a
        ``config.json`` written before the rename) are renamed with a warning on stderr naming
        ``where``.

        Raises:
            ValueError: for a different ``model_type``, unknown keys, or a deprecated field given with
                its new name.
        """
        if not isinstance(d, dict):
            raise ValueError(f"config: expected a dict of LMConfig fields, got {type(d).__name__}")
        d = rename_deprecated(dict(d), cls.DEPRECATED_FIELDS, where)
        model_type = d.pop("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            raise ValueError(f"config: expected model_type {MODEL_TYPE!r}, got {model_type!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"config: unknown keys {unknown}; expected a subset of {sorted(known)}")
        return cls(**d).validate()

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> LMConfig:
        """A named size from :data:`LM_PRESETS` with fields overridden (e.g. ``sequence_layer=``,
        ``vocab_size=``; the deprecated names, e.g. ``mixer=``, are accepted with a warning).

        Raises:
            ValueError: for an unknown preset name, a bad field, or a deprecated field given with its
                new name.
        """
        if name not in LM_PRESETS:
            raise ValueError(f"preset: expected one of {sorted(LM_PRESETS)}, got {name!r}")
        overrides = rename_deprecated(dict(overrides), cls.DEPRECATED_FIELDS, "LMConfig.preset")
        return cls.from_dict({**LM_PRESETS[name], **overrides})


# The TTT paper's sizes (§3, ``TTT_STANDARD_CONFIGS``; vocab 32000 = Llama-2) and CPU-sized ones.
LM_PRESETS: dict[str, dict[str, Any]] = {
    "125m": dict(d_model=768, num_layers=12, num_heads=12, d_ff=2048, vocab_size=32000),
    "350m": dict(d_model=1024, num_layers=24, num_heads=16, d_ff=2736, vocab_size=32000),
    "760m": dict(d_model=1536, num_layers=24, num_heads=16, d_ff=4096, vocab_size=32000),
    "1.3b": dict(d_model=2048, num_layers=24, num_heads=32, d_ff=5504, vocab_size=32000),
    "tiny": dict(d_model=128, num_layers=2, num_heads=4, d_ff=352, vocab_size=256),
    "micro": dict(d_model=32, num_layers=1, num_heads=2, d_ff=64, vocab_size=256),
}


class SwiGLU(nn.Module):
    """``down_proj(SiLU(gate_proj(x)) * up_proj(x))``, all bias-free (Shazeer 2020)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _PreConv(nn.Module):
    """Mamba-backbone sublayer ``h + conv(RMSNorm(h))`` (depthwise causal, kernel ``k``, bias)."""

    def __init__(self, d_model: int, kernel: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(d_model, eps=eps)
        # only the parameters are used (``causal_depthwise_conv``); padding as in the reference module
        self.conv = nn.Conv1d(d_model, d_model, kernel, groups=d_model, padding=kernel - 1)

    def forward(
        self, h: Tensor, state: Tensor | None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        y, state = causal_depthwise_conv(
            self.norm(h), self.conv.weight, self.conv.bias, state, attention_mask
        )
        return h + y, state


class _Block(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        c, h = cfg.d_model, cfg.num_heads
        options: dict[str, Any] = {}
        if cfg.sequence_layer in _TTT_LAYERS:
            mamba = cfg.resolved_backbone == "mamba"
            options = dict(
                mini_batch_size=cfg.mini_batch_size,
                rope_theta=cfg.rope_theta,
                share_qk=mamba,
                use_gate=mamba,
                conv_kernel=cfg.conv_kernel,
            )
            if cfg.ttt_base_lr is not None:
                options["ttt_base_lr"] = cfg.ttt_base_lr
        elif cfg.sequence_layer == "softmax_attention":
            options = dict(rope=True, rope_theta=cfg.rope_theta)
        if cfg.resolved_backbone == "mamba":
            self.conv = _PreConv(c, cfg.conv_kernel, cfg.rms_norm_eps)
        self.seq_modeling_block: SequenceLayer = make_sequence_layer(
            cfg.sequence_layer, c, h, dropout=cfg.dropout, **{**options, **cfg.sequence_layer_options()}
        )
        if cfg.sequence_layer in _TTT_LAYERS and self.seq_modeling_block.block == "native":
            self.seq_modeling_block.seq_norm.eps = cfg.rms_norm_eps  # the reference's RMSNorm eps
        self.ffn_norm = nn.RMSNorm(c, eps=cfg.rms_norm_eps)
        self.mlp = SwiGLU(c, cfg.d_ff)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self, h: Tensor, state: tuple[Any, Tensor | None] | None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, tuple]:
        layer_state, conv_state = (None, None) if state is None else state
        if attention_mask is None:
            if hasattr(self, "conv"):
                h, conv_state = self.conv(h, conv_state)
            h, layer_state = self.seq_modeling_block(h, layer_state)
        else:
            if hasattr(self, "conv"):
                h, conv_state = self.conv(h, conv_state, attention_mask)
            h, layer_state = self.seq_modeling_block(h, layer_state, attention_mask=attention_mask)
        h = h + self.dropout(self.mlp(self.ffn_norm(h)))
        return h, (layer_state, conv_state)


@dataclass
class LMCache:
    """Decode cache of :class:`CausalLM`: per block ``(sequence-layer state, pre-conv state or None)`` and
    the number of tokens consumed. Sequence-layer states are the layers' own states (TTT: weights at the last
    mini-batch boundary + accumulated gradients; attention: K/V; DeltaNet/SRWM: fast weights)."""

    blocks: list[tuple[Any, Tensor | None]]
    #: steps consumed, padding included (a padded batch's per-row progress is in the layers' states)
    seen_tokens: int


class LMBackbone(nn.Module):
    """Embedding → blocks → final RMSNorm (the reference ``TTTModel``); returns hidden states.

    Parameters keep the layers' own initialisation; :class:`CausalLM` applies the reference's
    N(0, ``initializer_range``) initialisation to the whole model.
    """

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.config = cfg.validate()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(_Block(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.rms_norm_eps)

    def forward(
        self,
        input_ids: Tensor | None = None,
        *,
        inputs_embeds: Tensor | None = None,
        cache: LMCache | None = None,
        attention_mask: Tensor | None = None,
    ) -> tuple[Tensor, LMCache]:
        """``input_ids [B, T]`` (int64) or ``inputs_embeds [B, T, C]`` → ``(hidden [B, T, C], cache)``.

        ``attention_mask [B, T]`` (bool, or integer / floating 0/1; 1 = real token, 0 = padding; each
        row's real tokens contiguous) is passed to every block's pre-conv and sequence layer: each
        row's hidden states at its real tokens and its cache are those of its real tokens alone
        (continued from its cache), and the hidden states at padding are zeros.

        Raises:
            ValueError: unless exactly one of ``input_ids`` / ``inputs_embeds`` is given with the
                expected shape, dtype and token range, for a ``cache`` of another model/batch, or for a
                bad ``attention_mask`` (naming it).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("input_ids: expected exactly one of input_ids and inputs_embeds")
        if input_ids is not None:
            _check_ids(input_ids, self.config.vocab_size)
            h = self.embed_tokens(input_ids)
            if self.config.embedding_scale != 1.0:
                h = h * self.config.embedding_scale
        else:
            assert inputs_embeds is not None
            check_layer_input(inputs_embeds, self.config.d_model)
            h = inputs_embeds
            weight = self.embed_tokens.weight
            if h.dtype != weight.dtype and not torch.is_autocast_enabled(h.device.type):
                raise ValueError(f"inputs_embeds: expected dtype {weight.dtype} (the model's), got {h.dtype}")
        if cache is not None and (not isinstance(cache, LMCache) or len(cache.blocks) != len(self.layers)):
            raise ValueError(
                f"cache: expected an LMCache returned by this model ({len(self.layers)} blocks), got "
                f"{type(cache).__name__}"
            )
        mask = None
        if attention_mask is not None:
            mask = check_attention_mask(attention_mask, h.shape[0], h.shape[1], h.device, "input_ids")
        states = [None] * len(self.layers) if cache is None else cache.blocks
        new_states = []
        for block, state in zip(self.layers, states, strict=True):
            h, state = block(h, state, mask)
            new_states.append(state)
        seen = (0 if cache is None else cache.seen_tokens) + h.shape[1]
        hidden = self.norm(h)
        return (hidden if mask is None else zero_padding(hidden, mask)), LMCache(new_states, seen)


def _check_ids(ids: Tensor, vocab_size: int) -> None:
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
        got = f"{list(ids.shape)} {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"input_ids: expected an int64 (or int32) tensor [B, T], got {got}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"input_ids: expected token ids in [0, {vocab_size}), got range "
            f"[{int(ids.min())}, {int(ids.max())}]"
        )


class CausalLM(nn.Module):
    """Language model: :class:`LMBackbone` + ``lm_head`` (the reference ``TTTForCausalLM``).

    ``logits, cache = model(input_ids [B, T], cache=None)``; logits are float32 ``[B, T, vocab]``
    (upcast as in the reference). Passing the returned cache continues the sequences exactly:
    prefill then one token at a time gives the logits of one call over the whole sequence.

    ``model(input_ids, cache, attention_mask=mask)`` takes a padded batch (``mask [B, T]``: 1 = real
    token, 0 = padding, each row's real tokens contiguous; left or right padding): the logits at each
    row's real tokens and its cache are those of the row's real tokens alone, and the logits at
    padding are zeros. The cache continues every row (with or without a mask in later calls), which
    is what :func:`generate` does for a left-padded batch of prompts.
    """

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.config = cfg.validate()
        self.model = LMBackbone(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self, input_ids: Tensor, cache: LMCache | None = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, LMCache]:
        """See the class docstring. Raises ``ValueError`` for bad ``input_ids``, ``cache`` or
        ``attention_mask``."""
        if attention_mask is None:
            h, cache = self.model(input_ids, cache=cache)
            return self.lm_head(h).float(), cache
        h, cache = self.model(input_ids, cache=cache, attention_mask=attention_mask)
        mask = check_attention_mask(attention_mask, h.shape[0], h.shape[1], h.device, "input_ids")
        return zero_padding(self.lm_head(h).float(), mask), cache

    def num_parameters(self) -> int:
        """Number of distinct parameters (a tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, folder: str | Path) -> None:
        """Write ``config.json`` (the config + ``torch_dtype``) and ``model.safetensors`` (a tied
        ``lm_head`` is stored once) into ``folder`` (created if needed). Each file is written atomically,
        the weights first; the pair is not one atomic unit."""
        from safetensors.torch import save

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        sd = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            sd.pop("lm_head.weight")
        dtype = str(self.model.embed_tokens.weight.dtype).removeprefix("torch.")
        atomic_write_bytes(folder / WEIGHTS_FILE, save(sd, metadata={"format": "pt"}))
        atomic_write_json(folder / CONFIG_FILE, {**self.config.to_dict(), "torch_dtype": dtype})

    @classmethod
    def from_pretrained(
        cls,
        folder: str | Path,
        map_location: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> CausalLM:
        """Inverse of :meth:`save_pretrained`; ``dtype`` defaults to the saved ``torch_dtype``. A
        ``config.json`` written before the config's fields were renamed loads (with a warning on stderr).

        Raises:
            FileNotFoundError: if ``folder`` lacks ``config.json`` or ``model.safetensors``.
            ValueError: naming the file, for a damaged ``config.json`` or ``model.safetensors`` (truncated,
                not JSON / safetensors), or a config and weights that do not match (incl. an untied
                ``lm_head`` stored for a config with ``tie_word_embeddings``).
        """
        from safetensors.torch import load

        folder = Path(folder)
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            if not (folder / name).is_file():
                raise FileNotFoundError(
                    f"folder: expected {folder}/{name} (a folder written by CausalLM.save_pretrained "
                    f"holds {CONFIG_FILE} and {WEIGHTS_FILE})"
                )
        try:
            raw = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(
                f"{folder / CONFIG_FILE}: damaged, expected the JSON config written by save_pretrained "
                f"({type(err).__name__}: {err})"
            ) from None
        saved_dtype = raw.pop("torch_dtype", "float32") if isinstance(raw, dict) else "float32"
        cfg = LMConfig.from_dict(raw, f"config: {folder / CONFIG_FILE}")
        if dtype is None:
            dtype = getattr(torch, str(saved_dtype), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(
                    f"{folder / CONFIG_FILE}: torch_dtype: expected a torch dtype name, got {saved_dtype!r}"
                )
        _check_saved_size(cfg, folder / CONFIG_FILE, map_location)
        try:
            sd = load((folder / WEIGHTS_FILE).read_bytes())
        except Exception as err:  # SafetensorError (truncated, garbage) and friends: one line naming the file
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise ValueError(
                f"{folder / WEIGHTS_FILE}: damaged, expected the safetensors file written by save_pretrained "
                f"({first})"
            ) from None
        model = cls(cfg)
        if cfg.tie_word_embeddings:
            if "lm_head.weight" in sd:
                raise ValueError(
                    f"{folder / WEIGHTS_FILE}: holds an lm_head.weight, but {CONFIG_FILE} says "
                    "tie_word_embeddings=true (the head is the embedding)"
                )
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        try:
            model.load_state_dict(sd)
        except RuntimeError as err:
            raise ValueError(f"{folder / WEIGHTS_FILE}: weights do not match {CONFIG_FILE}: {err}") from None
        if cfg.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        return model.to(device=map_location, dtype=dtype)


def _check_saved_size(cfg: LMConfig, config_path: Path, device: str | torch.device) -> None:
    """Refuse a saved config whose model cannot fit into the memory of ``device`` before it is built: the
    parameters are counted on PyTorch's ``meta`` device (shapes only).

    Raises:
        ValueError: naming ``config_path`` and its largest size field, the bytes needed and the memory there
            is (:func:`fastweights.resources.check_fits`).
    """
    from fastweights.resources import check_fits, model_memory

    sizes = [(v, k) for k, v in asdict(cfg).items() if is_int(v)]
    key = f"{config_path}: {max(sizes)[1]}={max(sizes)[0]}" if sizes else str(config_path)
    found = model_memory(CausalLM, cfg)
    if found is None:  # not a size problem: the real build reports it
        return
    if found[0] < 0:  # a size beyond what even shapes can count
        raise ValueError(f"{key}: the model's sizes are too large to build; reduce them")
    what = "the saved model's parameters (fp32)"
    check_fits(key, found[1], what, device, hint="is this config.json damaged?")


@torch.no_grad()
def generate(
    model: CausalLM,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    progress: Callable[[int], Any] | None = None,
    attention_mask: Tensor | None = None,
) -> Tensor:
    """Prefill ``input_ids [B, T]`` (T ≥ 1) with one call, then decode ``max_new_tokens`` tokens one at a
    time with the cache. ``temperature = 0`` is greedy decoding; ``top_k`` keeps the ``k`` most likely
    tokens before sampling; ``progress(1)`` is called after every generated token (e.g. a tqdm bar's
    ``update``). Returns ``[B, T + max_new_tokens]`` int64 (prompt included).

    ``attention_mask [B, T]`` (1 = real token, 0 = padding) prefills a batch of prompts of different
    lengths, left-padded (each row's real tokens contiguous and ending at the last step): every row
    then continues as its own prompt alone would (greedy decoding gives each row's tokens of a
    one-prompt call). The padding stays in the returned tensor; its mask is ``attention_mask``
    followed by ones.

    Raises:
        ValueError: for an empty prompt, ``max_new_tokens < 0``, ``temperature < 0``, ``top_k < 1``, or
            a bad ``attention_mask`` (also: a row whose last prompt step is padding).
    """
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.shape[1] == 0:
        got = list(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids: expected a non-empty prompt tensor [B, T >= 1], got {got}")
    if attention_mask is not None:
        b, t = input_ids.shape
        mask = check_attention_mask(attention_mask, b, t, input_ids.device, "input_ids")
        if not bool(mask[:, -1].all()):
            row = int((~mask[:, -1]).nonzero()[0, 0])
            raise ValueError(
                "attention_mask: expected left padding for generate (every row's last prompt step a real "
                f"token), got row {row} ending in padding"
            )
    check_int("max_new_tokens", max_new_tokens, low=0)
    check_real("temperature", temperature, low=0)
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k: expected None or an int >= 1, got {top_k!r}")
    out = [input_ids.long()]
    with eval_mode(model):
        logits, cache = model(input_ids, attention_mask=attention_mask)
        for i in range(max_new_tokens):
            last = logits[:, -1]
            scaled = last / temperature if temperature > 0 else last
            if temperature == 0 or bool(scaled.isnan().any() or scaled.isposinf().any()):
                token = last.argmax(dim=-1)  # greedy (also the limit of a temperature so small it overflows)
            else:
                if top_k is not None and top_k < scaled.shape[-1]:
                    kth = scaled.topk(top_k, dim=-1).values[:, -1:]
                    scaled = scaled.masked_fill(scaled < kth, -math.inf)
                token = torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=generator)[:, 0]
            out.append(token[:, None])
            if progress is not None:
                progress(1)
            if i + 1 < max_new_tokens:
                logits, cache = model(token[:, None], cache)
    return torch.cat(out, dim=1)
