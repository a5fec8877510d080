from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from fastweights.cl.objective import embed_tasks, synthetic_feature_tasks
from fastweights.cl.tasks import CurriculumStage, TaskSource, curriculum_stage
from fastweights.data.episodes import EpisodeSampler
from tests.cl.test_fewshot import _model, _pool


@dataclass
class _Schedule:
    batch_size: int = 3
    n_way: int = 5
    k_shot: int = 2
    curriculum: list[CurriculumStage] = field(default_factory=lambda: [CurriculumStage(4, 2, 3)])
    synthetic_steps: int = 2
    synthetic_noise: float = 0.5


def _source(seed=0, samplers=None, **kw):
    samplers = samplers or [EpisodeSampler(_pool(seed=1))]
    return TaskSource(
        samplers,
        _Schedule(),
        np.random.default_rng(seed),
        torch.Generator().manual_seed(seed),
        label_space=5,
        **kw,
    )


def test_curriculum_stage_picks_the_first_open_stage_then_the_target():
    s = _Schedule(curriculum=[CurriculumStage(2, 2, 1), CurriculumStage(5, 3, 4)])
    assert [curriculum_stage(s, step) for step in (0, 1, 2, 4, 5, 9)] == [
        (2, 1),
        (2, 1),
        (3, 4),
        (3, 4),
        (5, 2),
        (5, 2),
    ]


@pytest.mark.parametrize("step", [0, 3, 5])  # synthetic + stage, images + stage, images + target
def test_tasks_have_the_stage_shapes_on_synthetic_and_image_steps(step):
    model = _model()
    samplers = [EpisodeSampler(_pool(seed=1)), EpisodeSampler(_pool(seed=2))]
    source = _source(samplers=samplers, tasks_per_sampler=2, n_query=1)
    n_way, k_shot = source.stage(step)
    assert source.is_synthetic(step) == (step < 2)
    tasks = source.tasks(model, step, "cpu")
    assert len(tasks) == 4  # 2 per sampler
    f = model.backbone.feature_dim
    for task in tasks:
        assert task.support_features.shape == (3, n_way * k_shot, f)
        assert task.query_features.shape == (3, n_way, f)
        for labels in task.support_labels:
            assert len(labels.unique()) == n_way and labels.bincount().max() == k_shot
            assert int(labels.max()) < 5  # the label space


def test_tasks_are_the_recipes_former_streams():
    """Synthetic steps draw from the synthetic generator only, image steps from the sampler rng only, in
    the order the recipes used before (so resumed runs and shipped numbers are unchanged)."""
    model = _model()
    source = _source(seed=3, tasks_per_sampler=2, n_query=1, first_shot=True)
    (got,) = source.tasks(model, 0, "cpu")[:1]
    (want,) = synthetic_feature_tasks(
        torch.Generator().manual_seed(3),
        batch_size=3,
        num_tasks=2,
        n_way=2,
        k_shot=3,
        n_query=1,
        feature_dim=model.backbone.feature_dim,
        label_space=5,
    )[:1]
    torch.testing.assert_close(got.support_features, want.support_features)
    assert source.rng.bit_generator.state == np.random.default_rng(3).bit_generator.state
    got = source.tasks(model, 5, "cpu")
    sampler = source.samplers[0]
    batches = sampler.sample(
        np.random.default_rng(3),
        batch_size=3,
        num_tasks=2,
        n_way=5,
        k_shot=2,
        n_query=1,
        label_space=5,
        first_shot=True,
    )
    want = embed_tasks(model, batches, sampler.pool.mean, sampler.pool.std, "cpu")
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.support_features, w.support_features)
        assert torch.equal(g.query_labels, w.query_labels) and g.first_shot_features is not None


def test_same_seed_same_tasks_other_seed_other_tasks():
    model = _model()
    a, b, c = (_source(seed=s).tasks(model, 5, "cpu")[0] for s in (0, 0, 1))
    torch.testing.assert_close(a.support_features, b.support_features)
    assert torch.equal(a.support_labels, b.support_labels)
    assert not torch.equal(a.support_labels, c.support_labels)


def test_a_stage_too_large_for_the_pool_is_reported_by_the_sampler():
    source = _source(samplers=[EpisodeSampler(_pool(c=3, seed=1))])
    with pytest.raises(ValueError, match="n_way"):
        source.tasks(_model(), 5, "cpu")
