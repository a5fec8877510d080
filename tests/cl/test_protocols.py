from __future__ import annotations

import numpy as np
import pytest
import torch

from fastweights.cl.protocols import FORGETTING_KEYS, evaluate_task_pairs
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier


def _model(n=5):
    torch.manual_seed(0)
    model = InContextClassifier(Conv4(1, 4, image_size=16), n, d_model=12, num_layers=1, num_heads=3, d_ff=12)
    with torch.no_grad():  # larger weights: an untrained model whose predictions depend on its input
        for p in model.parameters():
            p.mul_(4.0)
    return model


def _pool(classes=12, m=6):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (classes, m, 16, 16), dtype=np.uint8)
    return ClassPool("toy", images, [str(i) for i in range(classes)], ["a"] * classes, 0.5, 0.3)


def test_task_pairs_are_reproducible_and_keyed():
    model, sampler = _model(), EpisodeSampler(_pool())
    kw = dict(episodes=7, n_way=5, k_shot=2, n_query=1, batch_size=3, seed=5)
    a = evaluate_task_pairs(model, sampler, **kw)
    b = evaluate_task_pairs(model, sampler, **kw)
    assert tuple(a) == FORGETTING_KEYS
    for k in a:
        assert a[k].shape == (7,) and np.array_equal(a[k], b[k])
        assert np.allclose(a[k] * 5, np.round(a[k] * 5))  # 5 queries per episode
    c = evaluate_task_pairs(model, sampler, **{**kw, "seed": 6})
    assert any(not np.array_equal(a[k], c[k]) for k in a)
    assert tuple(evaluate_task_pairs(model, sampler, **kw, reverse=False)) == FORGETTING_KEYS[:3]
    with pytest.raises(ValueError, match="episodes"):
        evaluate_task_pairs(model, sampler, **{**kw, "episodes": 0})
