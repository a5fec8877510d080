"""Smoke-trained ACL models shared by the learner and stream tests (one training step each, trained once
per test session on the session's data cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastweights.config import load_config, preset_path
from fastweights.recipes import acl
from fastweights.recipes.acl.config import ACLConfig

# a domain-incremental 5-output grayscale model (the smoke preset), its 10-output class-incremental
# twin (5 two-way tasks, as the 5-task meta-finetuning) and an RGB one (grayscale glyphs fed as RGB)
SMOKE_MODELS = {
    "domain": [],
    "class": ["model.num_classes=10", "train.scenario=class", "train.num_tasks=5", "train.n_way=2"],
    "rgb": ["data.channels=3"],
}


def _train(root: Path, data_cache: Path, name: str) -> Path:
    overrides = [
        f"data.cache_dir={data_cache}",
        "train.max_steps=1",
        "train.val_every_steps=1",
        "train.val_episodes=1",
        "train.threads=1",
        *SMOKE_MODELS[name],
    ]
    run = root / name
    acl.train(load_config(ACLConfig, preset_path("acl", "smoke"), overrides), run)
    return run


@pytest.fixture(scope="session")
def smoke_domain(tmp_path_factory, data_cache) -> Path:
    """Run folder of the smoke preset trained one step: domain-incremental, 5 outputs, grayscale."""
    return _train(tmp_path_factory.mktemp("acl-smoke"), data_cache, "domain")


@pytest.fixture(scope="session")
def smoke_class(tmp_path_factory, data_cache) -> Path:
    """Run folder of a one-step class-incremental smoke model: 10 outputs, grayscale."""
    return _train(tmp_path_factory.mktemp("acl-smoke"), data_cache, "class")


@pytest.fixture(scope="session")
def smoke_rgb(tmp_path_factory, data_cache) -> Path:
    """Run folder of a one-step smoke model with a 3-channel backbone (domain-incremental, 5 outputs)."""
    return _train(tmp_path_factory.mktemp("acl-smoke"), data_cache, "rgb")
