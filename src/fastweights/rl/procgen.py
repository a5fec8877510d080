"""ProcGen games (Cobbe et al. 2020) as a :class:`~fastweights.rl.envs.VecEnv` (the SRWM paper's suite, §4.3).

ProcGen comes from the optional ``procgen2`` package (``pip install -e .[rl]``; it pins numpy < 2 and is
imported only when a :class:`ProcgenVecEnv` is built). Each game runs as one gym3
``ProcgenGym3Env`` holding all of that game's environments (ProcGen steps them in C++); observations
are 64×64 RGB, ``[3, 64, 64]`` uint8, and every game has the same 15 actions. ProcGen draws each
episode's level itself, uniformly from ``levels`` (``start_level``, ``num_levels``), seeded by the
env's ``rand_seed``: exactly the reference protocol (training on levels 0–199; testing with
``num_levels=200, start_level=1000/1200/1400``, ProcGen paper §2 and the SRWM paper's released code).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fastweights.rl.envs import LevelSet, StepResult, VecEnv

__all__ = [
    "PROCGEN_GAMES",
    "PROCGEN_ACTIONS",
    "PROCGEN_OBS_SHAPE",
    "PROCGEN_NORMALISATION",
    "DISTRIBUTION_MODES",
    "ProcgenVecEnv",
    "import_procgen",
]

PROCGEN_ACTIONS = 15  # ProcGen's full action set, shared by all 16 games
PROCGEN_OBS_SHAPE = (3, 64, 64)
DISTRIBUTION_MODES = ("easy", "hard")

#: (R_min, R_max) of the *easy* distribution mode, Cobbe et al. 2020 ("Leveraging Procedural
#: Generation to Benchmark Reinforcement Learning"), appendix "Normalization constants"; the SRWM
#: paper's Table 3 normalises with these.
PROCGEN_NORMALISATION: dict[str, tuple[float, float]] = {
    "bigfish": (1.0, 40.0),
    "bossfight": (0.5, 13.0),
    "caveflyer": (3.5, 12.0),
    "chaser": (0.5, 13.0),
    "climber": (2.0, 12.6),
    "coinrun": (5.0, 10.0),
    "dodgeball": (1.5, 19.0),
    "fruitbot": (-1.5, 32.4),
    "heist": (3.5, 10.0),
    "jumper": (3.0, 10.0),
    "leaper": (3.0, 10.0),
    "maze": (5.0, 10.0),
    "miner": (1.5, 13.0),
    "ninja": (3.5, 10.0),
    "plunder": (4.5, 30.0),
    "starpilot": (2.5, 64.0),
}
PROCGEN_GAMES = tuple(PROCGEN_NORMALISATION)


def import_procgen() -> Any:
    """Import ``procgen``'s ``ProcgenGym3Env`` (gym 0.26's import-time notice is silenced).

    Raises:
        ImportError: naming the extra to install when ``procgen2`` (or its numpy < 2) is missing.
    """
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            from procgen import ProcgenGym3Env
    except ImportError as err:
        raise ImportError(
            "ProcGen environments need the optional 'procgen2' package (pip install -e '.[rl]' or "
            f"RL=1 make setup; it needs numpy < 2); import failed: {err}"
        ) from None
    return ProcgenGym3Env


class ProcgenVecEnv(VecEnv):
    """``num_envs`` ProcGen environments, assigned to ``games`` in turn (env ``i`` plays
    ``games[i % len(games)]``), on the levels of ``levels`` (drawn uniformly by ProcGen).

    Args:
        games: ProcGen game names (:data:`PROCGEN_GAMES`), e.g. ``["bigfish", "maze"]``.
        num_envs: ``N >= len(games)``.
        levels: the level set episodes are drawn from.
        seed: ``rand_seed`` of the first game's env (game ``g`` gets ``seed + g``): the level sequence
            and the games' randomness are a function of it.
        distribution_mode: ``"easy"`` (the paper's) or ``"hard"``.
        num_threads: ProcGen's stepping threads per game (0: ProcGen's default).

    Raises:
        ValueError: for an unknown game (naming it and listing the games), ``num_envs < len(games)``
            or an unknown distribution mode.
        ImportError: when ``procgen2`` is not installed.
    """

    def __init__(
        self,
        games: list[str],
        num_envs: int,
        levels: LevelSet,
        *,
        seed: int = 0,
        distribution_mode: str = "easy",
        num_threads: int = 0,
    ) -> None:
        if not games:
            raise ValueError(f"games: expected at least one ProcGen game of {list(PROCGEN_GAMES)}, got []")
        unknown = [g for g in games if g not in PROCGEN_GAMES]
        if unknown:
            raise ValueError(f"games: expected ProcGen games of {list(PROCGEN_GAMES)}, got unknown {unknown}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < len(games):
            raise ValueError(f"num_envs: expected an int >= {len(games)} (one per game), got {num_envs!r}")
        if distribution_mode not in DISTRIBUTION_MODES:
            raise ValueError(
                f"distribution_mode: expected one of {list(DISTRIBUTION_MODES)}, got {distribution_mode!r}"
            )
        self._make = import_procgen()
        self._game_names = list(games)
        self.games = [games[i % len(games)] for i in range(num_envs)]
        self.num_envs, self.num_actions, self.obs_shape = num_envs, PROCGEN_ACTIONS, PROCGEN_OBS_SHAPE
        self.levels, self.seed = levels, seed
        self.distribution_mode, self.num_threads = distribution_mode, num_threads
        # env indices of each game (env i -> game i % G, slot i // G inside that game's gym3 env)
        self._index = [np.arange(g, num_envs, len(games)) for g in range(len(games))]
        self._envs: list[Any] = []
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._obs = np.zeros((num_envs, *self.obs_shape), dtype=np.uint8)

    def _observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Reward and ``first`` flags of the last step, ``[N]`` each; fills ``self._obs``."""
        reward = np.zeros(self.num_envs, dtype=np.float32)
        first = np.zeros(self.num_envs, dtype=bool)
        for env, idx in zip(self._envs, self._index, strict=True):
            r, ob, f = env.observe()
            reward[idx], first[idx] = r, f
            self._obs[idx] = ob["rgb"].transpose(0, 3, 1, 2)
        return reward, first

    def reset(self) -> Tensor:
        self.close()
        extra = {"num_threads": self.num_threads} if self.num_threads else {}
        self._envs = [
            self._make(
                num=len(idx),
                env_name=game,
                num_levels=self.levels.count,
                start_level=self.levels.start,
                distribution_mode=self.distribution_mode,
                rand_seed=self.seed + g,
                **extra,
            )
            for g, (game, idx) in enumerate(zip(self._game_names, self._index, strict=True))
        ]
        self._observe()
        self._returns[:], self._lengths[:] = 0.0, 0
        return torch.from_numpy(self._obs.copy())

    def step(self, actions: Tensor) -> StepResult:
        if not self._envs:
            raise RuntimeError("ProcgenVecEnv.step: call reset() first")
        acts = self._actions(actions)
        for env, idx in zip(self._envs, self._index, strict=True):
            env.act(acts[idx].astype(np.int32))
        reward, done = self._observe()  # gym3: `first` marks the first observation of a new episode
        self._returns += reward
        self._lengths += 1
        ep_return = np.where(done, self._returns, np.nan).astype(np.float32)
        ep_length = np.where(done, self._lengths, 0).astype(np.int64)
        self._returns[done], self._lengths[done] = 0.0, 0
        return StepResult.from_numpy(self._obs, reward, done, ep_return, ep_length)

    def state_dict(self) -> dict[str, Any]:
        if not self._envs:
            raise RuntimeError("ProcgenVecEnv.state_dict: call reset() first")
        return {
            "envs": [env.callmethod("get_state") for env in self._envs],  # ProcGen's own serialisation
            "returns": self._returns.copy(),
            "lengths": self._lengths.copy(),
            "obs": self._obs.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self._envs:
            self.reset()
        for env, env_state in zip(self._envs, state["envs"], strict=True):
            env.callmethod("set_state", env_state)
        self._returns, self._lengths = state["returns"].copy(), state["lengths"].copy()
        self._obs = state["obs"].copy()

    def close(self) -> None:
        for env in self._envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()
        self._envs = []
