"""End-to-end tests of the ACL recipe on the smoke preset (tiny glyph set, tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.recipes import acl
from fastweights.recipes.acl.config import ACLConfig


def _cfg(data_cache, *overrides):
    return load_config(ACLConfig, preset_path("acl", "smoke"), [f"data.cache_dir={data_cache}", *overrides])


def test_cli_train_then_eval_writes_run_folder(tmp_path, data_cache):
    run = tmp_path / "run"
    rc = main(["acl", "train", "--preset", "smoke", "--run-dir", str(run), f"data.cache_dir={data_cache}"])
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
    assert main(["acl", "eval", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert 0.0 <= results["fewshot"]["accuracy"] <= 1.0 and results["fewshot"]["episodes"] == 10
    assert set(results["forgetting"]["table"]) == {"A|A", "B|A->B", "A|A->B", "B|B", "A|B->A", "B|B->A"}
    for key in ("Split-Digits/domain", "Split-FashionMNIST/domain"):
        res = results["split"][key]
        assert len(res["R"]) == 5 and res["chance"] == 0.5 and 0.0 <= res["ACC"]["mean"] <= 1.0
    assert (run / "report.md").exists() and any((run / "plots").glob("*.png"))


def test_train_refuses_existing_run_without_resume(tmp_path, data_cache):
    cfg = _cfg(data_cache, "train.max_steps=2")
    acl.train(cfg, tmp_path / "run")
    with pytest.raises(FileExistsError, match="--resume"):
        acl.train(cfg, tmp_path / "run")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_continues_exactly(tmp_path, data_cache, precision):
    """4 steps + resume to 6 steps gives the same weights as 6 uninterrupted steps (with the bf16
    backbone too, on a CPU that has native bf16; elsewhere that run is float32)."""
    backbone = f"train.backbone_precision={precision}"
    acl.train(_cfg(data_cache, "train.max_steps=6", "train.synthetic_steps=2", backbone), tmp_path / "one")
    acl.train(_cfg(data_cache, "train.max_steps=4", "train.synthetic_steps=2", backbone), tmp_path / "two")
    # the resumed run reads its saved config; raise its step budget the way a user would
    cfg_path = tmp_path / "two" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("max_steps: 4", "max_steps: 6"))
    acl.train(_cfg(data_cache), tmp_path / "two", resume=True)
    a = torch.load(tmp_path / "one" / "checkpoints" / "latest.pt", weights_only=False)
    b = torch.load(tmp_path / "two" / "checkpoints" / "latest.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=0, atol=0, msg=k)


@pytest.mark.parametrize(
    "flag",
    [
        "train.acl_loss=false",
        "train.first_shot_loss=true",
        "train.first_shot_loss=true train.synthetic_steps=1",  # synthetic tasks carry first-shot demos
        "train.online_weight=0.5",
        "train.augment.low_res=0.5",
    ],
)
def test_loss_variants_train(tmp_path, flag, data_cache):
    summary = acl.train(_cfg(data_cache, "train.max_steps=2", *flag.split()), tmp_path / "run")
    assert summary["step"] == 2 and 0.0 <= summary["val_acc"] <= 1.0


def test_curriculum_stages_are_used(tmp_path, data_cache):
    acl.train(
        _cfg(
            data_cache,
            "train.max_steps=3",
            "train.val_every_steps=1",
            "train.curriculum=[{until_step: 2, n_way: 2, k_shot: 1}]",
        ),
        tmp_path / "run",
    )
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["n_way"], r["k_shot"]) for r in records] == [(2, 1), (2, 1), (5, 5)]


def test_cli_reports_bad_preset_and_override(tmp_path, capsys):
    assert main(["acl", "train", "--preset", "nope", "--run-dir", str(tmp_path / "r")]) == 2
    assert "available presets" in capsys.readouterr().err
    assert main(["acl", "train", "--preset", "smoke", "--run-dir", str(tmp_path / "r"), "train.nope=1"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["acl", "eval", str(tmp_path / "missing")]) == 2
    assert "config.yaml" in capsys.readouterr().err


FIVE_TWO_WAY = (
    "train.num_tasks=5",
    "train.n_way=2",
    "train.label_space=2",
    "train.max_steps=1",
    "train.lr=0.0",
)


def test_meta_finetune_five_two_way_tasks_from_checkpoint(tmp_path, data_cache):
    acl.train(_cfg(data_cache, "train.max_steps=2"), tmp_path / "base")
    ckpt = tmp_path / "base" / "checkpoints" / "latest.pt"
    cfg = _cfg(data_cache, f"train.init_from={ckpt}", *FIVE_TWO_WAY)
    acl.train(cfg, tmp_path / "ft")
    base = torch.load(ckpt, weights_only=False)
    ft = torch.load(tmp_path / "ft" / "checkpoints" / "latest.pt", weights_only=False)
    for k, v in base["model"].items():  # lr 0: the finetuned weights are exactly the loaded ones
        torch.testing.assert_close(ft["model"][k], v, rtol=0, atol=0, msg=k)
    # the budget behind the start checkpoint, recorded when the run starts: the base run's 2 steps
    assert (base["records"]["init_steps"], ft["records"]["init_steps"]) == (0, 2)
    with (tmp_path / "base" / "metrics.jsonl").open("a") as log:  # the base run trains on afterwards
        log.write(json.dumps({"step": 50}) + "\n")
    cfg_path = tmp_path / "ft" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("max_steps: 1", "max_steps: 2"))
    acl.train(cfg, tmp_path / "ft", resume=True)  # the recorded value survives the resume
    ft = torch.load(tmp_path / "ft" / "checkpoints" / "latest.pt", weights_only=False)
    assert (ft["step"], ft["records"]["init_steps"]) == (2, 2)
    # a chain: a run started from ft counts ft's 2 steps + the 2 ft recorded, not base's later steps;
    # so does one started from ft's exported copy (the export keeps the record)
    assert main(["acl", "export", str(tmp_path / "ft"), str(tmp_path / "shipped")]) == 0
    for start in ("ft", "shipped"):
        start_ckpt = tmp_path / start / "checkpoints" / "best.pt"
        cfg = _cfg(data_cache, f"train.init_from={start_ckpt}", *FIVE_TWO_WAY)
        acl.train(cfg, tmp_path / f"from-{start}")
        again = torch.load(tmp_path / f"from-{start}" / "checkpoints" / "latest.pt", weights_only=False)
        assert again["records"]["init_steps"] == 4, start


def test_an_unknown_upstream_budget_is_not_recorded_and_training_goes_on(tmp_path, data_cache, caplog):
    acl.train(_cfg(data_cache, "train.max_steps=1"), tmp_path / "base")
    ckpt = tmp_path / "elsewhere.pt"  # a checkpoint outside any run folder: no log to count
    ckpt.write_bytes((tmp_path / "base" / "checkpoints" / "latest.pt").read_bytes())
    with caplog.at_level("WARNING", logger="fastweights.recipes.acl"):
        acl.train(_cfg(data_cache, f"train.init_from={ckpt}", "train.max_steps=1"), tmp_path / "ft")
    assert "steps behind train.init_from are unknown" in caplog.text
    assert (
        torch.load(tmp_path / "ft" / "checkpoints" / "latest.pt", weights_only=False)["records"]["init_steps"]
        is None
    )


def test_n_way_larger_than_model_outputs_is_rejected(tmp_path, data_cache):
    with pytest.raises(ValueError, match="model.num_classes"):
        acl.train(_cfg(data_cache, "train.n_way=6"), tmp_path / "run")


def test_export_then_eval_into_another_folder(tmp_path, data_cache):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    acl.train(_cfg(data_cache, "train.max_steps=2"), run)
    assert main(["acl", "export", str(run), str(tmp_path / "shipped")]) == 0
    shipped = tmp_path / "shipped"
    assert sorted(p.name for p in shipped.iterdir()) == [  # acl.train(...) records no command.txt
        "README.md",
        "config.json",
        "metrics.jsonl",
        "model.safetensors",
    ]
    weights = load_file(shipped / "model.safetensors")
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert weights.keys() == best["model"].keys()
    assert all(torch.equal(weights[k], best["model"][k]) for k in weights)
    info = json.loads((shipped / "config.json").read_text())
    assert info["format"] == "fastweights-export" and info["recipe"] == "acl"
    assert info["records"] == {"init_steps": 0}  # no train.init_from: nothing behind its start
    assert info["checkpoint"]["step"] == best["step"] and info["config"]["name"] == "smoke"
    assert info["selected_on"]["metric"] == "val_objective"
    card = (shipped / "README.md").read_text()
    for fact in ("preset | `smoke`", "training seed", "val_objective", "Meta-training data", "Intended use"):
        assert fact in card, fact
    assert "Not evaluated at export time" in card  # the run had no results.json
    out = tmp_path / "out"
    args = ["acl", "eval", str(shipped), "--out", str(out), "eval.split_benchmarks=[digits]"]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["split"]) == ["Split-Digits/domain"] and (out / "report.md").exists()
    assert results["run"]["selected_on"]["value"] == info["selected_on"]["value"]
    assert results["run"]["init_steps"] == 0
    assert not (shipped / "results.json").exists()
    # the export evaluates as the run it came from (same weights, same seeded draws)
    assert (
        main(["acl", "eval", str(run), "--out", str(tmp_path / "direct"), "eval.split_benchmarks=[digits]"])
        == 0
    )
    direct = json.loads((tmp_path / "direct" / "results.json").read_text())
    assert direct["split"] == results["split"] and direct["fewshot"] == results["fewshot"]
    # an export holds one model: --checkpoint latest is a one-line error
    assert main(["acl", "eval", str(shipped), "--checkpoint", "latest", "--out", str(tmp_path / "l")]) == 2


def test_an_evaluated_run_exports_its_evaluation_into_the_card(tmp_path, data_cache):
    run = tmp_path / "run"
    acl.train(_cfg(data_cache, "train.max_steps=2"), run)
    acl.evaluate(run, overrides=["eval.split_benchmarks=[digits]"])
    acl.export(run, tmp_path / "shipped")
    card = (tmp_path / "shipped" / "README.md").read_text()
    results = json.loads((run / "results.json").read_text())
    acc = 100 * results["split"]["Split-Digits/domain"]["ACC"]["mean"]
    assert f"| Split-Digits/domain ACC (%) | {acc:.2f}" in card and results["run"]["eval_command"] in card


def test_curves_plot_several_runs(tmp_path, data_cache):
    for name in ("a", "b"):
        acl.train(_cfg(data_cache, "train.max_steps=2", "train.val_every_steps=1"), tmp_path / name)
    out = tmp_path / "curves.png"
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert main(["acl", "curves", *runs, "--out", str(out), "--labels", "x,y"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["acl", "curves", str(tmp_path / "a"), "--out", str(out), "--labels", "x,y"]) == 2


SHIPPED = Path(__file__).resolve().parents[3] / "pretrained"
SMALL_DATA = [
    "data.max_scripts=10",
    "data.max_classes_per_script=10",
    "data.examples_per_class=8",
    "eval.episodes=20",
    "eval.split_runs=1",
    "eval.split_benchmarks=[digits]",
    "eval.long_span_tasks=[]",
    "device=cpu",
]


def _shipped(name: str) -> Path:
    folder = SHIPPED / name
    if not (folder / "model.safetensors").exists():
        pytest.skip(f"no shipped checkpoint {name} in this checkout")
    return folder


def test_shipped_standard_checkpoint_loads_and_evaluates(tmp_path, data_cache):
    """The checkpoint in pretrained/ must stay loadable by the current model code (small data/eval)."""
    overrides = [f"data.cache_dir={data_cache}", *SMALL_DATA]
    results = acl.evaluate(_shipped("acl-standard"), overrides=overrides, out_dir=tmp_path / "out")
    assert results["run"]["preset"] == "standard" and results["run"]["steps"] > 1000
    # a trained model: far above chance (20%) on held-out 5-way 5-shot glyph tasks
    assert results["fewshot"]["accuracy"] > 0.6


TWO_DOMAINS = ["FontGlyphs", "EmojiImages"]


@pytest.mark.parametrize(
    ("name", "key", "floor", "sources"),
    [
        ("acl-cross", "Split-Digits/domain", 0.6, TWO_DOMAINS),  # 2-task cross-domain model; chance 50%
        ("acl-cross-noacl", "Split-Digits/domain", 0.6, TWO_DOMAINS),  # its no-ACL twin (same steps, seed)
        ("acl-5task-domain", "Split-Digits/domain", 0.7, TWO_DOMAINS),  # chance 50%
        ("acl-5task-class", "Split-Digits/class", 0.3, TWO_DOMAINS),  # 5-task class-incr.; chance 10%
    ],
)
@pytest.mark.slow
def test_shipped_cross_domain_checkpoints_load_and_evaluate(tmp_path, name, key, floor, sources, data_cache):
    """The shipped cross-domain models load and are far above chance on Split-Digits (1 demo draw)."""
    overrides = [f"data.cache_dir={data_cache}", *SMALL_DATA, "eval.scenarios=[domain,class]"]
    results = acl.evaluate(_shipped(name), overrides=overrides, out_dir=tmp_path / "out")
    assert results["run"]["sources"] == sources
    assert results["split"][key]["ACC"]["mean"] > floor
    # results.json says which validation metric chose the shipped checkpoint: the logged value there
    logged = [json.loads(line) for line in (_shipped(name) / "metrics.jsonl").read_text().splitlines()]
    at_step = next(r for r in logged if r["step"] == results["run"]["steps"] and "val_objective" in r)
    selected = results["run"]["selected_on"]
    assert selected["metric"] == "val_objective" and selected["mode"] == "max"
    assert selected["value"] == pytest.approx(at_step["val_objective"], abs=1e-12)


CROSS = ["data.sources=[fontglyphs,emoji]", "data.channels=3"]


def test_cross_domain_train_and_paper_tables(tmp_path, data_cache):
    """Two domains (grayscale FontGlyphs repeated to RGB + EmojiImages): training alternates the domain
    order, validation covers both orders, and the evaluation has every domain pair, the split table
    (domain, 2-task class) with Split-Emoji and the long-span tasks."""
    run = tmp_path / "run"
    cfg = _cfg(data_cache, *CROSS, "train.max_steps=2", "train.val_every_steps=2", "train.val_episodes=4")
    acl.train(cfg, run)
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"val_A|A", "val_B|A->B", "val_A|A->B", "val_B|B", "val_A|B->A", "val_B|B->A"} <= set(record)
    overrides = [
        "eval.split_benchmarks=[digits,emoji]",
        "eval.scenarios=[domain,class]",
        "eval.long_span_tasks=[2,3]",
        "eval.split_query_per_class=3",
    ]
    results = acl.evaluate(run, overrides=overrides)
    pairs = [(p["task_a"], p["task_b"]) for p in results["forgetting"]["pairs"]]
    assert pairs == [
        ("FontGlyphs", "FontGlyphs"),
        ("EmojiImages", "EmojiImages"),
        ("FontGlyphs", "EmojiImages"),
    ]
    assert results["run"]["sources"] == ["FontGlyphs", "EmojiImages"]
    assert set(results["fewshot"]["domains"]) == {"FontGlyphs", "EmojiImages"}
    assert set(results["split"]) == {
        "Split-Digits/domain",
        "Split-Digits/class-2task",
        "Split-Emoji/domain",
        "Split-Emoji/class-2task",
    }
    assert len(results["split"]["Split-Emoji/domain"]["R"]) == 5
    assert len(results["split"]["Split-Emoji/class-2task"]["R"]) == 2
    assert sorted(results["long_span"]["tasks"]) == ["2", "3"]
    assert len(results["long_span"]["tasks"]["3"]["R"]) == 3
    report = (run / "report.md").read_text()
    for text in ("FontGlyphs → EmojiImages", "EmojiImages → FontGlyphs", "5-task domain-incremental"):
        assert text in report


@pytest.mark.slow
def test_class_incremental_meta_finetuning_from_a_five_way_run(tmp_path, data_cache):
    """5 two-way tasks with labels shifted by 2 per task on a 10-output model, initialised from a 5-way
    2-task run: the shared weights are loaded, validation scores 5-task sequences."""
    acl.train(_cfg(data_cache, *CROSS, "train.max_steps=1"), tmp_path / "base")
    ckpt = tmp_path / "base" / "checkpoints" / "latest.pt"
    cfg = _cfg(
        data_cache,
        *CROSS,
        f"train.init_from={ckpt}",
        "model.num_classes=10",
        "train.scenario=class",
        "train.num_tasks=5",
        "train.n_way=2",
        "train.max_steps=2",
        "train.val_every_steps=2",
        "train.val_episodes=4",
        "train.lr=0.0",
        "eval.n_way=2",
    )
    acl.train(cfg, tmp_path / "ft")
    base = torch.load(ckpt, weights_only=False)["model"]
    ft = torch.load(tmp_path / "ft" / "checkpoints" / "latest.pt", weights_only=False)["model"]
    torch.testing.assert_close(ft["out_layer.weight"][:5], base["out_layer.weight"], rtol=0, atol=0)
    torch.testing.assert_close(
        ft["input_proj.weight"][:, -1], base["input_proj.weight"][:, -1], rtol=0, atol=0
    )
    record = json.loads((tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {f"val_task{j}|all" for j in range(1, 6)} <= set(record) and "train_4|0" in record
    results = acl.evaluate(
        tmp_path / "ft", overrides=["eval.split_benchmarks=[digits]", "eval.scenarios=[domain,class]"]
    )
    assert set(results["split"]) == {"Split-Digits/domain", "Split-Digits/class-2task", "Split-Digits/class"}
    assert len(results["split"]["Split-Digits/class"]["R"]) == 5
    assert results["run"]["stage"] == "5-task meta-finetuning (class-incremental)"
    assert results["run"]["init_steps"] == 1  # the base run's step, recorded at the start of training


def test_init_from_with_other_image_channels_is_refused_before_the_run_folder(tmp_path, data_cache):
    acl.train(_cfg(data_cache, "train.max_steps=1"), tmp_path / "gray")
    ckpt = tmp_path / "gray" / "checkpoints" / "latest.pt"
    with pytest.raises(ValueError, match="train.init_from"):
        acl.train(_cfg(data_cache, *CROSS, f"train.init_from={ckpt}"), tmp_path / "rgb")
    assert not (tmp_path / "rgb").exists()


def test_train_with_a_bf16_backbone_says_which_path_runs(tmp_path, data_cache, caplog):
    from fastweights.train.precision import native_bf16

    with caplog.at_level("INFO", logger="fastweights.recipes.classifier"):
        rc = main(
            [
                "acl",
                "train",
                "--preset",
                "smoke",
                "--run-dir",
                str(tmp_path / "r"),
                f"data.cache_dir={data_cache}",
            ]
            + ["train.max_steps=3", "train.synthetic_steps=1", "train.backbone_precision=bf16"]
        )
    assert rc == 0
    native, _ = native_bf16(torch.device("cpu"))
    words = "training steps run in bfloat16" if native else "the backbone runs in float32"
    assert words in caplog.text
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert records and all(torch.isfinite(torch.tensor(r["train_loss"])) for r in records)


def test_context_replay_trains_validates_and_is_recorded(tmp_path, data_cache):
    """Meta-training with in-context replay (train.context_replay_per_class=5, mixed) runs, and an
    evaluation-only arm (eval.context_replay_order=before) is recorded in results.json."""
    run = tmp_path / "run"
    # 4-way tasks: the smoke pools' 9 meta-validation classes hold two disjoint ones
    overrides = ["train.max_steps=2", "train.val_every_steps=2", "train.val_episodes=2", "train.n_way=4"]
    summary = acl.train(_cfg(data_cache, *overrides, "train.context_replay_per_class=5"), run)
    assert summary["step"] == 2 and 0.0 <= summary["val_acc"] <= 1.0
    evaluation = [
        "eval.context_replay_order=before",
        "eval.episodes=2",
        "eval.n_way=4",
        "eval.split_benchmarks=[digits]",
    ]
    results = acl.evaluate(run, overrides=evaluation)
    assert results["run"]["context_replay"] == {
        "train": {"per_class": 5, "order": "mixed"},
        "eval": {"per_class": 5, "order": "before"},
    }
    assert results["forgetting"]["context_replay"] == {"per_class": 5, "order": "before"}
    assert results["split"]["Split-Digits/domain"]["context_replay"] == {"per_class": 5, "order": "before"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.context_replay_per_class=-1", "train.context_replay_per_class: expected an int >= 0, got -1"),
        ("train.context_replay_order=after", "train.context_replay_order: expected one of"),
        ("eval.context_replay_per_class=-1", "eval.context_replay_per_class: expected an int >= 0, got -1"),
        ("eval.context_replay_order=after", "eval.context_replay_order: expected one of"),
    ],
)
def test_context_replay_keys_are_checked_in_one_line(data_cache, override, message):
    with pytest.raises(ValueError, match=message) as err:
        _cfg(data_cache, override)
    assert "\n" not in str(err.value)
