"""End-to-end tests of the few-shot and sequential recipes on their smoke presets."""

from __future__ import annotations

import json

import pytest
import torch

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.recipes import fewshot, sequential
from fastweights.recipes.fewshot.config import FewShotConfig
from fastweights.recipes.sequential.config import SequentialConfig

RECIPES = {
    "fewshot": (fewshot, FewShotConfig, "data"),
    "sequential": (sequential, SequentialConfig, "domain_a"),
}


def _cfg(recipe, data_cache, *overrides):
    _, cls, data = RECIPES[recipe]
    return load_config(cls, preset_path(recipe, "smoke"), [f"{data}.cache_dir={data_cache}", *overrides])


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_cli_train_then_eval_writes_run_folder(recipe, tmp_path, data_cache):
    run = tmp_path / "run"
    data = RECIPES[recipe][2]
    rc = main([recipe, "train", "--preset", "smoke", "--run-dir", str(run), f"{data}.cache_dir={data_cache}"])
    assert rc == 0
    for name in (
        "config.yaml",
        "command.txt",
        "metrics.jsonl",
        "checkpoints/latest.pt",
        "checkpoints/best.pt",
    ):
        assert (run / name).exists(), name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [3, 6]
    assert all(0.0 <= r["val_acc"] <= 1.0 and r["train_loss"] > 0 for r in records)
    assert main([recipe, "eval", str(run), "eval.episodes=6"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert (run / "report.md").exists() and (run / "report.html").exists()
    # every report plots the selection metric (val_acc) with the evaluated checkpoint starred
    assert (run / "plots" / "learning_curve.png").exists()
    assert f"(best, step {results['run']['steps']})" in (run / "report.md").read_text()
    if recipe == "fewshot":
        fs = results["fewshot"]
        assert fs["episodes"] == 6 and len(fs["run_accuracies"]) == 2 and 0 <= fs["accuracy"] <= 1
        assert (run / "plots" / "learning_curve.png").exists()
    else:
        orders = results["sequential"]["orders"]
        assert list(orders) == ["fontglyphs -> fashion_mnist", "fashion_mnist -> fontglyphs"]
        for res in orders.values():
            assert len(res["by_position"]) == 2 * 5 * 4 and len(res["per_task"]) == 2
            assert [len(occ) for occ in res["by_occurrence"]] == [4, 4]  # occurrences 1..K, as a list
        assert len(list((run / "plots").glob("occurrence_*.png"))) == 2
        # the report and the comparison table read results back from JSON (and the training log) unchanged
        (tmp_path / "again").mkdir()
        (tmp_path / "again" / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
        sequential.write_report(results, tmp_path / "again")
        assert (tmp_path / "again" / "report.md").read_text() == (run / "report.md").read_text()
        header, rows = sequential.comparison_table({"srwm": results})
        first = orders["fontglyphs -> fashion_mnist"]["by_occurrence"]
        assert rows[0][4] == f"{100 * first[0][0]:.1f} / {100 * first[1][0]:.1f}"


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_resume_continues_exactly(recipe, tmp_path, data_cache):
    module = RECIPES[recipe][0]
    module.train(_cfg(recipe, data_cache, "train.max_steps=6"), tmp_path / "one")
    module.train(_cfg(recipe, data_cache, "train.max_steps=4"), tmp_path / "two")
    cfg_path = tmp_path / "two" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("max_steps: 4", "max_steps: 6"))
    module.train(_cfg(recipe, data_cache), tmp_path / "two", resume=True)
    a = torch.load(tmp_path / "one" / "checkpoints" / "latest.pt", weights_only=False)
    b = torch.load(tmp_path / "two" / "checkpoints" / "latest.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=0, atol=0, msg=k)


def test_train_refuses_existing_run_without_resume(tmp_path, data_cache):
    fewshot.train(_cfg("fewshot", data_cache, "train.max_steps=2"), tmp_path / "run")
    with pytest.raises(FileExistsError, match="run_dir"):
        fewshot.train(_cfg("fewshot", data_cache, "train.max_steps=2"), tmp_path / "run")


def test_bad_settings_are_rejected(tmp_path, capsys, monkeypatch, data_cache):
    with pytest.raises(ValueError, match="train.n_way"):
        fewshot.train(_cfg("fewshot", data_cache, "train.n_way=6"), tmp_path / "a")
    with pytest.raises(ValueError, match="train.max_trim"):
        sequential.train(_cfg("sequential", data_cache, "train.max_trim=20"), tmp_path / "b")
    with pytest.raises(ValueError, match="data.source"):
        fewshot.train(_cfg("fewshot", data_cache, "data.source=imagenet21k"), tmp_path / "c")
    monkeypatch.delenv("FASTWEIGHTS_DATA", raising=False)
    with pytest.raises(ValueError, match=r"domain_b.root: expected the local folder holding the 'omniglot'"):
        sequential.train(_cfg("sequential", data_cache, "domain_b.source=omniglot"), tmp_path / "d")
    assert main(["fewshot", "train", "--preset", "nope"]) == 2
    assert "available presets" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_compare_trains_each_model_and_writes_one_table(recipe, tmp_path, capsys, data_cache):
    data = RECIPES[recipe][2]
    root = tmp_path / "cmp"
    args = [recipe, "compare", "--models", "srwm,lstm", "--preset", "smoke", "--run-root", str(root)]
    assert main([*args, f"{data}.cache_dir={data_cache}", "train.max_steps=3", "eval.episodes=4"]) == 0
    out = capsys.readouterr().out
    assert "| srwm |" in out and "| lstm |" in out
    table = json.loads((root / "comparison.json").read_text())
    assert [r[0] for r in table["rows"]] == ["srwm", "lstm"]
    assert table["results"]["lstm"]["run"]["sequence_layer"] == "lstm"
    assert (root / "comparison.md").exists()
    assert list(root.glob("comparison*.png"))
    with pytest.raises(ValueError, match="models"):
        from fastweights.recipes.compare import compare

        compare(recipe, preset_path(recipe, "smoke"), ["transformer"], root)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_curriculum_stages_are_used(recipe, tmp_path, data_cache):
    module = RECIPES[recipe][0]
    stage = "train.curriculum=[{until_step: 3, n_way: 2, k_shot: 2}]"
    module.train(_cfg(recipe, data_cache, stage), tmp_path / "run")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    final_shot = 1 if recipe == "fewshot" else 4
    assert [(r["n_way"], r["k_shot"]) for r in records] == [(2, 2), (5, final_shot)]
