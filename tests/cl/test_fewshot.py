from __future__ import annotations

import numpy as np
import pytest
import torch

from fastweights.cl.fewshot import evaluate_fewshot, fewshot_loss
from fastweights.cl.tasks import synthetic_feature_tasks
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier


def _model(layer="srwm"):
    return InContextClassifier(
        Conv4(1, 4, image_size=16), 5, d_model=16, num_layers=1, num_heads=2, d_ff=32, sequence_layer=layer
    )


def _pool(c=12, m=10, s=16, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(c, m, s, s), dtype=np.uint8)
    return ClassPool("toy", images, [f"c{i}" for i in range(c)], ["a"] * c, 0.5, 0.3)


def test_fewshot_loss_is_the_query_cross_entropy_after_the_support_set():
    model = _model().double()
    (task,) = synthetic_feature_tasks(
        torch.Generator().manual_seed(0),
        batch_size=3,
        num_tasks=1,
        n_way=5,
        k_shot=2,
        n_query=2,
        feature_dim=model.backbone.feature_dim,
        label_space=5,
    )
    task.support_features, task.query_features = task.support_features.double(), task.query_features.double()
    loss, acc = fewshot_loss(model, task)
    # the same number from full sequences: support then one query with the unknown label, last position
    losses = []
    for q in range(task.query_features.shape[1]):
        feats = torch.cat([task.support_features, task.query_features[:, q : q + 1]], 1)
        labels = torch.cat([task.support_labels, torch.full_like(task.query_labels[:, :1], 5)], 1)
        logits, _ = model.forward_features(feats, labels)
        losses.append(
            torch.nn.functional.cross_entropy(logits[:, -1], task.query_labels[:, q], reduction="none")
        )
    torch.testing.assert_close(loss, torch.stack(losses).mean())
    assert 0.0 <= acc <= 1.0


def test_evaluation_is_reproducible_and_reports_ci_over_episodes():
    model, sampler = _model(), EpisodeSampler(_pool())
    a = evaluate_fewshot(model, sampler, n_way=5, k_shot=2, episodes=30, runs=2, batch_size=7, seed=3)
    b = evaluate_fewshot(model, sampler, n_way=5, k_shot=2, episodes=30, runs=2, batch_size=7, seed=3)
    assert a == b and len(a["run_accuracies"]) == 2 and a["episodes"] == 30
    outcomes_mean = np.mean(a["run_accuracies"])
    assert a["accuracy"] == pytest.approx(outcomes_mean)
    p = a["accuracy"]
    assert a["ci95"] == pytest.approx(1.96 * np.sqrt(p * (1 - p)) / np.sqrt(60))  # std of 0/1 outcomes
    with pytest.raises(ValueError, match="episodes"):
        evaluate_fewshot(model, sampler, n_way=5, k_shot=2, episodes=0)


def test_episodes_draw_different_support_images_for_the_same_class():
    pool = _pool(c=6, m=20)
    sampler = EpisodeSampler(pool)
    rng = np.random.default_rng(0)
    seen: dict[int, list[set]] = {}
    for _ in range(20):
        (b,) = sampler.sample(rng, batch_size=1, num_tasks=1, n_way=5, k_shot=3, n_query=1)
        for img in b.support_images[0]:
            cls = next(c for c in range(pool.num_classes) if (pool.images[c] == img).all(axis=(1, 2)).any())
            seen.setdefault(cls, []).append(img.tobytes())
    # a class drawn in several episodes shows more distinct support images than one episode's K = 3
    assert max(len(set(v)) for v in seen.values()) > 3
