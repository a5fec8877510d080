"""Actor, learner and greedy evaluation on MiniGrid: shapes, on-policy ratios, exact resume, learning."""

from __future__ import annotations

import pytest
import torch

from fastweights.rl.agent import Agent
from fastweights.rl.cores import Core
from fastweights.rl.encoders import MiniGridEncoder
from fastweights.rl.envs import LevelSet, MiniGridVecEnv
from fastweights.rl.rollout import Actor, clip_reward, evaluate_greedy, evaluate_random, learner_loss

GAMES = ["MiniGrid-Empty-Random-6x6-v0", "MiniGrid-LavaGapS5-v0"]


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _agent(kind="srwm", seed=0):
    torch.manual_seed(seed)
    return Agent(MiniGridEncoder(16), 7, Core(kind, 17, d_model=16, num_heads=2, d_ff=32, reset_every=5))


def _env(seed=0, n=4):
    return MiniGridVecEnv(GAMES, n, LevelSet(0, 20), seed=seed)


@pytest.mark.parametrize("kind", ["ff", "lstm", "srwm", "srwm_reset"])
def test_unroll_shapes_and_learner_recomputes_the_behaviour_policy(kind):
    agent = _agent(kind)
    actor = Actor(agent, _env(), seed=3)
    r = actor.unroll(7)
    assert (
        r.obs.shape == (8, 4, 3, 7, 7) and r.actions.shape == (7, 4) and r.behaviour_logits.shape == (7, 4, 7)
    )
    assert r.done[0].all()  # the first observation starts an episode
    assert (r.prev_reward[r.done] == 0).all()
    loss, info = learner_loss(agent, r)
    assert torch.isfinite(loss)
    assert info["mean_rho"] == pytest.approx(1.0, abs=1e-5)  # synchronous: the same policy
    loss.backward()
    assert all(p.grad is not None for p in agent.core.parameters() if p.requires_grad)


def test_the_next_unroll_starts_from_the_carried_state():
    agent = _agent("srwm")
    actor = Actor(agent, _env(), seed=3)
    first = actor.unroll(5)
    second = actor.unroll(5)
    assert torch.equal(second.obs[0], first.obs[-1])
    # the recomputed first unroll's final state equals the second's start state
    _, state = agent(first.obs[:-1], first.prev_reward[:-1], first.done[:-1], first.start_state)
    for a, b in zip(state.shifts, second.start_state.shifts, strict=True):
        torch.testing.assert_close(a, b)


def test_actor_state_dict_resumes_bit_identically():
    agent = _agent("srwm")
    actor = Actor(agent, _env(), seed=3)
    actor.unroll(6)
    saved = actor.state_dict()
    a = actor.unroll(20)
    other = Actor(agent, _env(seed=9), seed=11)
    other.load_state_dict(saved)
    b = other.unroll(20)
    for name in ("obs", "actions", "rewards", "done", "behaviour_logits"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert actor.pop_episodes() == other.pop_episodes()


def test_an_interrupted_unroll_leaves_the_actor_at_the_unroll_start():
    agent = _agent("srwm")
    ref, actor = Actor(agent, _env(), seed=3), Actor(agent, _env(), seed=3)
    ref.unroll(4)
    actor.unroll(4)
    expected = ref.unroll(6)
    calls = [0]
    real_step = actor.env.step

    def step(actions):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real_step(actions)

    actor.env.step = step
    with pytest.raises(KeyboardInterrupt):
        actor.unroll(6)
    actor.env.step = real_step
    again = actor.unroll(6)  # as if the interrupted unroll never happened (what a resume replays)
    for name in ("obs", "actions", "rewards", "done", "behaviour_logits"):
        assert torch.equal(getattr(again, name), getattr(expected, name)), name


def test_greedy_evaluation_counts_the_first_episodes_of_every_env():
    agent = _agent("ff")
    env = MiniGridVecEnv(GAMES, 4, LevelSet(1000, 8), draw="cycle")
    out = evaluate_greedy(agent, env, 2)
    assert set(out) == set(GAMES) and all(len(v) == 4 for v in out.values())
    with pytest.raises(ValueError, match=r"episodes: expected an int >= 1"):
        evaluate_greedy(agent, env, 0)


def test_random_policy_reference_counts_the_same_episodes_and_is_seeded():
    env = lambda: MiniGridVecEnv(GAMES, 4, LevelSet(1000, 8), draw="cycle")  # noqa: E731
    a, b = evaluate_random(env(), 3, seed=4), evaluate_random(env(), 3, seed=4)
    assert a == b and all(len(v) == 6 for v in a.values())
    assert all(0.0 <= r <= 1.0 for v in a.values() for r in v)
    assert evaluate_random(env(), 3, seed=5) != a
    with pytest.raises(ValueError, match=r"episodes: expected an int >= 1"):
        evaluate_random(env(), 0)


def test_reward_clips():
    r = torch.tensor([-3.0, -0.5, 0.0, 0.25, 2.0])
    assert clip_reward(r, "sign").tolist() == [-1, -1, 0, 1, 1]
    assert clip_reward(r, "clamp").tolist() == [-1, -0.5, 0, 0.25, 1]
    with pytest.raises(ValueError, match=r"reward_clip: expected one of"):
        clip_reward(r, "tanh")


@pytest.mark.slow
def test_a_few_hundred_updates_learn_empty_random(one_thread):
    # the easiest game: a feed-forward agent beats the random policy's return (0.32 measured) quickly.
    # Discount 0.9 and lr 2e-3 (measured, seeds 0-9 for the agent, environments and actions: greedy
    # return 0.94-0.96 after 120 updates; with discount 0.99 and lr 1e-3 the greedy policy of seeds 2-4
    # is still stuck at 0.15 after 150 updates and needs ~200)
    torch.manual_seed(0)
    agent = Agent(MiniGridEncoder(64), 7, Core("ff", 65))
    env = MiniGridVecEnv(["MiniGrid-Empty-Random-5x5-v0"], 16, LevelSet(0, 200), seed=0)
    actor = Actor(agent, env, seed=0, reward_clip="none")
    opt = torch.optim.RMSprop(agent.parameters(), lr=2e-3, alpha=0.99, eps=0.01)
    for _ in range(120):
        loss, _ = learner_loss(agent, actor.unroll(20), discount=0.9, entropy_cost=0.01)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), 40.0)
        opt.step()
    test = MiniGridVecEnv(["MiniGrid-Empty-Random-5x5-v0"], 8, LevelSet(1000, 64), draw="cycle")
    returns = evaluate_greedy(agent, test, 4, reward_clip="none")["MiniGrid-Empty-Random-5x5-v0"]
    assert sum(returns) / len(returns) > 0.6


@pytest.mark.parametrize("kind", ["srwm_reset", "srwm"])
def test_reset_variant_resets_every_n_steps_in_training_and_in_greedy_evaluation(kind):
    agent = _agent(kind)  # reset_every=5
    counts: list[int] = []
    forward = agent.core.forward

    def spy(x, done, state):
        out, new = forward(x, done, state)
        counts.append(int(new.steps.max()))  # steps since each env's last reset, after this call
        return out, new

    agent.core.forward = spy
    actor = Actor(agent, _env(), seed=1)
    for _ in range(3):
        actor.unroll(4)  # carried across unrolls
    in_training = list(counts)
    counts.clear()
    evaluate_greedy(agent, _env(n=2), 1)
    if kind == "srwm_reset":
        assert max(in_training) == 5 and max(counts) == 5
    else:  # episodes here last longer than 5 steps: the plain SRWM keeps self-modifying
        assert max(in_training) > 5 and max(counts) > 5
