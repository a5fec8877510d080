from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from fastweights.cl.tasks import (
    CurriculumStage,
    TaskSource,
    curriculum_stage,
    embed_tasks,
    sample_task_sequences,
    synthetic_feature_tasks,
    task_label_space,
    to_model_images,
)
from fastweights.data.episodes import EpisodeBatch, EpisodeSampler
from fastweights.data.sources.base import ClassPool
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from tests.cl.test_fewshot import _model, _pool


def _conv4_model():
    torch.manual_seed(0)
    return InContextClassifier(
        Conv4(1, 4, image_size=16), 3, d_model=12, num_layers=1, num_heads=3, d_ff=12
    ).double()


def _episode_batch(rng, b=2, n=3, k=2, q=1, first_shot=False):
    def imgs(m):
        return rng.integers(0, 256, (b, m, 16, 16), dtype=np.uint8)

    def labels(m):
        return np.stack([rng.permutation(np.arange(m) % n) for _ in range(b)]).astype(np.int64)

    fs = (imgs(n), labels(n)) if first_shot else (None, None)
    return EpisodeBatch(imgs(n * k), labels(n * k), imgs(n * q), labels(n * q), *fs)


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


# --- multi-domain sequences: two tiny pools whose pixels name their pool and class -------------------
_GRAY_STATS, _RGB_STATS = (0.1, 0.2), ((0.5, 0.4, 0.3), (0.25, 0.2, 0.15))


def gray_and_rgb_pools(classes=6, m=5, s=4):
    """Pool A: grayscale class ``c`` = pixel value ``10 + 10c``, repeated to RGB; pool B: RGB class ``c`` =
    ``(100 + 10c, 30, 200)``. Every image of a class is constant, so its channel means identify it."""
    gray = np.repeat((10 + 10 * np.arange(classes, dtype=np.uint8))[:, None, None, None], s * s, 3)
    gray = np.broadcast_to(gray.reshape(classes, 1, 1, s, s), (classes, m, 1, s, s))
    a = ClassPool(
        "gray",
        np.ascontiguousarray(np.repeat(gray, 3, axis=2)),
        list("abcdef"[:classes]),
        ["x"] * classes,
        *_GRAY_STATS,
    )
    rgb = np.zeros((classes, m, 3, s, s), dtype=np.uint8)
    rgb[:, :, 0] = (100 + 10 * np.arange(classes))[:, None, None, None]
    rgb[:, :, 1], rgb[:, :, 2] = 30, 200
    b = ClassPool("rgb", rgb, list("ghijkl"[:classes]), ["y"] * classes, *_RGB_STATS)
    return a, b


class ChannelMeans(torch.nn.Module):
    """A backbone whose features are the channel means of the (normalised) images: ``[N, 3]``."""

    feature_dim = 3

    def forward(self, images):
        return images.mean(dim=(-2, -1))


def channel_means_model(num_classes=10):
    torch.manual_seed(0)
    model = InContextClassifier(ChannelMeans(), num_classes, d_model=12, num_layers=1, num_heads=3, d_ff=12)
    with torch.no_grad():  # larger weights: an untrained model whose predictions depend on its input
        for p in model.parameters():
            p.mul_(4.0)
    return model


def _pixels(features, pool):
    """Undo ``pool``'s normalisation of channel-mean features ``[..., 3]`` → pixel values ``[..., 3]``."""
    mean, std = (torch.tensor(np.broadcast_to(v, 3), dtype=torch.float64) for v in (pool.mean, pool.std))
    return (features.double() * std + mean) * 255


def _classes(features, pool):
    """The class of every example of ``pool`` from its features (normalised with ``pool``'s stats),
    or -1 where the features are not an image of that pool normalised that way."""
    px = _pixels(features, pool)
    first = (px[..., 0] - (10 if pool.name == "gray" else 100)) / 10
    rest = (px[..., 1:] - px[..., :1]) if pool.name == "gray" else (px[..., 1:] - torch.tensor([30.0, 200.0]))
    ok = (first - first.round()).abs().lt(1e-3) & rest.abs().lt(1e-3).all(-1)
    ok &= first.round().ge(0) & first.round().lt(pool.num_classes)
    return torch.where(ok, first.round().long(), -1)


@dataclass
class _Images:  # a schedule of image steps only: 2-way 2-shot
    batch_size: int = 4
    n_way: int = 2
    k_shot: int = 2
    curriculum: list[CurriculumStage] = field(default_factory=list)
    synthetic_steps: int = 0
    synthetic_noise: float = 0.5


def _two_domain_source(seed=0, schedule=None, **kw):
    a, b = gray_and_rgb_pools()
    kw = {"num_tasks": 3, "alternate": True, "n_query": 2, "label_space": 10, **kw}
    return TaskSource(
        [EpisodeSampler(a), EpisodeSampler(b)],
        schedule or _Images(),
        np.random.default_rng(seed),
        torch.Generator().manual_seed(seed),
        **kw,
    )


def test_alternate_order_rotates_the_samplers_per_step():
    one, two = [EpisodeSampler(_pool(seed=1))], [EpisodeSampler(_pool(seed=1)), EpisodeSampler(_pool(seed=2))]
    three = [*two, EpisodeSampler(_pool(seed=3))]

    def order(samplers, n, **kw):
        return [_source(samplers=samplers, num_tasks=n, **kw).order(s) for s in range(4)]

    assert order(two, 2, alternate=True) == [[0, 1], [1, 0], [0, 1], [1, 0]]  # ACL §4.1: A,B then B,A
    assert order(two, 3, alternate=True) == [[0, 1, 0], [1, 0, 1]] * 2
    assert order(three, 3, alternate=True) == [[0, 1, 2], [2, 0, 1], [1, 2, 0], [0, 1, 2]]  # as automated-cl
    assert order(three, 2, alternate=True)[1] == [2, 0]
    assert order(one, 3, alternate=True) == [[0, 0, 0]] * 4
    assert order(two, 2) == [[0, 1]] * 4  # without alternation: sampler order every step
    # one domain per sequence, the domain changing from batch to batch (5-task meta-finetuning)
    assert order(two, 5, single_domain=True) == [[0] * 5, [1] * 5, [0] * 5, [1] * 5]
    assert order(three, 2, single_domain=True, alternate=True) == [[0, 0], [1, 1], [2, 2], [0, 0]]
    assert _source(samplers=two).order(7) == [0, 1]  # default: one task per sampler
    assert _source(samplers=two, tasks_per_sampler=2).num_tasks == 4  # the former spelling
    with pytest.raises(ValueError, match="num_tasks, tasks_per_sampler"):
        _source(num_tasks=2, tasks_per_sampler=2)
    with pytest.raises(ValueError, match="num_tasks"):
        _source(num_tasks=0)
    with pytest.raises(ValueError, match="scenario"):
        _source(scenario="task")


@pytest.mark.parametrize("step", [0, 1])
def test_each_position_comes_from_its_pool_normalised_with_its_stats(step):
    source = _two_domain_source()
    pools = [s.pool for s in source.samplers]
    tasks = source.tasks(channel_means_model(), step, "cpu")
    assert source.order(step) == ([0, 1, 0] if step == 0 else [1, 0, 1])
    classes = []
    for t, (task, i) in enumerate(zip(tasks, source.order(step), strict=True)):
        own, other = pools[i], pools[1 - i]
        for feats, labels in (
            (task.support_features, task.support_labels),
            (task.query_features, task.query_labels),
        ):
            cls = _classes(feats, own)
            assert (cls >= 0).all(), f"position {t}: not pool {own.name!r} normalised with its stats"
            assert (_classes(feats, other) < 0).all()
            for row in range(4):  # a class keeps its label within a task; 2 classes per task
                pairs = set(zip(cls[row].tolist(), labels[row].tolist(), strict=True))
                assert len(pairs) == 2 and len({c for c, _ in pairs}) == 2 and len({y for _, y in pairs}) == 2
        classes.append(_classes(task.support_features, own))
    # the pool used twice gives its two positions distinct classes in every sequence
    twice = [t for t, i in enumerate(source.order(step)) if source.order(step).count(i) == 2]
    for row in range(4):
        assert not set(classes[twice[0]][row].tolist()) & set(classes[twice[1]][row].tolist())


def test_positions_of_one_sampler_are_drawn_in_one_call_and_placed():
    model = channel_means_model()
    a, b = (EpisodeSampler(p) for p in gray_and_rgb_pools())
    kw = dict(batch_size=3, n_way=2, k_shot=2, n_query=1, label_space=4)
    got = sample_task_sequences(model, [a, b], [1, 0, 1], np.random.default_rng(7), **kw)
    rng = np.random.default_rng(7)  # sampler 0 first (index order), then sampler 1 with 2 tasks
    from_a = a.sample(rng, num_tasks=1, **kw)
    from_b = b.sample(rng, num_tasks=2, **kw)
    want = [
        *embed_tasks(model, from_b[:1], b.pool.mean, b.pool.std, "cpu", channels=3),
        *embed_tasks(model, from_a, a.pool.mean, a.pool.std, "cpu", channels=3),
        *embed_tasks(model, from_b[1:], b.pool.mean, b.pool.std, "cpu", channels=3),
    ]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.support_features, w.support_features)
        torch.testing.assert_close(g.query_features, w.query_features)
        assert torch.equal(g.support_labels, w.support_labels) and torch.equal(g.query_labels, w.query_labels)
    again = sample_task_sequences(model, [a, b], [1, 0, 1], np.random.default_rng(7), **kw)
    assert all(torch.equal(x.support_features, y.support_features) for x, y in zip(got, again, strict=True))
    with pytest.raises(ValueError, match="order"):
        sample_task_sequences(model, [a, b], [0, 2], np.random.default_rng(7), **kw)
    with pytest.raises(ValueError, match="order"):
        sample_task_sequences(model, [a, b], [], np.random.default_rng(7), **kw)


@pytest.mark.parametrize("step", [0, 3])  # a synthetic step, an image step
def test_class_incremental_labels_are_shifted_by_n_way_per_position(step):
    schedule = _Images(synthetic_steps=2)
    source = _two_domain_source(schedule=schedule, scenario="class", first_shot=True, label_space=6)
    tasks = source.tasks(channel_means_model(), step, "cpu")
    assert len(tasks) == 3
    for t, task in enumerate(tasks):
        fields = [task.support_labels, task.query_labels]
        if step >= 2:  # first-shot demos exist on image steps only
            fields.append(task.first_shot_labels)
        for labels in fields:
            for row in labels:
                assert sorted(row.unique().tolist()) == [2 * t, 2 * t + 1]
    domain = _two_domain_source(schedule=schedule, label_space=2).tasks(channel_means_model(), step, "cpu")
    for task in domain:  # domain-incremental: every task labelled in 0..label_space-1
        assert set(task.support_labels.unique().tolist()) == {0, 1}
        assert set(task.query_labels.unique().tolist()) == {0, 1}


@pytest.mark.parametrize("step", [0, 3])
def test_a_label_space_too_small_for_the_scenario_is_refused(step):
    model, schedule = channel_means_model(num_classes=5), _Images(synthetic_steps=2)
    with pytest.raises(
        ValueError, match=r"label_space: scenario 'class' needs n_way \* num_tasks = 2 \* 3 = 6"
    ):
        _two_domain_source(schedule=schedule, scenario="class", label_space=5).tasks(model, step, "cpu")
    with pytest.raises(ValueError, match="the model's outputs"):  # default: the model's 5 outputs
        sample_task_sequences(
            model,
            _two_domain_source().samplers,
            [0, 1, 0],
            np.random.default_rng(0),
            batch_size=2,
            n_way=2,
            k_shot=1,
            n_query=1,
            scenario="class",
        )
    with pytest.raises(ValueError, match="label_space: expected <= the model's 5 outputs, given 10"):
        _two_domain_source(schedule=schedule, label_space=10).tasks(model, step, "cpu")
    with pytest.raises(ValueError, match="label_space: scenario 'domain' needs n_way = 2 labels, given 1"):
        _two_domain_source(schedule=schedule, label_space=1).tasks(model, step, "cpu")
    assert task_label_space("class", n_way=2, num_tasks=3, label_space=None, outputs=6) == 2
    assert task_label_space("domain", n_way=2, num_tasks=3, label_space=None, outputs=6) == 2
    assert task_label_space("domain", n_way=2, num_tasks=3, label_space=4, outputs=6) == 4


def test_embed_tasks_matches_separate_backbone_calls():
    model, rng = _conv4_model(), np.random.default_rng(0)
    batches = [_episode_batch(rng), _episode_batch(rng, first_shot=True)]
    tasks = embed_tasks(model, batches, 0.5, 0.25, "cpu")
    for eb, t in zip(batches, tasks, strict=True):
        for arr, feats in ((eb.support_images, t.support_features), (eb.query_images, t.query_features)):
            expected = model.embed(to_model_images(arr, 0.5, 0.25, "cpu", torch.float64))
            torch.testing.assert_close(feats, expected)
        assert torch.equal(t.support_labels, torch.from_numpy(eb.support_labels))
    assert tasks[0].first_shot_features is None and tasks[1].first_shot_features.shape[1] == 3


def test_to_model_images_normalises():
    x = np.array([[0, 255]], dtype=np.uint8).reshape(1, 1, 2)
    t = to_model_images(x, 0.5, 0.5, "cpu")
    assert t.shape == (1, 1, 1, 2) and t.flatten().tolist() == [-1.0, 1.0]


def test_synthetic_feature_tasks_shapes_labels_and_reproducibility():
    kw = dict(batch_size=3, num_tasks=2, n_way=2, k_shot=4, n_query=3, feature_dim=8, label_space=5)
    a = synthetic_feature_tasks(torch.Generator().manual_seed(0), **kw)
    b = synthetic_feature_tasks(torch.Generator().manual_seed(0), **kw)
    assert len(a) == 2
    for ta, tb in zip(a, b, strict=True):
        assert ta.support_features.shape == (3, 8, 8) and ta.query_features.shape == (3, 6, 8)
        assert torch.equal(ta.support_features, tb.support_features)
        assert (ta.support_features >= 0).all()
        for row in range(3):
            labels = set(ta.support_labels[row].tolist())
            assert len(labels) == 2 and labels <= set(range(5))  # 2 classes mapped into 0..4
            assert set(ta.query_labels[row].tolist()) == labels
            for lab in labels:  # K demos per class, Q queries per class
                assert (ta.support_labels[row] == lab).sum() == 4 and (ta.query_labels[row] == lab).sum() == 3
    # examples of the same class are closer to each other than to the other class
    t = a[0]
    f, y = t.support_features[0], t.support_labels[0]
    d = torch.cdist(f, f)
    same = d[y[:, None] == y[None, :]].sum() / ((y[:, None] == y[None, :]).sum() - len(y))
    diff = d[y[:, None] != y[None, :]].mean()
    assert same < diff
    c = synthetic_feature_tasks(torch.Generator().manual_seed(1), **kw)
    assert not torch.equal(c[0].support_features, a[0].support_features)


def test_synthetic_feature_tasks_with_first_shot_demos():
    kw = dict(batch_size=3, num_tasks=2, n_way=3, k_shot=2, n_query=1, feature_dim=8, label_space=5)
    plain = synthetic_feature_tasks(torch.Generator().manual_seed(0), **kw)
    with_fs = synthetic_feature_tasks(torch.Generator().manual_seed(0), **kw, first_shot=True)
    assert plain[0].first_shot_features is None and plain[0].first_shot_labels is None
    # the first task's support and queries are drawn before its first-shot demos: unchanged
    assert torch.equal(plain[0].support_features, with_fs[0].support_features)
    assert torch.equal(plain[0].query_labels, with_fs[0].query_labels)
    for task in with_fs:
        assert task.first_shot_features.shape == (3, 3, 8) and task.first_shot_labels.shape == (3, 3)
        for row in range(3):  # one demo of each of the task's classes
            assert sorted(task.first_shot_labels[row].tolist()) == sorted(
                set(task.support_labels[row].tolist())
            )


def test_to_model_images_per_channel():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (2, 5, 3, 4, 4), dtype=np.uint8)
    mean, std = (0.1, 0.5, 0.9), (0.2, 0.25, 0.5)
    t = to_model_images(x, mean, std, "cpu", torch.float64, channels=3)
    assert t.shape == (2, 5, 3, 4, 4) and t.dtype == torch.float64
    for c in range(3):
        expected = (x[:, :, c] / 255.0 - mean[c]) / std[c]
        np.testing.assert_allclose(t[:, :, c].numpy(), expected, rtol=1e-12)
    same = to_model_images(x, 0.5, 0.25, "cpu", channels=3)  # one value for every channel
    np.testing.assert_allclose(same.numpy(), (x / 255.0 - 0.5) / 0.25, rtol=1e-5, atol=1e-6)
    gray = to_model_images(x[:, :, 0], 0.5, 0.25, "cpu")
    assert gray.shape == (2, 5, 1, 4, 4)
    with pytest.raises(ValueError, match="channels=3"):
        to_model_images(x[:, :, :2], mean, std, "cpu", channels=3)
    with pytest.raises(ValueError, match="mean: expected 1 or 3 values"):
        to_model_images(x, (0.1, 0.2), std, "cpu", channels=3)
    with pytest.raises(ValueError, match="channels"):
        to_model_images(x, mean, std, "cpu", channels=2)


def test_embed_tasks_rgb():
    model = InContextClassifier(Conv4(3, 8, image_size=16), 5, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    rng = np.random.default_rng(0)
    batch = EpisodeBatch(
        rng.integers(0, 256, (2, 4, 3, 16, 16), dtype=np.uint8),
        np.zeros((2, 4), np.int64),
        rng.integers(0, 256, (2, 2, 3, 16, 16), dtype=np.uint8),
        np.zeros((2, 2), np.int64),
    )
    (task,) = embed_tasks(model, [batch], (0.4, 0.5, 0.6), (0.2, 0.3, 0.4), "cpu", channels=3)
    expected = model.embed(
        to_model_images(batch.query_images, (0.4, 0.5, 0.6), (0.2, 0.3, 0.4), "cpu", channels=3)
    )
    torch.testing.assert_close(task.query_features, expected)
    assert task.support_features.shape[:2] == (2, 4)
