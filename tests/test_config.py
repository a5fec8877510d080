from __future__ import annotations

import pytest

from fastweights.config import apply_overrides, config_from_yaml, config_to_yaml, load_config, preset_path
from fastweights.recipes.acl_config import ACLConfig, CurriculumStage


@pytest.mark.parametrize("preset", ["smoke", "quick", "standard", "paper"])
def test_presets_load_and_round_trip(preset):
    cfg = load_config(ACLConfig, preset_path("acl", preset))
    assert cfg.name == preset
    assert config_from_yaml(ACLConfig, config_to_yaml(cfg)) == cfg


def test_overrides_are_typed_and_validated():
    cfg = load_config(ACLConfig, None, ["train.lr=0.01", "model.d_model=64", "train.acl_loss=false"])
    assert (cfg.train.lr, cfg.model.d_model, cfg.train.acl_loss) == (0.01, 64, False)
    cfg = apply_overrides(cfg, ["train.curriculum=[{until_step: 5, n_way: 2, k_shot: 1}]"])
    assert cfg.train.curriculum == [CurriculumStage(5, 2, 1)]
    with pytest.raises(ValueError, match="nope"):
        load_config(ACLConfig, None, ["train.nope=1"])
    with pytest.raises(ValueError, match="d_model"):
        load_config(ACLConfig, None, ["model.d_model=abc"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(cfg, ["train.lr"])
    with pytest.raises(FileNotFoundError, match="available presets"):
        preset_path("acl", "nope")
