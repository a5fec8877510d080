from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fastweights.cl.objective import acl_loss, embed_tasks, sequence_query_logits, to_model_images
from fastweights.data.episodes import EpisodeBatch
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier


def _model():
    torch.manual_seed(0)
    return InContextClassifier(
        Conv4(1, 4, image_size=16), 3, d_model=12, num_layers=1, num_heads=3, d_ff=12
    ).double()


def _batch(rng, b=2, n=3, k=2, q=1, first_shot=False):
    def imgs(m):
        return rng.integers(0, 256, (b, m, 16, 16), dtype=np.uint8)

    def labels(m):
        return np.stack([rng.permutation(np.arange(m) % n) for _ in range(b)]).astype(np.int64)

    fs = (imgs(n), labels(n)) if first_shot else (None, None)
    return EpisodeBatch(imgs(n * k), labels(n * k), imgs(n * q), labels(n * q), *fs)


def test_embed_tasks_matches_separate_backbone_calls():
    model, rng = _model(), np.random.default_rng(0)
    batches = [_batch(rng), _batch(rng, first_shot=True)]
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


@pytest.mark.parametrize("num_tasks", [1, 2, 3])
@pytest.mark.parametrize("backward", [True, False])
def test_acl_loss_is_mean_of_query_terms(num_tasks, backward):
    model, rng = _model(), np.random.default_rng(1)
    tasks = embed_tasks(model, [_batch(rng) for _ in range(num_tasks)], 0.5, 0.25, "cpu")
    loss, accs = acl_loss(model, tasks, backward=backward)
    logits, _ = sequence_query_logits(model, tasks, backward=backward)
    expected_terms = {
        (i, j) for i in range(num_tasks) for j in range(num_tasks) if j == i or (backward and j < i)
    }
    assert set(logits) == set(accs) == expected_terms
    manual = torch.stack(
        [F.cross_entropy(lg.flatten(0, 1), tasks[j].query_labels.flatten()) for (i, j), lg in logits.items()]
    ).mean()
    torch.testing.assert_close(loss, manual)
    # queries of task j after task i read the state after i's support set: changing a later task's
    # support changes the backward term but not the earlier one
    if backward and num_tasks >= 2:
        tasks[1].support_labels = (tasks[1].support_labels + 1) % 3
        logits2, _ = sequence_query_logits(model, tasks, backward=True)
        torch.testing.assert_close(logits2[(0, 0)], logits[(0, 0)])
        assert not torch.allclose(logits2[(1, 0)], logits[(1, 0)])


def test_online_and_first_shot_terms_change_the_loss():
    model, rng = _model(), np.random.default_rng(2)
    tasks = embed_tasks(model, [_batch(rng, first_shot=True) for _ in range(2)], 0.5, 0.25, "cpu")
    base, _ = acl_loss(model, tasks)
    with_online, _ = acl_loss(model, tasks, online_weight=1.0)
    with_fs, _ = acl_loss(model, tasks, first_shot=True)
    assert with_online.item() > base.item() and not torch.isclose(with_fs, base)
    no_fs = embed_tasks(model, [_batch(rng) for _ in range(2)], 0.5, 0.25, "cpu")
    with pytest.raises(ValueError, match="first_shot"):
        acl_loss(model, no_fs, first_shot=True)


def test_synthetic_feature_tasks_shapes_labels_and_reproducibility():
    from fastweights.cl.objective import synthetic_feature_tasks

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
