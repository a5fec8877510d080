"""Regression: the sequential recipe's image steps follow the curriculum stage (they sampled the final
``train.n_way``/``train.k_shot`` while the stream lengths and logs came from the stage)."""

from __future__ import annotations

import numpy as np

from fastweights.config import load_config, preset_path
from fastweights.data.episodes import EpisodeSampler
from fastweights.recipes import sequential
from fastweights.recipes.sequential.config import SequentialConfig


def test_image_steps_during_a_curriculum_stage_sample_the_stage_tasks(tmp_path, monkeypatch, data_cache):
    calls = []
    original = EpisodeSampler.sample

    def recording(self, rng, **kw):
        batches = original(self, rng, **kw)
        calls.append(batches)
        return batches

    monkeypatch.setattr(EpisodeSampler, "sample", recording)
    cfg = load_config(
        SequentialConfig,
        preset_path("sequential", "smoke"),
        [
            f"domain_a.cache_dir={data_cache}",
            "train.synthetic_steps=0",  # every step samples images
            "train.curriculum=[{until_step: 3, n_way: 2, k_shot: 3}]",
            "train.max_steps=3",
            "train.val_every_steps=3",
        ],
    )
    sequential.train(cfg, tmp_path / "run")
    training = calls[:6]  # steps 0, 1, 2: one task per domain each; validation comes after step 3
    assert len(training) == 6
    for (batch,) in training:
        assert batch.support_images.shape[:2] == (cfg.train.batch_size, 2 * 3)  # the stage's N * K demos
        for labels in batch.support_labels:
            assert len(np.unique(labels)) == 2  # the stage's 2 ways
            assert np.bincount(labels).max() == 3  # K = 3 demonstrations per class
