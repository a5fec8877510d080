"""The suite table: specs, normalisation constants and scores, environments from plain values, level
scoring (MiniGrid for real, ProcGen through a stand-in of ``import_procgen``)."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
import torch

from fastweights.rl import procgen as procgen_module
from fastweights.rl.agent import Agent
from fastweights.rl.cores import Core
from fastweights.rl.encoders import make_encoder
from fastweights.rl.envs import LevelSet, MiniGridVecEnv, StepResult, VecEnv
from fastweights.rl.procgen import PROCGEN_GAMES, ProcgenVecEnv
from fastweights.rl.rollout import evaluate_random
from fastweights.rl.suites import (
    NORMALISATION,
    SUITE_SPECS,
    SUITES,
    level_scores,
    make_env,
    mean_normalised,
    normalisation_constants,
    normalised_score,
    suite_spec,
)

GAMES = ["MiniGrid-Empty-Random-5x5-v0", "MiniGrid-LavaGapS5-v0"]


def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


# ---- the table ---------------------------------------------------------------------------------------


def test_suite_specs_give_shapes_actions_and_the_auto_encoder():
    assert SUITES == ("minigrid", "procgen") and set(SUITE_SPECS) == set(SUITES)
    assert SUITE_SPECS["minigrid"] == ((3, 7, 7), 7, "minigrid")
    assert SUITE_SPECS["procgen"] == ((3, 64, 64), 15, "impala")
    spec = suite_spec("procgen")
    assert (spec.obs_shape, spec.num_actions, spec.encoder) == ((3, 64, 64), 15, "impala")
    with pytest.raises(
        ValueError, match=r"^suite: expected one of \['minigrid', 'procgen'\], got 'atari'$"
    ) as e:
        suite_spec("atari")
    _one_line(e)


def test_normalisation_constants_are_minigrid_0_1_and_cobbe_et_al_easy_mode():
    assert NORMALISATION["minigrid"] == (0.0, 1.0)
    assert set(NORMALISATION) == {"minigrid", *PROCGEN_GAMES} and len(PROCGEN_GAMES) == 16
    # Cobbe et al. 2020, easy mode: a few of the table's rows
    assert normalisation_constants("procgen", "bigfish") == (1.0, 40.0)
    assert normalisation_constants("procgen", "fruitbot") == (-1.5, 32.4)
    assert normalisation_constants("procgen", "starpilot") == (2.5, 64.0)
    assert normalisation_constants("minigrid", "MiniGrid-DoorKey-5x5-v0") == (0.0, 1.0)


@pytest.mark.parametrize(
    ("suite", "game", "mean_return", "expected"),
    [
        ("minigrid", "MiniGrid-DoorKey-5x5-v0", 0.25, 0.25),  # (0, 1): the return itself
        ("minigrid", "MiniGrid-LavaGapS5-v0", 0.0, 0.0),
        ("procgen", "maze", 7.5, 0.5),  # (5, 10)
        ("procgen", "maze", 10.0, 1.0),
        ("procgen", "fruitbot", -1.5, 0.0),  # R_min
        ("procgen", "bigfish", 20.5, 0.5),  # (1, 40)
        ("procgen", "leaper", 13.5, 1.5),  # (3, 10): not clipped above R_max
        ("procgen", "maze", 0.0, -1.0),  # nor below R_min
        ("procgen", "coinrun", 5, 0.0),  # an int return; (5, 10)
    ],
)
def test_normalised_score_at_known_points(suite, game, mean_return, expected):
    assert normalised_score(suite, game, mean_return) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (("atari", "pong", 1.0), r"^suite: expected one of \['minigrid', 'procgen'\], got 'atari'$"),
        (("procgen", "pong", 1.0), r"^game: expected a ProcGen game of \['bigfish', .*\], got 'pong'$"),
        (("procgen", None, 1.0), r"^game: expected a game name \(str\), got None$"),
        (("minigrid", "MiniGrid-Empty-5x5-v0", "0.5"), r"^mean_return: expected a real number, got '0.5'$"),
        (("procgen", "maze", True), r"^mean_return: expected a real number, got True$"),
    ],
)
def test_normalised_score_bad_inputs_are_one_line_errors_naming_the_argument(args, pattern):
    with pytest.raises(ValueError, match=pattern) as e:
        normalised_score(*args)
    _one_line(e)


# ---- environments from plain values -------------------------------------------------------------------


def test_make_env_builds_minigrid_from_plain_values():
    env = make_env("minigrid", tuple(GAMES), 4, LevelSet(0, 10), seed=3)
    try:
        assert isinstance(env, MiniGridVecEnv) and env.draw == "uniform"
        assert env.games == [GAMES[0], GAMES[1], GAMES[0], GAMES[1]]
        obs = env.reset()
        assert tuple(obs.shape) == (4, *SUITE_SPECS["minigrid"].obs_shape) and obs.dtype == torch.uint8
        assert env.num_actions == SUITE_SPECS["minigrid"].num_actions
        # the same environments (and level draws) as the class built directly with the same seed
        ref = MiniGridVecEnv(GAMES, 4, LevelSet(0, 10), seed=3)
        torch.testing.assert_close(obs, ref.reset())
        g = torch.Generator().manual_seed(0)
        for _ in range(40):
            a = torch.randint(7, (4,), generator=g)
            torch.testing.assert_close(env.step(a).obs, ref.step(a).obs)
        ref.close()
    finally:
        env.close()
    ev = make_env("minigrid", GAMES, 2, LevelSet(1000, 8), evaluation=True, distribution_mode="hard")
    assert ev.draw == "cycle" and ev.levels == LevelSet(1000, 8)  # distribution_mode: ProcGen's only
    ev.close()


def test_make_env_builds_procgen_with_seed_levels_and_mode(monkeypatch):
    monkeypatch.setattr(procgen_module, "import_procgen", lambda: object)  # not built before reset()
    env = make_env("procgen", ["maze", "leaper"], 4, LevelSet(1000, 200), seed=5, distribution_mode="hard")
    assert isinstance(env, ProcgenVecEnv)
    assert env.games == ["maze", "leaper", "maze", "leaper"] and env.num_actions == 15
    assert (env.seed, env.levels, env.distribution_mode) == (5, LevelSet(1000, 200), "hard")
    assert env.obs_shape == SUITE_SPECS["procgen"].obs_shape


@pytest.mark.parametrize(
    ("suite", "games", "num_envs", "levels", "kwargs", "pattern"),
    [
        ("atari", GAMES, 2, LevelSet(0, 5), {}, r"^suite: expected one of \['minigrid', 'procgen'\]"),
        (
            "minigrid",
            "MiniGrid-Empty-5x5-v0",
            2,
            LevelSet(0, 5),
            {},
            r"^games: expected a list of game names",
        ),
        ("minigrid", ["MiniGrid-Nope-v0"], 2, LevelSet(0, 5), {}, r"^games: expected MiniGrid ids .*Nope"),
        ("minigrid", [], 2, LevelSet(0, 5), {}, r"^games: expected at least one MiniGrid id"),
        (
            "minigrid",
            GAMES,
            1,
            LevelSet(0, 5),
            {},
            r"^num_envs: expected an int >= 2 \(one per game\), got 1$",
        ),
        ("minigrid", GAMES, 2, (0, 5), {}, r"^levels: expected a LevelSet\(start, count\), got \(0, 5\)$"),
        ("minigrid", GAMES, 2, LevelSet(0, 5), {"seed": -1}, r"^seed: expected an int >= 0, got -1$"),
        ("minigrid", GAMES, 2, LevelSet(0, 5), {"evaluation": 1}, r"^evaluation: expected true or false"),
        ("procgen", ["maze", "pong"], 2, LevelSet(0, 5), {}, r"^games: expected ProcGen games .*\['pong'\]$"),
        (
            "procgen",
            ["maze"],
            2,
            LevelSet(0, 5),
            {"distribution_mode": "extreme"},
            r"^distribution_mode: expected one of \['easy', 'hard'\], got 'extreme'$",
        ),
    ],
)
def test_make_env_bad_inputs_are_one_line_errors_naming_the_argument(
    monkeypatch, suite, games, num_envs, levels, kwargs, pattern
):
    monkeypatch.setattr(procgen_module, "import_procgen", lambda: object)
    with pytest.raises(ValueError, match=pattern) as e:
        make_env(suite, games, num_envs, levels, **kwargs)
    _one_line(e)


# ---- level scoring ------------------------------------------------------------------------------------


class _FixedReturns(VecEnv):
    """Every step ends an episode of every environment; env ``i``'s ``k``-th episode returns
    ``returns[i][k]``."""

    def __init__(self, games: list[str], returns: list[list[float]]) -> None:
        self.games, self.returns = games, returns
        self.num_envs, self.num_actions, self.obs_shape = len(games), 15, (3, 64, 64)
        self.k = 0

    def reset(self) -> torch.Tensor:
        self.k = 0
        return torch.zeros(self.num_envs, *self.obs_shape, dtype=torch.uint8)

    def step(self, actions: torch.Tensor) -> StepResult:
        self._actions(actions)
        ret = torch.tensor([r[self.k] for r in self.returns], dtype=torch.float32)
        self.k += 1
        n = self.num_envs
        obs = torch.zeros(n, *self.obs_shape, dtype=torch.uint8)
        return StepResult(obs, ret, torch.ones(n, dtype=torch.bool), ret, torch.ones(n, dtype=torch.int64))

    def state_dict(self) -> dict[str, Any]:
        return {"k": self.k}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.k = state["k"]

    def close(self) -> None:
        pass


def test_level_scores_at_known_returns():
    env = _FixedReturns(["maze", "bigfish", "maze"], [[5.0, 10.0, 99.0], [1.0, 40.0, 99.0], [7.5, 7.5, 99.0]])
    scores = level_scores(None, env, "procgen", 2, seed=0)
    assert list(scores) == ["maze", "bigfish"]  # order of first appearance
    maze, bigfish = scores["maze"], scores["bigfish"]
    assert list(maze) == ["mean_return", "std_return", "episodes", "normalised"]
    assert maze["episodes"] == 4 and maze["mean_return"] == 7.5  # the first 2 of each of its 2 envs
    assert maze["std_return"] == pytest.approx(statistics.pstdev([5.0, 10.0, 7.5, 7.5]))
    assert maze["normalised"] == 0.5  # (5, 10)
    assert (bigfish["episodes"], bigfish["mean_return"], bigfish["std_return"]) == (2, 20.5, 19.5)
    assert bigfish["normalised"] == 0.5  # (1, 40)
    assert mean_normalised(scores) == 0.5


def test_level_scores_on_minigrid_match_the_evaluators_and_are_reproducible():
    def scores(agent):
        env = make_env("minigrid", GAMES, 4, LevelSet(1000, 8), evaluation=True)
        try:
            return level_scores(agent, env, "minigrid", 2, seed=1)
        finally:
            env.close()

    rand = scores(None)
    assert rand == scores(None)
    env = make_env("minigrid", GAMES, 4, LevelSet(1000, 8), evaluation=True)
    returns = evaluate_random(env, 2, seed=1)
    env.close()
    for game in GAMES:
        assert rand[game]["episodes"] == 4
        assert rand[game]["mean_return"] == statistics.fmean(returns[game])
        assert rand[game]["normalised"] == rand[game]["mean_return"]  # MiniGrid: (0, 1)
        assert 0.0 <= rand[game]["normalised"] <= 1.0
    spec = SUITE_SPECS["minigrid"]
    core = Core("ff", 16 + 1, d_model=8, num_layers=1, num_heads=2, d_ff=16)
    agent = Agent(make_encoder(spec.encoder, spec.obs_shape, 16), spec.num_actions, core).eval()
    greedy = scores(agent)
    assert greedy == scores(agent) and [g["episodes"] for g in greedy.values()] == [4, 4]


def test_level_scoring_bad_inputs_are_one_line_errors():
    env = _FixedReturns(["maze"], [[5.0]])
    for call, pattern in (
        (lambda: level_scores(None, env, "procgen", 0), r"^episodes: expected an int >= 1"),
        (lambda: level_scores(None, env, "minecraft", 1), r"^suite: expected one of"),
        (
            lambda: level_scores(None, _FixedReturns(["MiniGrid-x"], [[0.0]]), "procgen", 1),
            r"^game: expected",
        ),
        (lambda: mean_normalised({}), r"^scores: expected a non-empty"),
        (lambda: mean_normalised({"maze": {"mean_return": 1.0}}), r"^scores: expected a non-empty"),
    ):
        with pytest.raises(ValueError, match=pattern) as e:
            call()
        _one_line(e)
