from __future__ import annotations

import pytest
import torch

from fastweights.cl.sequential import delayed_label_stream, evaluate_sequential, sequential_loss
from fastweights.cl.tasks import TaskTensors
from fastweights.data.episodes import EpisodeSampler
from tests.cl.test_fewshot import _model, _pool


def _task(labels):
    labels = torch.tensor([labels])
    feats = torch.arange(labels.numel(), dtype=torch.float32).reshape(1, -1, 1).expand(1, -1, 3)
    return TaskTensors(feats, labels, feats[:, :0], labels[:, :0])


def test_stream_delays_labels_counts_occurrences_and_trims():
    a, b = _task([2, 0, 2, 1, 2]), _task([4, 4, 3])
    s = delayed_label_stream([a, b], lengths=[4, 3], unknown_label=5)
    assert s.targets.tolist() == [[2, 0, 2, 1, 4, 4, 3]]
    assert s.input_labels.tolist() == [[5, 2, 0, 2, 1, 4, 4]]
    assert s.task_index.tolist() == [[0, 0, 0, 0, 1, 1, 1]]
    assert s.occurrence.tolist() == [[1, 1, 2, 1, 1, 2, 1]]  # counted within each task
    assert s.features.shape == (1, 7, 3)
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        delayed_label_stream([a, b], lengths=[4, 4], unknown_label=5)
    with pytest.raises(ValueError, match="lengths"):
        delayed_label_stream([a, b], lengths=[4], unknown_label=5)


def test_prediction_at_t_does_not_see_label_t():
    """Changing y_t changes inputs only from step t + 1 on: the logits up to t are unchanged."""
    model = _model("deltanet").double()
    a = _task([0, 1, 2, 3, 4])
    a.support_features = torch.randn(1, 5, model.backbone.feature_dim, dtype=torch.float64)
    b = TaskTensors(a.support_features, torch.tensor([[0, 1, 4, 3, 4]]), a.query_features, a.query_labels)
    la = sequential_loss(model, delayed_label_stream([a], lengths=[5], unknown_label=5))[1]
    lb = sequential_loss(model, delayed_label_stream([b], lengths=[5], unknown_label=5))[1]
    torch.testing.assert_close(la[:, :3], lb[:, :3])
    assert (la[:, 3:] - lb[:, 3:]).abs().max() > 0


def test_evaluation_reports_tasks_occurrences_and_positions():
    model = _model()
    samplers = [EpisodeSampler(_pool(seed=1)), EpisodeSampler(_pool(seed=2))]
    res = evaluate_sequential(model, samplers, n_way=5, k_shot=3, episodes=9, batch_size=4, seed=0)
    assert len(res["by_position"]) == 30 and len(res["per_task"]) == 2
    assert [len(occ) for occ in res["by_occurrence"]] == [3, 3]  # accuracy at occurrence k = index k - 1
    assert all(0.0 <= a <= 1.0 for occ in res["by_occurrence"] for a in occ)
    assert res == evaluate_sequential(model, samplers, n_way=5, k_shot=3, episodes=9, batch_size=4, seed=0)
