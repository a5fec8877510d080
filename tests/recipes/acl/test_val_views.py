"""``train.val_views``: meta-validation in fixed views of the meta-validation classes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastweights.config import load_config, preset_path
from fastweights.recipes import acl
from fastweights.recipes.acl import ACLConfig, selection_data

CROSS = ["data.sources=[fontglyphs,emoji]", "data.channels=3", "train.max_steps=2", "train.val_every_steps=2"]


def _cfg(data_cache, *overrides):
    return load_config(
        ACLConfig, preset_path("acl", "smoke"), [f"data.cache_dir={data_cache}", *CROSS, *overrides]
    )


def _last(run):
    return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])


def test_each_view_is_recorded_and_the_objective_is_their_mean(tmp_path, data_cache):
    acl.train(_cfg(data_cache, "train.val_episodes=4"), tmp_path / "plain")
    views = "train.val_views=[original,grayscale,low_res]"
    acl.train(_cfg(data_cache, "train.val_episodes=4", views), tmp_path / "views")
    plain, seen = _last(tmp_path / "plain"), _last(tmp_path / "views")
    # the training steps do not depend on validation: the original view scores what the plain run scores
    assert seen["val_objective[original]"] == plain["val_objective"]
    assert seen["val_A|A[original]"] == plain["val_A|A"]
    means = np.mean([seen[f"val_objective[{v}]"] for v in ("original", "grayscale", "low_res")])
    assert seen["val_objective"] == pytest.approx(means, abs=1e-12)
    assert seen["val_acc"] == pytest.approx(
        np.mean([seen[f"val_acc[{v}]"] for v in ("original", "grayscale", "low_res")]), abs=1e-12
    )


def test_selection_data_names_the_views(data_cache):
    cfg = _cfg(data_cache, "train.val_views=[original,low_res]")
    assert "in the views original, low_res (the objective their mean)" in selection_data(cfg)
    assert "views" not in selection_data(_cfg(data_cache))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[original,sepia]", "val_views: expected a non-empty list of values from"),
        ("[]", "val_views: expected a non-empty list"),
        ("[low_res,low_res]", "val_views: expected distinct views"),
    ],
)
def test_bad_views_name_the_key(data_cache, value, message):
    with pytest.raises(ValueError, match=message):
        _cfg(data_cache, f"train.val_views={value}")
