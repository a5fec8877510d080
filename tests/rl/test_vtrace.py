"""V-trace: a hand-computed trajectory, the explicit sum of Eq. 1, the on-policy n-step return."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastweights.rl.vtrace import actor_critic_loss, vtrace, vtrace_reference


def _case(first_discount: float):
    log_rhos = torch.tensor([[math.log(0.5)], [math.log(2.0)]], dtype=torch.float64)
    discounts = torch.tensor([[first_discount], [0.9]], dtype=torch.float64)
    rewards = torch.tensor([[0.5], [1.0]], dtype=torch.float64)
    values = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    return log_rhos, discounts, rewards, values, torch.tensor([3.0], dtype=torch.float64)


@pytest.mark.parametrize("fn", [vtrace, vtrace_reference])
def test_hand_computed_trajectory(fn):
    # rho = (0.5, 2) -> clipped (0.5, 1), c = (0.5, 1); delta_0 = 0.5 (0.5 + 0.9*2 - 1) = 0.65,
    # delta_1 = 1 + 0.9*3 - 2 = 1.7; v_1 = 3.7, v_0 = 1 + 0.65 + 0.9*0.5*1.7 = 2.415;
    # A_0 = 0.5 (0.5 + 0.9*3.7 - 1) = 1.415, A_1 = 1.7
    out = fn(*_case(0.9))
    torch.testing.assert_close(out.vs[:, 0], torch.tensor([2.415, 3.7], dtype=torch.float64))
    torch.testing.assert_close(out.pg_advantages[:, 0], torch.tensor([1.415, 1.7], dtype=torch.float64))


@pytest.mark.parametrize("fn", [vtrace, vtrace_reference])
def test_episode_end_cuts_the_trace(fn):
    # done after step 0: delta_0 = 0.5 (0.5 - 1) = -0.25 and nothing from step 1 flows back
    out = fn(*_case(0.0))
    torch.testing.assert_close(out.vs[:, 0], torch.tensor([0.75, 3.7], dtype=torch.float64))
    torch.testing.assert_close(out.pg_advantages[:, 0], torch.tensor([-0.25, 1.7], dtype=torch.float64))


@settings(max_examples=30, deadline=None)
@given(
    t=st.integers(1, 7),
    b=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    clip=st.sampled_from([0.5, 1.0, 2.0]),
)
def test_recursion_equals_the_explicit_sum(t, b, seed, clip):
    g = torch.Generator().manual_seed(seed)
    args = [torch.randn(t, b, generator=g, dtype=torch.float64) for _ in range(4)]
    args[1] = 0.9 * (torch.rand(t, b, generator=g) > 0.2).double()
    boot = torch.randn(b, generator=g, dtype=torch.float64)
    kw = dict(clip_rho=clip, clip_c=clip, clip_pg_rho=clip)
    fast, ref = vtrace(*args, boot, **kw), vtrace_reference(*args, boot, **kw)
    torch.testing.assert_close(fast.vs, ref.vs)
    torch.testing.assert_close(fast.pg_advantages, ref.pg_advantages)


def test_on_policy_targets_are_n_step_returns():
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    values = torch.randn(3, 1, dtype=torch.float64)
    out = vtrace(
        torch.zeros(3, 1, dtype=torch.float64),
        torch.full((3, 1), 0.5, dtype=torch.float64),
        rewards,
        values,
        torch.tensor([4.0], dtype=torch.float64),
    )
    assert out.vs[0, 0].item() == pytest.approx(1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4)
    assert out.vs[2, 0].item() == pytest.approx(3 + 0.5 * 4)


@pytest.mark.parametrize(
    ("which", "shape", "pattern"),
    [
        (0, (3,), r"log_rhos: expected a \[T, B\]"),
        (2, (2, 2), r"rewards: expected shape \(3, 2\)"),
        (4, (3,), r"bootstrap_value: expected shape \(2,\)"),
    ],
)
def test_bad_shapes_name_the_argument(which, shape, pattern):
    args = [torch.zeros(3, 2) for _ in range(4)] + [torch.zeros(2)]
    args[which] = torch.zeros(shape)
    with pytest.raises(ValueError, match=pattern):
        vtrace(*args)


def test_loss_terms_and_their_gradients():
    logits = torch.zeros(2, 1, 3, requires_grad=True)  # uniform policy
    values = torch.tensor([[1.0], [2.0]], requires_grad=True)
    targets = vtrace(
        torch.zeros(2, 1), torch.full((2, 1), 0.9), torch.ones(2, 1), values.detach(), torch.zeros(1)
    )
    loss, parts = actor_critic_loss(logits, torch.tensor([[0], [2]]), values, targets, entropy_cost=0.01)
    assert parts["entropy_loss"] == pytest.approx(0.01 * 2 * math.log(1 / 3))  # sum over steps of -H
    expected_pg = -(math.log(1 / 3) * targets.pg_advantages).sum().item()
    assert parts["pg_loss"] == pytest.approx(expected_pg)
    assert parts["baseline_loss"] == pytest.approx(0.25 * ((targets.vs - values) ** 2).sum().item())
    loss.backward()
    torch.testing.assert_close(values.grad, -(0.5 * (targets.vs - values.detach())))
    assert logits.grad[0, 0, 0] < 0  # the taken action's logit is pushed up when its advantage is > 0
