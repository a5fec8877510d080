from __future__ import annotations

import pytest
from torch import nn

from fastweights.train.modes import eval_mode


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))


@pytest.mark.parametrize("training", [True, False])
def test_eval_mode_sets_eval_inside_and_restores_the_previous_mode(training):
    model = _model().train(training)
    with eval_mode(model) as inside:
        assert inside is model
        assert not any(m.training for m in model.modules())
    assert all(m.training == training for m in model.modules())


@pytest.mark.parametrize("training", [True, False])
def test_eval_mode_restores_the_previous_mode_on_exception(training):
    model = _model().train(training)
    with pytest.raises(RuntimeError, match="boom"), eval_mode(model):
        assert not model.training
        raise RuntimeError("boom")
    assert all(m.training == training for m in model.modules())


def test_eval_mode_restores_the_mode_when_a_generator_is_closed_early():
    model = _model().train()

    def batches():
        with eval_mode(model):
            yield from range(3)

    gen = batches()
    assert next(gen) == 0 and not model.training
    gen.close()
    assert model.training
