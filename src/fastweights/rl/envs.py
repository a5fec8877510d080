"""Vectorised multi-task environments with disjoint train / test level sets.

One :class:`VecEnv` steps ``num_envs`` environments of several games at once (no task id is given to the
agent, as in the SRWM paper's multi-task ProcGen setting, §4.3). Every episode is played on a *level*
(a reset seed) drawn from a :class:`LevelSet`; the train and test sets of a preset are disjoint ranges
(ProcGen's protocol: train levels 0–199, test levels from 1000). Episodes reset automatically.

- :class:`MiniGridVecEnv`: gymnasium MiniGrid games (``minigrid`` package, pure Python), observed as the
  symbolic 7×7 egocentric view ``[3, 7, 7]`` uint8 (object, colour, state indices), 7 actions.
- ProcGen (``procgen2``, an optional extra) lives in :mod:`fastweights.rl.procgen`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fastweights.train.run_folder import RunFolderError

__all__ = [
    "LevelSet",
    "StepResult",
    "VecEnv",
    "MiniGridVecEnv",
    "MINIGRID_ACTIONS",
    "MINIGRID_OBS_SHAPE",
    "import_minigrid",
]

MINIGRID_ACTIONS = 7  # left, right, forward, pickup, drop, toggle, done
MINIGRID_OBS_SHAPE = (3, 7, 7)  # object / colour / state indices of the egocentric 7x7 view


@dataclass(frozen=True)
class LevelSet:
    """Levels ``start .. start + count - 1`` (reset seeds of the environment)."""

    start: int
    count: int

    def __post_init__(self) -> None:
        for name in ("start", "count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "start" else 1):
                low = 0 if name == "start" else 1
                raise ValueError(f"levels.{name}: expected an int >= {low}, got {value!r}")

    def overlaps(self, other: LevelSet) -> bool:
        """Whether the two ranges share a level."""
        return self.start < other.start + other.count and other.start < self.start + self.count


@dataclass
class StepResult:
    """One step of all environments.

    Attributes:
        obs: ``[N, *obs_shape]`` uint8, the next observation (the first of a new episode where ``done``).
        reward: ``[N]`` float32, the reward of the step (unclipped).
        done: ``[N]`` bool, the episode ended with this step (terminated or truncated).
        episode_return: ``[N]`` float32, the finished episode's return where ``done``, NaN elsewhere.
        episode_length: ``[N]`` int64, its length in steps where ``done``, 0 elsewhere.
    """

    obs: Tensor
    reward: Tensor
    done: Tensor
    episode_return: Tensor
    episode_length: Tensor

    @classmethod
    def from_numpy(
        cls,
        obs: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        ep_return: np.ndarray,
        ep_length: np.ndarray,
    ) -> StepResult:
        """The step from numpy arrays (``obs`` is copied: environments reuse their observation buffer)."""
        return cls(
            torch.from_numpy(obs.copy()),
            torch.from_numpy(reward),
            torch.from_numpy(done),
            torch.from_numpy(ep_return),
            torch.from_numpy(ep_length),
        )


class VecEnv(ABC):
    """Interface of the vectorised environments (see the module docstring).

    Attributes:
        num_envs: ``N``. games: the game of each environment (``N`` names). num_actions: size of the
        discrete action space shared by all games. obs_shape: shape of one observation.
    """

    num_envs: int
    games: list[str]
    num_actions: int
    obs_shape: tuple[int, ...]

    @abstractmethod
    def reset(self) -> Tensor:
        """Start a new episode in every environment; returns ``obs [N, *obs_shape]`` uint8."""

    def _actions(self, actions: Tensor | np.ndarray) -> np.ndarray:
        """``actions`` as a numpy array of shape ``[N]``.

        Raises:
            ValueError: for another shape.
        """
        acts = actions.detach().cpu().numpy() if isinstance(actions, Tensor) else np.asarray(actions)
        if acts.shape != (self.num_envs,):
            raise ValueError(f"actions: expected shape ({self.num_envs},), got {tuple(acts.shape)}")
        return acts

    @abstractmethod
    def step(self, actions: Tensor) -> StepResult:
        """Apply ``actions [N]`` int64 (one per environment); auto-resets finished episodes."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-identically (for checkpoints)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    @abstractmethod
    def close(self) -> None:
        """Release the environments."""


def import_minigrid() -> Any:
    """Import ``gymnasium`` with the MiniGrid games registered.

    Raises:
        ImportError: naming the packages to install when ``minigrid`` is missing.
    """
    try:
        import gymnasium
        import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
    except ImportError as err:
        raise ImportError(
            f"MiniGrid environments need the 'minigrid' and 'gymnasium' packages "
            f"(pip install -r requirements.txt); import failed: {err}"
        ) from None
    return gymnasium


class MiniGridVecEnv(VecEnv):
    """``num_envs`` MiniGrid environments, assigned to ``games`` in turn (env ``i`` plays
    ``games[i % len(games)]``); each episode's level is drawn uniformly from ``levels`` by a generator
    seeded with ``seed`` (so the sequence of levels is reproducible).

    Args:
        games: gymnasium ids, e.g. ``["MiniGrid-DoorKey-5x5-v0", "MiniGrid-LavaGapS5-v0"]``; every game
            must have :data:`MINIGRID_ACTIONS` actions.
        num_envs: ``N >= len(games)``.
        levels: the level set episodes are drawn from.
        seed: seed of the level draws.
        draw: ``"uniform"`` (each episode's level drawn uniformly from ``levels``: training) or
            ``"cycle"`` (the ``k``-th of a game's ``n_g`` environments plays levels ``start + (k + j·n_g)
            mod count`` for its ``j = 0, 1, …``-th episode: an evaluation of a game visits every level
            once before repeating one).

    Raises:
        ValueError: for an unknown game id (naming it and listing the MiniGrid ids), a game with another
            action space, or ``num_envs < len(games)``.
        ImportError: when ``minigrid`` is not installed.
    """

    def __init__(
        self, games: list[str], num_envs: int, levels: LevelSet, *, seed: int = 0, draw: str = "uniform"
    ) -> None:
        gym = import_minigrid()
        if draw not in ("uniform", "cycle"):
            raise ValueError(f"draw: expected 'uniform' or 'cycle', got {draw!r}")
        if not games:
            raise ValueError("games: expected at least one MiniGrid id, got []")
        known = sorted(k for k in gym.registry if k.startswith("MiniGrid-"))
        unknown = [g for g in games if g not in known]
        if unknown:
            raise ValueError(f"games: expected MiniGrid ids (e.g. {known[:3]}), got unknown {unknown}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < len(games):
            raise ValueError(f"num_envs: expected an int >= {len(games)} (one per game), got {num_envs!r}")
        self._game_names = list(games)
        self.games = [games[i % len(games)] for i in range(num_envs)]
        self._envs = [gym.make(g).unwrapped for g in self.games]
        for game, env in zip(self.games, self._envs, strict=True):
            if env.action_space.n != MINIGRID_ACTIONS:
                raise ValueError(
                    f"games: expected games with {MINIGRID_ACTIONS} actions, got {game!r} with "
                    f"{env.action_space.n}"
                )
        self.num_envs, self.num_actions, self.obs_shape = num_envs, MINIGRID_ACTIONS, MINIGRID_OBS_SHAPE
        self.levels, self.draw = levels, draw
        self._rng = np.random.default_rng(seed)
        self._episodes = np.zeros(num_envs, dtype=np.int64)  # episodes started per env
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._obs = np.zeros((num_envs, *self.obs_shape), dtype=np.uint8)
        # what the environments' states follow from (state_dict): each one's current level (its reset
        # seed, -1 before the first reset) and the actions taken since
        self._levels = np.full(num_envs, -1, dtype=np.int64)
        self._moves: list[list[int]] = [[] for _ in range(num_envs)]

    def _reset_env(self, i: int) -> None:
        if self.draw == "cycle":  # the k-th of a game's n_g envs: levels k, k + n_g, k + 2 n_g, ...
            g = len(self._game_names)
            n_g = len(range(i % g, self.num_envs, g))
            offset = (i // g + int(self._episodes[i]) * n_g) % self.levels.count
        else:
            offset = int(self._rng.integers(self.levels.count))
        self._episodes[i] += 1
        self._levels[i], self._moves[i] = self.levels.start + offset, []
        obs, _ = self._envs[i].reset(seed=int(self._levels[i]))
        self._obs[i] = obs["image"].transpose(2, 0, 1)
        self._returns[i], self._lengths[i] = 0.0, 0

    def reset(self) -> Tensor:
        for i in range(self.num_envs):
            self._reset_env(i)
        return torch.from_numpy(self._obs.copy())

    def step(self, actions: Tensor) -> StepResult:
        acts = self._actions(actions)
        reward = np.zeros(self.num_envs, dtype=np.float32)
        done = np.zeros(self.num_envs, dtype=bool)
        ep_return = np.full(self.num_envs, np.nan, dtype=np.float32)
        ep_length = np.zeros(self.num_envs, dtype=np.int64)
        for i, env in enumerate(self._envs):
            obs, r, terminated, truncated, _ = env.step(int(acts[i]))
            self._moves[i].append(int(acts[i]))
            reward[i] = r
            self._returns[i] += r
            self._lengths[i] += 1
            if terminated or truncated:
                done[i] = True
                ep_return[i], ep_length[i] = self._returns[i], self._lengths[i]
                self._reset_env(i)
            else:
                self._obs[i] = obs["image"].transpose(2, 0, 1)
        return StepResult.from_numpy(self._obs, reward, done, ep_return, ep_length)

    def state_dict(self) -> dict[str, Any]:
        """The environments as their levels and the actions taken since each was reset (MiniGrid's
        dynamics are deterministic given the reset seed): plain numbers, no pickled objects."""
        return {
            "levels": self._levels.copy(),
            "moves": [list(m) for m in self._moves],
            "rng": self._rng.bit_generator.state,
            "returns": self._returns.copy(),
            "lengths": self._lengths.copy(),
            "episodes": self._episodes.copy(),
            "obs": self._obs.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` by resetting every environment to its level and replaying its
        actions.

        Raises:
            RunFolderError: for a state of an earlier version (pickled environments), which cannot be
                continued.
            RuntimeError: if a replayed environment's observation differs from the stored one.
        """
        if "envs" in state:  # earlier versions pickled the environment objects themselves
            raise RunFolderError(
                "checkpoint: its MiniGrid environments are pickled Python objects (an earlier version's "
                "format, which cannot continue in this one); train into a new folder (`rl eval` of the "
                "run still works, with --trust-pickle if you wrote it yourself)"
            )
        self._replay(np.asarray(state["levels"]), [list(m) for m in state["moves"]], state["obs"])
        self._rng.bit_generator.state = state["rng"]
        self._returns, self._lengths = state["returns"].copy(), state["lengths"].copy()
        self._episodes = state["episodes"].copy()
        self._obs = state["obs"].copy()

    def _replay(self, levels: np.ndarray, moves: list[list[int]], obs: np.ndarray) -> None:
        for i, env in enumerate(self._envs):
            if levels[i] < 0:
                continue
            seen, _ = env.reset(seed=int(levels[i]))
            for action in moves[i]:
                seen, *_ = env.step(action)
            if not np.array_equal(seen["image"].transpose(2, 0, 1), obs[i]):
                raise RuntimeError(
                    f"MiniGridVecEnv: environment {i} ({self.games[i]}) did not replay exactly"
                )
        self._levels, self._moves = levels.astype(np.int64), moves

    def close(self) -> None:
        for env in self._envs:
            env.close()
