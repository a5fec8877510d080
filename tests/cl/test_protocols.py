from __future__ import annotations

import numpy as np
import pytest
import torch

from fastweights.cl.objective import sequence_query_logits
from fastweights.cl.protocols import (
    FORGETTING_KEYS,
    evaluate_task_pairs,
    evaluate_task_sequence,
)
from fastweights.cl.tasks import sample_task_sequences
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from tests.cl.test_tasks import channel_means_model, gray_and_rgb_pools


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


def test_task_pairs_of_one_sampler_are_unchanged():
    """The same-sampler default gives the numbers recorded before cross-domain pairs existed (main at
    fdcccb3): correct queries out of 3 classes x 2 queries per episode."""
    accs = evaluate_task_pairs(
        _model(), EpisodeSampler(_pool()), episodes=9, n_way=3, k_shot=1, n_query=2, batch_size=4, seed=1
    )
    recorded = {
        "A|A": [1, 1, 2, 2, 2, 2, 2, 2, 2],
        "B|A->B": [1, 3, 1, 1, 3, 2, 1, 0, 1],
        "A|A->B": [1, 3, 2, 1, 1, 2, 1, 1, 2],
        "B|B": [2, 4, 2, 1, 3, 2, 1, 0, 1],
        "A|B->A": [1, 3, 2, 1, 1, 2, 1, 1, 2],
        "B|B->A": [1, 3, 1, 1, 3, 2, 1, 0, 1],
    }
    assert {k: (v * 6).round().astype(int).tolist() for k, v in accs.items()} == recorded


def _manual_pairs(model, samplers, order, *, episodes, seed, **kw):
    """The forgetting table computed by hand from :func:`sample_task_sequences` (one batch)."""
    a, b = sample_task_sequences(
        model, samplers, order, np.random.default_rng(seed), batch_size=episodes, **kw
    )
    out = {}
    for tasks, keys in (((a, b), FORGETTING_KEYS[:3]), ((b, a), FORGETTING_KEYS[3:])):
        logits, _ = sequence_query_logits(model, list(tasks))
        for key, (i, j) in zip(keys, ((0, 0), (1, 1), (1, 0)), strict=True):
            out[key] = (logits[(i, j)].argmax(-1) == tasks[j].query_labels).float().mean(1).double().numpy()
    return out


def test_cross_domain_task_pairs_take_b_from_sampler_b_and_reverse_the_same_episodes():
    model = channel_means_model(num_classes=5).eval()
    gray, rgb = (EpisodeSampler(p) for p in gray_and_rgb_pools(classes=5))
    kw = dict(n_way=5, k_shot=2, n_query=2)  # 5 classes: two disjoint 5-way tasks need two pools
    got = evaluate_task_pairs(model, gray, sampler_b=rgb, episodes=6, batch_size=6, seed=3, **kw)
    assert tuple(got) == FORGETTING_KEYS and all(
        v.shape == (6,) and v.dtype == np.float64 for v in got.values()
    )
    want = _manual_pairs(model, [gray, rgb], [0, 1], episodes=6, seed=3, **kw)
    for key in FORGETTING_KEYS:
        np.testing.assert_array_equal(got[key], want[key])
    with pytest.raises(ValueError, match="n_way"):  # one pool of 5 classes cannot hold A and B
        evaluate_task_pairs(model, gray, episodes=2, seed=3, **kw)


def _sequence(model, **kw):
    gray, rgb = (EpisodeSampler(p) for p in gray_and_rgb_pools())
    args = dict(order=[0, 1, 0], episodes=5, n_way=2, k_shot=2, n_query=2, batch_size=2, seed=4)
    return evaluate_task_sequence(model, [gray, rgb], **{**args, **kw})


def test_task_sequence_matrix_has_the_lower_triangle_and_is_reproducible():
    model = channel_means_model()
    R = _sequence(model, scenario="class")
    assert R.shape == (5, 3, 3) and R.dtype == np.float64
    lower = np.tril(np.ones((3, 3), dtype=bool))
    assert np.isnan(R[:, ~lower]).all() and not np.isnan(R[:, lower]).any()
    assert np.allclose(R[:, lower] * 4, np.round(R[:, lower] * 4))  # 2 classes x 2 queries
    np.testing.assert_array_equal(R, _sequence(model, scenario="class"))
    assert not np.array_equal(R, _sequence(model, scenario="class", seed=5), equal_nan=True)
    assert model.training  # restored


def test_task_sequence_row_i_is_measured_after_the_support_of_tasks_0_to_i():
    model = channel_means_model().eval()
    gray, rgb = (EpisodeSampler(p) for p in gray_and_rgb_pools())
    R = evaluate_task_sequence(
        model,
        [gray, rgb],
        order=[1, 0, 1],
        episodes=4,
        n_way=2,
        k_shot=2,
        n_query=2,
        batch_size=4,
        seed=2,
        scenario="domain",
        label_space=6,
    )
    tasks = sample_task_sequences(
        model,
        [gray, rgb],
        [1, 0, 1],
        np.random.default_rng(2),
        batch_size=4,
        n_way=2,
        k_shot=2,
        n_query=2,
        label_space=6,
    )
    state = None
    for i, task in enumerate(tasks):
        _, state = model.forward_features(task.support_features, task.support_labels, state)
        for j in range(i + 1):
            pred = model.query_features(tasks[j].query_features, state).argmax(-1)
            np.testing.assert_allclose(R[:, i, j], (pred == tasks[j].query_labels).double().mean(1).numpy())


@pytest.mark.parametrize(
    ("scenario", "label", "want"),
    [("class", 1, [0.5, 0, 0]), ("class", 3, [0, 0.5, 0]), ("domain", 1, [0.5, 0.5, 0.5])],
)
def test_task_sequence_scores_a_forced_prediction_against_the_scenarios_targets(
    monkeypatch, scenario, label, want
):
    """A model that always predicts ``label`` (of its 10 outputs) is right on exactly the queries with that
    target: half of task ``label // 2``'s with class-incremental labels, half of every task's with {0, 1}."""
    model = channel_means_model()

    def forced(features, state=None):
        logits = torch.zeros(*features.shape[:2], model.num_classes)
        logits[..., label] = 1.0
        return logits

    monkeypatch.setattr(model, "query_features", forced)
    R = _sequence(model, scenario=scenario)
    for j, value in enumerate(want):
        np.testing.assert_array_equal(R[:, j:, j], value)


def test_task_sequence_refuses_bad_arguments():
    model = channel_means_model(num_classes=5)
    with pytest.raises(ValueError, match="label_space: scenario 'class' needs"):
        _sequence(model, scenario="class")  # 3 tasks x 2 classes > 5 outputs
    with pytest.raises(ValueError, match="episodes"):
        _sequence(model, episodes=0)
    with pytest.raises(ValueError, match="n_query"):
        _sequence(model, n_query=0)
    with pytest.raises(ValueError, match="order"):
        _sequence(model, order=[0, 2])


def test_task_sequence_with_context_replay_is_reproducible_and_leaves_the_first_task():
    from fastweights.cl.context_replay import ContextReplay

    model, sampler = _model(), EpisodeSampler(_pool())
    kw = dict(order=[0, 0, 0], episodes=3, n_way=2, k_shot=2, n_query=1, batch_size=2, seed=4)
    off = evaluate_task_sequence(model, [sampler], **kw)
    on = evaluate_task_sequence(model, [sampler], replay=ContextReplay(1, "mixed"), **kw)
    np.testing.assert_array_equal(on, evaluate_task_sequence(model, [sampler], replay=ContextReplay(1), **kw))
    np.testing.assert_array_equal(on[:, 0, 0], off[:, 0, 0])  # task 0: nothing to replay
    pairs = evaluate_task_pairs(
        model, sampler, episodes=2, n_way=2, k_shot=2, replay=ContextReplay(2, "before")
    )
    np.testing.assert_array_equal(
        pairs["A|A"], evaluate_task_pairs(model, sampler, episodes=2, n_way=2, k_shot=2)["A|A"]
    )


def test_a_fixed_view_is_reproducible_and_a_random_one_is_refused():
    from fastweights.data.task_augment import TaskAugment

    model, sampler = _model(), EpisodeSampler(_pool())
    kw = dict(episodes=6, n_way=3, k_shot=2, n_query=1, batch_size=4, seed=2)
    view = TaskAugment(low_res=1.0, low_res_size=4)
    plain = evaluate_task_sequence(model, [sampler], order=[0, 0], **kw)
    again = evaluate_task_sequence(model, [sampler], order=[0, 0], **kw, view=None)
    assert np.array_equal(plain, again, equal_nan=True)
    seen = evaluate_task_sequence(model, [sampler], order=[0, 0], **kw, view=view)
    assert np.array_equal(seen, evaluate_task_sequence(model, [sampler], order=[0, 0], **kw, view=view), True)
    assert not np.array_equal(seen, plain, equal_nan=True)  # random 16x16 noise does not survive 4x4 pixels
    pairs = evaluate_task_pairs(model, sampler, **kw, view=view)
    assert pairs.keys() == evaluate_task_pairs(model, sampler, **kw).keys()
    for fn, args in ((evaluate_task_sequence, {"order": [0, 0]}), (evaluate_task_pairs, {})):
        with pytest.raises(ValueError, match="view: expected probabilities 0 or 1"):
            fn(model, [sampler] if args else sampler, **args, **kw, view=TaskAugment(low_res=0.5))
