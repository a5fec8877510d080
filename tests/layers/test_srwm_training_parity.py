"""Training parity of the SRWM layer: the fast path (``impl="fast"``) and the per-step reference
(``impl="reference"``) trained from the same seed give the same losses and weights."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fastweights.layers.srwm as srwm_layer_module
from fastweights.cl.objective import acl_loss
from fastweights.cl.tasks import synthetic_feature_tasks
from fastweights.layers import SRWMLayer
from fastweights.models.backbones import FeatureInput
from fastweights.models.in_context import InContextClassifier

FEATURES, N_WAY, K_SHOT = 6, 5, 13  # support sets of 65 steps: odd, across the fast path's 64-step chunk
STEPS = 3


def _train(impl: str, dtype: torch.dtype) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Adam steps of a 2-layer SRWM classifier on 2-task ACL sequences (state carried from task A's
    support set into task B's, online reads beside each support set, queries as reads)."""
    torch.manual_seed(0)
    model = InContextClassifier(
        FeatureInput(FEATURES), N_WAY, d_model=8, num_heads=2, d_ff=16, num_layers=2
    ).to(dtype)
    for layer in model.seq_layers:
        layer.impl = impl
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        tasks = synthetic_feature_tasks(
            gen, batch_size=2, num_tasks=2, n_way=N_WAY, k_shot=K_SHOT, n_query=2,
            feature_dim=FEATURES, label_space=N_WAY,
        )  # fmt: skip
        tasks = [
            dataclasses.replace(
                t, support_features=t.support_features.to(dtype), query_features=t.query_features.to(dtype)
            )
            for t in tasks
        ]
        loss, _ = acl_loss(model, tasks, online_weight=0.5)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, torch.dtype], tuple[list[float], dict[str, torch.Tensor]]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny shapes: per-op overhead dominates, threads only contend (~10x slower)
    try:
        return {
            (impl, dt): _train(impl, dt)
            for impl in ("fast", "reference")
            for dt in (torch.float64, torch.float32)
        }
    finally:
        torch.set_num_threads(threads)


def _max_rel_weight_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(((a[k] - b[k]).norm() / b[k].norm().clamp_min(1e-30)).item() for k in b)


@pytest.mark.slow
def test_fp64_training_losses_and_weights_equal(runs):
    fast_losses, fast_w = runs[("fast", torch.float64)]
    ref_losses, ref_w = runs[("reference", torch.float64)]
    assert fast_losses == pytest.approx(ref_losses, rel=1e-10, abs=0)
    assert _max_rel_weight_diff(fast_w, ref_w) < 1e-10
    # the run trains (the loss falls), so equal weights are not equal initialisations only
    assert fast_losses[-1] < fast_losses[0]


def test_fp32_training_losses_equal_to_rounding(runs):
    fast_losses, fast_w = runs[("fast", torch.float32)]
    ref_losses, ref_w = runs[("reference", torch.float32)]
    assert fast_losses == pytest.approx(ref_losses, rel=1e-5, abs=0)
    assert _max_rel_weight_diff(fast_w, ref_w) < 1e-5
    # and both are the fp64 run to float32 accuracy
    assert ref_losses == pytest.approx(runs[("reference", torch.float64)][0], rel=1e-4)


def test_reference_impl_calls_only_the_reference_op(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("fast op called")

    layer = SRWMLayer(8, 2, impl="reference")
    for name in ("srwm", "srwm_read", "srwm_with_reads"):
        monkeypatch.setattr(srwm_layer_module, name, boom)
    x = torch.randn(2, 5, 8)
    out, state = layer(x)
    assert out.shape == (2, 5, 8) and state.shape == (2, 2, 4, 16)
    assert layer.read(x, state).shape == (2, 5, 8)
    assert layer.forward_with_reads(x, x, state)[1].shape == (2, 5, 8)
    layer.impl = "fast"
    with pytest.raises(AssertionError, match="fast op called"):
        layer(x)


def test_impl_is_validated():
    with pytest.raises(ValueError, match=r"impl: expected one of \['fast', 'reference'\], got 'cuda'"):
        SRWMLayer(8, 2, impl="cuda")
    layer = SRWMLayer(8, 2)
    assert layer.impl == "fast"
    with pytest.raises(ValueError, match="impl: expected"):
        layer.impl = "ref"
