"""Deprecated spellings (renamed config keys, ``compare --mixers``) keep working for one release, each with
a one-line warning on stderr naming the old and the new spelling; old and new together are an error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fastweights.cli import main
from fastweights.config import (
    apply_overrides,
    config_from_yaml,
    config_to_yaml,
    load_config,
    load_run_config,
    preset_path,
    rename_deprecated,
)
from fastweights.io import read_jsonl
from fastweights.models.lm import CausalLM, LMConfig
from fastweights.recipes.acl.config import ACLConfig
from fastweights.recipes.lm.config import LMRecipeConfig
from tests.recipes.lm import test_lm

corpus = test_lm.corpus  # the generated text corpus fixture of the LM recipe tests

# the LM smoke preset written with the deprecated keys
OLD_LM_MODEL = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "mixer": "deltanet",
    "mixer_options": {"chunk_size": 8},
}
NEW_LM_MODEL = {
    "d_model": 32,
    "num_layers": 1,
    "num_heads": 2,
    "d_ff": 64,
    "sequence_layer": "deltanet",
    "layer_options": {"chunk_size": 8},
}


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("fastweights: warning:")]


def _old_keys(text: str) -> str:
    """A run folder's ``config.yaml`` / an export's ``config.json`` as written before the rename."""
    for old, new in LMConfig.DEPRECATED_FIELDS.items():
        text = re.sub(rf"(^|\W){new}(?=\W)", rf"\g<1>{old}", text, flags=re.M)
    return text


def test_warning_text_names_old_and_new(capsys):
    assert rename_deprecated(["model.mixer=srwm"], LMRecipeConfig.DEPRECATED_KEYS, "overrides") == [
        "model.sequence_layer=srwm"
    ]
    assert capsys.readouterr().err == (
        "fastweights: warning: model.mixer is deprecated; use model.sequence_layer (overrides)\n"
    )


def test_dotlist_renames_keys_and_subkeys_once_each(capsys):
    items = ["model.mixer_options.chunk_size=8", "model.mixer_options.x=a=b", "train.lr=0.1", "model.mixer=x"]
    out = rename_deprecated(items, LMRecipeConfig.DEPRECATED_KEYS, "overrides")
    assert out == [
        "model.layer_options.chunk_size=8",
        "model.layer_options.x=a=b",
        "train.lr=0.1",
        "model.sequence_layer=x",
    ]
    assert items[0] == "model.mixer_options.chunk_size=8"  # the caller's list is not changed
    assert _warnings(capsys.readouterr().err) == [
        "fastweights: warning: model.mixer is deprecated; use model.sequence_layer (overrides)",
        "fastweights: warning: model.mixer_options is deprecated; use model.layer_options (overrides)",
    ]


def test_yaml_preset_with_old_keys_loads(tmp_path, capsys):
    text = preset_path("lm", "smoke").read_text()
    path = tmp_path / "old.yaml"
    path.write_text(
        _old_keys(text.replace("  mini_batch_size: 8\n", "  mini_batch_size: 8\n  mixer: deltanet\n"))
    )
    assert "hidden_size: 32" in path.read_text() and "d_model" not in path.read_text()
    cfg = load_config(LMRecipeConfig, path)
    new = load_config(LMRecipeConfig, preset_path("lm", "smoke"), ["model.sequence_layer=deltanet"])
    assert cfg == new
    warnings = _warnings(capsys.readouterr().err)
    assert (
        f"fastweights: warning: model.hidden_size is deprecated; use model.d_model (config: {path})"
        in warnings
    )
    assert len(warnings) == 5  # hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, mixer

    acl = tmp_path / "acl.yaml"
    acl.write_text(preset_path("acl", "smoke").read_text().replace("  episodes: 10", "  fewshot_episodes: 7"))
    assert load_config(ACLConfig, acl).eval.episodes == 7
    assert _warnings(capsys.readouterr().err) == [
        f"fastweights: warning: eval.fewshot_episodes is deprecated; use eval.episodes (config: {acl})"
    ]


def test_yaml_error_of_an_old_key_names_its_line(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("name: x\nmodel:\n  vocab_size: 256\n  hidden_size: abc\n")
    with pytest.raises(ValueError, match=rf"^config: {re.escape(str(path))}: line 4: model\.d_model: "):
        load_config(LMRecipeConfig, path)


def test_overrides_with_old_keys(capsys):
    old = [f"model.{k}={v}" for k, v in OLD_LM_MODEL.items() if k != "mixer_options"]
    cfg = load_config(LMRecipeConfig, None, [*old, "model.mixer_options.chunk_size=8"])
    assert {k: getattr(cfg.model, k) for k in NEW_LM_MODEL} == NEW_LM_MODEL
    assert len(_warnings(capsys.readouterr().err)) == 6
    acl = apply_overrides(ACLConfig(), ["eval.fewshot_episodes=3"])
    assert acl.eval.episodes == 3
    assert "eval.fewshot_episodes is deprecated; use eval.episodes" in capsys.readouterr().err


def test_old_and_new_together_is_an_error(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"^overrides: both model\.mixer \(deprecated\) and model\.sequence_layer are given; "
        r"keep only model\.sequence_layer$",
    ):
        load_config(LMRecipeConfig, None, ["model.mixer=srwm", "model.sequence_layer=deltanet"])
    with pytest.raises(ValueError, match=r"both eval\.fewshot_episodes \(deprecated\) and eval\.episodes"):
        apply_overrides(ACLConfig(), ["eval.episodes=3", "eval.fewshot_episodes=4"])
    path = tmp_path / "both.yaml"
    path.write_text("model:\n  hidden_size: 64\n  d_model: 64\n")
    with pytest.raises(ValueError, match=rf"^config: {re.escape(str(path))}: both model\.hidden_size"):
        load_config(LMRecipeConfig, path)
    with pytest.raises(
        ValueError, match=r"^config: both model\.mixer \(deprecated\) and model\.sequence_layer"
    ):
        config_from_yaml(LMRecipeConfig, "model:\n  mixer: srwm\n  sequence_layer: srwm\n")
    with pytest.raises(ValueError, match=r"^config: both mixer \(deprecated\) and sequence_layer are given"):
        LMConfig.from_dict({"mixer": "srwm", "sequence_layer": "srwm"})


def test_config_from_yaml_and_run_config_read_old_keys(tmp_path, capsys):
    cfg = load_config(LMRecipeConfig, preset_path("lm", "smoke"))
    old = _old_keys(config_to_yaml(cfg))
    assert "mixer: ttt_linear" in old and "sequence_layer" not in old
    assert config_from_yaml(LMRecipeConfig, old) == cfg
    path = tmp_path / "config.yaml"
    path.write_text(old)
    assert load_run_config(LMRecipeConfig, path) == cfg
    assert f"model.mixer is deprecated; use model.sequence_layer (config: {path})" in capsys.readouterr().err
    # the shipped ACL run as written before eval.fewshot_episodes was renamed
    from fastweights.recipes.run import load_run

    shipped = config_to_yaml(
        load_run(Path(__file__).resolve().parents[1] / "pretrained/acl-standard", ACLConfig)[0]
    )
    assert "  episodes: 1000" in shipped
    path.write_text(shipped.replace("  episodes: 1000", "  fewshot_episodes: 1000"))
    assert load_run_config(ACLConfig, path).eval.episodes == 1000


def test_lm_config_from_dict_and_preset_accept_old_names(capsys):
    cfg = LMConfig.from_dict({**OLD_LM_MODEL, "vocab_size": 256})
    assert cfg == LMConfig(**NEW_LM_MODEL)
    assert len(_warnings(capsys.readouterr().err)) == 6
    assert LMConfig.preset("micro", mixer="srwm") == LMConfig.preset("micro", sequence_layer="srwm")
    assert _warnings(capsys.readouterr().err) == [
        "fastweights: warning: mixer is deprecated; use sequence_layer (LMConfig.preset)"
    ]
    # an old name overrides the preset's field of the new name (not "both given")
    assert LMConfig.preset("micro", hidden_size=64).d_model == 64
    with pytest.raises(ValueError, match="both mixer"):
        LMConfig.preset("micro", mixer="srwm", sequence_layer="srwm")


def test_run_folder_and_export_with_old_keys_still_work(corpus, tmp_path, capsys):
    run, exp = tmp_path / "run", tmp_path / "exp"
    train = ["lm", "train", "--preset", "smoke", "--run-dir", str(run), f"data.path={corpus}"]
    assert main([*train, "train.max_steps=3"]) == 0
    config = run / "config.yaml"
    config.write_text(_old_keys(config.read_text()))
    assert "  hidden_size: 32" in config.read_text()
    capsys.readouterr()

    assert main(["lm", "eval", str(run)]) == 0
    assert f"model.hidden_size is deprecated; use model.d_model (config: {config})" in capsys.readouterr().err
    assert main([*train, "--resume", "train.max_steps=6"]) == 0
    assert "model.mixer is deprecated; use model.sequence_layer" in capsys.readouterr().err
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == 6
    assert "sequence_layer: ttt_linear" in config.read_text()  # the resumed run rewrites the new keys

    assert main(["lm", "export", str(run), str(exp)]) == 0
    cfg_json = exp / "config.json"
    cfg_json.write_text(_old_keys(cfg_json.read_text()))
    assert '"mixer": "ttt_linear"' in cfg_json.read_text()
    capsys.readouterr()
    model = CausalLM.from_pretrained(exp)
    assert model.config.sequence_layer == "ttt_linear" and model.config.d_model == 32
    assert f"mixer is deprecated; use sequence_layer (config: {cfg_json})" in capsys.readouterr().err
    assert main(["lm", "generate", str(exp), "--prompt", "and", "--max-new-tokens", "3"]) == 0


def test_compare_mixers_is_a_deprecated_alias_of_models(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(
        "fastweights.recipes.compare.compare", lambda *a, **k: calls.append(a[2]) or {"markdown": ""}
    )
    assert main(["lm", "compare", "--mixers", "srwm,deltanet", "--preset", "smoke", "model.mixer=srwm"]) == 0
    assert main(["lm", "compare", "--models", "srwm", "--preset", "smoke"]) == 0
    assert calls == [["srwm", "deltanet"], ["srwm"]]
    assert _warnings(capsys.readouterr().err) == [
        "fastweights: warning: model.mixer is deprecated; use model.sequence_layer (overrides)",
        "fastweights: warning: --mixers is deprecated; use --models",
    ]
    with pytest.raises(SystemExit):
        main(["lm", "compare", "--mixers", "srwm", "--models", "srwm"])
    assert "not allowed with" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["lm", "compare", "--help"])
    assert "--mixers" not in capsys.readouterr().out
