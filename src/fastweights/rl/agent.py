"""The actor-critic agent: encoder → core → policy and value heads (SRWM paper §4.3; IMPALA).

The core reads the encoder's features and the previous step's (clipped) reward; no task id is given.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from fastweights.rl.cores import Core, CoreState

__all__ = ["Agent", "AgentOutput"]


class AgentOutput(NamedTuple):
    """``logits [T, B, A]`` float (policy), ``values [T, B]`` float (baseline ``V(x_t)``)."""

    logits: Tensor
    values: Tensor


class Agent(nn.Module):
    """Actor-critic over ``T × B`` steps.

    Args:
        encoder: module mapping ``[N, *obs_shape]`` uint8 to ``[N, F]`` features; exposes ``feature_dim``.
        num_actions: ``A``.
        core: a :class:`~fastweights.rl.cores.Core` built for ``F + 1`` inputs.

    Raises:
        ValueError: when the core's input width is not ``encoder.feature_dim + 1``.
    """

    def __init__(self, encoder: nn.Module, num_actions: int, core: Core) -> None:
        super().__init__()
        self.encoder, self.core = encoder, core
        expected = encoder.feature_dim + 1
        probe = getattr(core.proj, "in_features", expected)
        if probe != expected:
            raise ValueError(f"core: expected a core over {expected} inputs (features + reward), got {probe}")
        self.policy = nn.Linear(core.out_dim, num_actions)
        self.baseline = nn.Linear(core.out_dim, 1)
        self.num_actions = num_actions

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> CoreState:
        """The core state of ``batch`` fresh environments."""
        return self.core.initial_state(batch, device)

    def forward(
        self, obs: Tensor, prev_reward: Tensor, done: Tensor, state: CoreState
    ) -> tuple[AgentOutput, CoreState]:
        """``obs [T, B, *obs_shape]`` uint8, ``prev_reward [T, B]`` float (the clipped reward of the step
        that led to ``obs``; 0 at an episode's start), ``done [T, B]`` bool (``obs`` starts an episode).

        Returns:
            ``(AgentOutput, new core state)``.

        Raises:
            ValueError: for mismatched shapes or bad observations (from the encoder).
        """
        t, b = obs.shape[:2]
        if prev_reward.shape != (t, b) or done.shape != (t, b):
            raise ValueError(
                f"prev_reward, done: expected [T, B] = {[t, b]} (as obs), got {list(prev_reward.shape)} and "
                f"{list(done.shape)}"
            )
        features = self.encoder(obs.reshape(t * b, *obs.shape[2:])).reshape(t, b, -1)
        core_in = torch.cat([features, prev_reward.unsqueeze(-1).to(features.dtype)], dim=-1)
        out, state = self.core(core_in, done, state)
        return AgentOutput(self.policy(out), self.baseline(out).squeeze(-1)), state
