"""``FastweightsForCausalLM``: :class:`fastweights.models.lm.CausalLM` as a ``transformers``
``PreTrainedModel`` with ``GenerationMixin`` (``generate()``, ``save_pretrained``, ``from_pretrained``,
``AutoModelForCausalLM``).

The model is the library's language model, not a copy of it: its modules are ``CausalLM``'s
(``model`` = :class:`~fastweights.models.lm.LMBackbone`, ``lm_head``) and every forward is
``CausalLM.forward``, so logits, losses and generated tokens equal the library's for every sequence layer
(TTT-Linear / TTT-MLP as in Sun et al., "Learning to (Learn at Test Time): RNNs with Expressive Hidden
States", arXiv 2407.04620; DeltaNet, SRWM, SR-Delta, linear and softmax attention, LSTM). Weight names
are ``CausalLM``'s (``model.layers.{i}.seq_modeling_block.*``, ``lm_head.weight``), so a
``CausalLM.save_pretrained`` folder and a Hugging Face folder hold the same ``model.safetensors``
tensors; only ``config.json`` differs (:mod:`fastweights.hf.convert`).

The recurrent state (fast weights, TTT inner weights and gradients, attention keys and values, LSTM cells,
Mamba pre-conv states) travels in a :class:`~fastweights.hf.cache.FastweightsCache` between the steps of
``generate()``. Greedy decoding, sampling and beam search work (beams are reordered by
:meth:`~fastweights.layers.SequenceLayer.select_state`); generation modes that rewind the state
(assisted decoding, prompt lookup) do not, since tokens cannot be removed from a recurrent state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import CausalLMOutputWithPast

from fastweights.hf.cache import FastweightsCache
from fastweights.hf.configuration import FastweightsConfig
from fastweights.models.lm import CausalLM, LMCache

__all__ = ["FastweightsPreTrainedModel", "FastweightsForCausalLM", "IGNORE_INDEX"]

IGNORE_INDEX = -100  # label of positions without a loss (Hugging Face's convention)


class FastweightsPreTrainedModel(PreTrainedModel):
    """Base of the fastweights ``transformers`` models: config class, weight init, safetensors-only
    loading."""

    config: FastweightsConfig
    config_class = FastweightsConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False

    def _init_weights(self, module: nn.Module) -> None:
        """``CausalLM``'s initialisation: every ``nn.Linear`` / ``nn.Embedding`` weight ~
        N(0, ``initializer_range``), their biases 0; every other parameter keeps its layer's own
        initialisation (SRWM and TTT weights, norms, convolutions)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)

    @classmethod
    def from_pretrained(  # type: ignore[override]
        cls, pretrained_model_name_or_path: str | Path, *model_args: Any, **kwargs: Any
    ) -> Any:
        """``transformers``' ``from_pretrained``, reading ``model.safetensors`` only (never a pickle) and
        refusing weights that do not match ``config.json``.

        Raises:
            ValueError: for ``use_safetensors=False``, a bad ``config.json`` field (naming it), or weights
                missing from, left over in or of another shape than the model of ``config.json``.
            OSError: from ``transformers`` when the folder holds no ``model.safetensors``.
        """
        if kwargs.get("use_safetensors") is False:
            raise ValueError(
                "use_safetensors: fastweights models load model.safetensors only (never a pickle)"
            )
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path,
            *model_args,
            **{**kwargs, "use_safetensors": True, "output_loading_info": True},
        )
        bad = {k: sorted(v) for k, v in info.items() if k.endswith("_keys") and v and k != "error_msgs"}
        if bad or info.get("error_msgs"):
            raise ValueError(
                f"{pretrained_model_name_or_path}: model.safetensors does not match config.json: "
                f"{bad or info['error_msgs']}"
            )
        return (model, info) if want_info else model


class FastweightsForCausalLM(FastweightsPreTrainedModel, GenerationMixin):
    """:class:`~fastweights.models.lm.CausalLM` (any ``sequence_layer``) as a ``transformers`` causal LM.

    ``FastweightsForCausalLM(FastweightsConfig(...))`` builds a new model (``CausalLM``'s initialisation);
    :meth:`from_causal_lm` / :meth:`to_causal_lm` convert an existing one (weights copied);
    ``AutoModelForCausalLM.from_pretrained(folder)`` loads a saved one after ``import fastweights.hf``.
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: FastweightsConfig) -> None:
        super().__init__(config)
        lm = CausalLM(config.to_lm_config())
        self.model = lm.model
        self.lm_head = lm.lm_head
        # the CausalLM whose forward runs the model: holds the same two modules, not registered twice
        object.__setattr__(self, "_causal_lm_view", lm)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """False: ``generate()`` must not make a key/value ``DynamicCache``; the first forward makes the
        :class:`FastweightsCache`."""
        return False

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Module) -> None:
        self.lm_head = new_embeddings

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> Any:
        """Not supported: the vocabulary size is part of the ``LMConfig`` the layers were built from.

        Raises:
            NotImplementedError: always; build a model with another ``vocab_size`` instead.
        """
        raise NotImplementedError(
            "resize_token_embeddings: not supported by fastweights models; build a FastweightsConfig with "
            "the vocab_size you need"
        )

    def _causal_lm(self) -> CausalLM:
        """The ``CausalLM`` made of this model's current ``model`` and ``lm_head`` modules."""
        lm: CausalLM = self.__dict__["_causal_lm_view"]
        if lm.model is not self.model:
            lm.model = self.model
        if lm.lm_head is not self.lm_head:
            lm.lm_head = self.lm_head
        return lm

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: FastweightsCache | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: FastweightsCache | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        """Next-token logits of ``input_ids`` (int64 ``[B, T]``), continuing ``cache``.

        Args:
            input_ids: token ids in ``[0, vocab_size)``.
            attention_mask: ``[B, T]`` or, with a cache, ``[B, past + T]`` of 0/1 (``past`` = tokens in
                the cache); ``None`` or all ones runs the batch as it is. Padded batches (any 0) are
                refused: ``CausalLM.forward`` has no ``attention_mask`` parameter.
            cache: a :class:`FastweightsCache` (``past_key_values`` is the same argument under its
                former ``transformers`` name); it is read and updated in place. ``None`` starts from the
                slow weights.
            labels: int64 ``[B, T]``, usually ``input_ids``; ``IGNORE_INDEX`` (-100) marks positions
                without a loss. The loss is Hugging Face's shifted next-token cross-entropy: the logits
                at position t are scored against ``labels[:, t + 1]``, averaged over every scored
                position (float32).
            use_cache: return the cache (default ``config.use_cache``, and False in training mode
                unless a cache was passed).
            return_dict: a ``CausalLMOutputWithPast`` (default ``config.return_dict``) or its tuple.
            output_attentions, output_hidden_states: not supported (``None`` / ``False`` only).

        Returns:
            ``CausalLMOutputWithPast(loss, logits float32 [B, T, vocab_size], cache)``; ``loss`` is
            ``None`` without labels, ``cache`` ``None`` when not asked for.

        Raises:
            ValueError: for bad ``input_ids``, ``labels`` or ``attention_mask``, a padded
                ``attention_mask``, both ``cache`` and ``past_key_values``, a cache of another type,
                or ``output_attentions`` / ``output_hidden_states``.
        """
        if past_key_values is not None:
            if cache is not None and cache is not past_key_values:
                raise ValueError("cache: expected cache or past_key_values (the same argument), got both")
            cache = past_key_values
        if cache is not None and not isinstance(cache, FastweightsCache):
            raise ValueError(f"cache: expected a FastweightsCache (or None), got {type(cache).__name__}")
        for name, flag in (
            ("output_attentions", output_attentions),
            ("output_hidden_states", output_hidden_states),
        ):
            if flag:
                raise ValueError(
                    f"{name}: not supported by fastweights models (their layers keep no such outputs)"
                )
        if not isinstance(input_ids, Tensor):
            raise ValueError(f"input_ids: expected an int64 tensor [B, T], got {type(input_ids).__name__}")
        if use_cache is None:
            use_cache = cache is not None or (self.config.use_cache and not self.training)
        return_dict = self.config.return_dict if return_dict is None else return_dict

        past = 0 if cache is None else cache.get_seq_length()
        token_mask = _token_mask(attention_mask, input_ids, past)
        lm_cache = None if cache is None else cache.lm_cache
        logits, new_lm_cache = self._lm_forward(input_ids, lm_cache, token_mask)
        if cache is None and use_cache:
            cache = FastweightsCache()
        if cache is not None:
            layers = [block.seq_modeling_block for block in self.model.layers]
            cache.update_state(new_lm_cache, layers, batch_size=input_ids.shape[0])
        loss = None if labels is None else shifted_cross_entropy(logits, labels)
        out = CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache if use_cache else None)
        return out if return_dict else out.to_tuple()

    def _lm_forward(
        self, input_ids: Tensor, lm_cache: LMCache | None, token_mask: Tensor | None
    ) -> tuple[Tensor, LMCache]:
        """One ``CausalLM.forward`` call. ``token_mask`` is ``None`` when the current tokens hold no
        padding, else the 0/1 mask ``[B, T]`` of ``input_ids`` (left or right padding; see
        :meth:`CausalLM.forward`: logits are zero at padding and the states skip it)."""
        return self._causal_lm()(input_ids, lm_cache, attention_mask=token_mask)

    @classmethod
    def from_causal_lm(cls, model: CausalLM, **config_kwargs: Any) -> FastweightsForCausalLM:
        """A ``transformers`` model with the config and a copy of the weights of ``model`` (same device
        and dtype); ``config_kwargs`` are Hugging Face config fields (e.g. ``use_cache=False``).

        Raises:
            ValueError: if ``model`` is not a :class:`CausalLM`, or for a ``config_kwargs`` key that is an
                ``LMConfig`` field.
        """
        if not isinstance(model, CausalLM):
            raise ValueError(f"model: expected a fastweights CausalLM, got {type(model).__name__}")
        weight = model.model.embed_tokens.weight
        config = FastweightsConfig.from_lm_config(model.config, **config_kwargs)
        config.dtype = weight.dtype
        hf = cls(config).to(device=weight.device, dtype=weight.dtype)
        hf.load_state_dict(model.state_dict())  # strict: same names
        return hf.train(model.training)

    def to_causal_lm(self) -> CausalLM:
        """A :class:`CausalLM` with this model's config and a copy of its weights (same device and dtype)."""
        weight = self.model.embed_tokens.weight
        lm = CausalLM(self.config.to_lm_config()).to(device=weight.device, dtype=weight.dtype)
        lm.load_state_dict(self.state_dict())  # strict: same names
        return lm.train(self.training)


def _token_mask(attention_mask: Tensor | None, input_ids: Tensor, past: int) -> Tensor | None:
    """``None`` when ``attention_mask`` pads none of the current tokens (``None``, or ones in its last
    ``T`` columns: earlier padding is already in the layers' states), else those columns, ``[B, T]``.

    Raises:
        ValueError: unless ``attention_mask`` is ``[B, T]`` or ``[B, past + T]`` of 0/1 values.
    """
    if attention_mask is None:
        return None
    b, t = input_ids.shape[0], input_ids.shape[-1]
    widths = sorted({t, past + t})
    if (
        not isinstance(attention_mask, Tensor)
        or attention_mask.dim() != 2
        or attention_mask.shape[0] != b
        or attention_mask.shape[1] not in widths
    ):
        got = (
            list(attention_mask.shape)
            if isinstance(attention_mask, Tensor)
            else type(attention_mask).__name__
        )
        raise ValueError(
            f"attention_mask: expected a [B, T] or [B, past + T] mask, here "
            f"[{b}, {' or '.join(map(str, widths))}], got {got}"
        )
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask: expected 0/1 values (1 = a real token, 0 = padding)")
    current = attention_mask[:, -t:]
    if bool((current == 1).all()):
        return None
    return current


def shifted_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Hugging Face's causal-LM loss: mean cross-entropy of ``logits [B, T, V]`` at positions ``0..T-2``
    against ``labels[:, 1:]`` (int ``[B, T]``), leaving out labels equal to :data:`IGNORE_INDEX`. Returns a
    float32 scalar (NaN when no position is scored).

    Raises:
        ValueError: unless ``labels`` is an integer tensor of the shape ``[B, T]`` of ``logits`` with
            values in ``[0, V)`` or ``IGNORE_INDEX``.
    """
    b, t, v = logits.shape
    if not isinstance(labels, Tensor) or labels.shape != (b, t) or labels.is_floating_point():
        got = f"{list(labels.shape)} {labels.dtype}" if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"labels: expected an integer tensor [{b}, {t}] (the input_ids' shape), got {got}")
    labels = labels.to(device=logits.device, dtype=torch.long)
    scored = labels[labels != IGNORE_INDEX]
    if scored.numel() and (int(scored.min()) < 0 or int(scored.max()) >= v):
        raise ValueError(
            f"labels: expected token ids in [0, {v}) or {IGNORE_INDEX}, got range "
            f"[{int(scored.min())}, {int(scored.max())}]"
        )
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, v).float(), labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
    )
