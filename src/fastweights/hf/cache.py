"""``FastweightsCache``: the recurrent state of :class:`~fastweights.hf.FastweightsForCausalLM` as a
``transformers`` :class:`~transformers.Cache`, which ``generate()`` carries from step to step.

It wraps the library's :class:`~fastweights.models.lm.LMCache` (per block: the sequence layer's state —
fast weights, TTT inner weights and gradients, attention keys and values, LSTM cells — and the Mamba
pre-conv's state) and the sequence layers that made it, which know how to pick and repeat its batch rows
(:meth:`~fastweights.layers.SequenceLayer.select_state`, ``repeat_state``). A state that absorbed tokens
cannot give them back: :meth:`crop` removes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import Cache

from fastweights.layers import SequenceLayer
from fastweights.models.lm import LMCache

__all__ = ["FastweightsCache"]


class FastweightsCache(Cache):
    """Decode state of a :class:`~fastweights.hf.FastweightsForCausalLM` (``cache`` of its ``forward``).

    ``FastweightsCache()`` is empty; the model's ``forward`` fills it in place (and ``generate(...,
    cache=FastweightsCache())`` returns it filled with ``return_dict_in_generate=True``). An empty cache
    and one that holds a state are both valid inputs: the state continues the sequences exactly.
    """

    def __init__(self) -> None:
        super().__init__(layers=[])
        self.lm_cache: LMCache | None = None
        self._layers: tuple[SequenceLayer, ...] = ()
        self._batch_size = -1

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seen_tokens={self.get_seq_length()}, batch_size={self.batch_size})"

    def __len__(self) -> int:
        return 0 if self.lm_cache is None else len(self.lm_cache.blocks)

    def update_state(self, lm_cache: LMCache, layers: Sequence[SequenceLayer], batch_size: int) -> None:
        """Replace the held state by ``lm_cache`` of ``batch_size`` sequences, made by the sequence layers
        ``layers`` (one per block).

        Raises:
            ValueError: unless there is one layer per block of ``lm_cache``.
        """
        if len(layers) != len(lm_cache.blocks):
            raise ValueError(f"layers: expected one per block ({len(lm_cache.blocks)}), got {len(layers)}")
        self.lm_cache, self._layers, self._batch_size = lm_cache, tuple(layers), int(batch_size)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Number of tokens the state has absorbed (0 when empty)."""
        return 0 if self.lm_cache is None else self.lm_cache.seen_tokens

    def get_max_length(self, layer_idx: int | None = None) -> int:
        """-1: a recurrent state has no maximum length (softmax attention's keys and values grow)."""
        return -1

    @property
    def batch_size(self) -> int:
        """Number of sequences in the held state, -1 when empty."""
        return self._batch_size

    @property
    def is_compileable(self) -> bool:
        """False: the state is not a static buffer."""
        return False

    @property
    def is_croppable(self) -> bool:
        """False: tokens that entered the state cannot be removed from it."""
        return False

    def crop(self, tokens_to_remove: int) -> None:
        """``crop(0)`` does nothing (what ``generate`` calls between steps).

        Raises:
            ValueError: for any other count: a recurrent state cannot forget tokens it absorbed.
        """
        if tokens_to_remove != 0:
            raise ValueError(
                f"tokens_to_remove: a fastweights cache is a recurrent state and cannot remove tokens, got "
                f"{tokens_to_remove} (assisted decoding and other generation modes that rewind need that)"
            )

    def reset(self) -> None:
        """Drop the state (the next forward starts from the slow weights)."""
        self.lm_cache, self._layers, self._batch_size = None, (), -1

    def batch_select_indices(self, indices: Tensor) -> None:
        """Keep the batch rows ``indices`` (int64 ``[N]``, any order, repeats allowed) in this order."""
        if self.lm_cache is None:
            return
        index = indices.long()
        blocks = [
            (
                layer.select_state(state, index),
                None if conv is None else conv.index_select(0, index.to(conv.device)),
            )
            for layer, (state, conv) in zip(self._layers, self.lm_cache.blocks, strict=True)
        ]
        self.lm_cache = LMCache(blocks, self.lm_cache.seen_tokens)
        self._batch_size = len(index)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row ``i`` becomes the state of row ``beam_idx[i]``."""
        self.batch_select_indices(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every batch row ``repeats`` times (b0, b0, …, b1, …)."""
        if self.lm_cache is None:
            return
        blocks = [
            (layer.repeat_state(state, repeats), None if conv is None else conv.repeat_interleave(repeats, 0))
            for layer, (state, conv) in zip(self._layers, self.lm_cache.blocks, strict=True)
        ]
        self.lm_cache = LMCache(blocks, self.lm_cache.seen_tokens)
        self._batch_size *= repeats
