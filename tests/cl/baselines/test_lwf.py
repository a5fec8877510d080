from __future__ import annotations

import math

import pytest
import torch

from fastweights.cl.baselines import STRATEGIES
from fastweights.cl.baselines.lwf import LwF
from fastweights.cl.baselines.trainer import fit_stream
from tests.cl.baselines._tiny import FAST, check_runs_and_deterministic, tiny_learner, tiny_tasks


class Watched(LwF):
    """Records the teacher's and the model's outputs on a probe at the start and end of each task."""

    def __init__(self, probe):
        super().__init__(lam=1.0, temperature=2.0)
        self.probe, self.log, self.teachers = probe, [], []

    def _outputs(self, model):
        with torch.no_grad():
            was = model.training
            out = model.eval()(self.probe), None if self.teacher is None else self.teacher(self.probe)
            model.train(was)
            return out

    def before_task(self, model, t, x, y):
        super().before_task(model, t, x, y)
        self.log.append(("start", t, *self._outputs(model)))

    def after_task(self, model, t, x, y):
        self.log.append(("end", t, *self._outputs(model)))
        super().after_task(model, t, x, y)
        self.teachers.append(self.teacher)


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_targets_come_from_a_frozen_copy_of_the_previous_model(kind):
    tasks = tiny_tasks()
    model = tiny_learner(kind)
    strategy = Watched(tasks[0].query_x)
    fit_stream(model, tasks, strategy, FAST, seed=0)
    log = {(when, t): (m, tch) for when, t, m, tch in strategy.log}
    assert log[("start", 0)][1] is None
    for t in (1, 2):
        model_end_prev = log[("end", t - 1)][0]
        start_model, start_teacher = log[("start", t)]
        end_model, end_teacher = log[("end", t)]
        assert torch.equal(start_teacher, model_end_prev)  # the teacher is the model after task t − 1
        assert torch.equal(end_teacher, start_teacher)  # ... and stays fixed while the student trains
        assert not torch.allclose(end_model, start_model)  # the student did change
    for teacher in strategy.teachers:
        assert teacher is not model and not teacher.training
        assert all(not p.requires_grad for p in teacher.parameters())
        live = {p.data_ptr() for p in model.parameters()}
        assert not live & {p.data_ptr() for p in teacher.parameters()}  # a copy, not a view


def test_penalty_is_the_tempered_kl_to_the_teacher():
    model = tiny_learner("mlp")
    x = torch.randn(5, 1, 16, 16)
    strategy = LwF(lam=0.7, temperature=3.0)
    assert strategy.penalty(model, 0, x, None, model(x)) == 0.0  # no teacher on task 0
    strategy.after_task(model, 0, x, None)
    p0 = strategy.penalty(model, 1, x, None, model(x))
    assert float(p0.detach()) == pytest.approx(0.0, abs=1e-7)  # student = teacher
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    logits = model(x)
    pen = strategy.penalty(model, 1, x, None, logits)
    teacher = strategy.teacher(x)
    want = 0.0
    for i in range(5):
        pt, ps = torch.softmax(teacher[i] / 3, -1), torch.softmax(logits[i].detach() / 3, -1)
        want += float((pt * (pt.log() - ps.log())).sum())
    assert pen.item() == pytest.approx(0.7 * 9 * want / 5, rel=1e-4)
    pen.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert all(p.grad is None for p in strategy.teacher.parameters())


def test_registered_hparams_and_errors():
    assert STRATEGIES["lwf"] is LwF
    assert LwF().hparams() == {"lam": 1.0, "temperature": 2.0}
    with pytest.raises(ValueError, match="lam: expected a finite number >= 0.0, got -1"):
        LwF(lam=-1)
    with pytest.raises(ValueError, match="temperature: expected a finite number > 0.0, got 0"):
        LwF(temperature=0)
    with pytest.raises(ValueError, match="temperature: "):
        LwF(temperature=math.inf)
    with pytest.raises(ValueError, match="lam: "):
        LwF(lam="1")


@pytest.mark.parametrize("kind", ["mlp", "conv4"])
def test_runs_with_both_learners_deterministically(kind):
    check_runs_and_deterministic(lambda: LwF(lam=1.0), kind)
