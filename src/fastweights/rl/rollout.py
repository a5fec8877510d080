"""The synchronous batched actor, the V-trace learner step and greedy evaluation (IMPALA, Espeholt et al.
2018; run synchronously: the actor acts with the current weights, then the learner updates them).

- :class:`Actor` steps all environments with one agent forward per time step (a ``[1, N]`` batch) and
  records an unroll of ``T`` steps: ``T + 1`` observations (the last one bootstraps the value), the
  sampled actions and the behaviour policy's logits. The core state is carried from one unroll to the
  next and detached there (truncated BPTT over ``T`` steps).
- :func:`learner_loss` recomputes the unroll from its start state with gradients and applies
  :func:`~fastweights.rl.vtrace.vtrace` + :func:`~fastweights.rl.vtrace.actor_critic_loss`.
- :func:`evaluate_greedy` plays a fixed number of episodes per environment with greedy actions;
  :func:`evaluate_random` the same episodes with uniformly random actions (the random-policy reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fastweights.rl.agent import Agent
from fastweights.rl.cores import CoreState, detach_state
from fastweights.rl.envs import VecEnv
from fastweights.rl.vtrace import actor_critic_loss, vtrace

__all__ = [
    "REWARD_CLIPS",
    "clip_reward",
    "Rollout",
    "Actor",
    "learner_loss",
    "evaluate_greedy",
    "evaluate_random",
]

REWARD_CLIPS = ("sign", "clamp", "none")


def clip_reward(reward: Tensor, mode: str) -> Tensor:
    """``sign``: ``sign(r)`` (the SRWM paper's ProcGen setting); ``clamp``: ``r`` clipped to [−1, 1]
    (torchbeast's); ``none``: ``r``.

    Raises:
        ValueError: for an unknown mode.
    """
    if mode == "sign":
        return torch.sign(reward)
    if mode == "clamp":
        return reward.clamp(-1.0, 1.0)
    if mode == "none":
        return reward
    raise ValueError(f"reward_clip: expected one of {REWARD_CLIPS}, got {mode!r}")


@dataclass
class Rollout:
    """One unroll of ``T`` steps in ``B`` environments (time-major).

    Attributes:
        obs: ``[T + 1, B, *obs_shape]`` uint8. prev_reward: ``[T + 1, B]`` float, the clipped reward that
        led to each observation (0 at an episode's start). done: ``[T + 1, B]`` bool, the observation
        starts an episode. actions: ``[T, B]`` int64. rewards: ``[T, B]`` float, clipped.
        behaviour_logits: ``[T, B, A]`` float. start_state: the core state before ``obs[0]``.
    """

    obs: Tensor
    prev_reward: Tensor
    done: Tensor
    actions: Tensor
    rewards: Tensor
    behaviour_logits: Tensor
    start_state: CoreState


class Actor:
    """Acts in ``env`` with ``agent`` (sampled actions from a generator seeded with ``seed``).

    Finished training episodes are kept in :attr:`episodes` as ``(game, return, length)`` until read
    with :meth:`pop_episodes`. :meth:`state_dict` / :meth:`load_state_dict` hold everything the next
    unroll depends on (environments, last observation, core state, generator), for exact resume.
    """

    def __init__(self, agent: Agent, env: VecEnv, *, reward_clip: str = "sign", seed: int = 0) -> None:
        clip_reward(torch.zeros(1), reward_clip)  # checks the mode
        self.agent, self.env, self.reward_clip = agent, env, reward_clip
        self.generator = torch.Generator().manual_seed(seed)
        n = env.num_envs
        device = next(agent.parameters()).device
        self.obs = env.reset()
        self.prev_reward = torch.zeros(n)
        self.done = torch.ones(n, dtype=torch.bool)
        self.state = agent.initial_state(n, device)
        self.episodes: list[tuple[str, float, int]] = []

    @torch.no_grad()
    def unroll(self, steps: int) -> Rollout:
        """Act ``steps`` times in every environment; returns the :class:`Rollout` (on CPU). An exception
        (e.g. ``KeyboardInterrupt``) during the unroll restores the actor to the unroll's start."""
        device = next(self.agent.parameters()).device
        start = detach_state(self.state)
        obs, prev, done, actions, rewards, logits = [self.obs], [self.prev_reward], [self.done], [], [], []
        state = start
        committed = self.state_dict()
        try:
            self._act(steps, device, state, obs, prev, done, actions, rewards, logits)
        except BaseException:  # e.g. Ctrl-C: the checkpoint written next must be the unroll's start
            self.load_state_dict(committed)
            raise
        return Rollout(
            torch.stack(obs),
            torch.stack(prev),
            torch.stack(done),
            torch.stack(actions),
            torch.stack(rewards),
            torch.stack(logits),
            start,
        )

    def _act(self, steps: int, device: torch.device, state: CoreState, *records: list[Any]) -> None:
        obs, prev, done, actions, rewards, logits = records
        for _ in range(steps):
            out, state = self.agent(
                self.obs[None].to(device),
                self.prev_reward[None].to(device),
                self.done[None].to(device),
                state,
            )
            step_logits = out.logits[0].float().cpu()
            action = torch.multinomial(torch.softmax(step_logits, -1), 1, generator=self.generator)[:, 0]
            result = self.env.step(action)
            reward = clip_reward(result.reward, self.reward_clip)
            for i in torch.nonzero(result.done).flatten().tolist():
                self.episodes.append(
                    (self.env.games[i], float(result.episode_return[i]), int(result.episode_length[i]))
                )
            self.obs, self.done = result.obs, result.done
            self.prev_reward = torch.where(result.done, torch.zeros_like(reward), reward)
            obs.append(self.obs)
            prev.append(self.prev_reward)
            done.append(self.done)
            actions.append(action)
            rewards.append(reward)
            logits.append(step_logits)
        self.state = detach_state(state)

    def pop_episodes(self) -> list[tuple[str, float, int]]:
        """The training episodes finished since the last call."""
        out, self.episodes = self.episodes, []
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "env": self.env.state_dict(),
            "obs": self.obs.clone(),
            "prev_reward": self.prev_reward.clone(),
            "done": self.done.clone(),
            "core": {"shifts": detach_state(self.state).shifts, "steps": self.state.steps.clone()},
            "generator": self.generator.get_state(),
            "episodes": list(self.episodes),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        self.obs, self.prev_reward, self.done = state["obs"], state["prev_reward"], state["done"]
        core = state["core"]
        self.state = core if isinstance(core, CoreState) else CoreState(tuple(core["shifts"]), core["steps"])
        self.generator.set_state(state["generator"])
        self.episodes = list(state["episodes"])


def learner_loss(
    agent: Agent,
    rollout: Rollout,
    *,
    discount: float = 0.99,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
) -> tuple[Tensor, dict[str, float]]:
    """The IMPALA loss of ``rollout`` under ``agent``'s current weights (V-trace, ρ̄ = c̄ = 1).

    The agent reads all ``T + 1`` observations from the rollout's start state; the last value is the
    bootstrap ``V(x_T)``; the discount after step ``t`` is 0 where ``obs[t + 1]`` starts an episode.

    Returns:
        ``(loss, {"pg_loss", "baseline_loss", "entropy_loss", "mean_rho"})``.
    """
    device = next(agent.parameters()).device
    out, _ = agent(
        rollout.obs.to(device), rollout.prev_reward.to(device), rollout.done.to(device), rollout.start_state
    )
    logits, values = out.logits[:-1], out.values[:-1]
    actions = rollout.actions.to(device)
    log_pi = torch.log_softmax(logits, -1).gather(-1, actions[..., None])[..., 0]
    log_mu = torch.log_softmax(rollout.behaviour_logits.to(device), -1).gather(-1, actions[..., None])[..., 0]
    log_rhos = (log_pi - log_mu).detach()
    discounts = discount * (~rollout.done[1:]).to(device, values.dtype)
    targets = vtrace(
        log_rhos,
        discounts,
        rollout.rewards.to(device, values.dtype),
        values.detach(),
        out.values[-1].detach(),
    )
    loss, parts = actor_critic_loss(
        logits, actions, values, targets, baseline_cost=baseline_cost, entropy_cost=entropy_cost
    )
    return loss, {**parts, "mean_rho": float(log_rhos.exp().mean())}


def _check_episodes(episodes_per_env: int) -> None:
    if isinstance(episodes_per_env, bool) or not isinstance(episodes_per_env, int) or episodes_per_env < 1:
        raise ValueError(f"episodes: expected an int >= 1 per environment, got {episodes_per_env!r}")


def _play(
    env: VecEnv, episodes_per_env: int, act: Callable[[Tensor, Tensor, Tensor], Tensor]
) -> dict[str, list[float]]:
    """Step ``env`` with ``act(obs, previous reward (unclipped), done) -> actions [N]`` until every
    environment has finished ``episodes_per_env`` episodes; ``{game: [returns of the first ones]}``."""
    n = env.num_envs
    obs = env.reset()
    reward, done = torch.zeros(n), torch.ones(n, dtype=torch.bool)
    counts = np.zeros(n, dtype=np.int64)
    returns: dict[str, list[float]] = {g: [] for g in dict.fromkeys(env.games)}
    while (counts < episodes_per_env).any():
        result = env.step(act(obs, reward, done))
        for i in torch.nonzero(result.done).flatten().tolist():
            if counts[i] < episodes_per_env:
                returns[env.games[i]].append(float(result.episode_return[i]))
                counts[i] += 1
        obs, reward, done = result.obs, result.reward, result.done
    return returns


@torch.no_grad()
def evaluate_greedy(
    agent: Agent, env: VecEnv, episodes_per_env: int, *, reward_clip: str = "sign"
) -> dict[str, list[float]]:
    """Play ``episodes_per_env`` episodes in every environment of ``env`` with ``argmax`` actions
    (the previous reward fed to the agent clipped by ``reward_clip``, as in training).

    Every environment counts exactly its first ``episodes_per_env`` episodes (no bias towards short
    ones). Returns ``{game: [returns]}`` (unclipped), ``len(games_of(game)) · episodes_per_env`` each.

    Raises:
        ValueError: for ``episodes_per_env < 1`` or an unknown ``reward_clip``.
    """
    clip_reward(torch.zeros(1), reward_clip)
    _check_episodes(episodes_per_env)
    device = next(agent.parameters()).device
    state = [agent.initial_state(env.num_envs, device)]

    def act(obs: Tensor, reward: Tensor, done: Tensor) -> Tensor:
        prev = torch.where(done, torch.zeros_like(reward), clip_reward(reward, reward_clip))
        out, state[0] = agent(obs[None].to(device), prev[None].to(device), done[None].to(device), state[0])
        return out.logits[0].argmax(-1).cpu()

    return _play(env, episodes_per_env, act)


def evaluate_random(env: VecEnv, episodes_per_env: int, *, seed: int = 0) -> dict[str, list[float]]:
    """The same count of episodes as :func:`evaluate_greedy` with uniformly random actions (a generator
    seeded with ``seed``): the random-policy reference of a level range.

    Raises:
        ValueError: for ``episodes_per_env < 1``.
    """
    _check_episodes(episodes_per_env)
    g = torch.Generator().manual_seed(seed)
    return _play(
        env, episodes_per_env, lambda obs, _r, _d: torch.randint(env.num_actions, (len(obs),), generator=g)
    )
