"""MiniGrid vectorised environments: level sets, auto-reset, determinism, state save/restore."""

from __future__ import annotations

import pytest
import torch

from fastweights.rl.envs import MINIGRID_ACTIONS, LevelSet, MiniGridVecEnv

GAMES = ["MiniGrid-Empty-Random-6x6-v0", "MiniGrid-LavaGapS5-v0"]


def _rollout(env, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        out.append(env.step(torch.randint(MINIGRID_ACTIONS, (env.num_envs,), generator=g)))
    return out


def _spy_levels(env):
    """``{env index: [level seeds of its resets]}``, filled as ``env`` resets its environments."""
    seen = {i: [] for i in range(env.num_envs)}
    for i, inner in enumerate(env._envs):

        def spy(*args, seed=None, _orig=inner.reset, _i=i, **kw):
            seen[_i].append(seed)
            return _orig(*args, seed=seed, **kw)

        inner.reset = spy
    return seen


def test_games_are_assigned_in_turn_and_obs_are_symbolic_views():
    env = MiniGridVecEnv(GAMES, 4, LevelSet(0, 10))
    assert env.games == [GAMES[0], GAMES[1], GAMES[0], GAMES[1]]
    obs = env.reset()
    assert obs.shape == (4, 3, 7, 7) and obs.dtype == torch.uint8
    step = env.step(torch.zeros(4, dtype=torch.int64))
    assert step.reward.dtype == torch.float32 and step.done.dtype == torch.bool


def test_levels_come_from_the_level_set_and_are_reproducible():
    a = MiniGridVecEnv(GAMES, 2, LevelSet(1000, 3), seed=5)
    b = MiniGridVecEnv(GAMES, 2, LevelSet(1000, 3), seed=5)
    levels = _spy_levels(a)[0]
    torch.testing.assert_close(a.reset(), b.reset())
    ra, rb = _rollout(a, 300), _rollout(b, 300)
    for x, y in zip(ra, rb, strict=True):
        torch.testing.assert_close(x.obs, y.obs)
        torch.testing.assert_close(x.reward, y.reward)
    assert len(levels) > 1 and all(1000 <= s < 1003 for s in levels)


def test_cycle_draw_gives_each_env_distinct_levels_with_stride_n():
    env = MiniGridVecEnv(["MiniGrid-LavaGapS5-v0"], 2, LevelSet(100, 6), draw="cycle")
    seen = _spy_levels(env)
    env.reset()
    _rollout(env, 300)
    assert seen[0][:3] == [100, 102, 104] and seen[1][:3] == [101, 103, 105]
    assert seen[0][3] == 100  # then it wraps around
    with pytest.raises(ValueError, match=r"draw: expected 'uniform' or 'cycle'"):
        MiniGridVecEnv(GAMES, 2, LevelSet(0, 3), draw="random")


def test_cycle_draw_covers_every_level_for_every_game():
    env = MiniGridVecEnv(GAMES, 4, LevelSet(1000, 8), draw="cycle")  # 2 games x 2 envs, 8 levels
    seen = _spy_levels(env)
    env.reset()
    while min(len(v) for v in seen.values()) < 4:
        _rollout(env, 50)
    # env i plays games[i % 2]; a game's two envs play the strides 0, 2, 4, 6 and 1, 3, 5, 7
    assert seen[0][:4] == seen[1][:4] == [1000, 1002, 1004, 1006]
    assert seen[2][:4] == seen[3][:4] == [1001, 1003, 1005, 1007]


def test_done_reports_the_finished_episode_and_resets():
    env = MiniGridVecEnv(["MiniGrid-LavaGapS5-v0"], 3, LevelSet(0, 5))
    env.reset()
    total = torch.zeros(3)
    finished = 0
    for step in _rollout(env, 400):
        total += step.reward
        ended = step.done
        assert torch.isnan(step.episode_return[~ended]).all() and (step.episode_length[~ended] == 0).all()
        assert (step.episode_length[ended] >= 1).all()
        finished += int(ended.sum())
    assert finished > 3  # LavaGap episodes end on lava within a few random steps


def test_state_dict_continues_bit_identically():
    env = MiniGridVecEnv(GAMES, 3, LevelSet(0, 50), seed=1)
    env.reset()
    _rollout(env, 50)
    state = env.state_dict()
    first = _rollout(env, 200, seed=7)
    other = MiniGridVecEnv(GAMES, 3, LevelSet(0, 50), seed=99)
    other.reset()
    other.load_state_dict(state)
    second = _rollout(other, 200, seed=7)
    for x, y in zip(first, second, strict=True):
        assert torch.equal(x.obs, y.obs) and torch.equal(x.reward, y.reward) and torch.equal(x.done, y.done)


def test_train_and_test_level_sets_of_the_protocol_are_disjoint():
    assert not LevelSet(0, 200).overlaps(LevelSet(1000, 600))
    assert LevelSet(0, 200).overlaps(LevelSet(199, 1))
    assert not LevelSet(0, 200).overlaps(LevelSet(200, 1))


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(games=["MiniGrid-Nope-v0"]), r"games: expected MiniGrid ids .*Nope"),
        (dict(games=[]), r"games: expected at least one"),
        (dict(games=["MiniGrid-Dynamic-Obstacles-5x5-v0"]), r"games: expected games with 7 actions"),
        (dict(num_envs=1), r"num_envs: expected an int >= 2"),
    ],
)
def test_bad_arguments_are_named(kwargs, pattern):
    args = dict(games=GAMES, num_envs=2, levels=LevelSet(0, 3)) | kwargs
    with pytest.raises(ValueError, match=pattern):
        MiniGridVecEnv(args["games"], args["num_envs"], args["levels"])


@pytest.mark.parametrize(
    ("start", "count", "pattern"),
    [
        (-1, 3, r"levels\.start: expected an int >= 0"),
        (0, 0, r"levels\.count: expected an int >= 1"),
        (0, 2.5, r"levels\.count"),
    ],
)
def test_bad_level_sets_are_named(start, count, pattern):
    with pytest.raises(ValueError, match=pattern):
        LevelSet(start, count)


def test_bad_actions_shape_is_named():
    env = MiniGridVecEnv(GAMES, 2, LevelSet(0, 3))
    env.reset()
    with pytest.raises(ValueError, match=r"actions: expected shape \(2,\)"):
        env.step(torch.zeros(3, dtype=torch.int64))
