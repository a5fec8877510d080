"""Every registered recipe satisfies the one contract; `compare` drives them all (`--models`, `--vary`)."""

from __future__ import annotations

import inspect
import json
from dataclasses import is_dataclass

import pytest

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.recipes.compare import parse_vary, variants
from fastweights.recipes.contract import (
    PRESET_FOLDERS,
    RECIPE_MEMBERS,
    RECIPES,
    Recipe,
    config_class,
    eval_command,
    get_recipe,
)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_registered_recipe_satisfies_the_contract(name):
    module = get_recipe(name)
    assert isinstance(module, Recipe)
    assert module.__all__[: len(RECIPE_MEMBERS)] == RECIPE_MEMBERS
    assert all(hasattr(module, name) for name in module.__all__)
    assert module.NAME == name and is_dataclass(module.CONFIG)
    cfg = load_config(module.CONFIG, preset_path(name, "smoke"))
    assert cfg.name == "smoke"
    key, leaf = module.MODEL_KEY.split(".")
    assert key == "model" and hasattr(cfg.model, leaf)
    for fn, keywords in (
        (module.train, {"resume", "command"}),
        (module.evaluate, {"which", "overrides", "command", "out_dir"}),
        (module.export, {"which"}),
    ):
        params = inspect.signature(fn).parameters
        assert keywords <= set(params), fn.__qualname__
    assert callable(module.build_model) and callable(module.write_report)
    # the selection rule: the best checkpoint is chosen on validation data disjoint from the test data
    data = module.SELECTION.data_for(cfg)
    assert "disjoint" in data
    assert module.SELECTION.record({"best": 1.0}, "best", cfg)["data"] == data


def test_unknown_recipe_is_named():
    with pytest.raises(ValueError, match="recipe: expected one of"):
        get_recipe("ppo")
    with pytest.raises(ValueError, match=r"recipe: expected one of \['acl', .*'cl-baselines'\], got 'ppo'"):
        config_class("ppo")


def test_every_command_with_presets_has_its_config_class():
    from fastweights.recipes.cl_baselines.config import BaselinesConfig

    assert set(PRESET_FOLDERS) == {*RECIPES, "cl-baselines"}
    assert config_class("cl-baselines") is BaselinesConfig
    for name, folder in PRESET_FOLDERS.items():
        cfg = load_config(config_class(name), preset_path(folder, "smoke"))
        assert cfg.name == "smoke"
        if name in RECIPES:
            assert config_class(name) is get_recipe(name).CONFIG


def test_eval_command_is_a_runnable_eval_line(tmp_path):
    run = tmp_path / "my run"
    assert eval_command("acl", run) == f"fastweights acl eval '{run}' --checkpoint best"
    cmd = eval_command("fewshot", run, which="latest", overrides=["eval.episodes=4"], out_dir=tmp_path / "o")
    assert (
        cmd == f"fastweights fewshot eval '{run}' --checkpoint latest --out {tmp_path / 'o'} eval.episodes=4"
    )


def test_vary_and_models_name_the_runs():
    assert parse_vary("train.acl_loss=true,false") == ("train.acl_loss", ["true", "false"])
    assert variants("model.sequence_layer", None, ("train.acl_loss", ["true", "false"])) == [
        ("acl_loss=true", "train.acl_loss=true"),
        ("acl_loss=false", "train.acl_loss=false"),
    ]
    assert variants("model.sequence_layer", ["srwm"], None) == [("srwm", "model.sequence_layer=srwm")]
    for bad in ("train.acl_loss", "=1,2", "train.lr=", "train.lr=1,1", "data.root=a/b"):
        with pytest.raises(ValueError, match="--vary"):
            parse_vary(bad)
    with pytest.raises(ValueError, match="--models or --vary"):
        variants("model.sequence_layer", ["srwm"], ("train.lr", ["1"]))
    with pytest.raises(ValueError, match="models"):
        variants("model.sequence_layer", ["transformer"], None)


_SMALL_ACL = ["train.max_steps=2", "eval.episodes=4", "eval.split_benchmarks=[digits]"]


def test_acl_compare_models_writes_one_table(tmp_path, capsys, data_cache):
    root = tmp_path / "cmp"
    args = ["acl", "compare", "--models", "srwm,lstm", "--preset", "smoke", "--run-root", str(root)]
    assert main([*args, f"data.cache_dir={data_cache}", *_SMALL_ACL]) == 0
    out = capsys.readouterr().out
    assert "| srwm |" in out and "| lstm |" in out and "A after A→B" in out
    table = json.loads((root / "comparison.json").read_text())
    assert [r[0] for r in table["rows"]] == ["srwm", "lstm"]
    lstm = table["results"]["lstm"]["run"]
    assert lstm["sequence_layer"] == "lstm"
    assert lstm["eval_command"].startswith(f"fastweights acl eval {root / 'lstm'} --checkpoint best")
    assert (root / "comparison.md").exists() and (root / "comparison.png").stat().st_size > 0


def test_compare_vary_runs_the_acl_ablation(tmp_path, capsys, data_cache):
    root = tmp_path / "ablation"
    args = [
        "acl",
        "compare",
        "--vary",
        "train.acl_loss=true,false",
        "--preset",
        "smoke",
        "--run-root",
        str(root),
    ]
    assert main([*args, f"data.cache_dir={data_cache}", *_SMALL_ACL]) == 0
    table = json.loads((root / "comparison.json").read_text())
    assert [r[0] for r in table["rows"]] == ["acl_loss=true", "acl_loss=false"]
    assert [table["results"][k]["run"]["acl_loss"] for k in ("acl_loss=true", "acl_loss=false")] == [
        True,
        False,
    ]
    assert "acl_loss: false" in (root / "acl_loss=false" / "config.yaml").read_text()
    capsys.readouterr()
    assert main([*args[:3], "train.nope=1,2", "--preset", "smoke", "--run-root", str(tmp_path / "x")]) == 2
    assert "train.nope" in capsys.readouterr().err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_has_train_precision(name):
    from fastweights.train.loop import LoopConfig

    module = get_recipe(name)
    cfg = load_config(module.CONFIG, preset_path(name, "smoke"), ["train.precision=bf16"])
    assert isinstance(cfg.train, LoopConfig) and cfg.train.precision == "bf16"
    assert load_config(module.CONFIG, preset_path(name, "smoke")).train.precision == "fp32"
    with pytest.raises(ValueError, match="precision") as err:
        load_config(module.CONFIG, preset_path(name, "smoke"), ["train.precision=fp16"])
    assert "fp16" in str(err.value) and "bf16" in str(err.value)


@pytest.mark.parametrize("name", ["fewshot", "lm", "rl"])
def test_a_bf16_smoke_run_trains(tmp_path, name, data_cache):
    import json

    from fastweights.cli import main

    data = [] if name == "rl" else [f"data.cache_dir={data_cache}"]
    run = tmp_path / "run"
    args = [name, "train", "--preset", "smoke", "--run-dir", str(run), *data, "train.precision=bf16"]
    assert main([*args, "train.threads=1"]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records and all(r["train_loss"] == r["train_loss"] for r in records)  # finite, not NaN
