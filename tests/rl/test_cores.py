"""RL cores: carry across unrolls, reset at done, the reset ablation, Fake SR, and the agent."""

from __future__ import annotations

import pytest
import torch

from fastweights.rl.agent import Agent
from fastweights.rl.cores import CORES, Core, FakeSRWMLayer, detach_state
from fastweights.rl.encoders import MiniGridEncoder, make_encoder

STATEFUL = [c for c in CORES if c not in ("ff", "fake_srwm")]


def _core(kind, reset_every=50):
    torch.manual_seed(0)
    return Core(kind, 9, d_model=16, num_heads=2, d_ff=32, reset_every=reset_every).double()


def _inputs(t, b, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, b, 9, generator=g, dtype=torch.float64), torch.zeros(t, b, dtype=torch.bool)


@pytest.mark.parametrize("kind", CORES)
def test_state_carried_across_unrolls_equals_one_long_forward(kind):
    core = _core(kind)
    x, done = _inputs(11, 3)
    done[6, 1] = True
    full, _ = core(x, done, core.initial_state(3))
    state = core.initial_state(3)
    parts = []
    for lo, hi in ((0, 4), (4, 5), (5, 11)):  # odd unroll lengths, a done inside the last one
        out, state = core(x[lo:hi], done[lo:hi], state)
        state = detach_state(state)
        parts.append(out)
    torch.testing.assert_close(torch.cat(parts), full, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", STATEFUL)
def test_done_resets_exactly_that_environment_at_that_step(kind):
    core = _core(kind)
    x, done = _inputs(9, 3)
    done[5, 1] = True
    out, _ = core(x, done, core.initial_state(3))
    no_reset, _ = core(x, torch.zeros_like(done), core.initial_state(3))
    fresh, _ = core(x[5:, 1:2], done[5:, 1:2], core.initial_state(1))
    torch.testing.assert_close(out[5:, 1], fresh[:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[:5], no_reset[:5], rtol=0, atol=0)  # before the done: unchanged
    torch.testing.assert_close(out[:, [0, 2]], no_reset[:, [0, 2]], rtol=0, atol=0)  # other envs
    assert not torch.allclose(out[5:, 1], no_reset[5:, 1])  # the state mattered


def test_reset_variant_resets_every_n_steps_and_continues_its_count_across_calls():
    core = _core("srwm_reset", reset_every=4)
    x, done = _inputs(10, 2)
    out, _ = core(x, done, core.initial_state(2))
    for start in (4, 8):
        fresh, _ = core(x[start:], done[start:], core.initial_state(2))
        torch.testing.assert_close(out[start : start + 4], fresh[:4], rtol=1e-12, atol=1e-12)
    # the count is carried: 3 steps, then 7 more, resets at steps 4 and 8 as in one call
    a, state = core(x[:3], done[:3], core.initial_state(2))
    b, _ = core(x[3:], done[3:], state)
    torch.testing.assert_close(torch.cat([a, b]), out, rtol=1e-12, atol=1e-12)
    # a done restarts the count: reset at the done (step 2) and 4 steps later (step 6)
    done[2] = True
    out2, _ = core(x, done, core.initial_state(2))
    fresh, _ = core(x[6:], torch.zeros_like(done[6:]), core.initial_state(2))
    torch.testing.assert_close(out2[6:10], fresh[:4], rtol=1e-12, atol=1e-12)


def test_plain_srwm_is_not_reset_and_self_modifies():
    core = _core("srwm", reset_every=4)
    x, done = _inputs(10, 2)
    out, _ = core(x, done, core.initial_state(2))
    fresh, _ = core(x[4:], done[4:], core.initial_state(2))
    assert not torch.allclose(out[4:], fresh)


def test_fake_srwm_has_no_fast_weights_and_no_updates():
    core = _core("fake_srwm")
    assert all(isinstance(m, FakeSRWMLayer) for m in core.layers)
    names = [n for n, _ in core.named_parameters()]
    assert not any("q" in n.split(".")[-1] or "beta" in n for n in names)
    x, done = _inputs(7, 2)
    out, state = core(x, done, core.initial_state(2))
    assert state.shifts == ()
    # each step's output depends on that step's input only: reversing time reverses the outputs
    rev, _ = core(x.flip(0), done, core.initial_state(2))
    torch.testing.assert_close(rev.flip(0), out, rtol=1e-12, atol=1e-12)


def test_gradient_reaches_the_srwm_slow_weights_through_the_carried_state():
    core = _core("srwm")
    x, done = _inputs(6, 2)
    _, state = core(x[:3], done[:3], core.initial_state(2))
    state = detach_state(state)
    core.zero_grad()
    out, _ = core(x[3:4], done[3:4], state)  # one step: W_0 enters through S_0 + Δ
    out.sum().backward()
    assert core.layers[0].weight.grad is not None and core.layers[0].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", CORES)
def test_agent_shapes_and_bad_inputs(kind):
    agent = Agent(MiniGridEncoder(8), 7, Core(kind, 9, d_model=16, num_heads=2, d_ff=32))
    obs = torch.zeros(3, 2, 3, 7, 7, dtype=torch.uint8)
    out, _ = agent(obs, torch.zeros(3, 2), torch.zeros(3, 2, dtype=torch.bool), agent.initial_state(2))
    assert out.logits.shape == (3, 2, 7) and out.values.shape == (3, 2)
    with pytest.raises(ValueError, match=r"prev_reward, done: expected \[T, B\]"):
        agent(obs, torch.zeros(3), torch.zeros(3, 2, dtype=torch.bool), agent.initial_state(2))
    with pytest.raises(ValueError, match=r"obs: expected uint8 \[N, 3, 7, 7\]"):
        agent(obs.float(), torch.zeros(3, 2), torch.zeros(3, 2, dtype=torch.bool), agent.initial_state(2))


def test_bad_core_and_encoder_names():
    with pytest.raises(ValueError, match=r"core: expected one of"):
        Core("gru", 9)
    with pytest.raises(ValueError, match=r"reset_every: expected an int >= 1"):
        Core("srwm_reset", 9, reset_every=0)
    with pytest.raises(ValueError, match=r"encoder: expected one of"):
        make_encoder("vit", (3, 64, 64))
    with pytest.raises(ValueError, match=r"encoder: 'minigrid' expects \[3, 7, 7\]"):
        make_encoder("minigrid", (3, 64, 64))
    with pytest.raises(ValueError, match=r"core: expected a core over 9 inputs"):
        Agent(MiniGridEncoder(8), 7, Core("srwm", 5, d_model=16, num_heads=2))


def test_impala_cnn_on_procgen_frames():
    enc = make_encoder("impala", (3, 64, 64))
    feats = enc(torch.randint(0, 255, (2, 3, 64, 64), dtype=torch.uint8))
    assert feats.shape == (2, 256) and (feats >= 0).all()
