"""RL cores: carry across unrolls, reset at done, the reset ablation, Fake SR, and the agent."""

from __future__ import annotations

import pytest
import torch

from fastweights.rl.agent import Agent
from fastweights.rl.cores import CORES, Core, CoreState, FakeSRWMLayer, detach_state
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


@pytest.mark.parametrize("method", ["forward", "forward_reference"])
@pytest.mark.parametrize("kind", STATEFUL)
def test_done_resets_exactly_that_environment_at_that_step(kind, method):
    core = _core(kind)
    run = getattr(core, method)
    x, done = _inputs(9, 3)
    done[5, 1] = True
    out, _ = run(x, done, core.initial_state(3))
    no_reset, _ = run(x, torch.zeros_like(done), core.initial_state(3))
    fresh, _ = run(x[5:, 1:2], done[5:, 1:2], core.initial_state(1))
    torch.testing.assert_close(out[5:, 1], fresh[:, 0], rtol=1e-12, atol=1e-12)
    # bit for bit where each layer sees the same calls: step by step, and the SRWM's one call with the
    # reset inside; lstm and deltanet run the unroll in stretches between resets (matmuls over other
    # row counts: rounding)
    tol = 0 if method == "forward_reference" or kind.startswith("srwm") else 1e-12
    torch.testing.assert_close(out[:5], no_reset[:5], rtol=tol, atol=tol)  # before the done: unchanged
    torch.testing.assert_close(out[:, [0, 2]], no_reset[:, [0, 2]], rtol=tol, atol=tol)  # other envs
    assert not torch.allclose(out[5:, 1], no_reset[5:, 1])  # the state mattered


def _map(fn, s):
    return tuple(_map(fn, p) for p in s) if isinstance(s, tuple) else fn(s)


def _random_state(core, b, seed=2):
    """A carried state with non-zero shifts (requiring grad) and step counts near the reset period."""
    g = torch.Generator().manual_seed(seed)
    state = core.initial_state(b)
    shifts = tuple(
        _map(lambda s: (0.1 * torch.randn(s.shape, generator=g, dtype=s.dtype)).requires_grad_(), s)
        for s in state.shifts
    )
    return CoreState(shifts, torch.randint(0, 6, (b,), generator=g))


def _leaves(state):
    out = []
    _map(out.append, tuple(state.shifts))
    return out


@pytest.mark.parametrize("kind", CORES)
@pytest.mark.parametrize("t", [1, 2, 13])
def test_forward_equals_the_step_by_step_reference_fp64(kind, t):
    """The layer-by-layer forward (the SRWM's resets inside one call, the other layers in stretches)
    against one call per layer and step: outputs, carried state, step counts and the gradients of the
    inputs, the parameters and the carried shifts."""
    core = _core(kind, reset_every=4)
    b = 5
    x, done = _inputs(t, b, seed=3)
    x.requires_grad_()
    done[0, 1] = True  # a reset at the first step, several in one environment, one at the last step
    done[t // 2, [0, 3]] = True
    done[t - 1, 3] = True
    if t > 2:
        done[t // 2 + 1, 3] = True
    results = []
    for method in ("forward", "forward_reference"):
        state = _random_state(core, b)
        core.zero_grad()
        x.grad = None
        out, new = getattr(core, method)(x, done, state)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum()
        loss = loss + sum((s * s).sum() for s in _leaves(new))
        leaves = _leaves(state)
        loss.backward()
        grads = [x.grad] + [p.grad for p in core.parameters()] + [s.grad for s in leaves]
        results.append((out, _leaves(new), new.steps, grads))
    (out, shifts, steps, grads), (out_r, shifts_r, steps_r, grads_r) = results
    torch.testing.assert_close(out, out_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(steps, steps_r, rtol=0, atol=0)
    for s, s_r in zip(shifts, shifts_r, strict=True):
        torch.testing.assert_close(s, s_r, rtol=1e-12, atol=1e-12)
    for g, g_r in zip(grads, grads_r, strict=True):
        if g_r is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, g_r, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("kind", ["srwm", "srwm_reset"])
def test_one_step_actor_calls_equal_the_reference_bit_for_bit(kind):
    """The actor's calls (``T = 1``, no gradient, a reset now and then): the same numbers as before."""
    core = _core(kind, reset_every=3).float()
    x, done = _inputs(8, 4, seed=5)
    x, done[2, 1], done[5, [0, 2]] = x.float(), True, True
    state = state_r = core.initial_state(4)
    with torch.no_grad():
        for t in range(8):
            out, state = core(x[t : t + 1], done[t : t + 1], state)
            out_r, state_r = core.forward_reference(x[t : t + 1], done[t : t + 1], state_r)
            torch.testing.assert_close(out, out_r, rtol=0, atol=0)
            torch.testing.assert_close(state.steps, state_r.steps, rtol=0, atol=0)
            for s, s_r in zip(_leaves(state), _leaves(state_r), strict=True):
                torch.testing.assert_close(s, s_r, rtol=0, atol=0)


@pytest.mark.parametrize("kind", CORES)
def test_an_empty_unroll_keeps_the_state(kind):
    core = _core(kind)
    state = _random_state(core, 2)
    x, done = _inputs(0, 2)
    out, new = core(x, done, state)
    assert out.shape == (0, 2, core.out_dim)
    torch.testing.assert_close(new.steps, state.steps, rtol=0, atol=0)
    for s, s_r in zip(_leaves(new), _leaves(state), strict=True):
        torch.testing.assert_close(s, s_r, rtol=0, atol=0)


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
