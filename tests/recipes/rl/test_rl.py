"""The rl recipe on its smoke preset: train + eval outputs, compare over cores, bad inputs."""

from __future__ import annotations

import json

import pytest

from fastweights.cli import main
from fastweights.recipes import rl


def _train(run, *extra):
    return main(["rl", "train", "--preset", "smoke", "--run-dir", str(run), "train.threads=1", *extra])


def test_train_and_eval_write_the_results_report_and_curves(tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(run, "--eval") == 0
    res = json.loads((run / "results.json").read_text())
    r = res["rl"]
    assert res["run"]["core"] == "srwm"  # the config's key, model.core
    assert res["run"]["sequence_layer"] == "srwm"  # the name every recipe's run section shares
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    best = max(r["val_score"] for r in logged if "val_score" in r)
    assert res["run"]["selected_on"] == {
        "metric": "val_score",
        "mode": "max",
        "value": best,
        "data": rl.SELECTION.data,
    }
    assert r["games"] == ["MiniGrid-Empty-Random-5x5-v0", "MiniGrid-LavaGapS5-v0"]
    assert [s["levels"] for s in r["test_splits"]] == [
        {"start": 1000, "count": 8},
        {"start": 1100, "count": 8},
    ]
    for split in r["test_splits"]:
        assert all(g["episodes"] == 4 for g in split["games"].values())
        assert all(0.0 <= g["normalised"] <= 1.0 for g in split["games"].values())
    assert r["frames"] == res["run"]["steps"] * 8 * 4
    assert (run / "plots" / "returns.png").exists() and (run / "tensorboard").is_dir()
    assert (run / "plots" / "learning_curve.png").exists() and (run / "report.html").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [rec["frames"] for rec in records] == [96, 192]
    assert all("val_score" in rec and "val_return/MiniGrid-LavaGapS5-v0" in rec for rec in records)
    assert "normalised score" in capsys.readouterr().out
    report = (run / "report.md").read_text()
    assert "test 1000–1007" in report and "(0.0, 1.0)" in report
    rand = r["random_policy"]  # uniform actions on the first split: the reference of the table
    assert rand["levels"] == {"start": 1000, "count": 8}
    assert all(g["episodes"] == 4 for g in rand["games"].values())
    assert "Random policy (uniform actions) on levels 1000–1007" in report
    assert report.startswith("# RL report: smoke (srwm)")
    assert "the highest `val_score` in the log" in report  # the curve of the selection metric
    # results.json written before run.core existed (only run.sequence_layer) still gives the report
    old = {**res, "run": {k: v for k, v in res["run"].items() if k != "core"}}
    (tmp_path / "old").mkdir()
    assert rl.write_report(old, tmp_path / "old").read_text().startswith("# RL report: smoke (srwm)")


def test_compare_over_cores_writes_the_table(tmp_path, capsys):
    root = tmp_path / "cmp"
    args = ["rl", "compare", "--models", "ff,fake_srwm", "--preset", "smoke", "--run-root", str(root)]
    assert main([*args, "train.threads=1", "train.max_steps=3", "eval.splits=[{start: 1000, count: 4}]"]) == 0
    table = (root / "comparison.md").read_text()
    assert "| ff |" in table and "| fake_srwm |" in table and "test levels" in table
    assert "| random policy (levels 1000–1003) | — |" in table
    assert (root / "comparison.png").exists()


def _has_procgen() -> bool:
    from fastweights.rl.procgen import import_procgen

    try:
        import_procgen()
    except ImportError:
        return False
    return True


@pytest.mark.skipif(_has_procgen(), reason="checks the error when procgen2 is absent")
def test_procgen_without_the_extra_is_a_one_line_error_before_the_run_folder(tmp_path, capsys):
    run = tmp_path / "pg"
    assert main(["rl", "train", "--preset", "smoke-procgen", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "procgen2" in err and ".[rl]" in err and len(err.splitlines()) == 1, err
    assert not run.exists()


@pytest.mark.skipif(not _has_procgen(), reason="procgen2 (the optional extra .[rl]) is not installed")
def test_procgen_smoke_trains_and_evaluates_with_the_impala_encoder(tmp_path):
    run = tmp_path / "pg"
    assert main(["rl", "train", "--preset", "smoke-procgen", "--run-dir", str(run), "--eval"]) == 0
    r = json.loads((run / "results.json").read_text())["rl"]
    assert r["suite"] == "procgen" and r["games"] == ["maze", "leaper"]
    assert r["normalisation"] == {"maze": [5.0, 10.0], "leaper": [3.0, 10.0]}
    assert r["frames"] == 4 * 8 * 4
    assert all(g["episodes"] == 2 for s in r["test_splits"] for g in s["games"].values())
    state = __import__("torch").load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert any(k.startswith("encoder.stages") for k in state["model"])  # the IMPALA-CNN


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("model.core=gru", r"model\.core: expected one of"),
        ("env.games=[MiniGrid-Nope-v0]", r"games: expected MiniGrid ids"),
        ("env.num_envs=1", r"env\.num_envs: expected an int >= 2"),
        ("env.val_levels.start=10", r"env\.val_levels: expected levels disjoint"),
        (
            "eval.splits=[{start: 2010, count: 5}]",
            r"eval\.splits: expected level ranges disjoint from env\.val_levels",
        ),
        ("eval.splits=[{start: 0, count: 5}]", r"eval\.splits: expected level ranges disjoint"),
        ("train.reward_clip=tanh", r"train\.reward_clip: expected one of"),
        ("train.unroll=0", r"train\.unroll"),
        ("eval.episodes=3", r"eval\.episodes: expected a multiple of envs_per_game=2"),
        ("env.suite=atari", r"env\.suite: expected one of"),
        ("env.suite=procgen", r"env\.games: expected ProcGen games of .*got unknown \['MiniGrid-"),
        ("env.distribution_mode=extreme", r"env\.distribution_mode: expected one of"),
        (("env.suite=procgen", "env.games=[maze]", "model.encoder=minigrid"), r"model\.encoder: expected"),
        ("model.lstm_size=-1", r"model\.lstm_size"),
        ("eval.random_policy=maybe", r"eval\.random_policy"),
    ],
)
def test_bad_config_values_are_one_line_errors(tmp_path, capsys, override, pattern):
    import re

    assert _train(tmp_path / "bad", *([override] if isinstance(override, str) else override)) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(pattern, err), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "bad").exists()


def test_paper_preset_is_the_papers_protocol_and_agent():
    from fastweights.config import load_config, preset_path
    from fastweights.recipes.rl.config import RLConfig

    cfg = load_config(RLConfig, preset_path("rl", "paper"))
    assert cfg.env.suite == "procgen" and cfg.env.distribution_mode == "easy"
    assert cfg.env.games == ["bigfish", "fruitbot", "maze", "leaper", "plunder", "starpilot"]
    assert (cfg.env.train_levels.start, cfg.env.train_levels.count) == (0, 200)
    assert cfg.train.max_steps * cfg.train.unroll * cfg.env.num_envs == 300_000_000
    assert (cfg.train.unroll, cfg.env.num_envs, cfg.train.reward_clip) == (50, 32, "sign")
    assert [(s.start, s.count) for s in cfg.eval.splits] == [(1000, 200), (1200, 200), (1400, 200)]
    assert cfg.eval.episodes == 200
    for core, width in (("srwm", 128), ("lstm", 256), ("deltanet", 128)):
        cfg.model.core = core
        agent = rl.build_model(cfg)  # builds without procgen2: the suite table gives shapes and actions
        assert agent.encoder.fc.out_features == 256 and agent.core.out_dim == width
        assert agent.core.proj.in_features == 257  # features + the previous reward
        assert len(agent.core.layers) == (1 if core == "lstm" else 2)
    assert agent.policy.out_features == 15
