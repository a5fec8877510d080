"""Recurrent cores of the RL agents and their state handling (SRWM paper §4.3; after modern-srwm's
``reinforcement_learning/torchbeast_procgen``).

A core maps ``x [T, B, in_dim]`` and ``done [T, B]`` to ``[T, B, out_dim]``, one time step at a time,
with the state carried across calls:

- **carry:** the state kept between calls is the *shift* from the initial state, ``Δ = S_t − S_0`` (for
  the SRWM ``S_0 = W_0``, its slow weights): each call starts from ``S_0 + Δ``, so gradients reach
  ``W_0`` through the carried state even when ``Δ`` is detached (the caller detaches it between
  unrolls: truncated BPTT).
- **done:** where ``done[t, b]``, environment ``b``'s state is set to ``S_0`` *before* step ``t`` is
  read (``done[t]`` marks the first observation of a new episode).
- **srwm_reset:** the SRWM whose state is also set to ``W_0`` every ``reset_every`` steps (counted per
  environment since its last reset), in training and evaluation alike — the paper's ablation. (The
  released code's variant instead never self-modifies while acting; not implemented.)

Cores (``CORES``): ``ff`` (none: features pass through), ``lstm`` (one LSTM layer), ``deltanet``,
``srwm``, ``srwm_reset`` and ``fake_srwm`` (``num_layers`` × [layer, feed-forward] at width
``d_model``). ``fake_srwm`` ("Fake SR"): each head maps its (softmaxed) input by a fixed learned
``W_y`` — no keys, queries or learning rates, and nothing is ever updated. The layers keep their native
block forms (:class:`fastweights.layers.base.SequenceLayer`): SRWM ``LN(x) + W_o · SRWM(softmax(x))``
(modern init), DeltaNet ``x + W_o · DeltaRule(LN(x))``, LSTM ``x + LSTM(LN(x))``; ``fake_srwm`` has the
SRWM's form with the fixed ``W_y`` as its core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from fastweights.layers import DeltaNetLayer, FeedForward, LSTMLayer, SRWMLayer
from fastweights.layers.base import check_heads

__all__ = ["CORES", "Core", "CoreState", "FakeSRWMLayer", "detach_state"]

CORES = ("ff", "lstm", "deltanet", "srwm", "srwm_reset", "fake_srwm")


class FakeSRWMLayer(nn.Module):
    """ "Fake SR" ablation (SRWM paper §4.3): ``out = LayerNorm(x) + W_out · [W_y,h · softmax(x_h)]_h``.

    The SRWM layer's placement and input softmax with only its ``W_y`` block (``[H, E, E]``, std
    ``1/sqrt(E)``), fixed during an episode: stateless.

    Args:
        d_model: width ``D`` (``E = D / num_heads``). num_heads: ``H``.
        use_input_softmax: softmax over each head's ``E`` inputs first (as the RL SRWM core).
    """

    def __init__(self, d_model: int, num_heads: int, *, use_input_softmax: bool = True) -> None:
        super().__init__()
        e = check_heads(d_model, num_heads)
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, e
        self.use_input_softmax = use_input_softmax
        self.weight_y = nn.Parameter(torch.randn(num_heads, e, e) / math.sqrt(e))
        self.out_linear = nn.Linear(d_model, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        """``x [B, T, D]`` → ``[B, T, D]``."""
        b, t, _ = x.shape
        h = x.reshape(b, t, self.num_heads, self.head_dim)
        if self.use_input_softmax:
            h = torch.softmax(h, dim=-1)
        y = torch.einsum("bthe,hef->bthf", h, self.weight_y).reshape(b, t, self.d_model)
        return self.layer_norm(x) + self.out_linear(y)


@dataclass
class CoreState:
    """``shifts``: one entry per stateful layer, ``Δ = S − S_0`` in the layer's state layout (a tensor
    or a tuple of tensors with the batch at the layer's ``state_batch_dim``); ``steps [B]`` int64:
    steps since each environment's state was last set to ``S_0``."""

    shifts: tuple[Any, ...]
    steps: Tensor


def _map(fn: Any, *states: Any) -> Any:
    if isinstance(states[0], (tuple, list)):
        return tuple(_map(fn, *parts) for parts in zip(*states, strict=True))
    return fn(*states)


def detach_state(state: CoreState) -> CoreState:
    """``state`` cut from the autograd graph (the truncation between unrolls)."""
    return CoreState(_map(lambda s: s.detach(), state.shifts), state.steps.clone())


class Core(nn.Module):
    """One of :data:`CORES` over ``in_dim`` inputs (see the module docstring).

    Args:
        kind: a name of :data:`CORES`.
        in_dim: input width (encoder features + 1 for the previous reward).
        d_model, num_layers, num_heads, d_ff: the sequence model (paper's SRWM / DeltaNet cores: 128,
            2, 8, 512).
        lstm_size: width of ``lstm``'s one LSTM layer (paper: 256); ``None``: ``d_model``.
        reset_every: ``srwm_reset``'s period in steps (paper: 50).

    Raises:
        ValueError: for an unknown ``kind`` (naming ``core``) or bad sizes.
    """

    def __init__(
        self,
        kind: str,
        in_dim: int,
        *,
        d_model: int = 128,
        num_layers: int = 2,
        num_heads: int = 8,
        d_ff: int = 512,
        lstm_size: int | None = None,
        reset_every: int = 50,
    ) -> None:
        super().__init__()
        if kind not in CORES:
            raise ValueError(f"core: expected one of {CORES}, got {kind!r}")
        if isinstance(reset_every, bool) or not isinstance(reset_every, int) or reset_every < 1:
            raise ValueError(f"reset_every: expected an int >= 1, got {reset_every!r}")
        self.kind, self.reset_every = kind, reset_every
        self.layers = nn.ModuleList()
        self.ffs = nn.ModuleList()
        if kind == "ff":
            self.proj: nn.Module = nn.Identity()
            self.out_dim = in_dim
            return
        if kind == "lstm" and lstm_size is not None:
            d_model = lstm_size
        self.proj = nn.Linear(in_dim, d_model)
        self.out_dim = d_model
        if kind == "lstm":
            self.layers.append(LSTMLayer(d_model, 1))
            return
        for _ in range(num_layers):
            if kind == "deltanet":
                layer: nn.Module = DeltaNetLayer(d_model, num_heads)
            elif kind == "fake_srwm":
                layer = FakeSRWMLayer(d_model, num_heads)
            else:
                layer = SRWMLayer(d_model, num_heads, use_input_softmax=True, init="modern")
            self.layers.append(layer)
            self.ffs.append(FeedForward(d_model, d_ff))

    def _stateful(self) -> list[nn.Module]:
        return [m for m in self.layers if not isinstance(m, FakeSRWMLayer)]

    def _initial(self, ref: Tensor) -> list[Any]:
        """``S_0`` of every stateful layer for a batch like ``ref [B, D]`` (with gradient to ``W_0``):
        the SRWM's expanded slow weights, the other layers' state after an empty call."""
        empty = ref.new_zeros(ref.shape[0], 0, self.out_dim)
        return [
            layer.initial_fast_weights(empty) if isinstance(layer, SRWMLayer) else layer(empty)[1]
            for layer in self._stateful()
        ]

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> CoreState:
        """The state of ``batch`` environments at their first step (all shifts zero)."""
        dtype = next((p.dtype for p in self.parameters()), torch.float32)
        ref = torch.zeros(batch, self.out_dim, device=device, dtype=dtype)
        shifts = tuple(_map(lambda s: torch.zeros_like(s.detach()), s) for s in self._initial(ref))
        return CoreState(shifts, torch.zeros(batch, dtype=torch.int64, device=device))

    def _check(self, x: Tensor, done: Tensor, state: CoreState) -> None:
        if x.dim() != 3 or done.shape != x.shape[:2] or state.steps.shape != x.shape[1:2]:
            raise ValueError(
                f"x, done, state: expected x [T, B, D], done [T, B] and state for B environments, got "
                f"x {list(x.shape)}, done {list(done.shape)}, state for {list(state.steps.shape)}"
            )

    def _resets(self, done: Tensor, steps: Tensor) -> tuple[Tensor, Tensor]:
        """``(reset [T, B] bool, steps [B] after the T steps)``: where each environment's state is set
        to ``S_0`` before the step is read (``done``, and for ``srwm_reset`` every ``reset_every``
        steps since the last reset), and the step counts carried to the next call."""
        t_len = done.shape[0]
        if self.kind == "srwm_reset":
            resets = []
            for t in range(t_len):
                reset = done[t] | (steps >= self.reset_every)
                steps = torch.where(reset, torch.zeros_like(steps), steps) + 1
                resets.append(reset)
            return torch.stack(resets), steps
        if t_len == 0:
            return done, steps
        index = torch.arange(t_len, device=done.device)[:, None]
        last = torch.where(done, index, -1).amax(0)  # the last reset of each environment, -1: none
        return done, torch.where(last >= 0, t_len - last, steps + t_len)

    def forward(self, x: Tensor, done: Tensor, state: CoreState) -> tuple[Tensor, CoreState]:
        """``x [T, B, in_dim]`` float, ``done [T, B]`` bool → ``(out [T, B, out_dim], new state)``.

        Layer by layer over the whole unroll: an SRWM layer runs once with the resets (``done``, or
        ``srwm_reset``'s period) inside (:meth:`SRWMLayer.forward_with_resets`); the other stateful
        layers once per stretch of steps without a reset in any environment, their state set to ``S_0``
        for the resetting environments between stretches; the feed-forward blocks once over all steps.
        The same recurrence as :meth:`forward_reference` (one call per layer and step): equal outputs,
        state and gradients up to float rounding (``T = 1`` SRWM calls: bit for bit), no random numbers
        drawn (the core has no dropout).

        Raises:
            ValueError: for mismatched shapes.
        """
        self._check(x, done, state)
        h = self.proj(x)
        if not self.layers or x.shape[0] == 0:
            return h, CoreState(state.shifts, state.steps + x.shape[0])
        t_len = x.shape[0]
        resets, steps = self._resets(done, state.steps)
        if all(isinstance(layer, SRWMLayer) for layer in self._stateful()):
            any_reset, stretches = [], []  # the SRWM layers take the resets inside one call
        else:
            any_reset = resets.any(1).tolist()  # [T] on the host: where the stretches start
            starts = [0] + [t for t in range(1, t_len) if any_reset[t]]
            stretches = list(zip(starts, [*starts[1:], t_len], strict=True))
        init = self._initial(h[0])
        z = h.transpose(0, 1)  # [B, T, D]
        shifts, k = [], 0
        for i, layer in enumerate(self.layers):
            if isinstance(layer, FakeSRWMLayer):
                z = layer(z)
            else:
                s0, dim = init[k], getattr(layer, "state_batch_dim", 0)
                current = _map(torch.add, s0, state.shifts[k])
                if isinstance(layer, SRWMLayer):  # one call, the resets inside
                    z, current = layer.forward_with_resets(z, current, resets.T)
                else:
                    outs = []
                    for lo, hi in stretches:
                        if any_reset[lo]:
                            current = _reset(current, s0, resets[lo], dim)
                        out, current = layer(z[:, lo:hi], current)
                        outs.append(out)
                    z = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
                shifts.append(_map(torch.sub, current, s0))
                k += 1
            if self.ffs:
                z = self.ffs[i](z)
        return z.transpose(0, 1), CoreState(tuple(shifts), steps)

    def forward_reference(self, x: Tensor, done: Tensor, state: CoreState) -> tuple[Tensor, CoreState]:
        """:meth:`forward` one time step at a time (every layer called once per step, ``S_0`` from an
        empty call of each layer): the plain form of the recurrence, for parity checks. Same arguments,
        returns and errors."""
        self._check(x, done, state)
        h = self.proj(x)
        if not self.layers:
            return h, CoreState(state.shifts, state.steps + x.shape[0])
        dims = [getattr(layer, "state_batch_dim", 0) for layer in self._stateful()]
        empty = h[0].new_zeros(h.shape[1], 0, self.out_dim)
        init = [layer(empty)[1] for layer in self._stateful()]
        current = [_map(torch.add, s0, d) for s0, d in zip(init, state.shifts, strict=True)]
        steps = state.steps
        outs = []
        for t in range(x.shape[0]):
            reset = done[t]
            if self.kind == "srwm_reset":
                reset = reset | (steps >= self.reset_every)
            steps = torch.where(reset, torch.zeros_like(steps), steps)
            current = [_reset(c, s0, reset, dim) for c, s0, dim in zip(current, init, dims, strict=True)]
            z = h[t][:, None]
            k = 0
            for i, layer in enumerate(self.layers):
                if isinstance(layer, FakeSRWMLayer):
                    z = layer(z)
                else:
                    z, current[k] = layer(z, current[k])
                    k += 1
                if self.ffs:
                    z = self.ffs[i](z)
            outs.append(z[:, 0])
            steps = steps + 1
        shifts = tuple(_map(torch.sub, c, s0) for c, s0 in zip(current, init, strict=True))
        return torch.stack(outs), CoreState(shifts, steps)


def _reset(state: Any, initial: Any, reset: Tensor, dim: int) -> Any:
    """``state`` with the entries of environments where ``reset [B]`` replaced by ``initial``'s."""

    def pick(s: Tensor, s0: Tensor) -> Tensor:
        shape = [1] * s.dim()
        shape[dim] = -1
        return torch.where(reset.view(shape), s0.expand_as(s), s)

    return _map(pick, state, initial)
