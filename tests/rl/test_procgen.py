"""ProcGen adapter: the bookkeeping against a gym3 stand-in (always), the real games when ``procgen2``
is installed (the optional extra; skipped otherwise)."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
import torch

from fastweights.rl import procgen as procgen_module
from fastweights.rl.envs import LevelSet
from fastweights.rl.procgen import PROCGEN_ACTIONS, PROCGEN_GAMES, ProcgenVecEnv, import_procgen


class FakeGym3:
    """gym3's protocol (``act`` / ``observe`` / ``get_info`` / ``callmethod``): an episode on level
    ``s`` lasts ``2 + s % 3`` steps with reward = the action taken; the image is filled with the level
    number and the step count; levels drawn uniformly by a generator seeded with ``rand_seed``."""

    made: list[dict] = []

    def __init__(self, *, num, env_name, num_levels, start_level, distribution_mode, rand_seed):
        FakeGym3.made.append(dict(num=num, env_name=env_name, rand_seed=rand_seed, mode=distribution_mode))
        self.num, self.start, self.count = num, start_level, num_levels
        self.rng = np.random.default_rng(rand_seed)
        self.level = np.array([self._draw() for _ in range(num)])
        self.t = np.zeros(num, dtype=np.int64)
        self.rew, self.first = np.zeros(num, np.float32), np.ones(num, bool)
        self.actions: list[np.ndarray] = []

    def _draw(self) -> int:
        return self.start + int(self.rng.integers(self.count))

    def act(self, ac):
        assert ac.dtype == np.int32 and ac.shape == (self.num,)
        self.actions.append(ac.copy())
        self.rew = ac.astype(np.float32)
        self.t += 1
        self.first = self.t >= 2 + self.level % 3
        for i in np.nonzero(self.first)[0]:
            self.level[i], self.t[i] = self._draw(), 0

    def observe(self):
        rgb = np.zeros((self.num, 64, 64, 3), np.uint8)
        rgb[..., 0] = (self.level % 256)[:, None, None]
        rgb[..., 1] = self.t[:, None, None]
        return self.rew.copy(), {"rgb": rgb}, self.first.copy()

    def callmethod(self, name, *args):
        if name == "get_state":
            return [pickle.dumps((self.rng.bit_generator.state, self.level.copy(), self.t.copy()))]
        state, self.level, self.t = pickle.loads(args[0][0])
        self.rng.bit_generator.state = state
        return None


@pytest.fixture
def fake(monkeypatch):
    FakeGym3.made = []
    monkeypatch.setattr(procgen_module, "import_procgen", lambda: FakeGym3)
    return FakeGym3


def test_games_in_turn_one_gym3_env_per_game_with_the_level_range(fake):
    env = ProcgenVecEnv(["maze", "bigfish"], 5, LevelSet(1000, 200), seed=7)
    obs = env.reset()
    assert env.games == ["maze", "bigfish", "maze", "bigfish", "maze"]
    assert obs.shape == (5, 3, 64, 64) and obs.dtype == torch.uint8 and env.num_actions == PROCGEN_ACTIONS
    assert [(m["env_name"], m["num"], m["rand_seed"], m["mode"]) for m in fake.made] == [
        ("maze", 3, 7, "easy"),
        ("bigfish", 2, 8, "easy"),
    ]
    # env i's observation is slot i // 2 of its game's gym3 env (channel 0 holds the level number)
    maze, bigfish = env._envs
    assert obs[[0, 2, 4], 0, 0, 0].tolist() == (maze.level % 256).tolist()
    assert obs[[1, 3], 0, 0, 0].tolist() == (bigfish.level % 256).tolist()


def test_actions_reach_their_env_and_episodes_are_reported_at_done(fake):
    env = ProcgenVecEnv(["maze", "bigfish"], 4, LevelSet(0, 9), seed=1)
    env.reset()
    maze, bigfish = env._envs
    lengths = [int(2 + lvl % 3) for lvl in (maze.level[0], bigfish.level[0], maze.level[1], bigfish.level[1])]
    actions = torch.tensor([1, 2, 3, 4])
    steps = [env.step(actions) for _ in range(4)]
    assert maze.actions[0].tolist() == [1, 3] and bigfish.actions[0].tolist() == [2, 4]
    for i in range(4):
        done_at = [t for t, s in enumerate(steps) if s.done[i]]
        assert done_at[0] == lengths[i] - 1  # the first episode ends on its last step
        s = steps[done_at[0]]
        assert s.episode_return[i] == actions[i] * lengths[i] and s.episode_length[i] == lengths[i]
    not_done = ~steps[0].done
    assert torch.isnan(steps[0].episode_return[not_done]).all()
    assert (steps[0].episode_length[not_done] == 0).all()
    assert steps[0].reward.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_state_dict_continues_bit_identically_and_reset_starts_afresh(fake):
    env = ProcgenVecEnv(["maze", "bigfish"], 4, LevelSet(0, 50), seed=3)
    first = env.reset()
    g = torch.Generator().manual_seed(0)
    acts = [torch.randint(PROCGEN_ACTIONS, (4,), generator=g) for _ in range(30)]
    for a in acts[:10]:
        env.step(a)
    state = env.state_dict()
    a_run = [env.step(a) for a in acts[10:]]
    env.load_state_dict(state)
    b_run = [env.step(a) for a in acts[10:]]
    for x, y in zip(a_run, b_run, strict=True):
        for field in ("obs", "reward", "done", "episode_return", "episode_length"):
            torch.testing.assert_close(getattr(x, field), getattr(y, field), equal_nan=True)
    torch.testing.assert_close(env.reset(), first)  # reset rebuilds the envs with the same seeds


def test_bad_arguments_name_what_was_expected(fake):
    with pytest.raises(ValueError, match=r"games: expected ProcGen games of .* got unknown \['pong'\]"):
        ProcgenVecEnv(["maze", "pong"], 4, LevelSet(0, 5))
    with pytest.raises(ValueError, match=r"games: expected at least one"):
        ProcgenVecEnv([], 4, LevelSet(0, 5))
    with pytest.raises(ValueError, match=r"num_envs: expected an int >= 2"):
        ProcgenVecEnv(["maze", "leaper"], 1, LevelSet(0, 5))
    with pytest.raises(ValueError, match=r"distribution_mode: expected one of \['easy', 'hard'\]"):
        ProcgenVecEnv(["maze"], 1, LevelSet(0, 5), distribution_mode="exploration")
    env = ProcgenVecEnv(["maze"], 2, LevelSet(0, 5))
    with pytest.raises(RuntimeError, match=r"call reset\(\) first"):
        env.step(torch.zeros(2, dtype=torch.int64))
    env.reset()
    with pytest.raises(ValueError, match=r"actions: expected shape \(2,\), got \(3,\)"):
        env.step(torch.zeros(3, dtype=torch.int64))


def test_missing_procgen_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "procgen", None)  # import procgen -> ImportError
    with pytest.raises(ImportError, match=r"optional 'procgen2' package \(pip install -e '\.\[rl\]'"):
        import_procgen()


def test_the_normalisation_covers_every_game():
    assert len(PROCGEN_GAMES) == 16
    for game, (r_min, r_max) in procgen_module.PROCGEN_NORMALISATION.items():
        assert r_min < r_max, game


# ---- the real ProcGen (the optional extra) ---------------------------------------------------------


@pytest.fixture
def real_procgen():
    try:
        import_procgen()
    except ImportError:
        pytest.skip("procgen2 (the optional extra .[rl]) is not installed")


def _levels_played(env, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    levels, results = [], []
    for _ in range(steps):
        results.append(env.step(torch.randint(PROCGEN_ACTIONS, (env.num_envs,), generator=g)))
        for gym3_env in env._envs:
            levels += [info["level_seed"] for info in gym3_env.get_info()]
    return levels, results


@pytest.mark.usefixtures("real_procgen")
def test_real_procgen_plays_the_levels_of_its_level_set_deterministically():
    train = ProcgenVecEnv(["maze", "leaper"], 4, LevelSet(0, 200), seed=0)
    test = ProcgenVecEnv(["maze", "leaper"], 4, LevelSet(1000, 200), seed=0)
    assert train.reset().shape == (4, 3, 64, 64)
    test.reset()
    train_levels, _ = _levels_played(train, 300)
    test_levels, _ = _levels_played(test, 300)
    assert set(train_levels) <= set(range(200)) and set(test_levels) <= set(range(1000, 1200))
    again = ProcgenVecEnv(["maze", "leaper"], 4, LevelSet(0, 200), seed=0)
    again.reset()
    same_levels, _ = _levels_played(again, 300)
    assert same_levels == train_levels


@pytest.mark.usefixtures("real_procgen")
def test_real_procgen_state_dict_resumes_bit_identically():
    env = ProcgenVecEnv(["bigfish", "fruitbot"], 4, LevelSet(0, 200), seed=2)
    env.reset()
    _levels_played(env, 40)
    state = env.state_dict()
    _, a = _levels_played(env, 200, seed=1)
    env.load_state_dict(state)
    _, b = _levels_played(env, 200, seed=1)
    for x, y in zip(a, b, strict=True):
        for field in ("obs", "reward", "done", "episode_return", "episode_length"):
            torch.testing.assert_close(getattr(x, field), getattr(y, field), equal_nan=True)
    assert any(bool(x.done.any()) for x in a)
