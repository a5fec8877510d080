"""``recipes/run.py``'s reading of another recipe's run folder: the recipe is named from the folder's
``command.txt``, without importing every recipe."""

from __future__ import annotations

import pytest

from fastweights.recipes.acl.config import ACLConfig
from fastweights.recipes.contract import RECIPES, get_recipe
from fastweights.recipes.run import _run_config, recorded_recipe


@pytest.mark.parametrize(
    ("command", "recipe"),
    [
        ("fastweights acl train --preset smoke --run-dir r\n", "acl"),
        ("fastweights rl train --run-dir r\nfastweights acl train\n", "rl"),
        ("fastweights cl-baselines run --preset smoke r\n", "cl-baselines"),
        ("fastweights compare lm runs/x --models srwm\n", "lm"),
        ("fastweights compare\n", None),
        ("fastweights nonsense train\n", None),
        ("python train.py\n", None),
        ("", None),
    ],
)
def test_recorded_recipe_reads_the_first_command(tmp_path, command, recipe):
    (tmp_path / "command.txt").write_text(command)
    assert recorded_recipe(tmp_path) == recipe


def test_recorded_recipe_without_command_txt(tmp_path):
    assert recorded_recipe(tmp_path) is None


def test_another_recipes_run_is_named(tmp_path):
    (tmp_path / "config.yaml").write_text("name: quick\nenv:\n  suite: minigrid\n")
    (tmp_path / "command.txt").write_text("fastweights rl train --preset quick --run-dir x\n")
    with pytest.raises(ValueError, match=r"holds a `rl` run, not one of this recipe; use `fastweights rl"):
        _run_config(tmp_path / "config.yaml", ACLConfig)


def test_own_recipes_bad_config_keeps_its_error(tmp_path):
    (tmp_path / "config.yaml").write_text("name: quick\nnot_a_key: 1\n")
    (tmp_path / "command.txt").write_text("fastweights acl train --preset quick --run-dir x\n")
    with pytest.raises(ValueError, match="not_a_key") as err:
        _run_config(tmp_path / "config.yaml", ACLConfig)
    assert "holds a" not in str(err.value)


def test_selection_records_the_metric_that_chose_the_best_checkpoint():
    from fastweights.recipes.contract import Selection

    # the loop stores sign * metric as ``best`` (higher is better)
    assert Selection("val_acc", data="meta-val classes").record({"best": 0.75}, "best") == {
        "metric": "val_acc",
        "mode": "max",
        "value": 0.75,
        "data": "meta-val classes",
    }
    assert Selection("val_bpb", minimize=True).record({"best": -1.5}, "best") == {
        "metric": "val_bpb",
        "mode": "min",
        "value": 1.5,
        "data": "",
    }
    latest = Selection("val_acc").record({"best": 0.75}, "latest")
    assert latest == {"metric": "val_acc", "mode": "latest", "value": None, "data": ""}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_declares_its_selection(name):
    from fastweights.recipes.contract import Selection

    selection = get_recipe(name).SELECTION
    assert isinstance(selection, Selection) and selection.metric.startswith("val_")
