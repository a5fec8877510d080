"""LSTM baseline with the sequence-layer interface (the LSTM baseline of Irie et al. 2022, §4.1).

Sources: Hochreiter & Schmidhuber, "Long Short-Term Memory", Neural Computation 1997; the ACL/SRWM
repositories' ``ConvLSTMModel`` baseline. Unlike that model (one ``nn.LSTM`` fed the features directly,
stateless), this is a drop-in sublayer of ``InContextClassifier``'s stack: pre-LN residual, stateful.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fastweights.checks import check_int
from fastweights.layers.base import SequenceLayer
from fastweights.ops.masking import left_justify, mask_lengths, restore_padding

__all__ = ["LSTMLayer"]

LSTMState = tuple[Tensor, Tensor]


class LSTMLayer(SequenceLayer):
    """LSTM sublayer, pre-LN residual: ``out = x + Dropout(LSTM(LN(x)))`` with ``nn.LSTM(D, D)``.

    Block forms (``block``; see :class:`~fastweights.layers.base.SequenceLayer`), with the core
    ``core(h) = LSTM(h)`` (the hidden states ``h_t``, Hochreiter & Schmidhuber 1997) and ``LN =
    layer_norm``:

    - ``"native"`` (default): ``out = x + Dropout(core(LN(x)))``: pre-LN residual without an output
      projection (this library's form; the reference's LSTM baseline is a single ``nn.LSTM`` over the
      features, with no residual).
    - ``"pre_ln"``: ``out = x + Dropout(W_o · core(LN(x)))``: adds ``W_o = out_linear`` (bias-free
      ``D × D``; state dict key ``out_linear.weight``).

    The state is ``(h, c)``, each ``[1, B, D]`` (``nn.LSTM``'s layout: batch is dimension 1; float32
    under half precision); ``None`` starts from zeros. ``nn.LSTM`` itself runs outside autocast in
    its parameters' dtype. Gradients flow through a carried state, so two
    calls with the state carried equal one call (values and gradients).

    Args:
        d_model: model width ``D`` (input and hidden size).
        num_heads: ignored (but, as for every layer, a positive int); accepted so every sequence layer
            has the signature ``(d_model, num_heads, *, dropout)``.
        dropout: dropout on the LSTM output (projected, with ``block="pre_ln"``).
        block: ``"native"`` or ``"pre_ln"`` (above).

    Raises:
        ValueError: unless ``d_model`` and ``num_heads`` are positive ints (naming the argument), or
            for an unknown ``block``.
    """

    state_batch_dim = 1  # nn.LSTM keeps (h, c) as [num_layers=1, B, D]

    def __init__(
        self, d_model: int, num_heads: int = 1, *, dropout: float = 0.0, block: str = "native"
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model)
        check_int("num_heads", num_heads)
        self.set_block(block)
        self.layer_norm = nn.LayerNorm(d_model)
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        if self.block == "pre_ln":
            self.out_linear = nn.Linear(d_model, d_model, bias=False)

    def _check_state(self, x: Tensor, state: object) -> None:
        if state is None:
            return
        expected = (1, x.shape[0], self.d_model)
        ok = isinstance(state, (tuple, list)) and len(state) == 2
        ok = ok and all(
            isinstance(s, Tensor) and s.is_floating_point() and s.shape == expected for s in state
        )
        if not ok:
            parts = state if isinstance(state, (tuple, list)) else (state,)
            got = ", ".join(
                f"shape {list(s.shape)}" if isinstance(s, Tensor) else type(s).__name__ for s in parts
            )
            raise ValueError(f"state: expected a tuple (h, c), each [1, B, D] = {list(expected)}, got {got}")

    def native_output(self, x: Tensor, c: Tensor) -> Tensor:
        """``x + Dropout(c)``: no output projection (``c`` cast to ``x``'s dtype)."""
        return x + self.dropout(c.to(x.dtype))

    def forward_unpacked(
        self, x: Tensor, state: LSTMState | None = None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, LSTMState]:
        """``x [B, T, D]`` → ``(out [B, T, D], (h, c) each [1, B, D])``; ``T = 0`` returns ``x`` itself
        (``nn.LSTM`` rejects empty sequences) and the state (float32 for half inputs) unchanged."""
        if x.shape[1] == 0:
            return x, self.core(self.block_input(x), state)[1]
        if attention_mask is None:
            return super().forward_unpacked(x, state)
        return super().forward_unpacked(x, state, attention_mask)

    def core(
        self, h: Tensor, state: LSTMState | None = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, LSTMState]:
        """``LSTM(h)``: ``h [B, T, D]`` → ``(y, (h_T, c_T))``: the hidden states ``y [B, T, D]`` (in the
        parameters' dtype) and the final state, each ``[1, B, D]``.

        ``attention_mask [B, T]``: each row's real steps only (``h`` and ``c`` are held at padding):
        the rows' real steps are moved to the front and run as a packed batch of their lengths
        (``nn.utils.rnn.pack_padded_sequence``); ``y`` is zero at padding."""
        self._check_state(h, state)
        mask = self.check_mask(h, attention_mask)
        dtype = torch.promote_types(h.dtype, torch.float32)
        if h.shape[1] == 0:  # nn.LSTM rejects empty sequences
            if state is None:
                zeros = h.new_zeros(1, h.shape[0], self.d_model, dtype=dtype)
                return h, (zeros, zeros)
            return h, (state[0].to(dtype), state[1].to(dtype))
        # nn.LSTM runs outside autocast in its parameters' dtype (CPU has no float16 LSTM kernel)
        run_dtype = self.lstm.weight_ih_l0.dtype
        hc = None if state is None else (state[0].to(run_dtype), state[1].to(run_dtype))
        with torch.autocast(h.device.type, enabled=False):
            if mask is None:
                y, (h_t, c_t) = self.lstm(h.to(run_dtype), hc)
            else:
                y, (h_t, c_t) = self._packed(h.to(run_dtype), hc, mask)
        return y, (h_t.to(dtype), c_t.to(dtype))

    def _packed(self, h: Tensor, hc: LSTMState | None, mask: Tensor) -> tuple[Tensor, LSTMState]:
        """The LSTM over each row's real steps of ``h [B, T, D]`` (``mask [B, T]``, validated):
        ``(y [B, T, D]`` zero at padding, ``(h_T, c_T))`` after each row's last real step (the initial
        state for a row that is all padding)."""
        b, t, _ = h.shape
        lengths = mask_lengths(mask)
        if hc is None:
            zeros = h.new_zeros(1, b, self.d_model)
            hc = (zeros, zeros)
        # a row of length 0 runs one padded step (pack_padded_sequence needs >= 1); its state is restored
        packed = nn.utils.rnn.pack_padded_sequence(
            left_justify(h, mask, length=t),
            lengths.clamp_min(1).cpu(),
            batch_first=True,
            enforce_sorted=False,
        )
        y, (h_t, c_t) = self.lstm(packed, hc)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=t)
        empty = (lengths == 0).view(1, b, 1)
        h_t, c_t = torch.where(empty, hc[0], h_t), torch.where(empty, hc[1], c_t)
        return restore_padding(y, mask), (h_t, c_t)

    def repeat_state(self, state: Any, repeats: int) -> Any:
        """Repeat every batch row of ``(h, c)`` ``repeats`` times along ``nn.LSTM``'s batch dim (1)."""
        h, c = state
        return torch.repeat_interleave(h, repeats, dim=1), torch.repeat_interleave(c, repeats, dim=1)

    def select_state(self, state: Any, index: Tensor) -> Any:
        """The batch rows ``index`` of ``(h, c)``, along ``nn.LSTM``'s batch dim (1)."""
        h, c = state
        return h.index_select(1, index.to(h.device)), c.index_select(1, index.to(c.device))
