"""The RL suites as one table: what an agent sees of each, how its environments are built, how returns
are normalised and how a policy is scored on a range of levels.

- :data:`SUITES` / :data:`SUITE_SPECS`: ``minigrid`` (symbolic 7×7 views, 7 actions; Chevalier-Boisvert
  et al. 2023, "Minigrid & Miniworld: Modular & Customizable Reinforcement Learning Environments for
  Goal-Oriented Tasks") and ``procgen`` (64×64 RGB, 15 actions; Cobbe et al. 2020, "Leveraging
  Procedural Generation to Benchmark Reinforcement Learning").
- :func:`normalised_score`: ``(R − R_min) / (R_max − R_min)`` with :data:`NORMALISATION`.
- :func:`make_env`: the vectorised environments of a suite from plain values (no recipe config).
- :func:`level_scores` / :func:`mean_normalised`: per-game greedy (or random-policy) returns and
  normalised scores of an evaluation environment, and their mean over games.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from fastweights.checks import check_choice, check_int
from fastweights.rl.agent import Agent
from fastweights.rl.envs import MINIGRID_ACTIONS, MINIGRID_OBS_SHAPE, LevelSet, MiniGridVecEnv, VecEnv
from fastweights.rl.procgen import (
    PROCGEN_ACTIONS,
    PROCGEN_GAMES,
    PROCGEN_NORMALISATION,
    PROCGEN_OBS_SHAPE,
    ProcgenVecEnv,
)
from fastweights.rl.rollout import evaluate_greedy, evaluate_random

__all__ = [
    "SUITES",
    "SuiteSpec",
    "SUITE_SPECS",
    "MINIGRID_NORMALISATION",
    "NORMALISATION",
    "suite_spec",
    "normalisation_constants",
    "normalised_score",
    "make_env",
    "level_scores",
    "mean_normalised",
]

SUITES = ("minigrid", "procgen")  # procgen: the optional extra procgen2 (pip install -e '.[rl]')


class SuiteSpec(NamedTuple):
    """What an agent sees of a suite: ``obs_shape`` (one uint8 observation, channels first),
    ``num_actions`` (the discrete action set every game of the suite shares) and ``encoder`` (the
    :func:`~fastweights.rl.encoders.make_encoder` name that ``model.encoder: auto`` picks)."""

    obs_shape: tuple[int, ...]
    num_actions: int
    encoder: str


#: Per suite: (observation shape, number of actions, the encoder ``auto`` picks). MiniGrid: the
#: egocentric 7×7 view as object / colour / state indices ``[3, 7, 7]`` and its 7 actions; ProcGen:
#: ``[3, 64, 64]`` RGB and its full 15-action set (Cobbe et al. 2020), read by the IMPALA-CNN.
SUITE_SPECS: dict[str, SuiteSpec] = {
    "minigrid": SuiteSpec(MINIGRID_OBS_SHAPE, MINIGRID_ACTIONS, "minigrid"),
    "procgen": SuiteSpec(PROCGEN_OBS_SHAPE, PROCGEN_ACTIONS, "impala"),
}

#: ``(R_min, R_max)`` of every MiniGrid game: an episode returns ``1 − 0.9 · steps / max_steps`` on
#: success and 0 otherwise (``MiniGridEnv._reward``, Chevalier-Boisvert et al. 2023), so returns lie in
#: ``[0, 1)``.
MINIGRID_NORMALISATION: tuple[float, float] = (0.0, 1.0)

#: ``(R_min, R_max)`` per ProcGen game (Cobbe et al. 2020's easy-mode constants, the appendix table
#: "Normalization Constants"; :data:`~fastweights.rl.procgen.PROCGEN_NORMALISATION`) and, under the key
#: ``"minigrid"``, the constants shared by every MiniGrid game.
NORMALISATION: dict[str, tuple[float, float]] = {"minigrid": MINIGRID_NORMALISATION, **PROCGEN_NORMALISATION}


def suite_spec(suite: str) -> SuiteSpec:
    """The :class:`SuiteSpec` of ``suite`` (one of :data:`SUITES`).

    Raises:
        ValueError: ``suite: expected one of ['minigrid', 'procgen'], got …`` for another name.
    """
    check_choice("suite", suite, SUITES)
    return SUITE_SPECS[suite]


def normalisation_constants(suite: str, game: str) -> tuple[float, float]:
    """``(R_min, R_max)`` of ``game`` of ``suite``: :data:`MINIGRID_NORMALISATION` for any MiniGrid game,
    Cobbe et al. 2020's easy-mode constants (:data:`~fastweights.rl.procgen.PROCGEN_NORMALISATION`) for a
    ProcGen game. Both are in units of episode return (unclipped rewards summed over an episode).

    Raises:
        ValueError: naming ``suite`` for an unknown suite, ``game`` for a non-string game or a game that
            ProcGen does not have.
    """
    check_choice("suite", suite, SUITES)
    if not isinstance(game, str):
        raise ValueError(f"game: expected a game name (str), got {game!r}")
    if suite == "minigrid":
        return MINIGRID_NORMALISATION
    if game not in PROCGEN_NORMALISATION:
        raise ValueError(f"game: expected a ProcGen game of {list(PROCGEN_GAMES)}, got {game!r}")
    return PROCGEN_NORMALISATION[game]


def normalised_score(suite: str, game: str, mean_return: float) -> float:
    """``(R − R_min) / (R_max − R_min)`` of a mean episode return ``R`` of ``game``, with the constants of
    :func:`normalisation_constants` (Cobbe et al. 2020's normalised return: 0 = ``R_min``, 1 = ``R_max``;
    not clipped, so a return outside ``[R_min, R_max]`` gives a score outside ``[0, 1]``).

    Args:
        suite: one of :data:`SUITES`.
        game: the game's name (a MiniGrid gymnasium id, or a ProcGen game of
            :data:`~fastweights.rl.procgen.PROCGEN_GAMES`).
        mean_return: a Python number, the mean unclipped episode return (NaN passes through).

    Returns:
        A float; 1.0 = ``R_max``.

    Raises:
        ValueError: naming ``suite`` / ``game`` (see :func:`normalisation_constants`) or ``mean_return``
            when it is not a real number.
    """
    r_min, r_max = normalisation_constants(suite, game)
    if isinstance(mean_return, bool) or not isinstance(mean_return, int | float):
        raise ValueError(f"mean_return: expected a real number, got {mean_return!r}")
    return (mean_return - r_min) / (r_max - r_min)


def make_env(
    suite: str,
    games: Sequence[str],
    num_envs: int,
    levels: LevelSet,
    *,
    seed: int = 0,
    evaluation: bool = False,
    distribution_mode: str = "easy",
) -> VecEnv:
    """``num_envs`` environments of ``games`` of ``suite`` (env ``i`` plays ``games[i % len(games)]``)
    on ``levels``, as one :class:`~fastweights.rl.envs.VecEnv` (observations ``[num_envs, *obs_shape]``
    uint8, see :data:`SUITE_SPECS`).

    MiniGrid draws each episode's level uniformly from ``levels`` in training, and in evaluation
    (``evaluation=True``) cycles them per game so that every level is visited once before one repeats;
    ProcGen draws levels itself, uniformly, in evaluation too (the reference protocol:
    ``num_levels=200, start_level=1000``, 200 episodes).

    Args:
        suite: one of :data:`SUITES`.
        games: the games' names (a list or tuple of MiniGrid gymnasium ids or ProcGen game names).
        num_envs: environments stepped together, ``>= len(games)``.
        levels: the level range episodes are played on.
        seed: ``>= 0``; seeds MiniGrid's level draws / ProcGen's ``rand_seed`` (game ``g`` gets
            ``seed + g``).
        evaluation: MiniGrid's level order (see above); ProcGen ignores it.
        distribution_mode: ProcGen's ``"easy"`` or ``"hard"`` (MiniGrid ignores it).

    Raises:
        ValueError: one line naming the argument (``suite``, ``games``, ``num_envs``, ``levels``,
            ``seed``, ``evaluation`` or ``distribution_mode``), e.g. for games the suite does not have.
        ImportError: when the suite's package (``minigrid``; ``procgen2`` for ProcGen) is not installed.
    """
    check_choice("suite", suite, SUITES)
    if isinstance(games, str) or not isinstance(games, Sequence):
        raise ValueError(f"games: expected a list of game names, got {games!r}")
    if not isinstance(levels, LevelSet):
        raise ValueError(f"levels: expected a LevelSet(start, count), got {levels!r}")
    check_int("seed", seed, low=0)
    if not isinstance(evaluation, bool):
        raise ValueError(f"evaluation: expected true or false, got {evaluation!r}")
    if suite == "procgen":
        return ProcgenVecEnv(list(games), num_envs, levels, seed=seed, distribution_mode=distribution_mode)
    return MiniGridVecEnv(list(games), num_envs, levels, seed=seed, draw="cycle" if evaluation else "uniform")


def level_scores(
    agent: Agent | None,
    env: VecEnv,
    suite: str,
    episodes_per_env: int,
    *,
    reward_clip: str = "sign",
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Score a policy on ``env`` (an evaluation environment of ``suite``, e.g. ``make_env(…,
    evaluation=True)``): the first ``episodes_per_env`` episodes of each of its environments with greedy
    actions of ``agent`` (:func:`~fastweights.rl.rollout.evaluate_greedy`, its previous-reward input
    clipped by ``reward_clip`` as in training), or with uniformly random actions drawn by a generator
    seeded with ``seed`` when ``agent`` is ``None`` (the random-policy reference). ``env`` is reset here
    and left open (the caller closes it).

    Returns:
        Per game of ``env``, in order of first appearance: ``{"mean_return", "std_return"`` (population
        std), ``"episodes"`` (an int: the game's environments × ``episodes_per_env``), ``"normalised"``
        (:func:`normalised_score` of the mean)``}``; returns are unclipped episode returns.

    Raises:
        ValueError: for ``episodes_per_env < 1``, an unknown ``reward_clip``, or naming ``suite`` / ``game``
            for a suite or game without normalisation constants.
    """
    for game in dict.fromkeys(env.games):
        normalisation_constants(suite, game)  # fail before playing
    if agent is None:
        returns = evaluate_random(env, episodes_per_env, seed=seed)
    else:
        returns = evaluate_greedy(agent, env, episodes_per_env, reward_clip=reward_clip)
    return {
        game: {
            "mean_return": statistics.fmean(r),
            "std_return": statistics.pstdev(r),
            "episodes": len(r),
            "normalised": normalised_score(suite, game, statistics.fmean(r)),
        }
        for game, r in returns.items()
    }


def mean_normalised(scores: Mapping[str, Mapping[str, float]]) -> float:
    """The mean over games of the ``"normalised"`` scores of :func:`level_scores` (each game weighs the
    same, whatever its number of episodes).

    Raises:
        ValueError: ``scores: expected …`` when there is no game, or a game without a ``"normalised"``
            score.
    """
    if not scores or not all(isinstance(s, Mapping) and "normalised" in s for s in scores.values()):
        raise ValueError(
            f"scores: expected a non-empty {{game: {{'normalised': …}}}} mapping, got {scores!r}"
        )
    return statistics.fmean(s["normalised"] for s in scores.values())
