from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fastweights.cl.objective import acl_loss, sequence_query_logits
from fastweights.cl.tasks import embed_tasks
from tests.cl.test_tasks import _conv4_model as _model
from tests.cl.test_tasks import _episode_batch as _batch


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


def _feature_model():
    from fastweights.models.backbones import FeatureInput
    from fastweights.models.in_context import InContextClassifier

    torch.manual_seed(0)
    return InContextClassifier(FeatureInput(6), 6, d_model=16, num_layers=1, num_heads=2, d_ff=16).double()


def _feature_tasks(num_tasks=3, b=2, n=2, k=2, q=2, seed=0):
    from fastweights.cl.tasks import TaskTensors

    g = torch.Generator().manual_seed(seed)
    tasks = []
    for t in range(num_tasks):  # class-incremental labels 2t, 2t+1, interleaved
        labels = torch.stack([torch.randperm(n * k, generator=g) % n for _ in range(b)]) + n * t
        qlabels = torch.stack([torch.randperm(n * q, generator=g) % n for _ in range(b)]) + n * t
        feats = torch.randn(b, n * k, 6, generator=g, dtype=torch.float64)
        tasks.append(
            TaskTensors(feats, labels, torch.randn(b, n * q, 6, generator=g, dtype=torch.float64), qlabels)
        )
    return tasks


def test_replay_off_reads_every_support_as_before():
    """Regression: without replay the states and losses are those of reading each support as it is."""
    model, tasks = _feature_model(), _feature_tasks()
    logits, _ = sequence_query_logits(model, tasks, replay=None)
    state, manual = None, {}
    for i, task in enumerate(tasks):  # the reading of sequence_query_logits before replay existed
        _, state = model.forward_features(task.support_features, task.support_labels, state)
        for j in range(i + 1):
            manual[(i, j)] = model.query_features(tasks[j].query_features, state)
    assert logits.keys() == manual.keys()
    for key, lg in logits.items():
        torch.testing.assert_close(lg, manual[key], rtol=0, atol=0)
    loss, accs = acl_loss(model, tasks, online_weight=0.5)
    loss_off, accs_off = acl_loss(model, tasks, online_weight=0.5, replay=None, generator=None)
    assert torch.equal(loss, loss_off) and accs == accs_off


@pytest.mark.parametrize("order", ["before", "mixed"])
def test_replay_reads_memory_and_task_demos(order):
    from fastweights.cl.context_replay import ContextReplay, replay_memory, replay_support

    model, tasks = _feature_model(), _feature_tasks()
    replay = ContextReplay(1, order)
    logits, online = sequence_query_logits(
        model, tasks, replay=replay, generator=torch.Generator().manual_seed(5), online=True
    )
    g = torch.Generator().manual_seed(5)
    state = None
    for i, task in enumerate(tasks):  # by hand: memory (first demo of each class) + task i's demos
        if i == 0:
            feats, labels = task.support_features, task.support_labels
        elif order == "before":
            mem = [replay_memory(t.support_features, t.support_labels, 1) for t in tasks[:i]]
            feats = torch.cat([m[0] for m in mem] + [task.support_features], dim=1)
            labels = torch.cat([m[1] for m in mem] + [task.support_labels], dim=1)
            assert labels.shape[1] == 2 * i + 4
        else:
            prev = tasks[:i]
            feats, labels, _ = replay_support(
                [t.support_features for t in prev],
                [t.support_labels for t in prev],
                task.support_features,
                task.support_labels,
                per_class=1,
                order="mixed",
                generator=g,
            )
        _, ol, state = model.forward_features_online(feats, labels, state)
        for j in range(i + 1):
            torch.testing.assert_close(logits[(i, j)], model.query_features(tasks[j].query_features, state))
        assert online[i].shape == (2, 4, 6)  # the online predictions of the task's own demos
        if order == "before":
            torch.testing.assert_close(online[i], ol[:, -4:])
    off, _ = sequence_query_logits(model, tasks)
    torch.testing.assert_close(logits[(0, 0)], off[(0, 0)])  # task 0 has nothing to replay
    assert not torch.allclose(logits[(1, 0)], off[(1, 0)])
    loss, _ = acl_loss(model, tasks, replay=replay, generator=torch.Generator().manual_seed(5))
    assert torch.isfinite(loss)
