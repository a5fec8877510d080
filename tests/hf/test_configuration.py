"""``FastweightsConfig``: the ``LMConfig`` fields as a ``transformers`` config."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

import pytest

pytest.importorskip("transformers")

from transformers import AutoConfig  # noqa: E402

from fastweights.hf import FastweightsConfig  # noqa: E402
from fastweights.models.lm import LMConfig  # noqa: E402


def test_fields_and_defaults_are_lmconfigs():
    assert {f.name for f in fields(LMConfig)} <= {f.name for f in fields(FastweightsConfig)}
    assert FastweightsConfig().to_lm_config() == LMConfig()  # the same defaults


def test_hugging_face_names_read_and_write_the_librarys():
    cfg = FastweightsConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=8, intermediate_size=96)
    assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.d_ff) == (64, 3, 8, 96)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.intermediate_size) == (
        64,
        3,
        8,
        96,
    )


def test_from_lm_config_round_trip():
    lm = LMConfig.preset("micro", sequence_layer="srwm", layer_options={"block": "pre_ln"})
    cfg = FastweightsConfig.from_lm_config(lm, use_cache=False)
    assert cfg.to_lm_config() == lm and cfg.use_cache is False
    cfg.to_lm_config().layer_options["block"] = "native"  # a copy: the config keeps its own
    assert cfg.layer_options == {"block": "pre_ln"}


def test_from_lm_config_refuses_lm_fields_as_kwargs_and_other_types():
    with pytest.raises(ValueError, match=r"kwargs: \['d_model'\] are LMConfig fields"):
        FastweightsConfig.from_lm_config(LMConfig(), d_model=64)
    with pytest.raises(ValueError, match="cfg: expected an LMConfig"):
        FastweightsConfig.from_lm_config({"d_model": 64})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sequence_layer": "mamba2"}, r"sequence_layer: expected one of \("),
        ({"d_model": 30, "num_heads": 4}, "d_model: expected a multiple of num_heads=4, got 30"),
        ({"sequence_layer": "deltanet", "backbone": "mamba"}, "backbone: 'mamba'"),
        ({"backbone": "rnn"}, "backbone: expected one of"),
        ({"dropout": 1.5}, r"dropout: expected a number in \[0, 1\)"),
        ({"ttt_base_lr": -1.0}, "ttt_base_lr: expected None or a finite number > 0"),
        ({"num_layers": 0}, "num_layers"),
        ({"vocab_size": "256"}, "vocab_size"),
        ({"layer_options": {"rope": True}}, "layer_options: \\['rope'\\] are set by the config itself"),
        ({"layer_options": {"block": "post_ln"}}, "block"),
    ],
)
def test_bad_values_are_value_errors_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FastweightsConfig(**kwargs)


def test_config_json_holds_every_lm_field_and_loads_through_autoconfig(tmp_path):
    cfg = FastweightsConfig(sequence_layer="deltanet", d_model=64, num_heads=4)
    cfg.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "fastweights"
    assert {k: raw[k] for k in asdict(LMConfig())} == asdict(cfg.to_lm_config())
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is FastweightsConfig and loaded.to_lm_config() == cfg.to_lm_config()


def test_a_bad_config_json_is_a_value_error_naming_the_field(tmp_path):
    FastweightsConfig().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "sequence_layer": "gru"}))
    with pytest.raises(ValueError, match="sequence_layer: expected one of"):
        AutoConfig.from_pretrained(tmp_path)
