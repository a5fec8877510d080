from __future__ import annotations

import numpy as np
import pytest
import torch

from fastweights.cl.protocols import FORGETTING_KEYS, evaluate_split_benchmark, evaluate_task_pairs
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool, LabeledImages, SplitDataset
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


def _split_dataset():
    rng = np.random.default_rng(0)

    def part(per_class):
        labels = np.repeat(np.arange(10), per_class)
        return LabeledImages(
            rng.integers(0, 256, (len(labels), 16, 16), dtype=np.uint8), labels.astype(np.int64)
        )

    return SplitDataset("toy", part(4), part(3), 10, 0.5, 0.3)


def test_split_benchmark_domain_and_class_incremental():
    model = _model()
    res = evaluate_split_benchmark(model, _split_dataset(), k_shot=2, runs=2, scenario="domain")
    R = np.array(res["R"])
    assert R.shape == (5, 5) and res["runs"] == 2 and res["chance"] == 0.5
    assert np.all((R >= 0) & (R <= 1)) and np.allclose(R * 6, np.round(R * 6))  # 6 test images per task
    assert res["task_names"][0] == "0/1"
    cls = evaluate_split_benchmark(model, _split_dataset(), k_shot=2, runs=1, scenario="class")
    assert np.array(cls["R"]).shape == (2, 2) and cls["chance"] == 0.25  # 5 outputs -> 2-task variant
    with pytest.raises(ValueError, match="scenario"):
        evaluate_split_benchmark(model, _split_dataset(), k_shot=2, runs=1, scenario="task")
    with pytest.raises(ValueError, match="outputs"):
        evaluate_split_benchmark(_model(n=3), _split_dataset(), k_shot=2, runs=1, scenario="class")


def test_split_benchmark_row_i_queries_the_state_after_task_i(monkeypatch):
    """R[i, j] must be measured from the state reached after the demos of tasks 0..i (in order)."""
    model = _model()
    calls: list[tuple[str, int]] = []
    real_forward, real_query = model.forward_features, model.query_features

    def forward(features, labels, state=None):
        calls.append(("learn", int(labels.numel())))
        return real_forward(features, labels, state)

    def query(features, state=None):
        calls.append(("query", int(features.shape[1])))
        return real_query(features, state)

    monkeypatch.setattr(model, "forward_features", forward)
    monkeypatch.setattr(model, "query_features", query)
    evaluate_split_benchmark(model, _split_dataset(), k_shot=2, runs=1)
    # learn task 0, query all 5 tasks, learn task 1, query all 5, ...
    assert calls == [c for _ in range(5) for c in [("learn", 4)] + [("query", 6)] * 5]
