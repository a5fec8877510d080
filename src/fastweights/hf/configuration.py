"""``FastweightsConfig``: the Hugging Face configuration of :class:`~fastweights.hf.FastweightsForCausalLM`.

It holds the fields of :class:`fastweights.models.lm.LMConfig` under the same names and defaults (plus
Hugging Face's own, e.g. ``use_cache``, ``dtype``) and checks them with ``LMConfig``'s rules when it is
built, so a bad value is a ``ValueError`` naming the field. Hugging Face's standard names read and write
the library's (``hidden_size`` → ``d_model``, ``num_hidden_layers`` → ``num_layers``,
``num_attention_heads`` → ``num_heads``, ``intermediate_size`` → ``d_ff``). ``config.json`` holds every
``LMConfig`` field (Hugging Face leaves out only the values of its base config's defaults).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, field, fields
from typing import Any, ClassVar

from transformers import PreTrainedConfig

from fastweights.models.lm import HF_MODEL_TYPE, LMConfig

__all__ = ["FastweightsConfig", "MODEL_TYPE", "LM_FIELDS"]

MODEL_TYPE = HF_MODEL_TYPE  # `model_type` in config.json: "fastweights" (a CausalLM folder: "fastweights_lm")
LM_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LMConfig))


class FastweightsConfig(PreTrainedConfig):
    """The :class:`~fastweights.models.lm.LMConfig` fields as a ``transformers`` config.

    ``FastweightsConfig(sequence_layer="deltanet", d_model=64, num_heads=4)`` or
    ``FastweightsConfig.from_lm_config(lm_config)``; :meth:`to_lm_config` gives the ``LMConfig`` back. Every
    field keeps ``LMConfig``'s meaning and default (see its docstring): ``sequence_layer`` is one of
    :data:`fastweights.layers.SEQUENCE_LAYERS`, ``backbone`` ``auto`` / ``transformer`` / ``mamba`` (TTT
    only), ``layer_options`` extra options of the sequence layer.

    Raises:
        ValueError: when built with a bad field (the message of :meth:`LMConfig.validate`, naming it).
    """

    model_type = MODEL_TYPE
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "d_model",
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "intermediate_size": "d_ff",
    }

    # the fields of LMConfig, same names and defaults (tests/hf/test_configuration.py keeps them equal)
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
    embedding_scale: float = 1.0
    dropout: float = 0.0
    layer_options: dict[str, Any] = field(default_factory=dict)
    # Hugging Face's: whether `forward` returns the recurrent state (`generate` carries it between steps)
    use_cache: bool = True

    def __post_init__(self, **kwargs: Any) -> None:
        super().__post_init__(**kwargs)
        self.to_lm_config()  # every field checked once, with LMConfig's messages

    def to_lm_config(self) -> LMConfig:
        """The :class:`LMConfig` of these fields (a copy: changing it leaves this config unchanged).

        Raises:
            ValueError: for a bad field, naming it.
        """
        return LMConfig(**{name: copy.deepcopy(getattr(self, name)) for name in LM_FIELDS})

    @classmethod
    def from_lm_config(cls, cfg: LMConfig, **kwargs: Any) -> FastweightsConfig:
        """A config with the fields of ``cfg`` (validated) and Hugging Face's ``kwargs`` (e.g.
        ``use_cache=False``, ``dtype="float32"``).

        Raises:
            ValueError: for a bad field of ``cfg``, or a ``kwargs`` key that is an ``LMConfig`` field.
        """
        if not isinstance(cfg, LMConfig):
            raise ValueError(f"cfg: expected an LMConfig, got {type(cfg).__name__}")
        clash = sorted(set(kwargs) & set(LM_FIELDS))
        if clash:
            raise ValueError(f"kwargs: {clash} are LMConfig fields; set them in cfg instead")
        return cls(**copy.deepcopy(asdict(cfg.validate())), **kwargs)
