from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fastweights.cl.baselines import per_sample
from fastweights.cl.baselines.per_sample import mean_over_samples, per_sample_grads, strided_subset
from tests.cl.baselines._tiny import SIZE, tiny_learner


def _ce(logits, y):
    return F.cross_entropy(logits.unsqueeze(0), y.unsqueeze(0))


def _loop_grads(model, x, y):
    """Reference: one ordinary backward per example (batch of one)."""
    out = []
    for k in range(len(x)):
        model.zero_grad()
        _ce(model(x[k : k + 1])[0], y[k]).backward()
        out.append({n: p.grad.clone() for n, p in model.named_parameters()})
    return out


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_per_sample_grads_match_a_batch_size_one_loop_in_fp64(kind):
    model = tiny_learner(kind).double().eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 1, SIZE, SIZE, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 5, 2])
    grads = per_sample_grads(model, x, y, _ce)
    ref = _loop_grads(model, x, y)
    assert set(grads) == {n for n, _ in model.named_parameters()}
    for n, g_all in grads.items():
        assert g_all.shape == (5, *dict(model.named_parameters())[n].shape)
        assert g_all.dtype == torch.float64
        for k in range(5):
            torch.testing.assert_close(g_all[k], ref[k][n], rtol=1e-10, atol=1e-12)


def test_mean_over_samples_is_the_weighted_mean_of_the_statistic():
    model = tiny_learner("mlp").double().eval()
    x = torch.randn(7, 1, SIZE, SIZE, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    y = torch.arange(7) % 6
    w = torch.linspace(0.1, 1.0, 7, dtype=torch.float64)
    ref = _loop_grads(model, x, y)
    got = mean_over_samples(model, x, y, _ce, torch.square, weight=w)
    for n, v in got.items():
        want = sum(w[k] * ref[k][n] ** 2 for k in range(7)) / 7
        torch.testing.assert_close(v, want, rtol=1e-10, atol=1e-14)
    absolute = mean_over_samples(model, x, y, _ce, torch.abs)
    for n, v in absolute.items():
        torch.testing.assert_close(v, sum(ref[k][n].abs() for k in range(7)) / 7, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("stat", [torch.square, torch.abs])
def test_mlp_batched_form_equals_the_batch_size_one_loop_over_chunks_and_frozen_layers(stat):
    """The MLP's batched form of mean_over_samples (per layer ``stat(δ)ᵀ stat(a)``, per_sample._linear_mean)
    gives the per-example loop's sums in fp64: more examples than one chunk, a frozen weight (left out),
    weights per example; the results carry no autograd graph."""
    model = tiny_learner("mlp").double().eval()
    model.net[3].weight.requires_grad_(False)
    n = per_sample._CHUNK + 21
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, 1, SIZE, SIZE, generator=g, dtype=torch.float64)
    y = torch.randint(0, 6, (n,), generator=g)
    w = torch.rand(n, generator=g, dtype=torch.float64)
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    want = {name: torch.zeros_like(p) for name, p in trainable.items()}
    for k in range(n):  # reference: one ordinary backward per example
        grads = torch.autograd.grad(_ce(model(x[k : k + 1])[0], y[k]), list(trainable.values()))
        for name, grad in zip(trainable, grads, strict=True):
            want[name] += w[k] * stat(grad)
    got = mean_over_samples(model, x, y, _ce, stat, weight=w)
    assert set(got) == set(trainable) and "net.3.weight" not in got
    for name, v in got.items():
        assert not v.requires_grad
        torch.testing.assert_close(v, want[name] / n, rtol=1e-10, atol=1e-14)


def test_mlp_batched_form_runs_a_loss_vmap_cannot_example_by_example():
    """A loss with data-dependent control flow (``torch.func.vmap`` cannot run it) is summed over the
    chunk's examples one by one: the same sums as the per-example loop."""

    def branching(logits, y):
        return _ce(logits, y) if logits[0] > 0 else logits.square().sum()

    model = tiny_learner("mlp").double().eval()
    g = torch.Generator().manual_seed(6)
    x = torch.randn(9, 1, SIZE, SIZE, generator=g, dtype=torch.float64)
    y = torch.randint(0, 6, (9,), generator=g)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [torch.autograd.grad(branching(model(x[k : k + 1])[0], y[k]), params) for k in range(9)]
    got = mean_over_samples(model, x, y, branching, torch.square)
    for i, (name, v) in enumerate(got.items()):
        want = sum(g[i].square() for g in grads) / 9
        torch.testing.assert_close(v, want, rtol=1e-10, atol=1e-14, msg=name)


def test_frozen_parameters_are_left_out_and_p_grad_is_untouched():
    model = tiny_learner("mlp").eval()
    model.net[1].weight.requires_grad_(False)
    x, y = torch.randn(3, 1, SIZE, SIZE), torch.tensor([0, 1, 2])
    grads = per_sample_grads(model, x, y, _ce)
    assert "net.1.weight" not in grads and "net.1.bias" in grads
    assert all(p.grad is None for p in model.parameters())


def test_strided_subset_spreads_over_the_set():
    x, y = torch.arange(10.0).reshape(10, 1), torch.arange(10)
    sx, sy = strided_subset(x, y, 4)
    assert sy.tolist() == [0, 3, 6, 9] and torch.equal(sx[:, 0].long(), sy)
    assert strided_subset(x, y, 10)[1] is y and strided_subset(x, y, 50)[1] is y


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m, x: per_sample_grads(m, x, torch.zeros(2, dtype=torch.long), _ce), "^target: expected 3"),
        (lambda m, x: mean_over_samples(m, x, torch.zeros(4, dtype=torch.long), _ce, torch.abs), "^target:"),
        (
            lambda m, x: per_sample_grads(m, x[:0], torch.zeros(0, dtype=torch.long), _ce),
            "^x: expected at least",
        ),
        (
            lambda m, x: mean_over_samples(
                m, x, torch.zeros(3, dtype=torch.long), _ce, torch.abs, weight=torch.ones(2)
            ),
            r"^weight: expected shape \(3,\)",
        ),
        (lambda m, x: strided_subset(x, x, 0), "^n:"),
    ],
)
def test_bad_arguments_give_one_line_errors(call, match):
    model, x = tiny_learner("mlp"), torch.randn(3, 1, SIZE, SIZE)
    with pytest.raises(ValueError, match=match) as err:
        call(model, x)
    assert "\n" not in str(err.value)
