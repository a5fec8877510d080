"""The classifier family's shared training pieces: the validation policy and the opt-in bfloat16
backbone."""

from __future__ import annotations

import pytest
import torch

from fastweights.recipes.classifier import (
    VALIDATION_MAX_BATCH,
    VALIDATION_SEED,
    set_backbone_precision,
    validation_sampling,
)


def test_validation_sampling_is_one_fixed_seed_in_batches_of_at_most_50():
    assert (VALIDATION_SEED, VALIDATION_MAX_BATCH) == (12345, 50)
    assert validation_sampling(200) == {"batch_size": 50, "seed": 12345}
    assert validation_sampling(8) == {"batch_size": 8, "seed": 12345}
    assert validation_sampling(200, seed_offset=1) == {"batch_size": 50, "seed": 12346}


def _conv4_model():
    from torch import nn

    from fastweights.models.backbones import Conv4

    model = nn.Module()
    model.backbone = Conv4(3, 8, image_size=16)
    return model


@pytest.mark.parametrize(
    ("precision", "native", "expected", "level", "words"),
    [
        ("fp32", True, "fp32", None, None),
        ("bf16", True, "bf16", "INFO", "run in bfloat16 (native on this CPU: AVX-512 BF16)"),
        (
            "bf16",
            False,
            "fp32",
            "WARNING",
            "this CPU has no native bfloat16 (none here); the backbone runs in",
        ),
    ],
)
def test_backbone_precision_runs_bf16_only_where_native(
    monkeypatch, caplog, precision, native, expected, level, words
):
    from fastweights.recipes import classifier

    monkeypatch.setattr(
        classifier, "native_bf16", lambda device: (native, "AVX-512 BF16" if native else "none here")
    )
    model = _conv4_model()
    with caplog.at_level("INFO", logger="fastweights.recipes.classifier"):
        assert set_backbone_precision(model, precision, torch.device("cpu")) == expected
    assert model.backbone.precision == expected
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    if level is None:
        assert records == []
    else:
        assert len(records) == 1 and records[0][0] == level and words in records[0][1]


def test_backbone_precision_without_a_conv4_backbone_sets_nothing(caplog):
    from fastweights.models.backbones import FeatureInput

    model = torch.nn.Module()
    model.backbone = FeatureInput(12)
    with caplog.at_level("INFO", logger="fastweights.recipes.classifier"):
        assert set_backbone_precision(model, "bf16", torch.device("cpu")) == "fp32"
    assert "no Conv-4 backbone" in caplog.text
