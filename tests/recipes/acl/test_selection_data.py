"""``run.selected_on.data``: the ACL run's meta-validation data in words, derived from its config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fastweights.config import config_from_mapping
from fastweights.recipes.acl import SELECTION, ACLConfig, selection_data

EVIDENCE = Path(__file__).resolve().parents[3] / "docs" / "evidence"


def _cfg(**train: object) -> ACLConfig:
    return config_from_mapping(
        ACLConfig,
        {
            "data": {"sources": ["fontglyphs", "emoji", "handwriting"], "channels": 3},
            "model": {"num_classes": 10},
            "train": train,
        },
    )


def test_two_task_domain_runs_validate_on_both_orders_of_the_first_two_domains() -> None:
    text = selection_data(_cfg())
    assert "task pairs fontglyphs -> emoji and emoji -> fontglyphs" in text
    assert "handwriting" not in text and "5-way 5-shot; 100 fixed episodes" in text


def test_the_no_acl_score_says_it_leaves_out_the_backward_terms() -> None:
    assert "leaves out the backward-transfer terms" in selection_data(_cfg(acl_loss=False))
    assert "backward" not in selection_data(_cfg())


@pytest.mark.parametrize("scenario", ["domain", "class"])
def test_five_task_sequences_name_their_domains(scenario: str) -> None:
    single = selection_data(_cfg(num_tasks=5, n_way=2, scenario=scenario, sequence_domains="single"))
    assert f"5-task {scenario}-incremental sequences within one domain: fontglyphs and emoji" in single
    alternate = selection_data(_cfg(num_tasks=5, n_way=2, scenario=scenario))
    assert "alternating over fontglyphs, emoji, handwriting, starting from fontglyphs and emoji" in alternate


def test_the_record_carries_the_configs_description() -> None:
    cfg = _cfg(num_tasks=5, n_way=2, scenario="class", sequence_domains="single")
    record = SELECTION.record({"best": 0.5}, "best", cfg)
    assert record == {"metric": "val_objective", "mode": "max", "value": 0.5, "data": selection_data(cfg)}


def test_every_acl_evidence_file_states_the_data_its_config_validated_on() -> None:
    files = sorted(EVIDENCE.glob("**/results.json"))
    checked = 0
    for f in files:
        run = json.loads(f.read_text())["run"]
        if run.get("selected_on", {}).get("metric") != "val_objective":
            continue
        cfg = config_from_mapping(ACLConfig, yaml.safe_load((f.parent / "config.yaml").read_text()))
        assert run["selected_on"]["data"] == selection_data(cfg), f
        checked += 1
    assert checked >= 40
