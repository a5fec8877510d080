"""The one interface every sequence layer follows: ``out, state = layer(x, state=None)``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fastweights.checks import check_choice, check_finite, check_int
from fastweights.ops.masking import check_attention_mask, zero_padding
from fastweights.ops.packing import MASK_WITH_CU_SEQLENS, run_packed

__all__ = [
    "BLOCK_FORMS",
    "SequenceLayer",
    "check_block",
    "check_heads",
    "check_input_dtype",
    "check_layer_input",
]

#: the block forms every sequence layer accepts as ``block=`` (see :class:`SequenceLayer`)
BLOCK_FORMS = ("native", "pre_ln")

# the method that converts a module or tensor to a dtype (named in the dtype error's hint)
_CONVERT = {
    torch.float64: "double",
    torch.float32: "float",
    torch.float16: "half",
    torch.bfloat16: "bfloat16",
}


def check_heads(d_model: object, num_heads: object) -> int:
    """Validate a layer's ``d_model`` and ``num_heads`` and return the head dim ``E = d_model / num_heads``.

    Raises:
        ValueError: naming ``d_model`` or ``num_heads`` unless both are positive ints and ``num_heads``
            divides ``d_model``.
    """
    d = check_int("d_model", d_model)
    h = check_int("num_heads", num_heads)
    if d % h:
        raise ValueError(f"d_model: expected a multiple of num_heads={h}, got {d}")
    return d // h


def check_block(block: object, name: str = "block") -> str:
    """Validate a layer's ``block`` option (one of :data:`BLOCK_FORMS`) and return it.

    Raises:
        ValueError: naming ``name``, the allowed forms and the value given.
    """
    check_choice(name, block, BLOCK_FORMS)
    return str(block)


def check_layer_input(x: Tensor, d_model: int, name: str = "x") -> None:
    """Raise ``ValueError`` (naming ``name``) unless ``x`` is a finite float tensor ``[B, T, d_model]``."""
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        got = f"shape {list(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name}: expected a tensor of shape [B, T, {d_model}], got {got}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point dtype, got {x.dtype}")
    check_finite(name, x)


def check_input_dtype(name: str, x: Tensor, module: nn.Module, what: str = "layer") -> None:
    """Raise ``ValueError`` unless the float tensor ``x`` has the dtype of ``module``'s parameters.

    Under ``torch.autocast`` (for ``x``'s device) any float dtype is accepted: autocast runs each op in
    its own dtype and the layers compute half-precision recurrences in float32 (see :mod:`fastweights.ops`).
    Outside autocast a mismatch would otherwise surface as torch's "mixed dtype" error deep inside the
    layer. A module without floating-point parameters accepts any dtype.

    Raises:
        ValueError: naming ``name``, its dtype and the parameters' dtype, with the conversions that fix it.
    """
    p = next((p for p in module.parameters() if p.is_floating_point()), None)
    if p is None or x.dtype == p.dtype or torch.is_autocast_enabled(x.device.type):
        return
    to_x = f"{what}.{_CONVERT[x.dtype]}()" if x.dtype in _CONVERT else f"{what}.to({x.dtype})"
    to_p = f"{name}.{_CONVERT[p.dtype]}()" if p.dtype in _CONVERT else f"{name}.to({p.dtype})"
    amp = ", or run under torch.autocast" if x.dtype in (torch.float16, torch.bfloat16) else ""
    raise ValueError(
        f"{name}: expected dtype {p.dtype} (the dtype of the {what}'s parameters), got {x.dtype}; "
        f"convert the {what} ({to_x}) or the input ({to_p}){amp}"
    )


class SequenceLayer(nn.Module):
    """Base class of the sequence layers (SRWM, DeltaNet, TTT, attention, LSTM).

    ``out, state = layer(x [B, T, d_model], state=None)``: ``state=None`` starts from the slow
    weights; the returned state continues the sequence exactly (one call over a concatenation equals
    two calls with the state carried). Validation of ``x``, packing of variable-length sequences
    (``cu_seqlens``) and padding masks (``attention_mask``, see :meth:`forward`) are handled here for
    every layer (the masks' per-layer mechanics in each :meth:`core`).

    **Block form.** Every layer is a *core* (its recurrence with its own input and key/query/value
    projections, :meth:`core`: ``h [B, T, D]`` → ``c [B, T, D]``) inside a *block* (the norm, the
    residual branch and the output projection ``W_o`` around it), chosen by the constructor option
    ``block`` (:data:`BLOCK_FORMS`):

    - ``"native"`` (the default): the layer's own form, as in the paper or reference code it follows
      (each layer's docstring gives it; e.g. the SRWM's ``LN(x) + W_o · core(x)``). Parameters, state
      dict keys and outputs are those of the layer before the option existed.
    - ``"pre_ln"``: the same pre-LayerNorm residual block for every layer,
      ``out = x + Dropout(W_o · core(LN(x)))`` with ``LN = nn.LayerNorm(D)`` (the layer's
      ``layer_norm``) and ``W_o`` a bias-free ``D × D`` linear map (:attr:`output_projection`), so that
      swapping one layer for another changes only the core. Layers whose native form is already this
      (DeltaNet, linear and softmax attention) are the same module under both names; the others
      gain or reuse a norm or ``W_o`` (see their docstrings).

    Subclasses implement :meth:`core` and, when their native form is not ``"pre_ln"``,
    :meth:`native_input` / :meth:`native_output`; :meth:`forward_unpacked` is
    ``block_output(x, core(block_input(x), state))``.
    """

    d_model: int
    num_heads: int
    head_dim: int
    state_batch_dim: int = 0  # the batch dimension of the state's tensors
    block: str = "native"  # the block form (set by the constructor through :meth:`set_block`)

    def set_block(self, block: str) -> None:
        """Validate and record the constructor's ``block`` option (call it before building modules).

        Raises:
            ValueError: naming ``block`` unless it is one of :data:`BLOCK_FORMS`.
        """
        self.block = check_block(block)

    def set_heads(self, d_model: int, num_heads: int, block: str) -> None:
        """Validate and record a multi-head layer's ``d_model``, ``num_heads``, its head dim
        ``head_dim = d_model / num_heads`` and its ``block`` (call it first in the constructor).

        Raises:
            ValueError: naming ``d_model`` or ``num_heads`` (see :func:`check_heads`) or ``block``.
        """
        self.head_dim = check_heads(d_model, num_heads)
        self.d_model, self.num_heads = d_model, num_heads
        self.set_block(block)

    @property
    def output_projection(self) -> nn.Module:
        """``W_o``: the linear map from the core's output to the residual stream (``out_linear``; the TTT
        layers' ``o_proj``; the native LSTM has none)."""
        return self.out_linear

    def native_input(self, x: Tensor) -> Tensor:
        """What the core reads in the native form, ``[B, T, D]``; the default is ``LN(x)`` (pre-LN)."""
        return self.layer_norm(x)

    def native_output(self, x: Tensor, c: Tensor) -> Tensor:
        """The native block's output ``[B, T, D]`` from its input ``x`` and the core's output ``c``; the
        default is the pre-LN residual ``x + Dropout(W_o · c)``."""
        return x + self.dropout(self.output_projection(c))

    def block_input(self, x: Tensor) -> Tensor:
        """What the core reads for the block input ``x [B, T, D]``: ``LN(x)`` in the ``"pre_ln"`` form,
        :meth:`native_input` in the native form."""
        if self.block == "pre_ln":
            return self.layer_norm(x)
        return self.native_input(x)

    def block_output(self, x: Tensor, c: Tensor) -> Tensor:
        """The block's output ``[B, T, D]`` from its input ``x [B, T, D]`` and the core's output ``c``
        ``[B, T, D]``: ``x + Dropout(W_o · c)`` in the ``"pre_ln"`` form, :meth:`native_output` in the
        native form."""
        if self.block == "pre_ln":
            return x + self.dropout(self.output_projection(c))
        return self.native_output(x, c)

    def core(
        self, h: Tensor, state: Any = None, *, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Any]:  # pragma: no cover
        """The layer's recurrence without its block: ``h [B, T, D]`` (the block input, already
        normalised where the form normalises) → ``(c [B, T, D], final state)``; validates ``state``.
        ``attention_mask`` (``[B, T]``, see :meth:`forward`): padded steps change no state and ``c`` is
        zero there."""
        raise NotImplementedError

    def check_mask(self, h: Tensor, attention_mask: object) -> Tensor | None:
        """``attention_mask`` for the input ``h [B, T, ...]`` as a bool tensor ``[B, T]``, or None.

        Raises:
            ValueError: naming ``attention_mask`` (see :func:`fastweights.ops.masking.check_attention_mask`).
        """
        if attention_mask is None:
            return None
        return check_attention_mask(attention_mask, h.shape[0], h.shape[1], h.device)

    def check_input(self, x: Tensor, name: str = "x") -> None:
        """Validate an input of this layer: a finite float tensor ``[B, T, d_model]`` in the dtype of
        the layer's parameters (any float dtype under ``torch.autocast``).

        Raises:
            ValueError: naming ``name`` (see :func:`check_layer_input` and :func:`check_input_dtype`).
        """
        check_layer_input(x, self.d_model, name)
        check_input_dtype(name, x, self)

    def forward(
        self, x: Tensor, state: Any = None, *, cu_seqlens: Any = None, attention_mask: Any = None
    ) -> tuple[Tensor, Any]:
        """``x [B, T, d_model]`` → ``(out [B, T, d_model], final state)``.

        ``x`` must be finite and in the dtype of the layer's parameters (convert the layer, e.g.
        ``layer.double()``, or run under ``torch.autocast``); ``B = 0`` and ``T = 0`` are allowed
        (``T = 0`` returns an empty output and the state unchanged, or the initial state).

        With ``cu_seqlens`` (``[N + 1]`` int offsets, see :mod:`fastweights.ops.packing`), ``x`` is
        ``[1, total, d_model]`` holding ``N`` sequences back to back: each starts from its own row of
        ``state`` (batch ``N``; or a list of ``N`` states; ``None`` = slow weights), nothing crosses a
        boundary, and the final state has one row per sequence (a list of per-sequence states when
        they cannot be batched, e.g. KV caches of different lengths).

        With ``attention_mask`` (``[B, T]``: bool, or integer / floating 0/1; 1/True = real token,
        0/False = padding), ``x`` is a
        padded batch: each row's real tokens must be contiguous (left padding, right padding or both;
        a row may be all padding). Row ``b``'s outputs at its real tokens and its final state are
        those of its real tokens alone from row ``b`` of ``state``; the state does not change at
        padding (with left padding a row starts at its first real token; positions, as RoPE's or a
        TTT mini-batch's, count real tokens only); ``out`` is zero at padding. The returned state
        continues each row (with or without a mask in the next call); states that record per-row
        progress are the TTT layers' (``"offset"`` an int64 tensor ``[B]``) and softmax attention's
        (a third entry, the bool validity ``[B, T_past]`` of the cached keys).
        ``attention_mask=None`` is the unmasked computation, unchanged.

        Raises:
            ValueError: for a bad ``x`` (shape, dtype, NaN/Inf; see :meth:`check_input`), ``state``,
                ``cu_seqlens`` or ``attention_mask`` (wrong shape, values other than 0/1, real tokens
                not contiguous; :func:`fastweights.ops.masking.check_attention_mask`), or both of the
                last two (naming the argument).
        """
        self.check_input(x)
        if attention_mask is not None:
            if cu_seqlens is not None:
                raise ValueError(MASK_WITH_CU_SEQLENS)
            return self.forward_unpacked(x, state, self.check_mask(x, attention_mask))
        if cu_seqlens is None:
            return self.forward_unpacked(x, state)
        return run_packed(
            lambda seg, s: self.forward_unpacked(seg[0], s),
            [x],
            cu_seqlens,
            state,
            batch_dim=self.state_batch_dim,
        )

    def forward_unpacked(
        self, x: Tensor, state: Any = None, attention_mask: Tensor | None = None
    ) -> tuple[Tensor, Any]:
        """The block on an unpacked batch ``x [B, T, d_model]`` already validated by :meth:`forward`
        (see there): ``block_output(x, c)`` with ``c, state = core(block_input(x), state)``; validates
        ``state``. ``attention_mask``: the validated bool mask ``[B, T]`` (the output is zero at
        padding), or None."""
        if attention_mask is None:
            c, new_state = self.core(self.block_input(x), state)
            return self.block_output(x, c), new_state
        c, new_state = self.core(self.block_input(x), state, attention_mask=attention_mask)
        return zero_padding(self.block_output(x, c), attention_mask), new_state

    def read(self, x: Tensor, state: Any = None) -> Tensor:
        """Process every position of ``x [B, Q, d_model]`` as an independent one-step continuation
        of ``state`` and return the outputs ``[B, Q, d_model]``; the state is not changed.

        This is how ACL queries are evaluated (each query is a length-1 call whose updated state is
        discarded). The default expands the state over the ``Q`` queries; layers whose output does not
        depend on their own update (SRWM) override it with a cheaper exact form. ``state`` may come from
        a padded batch (``attention_mask``): each row reads its own state. The queries take no mask
        (each is independent; drop the outputs of queries you do not need).

        Raises:
            ValueError: for a bad ``x`` (as for :meth:`forward`) or ``state``.
        """
        self.check_input(x)
        b, q, d = x.shape
        expanded = self.repeat_state(state, q) if state is not None else None
        out, _ = self(x.reshape(b * q, 1, d), expanded)
        return out.reshape(b, q, d)

    def check_reads(self, x: Tensor, x_read: Tensor) -> None:
        """Validate the inputs of :meth:`forward_with_reads` (both as for :meth:`forward`, same shape).

        Raises:
            ValueError: naming ``x`` or ``x_read``.
        """
        self.check_input(x)
        self.check_input(x_read, "x_read")
        if x_read.shape != x.shape:
            raise ValueError(f"x_read: expected shape {list(x.shape)} (same as x), got {list(x_read.shape)}")

    def forward_with_reads(
        self, x: Tensor, x_read: Tensor, state: Any = None, *, attention_mask: Any = None
    ) -> tuple[Tensor, Tensor, Any]:
        """``forward`` over ``x`` plus, at every step ``t``, an independent one-step read of
        ``x_read[:, t]`` from the state reached after ``x[:, :t]`` (its own update discarded).

        Returns ``(out [B, T, d_model], out_read [B, T, d_model], final state)``. The default runs the
        sequence one step at a time; layers with a cheaper exact form (SRWM) override it.
        ``attention_mask`` (``[B, T]``, as for :meth:`forward`) pads ``x`` and ``x_read`` together: the
        read at a real step sees the state after the real steps before it, and both outputs are zero
        at padding.

        Raises:
            ValueError: for a bad ``x``, ``x_read`` (see :meth:`check_reads`), ``state`` or
                ``attention_mask``.
        """
        self.check_reads(x, x_read)
        mask = self.check_mask(x, attention_mask)
        if x.shape[1] == 0:  # no step: empty outputs and the state unchanged (or the initial state)
            out, new_state = self(x, state, attention_mask=mask)
            return out, self.read(x_read, state), new_state
        outs, reads = [], []
        for t in range(x.shape[1]):
            step = None if mask is None else mask[:, t : t + 1]
            read = self.read(x_read[:, t : t + 1], state)
            reads.append(read if step is None else zero_padding(read, step))
            out, state = self(x[:, t : t + 1], state, attention_mask=step)
            outs.append(out)
        return torch.cat(outs, dim=1), torch.cat(reads, dim=1), state

    def repeat_state(self, state: Any, repeats: int) -> Any:
        """Repeat every batch row of ``state`` ``repeats`` times (row-major: b0, b0, …, b1, …)."""
        if isinstance(state, Tensor):
            return torch.repeat_interleave(state, repeats, dim=0)
        if isinstance(state, (tuple, list)):
            return type(state)(self.repeat_state(s, repeats) for s in state)
        raise TypeError(f"state: cannot repeat a state of type {type(state).__name__}")

    def select_state(self, state: Any, index: Tensor) -> Any:
        """The batch rows ``index`` (int64 ``[N]``, any order, repeats allowed) of ``state``: row ``i`` of the
        result is row ``index[i]`` of ``state`` (e.g. reordering beams). Raises ``TypeError`` for a state of
        another type."""
        if isinstance(state, Tensor):
            return state.index_select(0, index.to(state.device))
        if isinstance(state, (tuple, list)):
            return type(state)(self.select_state(s, index) for s in state)
        raise TypeError(f"state: cannot select rows of a state of type {type(state).__name__}")
