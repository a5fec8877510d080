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
